//! Security headers on every response, in one place: a strict CSP (no scripts but the consent
//! and finish pages' own, by hash; no framing; styles only from our stylesheet; forms only to where they
//! lead), `X-Frame-Options: DENY`, `nosniff`, a `same-origin` referrer policy (no URL ever
//! leaves the origin in a `Referer`; `no-referrer` would make browsers send `Origin: null` on our
//! own form POSTs, defeating the same-origin check), and `no-store` unless a handler chose
//! otherwise.
//!
//! `form-action` is on every page. Chromium applies it to each redirect that follows a form
//! POST, not only to the form's own target, so a page whose forms are answered with a redirect
//! elsewhere lists exactly those destinations ([`FormTargets`]): the consent and confirmation
//! pages GitHub's authorize origin (Approve) and the client's redirect URI (Deny, and the
//! callback's redirect when GitHub answers at once), the finish page the client's redirect
//! URI, the connect and approval pages GitHub's. Any other page's forms stay on `'self'`.
//!
//! HSTS is sent whenever the public URL is https, whether TLS ends here or at a load balancer
//! in front: the proxy is then reachable only over https by configuration, and browsers ignore
//! the header on plain-HTTP responses (RFC 6797 §8.1), so it never reaches a loopback dev setup.

use axum::response::Response;
use http::{HeaderValue, header};

/// CSP for every page without a script: forms only to our own origin.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The script a page runs (allowed by its hash, and nothing else).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageScript {
    /// `consent_ui::CONSENT_SCRIPT`: the consent page's held buttons and the value it keeps
    /// for the return from GitHub (also on the confirmation, connect and approval pages).
    Consent,
    /// `consent_ui::FINISH_SCRIPT`: the finish page hands that value back.
    Finish,
}

impl PageScript {
    fn source(self) -> &'static str {
        match self {
            PageScript::Consent => consent_ui::CONSENT_SCRIPT_CSP_SOURCE,
            PageScript::Finish => consent_ui::FINISH_SCRIPT_CSP_SOURCE,
        }
    }
}

/// Where a page's forms may lead: our own origin, plus each place our answer to them may
/// redirect the browser (`form-action` sources).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormTargets(Vec<String>);

impl FormTargets {
    /// Our own origin only.
    pub fn own_origin() -> FormTargets {
        FormTargets(vec!["'self'".to_owned()])
    }

    /// Adds the destination of a redirect that may answer the page's forms: its origin for
    /// http(s) (`https://github.com`, `http://127.0.0.1:53682`), its scheme for a private-use
    /// URI (`com.example.app:`). Chromium ignores IPv6 literals in source lists, so a
    /// destination at one (the `[::1]` loopback spelling) is allowed by its scheme (`http:`).
    /// A URL that does not parse, or a scheme no redirect may have, adds nothing.
    #[must_use]
    pub fn redirecting_to(mut self, url: &str) -> FormTargets {
        if let Some(src) = source_of(url)
            && !self.0.contains(&src)
        {
            self.0.push(src);
        }
        self
    }
}

/// The `form-action` source for a redirect destination (see [`FormTargets::redirecting_to`]).
/// Built only from the parsed URL's scheme and ASCII host, so it cannot carry a `;`, `,`, quote
/// or space into the policy.
fn source_of(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    match u.scheme() {
        "javascript" | "data" | "blob" | "filesystem" | "about" | "file" => None,
        "http" | "https" => match u.host()? {
            url::Host::Ipv6(_) => Some(format!("{}:", u.scheme())),
            _ => Some(u.origin().ascii_serialization()),
        },
        scheme => Some(format!("{scheme}:")),
    }
}

/// The CSP of a page that runs `script` and whose forms lead to `forms`.
pub fn page_csp(script: PageScript, forms: &FormTargets) -> HeaderValue {
    let csp = format!(
        "default-src 'none'; script-src {}; style-src 'self'; img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action {}",
        script.source(),
        forms.0.join(" ")
    );
    // Every part is a constant or a source built by `source_of`: always a valid header value.
    // Were it not, the default policy (no script) is the safe side.
    HeaderValue::from_str(&csp).unwrap_or(HeaderValue::from_static(CSP))
}

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

    const GITHUB: &str = "https://github.com/login/oauth/authorize";

    fn directive<'a>(csp: &'a str, name: &str) -> &'a str {
        csp.split(';')
            .map(str::trim)
            .find(|d| d.starts_with(&format!("{name} ")))
            .unwrap()
    }

    #[test]
    fn consent_csp_allows_exactly_the_consent_script() {
        let v = page_csp(PageScript::Consent, &FormTargets::own_origin());
        let csp = v.to_str().unwrap();
        assert_eq!(
            directive(csp, "script-src"),
            format!("script-src {}", consent_ui::CONSENT_SCRIPT_CSP_SOURCE)
        );
        assert!(csp.contains("frame-ancestors 'none'"));
        assert!(!CSP.contains("script-src"), "other pages run no script");
        assert_eq!(directive(CSP, "form-action"), "form-action 'self'");
        let v = page_csp(PageScript::Finish, &FormTargets::own_origin());
        assert_eq!(
            directive(v.to_str().unwrap(), "script-src"),
            format!("script-src {}", consent_ui::FINISH_SCRIPT_CSP_SOURCE)
        );
    }

    #[test]
    fn form_action_lists_exactly_the_destinations() {
        for (redirect, expected) in [
            (
                "https://app.example/cb?x=1",
                "form-action 'self' https://github.com https://app.example",
            ),
            (
                "http://127.0.0.1:53682/callback",
                "form-action 'self' https://github.com http://127.0.0.1:53682",
            ),
            (
                "http://localhost:8000/cb",
                "form-action 'self' https://github.com http://localhost:8000",
            ),
            (
                "https://app.example:8443/cb",
                "form-action 'self' https://github.com https://app.example:8443",
            ),
            (
                "com.example.app:/oauth2redirect",
                "form-action 'self' https://github.com com.example.app:",
            ),
            (
                "http://[::1]:9000/cb",
                "form-action 'self' https://github.com http:",
            ),
            (
                "https://github.com/cb",
                "form-action 'self' https://github.com",
            ),
            (
                "javascript:alert(1)",
                "form-action 'self' https://github.com",
            ),
            ("not a url", "form-action 'self' https://github.com"),
        ] {
            let v = page_csp(
                PageScript::Consent,
                &FormTargets::own_origin()
                    .redirecting_to(GITHUB)
                    .redirecting_to(redirect),
            );
            assert_eq!(directive(v.to_str().unwrap(), "form-action"), expected);
        }
    }

    #[test]
    fn a_destination_cannot_inject_directives() {
        // The URL parser percent-encodes or refuses what could end a source or a directive.
        for hostile in [
            "https://a.example;script-src *@b.example/",
            "https://a.example/ 'unsafe-inline'; x",
            "x;y:/z",
        ] {
            let v = page_csp(
                PageScript::Consent,
                &FormTargets::own_origin().redirecting_to(hostile),
            );
            let csp = v.to_str().unwrap();
            assert_eq!(csp.matches(';').count(), 6, "{csp}");
            assert!(!csp.contains("unsafe"), "{csp}");
            assert!(!csp.contains('*'), "{csp}");
        }
    }
}
