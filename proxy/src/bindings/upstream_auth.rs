//! Binding: inbound credentials stay at the proxy. The request to the backend is built from
//! an allow-list of MCP headers; the client's `Authorization`, cookies and anything else are
//! never copied, and the backend credential is set by the proxy alone. Responses are filtered
//! the same way, so nothing the backend says about its own authentication reaches the client.

use http::{HeaderMap, HeaderName, HeaderValue, header};

use super::audience::Audienced;
use crate::ids::GitHubToken;
use crate::store::records::AccessTokenRecord;

/// Request headers copied to the backend (plus every `Mcp-Param-*`).
const REQUEST_ALLOW: &[&str] = &[
    "accept",
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "mcp-method",
    "mcp-name",
];
// `traceparent` and `tracestate` are not on the list: they are not copied but produced anew
// by `telemetry::span::inject_backend` from their parsed value (the backend call's own span
// context when traces are exported, else the client's context; a malformed value is dropped).

/// Response headers copied to the client.
const RESPONSE_ALLOW: &[&str] = &[
    "content-type",
    "mcp-session-id",
    "mcp-protocol-version",
    "retry-after",
    "last-event-id",
];

/// What the backend is given instead of the client's token. Made only from a person's GitHub
/// token for a request already proven to carry an audience-checked token.
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

fn allowed_request_header(name: &HeaderName) -> bool {
    let n = name.as_str();
    REQUEST_ALLOW.contains(&n) || n.starts_with("mcp-param-")
}

/// The headers for the backend request: the allow-listed inbound ones, then the proxy's own
/// credential.
pub fn upstream_headers(inbound: &HeaderMap, credential: BackendCredential) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in inbound {
        if allowed_request_header(name) {
            out.append(name.clone(), value.clone());
        }
    }
    // The allow-list never contains it; removing first keeps that true if the list grows.
    out.remove(header::AUTHORIZATION);
    out.insert(header::AUTHORIZATION, credential.0);
    out
}

/// The headers for the client response: allow-listed backend headers only.
pub fn downstream_headers(backend: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    for (name, value) in backend {
        if RESPONSE_ALLOW.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
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

    #[test]
    fn inbound_authorization_never_copied() {
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&inbound(), cred);
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
        let out = upstream_headers(&h, cred);
        assert!(out.get("traceparent").is_none() && out.get("tracestate").is_none());
    }

    #[test]
    fn unknown_headers_dropped() {
        let cred = BackendCredential::github_token(&checked(), &GitHubToken::new("gho_x")).unwrap();
        let out = upstream_headers(&inbound(), cred);
        for gone in ["cookie", "x-forwarded-for", "proxy-authorization"] {
            assert!(out.get(gone).is_none(), "{gone}");
        }
        for kept in [
            "mcp-session-id",
            "mcp-protocol-version",
            "mcp-param-region",
            "accept",
        ] {
            assert!(out.get(kept).is_some(), "{kept}");
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
        let out = downstream_headers(&b);
        assert_eq!(out.len(), 2);
        assert!(
            out.get("www-authenticate").is_none()
                && out.get("set-cookie").is_none()
                && out.get("authorization").is_none()
        );
    }

    #[test]
    fn credential_debug_is_redacted() {
        let cred =
            BackendCredential::github_token(&checked(), &GitHubToken::new("gho_secret")).unwrap();
        assert_eq!(format!("{cred:?}"), "BackendCredential([redacted])");
    }
}
