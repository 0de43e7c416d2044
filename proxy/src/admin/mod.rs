//! The admin listener: `/metrics` (Prometheus), `/healthz`, `/readyz`, and the admin API under
//! `/admin/api/` (bearer admin token). Handlers only parse, call `flows::admin` and map; every
//! error goes through `http::error`'s mapping of [`AdminError`].

use std::future::Future;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::json;

mod settings;
pub use settings::{AdminConfig, MIN_TOKEN_LEN, RawAdmin, validate};

use crate::app::App;
use crate::flows::admin::{self as flow, AdminError, Operator};
use crate::ids::{ClientId, UserId};

/// Admin request bodies are a few ids.
pub const MAX_BODY: usize = 16 * 1024;
/// `audit tail` without `limit`.
const DEFAULT_TAIL: usize = 50;

/// The admin listener's routes; `loopback_listener`: it is bound to a loopback address, so
/// requests naming another host are refused (`loopback_hosts_only`).
pub fn router(app: App, loopback_listener: bool) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", {
            // One probe per listener: callers within its period share the last answer.
            let probe = std::sync::Arc::new(flow::ReadinessProbe::default());
            get(move |State(app): State<App>| readyz(app, probe.clone()))
        })
        .route("/admin/api/clients", get(clients_list))
        .route(
            "/admin/api/clients/{id}",
            get(client_show).delete(client_delete),
        )
        .route("/admin/api/clients/{id}/unblock", post(client_unblock))
        .route("/admin/api/consents", get(consents_list))
        .route("/admin/api/consents/revoke", post(consent_revoke))
        .route("/admin/api/grants/revoke", post(grant_revoke))
        .route("/admin/api/policy/decisions", get(policy_decisions))
        .route("/admin/api/audit/tail", get(audit_tail))
        .route("/admin/api/audit/verify", get(audit_verify))
        .route("/admin/api/audit/export", get(audit_export))
        .route("/admin/api/policy", get(policy_show))
        .fallback(|| async { AdminError::NotFound("route") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::map_response(framework_rejections_as_json))
        .layer(axum::middleware::from_fn_with_state(
            loopback_listener,
            loopback_hosts_only,
        ))
        .with_state(app)
}

/// On a loopback listener (the default), refuse requests whose `Host` is a name other than
/// `localhost` before any route runs: DNS rebinding from a page in the operator's browser.
async fn loopback_hosts_only(
    State(loopback_listener): State<bool>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if loopback_listener {
        let host = req
            .headers()
            .get(header::HOST)
            .map(|h| h.to_str().unwrap_or("\u{fffd}"))
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        if !flow::loopback_host_allowed(host) {
            return AdminError::MisdirectedHost.into_response();
        }
    }
    next.run(req).await
}

/// Errors axum answers by itself before a handler runs (a method the route does not take, a
/// body over the limit, a path segment that is not UTF-8) come as plain text or empty; an
/// admin API client gets every error in the same JSON shape, so they become [`AdminError`]s.
async fn framework_rejections_as_json(resp: Response) -> Response {
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !status.is_client_error() || is_json {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let mut json = match status {
        StatusCode::METHOD_NOT_ALLOWED => AdminError::MethodNotAllowed,
        StatusCode::PAYLOAD_TOO_LARGE => AdminError::TooLarge,
        StatusCode::NOT_FOUND => AdminError::NotFound("route"),
        _ => AdminError::BadRequest("the request could not be read (path, query or body)"),
    }
    .into_response();
    // A 405 must say which methods the route takes (RFC 9110 §15.5.6).
    if let Some(allow) = allow {
        json.headers_mut().insert(header::ALLOW, allow);
    }
    json
}

/// Serves the admin router until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // The address actually bound (`run` binds exactly `[admin] listen`); one that cannot be
    // read is treated as loopback, which only adds the Host check.
    let loopback = listener.local_addr().map_or(true, |a| a.ip().is_loopback());
    axum::serve(listener, router(app, loopback))
        .with_graceful_shutdown(shutdown)
        .await
}

/// The caller presented the admin token (checked before anything else is parsed).
struct Op(Operator);

impl FromRequestParts<App> for Op {
    type Rejection = AdminError;
    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Op, AdminError> {
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        flow::authorize(app, auth).map(Op)
    }
}

fn json_ok<T: serde::Serialize>(v: &T) -> Response {
    let mut r = axum::Json(v).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn metrics(State(app): State<App>) -> Response {
    app.metrics.store_disk_flushes(app.store.disk_flushes());
    app.metrics.record_cache(&app.record_cache);
    match app.metrics.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn readyz(app: App, probe: std::sync::Arc<flow::ReadinessProbe>) -> Response {
    let r = probe.check(&app).await;
    let status = if r.ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(json!({"ready": r.ready(), "checks": r}))).into_response()
}

async fn clients_list(State(app): State<App>, Op(op): Op) -> Result<Response, AdminError> {
    Ok(json_ok(&flow::list_clients(&app, &op).await?))
}

async fn client_show(
    State(app): State<App>,
    Op(op): Op,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    Ok(json_ok(
        &flow::show_client(&app, &op, &ClientId::new(id)).await?,
    ))
}

async fn client_delete(
    State(app): State<App>,
    Op(op): Op,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    Ok(json_ok(
        &flow::delete_client(&app, &op, &ClientId::new(id)).await?,
    ))
}

async fn client_unblock(
    State(app): State<App>,
    Op(op): Op,
    Path(id): Path<String>,
) -> Result<Response, AdminError> {
    Ok(json_ok(
        &flow::unblock_client(&app, &op, &ClientId::new(id)).await?,
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserQuery {
    user: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitQuery {
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserClientBody {
    user: String,
    client: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserBody {
    user: String,
}

fn query<T: serde::de::DeserializeOwned>(
    q: Option<String>,
    what: &'static str,
) -> Result<T, AdminError> {
    serde_urlencoded::from_str(q.as_deref().unwrap_or_default())
        .map_err(|_| AdminError::BadRequest(what))
}

fn body<T: serde::de::DeserializeOwned>(b: &Bytes, what: &'static str) -> Result<T, AdminError> {
    serde_json::from_slice(b).map_err(|_| AdminError::BadRequest(what))
}

fn non_empty(s: String, what: &'static str) -> Result<String, AdminError> {
    if s.trim().is_empty() {
        Err(AdminError::BadRequest(what))
    } else {
        Ok(s)
    }
}

async fn consents_list(
    State(app): State<App>,
    Op(op): Op,
    RawQuery(q): RawQuery,
) -> Result<Response, AdminError> {
    const USAGE: &str = "query must be ?user=<user id>";
    let q: UserQuery = query(q, USAGE)?;
    let user = UserId::new(non_empty(q.user, USAGE)?);
    Ok(json_ok(&flow::list_consents(&app, &op, &user).await?))
}

async fn consent_revoke(
    State(app): State<App>,
    Op(op): Op,
    b: Bytes,
) -> Result<Response, AdminError> {
    const USAGE: &str = "body must be {\"user\": …, \"client\": …}";
    let b: UserClientBody = body(&b, USAGE)?;
    let user = UserId::new(non_empty(b.user, USAGE)?);
    let client = ClientId::new(non_empty(b.client, USAGE)?);
    Ok(json_ok(
        &flow::revoke_consent(&app, &op, &user, &client).await?,
    ))
}

async fn grant_revoke(
    State(app): State<App>,
    Op(op): Op,
    b: Bytes,
) -> Result<Response, AdminError> {
    const USAGE: &str = "body must be {\"user\": …}";
    let b: UserBody = body(&b, USAGE)?;
    let user = UserId::new(non_empty(b.user, USAGE)?);
    Ok(json_ok(&flow::revoke_grant(&app, &op, &user).await?))
}

async fn audit_tail(
    State(app): State<App>,
    Op(op): Op,
    RawQuery(q): RawQuery,
) -> Result<Response, AdminError> {
    let q: LimitQuery = query(q, "query may only be ?limit=<number>")?;
    let limit = q.limit.unwrap_or(DEFAULT_TAIL);
    Ok(json_ok(&flow::audit_tail(&app, &op, limit).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionsQuery {
    limit: Option<usize>,
    user: Option<String>,
    client: Option<String>,
}

async fn policy_decisions(
    State(app): State<App>,
    Op(op): Op,
    RawQuery(q): RawQuery,
) -> Result<Response, AdminError> {
    let q: DecisionsQuery = query(
        q,
        "query may only be ?limit=<number>&user=<user id>&client=<client id>",
    )?;
    Ok(json_ok(
        &flow::policy_decisions(
            &app,
            &op,
            q.limit.unwrap_or(DEFAULT_TAIL),
            q.user.as_deref(),
            q.client.as_deref(),
        )
        .await?,
    ))
}

async fn audit_verify(State(app): State<App>, Op(op): Op) -> Result<Response, AdminError> {
    Ok(json_ok(&flow::audit_verify(&app, &op).await?))
}

async fn policy_show(State(app): State<App>, Op(op): Op) -> Response {
    json_ok(&flow::policy(&app, &op))
}

async fn audit_export(State(app): State<App>, Op(op): Op) -> Result<Response, AdminError> {
    let body = axum::body::Body::from_stream(flow::audit_export(&app, &op));
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-ndjson"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
        body,
    )
        .into_response())
}
