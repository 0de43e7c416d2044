//! Binding: one browser ↔ one client ↔ one authorization. Set on approval, right before the
//! redirect to GitHub (never earlier), and checked at the GitHub callback. Its MAC covers a
//! fixed purpose tag, the flow's purpose, the client id, the flow (transaction) id and the
//! expiry, under a key used for nothing else, so a value signed for one client, flow or
//! purpose never verifies as another.

use crate::clock::UnixTime;
use crate::cookies;
use crate::crypto::{self, Key};

const TAG: &[u8] = b"mcp-oauth-proxy/flow-cookie/v1";
/// Lifetime of the cookie, equal to the upstream state's.
pub const TTL_SECS: u64 = 600;

/// What the cookie is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowBinding<'a> {
    /// "authorize" or "sign-in".
    pub purpose: &'a str,
    /// The MCP client, or "" for a plain sign-in.
    pub client_id: &'a str,
    /// The transaction or sign-in flow id.
    pub flow_id: &'a str,
}

fn mac(key: &Key, b: &FlowBinding<'_>, exp: UnixTime) -> [u8; 32] {
    key.mac(&[
        TAG,
        b.purpose.as_bytes(),
        b.client_id.as_bytes(),
        b.flow_id.as_bytes(),
        &exp.0.to_be_bytes(),
    ])
}

/// The `Set-Cookie` header value for a binding.
pub fn issue(key: &Key, b: &FlowBinding<'_>, now: UnixTime) -> String {
    let exp = now.plus(TTL_SECS);
    let value = format!("{}.{}", exp.0, crypto::b64url(&mac(key, b, exp)));
    cookies::set(cookies::FLOW_COOKIE, &value, TTL_SECS)
}

/// Why a cookie did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieError {
    /// No cookie.
    Missing,
    /// Malformed, tampered, or signed for another client/flow/purpose.
    Invalid,
    /// Past its expiry.
    Expired,
}

/// Checks a cookie value against the binding the server stored.
pub fn verify(
    key: &Key,
    value: Option<&str>,
    b: &FlowBinding<'_>,
    now: UnixTime,
) -> Result<(), CookieError> {
    let v = value.ok_or(CookieError::Missing)?;
    let (exp, tag) = v.split_once('.').ok_or(CookieError::Invalid)?;
    let exp = UnixTime(exp.parse::<u64>().map_err(|_| CookieError::Invalid)?);
    let tag = crypto::b64url_decode(tag).ok_or(CookieError::Invalid)?;
    if !crypto::ct_eq(&mac(key, b, exp), &tag) {
        return Err(CookieError::Invalid);
    }
    if exp <= now {
        return Err(CookieError::Expired);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(set_cookie: &str) -> String {
        set_cookie
            .split(';')
            .next()
            .unwrap()
            .split_once('=')
            .unwrap()
            .1
            .to_owned()
    }

    const A: FlowBinding<'static> = FlowBinding {
        purpose: "authorize",
        client_id: "client-a",
        flow_id: "txn1",
    };

    #[test]
    fn round_trip() {
        let k = Key::generate().unwrap();
        let v = value(&issue(&k, &A, UnixTime(100)));
        assert_eq!(verify(&k, Some(&v), &A, UnixTime(101)), Ok(()));
    }

    #[test]
    fn cookie_for_client_a_rejected_for_b() {
        let k = Key::generate().unwrap();
        let v = value(&issue(&k, &A, UnixTime(100)));
        let b = FlowBinding {
            client_id: "client-b",
            ..A
        };
        assert_eq!(
            verify(&k, Some(&v), &b, UnixTime(101)),
            Err(CookieError::Invalid)
        );
        let other_flow = FlowBinding {
            flow_id: "txn2",
            ..A
        };
        assert_eq!(
            verify(&k, Some(&v), &other_flow, UnixTime(101)),
            Err(CookieError::Invalid)
        );
        let other_purpose = FlowBinding {
            purpose: "sign-in",
            ..A
        };
        assert_eq!(
            verify(&k, Some(&v), &other_purpose, UnixTime(101)),
            Err(CookieError::Invalid)
        );
    }

    #[test]
    fn tampered_value_rejected() {
        let k = Key::generate().unwrap();
        let v = value(&issue(&k, &A, UnixTime(100)));
        let (exp, tag) = v.split_once('.').unwrap();
        let later = format!("{}.{tag}", exp.parse::<u64>().unwrap() + 10_000);
        assert_eq!(
            verify(&k, Some(&later), &A, UnixTime(101)),
            Err(CookieError::Invalid)
        );
        assert_eq!(
            verify(&k, Some("garbage"), &A, UnixTime(101)),
            Err(CookieError::Invalid)
        );
        let other_key = Key::generate().unwrap();
        assert_eq!(
            verify(&other_key, Some(&v), &A, UnixTime(101)),
            Err(CookieError::Invalid)
        );
    }

    #[test]
    fn expired_cookie_rejected() {
        let k = Key::generate().unwrap();
        let v = value(&issue(&k, &A, UnixTime(100)));
        assert_eq!(
            verify(&k, Some(&v), &A, UnixTime(100 + TTL_SECS)),
            Err(CookieError::Expired)
        );
    }

    #[test]
    fn missing_binding_cookie_rejected() {
        let k = Key::generate().unwrap();
        assert_eq!(verify(&k, None, &A, UnixTime(1)), Err(CookieError::Missing));
    }
}
