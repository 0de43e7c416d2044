//! `/mcp`: parse the request, hand it to the gateway, stream the answer.

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method};

use super::error;
use crate::app::App;
use crate::gateway::{self, McpRequest};

/// Any method on `/mcp` (CORS preflights are answered by the CORS layer before this).
pub async fn mcp(
    State(app): State<App>,
    method: Method,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
    body: Bytes,
) -> Response {
    match gateway::handle(
        &app,
        McpRequest {
            method,
            headers,
            query,
            body,
        },
    )
    .await
    {
        Ok(f) => {
            let mut resp = Response::new(Body::from_stream(f.body));
            *resp.status_mut() = f.status;
            *resp.headers_mut() = f.headers;
            resp
        }
        Err(e) => error::gateway(&app, e),
    }
}
