//! One exported span per request (`telemetry::span`): named `HTTP {method} {route template}`,
//! a child of the client's W3C trace context if it sent one. Only the matched route template
//! is recorded, never the path or query (`/authorize` and `/callback/github` carry `state` and
//! `code` there).

use std::future::Future;

use axum::extract::{MatchedPath, Request};
use axum::response::Response;
use tracing::Span;

use crate::telemetry::span;

/// The request's span, made before anything else runs (outside `request_id`, so the span gets
/// the request id; inside the request metrics).
pub fn request_span(req: &Request) -> Span {
    span::request_span(req.method(), req.headers())
}

/// Runs `f` (the rest of the request) as the request of `span`, and records its status and
/// outcome there.
pub async fn run<F: Future<Output = Response>>(span: Span, f: F) -> Response {
    span::in_request(span, f, Response::status).await
}

/// Once routed (the route is known): the span named after the template, to run the route in.
pub fn matched(req: &Request) -> Option<Span> {
    req.extensions()
        .get::<MatchedPath>()
        .and_then(|p| span::matched(req.method(), p.as_str()))
}
