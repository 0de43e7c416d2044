//! Gives every request an `X-Request-Id` (always generated here), a `request` span carrying
//! it for log lines, and the task-local the audit sink reads.

use std::future::Future;

use axum::response::Response;
use http::HeaderValue;
use tracing::Instrument;

use crate::audit::request_id;

/// Header name.
pub const HEADER: &str = "x-request-id";

/// Runs `f` (the rest of the request, `http::front`) under a fresh request id and names it in
/// the response.
pub async fn run<F: Future<Output = Response>>(f: F) -> Response {
    let Some(id) = request_id::generate() else {
        return f.await;
    };
    crate::telemetry::span::record_request_id(&id);
    let span = tracing::info_span!("request", request_id = %id);
    // Base64url: always a valid header value.
    let header = HeaderValue::from_str(&id).ok();
    let mut resp = request_id::scope(id, f.instrument(span)).await;
    if let Some(v) = header {
        resp.headers_mut().insert(HEADER, v);
    }
    resp
}
