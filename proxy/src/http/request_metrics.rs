//! Request metrics for the main listener. The endpoint label is the matched route template
//! (`/connect/{code}`), never the raw path, so codes and ids never reach a label; requests no
//! route matched are counted as `unmatched`.

use axum::extract::{MatchedPath, Request};
use axum::response::Response;

use crate::metrics::{Metrics, Timer};

/// The route template a request matched, carried from the routed request to its response,
/// where [`finish`] reads it.
#[derive(Clone)]
pub struct Route(MatchedPath);

/// Once routed: the template to tag the response with ([`tag`]).
pub fn route_of(req: &Request) -> Option<Route> {
    req.extensions()
        .get::<MatchedPath>()
        // A shared string: cloning it allocates nothing.
        .cloned()
        .map(Route)
}

/// Tags a routed request's response with its template.
pub fn tag(resp: &mut Response, route: Option<Route>) {
    if let Some(r) = route {
        resp.extensions_mut().insert(r);
    }
}

/// A request being timed, with its method label.
pub struct Started {
    timer: Timer,
    method: &'static str,
}

/// Starts timing a request (before anything else runs on it).
pub fn start(req: &Request) -> Started {
    // Methods outside the standard set would be attacker-chosen label values.
    let method = crate::telemetry::span::standard_method(req.method()).unwrap_or("other");
    Started {
        timer: Timer::start(),
        method,
    }
}

/// Counts a finished request by route template, method and status, with its time.
pub fn finish(metrics: &Metrics, started: Started, resp: &mut Response) {
    let endpoint = resp.extensions_mut().remove::<Route>();
    let endpoint = endpoint.as_ref().map_or("unmatched", |r| r.0.as_str());
    metrics.http_request(
        endpoint,
        started.method,
        resp.status().as_u16(),
        started.timer.elapsed(),
    );
}
