//! What every request passes on its way to the routes and back, as one hand-written service,
//! outermost first: request metrics (`request_metrics`), the request's span (`trace`), its
//! request id (`request_id`), HSTS and the security headers (`headers`), the client IP
//! (`client_ip`, with the audit's source scope around the routes). And, once routed, one
//! layer per route ([`route`]): the span named after the template, the metrics label.
//!
//! One service, not one `axum::middleware::from_fn` layer per concern: each such layer costs
//! every request a boxed future, a boxed clone of the rest of the stack and a poll through
//! both. Measured on the sled `tools/call` (issue 17; BENCHMARKS.md): dropping the six edge
//! layers altogether raised calls per second by about 15%, running them as this one service
//! by about 8% (the rest is their work). The concerns stay in their modules; this one only
//! fixes their order.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tower::Service;
use tracing::Instrument as _;

use super::client_ip::{self, TrustedProxies};
use super::{headers, request_id, request_metrics, trace};
use crate::metrics::Metrics;

/// The edge around `inner` (the routed router).
#[derive(Clone)]
pub struct Front<S> {
    inner: S,
    shared: Arc<Shared>,
}

struct Shared {
    metrics: Metrics,
    trusted: TrustedProxies,
    /// The public URL is https: every response gets HSTS (`headers`).
    hsts: bool,
}

impl<S> Front<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, metrics: Metrics, trusted: TrustedProxies, hsts: bool) -> Front<S> {
        Front {
            inner,
            shared: Arc::new(Shared {
                metrics,
                trusted,
                hsts,
            }),
        }
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request> for Front<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<Result<Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        // The service made ready is the one called; a fresh clone stays for the next request.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let shared = self.shared.clone();
        Box::pin(async move { Ok(edge(&shared, inner, req).await) })
    }
}

async fn edge<S>(shared: &Shared, mut inner: S, mut req: Request) -> Response
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    let started = request_metrics::start(&req);
    let span = trace::request_span(&req);
    let ip = client_ip::attach(&mut req, &shared.trusted);
    // Boxed: each wrapper below (request id, span, task-locals) keeps its future argument
    // beside the future it awaits, so an unboxed route future is stored again at every level:
    // the whole request's future was 25 KB, copied as it was built and boxed (about 1% of a
    // sled `tools/call`'s CPU in memcpy). Boxed here it is about 2 KB (the test below).
    let routed = Box::pin(async move {
        let r = match ip {
            // Anonymous refusals are counted under it (`audit::aggregate`).
            Some(ip) => crate::audit::source::scope(ip, inner.call(req)).await,
            None => inner.call(req).await,
        };
        match r {
            Ok(resp) => resp,
            Err(never) => match never {},
        }
    });
    let mut resp = trace::run(
        span,
        request_id::run(async {
            let mut resp = routed.await;
            if shared.hsts {
                headers::hsts(&mut resp);
            }
            headers::secure(&mut resp);
            resp
        }),
    )
    .await;
    request_metrics::finish(&shared.metrics, started, &mut resp);
    resp
}

/// Once routed (`Router::route_layer`, where the template is known): runs the route in its
/// span named after the template, and tags the response with the template for the metrics.
pub async fn route(req: Request, next: Next) -> Response {
    let template = request_metrics::route_of(&req);
    let mut resp = match trace::matched(&req) {
        Some(s) => next.run(req).instrument(s).await,
        None => next.run(req).await,
    };
    request_metrics::tag(&mut resp, template);
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_future_stays_small_whatever_the_routes() {
        let mut front = Front::new(
            axum::Router::new(),
            Metrics::new(),
            TrustedProxies::default(),
            false,
        );
        let fut = front.call(Request::new(axum::body::Body::empty()));
        let size = std::mem::size_of_val(&*fut);
        // Without the box around the route future: 25312 bytes.
        assert!(size < 8192, "the edge's future is {size} bytes");
    }
}
