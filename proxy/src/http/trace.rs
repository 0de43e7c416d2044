//! One exported span per request (`telemetry::span`): named `HTTP {method} {route template}`,
//! a child of the client's W3C trace context if it sent one. Only the matched route template
//! is recorded, never the path or query (`/authorize` and `/callback/github` carry `state` and
//! `code` there).

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument as _;

use crate::telemetry::span;

/// Outer layer (outside `request_id`, so the span gets the request id; inside the metrics
/// layer): the request's span, its status and outcome.
pub async fn trace(req: Request, next: Next) -> Response {
    let span = span::request_span(req.method(), req.headers());
    span::in_request(span, next.run(req), Response::status).await
}

/// Inner layer (`route_layer`, so the route is known): names the span after the template and
/// runs the route inside it.
pub async fn route(req: Request, next: Next) -> Response {
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .and_then(|p| span::matched(req.method(), p.as_str()));
    match matched {
        Some(s) => next.run(req).instrument(s).await,
        None => next.run(req).await,
    }
}
