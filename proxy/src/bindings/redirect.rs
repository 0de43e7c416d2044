//! Binding: a client's registration ↔ where codes go. Redirect URIs are validated once at
//! registration and stored verbatim; a request's `redirect_uri` must equal a registered one
//! byte for byte. The one exception (OAuth 2.1 §"Loopback Interface Redirection", RFC 8252
//! §7.3): for `http` URIs on `127.0.0.1`, `[::1]` or `localhost` the port may differ,
//! everything else (scheme, host spelling, path, query) must still match exactly.
//!
//! This module holds the one definition of a loopback host (the exact spellings `127.0.0.1`,
//! `[::1]` and `localhost`, [`is_loopback_host`]; configuration uses it too), of a loopback
//! redirect (one of those spellings with no port or a port in 1–65535 written without
//! leading zeros), and of what a redirect is shown as and keyed by ([`Destination`]): a
//! private-use scheme such as `claude.ai:/cb` is an app on the person's device named by its
//! scheme, never a host, so it can never borrow the approvals of the web host `claude.ai`.

use crate::ids::ClientId;
use crate::store::records::TxnRecord;

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
    /// `http` on a loopback address spelled other than `127.0.0.1`, `[::1]` or `localhost`
    /// (`127.1`, `0x7f000001`, `LOCALHOST`, `[0:0:0:0:0:0:0:1]`, …).
    LoopbackSpelling,
    /// A port outside 1–65535, or written with leading zeros.
    BadPort,
    /// A private-use scheme that is not a reverse domain name (RFC 8252 §7.1).
    NotReverseDomainScheme,
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
            RedirectError::LoopbackSpelling => {
                "loopback redirect_uri must spell its host 127.0.0.1, [::1] or localhost"
            }
            RedirectError::BadPort => "redirect_uri port must be a number from 1 to 65535",
            RedirectError::NotReverseDomainScheme => {
                "a private-use redirect_uri scheme must be a reverse domain name, e.g. com.example.app (RFC 8252 section 7.1)"
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
/// host spelled canonically with a port in 1–65535 (RFC 8252 §7.3); or a private-use scheme
/// that is a reverse domain name, for native apps (RFC 8252 §7.1). Never a dangerous scheme,
/// never a fragment or user info.
pub fn validate_for_registration(uri: &str) -> Result<(), RedirectError> {
    if uri.len() > MAX_LEN {
        return Err(RedirectError::TooLong);
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(RedirectError::BadCharacters);
    }
    let url = url::Url::parse(uri).map_err(|_| {
        // `http://127.0.0.1:99999/cb` does not even parse: say why.
        match loopback_authority(uri) {
            Some((host, Some(_))) if is_loopback_host(host) => RedirectError::BadPort,
            _ => RedirectError::NotAbsolute,
        }
    })?;
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
            // The parsed host is normalised (`127.1` becomes `127.0.0.1`); the raw text is
            // what is stored and matched, so that is what must be canonical.
            let parsed_loopback = match url.host() {
                Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => {
                    ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
                }
                None => false,
            };
            if split_loopback(uri).is_none() {
                return Err(match loopback_authority(uri) {
                    Some((host, _)) if is_loopback_host(host) => RedirectError::BadPort,
                    _ if parsed_loopback => RedirectError::LoopbackSpelling,
                    _ => RedirectError::PlainHttp,
                });
            }
        }
        // Private-use scheme of a native app: a reverse domain name (RFC 8252 §7.1) carrying
        // a path, e.g. `com.example.app:/cb`.
        _ => {
            if !is_reverse_domain_scheme(&uri[..scheme.len()]) {
                return Err(RedirectError::NotReverseDomainScheme);
            }
            if url.cannot_be_a_base() && !uri[scheme.len() + 1..].starts_with('/') {
                return Err(RedirectError::NotAbsolute);
            }
        }
    }
    Ok(())
}

/// The one definition of a loopback host name: exactly `127.0.0.1`, `[::1]` or `localhost`
/// (OAuth 2.1 §"Loopback Interface Redirection", RFC 8252 §7.3 and §8.3). Other spellings
/// of a loopback address (`127.1`, `0x7f000001`, `127.0.0.2`, `[0:0:0:0:0:0:0:1]`,
/// `LOCALHOST`) are not loopback here. Configuration checks a parsed URL's normalised
/// `host_str()` with it, redirect URIs their raw text.
pub fn is_loopback_host(host: &str) -> bool {
    matches!(host, "127.0.0.1" | "[::1]" | "localhost")
}

/// Whether a private-use URI scheme is a reverse domain name as RFC 8252 §7.1 requires
/// (`com.example.app`): at least two dot-separated labels of lower-case letters, digits and
/// hyphens, none empty, none starting or ending with a hyphen, the first (the top-level
/// domain) starting with a letter. A scheme without a dot (`myapp`, `cursor`) is refused.
/// Whether the domain is really the app's cannot be known here; the consent page says it is
/// an app on the person's device and names the scheme.
pub fn is_reverse_domain_scheme(scheme: &str) -> bool {
    let labels: Vec<&str> = scheme.split('.').collect();
    labels.len() >= 2
        && scheme.len() <= 253
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
        && labels[0].starts_with(|c: char| c.is_ascii_lowercase())
}

/// Where a redirect URI sends the authorization, as the consent page shows it and as
/// approvals are keyed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// An `https` site: its host.
    Site(String),
    /// A program on the person's machine listening on loopback: the loopback host.
    Loopback(String),
    /// An app on the person's device that claimed a private-use scheme (`claude.ai` for
    /// `claude.ai:/cb`). Any local program can claim a scheme; it is never a host.
    App(String),
}

impl Destination {
    /// What approvals ("a destination new to this server"), the audit trail and alerts key
    /// on: the host, or `scheme:<scheme>` for an app, so the scheme `claude.ai:` never shares
    /// the approvals of the site `claude.ai`.
    pub fn key(&self) -> String {
        match self {
            Destination::Site(h) | Destination::Loopback(h) => h.clone(),
            Destination::App(s) => format!("scheme:{s}"),
        }
    }
    /// Whether the authorization stays on the person's own machine (loopback or an app).
    pub fn is_on_this_device(&self) -> bool {
        !matches!(self, Destination::Site(_))
    }
    /// The private-use scheme, for an app.
    pub fn app_scheme(&self) -> Option<&str> {
        match self {
            Destination::App(s) => Some(s),
            _ => None,
        }
    }
}

/// Where `uri` (a registered or matched redirect URI) sends the authorization.
pub fn destination(uri: &str) -> Destination {
    if let Some((prefix, _)) = split_loopback(uri) {
        return Destination::Loopback(prefix["http://".len()..].to_owned());
    }
    let scheme = uri.split(':').next().unwrap_or_default();
    let host = || {
        url::Url::parse(uri)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default()
    };
    if scheme.eq_ignore_ascii_case("https") {
        Destination::Site(host())
    } else if scheme.eq_ignore_ascii_case("http") {
        // Plain http is only ever registered on loopback; a spelling accepted before the
        // canonical rule (`http://127.1/cb`) is still a local program, without the port rule.
        Destination::Loopback(host())
    } else {
        Destination::App(scheme.to_ascii_lowercase())
    }
}

/// Proof that a request's redirect URI is one the client registered. Only this module makes
/// one ([`match_redirect`], and `of_transaction` for a match stored server-side); code
/// issuance and every redirect back to a client require it. No `Clone`: a flow that hands the
/// match on gets it back if it needs it again.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::redirect::RedirectMatched;
/// use mcp_oauth_proxy::ids::ClientId;
/// // Private fields: a redirect cannot be declared matched outside the redirect binding.
/// let forged = RedirectMatched {
///     client_id: ClientId::new("c"),
///     uri: "https://evil.example/cb".to_owned(),
///     registered: "https://evil.example/cb".to_owned(),
///     explicit: true,
/// };
/// ```
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::redirect::{RedirectMatched, of_transaction};
/// use mcp_oauth_proxy::store::records::TxnRecord;
/// // Nor read back from a transaction record outside this crate (the flows read back only
/// // what `/authorize` stored after a match).
/// fn forge(txn: &TxnRecord) -> RedirectMatched {
///     of_transaction(txn)
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::redirect::{RedirectMatched, match_redirect};
/// use mcp_oauth_proxy::ids::ClientId;
/// // The one way in from a request: the registration and the requested URI.
/// let registered = ["https://app.example/cb".to_owned()];
/// let m: RedirectMatched =
///     match_redirect(&ClientId::new("c"), &registered, Some("https://app.example/cb")).unwrap();
/// assert_eq!((m.uri(), m.registered(), m.explicit()), ("https://app.example/cb", "https://app.example/cb", true));
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct RedirectMatched {
    client_id: ClientId,
    /// The URI exactly as the request gave it (or the single registered one).
    uri: String,
    /// The registered URI it matched (differs from `uri` only in a loopback port).
    registered: String,
    /// The request carried `redirect_uri`.
    explicit: bool,
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
    /// Where the authorization goes: a site, a loopback program, or an app by its scheme.
    pub fn destination(&self) -> Destination {
        destination(&self.uri)
    }
    /// The destination's key, for approvals, audit and alerts: the host, or
    /// `scheme:<scheme>` for a private-use scheme (never a host).
    pub fn destination_key(&self) -> String {
        self.destination().key()
    }
    /// Whether the redirect goes to a program on the person's own machine over loopback.
    pub fn is_loopback(&self) -> bool {
        split_loopback(&self.uri).is_some()
    }
    /// Whether the request named this redirect URI itself (`/token` then requires the same
    /// `redirect_uri`, RFC 6749 §4.1.3), rather than leaving the single registered one implied.
    pub fn explicit(&self) -> bool {
        self.explicit
    }
    /// The registered URI it matched: what consents are keyed on, so a loopback client
    /// that listens on a new port each time keeps its consent.
    pub fn registered(&self) -> &str {
        &self.registered
    }
}

/// The redirect a stored authorization transaction was matched with. `/authorize` stores a
/// transaction only after [`match_redirect`] succeeded and copies the match into it; the
/// record is server-side (the browser holds only its random id), so the consent decision and
/// the GitHub callback read the match back instead of matching again: the person approved
/// this redirect, even if the client's registration (a metadata document) changed meanwhile.
/// Crate-only: a `TxnRecord` is plain data, so only the flows that took it from the store call
/// this.
pub(crate) fn of_transaction(txn: &TxnRecord) -> RedirectMatched {
    RedirectMatched {
        client_id: txn.client_id.clone(),
        uri: txn.redirect_uri.clone(),
        registered: txn.registered_redirect.clone(),
        explicit: txn.redirect_uri_explicit,
    }
}

/// For `http://<host>[:<port>]<rest>`, the raw host and port text (`None` without a port);
/// `None` for anything that is not plain http or has user info.
fn loopback_authority(uri: &str) -> Option<(&str, Option<&str>)> {
    let after = uri.strip_prefix("http://")?;
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let authority = &after[..end];
    if authority.contains('@') {
        return None;
    }
    if authority.starts_with('[') {
        let close = authority.find(']')?;
        let (h, tail) = authority.split_at(close + 1);
        match tail {
            "" => Some((h, None)),
            t => Some((h, Some(t.strip_prefix(':')?))),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => Some((h, Some(p))),
            None => Some((authority, None)),
        }
    }
}

/// For `http://<loopback>[:port]<rest>` with a canonical loopback host and, if any, a port in
/// 1–65535 without leading zeros, returns (`http://<host>`, `<rest>`) with the port removed;
/// `None` for anything else.
fn split_loopback(uri: &str) -> Option<(&str, &str)> {
    let (host, port) = loopback_authority(uri)?;
    if !is_loopback_host(host) || !port.is_none_or(is_port) {
        return None;
    }
    let prefix = "http://".len() + host.len();
    let rest_at = prefix + port.map_or(0, |p| p.len() + 1);
    Some((&uri[..prefix], &uri[rest_at..]))
}

/// A port number 1–65535, decimal, no sign, no leading zero.
fn is_port(p: &str) -> bool {
    !p.starts_with('0')
        && p.len() <= 5
        && p.bytes().all(|b| b.is_ascii_digit())
        && p.parse::<u16>().is_ok_and(|n| n != 0)
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
        explicit: requested.is_some(),
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
            "claude.ai:/cb",
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
            "com.example.app://callback",
            "claude.ai:/cb",
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
            (
                "cursor://anysphere.cursor-mcp/oauth/callback",
                RedirectError::NotReverseDomainScheme,
            ),
            ("myapp:/cb", RedirectError::NotReverseDomainScheme),
        ] {
            assert_eq!(validate_for_registration(bad), Err(want), "{bad}");
        }
    }

    #[test]
    fn loopback_must_be_spelled_canonically() {
        for bad in [
            "http://127.1/cb",
            "http://127.1:8080/cb",
            "http://0x7f000001/cb",
            "http://0x7f.1/cb",
            "http://2130706433/cb",
            "http://127.0.0.2/cb",
            "http://[0:0:0:0:0:0:0:1]/cb",
            "http://[::ffff:127.0.0.1]/cb",
            "http://LOCALHOST/cb",
            "http://LocalHost:3000/cb",
        ] {
            assert_eq!(
                validate_for_registration(bad),
                Err(RedirectError::LoopbackSpelling),
                "{bad}"
            );
        }
        for bad in [
            "http://127.0.0.1:0/cb",
            "http://127.0.0.1:99999/cb",
            "http://127.0.0.1:65536/cb",
            "http://[::1]:0/cb",
            "http://localhost:08080/cb",
            "http://localhost:/cb",
            "http://[::1]:/cb",
        ] {
            assert_eq!(
                validate_for_registration(bad),
                Err(RedirectError::BadPort),
                "{bad}"
            );
        }
        assert_eq!(
            validate_for_registration("http://localhost./cb"),
            Err(RedirectError::PlainHttp)
        );
        for ok in [
            "http://127.0.0.1:1/cb",
            "http://127.0.0.1:65535/cb",
            "http://[::1]/cb",
            "http://localhost:8080",
        ] {
            assert_eq!(validate_for_registration(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn the_port_exception_needs_a_port_in_1_to_65535() {
        let reg = "http://127.0.0.1/cb";
        for bad in [
            "http://127.0.0.1:0/cb",
            "http://127.0.0.1:99999/cb",
            "http://127.0.0.1:65536/cb",
            "http://127.0.0.1:08080/cb",
            "http://127.0.0.1:/cb",
            "http://127.1:8080/cb",
            "http://0x7f000001:8080/cb",
        ] {
            assert_eq!(m(reg, bad), Err(RedirectError::Mismatch), "{bad}");
        }
        assert!(m(reg, "http://127.0.0.1:1/cb").is_ok());
        assert!(m(reg, "http://127.0.0.1:65535/cb").is_ok());
    }

    #[test]
    fn loopback_host_is_exactly_one_of_three_spellings() {
        for h in ["127.0.0.1", "[::1]", "localhost"] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "127.0.0.2",
            "127.1",
            "::1",
            "[0:0:0:0:0:0:0:1]",
            "LOCALHOST",
            "localhost.",
            "0x7f000001",
            "",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn reverse_domain_schemes() {
        for ok in [
            "com.example.app",
            "claude.ai",
            "io.github.user.tool",
            "com.x-y.a1",
        ] {
            assert!(is_reverse_domain_scheme(ok), "{ok}");
        }
        for bad in [
            "cursor",
            "myapp",
            "com.",
            ".com",
            "com..app",
            "com.-x",
            "com.x-",
            "Com.Example.App",
            "1com.example",
            "com.exa+mple",
            "",
        ] {
            assert!(!is_reverse_domain_scheme(bad), "{bad}");
        }
    }

    #[test]
    fn a_private_use_scheme_is_an_app_keyed_by_its_scheme_never_a_host() {
        let app = m("claude.ai:/cb", "claude.ai:/cb").unwrap();
        assert_eq!(app.destination(), Destination::App("claude.ai".to_owned()));
        assert_eq!(app.destination_key(), "scheme:claude.ai");
        assert!(app.destination().is_on_this_device());
        assert!(!app.is_loopback());
        let site = m("https://claude.ai/cb", "https://claude.ai/cb").unwrap();
        assert_eq!(site.destination_key(), "claude.ai");
        assert_ne!(site.destination_key(), app.destination_key());
        assert!(!site.destination().is_on_this_device());
        // An authority after the scheme is not a host either.
        assert_eq!(
            destination("com.example.app://claude.ai/cb"),
            Destination::App("com.example.app".to_owned())
        );
        let lo = m("http://127.0.0.1/cb", "http://127.0.0.1:5000/cb").unwrap();
        assert_eq!(
            lo.destination(),
            Destination::Loopback("127.0.0.1".to_owned())
        );
        assert_eq!(destination("http://[::1]:9/cb").key(), "[::1]");
        assert_eq!(destination("http://127.1/cb").key(), "127.0.0.1");
    }

    #[test]
    fn explicit_only_when_the_request_named_the_redirect() {
        let one = vec!["https://app.example/cb".to_owned()];
        let c = ClientId::new("c");
        assert!(
            match_redirect(&c, &one, Some("https://app.example/cb"))
                .unwrap()
                .explicit()
        );
        assert!(!match_redirect(&c, &one, None).unwrap().explicit());
    }
}
