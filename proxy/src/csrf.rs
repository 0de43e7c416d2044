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

/// Whether a POST came from our own pages: `Sec-Fetch-Site`, when sent, must be `same-origin`
/// (or `none` for a user-typed request); `Origin`, when sent, must be ours. Browsers send
/// `Origin` on every cross-site POST, so a missing one means a non-browser caller, which the
/// CSRF token still has to satisfy.
pub fn same_origin(sec_fetch_site: Option<&str>, origin: Option<&str>, our_origin: &str) -> bool {
    let site_ok = sec_fetch_site.is_none_or(|s| s == "same-origin" || s == "none");
    let origin_ok = origin.is_none_or(|o| o == our_origin);
    site_ok && origin_ok
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(same_origin(None, None, us));
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
