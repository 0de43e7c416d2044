//! Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document-01), the pure
//! part: which `client_id`s are document URLs, what a valid document is, and how long one may
//! be cached. No I/O here; `fetch` gets the bytes.

use serde_json::Value;
use url::Url;

use crate::oauth::registration::{ClientMetadata, RegistrationRequest};
use crate::oauth::scope::ScopeSet;

/// Longest `client_id` URL accepted.
const MAX_URL_LEN: usize = 2000;

/// Why a `client_id` URL or its document was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CimdError {
    /// Metadata documents are switched off on this server.
    #[error("disabled")]
    Disabled,
    /// Not `https` (plain http only to loopback with the development setting).
    #[error("not https")]
    NotHttps,
    /// Malformed, not in normalized form, or with a fragment, user info, dot segments or `|`.
    #[error("malformed url")]
    MalformedUrl,
    /// No path (or just `/`).
    #[error("no path")]
    NoPath,
    /// The body is not a JSON object.
    #[error("not json")]
    NotJson,
    /// The document's `client_id` is not byte-equal to its URL.
    #[error("client_id mismatch")]
    ClientIdMismatch,
    /// `client_name` missing or empty.
    #[error("no client_name")]
    MissingName,
    /// No `redirect_uris`.
    #[error("no redirect_uris")]
    NoRedirectUris,
    /// A shared-secret authentication method or a `client_secret`.
    #[error("shared secret")]
    SharedSecret,
    /// `private_key_jwt`, which this server cannot verify yet.
    #[error("unsupported auth method")]
    UnsupportedAuthMethod,
    /// Other metadata failed the registration rules.
    #[error("invalid metadata: {0}")]
    Invalid(&'static str),
    /// The server's operators deleted this client; it is not fetched again.
    #[error("blocked")]
    Blocked,
}

impl CimdError {
    /// A readable reason, for the page and the `error_description`.
    pub fn description(self) -> &'static str {
        match self {
            CimdError::Disabled => "this server does not accept URL client ids",
            CimdError::NotHttps => "a URL client_id must use https",
            CimdError::MalformedUrl => {
                "the client_id URL is malformed or not in normalized form (no fragment, user info, dot segments or '|')"
            }
            CimdError::NoPath => "a URL client_id must have a path",
            CimdError::NotJson => "the client metadata document is not a JSON object",
            CimdError::ClientIdMismatch => {
                "the client metadata document's client_id does not equal its URL"
            }
            CimdError::MissingName => "the client metadata document has no client_name",
            CimdError::NoRedirectUris => "the client metadata document has no redirect_uris",
            CimdError::SharedSecret => {
                "the client metadata document uses a shared-secret authentication method, which metadata documents must not"
            }
            CimdError::UnsupportedAuthMethod => {
                "the client metadata document's token_endpoint_auth_method is not supported (use none)"
            }
            CimdError::Invalid(d) => d,
            CimdError::Blocked => "this application has been blocked by the server's operators",
        }
    }
}

/// Whether a `client_id` is meant as a document URL (and so is never looked up elsewhere:
/// generated and configured ids cannot look like URLs).
pub fn is_url_client_id(id: &str) -> bool {
    let lower = id.get(..8).map(str::to_ascii_lowercase);
    lower.as_deref() == Some("https://")
        || lower.as_deref().is_some_and(|l| l.starts_with("http://"))
}

/// Parses a `client_id` URL: `https`, a path other than `/`, no fragment, no user info, no
/// dot segments, and already in normalized form (so the URL fetched is byte-for-byte the
/// identifier, and numeric host tricks such as `2130706433` or `0x7f.1` are refused here
/// rather than normalized into something else). With `allow_http_loopback`, `http` is
/// accepted too; the fetcher then insists the host is loopback.
pub fn parse_url(id: &str, allow_http_loopback: bool) -> Result<Url, CimdError> {
    if id.len() > MAX_URL_LEN {
        return Err(CimdError::MalformedUrl);
    }
    let url = Url::parse(id).map_err(|_| CimdError::MalformedUrl)?;
    match url.scheme() {
        "https" => {}
        "http" if allow_http_loopback => {}
        _ => return Err(CimdError::NotHttps),
    }
    if url.as_str() != id
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
        || id.contains('#')
        // Input validation only: `|` is not a URI character (RFC 3986 §2 wants it
        // percent-encoded) and `url` leaves it as sent. Store keys do not rely on this: the
        // store builds and parses them so that a client id holding `|` stays its own.
        || id.contains('|')
    {
        return Err(CimdError::MalformedUrl);
    }
    let raw_path = id
        .split_once("://")
        .and_then(|(_, rest)| rest.find('/').map(|i| &rest[i..]))
        .unwrap_or("");
    let raw_path = raw_path.split(['?', '#']).next().unwrap_or("");
    if raw_path.split('/').any(|seg| {
        matches!(
            seg.to_ascii_lowercase().as_str(),
            "." | ".." | "%2e" | "%2e%2e" | ".%2e" | "%2e."
        )
    }) {
        return Err(CimdError::MalformedUrl);
    }
    if url.path() == "/" || url.path().is_empty() {
        return Err(CimdError::NoPath);
    }
    Ok(url)
}

/// A document that passed validation.
#[derive(Debug, Clone)]
pub struct Document {
    /// The metadata, under the same rules as dynamic registration.
    pub metadata: ClientMetadata,
}

/// Validates a fetched document for the URL `id`.
pub fn validate(id: &str, body: &[u8], offered: &ScopeSet) -> Result<Document, CimdError> {
    let mut doc: Value = serde_json::from_slice(body).map_err(|_| CimdError::NotJson)?;
    let obj = doc.as_object_mut().ok_or(CimdError::NotJson)?;
    // Simple string comparison (RFC 3986 §6.2.1): no normalization on either side.
    if obj.get("client_id").and_then(Value::as_str) != Some(id) {
        return Err(CimdError::ClientIdMismatch);
    }
    if obj.contains_key("client_secret") || obj.contains_key("client_secret_expires_at") {
        return Err(CimdError::SharedSecret);
    }
    match obj.get("token_endpoint_auth_method") {
        None => {}
        Some(Value::String(m)) if m == "none" => {}
        Some(Value::String(m)) if m.starts_with("client_secret") => {
            return Err(CimdError::SharedSecret);
        }
        Some(Value::String(m)) if m == "private_key_jwt" => {
            return Err(CimdError::UnsupportedAuthMethod);
        }
        Some(_) => return Err(CimdError::UnsupportedAuthMethod),
    }
    let has_name = obj
        .get("client_name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.trim().is_empty());
    if !has_name {
        return Err(CimdError::MissingName);
    }
    let has_redirect = obj
        .get("redirect_uris")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if !has_redirect {
        return Err(CimdError::NoRedirectUris);
    }
    // Public client: the registration rules' default (client_secret_basic) does not apply.
    obj.insert("token_endpoint_auth_method".into(), Value::from("none"));
    let req: RegistrationRequest = serde_json::from_value(doc)
        .map_err(|_| CimdError::Invalid("the client metadata document has malformed members"))?;
    let metadata = req
        .validate(offered)
        .map_err(|e| CimdError::Invalid(e.description))?;
    if metadata.client_name.is_none() {
        return Err(CimdError::MissingName);
    }
    Ok(Document { metadata })
}

/// How long a valid document may be cached: `max-age` clamped to `[min, max]`; nothing for
/// `no-store` or `no-cache` (so it is fetched again each time); `min` without a `max-age`.
pub fn cache_secs(cache_control: Option<&str>, min: u64, max: u64) -> Option<u64> {
    let mut max_age = None;
    for d in cache_control.unwrap_or("").split(',') {
        let d = d.trim().to_ascii_lowercase();
        if d == "no-store" || d == "no-cache" {
            return None;
        }
        if let Some(v) = d.strip_prefix("max-age=") {
            max_age = v.trim_matches('"').parse::<u64>().ok().or(Some(0));
        }
    }
    Some(max_age.unwrap_or(min).clamp(min, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "https://app.example/oauth/client.json";

    fn offered() -> ScopeSet {
        ScopeSet::parse("read:user repo").unwrap()
    }

    fn doc(extra: &str) -> String {
        format!(
            r#"{{"client_id":"{URL}","client_name":"App","redirect_uris":["https://app.example/cb"]{extra}}}"#
        )
    }

    #[test]
    fn url_forms_that_count_as_documents() {
        assert!(parse_url(URL, false).is_ok());
        assert!(parse_url("https://app.example:8443/c?v=1", false).is_ok());
        assert_eq!(
            parse_url("https://app.example/", false).unwrap_err(),
            CimdError::NoPath
        );
        assert_eq!(
            parse_url("https://app.example", false).unwrap_err(),
            CimdError::MalformedUrl
        );
        assert_eq!(
            parse_url("http://app.example/c", false).unwrap_err(),
            CimdError::NotHttps
        );
        assert!(parse_url("http://127.0.0.1:9/c", true).is_ok());
        for bad in [
            "https://app.example/c#frag",
            "https://user@app.example/c",
            "https://u:p@app.example/c",
            "https://app.example/a/../c",
            "https://app.example/./c",
            "https://app.example/a/%2e%2e/c",
            "https://APP.example/c",
            "https://app.example:443/c",
            "https://2130706433/c",
            "https://0x7f.1/c",
            "https://127.1/c",
            "https://0177.0.0.1/c",
            "https://[::ffff:127.0.0.1]/c",
            "https://app.example/c d",
            "https://evil.example/x|y",
            "https://evil.example/x?a|b",
        ] {
            assert_eq!(
                parse_url(bad, false).unwrap_err(),
                CimdError::MalformedUrl,
                "{bad}"
            );
        }
    }

    #[test]
    fn only_url_shaped_ids_are_documents() {
        assert!(is_url_client_id(URL));
        assert!(is_url_client_id("HTTPS://x/y"));
        assert!(is_url_client_id("http://x/y"));
        assert!(!is_url_client_id("mcpc_abc"));
        assert!(!is_url_client_id("platform-cli"));
    }

    #[test]
    fn a_valid_document_is_a_public_client() {
        let d = validate(URL, doc("").as_bytes(), &offered()).unwrap();
        assert_eq!(d.metadata.client_name.as_deref(), Some("App"));
        assert_eq!(
            d.metadata.auth_method,
            crate::oauth::registration::TokenAuthMethod::None
        );
        assert!(
            validate(
                URL,
                doc(r#","token_endpoint_auth_method":"none""#).as_bytes(),
                &offered()
            )
            .is_ok()
        );
    }

    #[test]
    fn client_id_must_equal_the_url_byte_for_byte() {
        for other in [
            "https://app.example/oauth/client.json/",
            "https://APP.example/oauth/client.json",
            "https://evil.example/oauth/client.json",
        ] {
            let body = doc("").replace(URL, other);
            assert_eq!(
                validate(URL, body.as_bytes(), &offered()).unwrap_err(),
                CimdError::ClientIdMismatch
            );
        }
    }

    #[test]
    fn shared_secrets_are_refused() {
        for m in [
            "client_secret_basic",
            "client_secret_post",
            "client_secret_jwt",
        ] {
            let body = doc(&format!(r#","token_endpoint_auth_method":"{m}""#));
            assert_eq!(
                validate(URL, body.as_bytes(), &offered()).unwrap_err(),
                CimdError::SharedSecret
            );
        }
        let body = doc(r#","client_secret":"s""#);
        assert_eq!(
            validate(URL, body.as_bytes(), &offered()).unwrap_err(),
            CimdError::SharedSecret
        );
    }

    #[test]
    fn required_members_and_registration_rules() {
        let no_name =
            format!(r#"{{"client_id":"{URL}","redirect_uris":["https://app.example/cb"]}}"#);
        assert_eq!(
            validate(URL, no_name.as_bytes(), &offered()).unwrap_err(),
            CimdError::MissingName
        );
        let empty = format!(r#"{{"client_id":"{URL}","client_name":"A","redirect_uris":[]}}"#);
        assert_eq!(
            validate(URL, empty.as_bytes(), &offered()).unwrap_err(),
            CimdError::NoRedirectUris
        );
        let js = doc("").replace("https://app.example/cb", "javascript:alert(1)");
        assert!(matches!(
            validate(URL, js.as_bytes(), &offered()).unwrap_err(),
            CimdError::Invalid(_)
        ));
        assert_eq!(
            validate(URL, b"<html>", &offered()).unwrap_err(),
            CimdError::NotJson
        );
        assert_eq!(
            validate(URL, b"[1]", &offered()).unwrap_err(),
            CimdError::NotJson
        );
        assert_eq!(
            validate(
                URL,
                doc(r#","token_endpoint_auth_method":"private_key_jwt""#).as_bytes(),
                &offered()
            )
            .unwrap_err(),
            CimdError::UnsupportedAuthMethod
        );
    }

    #[test]
    fn cache_lifetime_respects_headers_within_bounds() {
        assert_eq!(cache_secs(None, 60, 3600), Some(60));
        assert_eq!(cache_secs(Some("max-age=600"), 60, 3600), Some(600));
        assert_eq!(
            cache_secs(Some("public, max-age=999999"), 60, 3600),
            Some(3600)
        );
        assert_eq!(cache_secs(Some("max-age=5"), 60, 3600), Some(60));
        assert_eq!(cache_secs(Some("no-store"), 60, 3600), None);
        assert_eq!(cache_secs(Some("max-age=600, no-cache"), 60, 3600), None);
    }
}
