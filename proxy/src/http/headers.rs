//! Security headers on every response, in one place: a strict CSP (no scripts but the consent
//! page's one, by hash; no framing; styles only from our stylesheet), `X-Frame-Options: DENY`,
//! `nosniff`, a `same-origin` referrer policy (no URL ever leaves the origin in a `Referer`;
//! `no-referrer` would make browsers send `Origin: null` on our own form POSTs, defeating the
//! same-origin check), and
//! `no-store` unless a handler chose otherwise. The consent page sets its own CSP without
//! `form-action`: Chrome applies `form-action` to the redirects after a form POST, and
//! approval redirects to GitHub, denial to the client's (possibly custom-scheme) URI.
//!
//! HSTS is sent whenever the public URL is https, whether TLS ends here or at a load balancer
//! in front: the proxy is then reachable only over https by configuration, and browsers ignore
//! the header on plain-HTTP responses (RFC 6797 §8.1), so it never reaches a loopback dev setup.

use axum::response::Response;
use http::{HeaderValue, header};

/// CSP for every page.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";
/// CSP for the consent page (see module docs); its one script is allowed by hash
/// (`consent_ui::CONSENT_SCRIPT_CSP_SOURCE`, checked by a test below).
pub const CSP_CONSENT: &str = "default-src 'none'; script-src 'sha256-Zw/49SQDv/FhPq4kjA2EKMTqeN9EUjhb3vQNaa+wPdQ='; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Adds the security headers to a response (every response passes here: `http::front`).
pub fn secure(resp: &mut Response) {
    let h = resp.headers_mut();
    h.entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(CSP));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
}

/// `Strict-Transport-Security`: two years, subdomains included (no `preload`: that is the
/// operator's decision for their domain).
pub const HSTS: &str = "max-age=63072000; includeSubDomains";

/// Adds HSTS (whenever the public URL is https: `http::front`).
pub fn hsts(resp: &mut Response) {
    resp.headers_mut().insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static(HSTS),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consent_csp_allows_exactly_the_consent_script() {
        let script_src = CSP_CONSENT
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src "))
            .unwrap();
        assert_eq!(
            script_src,
            format!("script-src {}", consent_ui::CONSENT_SCRIPT_CSP_SOURCE)
        );
        assert!(CSP_CONSENT.contains("frame-ancestors 'none'"));
        assert!(!CSP.contains("script-src"), "other pages run no script");
    }
}
