//! The one place where errors become HTTP responses. JSON endpoints answer OAuth-shaped
//! errors (RFC 6749 §5.2) with `no-store`; browser endpoints answer a readable page (or, once
//! the client and redirect URI are verified, a redirect carrying `iss`). Our own failures get
//! a generic message and a request id; the cause goes only to the log.

use axum::Json;
use axum::response::{Html, IntoResponse, Redirect, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use crate::crypto;
use crate::flows::{FlowError, PageProblem, pages};
use crate::oauth::error::{ErrorCode, OAuthError};

fn request_id() -> String {
    crypto::random_bytes::<8>()
        .map(|b| crypto::b64url(&b))
        .unwrap_or_else(|_| "unavailable".to_owned())
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
    (status, Html(html)).into_response()
}

/// JSON OAuth error response.
pub fn oauth_json(e: &OAuthError) -> Response {
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
    resp
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
            FlowError::Page(_) | FlowError::ClientRedirect(_) => oauth_json(&OAuthError::new(
                ErrorCode::InvalidRequest,
                "invalid request",
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
            FlowError::Page(p) => page(p, request_id()),
            FlowError::ClientRedirect(url) => Redirect::to(&url).into_response(),
            FlowError::OAuth(_) => page(pages::BAD_REQUEST, request_id()),
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
