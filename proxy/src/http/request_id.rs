//! Gives every request an `X-Request-Id` (always generated here), a `request` span carrying
//! it for log lines, and the task-local the audit sink reads.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use tracing::Instrument;

use crate::audit::request_id;

/// Header name.
pub const HEADER: &str = "x-request-id";

/// The middleware.
pub async fn request_id(req: Request, next: Next) -> Response {
    let Some(id) = request_id::generate() else {
        return next.run(req).await;
    };
    crate::telemetry::span::record_request_id(&id);
    let span = tracing::info_span!("request", request_id = %id);
    let mut resp = request_id::scope(id.clone(), next.run(req).instrument(span)).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(HEADER, v);
    }
    resp
}
