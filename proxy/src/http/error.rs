//! The one place where errors become HTTP responses. JSON endpoints answer OAuth-shaped
//! errors (RFC 6749 §5.2) with `no-store`; browser endpoints answer a readable page (or, once
//! the client and redirect URI are verified, a redirect carrying `iss`). Our own failures get
//! a generic message and a request id; the cause goes only to the log.

use axum::Json;
use axum::response::{Html, IntoResponse, Redirect, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use crate::bindings::session_binding::BadTransportHeader;
use crate::flows::register::Refusal;
use crate::flows::{FlowError, PageProblem, pages};
use crate::gateway::GatewayError;
use crate::oauth::error::{ErrorCode, OAuthError};

/// The id of the request being answered: the one in its `X-Request-Id` header, its log span
/// and its audit events (`http/request_id.rs` sets it for every request), so the id a person
/// quotes from an error page finds that request's trail. Outside a request (or when the id
/// could not be generated) there is none to show.
fn request_id() -> String {
    crate::audit::request_id::current().unwrap_or_else(|| "unavailable".to_owned())
}

/// Logs an internal failure and returns the id shown to the caller.
fn internal(e: &FlowError) -> String {
    let id = request_id();
    tracing::error!(request_id = %id, error = %e, "request failed");
    id
}

/// An error page.
pub fn page(p: PageProblem, request_id: String) -> Response {
    let html = consent_ui::ErrorPage {
        title: p.title.to_owned(),
        message: p.message.to_owned(),
        request_id,
    }
    .to_string();
    let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = (status, Html(html)).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        // As for `/token`'s `temporarily_unavailable`: the fetch budget refills per minute.
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
    }
    resp
}

/// JSON OAuth error response.
pub fn oauth_json(e: &OAuthError) -> Response {
    crate::telemetry::span::record_outcome(e.code.as_str());
    let status = match e.code {
        ErrorCode::InvalidClient | ErrorCode::InvalidToken => StatusCode::UNAUTHORIZED,
        ErrorCode::SlowDown => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::ServerError => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::TemporarilyUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::BAD_REQUEST,
    };
    let mut resp = (
        status,
        Json(json!({"error": e.code.as_str(), "error_description": e.description})),
    )
        .into_response();
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    if e.code == ErrorCode::InvalidClient {
        h.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"mcp-oauth-proxy\""),
        );
    }
    if e.code == ErrorCode::TemporarilyUnavailable {
        // A minute: the metadata-document fetch budget refills per minute.
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
    }
    resp
}

/// A rate-limited request to `/register` or `/token`: 429 with `Retry-After`. RFC 6749 and
/// RFC 7591 define no rate-limit error; `slow_down` (RFC 8628 §3.5, registered for the token
/// endpoint) is the only registered code that means "you are sending too fast", and unlike
/// `temporarily_unavailable` (authorization endpoint, 503) it does not claim the server is
/// down. Clients act on the status and `Retry-After`.
pub fn rate_limited(r: &crate::limits::RateLimited) -> Response {
    let description = match r.bucket {
        crate::limits::Bucket::PerIp => {
            "too many requests from this address; retry after the number of seconds in Retry-After"
        }
        crate::limits::Bucket::Global => {
            "the server is receiving too many requests; retry after the number of seconds in Retry-After"
        }
    };
    let mut resp = oauth_json(&OAuthError::new(ErrorCode::SlowDown, description));
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(r.retry_after_secs));
    resp
}

/// A `POST /register` the registration policy refused (RFC 7591 §3: the initial access token
/// is a Bearer token, so a missing or wrong one is RFC 6750's `invalid_token` with 401).
fn registration_refused(r: Refusal) -> Response {
    let (status, code, description, challenge) = match r {
        Refusal::Closed => (
            StatusCode::FORBIDDEN,
            ErrorCode::AccessDenied,
            "dynamic client registration is closed on this server; use a client ID metadata document or a pre-registered client",
            None,
        ),
        Refusal::MissingToken => (
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidToken,
            "registration requires an initial access token as Authorization: Bearer",
            Some("Bearer realm=\"registration\""),
        ),
        Refusal::WrongToken => (
            StatusCode::UNAUTHORIZED,
            ErrorCode::InvalidToken,
            "the initial access token is not valid",
            Some("Bearer realm=\"registration\", error=\"invalid_token\""),
        ),
    };
    let mut resp = oauth_json(&OAuthError::new(code, description));
    *resp.status_mut() = status;
    if let Some(c) = challenge {
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
    }
    resp
}

/// A `POST /register` that does not fit the budgets of never-used registrations: 429
/// `slow_down` with `Retry-After` (when the earliest charges in that budget end), as for a
/// rate limit (see [`rate_limited`] for why that code).
fn registration_budget_spent(s: crate::clients::budget::Spent) -> Response {
    use crate::clients::budget::SpentBudget;
    let description = match s.budget {
        SpentBudget::Source | SpentBudget::Net => {
            "this address holds too many registrations that were never used; reuse one, or retry after the number of seconds in Retry-After"
        }
        SpentBudget::Everyone => {
            "this server holds too many registrations that were never used; retry after the number of seconds in Retry-After"
        }
    };
    let mut resp = oauth_json(&OAuthError::new(ErrorCode::SlowDown, description));
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(s.retry_after_secs));
    resp
}

/// A refusal at `/mcp` (RFC 6750 §3 challenges; JSON-RPC error bodies where the client
/// expects MCP).
pub fn gateway(app: &crate::app::App, e: GatewayError) -> Response {
    let prm = app
        .config
        .public_url
        .join("/.well-known/oauth-protected-resource/mcp");
    let scope = app
        .config
        .backend
        .as_ref()
        .map(|b| b.required_scopes.join(" "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| app.offered_scopes.to_wire());
    let challenge =
        |extra: &str| format!("Bearer {extra}resource_metadata=\"{prm}\", scope=\"{scope}\"");
    let oauth = |status: StatusCode, code: &str, desc: &str, www: String| {
        let mut r = (
            status,
            Json(json!({"error": code, "error_description": desc})),
        )
            .into_response();
        if let Ok(v) = HeaderValue::from_str(&www) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    };
    let rpc = |status: StatusCode, id: Option<&str>, code: i64, message: &str| {
        let id: serde_json::Value = id
            .and_then(|i| serde_json::from_str(i).ok())
            .unwrap_or(serde_json::Value::Null);
        (
            status,
            Json(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})),
        )
            .into_response()
    };
    crate::telemetry::span::record_outcome(match &e {
        GatewayError::NoToken => "no_token",
        GatewayError::InvalidToken(_) => "invalid_token",
        GatewayError::TokenInQuery => "token_in_query",
        GatewayError::InsufficientScope(_) => "insufficient_scope",
        GatewayError::BadRequestState { .. } => "bad_request_state",
        GatewayError::GitHubRejected => "github_rejected",
        GatewayError::ForbiddenOrigin => "forbidden_origin",
        GatewayError::UnknownSession => "unknown_session",
        GatewayError::BadTransportHeader(_) => "bad_transport_header",
        GatewayError::BatchNotSupported => "batch_not_supported",
        GatewayError::GitHubAccessMissing { .. } => "github_access_missing",
        GatewayError::NoBackend => "no_backend",
        GatewayError::StandingUnverifiable => "standing_unverifiable",
        GatewayError::Backend(_) => "backend_error",
        GatewayError::Store(_) => "store_error",
    });
    match e {
        GatewayError::NoToken => oauth(
            StatusCode::UNAUTHORIZED,
            "invalid_request",
            "a bearer token is required",
            challenge(""),
        ),
        GatewayError::InvalidToken(_) => oauth(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "the access token is invalid, expired, revoked, or not for this resource",
            challenge("error=\"invalid_token\", "),
        ),
        GatewayError::TokenInQuery => oauth(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "access tokens are accepted only in the Authorization header",
            challenge("error=\"invalid_request\", "),
        ),
        GatewayError::InsufficientScope(needed) => oauth(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "the access token lacks a required scope",
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{needed}\", resource_metadata=\"{prm}\""
            ),
        ),
        GatewayError::BadRequestState { ref id } => rpc(
            StatusCode::BAD_REQUEST,
            id.as_deref(),
            -32602,
            "requestState is invalid, expired, or not yours",
        ),
        GatewayError::GitHubRejected => rpc(
            StatusCode::BAD_GATEWAY,
            None,
            -32000,
            "GitHub refused this account's access",
        ),
        GatewayError::ForbiddenOrigin => {
            rpc(StatusCode::FORBIDDEN, None, -32000, "Origin not allowed")
        }
        GatewayError::UnknownSession => {
            rpc(StatusCode::NOT_FOUND, None, -32001, "Session not found")
        }
        GatewayError::BadTransportHeader(bad) => {
            let problem = match bad {
                BadTransportHeader::Repeated(_) => "must be sent at most once",
                BadTransportHeader::NotVisibleAscii(_) => {
                    "must be visible ASCII characters (0x21 to 0x7E)"
                }
            };
            rpc(
                StatusCode::BAD_REQUEST,
                None,
                -32600,
                &format!("Invalid Request: {} {problem}", bad.header()),
            )
        }
        // JSON-RPC 2.0 answers an invalid batch with one error whose id is null.
        GatewayError::BatchNotSupported => rpc(
            StatusCode::BAD_REQUEST,
            None,
            -32600,
            "batching is not supported",
        ),
        GatewayError::GitHubAccessMissing { id: Some(id) } => rpc(
            StatusCode::OK,
            Some(&id),
            -32001,
            "GitHub access for this account is not connected or stopped working; sign in again through this server's account page",
        ),
        GatewayError::GitHubAccessMissing { id: None } => rpc(
            StatusCode::FORBIDDEN,
            None,
            -32001,
            "GitHub access for this account is not connected",
        ),
        GatewayError::StandingUnverifiable => {
            let mut r = rpc(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                -32000,
                "GitHub cannot confirm this account's access to this server right now; try again later",
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("60"));
            r
        }
        GatewayError::NoBackend => rpc(
            StatusCode::SERVICE_UNAVAILABLE,
            None,
            -32000,
            "no backend MCP server is configured",
        ),
        GatewayError::Backend(ref detail) => {
            let id = request_id();
            tracing::warn!(request_id = %id, detail = %detail, "backend failed");
            rpc(
                StatusCode::BAD_GATEWAY,
                None,
                -32000,
                "the backend MCP server is unavailable",
            )
        }
        GatewayError::Store(ref err) => {
            let id = request_id();
            tracing::error!(request_id = %id, error = %err, "request failed");
            rpc(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                -32603,
                "internal error",
            )
        }
    }
}

/// An error from a JSON endpoint.
#[derive(Debug)]
pub struct ApiError(pub FlowError);

impl<E: Into<FlowError>> From<E> for ApiError {
    fn from(e: E) -> Self {
        ApiError(e.into())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self.0 {
            FlowError::OAuth(e) => oauth_json(e),
            FlowError::ExchangeRefused(body) => {
                let mut r = (StatusCode::BAD_REQUEST, Json(body.clone())).into_response();
                r.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r.headers_mut()
                    .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
                r
            }
            FlowError::RegistrationRefused(r) => registration_refused(*r),
            FlowError::RegistrationBudget(s) => registration_budget_spent(*s),
            FlowError::Page(_) | FlowError::ClientRedirect(_) => oauth_json(&OAuthError::new(
                ErrorCode::InvalidRequest,
                "invalid request",
            )),
            // Only browser sign-ins decide admission; a token endpoint refuses with `OAuth`.
            FlowError::NotAdmitted(_) => oauth_json(&OAuthError::new(
                ErrorCode::InvalidGrant,
                "the person is not admitted to this server",
            )),
            FlowError::GitHub(_) => {
                internal(&self.0);
                oauth_json(&OAuthError::new(
                    ErrorCode::TemporarilyUnavailable,
                    "upstream unavailable",
                ))
            }
            FlowError::Store(_) | FlowError::Crypto(_) => {
                internal(&self.0);
                oauth_json(&OAuthError::new(ErrorCode::ServerError, "internal error"))
            }
        }
    }
}

/// An error from a browser endpoint.
#[derive(Debug)]
pub struct PageError(pub FlowError);

impl<E: Into<FlowError>> From<E> for PageError {
    fn from(e: E) -> Self {
        PageError(e.into())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self.0 {
            // A 404 carries no request id: every "not found" (a connect link unknown, expired,
            // declined or replaced) must be byte-identical.
            FlowError::Page(p) if p.status == 404 => page(p, String::new()),
            FlowError::Page(p) => page(p, request_id()),
            FlowError::ClientRedirect(url) => Redirect::to(&url).into_response(),
            FlowError::NotAdmitted(n) => {
                let html = consent_ui::NotAdmittedPage {
                    title: "This GitHub account cannot use this server".to_owned(),
                    message: n.message,
                    login: n.login,
                    org: n.org,
                    sso_url: n.sso_url,
                }
                .to_string();
                (StatusCode::FORBIDDEN, Html(html)).into_response()
            }
            FlowError::OAuth(_)
            | FlowError::ExchangeRefused(_)
            | FlowError::RegistrationRefused(_)
            | FlowError::RegistrationBudget(_) => page(pages::BAD_REQUEST, request_id()),
            e @ FlowError::GitHub(_) => {
                let id = internal(&e);
                page(pages::GITHUB_FAILED, id)
            }
            e @ (FlowError::Store(_) | FlowError::Crypto(_)) => {
                let id = internal(&e);
                page(
                    PageProblem {
                        status: 500,
                        title: "Something went wrong",
                        message: "The server could not complete this request. Nothing was shared. Please try again.",
                    },
                    id,
                )
            }
        }
    }
}

/// An admin API failure: JSON `{"error": …, "error_description": …}`, never cached.
impl IntoResponse for crate::flows::admin::AdminError {
    fn into_response(self) -> Response {
        use crate::flows::admin::AdminError;
        let (status, code, desc) = match &self {
            AdminError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "a valid admin bearer token is required".to_owned(),
            ),
            AdminError::Disabled => (
                StatusCode::FORBIDDEN,
                "admin_api_disabled",
                "the admin API is disabled: set [admin] token".to_owned(),
            ),
            AdminError::NotFound(what) => (
                StatusCode::NOT_FOUND,
                "not_found",
                format!("{what} not found"),
            ),
            AdminError::BadRequest(why) => (
                StatusCode::BAD_REQUEST,
                "invalid_request",
                (*why).to_owned(),
            ),
            AdminError::Conflict(why) => (StatusCode::CONFLICT, "conflict", (*why).to_owned()),
            AdminError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this route does not take that method".to_owned(),
            ),
            AdminError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                format!(
                    "admin request bodies are at most {} KiB",
                    crate::admin::MAX_BODY / 1024
                ),
            ),
            AdminError::MisdirectedHost => (
                StatusCode::MISDIRECTED_REQUEST,
                "misdirected_request",
                "the admin listener answers only to an IP address or localhost".to_owned(),
            ),
            AdminError::Flow(e) => {
                let id = internal(e);
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    format!("internal error (request id {id})"),
                )
            }
        };
        let mut r = (
            status,
            Json(json!({"error": code, "error_description": desc})),
        )
            .into_response();
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mcp-oauth-proxy admin\""),
            );
        }
        r
    }
}
