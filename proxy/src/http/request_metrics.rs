//! Request metrics for the main listener. The endpoint label is the matched route template
//! (`/connect/{code}`), never the raw path, so codes and ids never reach a label; requests no
//! route matched are counted as `unmatched`.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::metrics::{Metrics, Timer};

/// The route template a request matched, carried from the inner layer to the outer one.
#[derive(Clone)]
struct Route(String);

/// Inner layer (`route_layer`, so the route is known): tags the response with the template.
pub async fn tag_route(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| Route(p.as_str().to_owned()));
    let mut resp = next.run(req).await;
    if let Some(r) = route {
        resp.extensions_mut().insert(r);
    }
    resp
}

/// Outer layer: times every request and counts it by route template, method and status.
pub async fn record(State(metrics): State<Metrics>, req: Request, next: Next) -> Response {
    let timer = Timer::start();
    let method = req.method().as_str().to_owned();
    let mut resp = next.run(req).await;
    let endpoint = resp
        .extensions_mut()
        .remove::<Route>()
        .map_or_else(|| "unmatched".to_owned(), |r| r.0);
    // Methods outside the standard set would be attacker-chosen label values.
    let method = match method.as_str() {
        "GET" | "POST" | "PUT" | "DELETE" | "OPTIONS" | "HEAD" | "PATCH" => method,
        _ => "other".to_owned(),
    };
    metrics.http_request(&endpoint, &method, resp.status().as_u16(), timer.elapsed());
    resp
}
