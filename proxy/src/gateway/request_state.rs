//! The `requestState` the gateway mints when it answers a 2026-07-28 `tools/call` with
//! `input_required`: integrity-protected (HMAC under its own key), bound to the person, the
//! client, the method and a digest of the call's parameters, and short-lived. Possession
//! proves nothing: the retry must come with the same person's and client's token.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::UnixTime;
use crate::crypto::{self, Key};
use crate::ids::{ClientId, UserId};

/// Prefix that tells the gateway's own states from a backend's.
pub const PREFIX: &str = "mop1.";
/// Lifetime.
pub const TTL_SECS: u64 = 600;

#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct Claims {
    u: String,
    c: String,
    m: String,
    d: String,
    e: u64,
}

/// Digest of a call's parameters, ignoring `requestState`, `inputResponses` and `_meta`
/// (which legitimately change on the retry: 2026-07-28 clients retry with the answers to the
/// input requests and the echoed state, on a fresh `_meta` envelope).
pub fn params_digest(params: Option<&Value>) -> String {
    let mut p = params.cloned().unwrap_or(Value::Null);
    if let Some(o) = p.as_object_mut() {
        o.remove("requestState");
        o.remove("inputResponses");
        o.remove("_meta");
    }
    crypto::b64url(&crypto::sha256(p.to_string().as_bytes()))
}

/// Mints a state.
pub fn mint(
    key: &Key,
    user: &UserId,
    client: &ClientId,
    method: &str,
    digest: &str,
    now: UnixTime,
) -> String {
    let claims = Claims {
        u: user.as_str().to_owned(),
        c: client.as_str().to_owned(),
        m: method.to_owned(),
        d: digest.to_owned(),
        e: now.plus(TTL_SECS).0,
    };
    let body = crypto::b64url(
        serde_json::to_string(&claims)
            .unwrap_or_default()
            .as_bytes(),
    );
    let tag = crypto::b64url(&key.mac(&[b"mcp-oauth-proxy/request-state/v1", body.as_bytes()]));
    format!("{PREFIX}{body}.{tag}")
}

/// Why a state was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateRejection {
    /// Malformed or tampered.
    Invalid,
    /// Past its lifetime.
    Expired,
    /// Minted for another person, client, method or call.
    Foreign,
}

/// Checks a state presented with a retry.
pub fn check(
    key: &Key,
    state: &str,
    user: &UserId,
    client: &ClientId,
    method: &str,
    digest: &str,
    now: UnixTime,
) -> Result<(), StateRejection> {
    let rest = state.strip_prefix(PREFIX).ok_or(StateRejection::Invalid)?;
    let (body, tag) = rest.split_once('.').ok_or(StateRejection::Invalid)?;
    let tag = crypto::b64url_decode(tag).ok_or(StateRejection::Invalid)?;
    if !key.verify_mac(
        &[b"mcp-oauth-proxy/request-state/v1", body.as_bytes()],
        &tag,
    ) {
        return Err(StateRejection::Invalid);
    }
    let claims: Claims = crypto::b64url_decode(body)
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(StateRejection::Invalid)?;
    if claims.e <= now.0 {
        return Err(StateRejection::Expired);
    }
    if claims.u != user.as_str()
        || claims.c != client.as_str()
        || claims.m != method
        || claims.d != digest
    {
        return Err(StateRejection::Foreign);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn setup() -> (Key, UserId, ClientId, String) {
        (
            Key::generate().unwrap(),
            UserId::github(1),
            ClientId::new("c"),
            params_digest(Some(&json!({"name": "whoami", "arguments": {}}))),
        )
    }

    #[test]
    fn round_trip_ignores_meta_state_and_input_responses_in_the_digest() {
        let (k, u, c, d) = setup();
        let s = mint(&k, &u, &c, "tools/call", &d, UnixTime(100));
        // As a 2026-07-28 client retries: the answers to the input requests, the echoed
        // state, a fresh `_meta` envelope.
        let retry = params_digest(Some(&json!({
            "name": "whoami",
            "arguments": {},
            "requestState": s,
            "inputResponses": {"github_connect": {"action": "accept"}},
            "_meta": {"x": 1},
        })));
        assert_eq!(
            check(&k, &s, &u, &c, "tools/call", &retry, UnixTime(101)),
            Ok(())
        );
    }

    #[test]
    fn tampered_expired_and_foreign_states_are_refused() {
        let (k, u, c, d) = setup();
        let s = mint(&k, &u, &c, "tools/call", &d, UnixTime(100));
        let mut tampered = s.clone();
        tampered.insert(8, 'x');
        assert_eq!(
            check(&k, &tampered, &u, &c, "tools/call", &d, UnixTime(101)),
            Err(StateRejection::Invalid)
        );
        assert_eq!(
            check(&k, &s, &u, &c, "tools/call", &d, UnixTime(100 + TTL_SECS)),
            Err(StateRejection::Expired)
        );
        assert_eq!(
            check(
                &k,
                &s,
                &UserId::github(2),
                &c,
                "tools/call",
                &d,
                UnixTime(101)
            ),
            Err(StateRejection::Foreign)
        );
        assert_eq!(
            check(
                &k,
                &s,
                &u,
                &ClientId::new("other"),
                "tools/call",
                &d,
                UnixTime(101)
            ),
            Err(StateRejection::Foreign)
        );
        let other_call = params_digest(Some(&json!({"name": "delete_repo"})));
        assert_eq!(
            check(&k, &s, &u, &c, "tools/call", &other_call, UnixTime(101)),
            Err(StateRejection::Foreign)
        );
        assert_eq!(
            check(
                &Key::generate().unwrap(),
                &s,
                &u,
                &c,
                "tools/call",
                &d,
                UnixTime(101)
            ),
            Err(StateRejection::Invalid)
        );
    }
}
