//! The accept loop: what a connection may cost before, between and during requests
//! ([`EdgeLimits`](super::edge::EdgeLimits)).
//!
//! - **Connection caps.** A permit of the global cap is taken *before* accepting, so at the
//!   cap the listener stops accepting and new connections wait in the kernel backlog instead
//!   of being closed. Then the per-source cap (IPv4 address, IPv6 /64:
//!   [`limits::bucket_key`](crate::limits::bucket_key), the keying of the rate limits and of
//!   the TLS handshake limits): a connection beyond it is closed at once. Sources are TCP
//!   peers; a configured trusted proxy carries everyone's connections and is held only to the
//!   global cap. Behind TLS the count starts once the handshake is done (`tls.rs` bounds
//!   handshakes in progress on its own).
//! - **Timeouts.** hyper-util's version detection and HTTP/2 have no header or idle timer, so
//!   each connection has a watchdog: while no request is in flight, the connection must
//!   produce one within `header_read_timeout` of its start, and within `idle_timeout` of its
//!   last request's end; otherwise it is shut down gracefully (HTTP/2 GOAWAY) and dropped
//!   [`FORCE_CLOSE_AFTER`] later if it still has no request. On HTTP/1.1 hyper's own header
//!   timer (`header_read_timeout`, which hyper starts at the connection's start and again
//!   whenever it is idle) closes a connection whose head does not arrive in time; so an idle
//!   HTTP/1.1 keep-alive connection lasts at most `header_read_timeout`. Request bodies get
//!   `body_read_timeout` (`/mcp`) or `form_body_read_timeout` (every other route) in total
//!   from their first read ([`Deadline`]).
//! - **Write progress** (`progress.rs`): a response that waits for its client past
//!   `response_stall_timeout` (one wait) or `response_write_timeout` (all waits of an answer
//!   that is not an event stream) is reset (HTTP/2 `RST_STREAM`) or its connection closed
//!   (HTTP/1.1); a connection on which nothing moved, or whose socket accepts no write, for
//!   `response_stall_timeout` is closed whatever is in flight.
//! - **Held bodies** ([`crate::limits::bodies`]): a request body holds its announced length
//!   (or its bytes as they arrive, `Metered`) against everyone's and its client IP's budget
//!   until its handler is done with it; a request the budget cannot hold is refused before
//!   routing, with `REFUSED_STREAM` on HTTP/2 (hyper resets the stream with the service
//!   error's reason) and 503 on HTTP/1.1. `/mcp` holds nothing until its caller is
//!   authenticated (a stranger's body is never read); then `mcp.rs` holds the announced
//!   length through [`EdgeHold`] and the token's budget, refusing the same way ([`Refused`]).
//! - **HTTP/2**: concurrent streams, header list size, both reset limits and the receive
//!   windows are hyper's settings, set explicitly.
//! - **Shutdown** as `axum::serve` does it: the listener is dropped at once (new connections
//!   are refused), every connection is told to shut down gracefully, and the serve future
//!   ends when the last one has.

mod progress;

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::serve::Listener;
use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;

use self::progress::{Activity, Expiry, StreamExecutor, Tracked, WatchedIo};
use super::client_ip::TrustedProxies;
use super::edge::EdgeLimits;
use crate::limits::bodies::{BodyBudgets, BodyCaps, Held, Pool, Spent};

/// After a timeout's graceful shutdown, how long a connection may take to close before it is
/// dropped (an idle one only if it still has no request in flight; a stalled one always).
pub const FORCE_CLOSE_AFTER: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` within `limits` until `shutdown` resolves, then lets the
/// open connections finish (see the module docs).
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: EdgeLimits,
    trusted: TrustedProxies,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener<Addr = SocketAddr>,
{
    let global = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let sources = Sources::new(limits.max_connections_per_source.max(1));
    let budgets = BodyBudgets::new(BodyCaps {
        total: limits.max_body_bytes,
        per_source: limits.max_body_bytes_per_source,
        per_token: limits.mcp_max_body_bytes_per_token,
        requests_per_token: limits.mcp_max_requests_per_token,
    });
    let trusted = Arc::new(trusted);
    let (stop_tx, stop_rx) = watch::channel(false);
    // Each connection task holds a clone; `closed()` resolves when the last one has ended.
    let (done_tx, done_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = global.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let source = if trusted.contains(peer.ip()) {
            None
        } else {
            match sources.admit(crate::limits::bucket_key(peer.ip())) {
                Some(s) => Some(s),
                None => {
                    // Debug, not warn: the one doing this would also control the log volume.
                    tracing::debug!(%peer, "too many connections from this source; closing");
                    continue;
                }
            }
        };
        let conn = Conn {
            router: router.clone(),
            limits,
            peer,
            trusted: trusted.clone(),
            budgets: budgets.clone(),
            stop: stop_rx.clone(),
            _done: done_rx.clone(),
            _permits: (permit, source),
        };
        tokio::spawn(conn.run(io));
    }
    // Not accepting any more: new connections are refused from here on.
    drop(listener);
    let _ = stop_tx.send(true);
    drop(done_rx);
    done_tx.closed().await;
    Ok(())
}

/// Open connections per source; a [`SourcePermit`] gives its slot back when dropped.
#[derive(Clone)]
struct Sources {
    cap: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One open connection of a source.
struct SourcePermit {
    key: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Sources {
    fn new(cap: usize) -> Sources {
        Sources {
            cap,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection from `key`, unless it has `cap` open. The table holds
    /// only sources with an open connection, so it is bounded by the global cap.
    fn admit(&self, key: IpAddr) -> Option<SourcePermit> {
        // A poisoned lock only means a panic elsewhere between two integer updates.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(key).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(SourcePermit {
            key,
            open: self.open.clone(),
        })
    }
}

impl Drop for SourcePermit {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// One accepted connection and what it holds until it ends.
struct Conn {
    router: Router,
    limits: EdgeLimits,
    peer: SocketAddr,
    trusted: Arc<TrustedProxies>,
    budgets: Arc<BodyBudgets>,
    stop: watch::Receiver<bool>,
    /// Dropped when the connection ends (the serve loop waits for all of them).
    _done: watch::Receiver<()>,
    /// The global and per-source slots.
    _permits: (OwnedSemaphorePermit, Option<SourcePermit>),
}

impl Conn {
    async fn run<I>(self, io: I)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let limits = self.limits;
        let activity = Activity::new();
        // HTTP/2 streams run under a guard that resets them at their write deadline.
        let mut builder = auto::Builder::new(StreamExecutor::new(activity.clone()));
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_read_timeout)
            .keep_alive(true)
            // The read buffer bounds the request head (hyper answers 431 beyond it).
            .max_buf_size(limits.max_header_bytes.max(8192));
        builder
            .http2()
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.http2_max_concurrent_streams)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .max_pending_accept_reset_streams(limits.http2_max_pending_reset_streams)
            .max_local_error_reset_streams(limits.http2_max_local_error_resets)
            // hyper's defaults, set so that an update cannot loosen them unnoticed: the body
            // bytes a connection may have received and not yet read (1 MiB, whatever its
            // streams), and the response bytes h2 buffers per stream once hyper has handed
            // them over (400 KiB; they leave when the client's window and socket allow).
            .initial_stream_window_size(H2_WINDOW)
            .initial_connection_window_size(H2_WINDOW)
            .max_send_buf_size(H2_SEND_BUFFER);
        let service = ConnService {
            router: self.router.clone(),
            peer: self.peer,
            trusted: self.trusted.clone(),
            limits,
            budgets: self.budgets.clone(),
            activity: activity.clone(),
        };
        let io = WatchedIo::new(io, activity.clone());
        let conn = builder.serve_connection(TokioIo::new(io), service);
        let mut conn = std::pin::pin!(conn);
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let mut expired = std::pin::pin!(activity.expired(limits));
        let mut timed_out: Option<Expiry> = None;
        let mut force = std::pin::pin!(tokio::time::sleep(FORCE_CLOSE_AFTER));
        let mut forcing = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(peer = %self.peer, error = %e, "connection ended with an error");
                    }
                    break;
                }
                told = async { stop.wait_for(|s| *s).await.is_ok() }, if !stopping => {
                    stopping = true;
                    if told {
                        conn.as_mut().graceful_shutdown();
                    }
                }
                why = &mut expired, if timed_out.is_none() => {
                    timed_out = Some(why);
                    match why {
                        Expiry::Idle => tracing::debug!(peer = %self.peer, "connection without a request for too long; closing"),
                        Expiry::Stalled => tracing::debug!(peer = %self.peer, "connection whose client takes nothing it is sent; closing"),
                    }
                    conn.as_mut().graceful_shutdown();
                    force.as_mut().reset(Instant::now() + FORCE_CLOSE_AFTER);
                    forcing = true;
                }
                () = &mut force, if forcing => {
                    forcing = false;
                    if timed_out == Some(Expiry::Stalled) || activity.idle() {
                        // Stalled: its responses cannot finish. Idle but still mid-head
                        // (HTTP/1.1 graceful shutdown waits for it): drop it.
                        break;
                    }
                    // A request got in before the shutdown: it finishes, then hyper closes;
                    // the watchdog keeps watching it.
                    timed_out = None;
                    expired.set(activity.expired(limits));
                }
            }
        }
    }
}

/// HTTP/2 receive windows, stream and connection (hyper's default).
const H2_WINDOW: u32 = 1024 * 1024;
/// Response bytes h2 buffers per stream (hyper's default).
const H2_SEND_BUFFER: usize = 400 * 1024;

/// The router as one connection's hyper service: adds the peer address (`ConnectInfo`) and
/// the body budgets, holds the request body's bytes against them and bounds its read time,
/// and counts the request in flight until its response body is done.
#[derive(Clone)]
struct ConnService {
    router: Router,
    peer: SocketAddr,
    trusted: Arc<TrustedProxies>,
    limits: EdgeLimits,
    budgets: Arc<BodyBudgets>,
    activity: Activity,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Bytes a body holds before its first byte is read: one, to find its budget spent before it
/// is read, unless it is empty or announced over `limit` (the route then refuses it unread).
/// Never its announced length: announcing costs the sender nothing, so a budget charged by
/// announcements is spent by streams that send no byte. The rest is charged as it arrives
/// ([`Metered`]).
fn initial_hold(limit: u64, announced: Option<u64>, empty: bool) -> u64 {
    match announced {
        _ if empty => 0,
        Some(n) if n > limit => 0,
        _ => 1,
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    /// Only ever `REFUSED_STREAM`, on HTTP/2: hyper resets the stream with the error's reason.
    type Error = h2::Error;
    type Future = BoxFuture<Result<Self::Response, h2::Error>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        let mcp = req.uri().path() == "/mcp";
        let (limit, timeout) = body_rules(mcp, &self.limits);
        let announced = req
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // `/mcp` holds nothing until its caller is authenticated (`mcp.rs` then holds the
        // announced length through `EdgeHold`): a stranger's unread body costs nothing.
        let hold = if mcp {
            0
        } else {
            initial_hold(limit, announced, http_body::Body::is_end_stream(req.body()))
        };
        let source = crate::limits::bucket_key(super::client_ip::resolve(
            self.peer.ip(),
            req.headers(),
            &self.trusted,
        ));
        let pool = if mcp {
            Pool::Authenticated
        } else {
            Pool::Strangers
        };
        // A body announcing more than is free now is refused unread; the announcement itself
        // holds nothing (see `initial_hold`).
        let fits = match announced {
            Some(n) if hold > 0 => self.budgets.fits(Some(source), pool, n),
            _ => Ok(()),
        };
        let held = match fits.and_then(|()| self.budgets.hold(Some(source), pool, hold)) {
            Ok(h) => Arc::new(Mutex::new(h)),
            Err(spent) => {
                tracing::debug!(peer = %self.peer, ?spent, "body budget spent; refusing the request");
                let version = req.version();
                let limits = self.limits;
                let activity = self.activity.clone();
                return Box::pin(async move {
                    let resp = refuse(version, budget_spent())?;
                    Ok(resp.map(|b| Tracked::new(b, false, &limits, &activity, in_flight)))
                });
            }
        };
        let spent = Arc::new(AtomicBool::new(false));
        let mut req = req.map(|b| {
            Body::new(Deadline::new(
                Metered {
                    body: b,
                    held: held.clone(),
                    read: 0,
                    spent: spent.clone(),
                },
                timeout,
            ))
        });
        req.extensions_mut().insert(ConnectInfo(self.peer));
        req.extensions_mut().insert(self.budgets.clone());
        req.extensions_mut().insert(EdgeHold(held.clone()));
        let version = req.version();
        let router = self.router.clone();
        let limits = self.limits;
        let activity = self.activity.clone();
        Box::pin(async move {
            let resp = match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            // The handler is done with the body (the body itself may still hold it).
            drop(held);
            // A stranger's body that ran out of budget while it arrived was refused by its
            // route as unreadable; answer it as the spent budget it is (`/mcp` does so itself).
            let resp = if !mcp && spent.load(Ordering::Relaxed) {
                refuse(version, budget_spent())?
            } else if resp.extensions().get::<Refused>().is_some() {
                refuse(version, resp)?
            } else {
                resp
            };
            let event_stream = resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            Ok(resp.map(|body| Tracked::new(body, event_stream, &limits, &activity, in_flight)))
        })
    }
}

/// A body's largest size and its read time on a route: `/mcp`'s, or every other route's
/// (forms and registration).
fn body_rules(mcp: bool, limits: &EdgeLimits) -> (u64, Duration) {
    if mcp {
        (super::MAX_MCP_BODY as u64, limits.body_read_timeout)
    } else {
        (super::MAX_BODY as u64, limits.form_body_read_timeout)
    }
}

/// A refusal that processed nothing of the request: on HTTP/2 the stream is reset with
/// `REFUSED_STREAM` (hyper resets it with the service error's reason; the client may retry it
/// as is), on HTTP/1.1 `answer` is sent.
fn refuse(version: http::Version, answer: Response<Body>) -> Result<Response<Body>, h2::Error> {
    if version == http::Version::HTTP_2 {
        return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
    }
    Ok(answer)
}

/// HTTP/1.1's answer when the body budget is spent: 503 with `Retry-After`, and the
/// connection closes (the body is not read).
fn budget_spent() -> Response<Body> {
    use crate::oauth::error::{ErrorCode, OAuthError};
    let mut resp = super::error::oauth_json(&OAuthError::new(
        ErrorCode::TemporarilyUnavailable,
        "the server is holding too many request bodies; retry after the number of seconds in Retry-After",
    ));
    let headers = resp.headers_mut();
    headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from(1));
    headers.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    resp
}

/// What a request's body holds against everyone's and its source's budget, for a handler
/// that decides late how much to hold (`/mcp`, once its caller is authenticated).
#[derive(Clone)]
pub struct EdgeHold(Arc<Mutex<Held>>);

impl EdgeHold {
    /// A hold of its own, outside any request (for handlers' tests).
    #[cfg(test)]
    pub fn new(held: Held) -> EdgeHold {
        EdgeHold(Arc::new(Mutex::new(held)))
    }

    /// Holds at least `bytes` in all, or says which budget is spent.
    pub fn hold_at_least(&self, bytes: u64) -> Result<(), Spent> {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let more = bytes.saturating_sub(held.bytes());
        held.grow(more)
    }
}

/// Marks a handler's refusal that processed nothing of the request: on HTTP/2 the stream is
/// reset with `REFUSED_STREAM` instead (the client may retry it as is), on HTTP/1.1 the
/// response is sent.
#[derive(Debug, Clone, Copy)]
pub struct Refused;

/// The budget for request bodies was spent while this one arrived.
#[derive(Debug, thiserror::Error)]
#[error("too many request bodies are held; this one was not read in full")]
pub struct BodyBudgetSpent(pub Spent);

/// A request body holding its bytes against the budgets as they arrive; `spent` is set when
/// a budget ran out before the body did.
struct Metered<B> {
    body: B,
    held: Arc<Mutex<Held>>,
    read: u64,
    spent: Arc<AtomicBool>,
}

impl<B> http_body::Body for Metered<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        let frame = match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) => f,
            Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        if let Some(data) = frame.data_ref() {
            this.read += data.len() as u64;
            let mut held = this.held.lock().unwrap_or_else(|p| p.into_inner());
            let more = this.read.saturating_sub(held.bytes());
            if let Err(spent) = held.grow(more) {
                this.spent.store(true, Ordering::Relaxed);
                return Poll::Ready(Some(Err(Box::new(BodyBudgetSpent(spent)))));
            }
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The request body did not arrive within `body_read_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

/// A request body that must arrive in full within a time counted from its first read (a
/// handler that authenticates first does not spend the client's allowance).
pub struct Deadline<B> {
    body: B,
    timeout: Duration,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Deadline<B> {
    /// `body`, bounded by `timeout` from its first read.
    pub fn new(body: B, timeout: Duration) -> Deadline<B> {
        Deadline {
            body,
            timeout,
            sleep: None,
        }
    }
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        let this = &mut *self;
        let timeout = this.timeout;
        // The clock starts at the first read.
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        // What has arrived is handed out even at the deadline.
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn a_source_gets_its_cap_and_its_slots_back() {
        let sources = Sources::new(2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let one = sources.admit(a).unwrap();
        let two = sources.admit(a).unwrap();
        assert!(sources.admit(a).is_none(), "third from a");
        assert!(sources.admit(b).is_some(), "another source is unaffected");
        drop(one);
        let three = sources.admit(a);
        assert!(three.is_some(), "a slot came back");
        drop((two, three));
        assert!(
            sources.open.lock().unwrap().is_empty(),
            "table forgets idle sources"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_trickles_past_its_deadline_fails() {
        let (mut tx, rx) = futures_channel_body();
        let mut body = Deadline::new(rx, Duration::from_secs(5));
        tx.send(Bytes::from_static(b"a")).await;
        assert!(body.frame().await.unwrap().is_ok());
        tokio::time::advance(Duration::from_secs(4)).await;
        tx.send(Bytes::from_static(b"b")).await;
        assert!(body.frame().await.unwrap().is_ok(), "within the total");
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<BodyTimedOut>(), "{err}");
    }

    #[test]
    fn an_announced_length_holds_nothing_before_its_bytes_arrive() {
        let form = super::super::MAX_BODY as u64;
        assert_eq!(
            initial_hold(form, Some(form), false),
            1,
            "not the announcement"
        );
        assert_eq!(initial_hold(form, None, false), 1, "unknown length");
        assert_eq!(
            initial_hold(form, Some(form + 1), false),
            0,
            "refused unread"
        );
        assert_eq!(initial_hold(form, Some(100), true), 0, "empty");
    }

    #[test]
    fn mcp_bodies_get_the_body_read_timeout_and_every_other_route_the_form_one() {
        let limits = EdgeLimits {
            body_read_timeout: Duration::from_secs(60),
            form_body_read_timeout: Duration::from_secs(10),
            ..EdgeLimits::default()
        };
        assert_eq!(
            body_rules(true, &limits),
            (4 * 1024 * 1024, Duration::from_secs(60))
        );
        assert_eq!(
            body_rules(false, &limits),
            (64 * 1024, Duration::from_secs(10))
        );
    }

    #[test]
    fn a_refusal_is_refused_stream_on_http2_and_a_503_that_closes_on_http1() {
        let err = refuse(http::Version::HTTP_2, budget_spent()).unwrap_err();
        assert_eq!(err.reason(), Some(h2::Reason::REFUSED_STREAM));
        let resp = refuse(http::Version::HTTP_11, budget_spent()).unwrap();
        assert_eq!(resp.status(), http::StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[http::header::CONNECTION], "close");
    }

    #[tokio::test]
    async fn a_body_that_grows_past_the_budget_fails_and_gives_everything_back_when_dropped() {
        let budgets = BodyBudgets::new(BodyCaps {
            total: 100,
            per_source: 10,
            per_token: 10,
            requests_per_token: 1,
        });
        let source = "192.0.2.1".parse().ok();
        let held = Arc::new(Mutex::new(
            budgets.hold(source, Pool::Strangers, 4).unwrap(),
        ));
        let spent = Arc::new(AtomicBool::new(false));
        let (mut tx, rx) = futures_channel_body();
        let mut body = Metered {
            body: rx,
            held: held.clone(),
            read: 0,
            spent: spent.clone(),
        };
        tx.send(Bytes::from_static(b"abc")).await;
        assert!(body.frame().await.unwrap().is_ok(), "within what it holds");
        tx.send(Bytes::from_static(b"defgh")).await;
        assert!(body.frame().await.unwrap().is_ok(), "grows to 8");
        assert_eq!(budgets.held_bytes(), 8);
        tx.send(Bytes::from_static(b"ijk")).await;
        let err = body.frame().await.unwrap().unwrap_err();
        let spent = err.downcast_ref::<BodyBudgetSpent>().map(|s| s.0);
        assert_eq!(spent, Some(Spent::Source), "{err}");
        assert!(
            body.spent.load(Ordering::Relaxed),
            "the edge learns the budget ran out"
        );
        drop(body);
        assert_eq!(budgets.held_bytes(), 8, "the handler still holds it");
        drop(held);
        assert_eq!(budgets.held_bytes(), 0);
    }

    /// A body fed by hand, frame by frame.
    fn futures_channel_body() -> (Feed, ChannelBody) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        (Feed(tx), ChannelBody(rx))
    }

    struct Feed(tokio::sync::mpsc::Sender<Bytes>);

    impl Feed {
        async fn send(&mut self, b: Bytes) {
            self.0.send(b).await.unwrap();
        }
    }

    struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

    impl http_body::Body for ChannelBody {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, std::convert::Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }
}
