//! Server-Sent Events: framing, the request-scoped response streams of POST, and the standalone
//! `GET` stream of a 2025-x session.
//!
//! Every body here is an `axum::body::Body::from_stream` over events produced one at a time, so
//! each event is written (and flushed by hyper) as soon as it exists; nothing is buffered into a
//! whole body first. When the client goes away hyper drops the body stream, which is how the
//! backend notices a disconnect ([`ResponseGuard`]) and how a producer notices it (its channel
//! closes).

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::Stream;
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::App;

/// A comment line every so often keeps idle intermediaries from closing the standalone stream.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// `id: <n>\nevent: message\ndata: <json>\n\n` (compact JSON never contains a newline).
pub(crate) fn frame(id: u64, message: &Value) -> Bytes {
    Bytes::from(format!("id: {id}\nevent: message\ndata: {message}\n\n"))
}

fn keep_alive() -> Bytes {
    Bytes::from_static(b": keep-alive\n\n")
}

/// A `200 text/event-stream` response over `events`, with the anti-buffering headers.
pub(crate) fn response<S>(events: S, extra: &[(HeaderName, HeaderValue)]) -> Response
where
    S: Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
{
    let mut resp = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response();
    let headers = resp.headers_mut();
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    for (name, value) in extra {
        headers.insert(name.clone(), value.clone());
    }
    resp
}

// ---------------------------------------------------------------- POST response streams

/// One JSON-RPC message for a response stream; `last` marks the response that ends it.
pub(crate) struct Outgoing {
    pub(crate) message: Value,
    pub(crate) last: bool,
}

/// Counts the stream as completed when its last event is handed out, or as cancelled when it is
/// dropped before that (the client went away, or the server stopped).
struct ResponseGuard {
    app: App,
    finished: bool,
}

impl ResponseGuard {
    fn finish(&mut self) {
        if !self.finished {
            self.finished = true;
            self.app.completed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for ResponseGuard {
    fn drop(&mut self) {
        if !self.finished {
            tracing::debug!("demo backend: response stream dropped before its end");
            self.app.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A request-scoped SSE stream fed by a producer through `rx`. Event ids come from `ids` (the
/// session's counter, or a fresh one per stream when there are no sessions).
pub(crate) fn response_stream(
    app: App,
    ids: Arc<AtomicU64>,
    rx: mpsc::Receiver<Outgoing>,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let guard = ResponseGuard {
        app,
        finished: false,
    };
    futures_util::stream::unfold((rx, guard, ids), |(mut rx, mut guard, ids)| async move {
        if guard.finished {
            return None;
        }
        // `None`: the producer gave up without a response; dropping the guard counts it.
        let out = rx.recv().await?;
        if out.last {
            guard.finish();
        }
        let id = ids.fetch_add(1, Ordering::SeqCst) + 1;
        Some((Ok(frame(id, &out.message)), (rx, guard, ids)))
    })
}

/// A response stream carrying just `message` (a JSON-RPC response answered over SSE).
pub(crate) fn single(
    app: App,
    ids: Arc<AtomicU64>,
    message: Value,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let (tx, rx) = mpsc::channel(1);
    // Cannot fail: the channel is empty and `rx` is alive.
    let _ = tx.try_send(Outgoing {
        message,
        last: true,
    });
    response_stream(app, ids, rx)
}

// ---------------------------------------------------------------- standalone GET stream

/// The open `GET` stream of one session: a cursor over the session's message history.
pub(crate) struct Standalone {
    pub(crate) app: App,
    pub(crate) session_id: String,
    pub(crate) generation: u64,
    /// Highest event id already sent on this stream (or given as `Last-Event-ID`).
    pub(crate) cursor: u64,
    pub(crate) wake: watch::Receiver<()>,
    pub(crate) stopping: watch::Receiver<bool>,
}

enum Next {
    Message(u64, Value),
    Wait,
    End,
}

enum Woken {
    Again,
    KeepAlive,
    End,
}

impl Standalone {
    fn next_message(&mut self) -> Next {
        let mut st = self.app.lock();
        let Some(session) = st.sessions.get_mut(&self.session_id) else {
            return Next::End; // DELETEd
        };
        if session.stream_generation != self.generation {
            return Next::End; // a newer GET took over
        }
        let cursor = self.cursor;
        match session.history.iter().find(|(id, _)| *id > cursor) {
            Some((id, message)) => {
                let (id, message) = (*id, message.clone());
                self.cursor = id;
                session.delivered = session.delivered.max(id);
                Next::Message(id, message)
            }
            None => {
                // Pushes happen under the same lock, so none can slip in before the wait.
                self.wake.borrow_and_update();
                Next::Wait
            }
        }
    }

    async fn wait(&mut self) -> Woken {
        if *self.stopping.borrow() {
            return Woken::End;
        }
        tokio::select! {
            changed = self.wake.changed() => match changed {
                Ok(()) => Woken::Again,
                Err(_) => Woken::End, // session forgotten
            },
            _ = self.stopping.changed() => Woken::End,
            () = tokio::time::sleep(KEEP_ALIVE) => Woken::KeepAlive,
        }
    }

    pub(crate) fn into_stream(self) -> impl Stream<Item = Result<Bytes, Infallible>> + Send {
        futures_util::stream::unfold(self, |mut s| async move {
            loop {
                match s.next_message() {
                    Next::Message(id, message) => return Some((Ok(frame(id, &message)), s)),
                    Next::End => return None,
                    Next::Wait => {}
                }
                match s.wait().await {
                    Woken::Again => {}
                    Woken::KeepAlive => return Some((Ok(keep_alive()), s)),
                    Woken::End => return None,
                }
            }
        })
    }
}
