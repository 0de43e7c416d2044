//! Binding: inbound credentials stay at the proxy. The request to the backend is built from
//! an allow-list of MCP headers; the client's `Authorization`, cookies and anything else are
//! never copied, and the backend credential is set by the proxy alone. Responses are filtered
//! the same way, so nothing the backend says about its own authentication reaches the client.

use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::audience::Audienced;
use super::session_binding::Version;
use super::session_binding::{self, SessionChecked};
use crate::ids::GitHubToken;
use crate::store::records::AccessTokenRecord;

/// Request headers copied to the backend whatever the protocol version.
const REQUEST_ALLOW: &[&str] = &["accept", "content-type"];
/// Copied only for 2025-x (sessions, resumable streams).
const REQUEST_ALLOW_SESSIONS: &[&str] = &["last-event-id"];
/// Copied only for 2026-07-28 (mirrored headers, plus every `Mcp-Param-*`).
const REQUEST_ALLOW_STATELESS: &[&str] = &["mcp-method", "mcp-name"];
// `Mcp-Session-Id` and `MCP-Protocol-Version` are not on any list: they are never copied, but
// set from the values `bindings::session_binding` checked (the session id only for 2025-x).
// `traceparent` and `tracestate` are not on the list: they are not copied but produced anew
// by `telemetry::span::inject_backend` from their parsed value (the backend call's own span
// context when traces are exported, else the client's context; a malformed value is dropped).

/// Response headers copied to the client (`Mcp-Session-Id` apart: see `downstream_headers`).
const RESPONSE_ALLOW: &[&str] = &[
    "content-type",
    "mcp-protocol-version",
    "retry-after",
    "last-event-id",
];

/// What the backend is given instead of the client's token. Made only from a person's GitHub
/// token or a backend token, for a request already proven to carry an audience-checked token
/// ([`BackendCredential::github_token`], [`BackendCredential::backend_token`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::upstream_auth::BackendCredential;
/// // Private field: the client's own header cannot become the backend's credential.
/// fn forge(client_authorization: http::HeaderValue) -> BackendCredential {
///     BackendCredential(client_authorization)
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::audience::Audienced;
/// use mcp_oauth_proxy::bindings::upstream_auth::BackendCredential;
/// use mcp_oauth_proxy::ids::BackendToken;
/// use mcp_oauth_proxy::store::records::AccessTokenRecord;
/// fn credential(
///     checked: &Audienced<AccessTokenRecord>,
///     token: &BackendToken,
/// ) -> Option<BackendCredential> {
///     BackendCredential::backend_token(checked, token)
/// }
/// ```
pub struct BackendCredential(HeaderValue);

impl std::fmt::Debug for BackendCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackendCredential([redacted])")
    }
}

impl BackendCredential {
    /// `Bearer <backend token>` for `auth = "exchange"` backends: a short-lived token of
    /// this server that the backend exchanges (RFC 8693) when it needs GitHub.
    pub fn backend_token(
        _checked: &Audienced<AccessTokenRecord>,
        token: &crate::ids::BackendToken,
    ) -> Option<BackendCredential> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.secret())).ok()?;
        v.set_sensitive(true);
        Some(BackendCredential(v))
    }

    /// `Bearer <GitHub token>` for `auth = "github_token"` backends.
    pub fn github_token(
        _checked: &Audienced<AccessTokenRecord>,
        token: &GitHubToken,
    ) -> Option<BackendCredential> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", token.secret())).ok()?;
        v.set_sensitive(true);
        Some(BackendCredential(v))
    }
}

/// Whether a request header is one `version` uses and the backend may see. A header the
/// version does not use is stripped, not passed on.
fn allowed_request_header(version: Version, name: &HeaderName) -> bool {
    let n = name.as_str();
    REQUEST_ALLOW.contains(&n)
        || match version {
            Version::Sessions => REQUEST_ALLOW_SESSIONS.contains(&n),
            Version::Stateless => {
                REQUEST_ALLOW_STATELESS.contains(&n) || n.starts_with("mcp-param-")
            }
        }
}

/// The headers for the backend request: the allow-listed inbound ones for this protocol
/// version, the session id and protocol version as checked, then the proxy's own credential.
pub fn upstream_headers(
    inbound: &HeaderMap,
    checked: &SessionChecked,
    credential: BackendCredential,
) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in inbound {
        if allowed_request_header(checked.version(), name) {
            out.append(name.clone(), value.clone());
        }
    }
    for (name, value) in checked.upstream() {
        out.insert(name, value);
    }
    // The allow-list never contains it; removing first keeps that true if the list grows.
    out.remove(header::AUTHORIZATION);
    out.insert(header::AUTHORIZATION, credential.0);
    out
}

/// The headers for the client response: allow-listed backend headers only. `Mcp-Session-Id`
/// only for 2025-x, and only a single visible-ASCII value (the one the gateway binds).
pub fn downstream_headers(backend: &HeaderMap, version: Version) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in backend {
        if RESPONSE_ALLOW.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    if version == Version::Sessions
        && let Some(sid) = session_binding::minted_session_id(backend)
        && let Ok(v) = HeaderValue::from_str(sid)
    {
        out.insert(session_binding::SESSION_ID, v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::audience::audienced;
    use crate::clock::UnixTime;
    use crate::ids::{ClientId, FamilyId, UserId};
    use crate::oauth::scope::ScopeSet;

    fn checked() -> Audienced<AccessTokenRecord> {
        let rec = AccessTokenRecord {
            family_id: FamilyId::new("f"),
            user_id: UserId::github(1),
            client_id: ClientId::new("c"),
            scopes: ScopeSet::default(),
            resource: "r".into(),
            issued_at: UnixTime(0),
            expires_at: UnixTime(1),
            branch: None,
        };
        audienced(rec, "r").unwrap()
    }

    fn inbound() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            "Bearer mcpat_client_token".parse().unwrap(),
        );
        h.insert("cookie", "__Host-mcp-session=abc".parse().unwrap());
        h.insert("x-forwarded-for", "10.0.0.1".parse().unwrap());
        h.insert("proxy-authorization", "Basic eA==".parse().unwrap());
        h.insert("mcp-session-id", "s1".parse().unwrap());
        h.insert("mcp-protocol-version", "2025-11-25".parse().unwrap());
        h.insert("mcp-param-region", "eu".parse().unwrap());
        h.insert(
            "accept",
            "application/json, text/event-stream".parse().unwrap(),
        );
        h
    }

    fn checked_2025() -> SessionChecked {
        SessionChecked::for_tests(Some("2025-11-25"), Some("s1"))
    }

    #[test]
    fn inbound_authorization_never_copied() {
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&inbound(), &checked_2025(), cred);
        let auth: Vec<_> = out.get_all("authorization").iter().collect();
        assert_eq!(auth.len(), 1);
        assert_eq!(auth[0], "Bearer gho_x");
    }

    #[test]
    fn trace_context_is_not_copied_but_left_to_telemetry() {
        let mut h = inbound();
        h.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        h.insert("tracestate", "k=v".parse().unwrap());
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&h, &checked_2025(), cred);
        assert!(out.get("traceparent").is_none() && out.get("tracestate").is_none());
    }

    #[test]
    fn unknown_headers_dropped() {
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&inbound(), &checked_2025(), cred);
        for gone in ["cookie", "x-forwarded-for", "proxy-authorization"] {
            assert!(out.get(gone).is_none(), "{gone}");
        }
        for kept in ["mcp-session-id", "mcp-protocol-version", "accept"] {
            assert!(out.get(kept).is_some(), "{kept}");
        }
    }

    #[test]
    fn session_and_version_headers_come_only_from_the_checked_values() {
        let mut h = inbound();
        // Whatever the raw map holds (a second value, another person's id), the backend sees
        // exactly the checked values.
        h.append("mcp-session-id", "alices-session".parse().unwrap());
        h.append("mcp-protocol-version", "2026-07-28".parse().unwrap());
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&h, &checked_2025(), cred);
        let sid: Vec<_> = out.get_all("mcp-session-id").iter().collect();
        assert_eq!(sid, ["s1"]);
        let ver: Vec<_> = out.get_all("mcp-protocol-version").iter().collect();
        assert_eq!(ver, ["2025-11-25"]);
        // No session checked, no session id forwarded, whatever the request carried.
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let none = SessionChecked::for_tests(Some("2025-11-25"), None);
        assert!(
            upstream_headers(&h, &none, cred)
                .get("mcp-session-id")
                .is_none()
        );
    }

    #[test]
    fn headers_the_version_does_not_use_are_stripped() {
        let mut h = inbound();
        h.insert("last-event-id", "7".parse().unwrap());
        h.insert("mcp-method", "tools/call".parse().unwrap());
        h.insert("mcp-name", "whoami".parse().unwrap());
        // 2025-x: sessions and resumption; no mirrored 2026-07-28 headers.
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&h, &checked_2025(), cred);
        for kept in ["mcp-session-id", "last-event-id"] {
            assert!(out.get(kept).is_some(), "{kept}");
        }
        for gone in ["mcp-method", "mcp-name", "mcp-param-region"] {
            assert!(out.get(gone).is_none(), "{gone}");
        }
        // 2026-07-28: no sessions, no resumption; the mirrored headers pass untouched.
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let stateless = SessionChecked::for_tests(Some("2026-07-28"), Some("s1"));
        let out = upstream_headers(&h, &stateless, cred);
        for gone in ["mcp-session-id", "last-event-id"] {
            assert!(out.get(gone).is_none(), "{gone}");
        }
        for (kept, v) in [
            ("mcp-method", "tools/call"),
            ("mcp-name", "whoami"),
            ("mcp-param-region", "eu"),
            ("mcp-protocol-version", "2026-07-28"),
        ] {
            assert_eq!(out.get(kept).unwrap(), v, "{kept}");
        }
    }

    #[test]
    fn backend_auth_headers_not_in_response() {
        let mut b = HeaderMap::new();
        b.insert("www-authenticate", "Bearer realm=backend".parse().unwrap());
        b.insert("set-cookie", "backend=1".parse().unwrap());
        b.insert("authorization", "Bearer gho_x".parse().unwrap());
        b.insert("content-type", "text/event-stream".parse().unwrap());
        b.insert("mcp-session-id", "s1".parse().unwrap());
        let out = downstream_headers(&b, Version::Sessions);
        assert_eq!(out.len(), 2);
        assert!(
            out.get("www-authenticate").is_none()
                && out.get("set-cookie").is_none()
                && out.get("authorization").is_none()
        );
    }

    #[test]
    fn response_session_id_only_when_single_and_only_for_sessions() {
        let mut b = HeaderMap::new();
        b.insert("mcp-session-id", "s1".parse().unwrap());
        assert!(
            downstream_headers(&b, Version::Stateless)
                .get("mcp-session-id")
                .is_none()
        );
        b.append("mcp-session-id", "s2".parse().unwrap());
        assert!(
            downstream_headers(&b, Version::Sessions)
                .get("mcp-session-id")
                .is_none()
        );
        let mut odd = HeaderMap::new();
        odd.insert("mcp-session-id", HeaderValue::from_bytes(b"s\xe9").unwrap());
        assert!(
            downstream_headers(&odd, Version::Sessions)
                .get("mcp-session-id")
                .is_none()
        );
    }

    #[test]
    fn credential_debug_is_redacted() {
        let cred =
            BackendCredential::github_token(&checked(), &GitHubToken::new("gho_secret")).unwrap();
        assert_eq!(format!("{cred:?}"), "BackendCredential([redacted])");
    }
}
