//! Rate limiting of `POST /register` and `POST /token`, before the handler runs, so a refused
//! request changes no state. The decision is `limits::Limits`; the response is
//! `error::rate_limited`.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use super::client_ip::ClientIp;
use crate::app::App;
use crate::limits::Endpoint;

async fn limit(app: &App, endpoint: Endpoint, req: Request, next: Next) -> Response {
    let ip = req.extensions().get::<ClientIp>().map(|c| c.0);
    match app.limits.check(endpoint, ip) {
        Ok(()) => next.run(req).await,
        Err(refused) => {
            tracing::info!(?endpoint, ?ip, bucket = ?refused.bucket, "rate limited");
            super::error::rate_limited(&refused)
        }
    }
}

/// Middleware for `/register`.
pub async fn register(State(app): State<App>, req: Request, next: Next) -> Response {
    limit(&app, Endpoint::Register, req, next).await
}

/// Middleware for `/token`.
pub async fn token(State(app): State<App>, req: Request, next: Next) -> Response {
    limit(&app, Endpoint::Token, req, next).await
}
