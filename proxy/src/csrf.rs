//! CSRF protection for the proxy's forms: a token that is a MAC (under the CSRF key) over the
//! form's purpose and what it is bound to (the transaction, or the browser session), plus a
//! same-origin check of `Sec-Fetch-Site` and `Origin` on every state-changing POST, so a
//! cross-site page cannot submit the consent form for a victim.

use crate::crypto::{self, Key};

/// A CSRF token for `purpose` bound to `bound_to`.
pub fn token(key: &Key, purpose: &str, bound_to: &str) -> String {
    crypto::b64url(&key.mac(&[
        b"mcp-oauth-proxy/csrf/v1",
        purpose.as_bytes(),
        bound_to.as_bytes(),
    ]))
}

/// Checks a submitted token.
pub fn verify(key: &Key, purpose: &str, bound_to: &str, submitted: Option<&str>) -> bool {
    submitted
        .and_then(crypto::b64url_decode)
        .is_some_and(|tag| {
            key.verify_mac(
                &[
                    b"mcp-oauth-proxy/csrf/v1",
                    purpose.as_bytes(),
                    bound_to.as_bytes(),
                ],
                &tag,
            )
        })
}

/// Whether a form POST came from our own pages: at least one of `Sec-Fetch-Site` and
/// `Origin` must be present (every current browser sends `Origin` on a POST); `Sec-Fetch-Site`,
/// when sent, must be `same-origin`; `Origin`, when sent, must be ours.
pub fn same_origin(sec_fetch_site: Option<&str>, origin: Option<&str>, our_origin: &str) -> bool {
    if sec_fetch_site.is_none() && origin.is_none() {
        return false;
    }
    let site_ok = sec_fetch_site.is_none_or(|s| s == "same-origin");
    let origin_ok = origin.is_none_or(|o| o == our_origin);
    site_ok && origin_ok
}

/// Lifetime of the browser's CSRF cookie.
pub const BROWSER_COOKIE_TTL_SECS: u64 = 12 * 3600;

/// The browser's CSRF cookie value if it is well-formed, else a fresh one and the
/// `Set-Cookie` to store it. Reusing it keeps two open consent tabs both valid.
pub fn browser_binding(
    existing: Option<&str>,
) -> Result<(String, Option<String>), crypto::CryptoError> {
    if let Some(v) = existing
        && v.len() == 43
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Ok((v.to_owned(), None));
    }
    let v = crypto::random_token()?;
    let set = crate::cookies::set(crate::cookies::CSRF_COOKIE, &v, BROWSER_COOKIE_TTL_SECS);
    Ok((v, Some(set)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_binding_is_reused_when_well_formed() {
        let (v, set) = browser_binding(None).unwrap();
        assert!(set.unwrap().starts_with("__Host-mcp-csrf="));
        assert_eq!(browser_binding(Some(&v)).unwrap(), (v.clone(), None));
        let (w, set) = browser_binding(Some("short")).unwrap();
        assert!(set.is_some() && w != v);
    }

    #[test]
    fn token_bound_to_purpose_and_subject() {
        let k = Key::generate().unwrap();
        let t = token(&k, "consent", "txn1");
        assert!(verify(&k, "consent", "txn1", Some(&t)));
        assert!(!verify(&k, "consent", "txn2", Some(&t)));
        assert!(!verify(&k, "account", "txn1", Some(&t)));
        assert!(!verify(&k, "consent", "txn1", None));
        assert!(!verify(&k, "consent", "txn1", Some("x")));
    }

    #[test]
    fn cross_site_post_rejected() {
        let us = "https://mcp.example.com";
        assert!(same_origin(Some("same-origin"), Some(us), us));
        assert!(same_origin(None, Some(us), us));
        // A POST with neither header is not trusted to be from our page.
        assert!(!same_origin(None, None, us));
        assert!(!same_origin(Some("none"), None, us));
        assert!(
            !same_origin(Some("same-site"), None, us),
            "a sibling subdomain is not us"
        );
        assert!(!same_origin(Some("cross-site"), None, us));
        assert!(!same_origin(
            Some("cross-site"),
            Some("https://evil.example"),
            us
        ));
        assert!(!same_origin(
            Some("same-site"),
            Some("https://sub.mcp.example.com"),
            us
        ));
        assert!(!same_origin(None, Some("https://evil.example"), us));
        assert!(!same_origin(None, Some("null"), us));
    }
}
