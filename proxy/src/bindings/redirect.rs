//! Binding: a client's registration ↔ where codes go. Redirect URIs are validated once at
//! registration and stored verbatim; a request's `redirect_uri` must equal a registered one
//! byte for byte. The one exception (OAuth 2.1 §"Loopback Interface Redirection", RFC 8252
//! §7.3): for `http` URIs on `127.0.0.1`, `[::1]` or `localhost` the port may differ,
//! everything else (scheme, host spelling, path, query) must still match exactly.

use crate::config::is_loopback_host;
use crate::ids::ClientId;

/// Why a redirect URI was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedirectError {
    /// Not an absolute URI.
    NotAbsolute,
    /// Has a fragment (RFC 6749 §3.1.2).
    Fragment,
    /// A scheme that can run code or read files.
    DangerousScheme,
    /// `http` on a non-loopback host.
    PlainHttp,
    /// User info in the authority (`https://good@evil`).
    UserInfo,
    /// Too long.
    TooLong,
    /// Whitespace or control characters.
    BadCharacters,
    /// The request named no registered URI.
    Mismatch,
    /// Several URIs are registered and the request named none.
    Missing,
}

impl RedirectError {
    /// Safe description.
    pub fn description(self) -> &'static str {
        match self {
            RedirectError::NotAbsolute => "redirect_uri must be an absolute URI",
            RedirectError::Fragment => "redirect_uri must not contain a fragment",
            RedirectError::DangerousScheme => "redirect_uri scheme is not allowed",
            RedirectError::PlainHttp => {
                "redirect_uri must use https (http only on a loopback host)"
            }
            RedirectError::UserInfo => "redirect_uri must not contain user info",
            RedirectError::TooLong => "redirect_uri is too long",
            RedirectError::BadCharacters => {
                "redirect_uri contains whitespace or control characters"
            }
            RedirectError::Mismatch => "redirect_uri does not match a registered redirect URI",
            RedirectError::Missing => "redirect_uri is required when several are registered",
        }
    }
}

const MAX_LEN: usize = 2000;

/// Schemes never accepted: they run script, read local files, or are not navigations.
const DANGEROUS: &[&str] = &[
    "javascript",
    "data",
    "file",
    "vbscript",
    "about",
    "blob",
    "filesystem",
    "view-source",
    "chrome",
    "chrome-extension",
    "ws",
    "wss",
    "ftp",
    "mailto",
    "tel",
    "sms",
    "urn",
    "jar",
];

/// Validates a redirect URI at registration: `https` with a host; `http` only on a loopback
/// host; or a private-use scheme for native apps (RFC 8252 §7.1). Never a dangerous scheme,
/// never a fragment or user info.
pub fn validate_for_registration(uri: &str) -> Result<(), RedirectError> {
    if uri.len() > MAX_LEN {
        return Err(RedirectError::TooLong);
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RedirectError::BadCharacters);
    }
    let url = url::Url::parse(uri).map_err(|_| RedirectError::NotAbsolute)?;
    if uri.contains('#') {
        return Err(RedirectError::Fragment);
    }
    let scheme = url.scheme();
    if DANGEROUS.contains(&scheme) {
        return Err(RedirectError::DangerousScheme);
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(RedirectError::UserInfo);
    }
    match scheme {
        "https" => {
            if url.host_str().is_none_or(str::is_empty) {
                return Err(RedirectError::NotAbsolute);
            }
        }
        "http" => {
            if !is_loopback_host(url.host_str().unwrap_or_default()) {
                return Err(RedirectError::PlainHttp);
            }
        }
        // Private-use scheme of a native app: must carry a path, e.g. `com.example.app:/cb`
        // or `cursor://anysphere.cursor-retrieval/oauth/callback`.
        _ => {
            if url.cannot_be_a_base() && !uri[scheme.len() + 1..].starts_with('/') {
                return Err(RedirectError::NotAbsolute);
            }
        }
    }
    Ok(())
}

/// Proof that a request's redirect URI is one the client registered. Only this module makes
/// one; code issuance and every redirect back to a client require it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedirectMatched {
    client_id: ClientId,
    /// The URI exactly as the request gave it (or the single registered one).
    uri: String,
    /// The registered URI it matched (differs from `uri` only in a loopback port).
    registered: String,
}

impl RedirectMatched {
    /// The client this redirect belongs to.
    pub fn client_id(&self) -> &ClientId {
        &self.client_id
    }
    /// The URI to redirect to (as requested; differs from the registered one only in a
    /// loopback port).
    pub fn uri(&self) -> &str {
        &self.uri
    }
    /// The host, for display and audit.
    pub fn host(&self) -> String {
        url::Url::parse(&self.uri)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| self.uri.split(':').next().unwrap_or_default().to_owned())
    }
    /// Whether the redirect goes to a program on the person's own machine.
    pub fn is_loopback(&self) -> bool {
        split_loopback(&self.uri).is_some()
    }
    /// The registered URI it matched: what consents are keyed on, so a loopback client
    /// that listens on a new port each time keeps its consent.
    pub fn registered(&self) -> &str {
        &self.registered
    }
    /// Rebuilds the witness from a server-side transaction that was created from a match
    /// earlier; never from request input.
    pub(crate) fn from_stored(
        client_id: ClientId,
        uri: String,
        registered: String,
    ) -> RedirectMatched {
        RedirectMatched {
            client_id,
            uri,
            registered,
        }
    }
}

/// For `http://<loopback>[:port]<rest>`, returns (`http://<host>`, `<rest>`) with the port
/// removed; `None` for anything else.
fn split_loopback(uri: &str) -> Option<(&str, &str)> {
    let after = uri.strip_prefix("http://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, rest) = after.split_at(end);
    if authority.contains('@') {
        return None;
    }
    let host = if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (h, tail) = authority.split_at(close + 1);
        if !(tail.is_empty() || is_port(tail)) {
            return None;
        }
        h
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if is_port(&format!(":{p}")) => h,
            Some(_) => return None,
            None => authority,
        }
    };
    if !matches!(host, "127.0.0.1" | "[::1]" | "localhost") {
        return None;
    }
    Some((&uri[..7 + host.len()], rest))
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `requested` is allowed by `registered`: byte equality, or equality after removing
/// the port when both are loopback `http` URIs.
fn allowed(registered: &str, requested: &str) -> bool {
    if registered == requested {
        return true;
    }
    match (split_loopback(registered), split_loopback(requested)) {
        (Some((h1, r1)), Some((h2, r2))) => h1 == h2 && r1 == r2,
        _ => false,
    }
}

/// Checks a request's `redirect_uri` against a client's registered URIs. With no
/// `redirect_uri` the single registered URI is used; with several registered it is required.
pub fn match_redirect(
    client_id: &ClientId,
    registered: &[String],
    requested: Option<&str>,
) -> Result<RedirectMatched, RedirectError> {
    let (uri, reg) = match requested {
        Some(r) => {
            // Prefer a byte-exact registration over a loopback-port match.
            let reg = registered
                .iter()
                .find(|reg| reg.as_str() == r)
                .or_else(|| registered.iter().find(|reg| allowed(reg, r)))
                .ok_or(RedirectError::Mismatch)?;
            (r.to_owned(), reg.clone())
        }
        // Without a redirect_uri only a single registered URI is unambiguous.
        None => match registered {
            [only] => (only.clone(), only.clone()),
            _ => return Err(RedirectError::Missing),
        },
    };
    Ok(RedirectMatched {
        client_id: client_id.clone(),
        uri,
        registered: reg,
    })
}

/// Whether a registered redirect URI (already validated) can only belong to an app on the
/// person's own machine: a loopback `http` URI or a private-use scheme (RFC 8252 §7.1, §7.3).
/// OIDC Registration allows these for `native` clients only; a `web` client must use https.
pub fn is_native_only(uri: &str) -> bool {
    url::Url::parse(uri).map_or(true, |u| u.scheme() != "https")
}

#[cfg(test)]
mod native_tests {
    use super::is_native_only;

    #[test]
    fn loopback_and_private_use_schemes_are_native_only() {
        for u in [
            "http://127.0.0.1/cb",
            "http://[::1]:8080/cb",
            "http://localhost/callback",
            "com.example.app:/oauth",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
        ] {
            assert!(is_native_only(u), "{u}");
        }
        assert!(!is_native_only("https://app.example/cb"));
        assert!(!is_native_only("https://localhost/cb"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(reg: &str, req: &str) -> Result<RedirectMatched, RedirectError> {
        match_redirect(&ClientId::new("c"), &[reg.to_owned()], Some(req))
    }

    #[test]
    fn exact_match_accepted() {
        assert_eq!(
            m("https://app.example/cb", "https://app.example/cb")
                .unwrap()
                .uri(),
            "https://app.example/cb"
        );
    }

    #[test]
    fn trailing_slash_rejected() {
        assert_eq!(
            m("https://app.example/cb", "https://app.example/cb/"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn case_change_rejected() {
        assert_eq!(
            m("https://app.example/cb", "https://APP.example/cb"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m("https://app.example/cb", "https://app.example/CB"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn extra_query_rejected() {
        assert_eq!(
            m("https://app.example/cb", "https://app.example/cb?x=1"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn fragment_rejected() {
        assert_eq!(
            m("https://app.example/cb", "https://app.example/cb#x"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            validate_for_registration("https://app.example/cb#x"),
            Err(RedirectError::Fragment)
        );
    }

    #[test]
    fn userinfo_trick_rejected() {
        assert_eq!(
            m(
                "https://app.example/cb",
                "https://app.example@evil.example/cb"
            ),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            validate_for_registration("https://app.example@evil.example/cb"),
            Err(RedirectError::UserInfo)
        );
        assert_eq!(
            m("http://127.0.0.1/cb", "http://127.0.0.1@evil.example/cb"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn substring_rejected() {
        assert_eq!(
            m(
                "https://app.example/cb",
                "https://app.example/cb/../../evil"
            ),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m("https://app.example/cb", "https://app.example/c"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m("https://app.example", "https://app.example.evil.example"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn empty_rejected() {
        assert_eq!(
            m("https://app.example/cb", ""),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            validate_for_registration(""),
            Err(RedirectError::NotAbsolute)
        );
    }

    #[test]
    fn one_character_difference_rejected() {
        assert_eq!(
            m(
                "https://app.example/callback",
                "https://app.example/callbacc"
            ),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn loopback_port_may_vary_but_nothing_else() {
        let reg = "http://127.0.0.1/callback";
        assert!(m(reg, "http://127.0.0.1:53123/callback").is_ok());
        assert!(
            m(
                "http://127.0.0.1:8080/callback",
                "http://127.0.0.1:53123/callback"
            )
            .is_ok()
        );
        assert!(m("http://[::1]/cb", "http://[::1]:4000/cb").is_ok());
        assert!(m("http://localhost/cb", "http://localhost:4000/cb").is_ok());
        assert_eq!(
            m(reg, "http://127.0.0.1:53123/callback2"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(reg, "http://127.0.0.1.evil.example:53123/callback"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(reg, "https://127.0.0.1:53123/callback"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(reg, "http://localhost:53123/callback"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(reg, "http://127.0.0.1:53123/callback?x"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(reg, "http://127.0.0.1:abc/callback"),
            Err(RedirectError::Mismatch)
        );
        // The exception is for loopback only.
        assert_eq!(
            m("https://app.example/cb", "https://app.example:8443/cb"),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn port_exception_is_only_for_the_three_loopback_spellings() {
        // Independent of registration rules: the matcher itself must not widen.
        assert_eq!(
            m("http://app.example/cb", "http://app.example:8080/cb"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m("http://127.0.0.2/cb", "http://127.0.0.2:1234/cb"),
            Err(RedirectError::Mismatch)
        );
        assert_eq!(
            m(
                "http://[0:0:0:0:0:0:0:1]/cb",
                "http://[0:0:0:0:0:0:0:1]:1234/cb"
            ),
            Err(RedirectError::Mismatch)
        );
    }

    #[test]
    fn missing_redirect_uses_the_single_registered_one() {
        let one = vec!["https://app.example/cb".to_owned()];
        assert_eq!(
            match_redirect(&ClientId::new("c"), &one, None)
                .unwrap()
                .uri(),
            "https://app.example/cb"
        );
        let two = vec![
            "https://a.example/cb".to_owned(),
            "https://b.example/cb".to_owned(),
        ];
        assert_eq!(
            match_redirect(&ClientId::new("c"), &two, None),
            Err(RedirectError::Missing)
        );
    }

    #[test]
    fn registration_accepts_https_loopback_and_private_use() {
        for ok in [
            "https://app.example/cb",
            "http://127.0.0.1/cb",
            "http://[::1]:3000/cb",
            "http://localhost:3000/cb",
            "com.example.app:/oauth2redirect",
            "cursor://anysphere.cursor-retrieval/oauth/callback",
        ] {
            validate_for_registration(ok).unwrap_or_else(|e| panic!("{ok}: {e:?}"));
        }
        for (bad, want) in [
            ("javascript:alert(1)", RedirectError::DangerousScheme),
            ("JavaScript:alert(1)", RedirectError::DangerousScheme),
            ("data:text/html,hi", RedirectError::DangerousScheme),
            ("file:///etc/passwd", RedirectError::DangerousScheme),
            ("http://app.example/cb", RedirectError::PlainHttp),
            ("http://10.0.0.1/cb", RedirectError::PlainHttp),
            ("https://app.example/c b", RedirectError::BadCharacters),
            ("relative/path", RedirectError::NotAbsolute),
        ] {
            assert_eq!(validate_for_registration(bad), Err(want), "{bad}");
        }
    }
}
