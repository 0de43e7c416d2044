//! Signals and graceful shutdown. On SIGTERM or SIGINT the listener closes (new connections are
//! refused), idle connections close, and in-flight requests and streams get the grace period
//! to finish. At its end every response body still streaming is ended cleanly — the last chunk
//! is written, so an SSE client sees a complete response and can resume with `Last-Event-ID`
//! elsewhere — instead of a reset. Then (`run::serve_on`) the upstream-action audit events still
//! waiting in the background group commit are made durable, and the store is flushed. SIGHUP
//! reloads the TLS certificate and (`run::reload_config`) the tool-call policy.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::State;
use axum::response::Response;
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::tls::Tls;

/// Default grace period for in-flight requests and streams on SIGTERM
/// (`[server] shutdown_grace_secs`).
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 30;
/// Longest grace period accepted.
const MAX_SHUTDOWN_GRACE_SECS: u64 = 3600;

/// Validates `[server] shutdown_grace_secs`.
pub fn validate_grace(secs: u64, errs: &mut Vec<String>) {
    if secs > MAX_SHUTDOWN_GRACE_SECS {
        errs.push(format!(
            "server.shutdown_grace_secs: at most {MAX_SHUTDOWN_GRACE_SECS}"
        ));
    }
}

/// After the grace period, how long ended streams get to flush and connections to close
/// before the process stops waiting for them.
pub(crate) const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// The grace deadline, shared by every response body that streams.
#[derive(Clone, Debug)]
pub struct Drain {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain::new()
    }
}

impl Drain {
    /// Not draining.
    pub fn new() -> Drain {
        let (tx, rx) = watch::channel(false);
        Drain {
            tx: Arc::new(tx),
            rx,
        }
    }

    /// The grace period is over: every bounded body ends now.
    pub fn end_streams(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves when [`Drain::end_streams`] is called.
    fn deadline(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            // The sender lives as long as any `Drain`, so an error cannot happen while a body
            // is being served; wait forever rather than end a stream early.
            if rx.wait_for(|over| *over).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Makes a streaming body end cleanly at the deadline. Bodies of known length are left
    /// alone: they end on their own.
    pub fn bound(&self, resp: Response) -> Response {
        if resp.body().size_hint().exact().is_some() {
            return resp;
        }
        let (parts, body) = resp.into_parts();
        let stream = body.into_data_stream().take_until(self.deadline());
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

/// Middleware: [`Drain::bound`] on every response.
pub async fn bound_streams(State(drain): State<Drain>, resp: Response) -> Response {
    drain.bound(resp)
}

/// Resolves on SIGTERM or SIGINT.
pub async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

/// What a SIGHUP reloads besides the certificate: `run` passes the configuration file's
/// re-read (blocking file reads; run off the async workers). It logs its own outcome.
pub type OnHangup = Arc<dyn Fn() + Send + Sync>;

/// On every SIGHUP: reloads the certificate (logged and skipped without TLS), then runs
/// `also` (`run::reload_config`: the tool-call policy). Neither can stop the process. The
/// handler is installed before this returns, so a SIGHUP after it no longer terminates the
/// process.
#[cfg(unix)]
pub fn reload_on_sighup(
    tls: Option<Tls>,
    also: Option<OnHangup>,
) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; reload is off");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            match &tls {
                Some(tls) => {
                    let tls = tls.clone();
                    // File reads: off the async workers. The outcome is logged by `reload`.
                    let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
                }
                None if also.is_none() => {
                    tracing::info!("SIGHUP ignored: no TLS certificate to reload")
                }
                None => {}
            }
            if let Some(also) = &also {
                let also = also.clone();
                // A panic in there is the task's, not this loop's: the next SIGHUP still runs.
                let _ = tokio::task::spawn_blocking(move || also()).await;
            }
        }
    }))
}

/// Runs `serving` (which stops accepting when `stopping` resolves) and enforces the grace
/// period from that moment: streams still open at its end are ended via `drain`.
pub async fn with_grace<F>(
    serving: F,
    stopping: tokio::sync::oneshot::Receiver<()>,
    grace: Duration,
    drain: &Drain,
) -> std::io::Result<()>
where
    F: Future<Output = std::io::Result<()>>,
{
    tokio::pin!(serving);
    tokio::select! {
        result = &mut serving => return result,
        signalled = stopping => {
            if signalled.is_err() {
                // No shutdown signal can come any more: serve until the server ends itself.
                return serving.await;
            }
        }
    }
    tracing::info!(
        grace_secs = grace.as_secs(),
        "shutting down: not accepting; finishing in-flight requests and streams"
    );
    if let Ok(result) = tokio::time::timeout(grace, &mut serving).await {
        return result;
    }
    tracing::warn!("grace period over: ending the streams still open");
    drain.end_streams();
    match tokio::time::timeout(CLOSE_BOUND, &mut serving).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!("requests still running after the grace period; exiting without them");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_streaming_body_ends_cleanly_at_the_deadline_and_a_fixed_one_is_untouched() {
        let drain = Drain::new();
        let endless = futures_util::stream::repeat_with(|| {
            Ok::<_, std::io::Error>(bytes::Bytes::from_static(b"data: x\n\n"))
        })
        .then(|b| async move {
            tokio::task::yield_now().await;
            b
        });
        let resp = drain.bound(Response::new(Body::from_stream(endless)));
        let fixed = drain.bound(Response::new(Body::from("whole")));
        let mut stream = resp.into_body().into_data_stream();
        assert!(stream.next().await.is_some());
        drain.end_streams();
        let mut rest = 0;
        while let Some(chunk) = stream.next().await {
            assert!(chunk.is_ok(), "ended without an error");
            rest += 1;
            assert!(rest < 100, "the stream did not end");
        }
        let text = axum::body::to_bytes(fixed.into_body(), 100).await.unwrap();
        assert_eq!(&text[..], b"whole");
    }
}
