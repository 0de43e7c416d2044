//! `/mcp`: authenticate from the head, only then read the body (within its limit, the
//! body-read timeout and the token's budgets), hand it to the gateway, stream the answer.
//!
//! A request without a valid token is answered before a byte of its body is read: nothing
//! of it is buffered, and hyper closes the connection instead of draining a large body.
//! An authenticated token has a number of requests it may have in flight (until its answer
//! ends) and a number of body bytes it may hold (until the gateway is done with them)
//! ([`crate::limits::bodies`], shared by the listener through the request's extensions);
//! beyond either its request gets 429 before its body is read.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::json;

use super::conn::{BodyBudgetSpent, BodyTimedOut, EdgeHold, Refused};
use super::{MAX_MCP_BODY, error};
use crate::app::App;
use crate::gateway::{self, McpRequest};
use crate::limits::bodies::{BodyBudgets, Held, Spent, TokenKey, TokenSlot};

/// Any method on `/mcp` (CORS preflights are answered by the CORS layer before this).
pub async fn mcp(State(app): State<App>, req: Request) -> Response {
    // Taken apart, not extracted piece by piece: axum's `HeaderMap` extractor clones the map.
    let (parts, body) = req.into_parts();
    let budgets = parts.extensions.get::<Arc<BodyBudgets>>().cloned();
    let edge = parts.extensions.get::<EdgeHold>().cloned();
    let (method, headers) = (parts.method, parts.headers);
    let query = parts.uri.query().map(str::to_owned);
    let caller = match gateway::authenticate(&app, &headers, query.as_deref()).await {
        Ok(c) => c,
        Err(e) => return error::gateway(&app, e),
    };
    // Without budgets (a router served without the listener) only the body limit applies.
    let (slot, mut held) = match budgets
        .map(|b| admit(&b, edge.as_ref(), &headers))
        .transpose()
    {
        Ok(admitted) => admitted.unzip(),
        Err(e) => return e.into_response(),
    };
    let body = match read_body(&headers, body, MAX_MCP_BODY, held.as_mut()).await {
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
            // The gateway is done with the body; the request stays in flight until its answer
            // ends.
            drop(held);
            let body = f.body.map(move |chunk| {
                let _in_flight = &slot;
                chunk
            });
            let mut resp = Response::new(Body::from_stream(body));
            *resp.status_mut() = f.status;
            *resp.headers_mut() = f.headers;
            resp
        }
        Err(e) => error::gateway(&app, e),
    }
}

/// The bearer token as `gateway::authenticate` reads it (it accepted it just before).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    v.split_once(' ').map(|(_, token)| token.trim())
}

/// A request slot of the caller's token and its body's bytes against the token's budget and
/// (through `edge`) everyone's and the source's: its announced length; a body of unknown
/// length holds its bytes as they arrive. Or the limit it hit.
fn admit(
    budgets: &Arc<BodyBudgets>,
    edge: Option<&EdgeHold>,
    headers: &HeaderMap,
) -> Result<(TokenSlot, Held), BodyError> {
    // Authenticated, so there is a bearer; the empty key stands for none all the same.
    let key = TokenKey::of(bearer(headers).unwrap_or_default());
    let slot = budgets.token_request(key).map_err(BodyError::TokenLimit)?;
    let announced = announced(headers).unwrap_or(0).min(MAX_MCP_BODY as u64);
    let held = budgets
        .hold_for_token(key, announced)
        .map_err(BodyError::TokenLimit)?;
    if let Some(edge) = edge {
        edge.hold_at_least(announced)
            .map_err(|_| BodyError::BusyBeforeReading)?;
    }
    Ok((slot, held))
}

fn announced(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
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
    /// The token has its requests in flight, or holds its bytes
    /// (`mcp_max_requests_per_token`, `mcp_max_body_bytes_per_token`).
    TokenLimit(Spent),
    /// Everyone's or the source's body budget was spent while this body arrived.
    Busy,
    /// The same, before a byte of it was read.
    BusyBeforeReading,
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
            BodyError::TokenLimit(Spent::TokenRequests) => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                "this token has too many requests in flight; retry after the number of seconds in Retry-After".to_owned(),
            ),
            BodyError::TokenLimit(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_requests",
                "this token has too many request bodies in flight; retry after the number of seconds in Retry-After".to_owned(),
            ),
            BodyError::Busy | BodyError::BusyBeforeReading => (
                StatusCode::SERVICE_UNAVAILABLE,
                "temporarily_unavailable",
                "the server is holding too many request bodies; retry after the number of seconds in Retry-After".to_owned(),
            ),
        };
        let retry = matches!(
            self,
            BodyError::TokenLimit(_) | BodyError::Busy | BodyError::BusyBeforeReading
        );
        let busy_before_reading = self == BodyError::BusyBeforeReading;
        crate::telemetry::span::record_outcome(code);
        let mut r = (
            status,
            Json(json!({"error": code, "error_description": desc})),
        )
            .into_response();
        // The rest of the body is not read: the connection cannot carry another request.
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        if retry {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(1));
        }
        if busy_before_reading {
            // Nothing of the request was processed: HTTP/2 gets REFUSED_STREAM (conn.rs).
            r.extensions_mut().insert(Refused);
        }
        r
    }
}

/// Whether `T` is in `e`'s chain of causes.
fn caused_by<T: std::error::Error + 'static>(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<T>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// Reads the whole body, at most `limit` bytes: an announced length over it is refused
/// before reading, a body that grows past it as soon as it does. Bytes beyond what `held`
/// holds are added to it as they arrive.
async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    mut held: Option<&mut Held>,
) -> Result<Bytes, BodyError> {
    if announced(headers).is_some_and(|n| n > limit as u64) {
        return Err(BodyError::TooLarge);
    }
    let mut stream = body.into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            if caused_by::<BodyTimedOut>(&e) {
                BodyError::TimedOut
            } else if caused_by::<BodyBudgetSpent>(&e) {
                BodyError::Busy
            } else {
                BodyError::Broken
            }
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
        if let Some(held) = held.as_deref_mut() {
            let more = (buf.len() as u64).saturating_sub(held.bytes());
            held.grow(more).map_err(BodyError::TokenLimit)?;
        }
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
            read_body(&headers(Some("11")), big, 10, None).await,
            Err(BodyError::TooLarge)
        );
        let big = Body::from(vec![b'x'; 11]);
        assert_eq!(
            read_body(&headers(None), big, 10, None).await,
            Err(BodyError::TooLarge)
        );
        let ok = Body::from(&b"hello"[..]);
        assert_eq!(
            read_body(&headers(Some("5")), ok, 10, None).await.unwrap(),
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
            read_body(&headers(None), bounded, 10, None).await,
            Err(BodyError::TimedOut)
        );
    }

    fn budgets(per_token: u64, requests: usize) -> Arc<BodyBudgets> {
        BodyBudgets::new(crate::limits::bodies::BodyCaps {
            total: 1 << 30,
            per_token,
            per_source: 1 << 30,
            requests_per_token: requests,
        })
    }

    fn bearer_headers(token: &str, len: Option<&str>) -> HeaderMap {
        let mut h = headers(len);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
        );
        h
    }

    #[test]
    fn a_token_gets_its_requests_in_flight_and_its_announced_bytes_and_no_more() {
        let b = budgets(100, 2);
        let one = admit(&b, None, &bearer_headers("t1", Some("60"))).unwrap();
        assert_eq!(one.1.bytes(), 60);
        // Over the token's bytes: refused before reading, and the slot it took is given back.
        assert_eq!(
            admit(&b, None, &bearer_headers("t1", Some("41"))).unwrap_err(),
            BodyError::TokenLimit(Spent::Token)
        );
        let two = admit(&b, None, &bearer_headers("t1", Some("40"))).unwrap();
        assert_eq!(
            admit(&b, None, &bearer_headers("t1", None)).unwrap_err(),
            BodyError::TokenLimit(Spent::TokenRequests)
        );
        // Another token, and the same token with other spacing, key the same way as the
        // gateway reads them.
        assert!(admit(&b, None, &bearer_headers("t2", Some("100"))).is_ok());
        assert_eq!(
            admit(&b, None, &bearer_headers("  t1 ", None)).unwrap_err(),
            BodyError::TokenLimit(Spent::TokenRequests)
        );
        drop((one, two));
        assert!(admit(&b, None, &bearer_headers("t1", Some("100"))).is_ok());
        let r = BodyError::TokenLimit(Spent::TokenRequests).into_response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    }

    #[test]
    fn an_authenticated_body_the_source_budget_cannot_hold_is_refused_unread() {
        let b = BodyBudgets::new(crate::limits::bodies::BodyCaps {
            total: 1 << 30,
            per_token: 1 << 30,
            per_source: 100,
            requests_per_token: 10,
        });
        let source = "192.0.2.1".parse().ok();
        let edge = EdgeHold::new(
            b.hold(source, crate::limits::bodies::Pool::Authenticated, 0)
                .unwrap(),
        );
        let ok = admit(&b, Some(&edge), &bearer_headers("t1", Some("60"))).unwrap();
        let other = EdgeHold::new(
            b.hold(source, crate::limits::bodies::Pool::Authenticated, 0)
                .unwrap(),
        );
        let refused = admit(&b, Some(&other), &bearer_headers("t1", Some("41"))).unwrap_err();
        assert_eq!(refused, BodyError::BusyBeforeReading);
        let r = refused.into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            r.extensions().get::<Refused>().is_some(),
            "HTTP/2 resets it with REFUSED_STREAM"
        );
        assert!(
            BodyError::Busy
                .into_response()
                .extensions()
                .get::<Refused>()
                .is_none(),
            "a body refused mid-read was partly processed"
        );
        // The first request's body counts until its request is done with it.
        drop(ok);
        assert!(admit(&b, Some(&other), &bearer_headers("t1", Some("41"))).is_err());
        drop(edge);
        assert!(admit(&b, Some(&other), &bearer_headers("t1", Some("41"))).is_ok());
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_holds_its_bytes_as_they_arrive() {
        let b = budgets(8, 1);
        let (_slot, mut held) = admit(&b, None, &bearer_headers("t1", None)).unwrap();
        assert_eq!(held.bytes(), 0);
        let small = Body::from(&b"12345678"[..]);
        assert_eq!(
            read_body(&headers(None), small, 100, Some(&mut held))
                .await
                .unwrap()
                .len(),
            8
        );
        assert_eq!(held.bytes(), 8);
        drop(held);
        let mut held = b.hold_for_token(TokenKey::of("t2"), 0).unwrap();
        let big = Body::from(&b"123456789"[..]);
        assert_eq!(
            read_body(&headers(None), big, 100, Some(&mut held)).await,
            Err(BodyError::TokenLimit(Spent::Token))
        );
    }
}
