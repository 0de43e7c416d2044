//! Whether a connection is used and whether its client takes what it is sent: the watchdog's
//! inputs and the write-progress deadlines ([`EdgeLimits`]).
//!
//! - **Requests in flight** ([`Activity`], [`InFlight`]): a request counts from its head until
//!   its response body is done, so the idle timers only run while nothing is in flight.
//! - **Waiting for the client** ([`Tracked`]): from the moment hyper takes a chunk of a
//!   response body until it asks for the next one (or the body ends), the response waits for
//!   the client: an HTTP/2 stream whose flow-control window is shut, or a socket whose send
//!   buffer is full. One wait may last `response_stall_timeout`; all waits of an answer that
//!   is not an event stream together `response_write_timeout`. Time the body itself takes
//!   (a backend's slow answer, an event stream's quiet) is not waiting.
//! - **HTTP/2 streams** are reset one by one: hyper hands each stream's future (service call,
//!   then its body pipe) to the connection's executor, and [`StreamExecutor`] runs it under a
//!   guard that drops it at the stream's deadline. Dropping it drops hyper's last handles on
//!   the stream, so h2 sends `RST_STREAM(CANCEL)` and frees the stream's buffers and its slot.
//!   Nothing else in hyper's API can end one stream: its body pipe waits on `poll_capacity`
//!   and does not poll the body while the window is shut, so a body wrapper never gets a
//!   chance to fail. The guard finds its stream's deadline through a task-local the body
//!   sets, since hyper polls the body inside the stream's future.
//! - **The last byte of every HTTP/2 chunk is handed over on its own.** hyper passes a whole
//!   chunk to h2 as soon as the window has room for one byte of it, and h2 buffers the rest;
//!   a stream whose last chunk is buffered counts as done for hyper, so a client with a
//!   window of a few bytes would leave finished-looking streams in h2 for ever. hyper asks
//!   h2 for room for the held byte before sending it, which h2 grants once the window covers
//!   what it buffered: until then the response still waits for its client, under its guard.
//! - **Whole connections** close (GOAWAY, then dropped [`FORCE_CLOSE_AFTER`] later) when a
//!   response reaches its deadline and no response on the connection has moved since that
//!   response began waiting, when an HTTP/1.1 response reaches its deadline (HTTP/1.1 cannot
//!   end one response alone), or when the socket has accepted no write for
//!   `response_stall_timeout` ([`WatchedIo`]: bytes buffered inside hyper or h2 after the body
//!   is done are invisible to [`Tracked`]).
//!
//! [`FORCE_CLOSE_AFTER`]: super::FORCE_CLOSE_AFTER

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use super::super::edge::EdgeLimits;

/// Requests in flight on one connection, since when it has had none, and whether its client
/// takes what it is sent.
#[derive(Clone)]
pub(super) struct Activity(Arc<watch::Sender<Busy>>);

#[derive(Clone, Copy)]
struct Busy {
    in_flight: usize,
    /// When `in_flight` last became 0 (or the connection started).
    idle_since: Instant,
    /// Whether the connection has had a request.
    served: bool,
    /// When a response body on this connection last moved (the client took a chunk), or the
    /// connection started.
    progress_at: Instant,
    /// The deadline of the response waiting for the client that no stream guard watches
    /// (HTTP/1.1: one at a time).
    waiting: Option<Instant>,
    /// Since when the socket has accepted no write.
    blocked_since: Option<Instant>,
    /// A stream guard found the connection without progress since its response began waiting.
    stalled: bool,
}

/// Why the watchdog ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    /// No request for its allowance (`header_read_timeout`, then `idle_timeout`).
    Idle,
    /// Its client takes nothing it is sent.
    Stalled,
}

/// One request in flight; dropped with its response body (or with the request, if the
/// connection ends first).
pub(super) struct InFlight(Activity);

impl Activity {
    pub(super) fn new() -> Activity {
        let now = Instant::now();
        Activity(Arc::new(watch::Sender::new(Busy {
            in_flight: 0,
            idle_since: now,
            served: false,
            progress_at: now,
            waiting: None,
            blocked_since: None,
            stalled: false,
        })))
    }

    pub(super) fn begin(&self) -> InFlight {
        self.0.send_modify(|b| {
            b.in_flight += 1;
            b.served = true;
        });
        InFlight(self.clone())
    }

    pub(super) fn idle(&self) -> bool {
        self.0.borrow().in_flight == 0
    }

    /// A response body moved. The watchdog is not woken: no deadline of its own depends on it.
    fn progress(&self) {
        let now = Instant::now();
        self.0.send_if_modified(|b| {
            b.progress_at = now;
            false
        });
    }

    fn progress_at(&self) -> Instant {
        self.0.borrow().progress_at
    }

    /// The unguarded response's deadline, or `None` once it stops waiting.
    fn set_waiting(&self, deadline: Option<Instant>) {
        self.0.send_if_modified(|b| {
            let changed = b.waiting != deadline;
            b.waiting = deadline;
            changed
        });
    }

    /// A stream guard found the whole connection without progress.
    fn stall(&self) {
        self.0.send_modify(|b| b.stalled = true);
    }

    fn write_blocked(&self, since: Option<Instant>) {
        self.0.send_modify(|b| b.blocked_since = since);
    }

    /// Resolves once the connection should end: with no request in flight for its allowance
    /// (`header_read_timeout` from its start until its first request, `idle_timeout` after
    /// each request's end), or once its client takes nothing (an unguarded response past its
    /// deadline, a stream guard's verdict, a socket that accepted no write for
    /// `response_stall_timeout`).
    pub(super) fn expired(
        &self,
        limits: EdgeLimits,
    ) -> impl Future<Output = Expiry> + Send + 'static {
        let mut rx = self.0.subscribe();
        async move {
            loop {
                let busy = *rx.borrow_and_update();
                if busy.stalled {
                    return Expiry::Stalled;
                }
                let idle = (busy.in_flight == 0).then(|| {
                    let allowance = if busy.served {
                        limits.idle_timeout
                    } else {
                        limits.header_read_timeout
                    };
                    (busy.idle_since + allowance, Expiry::Idle)
                });
                let waiting = busy.waiting.map(|d| (d, Expiry::Stalled));
                let blocked = busy
                    .blocked_since
                    .map(|s| (s + limits.response_stall_timeout, Expiry::Stalled));
                let next = [idle, waiting, blocked]
                    .into_iter()
                    .flatten()
                    .min_by_key(|(at, _)| *at);
                let Some((at, why)) = next else {
                    if rx.changed().await.is_err() {
                        return std::future::pending().await;
                    }
                    continue;
                };
                if at <= Instant::now() {
                    return why;
                }
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
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

/// One wait of a response for its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wait {
    since: Instant,
    deadline: Instant,
}

/// What an HTTP/2 stream's body tells the stream's guard: whether it waits for the client and
/// until when, and (from the guard) whether the guard reset it.
#[derive(Default)]
struct StreamCell {
    wait: Mutex<Option<Wait>>,
    reset: AtomicBool,
}

impl StreamCell {
    fn wait(&self) -> Option<Wait> {
        *self.wait.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set_wait(&self, w: Option<Wait>) {
        *self.wait.lock().unwrap_or_else(|p| p.into_inner()) = w;
    }
}

tokio::task_local! {
    /// The stream whose future is being polled ([`StreamExecutor`] sets it).
    static STREAM: Arc<StreamCell>;
}

/// The executor of one connection's HTTP/2 streams: each runs as its own task under a
/// [`Guarded`] that resets it at its write deadline.
#[derive(Clone)]
pub(super) struct StreamExecutor {
    activity: Activity,
}

impl StreamExecutor {
    pub(super) fn new(activity: Activity) -> StreamExecutor {
        StreamExecutor { activity }
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let cell = Arc::new(StreamCell::default());
        let guarded = Guarded {
            inner: Box::pin(fut),
            cell: cell.clone(),
            activity: self.activity.clone(),
            sleep: None,
        };
        tokio::spawn(STREAM.scope(cell, guarded));
    }
}

/// A stream's future, dropped (which resets the stream) once its response has waited for the
/// client past its deadline.
struct Guarded<F> {
    inner: Pin<Box<F>>,
    cell: Arc<StreamCell>,
    activity: Activity,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<F: Future<Output = ()>> Future for Guarded<F> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        if this.inner.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        // Only the body, polled just now inside `inner`, changes the wait.
        let Some(wait) = this.cell.wait() else {
            this.sleep = None;
            return Poll::Pending;
        };
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(wait.deadline)));
        if sleep.deadline() != wait.deadline {
            sleep.as_mut().reset(wait.deadline);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.cell.reset.store(true, Ordering::SeqCst);
        if this.activity.progress_at() <= wait.since {
            tracing::debug!(
                "no response on the connection moved within the stall timeout; closing it"
            );
            this.activity.stall();
        } else {
            tracing::debug!(
                "a response waited for its client past its deadline; resetting its stream"
            );
        }
        // Dropping `inner` drops hyper's handles on the stream: h2 sends RST_STREAM(CANCEL).
        Poll::Ready(())
    }
}

/// A response body that keeps its request counted as in flight until it is done, and
/// reports when it waits for the client.
pub(super) struct Tracked {
    body: Body,
    writing: Writing,
    /// HTTP/2: the last byte of the chunk just handed over, handed over next.
    held_back: Option<Bytes>,
    _in_flight: InFlight,
}

impl Tracked {
    /// `body` of a response whose head says whether it is an event stream (exempt from the
    /// total write time); `activity` is its connection's.
    pub(super) fn new(
        body: Body,
        event_stream: bool,
        limits: &EdgeLimits,
        activity: &Activity,
        in_flight: InFlight,
    ) -> Tracked {
        Tracked {
            body,
            writing: Writing {
                stall: limits.response_stall_timeout,
                total: (!event_stream).then_some(limits.response_write_timeout),
                waited: Duration::ZERO,
                since: None,
                cell: STREAM.try_with(Arc::clone).ok(),
                activity: activity.clone(),
            },
            held_back: None,
            _in_flight: in_flight,
        }
    }
}

/// The waits of one response.
struct Writing {
    stall: Duration,
    /// `None` for event streams.
    total: Option<Duration>,
    /// The waits so far, together.
    waited: Duration,
    /// Since when the current wait runs.
    since: Option<Instant>,
    /// The HTTP/2 stream's cell, if a guard watches it.
    cell: Option<Arc<StreamCell>>,
    activity: Activity,
}

impl Writing {
    /// hyper asks for more: the client took the last chunk.
    fn taken(&mut self) {
        if let Some(since) = self.since.take() {
            self.waited += since.elapsed();
            self.activity.progress();
            self.publish(None);
        }
    }

    /// hyper took a chunk; it waits for the client until hyper asks again.
    fn handed(&mut self) {
        let now = Instant::now();
        let allowance = match self.total {
            Some(total) => self.stall.min(total.saturating_sub(self.waited)),
            None => self.stall,
        };
        self.since = Some(now);
        self.publish(Some(Wait {
            since: now,
            deadline: now + allowance,
        }));
    }

    fn publish(&self, wait: Option<Wait>) {
        match &self.cell {
            Some(cell) => cell.set_wait(wait),
            None => self.activity.set_waiting(wait.map(|w| w.deadline)),
        }
    }
}

impl Drop for Writing {
    fn drop(&mut self) {
        if self.since.is_none() {
            return;
        }
        let reset = self
            .cell
            .as_ref()
            .is_some_and(|c| c.reset.load(Ordering::SeqCst));
        // Dropped while waiting: hyper sent the last chunk (or the client reset the stream)
        // unless the guard reset it.
        if !reset {
            self.activity.progress();
        }
        if self.cell.is_none() {
            self.activity.set_waiting(None);
        }
    }
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = &mut *self;
        // h2 took the chunk but may hold most of it: the wait goes on until it takes this.
        if let Some(last) = this.held_back.take() {
            return Poll::Ready(Some(Ok(http_body::Frame::data(last))));
        }
        this.writing.taken();
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        let Poll::Ready(Some(Ok(frame))) = polled else {
            return polled;
        };
        let mut data = match frame.into_data() {
            Ok(d) if d.is_empty() => return Poll::Ready(Some(Ok(http_body::Frame::data(d)))),
            Ok(d) => d,
            Err(frame) => return Poll::Ready(Some(Ok(frame))),
        };
        this.writing.handed();
        if this.writing.cell.is_some() && data.len() > 1 {
            this.held_back = Some(data.split_off(data.len() - 1));
        }
        Poll::Ready(Some(Ok(http_body::Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.held_back.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, reporting when it stops accepting writes.
pub(super) struct WatchedIo<I> {
    io: I,
    activity: Activity,
    blocked: bool,
}

impl<I> WatchedIo<I> {
    pub(super) fn new(io: I, activity: Activity) -> WatchedIo<I> {
        WatchedIo {
            io,
            activity,
            blocked: false,
        }
    }

    fn note<T>(&mut self, r: &Poll<T>) {
        match (r.is_pending(), self.blocked) {
            (true, false) => {
                self.blocked = true;
                self.activity.write_blocked(Some(Instant::now()));
            }
            (false, true) => {
                self.blocked = false;
                self.activity.write_blocked(None);
            }
            _ => {}
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WatchedIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WatchedIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.note(&r);
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn limits() -> EdgeLimits {
        EdgeLimits {
            header_read_timeout: Duration::from_secs(2),
            idle_timeout: Duration::from_secs(10),
            response_stall_timeout: Duration::from_secs(5),
            response_write_timeout: Duration::from_secs(12),
            ..EdgeLimits::default()
        }
    }

    /// Waits until `fut` resolves and says after how long (on the paused clock).
    async fn took<T>(fut: impl Future<Output = T>) -> (T, Duration) {
        let start = Instant::now();
        let v = fut.await;
        (v, start.elapsed())
    }

    fn about(d: Duration, secs: u64) -> bool {
        d >= Duration::from_secs(secs) && d < Duration::from_secs(secs) + Duration::from_millis(10)
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_after_its_allowance_and_not_while_busy() {
        let activity = Activity::new();
        let (why, waited) = took(activity.expired(limits())).await;
        assert_eq!(why, Expiry::Idle);
        assert!(about(waited, 2), "no first request: {waited:?}");

        let activity = Activity::new();
        let req = activity.begin();
        let expired = tokio::spawn(activity.expired(limits()));
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert!(!expired.is_finished(), "busy connections never expire");
        let done = Instant::now();
        drop(req);
        assert_eq!(expired.await.unwrap(), Expiry::Idle);
        let waited = done.elapsed();
        assert!(about(waited, 10), "idle allowance: {waited:?}");
    }

    /// A response body of two chunks, handed out on request.
    fn two_chunks() -> Body {
        Body::from_stream(futures_util::stream::iter([
            Ok::<_, std::io::Error>(Bytes::from_static(b"one")),
            Ok(Bytes::from_static(b"two")),
        ]))
    }

    #[tokio::test(start_paused = true)]
    async fn an_http1_response_the_client_stops_taking_closes_the_connection_at_the_stall_timeout()
    {
        let activity = Activity::new();
        let mut body = Tracked::new(two_chunks(), false, &limits(), &activity, activity.begin());
        // hyper takes the first chunk, then (the socket full) never asks again.
        assert!(body.frame().await.unwrap().is_ok());
        let (why, waited) = took(activity.expired(limits())).await;
        assert_eq!(why, Expiry::Stalled);
        assert!(about(waited, 5), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_body_is_not_a_stalled_client_and_an_event_stream_has_no_total() {
        let activity = Activity::new();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let stream =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|c| (c, rx)) },
            );
        let mut body = Tracked::new(
            Body::from_stream(stream),
            true,
            &limits(),
            &activity,
            activity.begin(),
        );
        let expired = tokio::spawn(activity.expired(limits()));
        // The body takes 100 s per chunk (a quiet event stream); the client takes each at once,
        // 3 s per chunk: 30 s of waiting in all, past the total, but an event stream has none.
        for _ in 0..10 {
            let next = tokio::spawn(async move {
                let f = body.frame().await;
                (body, f)
            });
            tokio::time::sleep(Duration::from_secs(100)).await;
            tx.send(Ok(Bytes::from_static(b"data: x\n\n")))
                .await
                .unwrap();
            let (b, f) = next.await.unwrap();
            body = b;
            assert!(f.unwrap().is_ok());
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        assert!(
            !expired.is_finished(),
            "neither the body's pace nor the waits expire it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickling_reader_meets_the_total_write_time() {
        let activity = Activity::new();
        let chunks = (0..20).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(b"x")));
        let mut body = Tracked::new(
            Body::from_stream(futures_util::stream::iter(chunks)),
            false,
            &limits(),
            &activity,
            activity.begin(),
        );
        let expired = tokio::spawn(activity.expired(limits()));
        let start = Instant::now();
        // The client takes a chunk every 3.9 s, under the 5 s stall timeout; after 12 s of
        // waiting in all the connection is closed.
        for _ in 0..3 {
            assert!(body.frame().await.unwrap().is_ok());
            tokio::time::sleep(Duration::from_millis(3900)).await;
        }
        assert!(
            !expired.is_finished(),
            "11.7 s of waiting: within the total"
        );
        assert!(body.frame().await.unwrap().is_ok());
        assert_eq!(expired.await.unwrap(), Expiry::Stalled);
        assert!(about(start.elapsed(), 12), "{:?}", start.elapsed());
    }

    /// A stream future as hyper's: it polls `body` for one chunk, then waits for capacity
    /// that `window` grants (never, if it is never sent to).
    async fn h2_stream(
        mut body: Tracked,
        mut window: tokio::sync::mpsc::Receiver<()>,
        done: tokio::sync::oneshot::Sender<()>,
    ) {
        while let Some(frame) = body.frame().await {
            assert!(frame.is_ok());
            if window.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        let _ = done.send(());
    }

    /// Runs `h2_stream` for a new two-chunk response on `exec`, as hyper would.
    fn spawn_stream(
        exec: &StreamExecutor,
        activity: &Activity,
    ) -> (
        tokio::sync::mpsc::Sender<()>,
        tokio::sync::oneshot::Receiver<()>,
        Arc<AtomicBool>,
    ) {
        use hyper::rt::Executor;
        let (window_tx, window_rx) = tokio::sync::mpsc::channel(4);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let in_flight = activity.begin();
        let (a, d) = (activity.clone(), dropped.clone());
        exec.execute(async move {
            struct SetOnDrop(Arc<AtomicBool>);
            impl Drop for SetOnDrop {
                fn drop(&mut self) {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
            let _flag = SetOnDrop(d);
            // Built inside the stream's task, as `ConnService` builds it.
            let body = Tracked::new(two_chunks(), false, &limits(), &a, in_flight);
            h2_stream(body, window_rx, done_tx).await;
        });
        (window_tx, done_rx, dropped)
    }

    #[tokio::test]
    async fn under_http2_the_last_byte_of_a_chunk_follows_it_within_the_same_wait() {
        let activity = Activity::new();
        let cell = Arc::new(StreamCell::default());
        let a = activity.clone();
        let (frames, waits) = STREAM
            .scope(cell.clone(), async move {
                let mut body = Tracked::new(Body::from("hello"), false, &limits(), &a, a.begin());
                let mut frames = Vec::new();
                let mut waits = Vec::new();
                while let Some(f) = body.frame().await {
                    let end = http_body::Body::is_end_stream(&body);
                    frames.push((f.unwrap().into_data().unwrap(), end));
                    waits.push(cell.wait());
                }
                (frames, waits)
            })
            .await;
        assert_eq!(
            frames,
            [
                (Bytes::from_static(b"hell"), false),
                (Bytes::from_static(b"o"), true)
            ]
        );
        assert!(waits[0].is_some(), "waits from the first piece on");
        assert_eq!(waits[0], waits[1], "the held byte continues the same wait");
        // HTTP/1.1 (no stream guard): chunks pass whole.
        let mut body = Tracked::new(
            Body::from("hello"),
            false,
            &limits(),
            &activity,
            activity.begin(),
        );
        let one = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(one, Bytes::from_static(b"hello"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_shut_stream_is_reset_at_the_stall_timeout_and_its_busy_neighbour_keeps_the_connection()
     {
        let activity = Activity::new();
        let exec = StreamExecutor::new(activity.clone());
        let expired = tokio::spawn(activity.expired(limits()));
        let (_shut, mut shut_done, shut_dropped) = spawn_stream(&exec, &activity);
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A neighbour whose client takes every chunk at once finishes 1 s after the start (two
        // chunks, each handed over as two pieces).
        let (open, mut open_done, _) = spawn_stream(&exec, &activity);
        for _ in 0..4 {
            open.send(()).await.unwrap();
        }
        (&mut open_done).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(
            !shut_dropped.load(Ordering::SeqCst),
            "4 s: within the stall timeout"
        );
        tokio::time::sleep(Duration::from_millis(1010)).await;
        assert!(shut_dropped.load(Ordering::SeqCst), "reset at 5 s");
        assert!(shut_done.try_recv().is_err(), "it never finished");
        // The neighbour moved 1 s after the shut stream began to wait: the connection stays,
        // and once nothing is in flight only the idle timer runs.
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!expired.is_finished());
        assert_eq!(expired.await.unwrap(), Expiry::Idle);
        assert!(activity.idle());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_whose_streams_all_stay_shut_is_closed_at_the_stall_timeout() {
        let activity = Activity::new();
        let exec = StreamExecutor::new(activity.clone());
        let start = Instant::now();
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(spawn_stream(&exec, &activity));
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let why = activity.expired(limits()).await;
        assert_eq!(why, Expiry::Stalled);
        assert!(about(start.elapsed(), 5), "{:?}", start.elapsed());
        assert!(
            held[0].2.load(Ordering::SeqCst),
            "the first stream was reset"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_socket_that_accepts_no_write_closes_the_connection_at_the_stall_timeout() {
        use tokio::io::AsyncWriteExt;
        let activity = Activity::new();
        // A peer that never reads: the pipe's buffer fills and writes wait.
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut io = WatchedIo::new(ours, activity.clone());
        let _req = activity.begin();
        let writer = tokio::spawn(async move {
            let _ = io.write_all(&[0u8; 1024]).await;
        });
        let (why, waited) = took(activity.expired(limits())).await;
        assert_eq!(why, Expiry::Stalled);
        assert!(about(waited, 5), "{waited:?}");
        writer.abort();
    }
}
