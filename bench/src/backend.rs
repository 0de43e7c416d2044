//! A trivial MCP backend: any POST is read as one JSON-RPC request and answered at once with a
//! fixed small `tools/call` result (its `id` echoed), as `application/json`. It speaks
//! 2026-07-28 (stateless: no `initialize`, no sessions) and ignores its credential, so the
//! figures measure the proxy, not a backend.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

async fn answer(body: Bytes) -> Response {
    let id = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null);
    let msg = json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"content": [{"type": "text", "text": "ok"}], "isError": false},
    });
    let mut resp = (StatusCode::OK, msg.to_string()).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        "mcp-protocol-version",
        HeaderValue::from_static("2026-07-28"),
    );
    resp
}

/// Starts the backend on an ephemeral loopback port; returns its MCP URL.
pub async fn start() -> String {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("bind backend");
    let addr = listener.local_addr().expect("backend addr");
    let app = axum::Router::new().fallback(axum::routing::post(answer));
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("backend serve");
    });
    format!("http://{addr}/mcp")
}
