//! The accept loop: what a connection may cost before and between requests
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
//!   `body_read_timeout` in total from their first read ([`Deadline`]).
//! - **HTTP/2**: concurrent streams, header list size and both reset limits are hyper's
//!   settings.
//! - **Shutdown** as `axum::serve` does it: the listener is dropped at once (new connections
//!   are refused), every connection is told to shut down gracefully, and the serve future
//!   ends when the last one has.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
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
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::Instant;
use tower::ServiceExt;

use super::client_ip::TrustedProxies;
use super::edge::EdgeLimits;

/// After a timeout's graceful shutdown, how long a connection that still has no request in
/// flight may take to close before it is dropped.
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
        let mut builder = auto::Builder::new(TokioExecutor::new());
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
            .max_local_error_reset_streams(limits.http2_max_local_error_resets);
        let activity = Activity::new();
        let service = ConnService {
            router: self.router.clone(),
            peer: self.peer,
            body_timeout: limits.body_read_timeout,
            activity: activity.clone(),
        };
        let conn = builder.serve_connection(TokioIo::new(io), service);
        let mut conn = std::pin::pin!(conn);
        let mut stop = self.stop.clone();
        let mut stopping = false;
        let mut expired = std::pin::pin!(activity.expired(limits));
        let mut timed_out = false;
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
                () = &mut expired, if !timed_out => {
                    timed_out = true;
                    tracing::debug!(peer = %self.peer, "connection without a request for too long; closing");
                    conn.as_mut().graceful_shutdown();
                    force.as_mut().reset(Instant::now() + FORCE_CLOSE_AFTER);
                    forcing = true;
                }
                () = &mut force, if forcing => {
                    forcing = false;
                    if activity.idle() {
                        // Still mid-head (HTTP/1.1 graceful shutdown waits for it): drop it.
                        break;
                    }
                    // A request got in before the shutdown: it finishes, then hyper closes.
                }
            }
        }
    }
}

/// Requests in flight on one connection, and since when it has had none.
#[derive(Clone)]
struct Activity(Arc<watch::Sender<Busy>>);

#[derive(Clone, Copy)]
struct Busy {
    in_flight: usize,
    /// When `in_flight` last became 0 (or the connection started).
    idle_since: Instant,
    /// Whether the connection has had a request.
    served: bool,
}

/// One request in flight; dropped with its response body (or with the request, if the
/// connection ends first).
struct InFlight(Activity);

impl Activity {
    fn new() -> Activity {
        Activity(Arc::new(watch::Sender::new(Busy {
            in_flight: 0,
            idle_since: Instant::now(),
            served: false,
        })))
    }

    fn begin(&self) -> InFlight {
        self.0.send_modify(|b| {
            b.in_flight += 1;
            b.served = true;
        });
        InFlight(self.clone())
    }

    fn idle(&self) -> bool {
        self.0.borrow().in_flight == 0
    }

    /// Resolves once the connection has had no request in flight for its allowance:
    /// `header_read_timeout` from its start until its first request, `idle_timeout` after
    /// each request's end.
    fn expired(&self, limits: EdgeLimits) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            loop {
                let busy = *rx.borrow_and_update();
                if busy.in_flight > 0 {
                    if rx.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                    continue;
                }
                let allowance = if busy.served {
                    limits.idle_timeout
                } else {
                    limits.header_read_timeout
                };
                let deadline = busy.idle_since + allowance;
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        if rx.borrow().in_flight == 0 {
                            return;
                        }
                    }
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return std::future::pending().await;
                        }
                    }
                }
            }
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.send_modify(|b| {
            b.in_flight = b.in_flight.saturating_sub(1);
            if b.in_flight == 0 {
                b.idle_since = Instant::now();
            }
        });
    }
}

/// The router as one connection's hyper service: adds the peer address (`ConnectInfo`),
/// bounds the request body's read time, and counts the request in flight until its
/// response body is done.
#[derive(Clone)]
struct ConnService {
    router: Router,
    peer: SocketAddr,
    body_timeout: Duration,
    activity: Activity,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<Tracked>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.begin();
        let timeout = self.body_timeout;
        let mut req = req.map(|b| Body::new(Deadline::new(b, timeout)));
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let router = self.router.clone();
        Box::pin(async move {
            let resp = match router.oneshot(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok(resp.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

/// A response body that keeps its request counted as in flight until it is done.
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
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

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_after_its_allowance_and_not_while_busy() {
        let limits = EdgeLimits {
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            ..EdgeLimits::default()
        };
        let activity = Activity::new();
        let start = Instant::now();
        activity.expired(limits).await;
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2010),
            "no first request: {waited:?}"
        );

        let activity = Activity::new();
        let req = activity.begin();
        let expired = tokio::spawn(activity.expired(limits));
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(!expired.is_finished(), "busy connections never expire");
        let done = Instant::now();
        drop(req);
        expired.await.unwrap();
        let waited = done.elapsed();
        assert!(
            waited >= Duration::from_secs(10) && waited < Duration::from_millis(10_010),
            "idle allowance: {waited:?}"
        );
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
        type Error = Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }
}
