//! JSON endpoints: registration, token, revocation.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::client_ip::ClientIp;
use super::error::ApiError;
use crate::app::App;
use crate::flows::{register as reg, token as tok};
use crate::oauth::error::{ErrorCode, OAuthError};

fn form_body(headers: &HeaderMap, body: &Bytes) -> Result<String, ApiError> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        });
    if !is_form {
        return Err(OAuthError::new(
            ErrorCode::InvalidRequest,
            "Content-Type must be application/x-www-form-urlencoded",
        )
        .into());
    }
    String::from_utf8(body.to_vec())
        .map_err(|_| OAuthError::new(ErrorCode::InvalidRequest, "body is not UTF-8").into())
}

fn authorization(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
}

fn no_store(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut()
        .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    resp
}

/// `POST /register`.
pub async fn register(
    State(app): State<App>,
    ip: Option<Extension<ClientIp>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
    if !is_json {
        return Err(OAuthError::new(
            ErrorCode::InvalidClientMetadata,
            "Content-Type must be application/json",
        )
        .into());
    }
    let ip = ip.map(|Extension(c)| c.ip());
    let out = reg::register(&app, authorization(&headers), ip, &body).await?;
    Ok(no_store((StatusCode::CREATED, Json(out)).into_response()))
}

/// `POST /token`.
pub async fn token(
    State(app): State<App>,
    ip: Option<Extension<ClientIp>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = form_body(&headers, &body)?;
    let ip = ip.map(|Extension(c)| c.ip());
    // Read whatever bytes were sent (the refresh keeps it bounded, in printable ASCII): a
    // header that is not visible ASCII is still something to show, not "not sent".
    let user_agent = headers
        .get(header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()));
    let out = match tok::token(
        &app,
        authorization(&headers),
        ip,
        user_agent.as_deref(),
        &form,
    )
    .await?
    {
        tok::TokenOutcome::Tokens(t) => Json(t).into_response(),
        tok::TokenOutcome::Exchanged(v) => Json(v).into_response(),
    };
    Ok(no_store(out))
}

/// `POST /revoke`.
pub async fn revoke(
    State(app): State<App>,
    ip: Option<Extension<ClientIp>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let form = form_body(&headers, &body)?;
    let ip = ip.map(|Extension(c)| c.ip());
    tok::revoke(&app, authorization(&headers), ip, &form).await?;
    Ok(no_store(StatusCode::OK.into_response()))
}
