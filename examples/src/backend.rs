//! A demo MCP server ("backend") for the proxy to sit in front of.
//!
//! It imitates an ordinary remote MCP server that speaks the **Streamable HTTP** transport on one
//! endpoint, `/mcp`, and that authenticates its callers with a **GitHub token**: whatever arrives
//! in `Authorization: Bearer …` is used, unchanged, to call GitHub's REST API. That is exactly the
//! kind of server the proxy protects: the proxy signs people in, keeps their GitHub tokens, and
//! puts the right one on each request it forwards here.
//!
//! It exists for two reasons:
//!
//! 1. `mcp-oauth-proxy demo` starts it, so that a new user can point a real MCP client (the
//!    TypeScript SDK client, Claude Code, …) at the proxy and call a tool end to end;
//! 2. the integration tests use it as the proxy's upstream and assert on what it received
//!    ([`DemoBackend::requests`]: the client's own token and cookies must never arrive, the
//!    GitHub token must), on streaming (events arrive one by one) and on cancellation (a client
//!    that goes away reaches the backend: [`DemoBackend::cancelled_streams`]).
//!
//! Transport rules (see `mcp-auth-spec-notes.md` §5), chosen by the `MCP-Protocol-Version` header:
//!
//! * absent, `2025-03-26`, `2025-06-18`, `2025-11-25`: **sessions**. `initialize` mints an
//!   `Mcp-Session-Id`; every later request must carry it (missing → 400, unknown → 404); `GET`
//!   opens the session's standalone SSE stream (resumable with `Last-Event-ID`); `DELETE` ends
//!   the session;
//! * `2026-07-28`: **stateless**. No `initialize` (`server/discover` answers the versions and
//!   capabilities instead), no sessions, POST only; the `Mcp-Method` and
//!   `Mcp-Name` headers must mirror the body (else 400 with `-32020`); closing a response stream
//!   is cancellation;
//! * anything else: 400 with `-32022` and the supported versions.
//!
//! Tools: `whoami` and `list_repos` call `GET {github_api_url}/user` with the received token;
//! `slow_count` streams progress notifications, to exercise streaming and cancellation through
//! the proxy.
//!
//! **Exchange mode** ([`DemoBackend::start_with_exchange`], the proxy's `[backend] auth =
//! "exchange"`, docs/DESIGN.md §7): the received token is a short-lived proxy token (`mcpbt_…`), not a
//! GitHub token. `whoami` and `list_repos` trade it at the proxy's token endpoint (RFC 8693) for
//! the person's GitHub token and use that; nothing else needs GitHub. When the proxy refuses
//! with a connect link, the backend relays it as docs/DESIGN.md §5 says: `-32042` to a 2025-11-25
//! session that declared URL elicitation, an `input_required` result with a single-use
//! `requestState` to a 2026-07-28 request that declared it, a tool error with the link to anyone
//! else. Every attempt is listed by [`DemoBackend::exchanges`].
//!
//! Deliberately *not* imitated: `Origin` validation (the proxy in front does it; the backend
//! binds to loopback), JSON-RPC batches (removed from MCP; answered with 400), server→client
//! requests, and `notifications/cancelled` (it is accepted and ignored; closing the stream is
//! what cancels here).

mod exchange;
mod relay;
mod sse;
#[cfg(test)]
mod tests;
mod tools;
mod transport;

pub use exchange::{
    ExchangeAttempt, ExchangeConfig, GRANT_TYPE_TOKEN_EXCHANGE, REFUSAL_REASONS,
    TOKEN_TYPE_ACCESS_TOKEN,
};

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// Configuration of a [`DemoBackend`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendConfig {
    /// GitHub REST API base the tools call with the token they received, e.g. the fake
    /// GitHub's `api_url()` (`http://127.0.0.1:PORT/api/v3`) or `https://api.github.com`.
    pub github_api_url: String,
    /// Answer requests with SSE (`text/event-stream`) whenever the client's `Accept` allows it;
    /// `false` = JSON unless the tool streams (`slow_count`).
    pub prefer_sse: bool,
}

/// One HTTP request as received by the backend (header names are lower-case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendRequest {
    pub method: String,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl BackendRequest {
    /// First value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without the query string.
    pub fn path(&self) -> &str {
        self.path_and_query
            .split_once('?')
            .map_or(self.path_and_query.as_str(), |(p, _)| p)
    }
}

/// Handle to a running demo backend. Cheap to clone; the server stops when
/// [`shutdown`](DemoBackend::shutdown) is called or when the last clone is dropped.
#[derive(Clone)]
pub struct DemoBackend {
    inner: Arc<Inner>,
}

struct Inner {
    app: App,
    url: String,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for DemoBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoBackend")
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl DemoBackend {
    /// Starts the backend on an ephemeral port of 127.0.0.1.
    pub async fn start(config: BackendConfig) -> std::io::Result<DemoBackend> {
        Self::start_on(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the backend on the given address.
    pub async fn start_on(config: BackendConfig, addr: SocketAddr) -> std::io::Result<DemoBackend> {
        Self::launch(config, None, addr).await
    }

    /// Starts the backend in exchange mode on an ephemeral port of 127.0.0.1: the tools trade
    /// the token they receive for a GitHub token at `exchange.token_url`.
    pub async fn start_with_exchange(
        config: BackendConfig,
        exchange: ExchangeConfig,
    ) -> std::io::Result<DemoBackend> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        Self::start_on_with_exchange(config, exchange, addr).await
    }

    /// Starts the backend in exchange mode on the given address. `exchange.token_url` must be
    /// an absolute `http`/`https` URL (else `InvalidInput`).
    pub async fn start_on_with_exchange(
        config: BackendConfig,
        exchange: ExchangeConfig,
        addr: SocketAddr,
    ) -> std::io::Result<DemoBackend> {
        let valid = url::Url::parse(&exchange.token_url)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        if !valid {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "the token endpoint {:?} is not an http(s) URL",
                    exchange.token_url
                ),
            ));
        }
        Self::launch(config, Some(exchange), addr).await
    }

    async fn launch(
        config: BackendConfig,
        exchange: Option<ExchangeConfig>,
        addr: SocketAddr,
    ) -> std::io::Result<DemoBackend> {
        let http = tools::github_client().map_err(std::io::Error::other)?;
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let (stopping, _) = watch::channel(false);
        let app: App = Arc::new(AppState {
            config,
            exchange,
            http,
            state: Mutex::new(State::default()),
            cancelled: AtomicUsize::new(0),
            completed: AtomicUsize::new(0),
            stopping,
        });
        let router = axum::Router::new()
            .fallback(transport::handle)
            .with_state(app.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let server_app = app.clone();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    // Resolves on an explicit stop and when the last handle is dropped.
                    let _ = stop_rx.await;
                    // Open SSE streams would keep their connections (and this shutdown) alive.
                    server_app.stopping.send_replace(true);
                })
                .await;
            if let Err(err) = served {
                tracing::warn!(%err, "demo MCP backend stopped with an error");
            }
        });
        tracing::debug!(%local, "demo MCP backend listening");
        Ok(DemoBackend {
            inner: Arc::new(Inner {
                app,
                url: format!("http://{local}{MCP_PATH}"),
                stop: Mutex::new(Some(stop_tx)),
                task: Mutex::new(Some(task)),
            }),
        })
    }

    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        self.inner.url.clone()
    }

    /// Every request received, in order (rejected ones included).
    pub fn requests(&self) -> Vec<BackendRequest> {
        self.inner.app.lock().requests.clone()
    }

    /// Response SSE streams (POST) whose client went away before the stream finished.
    /// Standalone `GET` streams never finish and are not counted.
    pub fn cancelled_streams(&self) -> usize {
        self.inner.app.cancelled.load(Ordering::SeqCst)
    }

    /// Response SSE streams (POST) that handed out their last event.
    pub fn completed_streams(&self) -> usize {
        self.inner.app.completed.load(Ordering::SeqCst)
    }

    /// Every token exchange attempted (exchange mode), in order.
    pub fn exchanges(&self) -> Vec<ExchangeAttempt> {
        self.inner.app.lock().exchanges.clone()
    }

    /// Live 2025-x sessions.
    pub fn sessions(&self) -> usize {
        self.inner.app.lock().sessions.len()
    }

    /// Queues a server→client notification on the session's standalone (`GET`) stream. It is
    /// delivered to the open stream if there is one, otherwise to the next `GET`, and kept (last
    /// [`HISTORY`] per session) for `Last-Event-ID` replay. `false` if the session is unknown.
    pub fn push_notification(&self, session_id: &str, message: Value) -> bool {
        self.inner.app.lock().push(session_id, message)
    }

    /// Graceful stop: ends open streams and waits (at most 5 s) for the server task to finish.
    pub async fn shutdown(self) {
        let stop = self
            .inner
            .stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(stop) = stop {
            let _ = stop.send(());
        }
        let task = self
            .inner
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
        }
    }
}

// ---------------------------------------------------------------- shared state

const MCP_PATH: &str = "/mcp";
/// Standalone-stream messages kept per session for `Last-Event-ID` replay.
pub const HISTORY: usize = 100;

pub(crate) type App = Arc<AppState>;

pub(crate) struct AppState {
    config: BackendConfig,
    /// `Some` in exchange mode.
    exchange: Option<ExchangeConfig>,
    /// Client for GitHub's REST API and the proxy's token endpoint.
    http: reqwest::Client,
    /// Taken only briefly and never across `.await`.
    state: Mutex<State>,
    cancelled: AtomicUsize,
    completed: AtomicUsize,
    /// Set to `true` when the server stops: every open SSE stream ends.
    stopping: watch::Sender<bool>,
}

impl AppState {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
struct State {
    requests: Vec<BackendRequest>,
    sessions: HashMap<String, Session>,
    exchanges: Vec<ExchangeAttempt>,
    /// `requestState`s handed to 2026-07-28 clients with a connect-link refusal.
    request_states: relay::RequestStates,
}

/// A 2025-x session.
struct Session {
    /// The version agreed at `initialize`.
    protocol_version: String,
    /// Whether `initialize` declared `capabilities.elicitation.url` (an object). URL
    /// elicitation (`-32042` in exchange mode) may only be sent to sessions that did.
    elicitation_url: bool,
    /// SSE event ids, unique within the session (response streams and the standalone stream).
    event_ids: Arc<AtomicU64>,
    /// Standalone-stream messages `(event id, message)`, oldest first, at most [`HISTORY`].
    history: VecDeque<(u64, Value)>,
    /// Highest standalone event id handed to a `GET` stream.
    delivered: u64,
    /// Only the newest `GET` stream of a session stays open (a message goes on one stream).
    stream_generation: u64,
    /// Wakes the session's `GET` stream; dropping the session ends it.
    wake: watch::Sender<()>,
}

impl Session {
    fn new(protocol_version: String, elicitation_url: bool) -> Self {
        Self {
            protocol_version,
            elicitation_url,
            event_ids: Arc::new(AtomicU64::new(0)),
            history: VecDeque::new(),
            delivered: 0,
            stream_generation: 0,
            wake: watch::channel(()).0,
        }
    }
}

impl State {
    fn push(&mut self, session_id: &str, message: Value) -> bool {
        let Some(session) = self.sessions.get_mut(session_id) else {
            return false;
        };
        let id = session.event_ids.fetch_add(1, Ordering::SeqCst) + 1;
        session.history.push_back((id, message));
        while session.history.len() > HISTORY {
            session.history.pop_front();
        }
        session.wake.send_replace(());
        true
    }
}

/// `bytes` random bytes as lower-case hex (session ids, `requestState`s).
#[allow(clippy::disallowed_methods)] // a demo server, not the proxy: it has its own randomness
fn random_hex(bytes: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut buf = vec![0u8; bytes];
    if getrandom::fill(&mut buf).is_err() {
        // Fallback: std's randomly seeded hasher over a counter (good enough for a demo).
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let seed = std::collections::hash_map::RandomState::new();
        for chunk in buf.chunks_mut(8) {
            let mut h = seed.build_hasher();
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            let bytes = h.finish().to_le_bytes();
            chunk.copy_from_slice(bytes.get(..chunk.len()).unwrap_or_default());
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
