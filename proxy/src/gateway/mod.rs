//! The `/mcp` gateway. Every request is authenticated (Bearer header only; a local lookup, no
//! GitHub call), audience-checked, scope-checked, and its MCP session or request state must
//! belong to the caller; then it is forwarded to the backend with the proxy's own credential,
//! and the response streams back unbuffered.

pub mod forward;
pub mod jsonrpc;

use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::audience::Audienced;
use crate::bindings::session_binding::{self, SessionBound};
use crate::bindings::upstream_auth::BackendCredential;
use crate::config::BackendAuth;
use crate::flows::access::{self, TokenRejection};
use crate::github::grants::GrantError;
use crate::store::StoreError;
use crate::store::records::AccessTokenRecord;
pub use forward::Forwarded;
use jsonrpc::{Inbound, Version};

/// Why `/mcp` refused a request. `http::error` maps each to its response.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// `Origin` present and not allowed (DNS rebinding, cross-site pages).
    #[error("origin not allowed")]
    ForbiddenOrigin,
    /// A token in the query string.
    #[error("token in query string")]
    TokenInQuery,
    /// No bearer token.
    #[error("no token")]
    NoToken,
    /// A token that is not a live token of this server for this resource.
    #[error("invalid token: {0:?}")]
    InvalidToken(TokenRejection),
    /// The token lacks scopes `/mcp` requires.
    #[error("insufficient scope")]
    InsufficientScope(String),
    /// Unknown `Mcp-Session-Id` or `requestState`, or one that belongs to someone else.
    #[error("unknown session")]
    UnknownSession,
    /// A request without a JSON-RPC id-bearing body where a session is needed.
    #[error("GitHub access missing")]
    GitHubAccessMissing {
        /// JSON-RPC id to answer, if the request had one.
        id: Option<String>,
    },
    /// No backend configured.
    #[error("no backend configured")]
    NoBackend,
    /// The backend could not be reached or answered badly.
    #[error("backend unavailable: {0}")]
    Backend(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An inbound `/mcp` request.
#[derive(Debug)]
pub struct McpRequest {
    /// Method.
    pub method: Method,
    /// Headers.
    pub headers: HeaderMap,
    /// Raw query string.
    pub query: Option<String>,
    /// Body (requests are small; responses stream).
    pub body: Bytes,
}

/// What the client declared about itself for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientContext {
    /// Protocol generation.
    pub version: Version,
    /// URL-mode elicitation declared (in `initialize` for 2025-x, in `_meta` for 2026-07-28).
    pub url_elicitation: bool,
}

/// Whether `origin` may call `/mcp`: the proxy's own origin or a configured one.
pub fn origin_allowed(app: &App, origin: &str) -> bool {
    origin == app.config.public_url.origin()
        || app.config.allowed_origins.iter().any(|o| o == origin)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

async fn reject_token(
    app: &App,
    reason: &'static str,
    err: GatewayError,
) -> Result<Forwarded, GatewayError> {
    app.audit
        .record(AuditEvent::TokenRejected { reason })
        .await?;
    Err(err)
}

/// Handles one `/mcp` request.
pub async fn handle(app: &App, req: McpRequest) -> Result<Forwarded, GatewayError> {
    if let Some(origin) = header(&req.headers, "origin")
        && !origin_allowed(app, origin)
    {
        return Err(GatewayError::ForbiddenOrigin);
    }
    let in_query = req.query.as_deref().is_some_and(|q| {
        url::form_urlencoded::parse(q.as_bytes()).any(|(k, _)| k == "access_token")
    });
    if in_query {
        return reject_token(app, "in_query", GatewayError::TokenInQuery).await;
    }
    let Some(bearer) = header(&req.headers, "authorization").and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }) else {
        return reject_token(app, "missing", GatewayError::NoToken).await;
    };
    let token = match access::authenticate(app, bearer).await? {
        Ok(t) => t,
        Err(r) => {
            let reason = match r {
                TokenRejection::Unknown => "unknown",
                TokenRejection::Revoked => "revoked",
                TokenRejection::WrongAudience => "wrong_audience",
            };
            return reject_token(app, reason, GatewayError::InvalidToken(r)).await;
        }
    };
    let Some(backend) = app.config.backend.clone() else {
        return Err(GatewayError::NoBackend);
    };
    let missing: Vec<&str> = backend
        .required_scopes
        .iter()
        .map(String::as_str)
        .filter(|s| !token.get().scopes.iter().any(|t| t == *s))
        .collect();
    if !missing.is_empty() {
        return reject_token(
            app,
            "insufficient_scope",
            GatewayError::InsufficientScope(backend.required_scopes.join(" ")),
        )
        .await;
    }

    let version = Version::from_header(header(&req.headers, "mcp-protocol-version"));
    let inbound = if req.method == Method::POST {
        jsonrpc::inspect_request(&req.body)
    } else {
        Inbound::default()
    };
    let session_id = header(&req.headers, "mcp-session-id").map(str::to_owned);
    let session = check_handles(app, &token, version, session_id.as_deref(), &inbound).await?;
    let context = ClientContext {
        version,
        url_elicitation: match version {
            Version::Sessions => session.as_ref().is_some_and(|s| s.get().url_elicitation),
            Version::Stateless => inbound.request_declares_url_elicitation,
        },
    };

    let credential = match backend.auth {
        BackendAuth::GitHubToken => match app.grants.access_token(&token.get().user_id).await {
            Ok(gh) => BackendCredential::github_token(&token, &gh)
                .ok_or_else(|| GatewayError::Backend("credential".into()))?,
            Err(GrantError::Missing | GrantError::Broken) => {
                return Err(GatewayError::GitHubAccessMissing {
                    id: inbound.id.clone(),
                });
            }
            Err(GrantError::Store(e)) => return Err(e.into()),
            Err(e) => return Err(GatewayError::Backend(e.to_string())),
        },
    };
    let is_delete = req.method == Method::DELETE;
    let forwarded =
        forward::forward(app, &backend, token, credential, req, inbound, context).await?;
    if is_delete
        && forwarded.status.is_success()
        && let (Some(s), Some(id)) = (&session, &session_id)
    {
        session_binding::forget_session(app.store.as_ref(), s, id).await?;
    }
    Ok(forwarded)
}

/// Checks the session id (2025-x) and any echoed `requestState` belong to this caller.
async fn check_handles(
    app: &App,
    token: &Audienced<AccessTokenRecord>,
    version: Version,
    session_id: Option<&str>,
    inbound: &Inbound,
) -> Result<Option<SessionBound>, GatewayError> {
    let store = app.store.as_ref();
    let reject = |kind: &'static str| AuditEvent::HandleRejected {
        user_id: token.get().user_id.clone(),
        client_id: token.get().client_id.clone(),
        kind,
    };
    let mut bound = None;
    // 2026-07-28 has no sessions: a stray header is ignored by the backend, and never bound.
    if version == Version::Sessions
        && let Some(id) = session_id
    {
        match session_binding::check_session(store, id, token).await? {
            Ok(s) => bound = Some(s),
            Err(_) => {
                app.audit.record(reject("session")).await?;
                return Err(GatewayError::UnknownSession);
            }
        }
    }
    if let Some(state) = &inbound.request_state
        && session_binding::check_request_state(store, state, token)
            .await?
            .is_err()
    {
        app.audit.record(reject("request_state")).await?;
        return Err(GatewayError::UnknownSession);
    }
    Ok(bound)
}
