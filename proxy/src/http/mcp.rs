//! `/mcp`: authenticate from the head, only then read the body (within its limit and the
//! body-read timeout), hand it to the gateway, stream the answer.
//!
//! A request without a valid token is answered before a byte of its body is read: nothing
//! of it is buffered, and hyper closes the connection instead of draining a large body.

use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::json;

use super::{MAX_MCP_BODY, error};
use crate::app::App;
use crate::gateway::{self, McpRequest};

/// Any method on `/mcp` (CORS preflights are answered by the CORS layer before this).
pub async fn mcp(State(app): State<App>, req: Request) -> Response {
    // Taken apart, not extracted piece by piece: axum's `HeaderMap` extractor clones the map.
    let (parts, body) = req.into_parts();
    let (method, headers) = (parts.method, parts.headers);
    let query = parts.uri.query().map(str::to_owned);
    let caller = match gateway::authenticate(&app, &headers, query.as_deref()).await {
        Ok(c) => c,
        Err(e) => return error::gateway(&app, e),
    };
    let body = match read_body(&headers, body, MAX_MCP_BODY).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    match gateway::handle(
        &app,
        caller,
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

/// Why an authenticated caller's body could not be read.
#[derive(Debug, PartialEq, Eq)]
enum BodyError {
    /// Over the limit (announced or counted).
    TooLarge,
    /// Not complete within `[server] body_read_timeout_secs`.
    TimedOut,
    /// The connection failed mid-body.
    Broken,
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        let (status, code, desc) = match self {
            BodyError::TooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "request_too_large",
                format!("MCP request bodies are at most {} MiB", MAX_MCP_BODY >> 20),
            ),
            BodyError::TimedOut => (
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the request body did not arrive in time".to_owned(),
            ),
            BodyError::Broken => (
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "the request body could not be read".to_owned(),
            ),
        };
        crate::telemetry::span::record_outcome(code);
        let mut r = (
            status,
            Json(json!({"error": code, "error_description": desc})),
        )
            .into_response();
        // The rest of the body is not read: the connection cannot carry another request.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    }
}

/// Reads the whole body, at most `limit` bytes: an announced length over it is refused
/// before reading, a body that grows past it as soon as it does.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            let timed_out = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<super::conn::BodyTimedOut>())
                || e.into_inner().is::<super::conn::BodyTimedOut>();
            if timed_out {
                BodyError::TimedOut
            } else {
                BodyError::Broken
            }
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn headers(len: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(l) = len {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from_str(l).unwrap());
        }
        h
    }

    #[tokio::test]
    async fn announced_or_counted_excess_is_too_large_and_a_small_body_is_read() {
        let big = Body::from(vec![b'x'; 11]);
        assert_eq!(
            read_body(&headers(Some("11")), big, 10).await,
            Err(BodyError::TooLarge)
        );
        let big = Body::from(vec![b'x'; 11]);
        assert_eq!(
            read_body(&headers(None), big, 10).await,
            Err(BodyError::TooLarge)
        );
        let ok = Body::from(&b"hello"[..]);
        assert_eq!(
            read_body(&headers(Some("5")), ok, 10).await.unwrap(),
            Bytes::from_static(b"hello")
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_past_its_deadline_is_a_timeout() {
        let never =
            Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
        let bounded = Body::new(super::super::conn::Deadline::new(
            never,
            Duration::from_secs(1),
        ));
        assert_eq!(
            read_body(&headers(None), bounded, 10).await,
            Err(BodyError::TimedOut)
        );
    }
}
