//! A fake GitHub OAuth server that behaves like the real github.com.
//!
//! It is used by the workspace's integration tests (real HTTP on an ephemeral loopback port)
//! and by the proxy's offline `demo` command. It imitates exactly the GitHub behaviour the proxy
//! must cope with (see `mcp-auth-spec-notes.md` §7):
//!
//! * the OAuth App web flow: `/login/oauth/authorize` with an account picker, GitHub's own
//!   consent page and — most importantly — a **silent skip** of that consent page for a user who
//!   already authorized the app. That skip is what makes confused-deputy attacks on an OAuth
//!   proxy possible, so security tests depend on it;
//! * GitHub's non-exact `redirect_uri` rule (same scheme, host and port; path equal to or under
//!   the registered callback) and its error redirects to the *registered* callback;
//! * PKCE with `S256` only;
//! * a token endpoint that answers every error with **HTTP 200** and an `error` field, returns
//!   form-encoded bodies unless JSON is asked for, comma-separated scopes, client credentials in
//!   the body or via HTTP Basic, and the "10 tokens per user/app/scope" eviction;
//! * optional GitHub App style expiring `ghu_` tokens with rotating `ghr_` refresh tokens;
//! * `GET /api/v3/user` (GHES-style prefix) with the `User-Agent` requirement and
//!   `X-OAuth-Scopes`, and the OAuth-application API (`DELETE …/grant`, `POST`/`DELETE …/token`).
//!
//! Every request is recorded before it is handled, and any request carrying one of the
//! configured forbidden markers (the proxy's own token prefixes) is refused and listed by
//! [`FakeGitHub::violations`], so tests can assert that no proxy token ever reached "GitHub".

pub mod backend;
mod pages;
mod server;
#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use server::{FakeState, Shared, lock};

/// The proxy's token prefixes; none of them may ever reach GitHub.
pub const DEFAULT_FORBIDDEN_MARKERS: [&str; 5] =
    ["mcpat_", "mcprt_", "mcpac_", "mcpbt_", "mcpc_secret_"];

/// A GitHub account known to the fake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeUser {
    pub id: u64,
    pub login: String,
    pub name: String,
}

impl FakeUser {
    pub fn new(id: u64, login: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            id,
            login: login.into(),
            name: name.into(),
        }
    }
}

/// Configuration of the single OAuth application registered at the fake.
#[derive(Debug, Clone)]
pub struct FakeGitHubConfig {
    pub client_id: String,
    pub client_secret: String,
    /// The single registered OAuth callback URL (the proxy's), e.g.
    /// `http://127.0.0.1:8080/callback/github`. `redirect_uri` matching follows GitHub's rule
    /// (same scheme+host+port, path equal to or under the callback path); if `redirect_uri` is
    /// omitted, the registered callback is used.
    pub callback_url: String,
    pub users: Vec<FakeUser>,
    /// `false` = OAuth App (`gho_` tokens never expire, no refresh token); `true` = GitHub App
    /// user tokens: `expires_in` 28800, `refresh_token` `ghr_…`, `refresh_token_expires_in`
    /// 15897600, scope `""`. A refresh rotates: the old refresh token AND the old access token
    /// stop working.
    pub expiring_tokens: bool,
    /// Substrings that must never arrive (proxy tokens); see [`DEFAULT_FORBIDDEN_MARKERS`].
    pub forbidden_markers: Vec<String>,
}

impl FakeGitHubConfig {
    /// Users alice (1001), mallory (1002) and bob (1003), default markers, OAuth App tokens.
    pub fn demo(
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
        callback_url: impl Into<String>,
    ) -> Self {
        Self {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            callback_url: callback_url.into(),
            users: vec![
                FakeUser::new(1001, "alice", "Alice Example"),
                FakeUser::new(1002, "mallory", "Mallory Attacker"),
                FakeUser::new(1003, "bob", "Bob Builder"),
            ],
            expiring_tokens: false,
            forbidden_markers: DEFAULT_FORBIDDEN_MARKERS.map(String::from).to_vec(),
        }
    }
}

/// One HTTP request as received by the fake (header names are lower-case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RecordedRequest {
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

/// Handle to a running fake GitHub. Cheap to clone; the server stops when [`shutdown`] is
/// called or when the last clone is dropped.
///
/// [`shutdown`]: FakeGitHub::shutdown
#[derive(Clone)]
pub struct FakeGitHub {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Shared,
    base_url: String,
    stop: Mutex<Option<oneshot::Sender<()>>>,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for FakeGitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeGitHub")
            .field("base_url", &self.inner.base_url)
            .finish_non_exhaustive()
    }
}

impl FakeGitHub {
    /// Starts the fake on an ephemeral port of 127.0.0.1.
    pub async fn start(config: FakeGitHubConfig) -> std::io::Result<FakeGitHub> {
        Self::start_on(config, SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
    }

    /// Starts the fake on the given address.
    pub async fn start_on(
        config: FakeGitHubConfig,
        addr: SocketAddr,
    ) -> std::io::Result<FakeGitHub> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let shared: Shared = Arc::new(Mutex::new(FakeState::new(config)));
        let app = axum::Router::new()
            .fallback(server::handle)
            .with_state(shared.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    // Resolves on an explicit stop and when the last handle is dropped.
                    let _ = stop_rx.await;
                })
                .await;
            if let Err(err) = served {
                tracing::warn!(%err, "fake GitHub server stopped with an error");
            }
        });
        tracing::debug!(%local, "fake GitHub listening");
        Ok(FakeGitHub {
            inner: Arc::new(Inner {
                shared,
                base_url: format!("http://{local}"),
                stop: Mutex::new(Some(stop_tx)),
                task: Mutex::new(Some(task)),
            }),
        })
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> String {
        self.inner.base_url.clone()
    }

    pub fn authorize_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::AUTHORIZE_PATH)
    }

    pub fn token_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::TOKEN_PATH)
    }

    /// GHES-style API prefix: `base + "/api/v3"`.
    pub fn api_url(&self) -> String {
        format!("{}{}", self.inner.base_url, server::API_PREFIX)
    }

    /// Replaces the registered callback (the proxy's port is known only after the fake starts).
    pub fn set_callback_url(&self, url: &str) {
        self.state().config.callback_url = url.to_owned();
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state().requests.clone()
    }

    /// A description of each request that contained a forbidden marker anywhere.
    pub fn violations(&self) -> Vec<String> {
        self.state().violations.clone()
    }

    /// Number of POSTs to the token endpoint.
    pub fn token_requests(&self) -> usize {
        self.state().token_requests
    }

    /// Whether the user has a stored authorization of the app.
    pub fn has_authorized(&self, login: &str) -> bool {
        self.state().authorizations.contains_key(login)
    }

    /// Like the user having authorized the app at github.com for `scopes` earlier (through
    /// any flow): later requests these cover complete silently.
    pub fn authorize_app(&self, login: &str, scopes: &[&str]) {
        self.state()
            .authorizations
            .entry(login.to_owned())
            .or_default()
            .extend(scopes.iter().map(|s| (*s).to_owned()));
    }

    /// `true`: a silently completed request gets a token with the user's whole authorization,
    /// not only the scopes it asked for (what GitHub documents for a request without
    /// `scope`; proxies must not rely on the narrower answer).
    pub fn set_skip_grants_whole_authorization(&self, on: bool) {
        self.state().skip_grants_whole_authorization = on;
    }

    /// Like the user revoking the app at github.com: all of the user's tokens (and pending
    /// codes) stop working and the authorization is forgotten.
    pub fn revoke_tokens_of(&self, login: &str) {
        self.state().revoke_user(login);
    }

    /// Every access token ever handed out for that user, oldest first (revoked ones included).
    pub fn issued_access_tokens(&self, login: &str) -> Vec<String> {
        self.state()
            .issued
            .iter()
            .filter(|(l, _)| l == login)
            .map(|(_, t)| t.clone())
            .collect()
    }

    pub fn set_expiring_tokens(&self, on: bool) {
        self.state().config.expiring_tokens = on;
    }

    /// Moves the fake's own wall clock forward (to expire codes and tokens without sleeping).
    pub fn advance_time(&self, by: Duration) {
        self.state().time_offset += by;
    }

    /// Graceful stop: waits (at most 5 s) for the server task to finish.
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

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        lock(&self.inner.shared)
    }
}
