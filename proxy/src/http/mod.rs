//! The HTTP edge: routes, parsing into typed inputs, and mapping outcomes to responses. No
//! policy decisions are made here.
//!
//! Keep the route table in sync with `metadata.rs` (the endpoints advertised there).

mod api;
mod browser;
pub mod client_ip;
pub mod conn;
mod durable;
pub mod edge;
pub mod error;
mod front;
mod headers;
mod mcp;
mod metadata;
mod rate_limit;
mod request_id;
mod request_metrics;
mod trace;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use http::{HeaderName, Method, header};
use tower::ServiceBuilder;
use tower_http::cors::{AllowHeaders, AllowOrigin, Any, CorsLayer};

use crate::app::App;
use crate::limits::Endpoint;

/// Largest request body accepted anywhere (registration, forms).
const MAX_BODY: usize = 64 * 1024;
/// Largest MCP request body forwarded; read only once the caller is authenticated (mcp.rs).
const MAX_MCP_BODY: usize = 4 * 1024 * 1024;

/// What the HTTP layer reads itself, handed over when the listener is built (not through
/// `App`, which request handlers share): what a connection may cost, and which peers'
/// forwarded headers name the client IP.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `[server]` edge limits (timeouts, connection caps, HTTP/2 limits).
    pub edge: edge::EdgeLimits,
    /// `[server] trusted_proxies` and `forwarded_header`.
    pub trusted_proxies: client_ip::TrustedProxies,
}

/// The proxy's routes; client IPs are decided with `trusted` (`client_ip`).
pub fn router(app: App, trusted: client_ip::TrustedProxies) -> Router {
    // An endpoint's per-IP and global rate limits (`rate_limit::limit`).
    macro_rules! limited {
        ($endpoint:ident) => {
            axum::middleware::from_fn_with_state(
                (app.clone(), Endpoint::$endpoint),
                rate_limit::limit,
            )
        };
    }
    // CORS only where browser-based clients need it, never on /authorize (RFC 9700 §2.6).
    let cors = CorsLayer::new()
        .allow_origin(Any)
        .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
        .allow_headers([
            header::CONTENT_TYPE,
            header::AUTHORIZATION,
            HeaderName::from_static("mcp-protocol-version"),
        ])
        .expose_headers([header::WWW_AUTHENTICATE])
        .max_age(std::time::Duration::from_secs(86_400));
    let api = Router::new()
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata::authorization_server),
        )
        .route(
            "/.well-known/oauth-protected-resource",
            get(metadata::protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(metadata::protected_resource),
        )
        .route(
            "/register",
            post(api::register).layer(axum::middleware::from_fn_with_state(
                app.clone(),
                rate_limit::register,
            )),
        )
        .route(
            "/token",
            post(api::token).layer(axum::middleware::from_fn_with_state(
                app.clone(),
                rate_limit::token,
            )),
        )
        .route("/revoke", post(api::revoke).layer(limited!(Revoke)))
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            durable::batch,
        ))
        .layer(cors);
    let browser = Router::new()
        .route(
            "/authorize",
            get(browser::authorize).layer(limited!(Authorize)),
        )
        .route("/consent", post(browser::consent).layer(limited!(Consent)))
        .route(
            "/callback/github",
            get(browser::callback)
                .post(browser::callback_finish)
                .layer(limited!(Callback)),
        )
        .route("/account", get(browser::account))
        .route(
            "/account/revoke",
            post(browser::account_revoke).layer(limited!(Account)),
        )
        .route(
            "/account/sign-out",
            post(browser::account_sign_out).layer(limited!(Account)),
        )
        .route(
            "/account/disconnect",
            post(browser::account_disconnect).layer(limited!(Account)),
        )
        .route(
            "/account/withdraw",
            post(browser::account_withdraw).layer(limited!(Account)),
        )
        .route(
            "/account/end-session",
            post(browser::account_end_session).layer(limited!(Account)),
        )
        .route(
            "/connect/{code}",
            get(browser::connect_show)
                .post(browser::connect_act)
                .layer(limited!(Connect)),
        )
        .route(
            "/approve/{code}",
            get(browser::approve_show)
                .post(browser::approve_act)
                .layer(limited!(Connect)),
        )
        .route(consent_ui::STYLESHEET_PATH, get(browser::stylesheet))
        // /mcp is not batched: its usual write is the call's audit event, made while the answer
        // streams, outside the handler (gateway/forward.rs), and that is not security state:
        // the background group commit makes it durable (audit/commit.rs). Its bindings of
        // security state (sessions, request states) flush by themselves.
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            durable::batch,
        ));
    // /mcp: browsers may call it from the proxy's own origin and configured ones; preflights
    // are answered here, without authentication.
    let allowed: Vec<String> = std::iter::once(app.config.public_url.origin())
        .chain(app.config.allowed_origins.iter().cloned())
        .collect();
    let mcp_cors = CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(move |origin, _| {
            origin
                .to_str()
                .is_ok_and(|o| allowed.iter().any(|a| a == o))
        }))
        .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers([
            header::WWW_AUTHENTICATE,
            HeaderName::from_static("mcp-session-id"),
            HeaderName::from_static("mcp-protocol-version"),
        ])
        .max_age(std::time::Duration::from_secs(86_400));
    // No body limit layer: the handler reads the body itself, after authentication.
    let gateway = Router::new().route("/mcp", any(mcp::mcp)).layer(mcp_cors);
    let https = !app.config.public_url.is_http();
    let drain = app.drain.clone();
    let metrics = app.metrics.clone();
    let routes = api
        .merge(browser)
        .merge(gateway)
        .route("/healthz", get(|| async { "ok" }))
        // The route's own span and metrics label (they need `MatchedPath`, set by routing).
        .route_layer(axum::middleware::from_fn(front::route))
        .fallback(browser::not_found)
        .with_state(app);
    // What every request passes, around the routed router as one service. Not
    // `Router::layer`: that boxes each layer into every route, and axum clones a route's whole
    // chain of boxes for each request, once more per `from_fn` layer inside it (measured:
    // ~100 allocations of a proxied `tools/call`'s ~500; BENCHMARKS.md); and not one `from_fn`
    // layer per concern either (`front`).
    let edge = ServiceBuilder::new()
        // Streaming bodies end cleanly at the shutdown grace deadline (shutdown.rs).
        .layer(axum::middleware::map_response_with_state(
            drain,
            crate::shutdown::bound_streams,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // HSTS whenever the public URL is https, TLS terminated here or in front (headers.rs).
        .service(front::Front::new(routes, metrics, trusted, https));
    Router::new().fallback_service(edge)
}

/// Serves until `shutdown` resolves, then lets in-flight requests finish; every connection
/// within `[server]`'s edge limits (conn.rs).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // TCP_NODELAY: without it Nagle's algorithm and the client's delayed ACK stall small
    // responses (measured: +44 ms per relayed MCP answer).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    });
    let Settings {
        edge,
        trusted_proxies,
    } = settings;
    let routes = router(app, trusted_proxies.clone());
    conn::serve(listener, routes, edge, trusted_proxies, shutdown).await
}

/// [`serve`] over TLS: the listener completes handshakes (and sets TCP_NODELAY) before
/// connections are counted and served; shutdown and limits are the same.
pub async fn serve_tls(
    listener: crate::tls::TlsListener,
    app: App,
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let Settings {
        edge,
        trusted_proxies,
    } = settings;
    let routes = router(app, trusted_proxies.clone());
    conn::serve(listener, routes, edge, trusted_proxies, shutdown).await
}
