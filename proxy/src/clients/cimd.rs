//! Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document-01), the pure
//! part: which `client_id`s are document URLs, what a valid document is, and how long one may
//! be cached. No I/O here; `fetch` gets the bytes.

use serde_json::Value;
use url::Url;

use super::jwks::{self, KeySource};
use crate::oauth::registration::{ClientMetadata, RegistrationRequest, TokenAuthMethod};
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
    /// No authentication method this server supports (`none`, or `private_key_jwt` with
    /// keys).
    #[error("unsupported auth method")]
    UnsupportedAuthMethod,
    /// `private_key_jwt` only, without `jwks` or `jwks_uri`.
    #[error("no keys")]
    NoKeys,
    /// Both `jwks` and `jwks_uri`, an unusable `jwks`, or a `jwks_uri` that is not a URL we
    /// would fetch.
    #[error("bad keys")]
    BadKeys(&'static str),
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
                "the client metadata document's token_endpoint_auth_method is not supported (use none or private_key_jwt)"
            }
            CimdError::NoKeys => {
                "the client metadata document uses private_key_jwt but has neither jwks nor jwks_uri"
            }
            CimdError::BadKeys(d) => d,
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
    /// The metadata, under the same rules as dynamic registration; `auth_method` is the one
    /// chosen ([`choose_method`]).
    pub metadata: ClientMetadata,
    /// The client's keys, when it authenticates with `private_key_jwt`.
    pub keys: Option<KeySource>,
}

/// The authentication methods a document declares: `token_endpoint_auth_method` (a string,
/// or a list where a document gives one) and `token_endpoint_auth_methods_supported` if
/// present. Nothing declared is `none`.
fn declared_methods(obj: &serde_json::Map<String, Value>) -> Result<Vec<String>, CimdError> {
    let mut out = Vec::new();
    for member in [
        "token_endpoint_auth_method",
        "token_endpoint_auth_methods_supported",
    ] {
        match obj.get(member) {
            None | Some(Value::Null) => {}
            Some(Value::String(m)) => out.push(m.clone()),
            Some(Value::Array(list)) => {
                for m in list {
                    out.push(
                        m.as_str()
                            .ok_or(CimdError::UnsupportedAuthMethod)?
                            .to_owned(),
                    );
                }
            }
            Some(_) => return Err(CimdError::UnsupportedAuthMethod),
        }
    }
    if out.is_empty() {
        out.push("none".to_owned());
    }
    Ok(out)
}

/// Chooses one method we support from those declared: `private_key_jwt` when the document
/// has keys (it authenticates the client, `none` does not), else `none`. Shared-secret
/// methods are never chosen (nobody issued the secret), and a document declaring only those
/// is refused as such.
pub fn choose_method(declared: &[String], has_keys: bool) -> Result<TokenAuthMethod, CimdError> {
    let has = |m: &str| declared.iter().any(|d| d == m);
    if has("private_key_jwt") && has_keys {
        Ok(TokenAuthMethod::PrivateKeyJwt)
    } else if has("none") {
        Ok(TokenAuthMethod::None)
    } else if has("private_key_jwt") {
        Err(CimdError::NoKeys)
    } else if declared.iter().any(|d| d.starts_with("client_secret")) {
        Err(CimdError::SharedSecret)
    } else {
        Err(CimdError::UnsupportedAuthMethod)
    }
}

/// The document's keys: `jwks` (checked here) or `jwks_uri` (a URL under the same rules as a
/// client id URL: https, or http to loopback with the development setting). Not both.
fn document_keys(
    obj: &serde_json::Map<String, Value>,
    allow_http_loopback: bool,
) -> Result<Option<KeySource>, CimdError> {
    match (obj.get("jwks"), obj.get("jwks_uri")) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(CimdError::BadKeys(
            "the client metadata document has both jwks and jwks_uri",
        )),
        (Some(set), None) => jwks::parse_set(set)
            .map(|s| Some(KeySource::Inline(std::sync::Arc::new(s))))
            .map_err(|e| CimdError::BadKeys(e.description())),
        (None, Some(uri)) => {
            let uri = uri.as_str().ok_or(CimdError::BadKeys(
                "the client metadata document's jwks_uri is not a string",
            ))?;
            parse_url(uri, allow_http_loopback)
                .map(|u| Some(KeySource::Uri(u)))
                .map_err(|_| {
                    CimdError::BadKeys(
                        "the client metadata document's jwks_uri must be an https URL in normalized form",
                    )
                })
        }
    }
}

/// Validates a fetched document for the URL `id`. With `allow_http_loopback` (the
/// development setting) a `jwks_uri` may be plain http to loopback, as the id may.
pub fn validate(
    id: &str,
    body: &[u8],
    offered: &ScopeSet,
    allow_http_loopback: bool,
) -> Result<Document, CimdError> {
    let mut doc: Value = serde_json::from_slice(body).map_err(|_| CimdError::NotJson)?;
    let obj = doc.as_object_mut().ok_or(CimdError::NotJson)?;
    // Simple string comparison (RFC 3986 §6.2.1): no normalization on either side.
    if obj.get("client_id").and_then(Value::as_str) != Some(id) {
        return Err(CimdError::ClientIdMismatch);
    }
    if obj.contains_key("client_secret") || obj.contains_key("client_secret_expires_at") {
        return Err(CimdError::SharedSecret);
    }
    let declared = declared_methods(obj)?;
    let keys = document_keys(obj, allow_http_loopback)?;
    let method = choose_method(&declared, keys.is_some())?;
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
    // No shared secret either way: the registration rules' default (client_secret_basic)
    // does not apply, and the chosen method is set below.
    obj.insert("token_endpoint_auth_method".into(), Value::from("none"));
    obj.remove("token_endpoint_auth_methods_supported");
    let req: RegistrationRequest = serde_json::from_value(doc)
        .map_err(|_| CimdError::Invalid("the client metadata document has malformed members"))?;
    let mut metadata = req
        .validate(offered)
        .map_err(|e| CimdError::Invalid(e.description))?;
    if metadata.client_name.is_none() {
        return Err(CimdError::MissingName);
    }
    metadata.auth_method = method;
    let keys = keys.filter(|_| method == TokenAuthMethod::PrivateKeyJwt);
    Ok(Document { metadata, keys })
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
        let d = validate(URL, doc("").as_bytes(), &offered(), false).unwrap();
        assert_eq!(d.metadata.client_name.as_deref(), Some("App"));
        assert_eq!(
            d.metadata.auth_method,
            crate::oauth::registration::TokenAuthMethod::None
        );
        assert!(
            validate(
                URL,
                doc(r#","token_endpoint_auth_method":"none""#).as_bytes(),
                &offered(),
                false
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
                validate(URL, body.as_bytes(), &offered(), false).unwrap_err(),
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
                validate(URL, body.as_bytes(), &offered(), false).unwrap_err(),
                CimdError::SharedSecret
            );
        }
        let body = doc(r#","client_secret":"s""#);
        assert_eq!(
            validate(URL, body.as_bytes(), &offered(), false).unwrap_err(),
            CimdError::SharedSecret
        );
    }

    #[test]
    fn required_members_and_registration_rules() {
        let no_name =
            format!(r#"{{"client_id":"{URL}","redirect_uris":["https://app.example/cb"]}}"#);
        assert_eq!(
            validate(URL, no_name.as_bytes(), &offered(), false).unwrap_err(),
            CimdError::MissingName
        );
        let empty = format!(r#"{{"client_id":"{URL}","client_name":"A","redirect_uris":[]}}"#);
        assert_eq!(
            validate(URL, empty.as_bytes(), &offered(), false).unwrap_err(),
            CimdError::NoRedirectUris
        );
        let js = doc("").replace("https://app.example/cb", "javascript:alert(1)");
        assert!(matches!(
            validate(URL, js.as_bytes(), &offered(), false).unwrap_err(),
            CimdError::Invalid(_)
        ));
        assert_eq!(
            validate(URL, b"<html>", &offered(), false).unwrap_err(),
            CimdError::NotJson
        );
        assert_eq!(
            validate(URL, b"[1]", &offered(), false).unwrap_err(),
            CimdError::NotJson
        );
        assert_eq!(
            validate(
                URL,
                doc(r#","token_endpoint_auth_method":"private_key_jwt""#).as_bytes(),
                &offered(),
                false
            )
            .unwrap_err(),
            CimdError::NoKeys
        );
    }

    #[test]
    fn one_supported_method_is_chosen_from_those_listed() {
        let m = |v: &[&str], keys| {
            choose_method(&v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>(), keys)
        };
        assert_eq!(
            m(&["private_key_jwt", "none"], true),
            Ok(TokenAuthMethod::PrivateKeyJwt)
        );
        assert_eq!(
            m(&["private_key_jwt", "none"], false),
            Ok(TokenAuthMethod::None)
        );
        assert_eq!(
            m(&["client_secret_basic", "none"], false),
            Ok(TokenAuthMethod::None)
        );
        assert_eq!(
            m(&["client_secret_post", "private_key_jwt"], true),
            Ok(TokenAuthMethod::PrivateKeyJwt)
        );
        assert_eq!(m(&["private_key_jwt"], false), Err(CimdError::NoKeys));
        assert_eq!(
            m(&["client_secret_jwt"], true),
            Err(CimdError::SharedSecret)
        );
        assert_eq!(
            m(&["tls_client_auth"], true),
            Err(CimdError::UnsupportedAuthMethod)
        );
    }

    #[test]
    fn keys_come_from_jwks_or_an_https_jwks_uri_not_both() {
        let pk = r#","token_endpoint_auth_method":"private_key_jwt""#;
        let d = validate(
            URL,
            doc(&format!(
                r#"{pk},"jwks_uri":"https://app.example/jwks.json""#
            ))
            .as_bytes(),
            &offered(),
            false,
        )
        .unwrap();
        assert_eq!(d.metadata.auth_method, TokenAuthMethod::PrivateKeyJwt);
        assert!(matches!(d.keys, Some(KeySource::Uri(_))));
        for bad in [
            r#","jwks_uri":"http://app.example/jwks.json""#,
            r#","jwks_uri":"https://app.example/jwks.json","jwks":{"keys":[]}"#,
            r#","jwks":{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#,
            r#","jwks_uri":7"#,
        ] {
            assert!(
                matches!(
                    validate(
                        URL,
                        doc(&format!("{pk}{bad}")).as_bytes(),
                        &offered(),
                        false
                    ),
                    Err(CimdError::BadKeys(_))
                ),
                "{bad}"
            );
        }
        // The list form (token_endpoint_auth_methods_supported), without keys: none.
        let d = validate(
            URL,
            doc(r#","token_endpoint_auth_methods_supported":["private_key_jwt","none"]"#)
                .as_bytes(),
            &offered(),
            false,
        )
        .unwrap();
        assert_eq!(d.metadata.auth_method, TokenAuthMethod::None);
        assert!(d.keys.is_none());
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
