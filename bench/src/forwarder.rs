//! Context for benchmark 1: a bare forwarder built from the same crates as the proxy's `/mcp`
//! hop (axum in, a pooled reqwest client with TCP_NODELAY out, the answer relayed as a
//! stream), with no authentication, no JSON-RPC parsing, no store and no audit. Measured side
//! by side with the direct backend and the proxy, it shows what the second HTTP hop alone
//! costs on this machine, i.e. the ceiling any gateway built this way reaches here.

use std::net::SocketAddr;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[derive(Clone)]
struct Upstream {
    http: reqwest::Client,
    url: String,
}

async fn forward(State(up): State<Upstream>, body: Bytes) -> Response {
    let sent = up
        .http
        .post(&up.url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .body(body)
        .send()
        .await;
    let Ok(resp) = sent else {
        return StatusCode::BAD_GATEWAY.into_response();
    };
    let status = resp.status();
    let content_type = resp.headers().get(header::CONTENT_TYPE).cloned();
    let mut out = Response::new(Body::from_stream(resp.bytes_stream()));
    *out.status_mut() = status;
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        content_type.unwrap_or(HeaderValue::from_static("application/json")),
    );
    out
}

/// Starts the forwarder in front of `backend_url` on an ephemeral loopback port; its URL.
pub async fn start(backend_url: String) -> String {
    use axum::serve::ListenerExt;
    mcp_oauth_proxy::install_crypto_provider();
    #[allow(clippy::disallowed_methods)]
    // the bare forwarder measured beside the proxy, not the proxy
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .tcp_nodelay(true)
        .build()
        .expect("forwarder client");
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind forwarder");
    let addr = listener.local_addr().expect("forwarder addr");
    let app = axum::Router::new()
        .fallback(axum::routing::post(forward))
        .with_state(Upstream {
            http,
            url: backend_url,
        });
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("forwarder serve");
    });
    format!("http://{addr}/mcp")
}
