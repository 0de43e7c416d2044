//! Rate limiting of the public endpoints (`/register`, `/token`, `/revoke`, `/authorize`,
//! `/callback/github`, `/consent`, `/connect/{code}`, the account forms), before the handler
//! runs, so a refused request changes no state and writes nothing. The decision is `limits::Limits`; the response is
//! `error::rate_limited`. Refusals are counted in metrics and logged at debug only: a flood
//! would otherwise flood the log too.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::header;

use super::client_ip::ClientIp;
use crate::app::App;
use crate::flows::register;
use crate::limits::{Endpoint, RateLimited};

fn refused(app: &App, endpoint: Endpoint, r: &RateLimited) -> Response {
    app.metrics.rate_limited(endpoint, r.bucket);
    super::error::rate_limited(r)
}

/// Middleware for `/register`. A request carrying the configured initial access token is
/// vouched for by the operator and skips the per-IP bucket (the global one still applies).
pub async fn register(State(app): State<App>, req: Request, next: Next) -> Response {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let ip = req.extensions().get::<ClientIp>().map(|c| c.ip());
    let decision = if register::vouched(&app.config.registration.mode, authorization) {
        app.limits.check_vouched(Endpoint::Register)
    } else {
        app.limits.check(Endpoint::Register, ip)
    };
    match decision {
        Ok(()) => next.run(req).await,
        Err(r) => {
            tracing::debug!(endpoint = "register", ?ip, bucket = ?r.bucket, "rate limited");
            refused(&app, Endpoint::Register, &r)
        }
    }
}

/// Middleware for `/token`.
pub async fn token(State(app): State<App>, req: Request, next: Next) -> Response {
    let ip = req.extensions().get::<ClientIp>().map(|c| c.ip());
    match app.limits.check(Endpoint::Token, ip) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            tracing::debug!(endpoint = "token", ?ip, bucket = ?r.bucket, "rate limited");
            refused(&app, Endpoint::Token, &r)
        }
    }
}

/// Middleware for any other limited endpoint (`/revoke`, the browser endpoints): its
/// per-IP and global buckets, the same 429 as `/token`.
pub async fn limit(
    State((app, endpoint)): State<(App, Endpoint)>,
    req: Request,
    next: Next,
) -> Response {
    let ip = req.extensions().get::<ClientIp>().map(|c| c.ip());
    match app.limits.check(endpoint, ip) {
        Ok(()) => next.run(req).await,
        Err(r) => {
            tracing::debug!(endpoint = endpoint.name(), ?ip, bucket = ?r.bucket, "rate limited");
            refused(&app, endpoint, &r)
        }
    }
}
