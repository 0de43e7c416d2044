//! The two exported spans and W3C trace context. Every attribute value is a constant, a
//! route template, a status, a client id, a request id or the backend's configured host; the
//! helpers that record anything else take `&'static str`, so request data cannot reach them.

use std::cell::Cell;
use std::future::Future;

use http::{HeaderMap, Method, StatusCode};
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::TARGET;
use crate::ids::ClientId;

/// The request being served: its span, and the outcome the flow named, if any.
struct Current {
    span: Span,
    outcome: Cell<Option<&'static str>>,
}

tokio::task_local! {
    static CURRENT: Current;
}

/// A standard method's name; `None` for any other (a method is attacker-chosen text, never a
/// label or attribute value as sent). Also the request metrics' method label.
pub fn standard_method(m: &Method) -> Option<&'static str> {
    Some(match *m {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::HEAD => "HEAD",
        Method::PATCH => "PATCH",
        _ => return None,
    })
}

/// The method as an attribute: the standard ones, else `_OTHER`.
fn method_label(m: &Method) -> &'static str {
    standard_method(m).unwrap_or("_OTHER")
}

/// The W3C trace context a request carries in `traceparent`/`tracestate` (the propagator
/// reads those two headers and nothing else); malformed values give an empty context.
fn extract(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// The server span of one request, a child of the client's trace context when it sent a
/// valid one. Named `HTTP {method}` until [`matched`] knows the route template.
pub fn request_span(method: &Method, headers: &HeaderMap) -> Span {
    let method = method_label(method);
    let span = tracing::info_span!(
        target: TARGET,
        "HTTP request",
        otel.name = %format_args!("HTTP {method}"),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = method,
        http.route = Empty,
        http.response.status_code = Empty,
        oauth.client_id = Empty,
        outcome = Empty,
        request_id = Empty,
    );
    let parent = extract(headers);
    if parent.span().span_context().is_valid() {
        // Err only when no OpenTelemetry layer is installed (telemetry off).
        let _ = span.set_parent(parent);
    }
    span
}

/// Runs `f` (the rest of the middleware stack) with `span` as the request's span, where
/// [`matched`], [`record_client_id`] and [`record_outcome`] find it, and records the status
/// and outcome of the response `f` returns.
///
/// The span is not entered here: OpenTelemetry fixes a span's name when it starts (at its
/// first entry), and the route template that names it is known only after routing. [`matched`]
/// names it and hands it to the route's layer to run in; a request no route matched keeps
/// the name `HTTP {method}`.
pub async fn in_request<F>(
    span: Span,
    f: F,
    status: impl FnOnce(&F::Output) -> StatusCode,
) -> F::Output
where
    F: Future,
{
    let current = Current {
        span: span.clone(),
        outcome: Cell::new(None),
    };
    let (r, outcome) = CURRENT
        .scope(current, async {
            let r = f.await;
            (r, CURRENT.try_with(|c| c.outcome.get()).ok().flatten())
        })
        .await;
    let status = status(&r);
    span.record("http.response.status_code", status.as_u16());
    let outcome = outcome.unwrap_or(if status.is_server_error() {
        "server_error"
    } else if status.is_client_error() {
        "client_error"
    } else {
        "ok"
    });
    span.record("outcome", outcome);
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    r
}

/// Routing matched `route` (a template such as `/connect/{code}`): names the request's span
/// `HTTP {method} {route}` and returns it for the route to run in.
pub fn matched(method: &Method, route: &str) -> Option<Span> {
    CURRENT
        .try_with(|c| {
            c.span.record("http.route", route);
            c.span.record(
                "otel.name",
                format!("HTTP {} {route}", method_label(method)),
            );
            c.span.clone()
        })
        .ok()
}

/// Records the request id on the current request's span.
pub fn record_request_id(id: &str) {
    let _ = CURRENT.try_with(|c| {
        c.span.record("request_id", id);
    });
}

/// Records the client the request is from, once the flow has authenticated or verified it.
pub fn record_client_id(id: &ClientId) {
    let _ = CURRENT.try_with(|c| {
        c.span.record("oauth.client_id", id.as_str());
    });
}

/// Names the request's outcome (an OAuth error code, a gateway refusal); a constant, never
/// request data. Without one, the outcome follows the status class.
pub fn record_outcome(outcome: &'static str) {
    let _ = CURRENT.try_with(|c| c.outcome.set(Some(outcome)));
}

/// MCP methods recorded by name; anything else is `_OTHER` (the method is client text).
const MCP_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// The client span of one backend call, a child of the current request span. It lives as long
/// as it is held: the gateway keeps it until the backend's answer has streamed through.
pub fn backend_span(method: &Method, backend: &url::Url, mcp_method: Option<&str>) -> Span {
    let method = method_label(method);
    let mcp = mcp_method.map(|m| {
        MCP_METHODS
            .iter()
            .find(|k| **k == m)
            .copied()
            .unwrap_or("_OTHER")
    });
    tracing::info_span!(
        target: TARGET,
        "backend",
        otel.name = %format_args!("HTTP {method} backend"),
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = method,
        server.address = backend.host_str().unwrap_or_default(),
        server.port = backend.port_or_known_default().unwrap_or_default(),
        http.response.status_code = Empty,
        mcp.method.name = mcp,
        error.r#type = Empty,
    )
}

/// Records the backend's answer (or failure) on its span.
pub fn backend_finished(span: &Span, status: Result<StatusCode, &'static str>) {
    match status {
        Ok(s) => {
            span.record("http.response.status_code", s.as_u16());
            if s.is_server_error() {
                span.record("otel.status_code", "error");
                span.record("error.type", s.as_str());
            }
        }
        Err(kind) => {
            span.record("otel.status_code", "error");
            span.record("error.type", kind);
        }
    }
}

/// Sets `traceparent`/`tracestate` on the backend request: the context of the backend call's
/// span when traces are exported (same trace id as the client's, our span as parent);
/// otherwise the client's own context, re-serialized from its parsed value (a malformed one is
/// dropped). Either way the headers are produced by the propagator, never copied.
pub fn inject_backend(span: &Span, inbound: &HeaderMap, out: &mut HeaderMap) {
    let propagator = TraceContextPropagator::new();
    out.remove("traceparent");
    out.remove("tracestate");
    let own = span.context();
    let cx = if own.span().span_context().is_valid() {
        own
    } else {
        extract(inbound)
    };
    propagator.inject_context(&cx, &mut HeaderInjector(out));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn without_telemetry_the_clients_valid_context_is_passed_on() {
        let inbound = headers(&[("traceparent", TP), ("tracestate", "vendor=abc")]);
        let mut out = HeaderMap::new();
        inject_backend(&Span::none(), &inbound, &mut out);
        assert_eq!(out.get("traceparent").unwrap(), TP);
        assert_eq!(out.get("tracestate").unwrap(), "vendor=abc");
    }

    #[test]
    fn malformed_trace_context_is_dropped_not_copied() {
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01; Bearer mcpat_x",
        ] {
            let inbound = headers(&[("traceparent", bad), ("tracestate", "k=v")]);
            let mut out = headers(&[("traceparent", "stale")]);
            inject_backend(&Span::none(), &inbound, &mut out);
            assert!(out.get("traceparent").is_none(), "{bad}");
            assert!(out.get("tracestate").is_none(), "{bad}");
        }
    }
}
