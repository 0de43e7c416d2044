//! Starting what is measured, the way the integration tests do (tests/support/mod.rs), but
//! durable: a real proxy on an ephemeral loopback port with `SystemClock` and either a sled
//! store opened with `SledStore::open` in a temporary directory on disk (not `temporary`,
//! which skips sled's syncs) or the PostgreSQL store in a fresh schema of the run's scratch
//! database (`[store] url`, connected as `serve` connects it), the fake GitHub from
//! `mcp-examples`, and optionally the bench's trivial backend behind `/mcp`.

use std::collections::HashMap;
use std::sync::Arc;

use mcp_examples::{FakeGitHub, FakeGitHubConfig, FakeUser};
use mcp_oauth_proxy::app::App;
use mcp_oauth_proxy::clock::{SharedClock, SystemClock};
use mcp_oauth_proxy::config::{Config, Keys};
use mcp_oauth_proxy::store::{SharedStore, SledStore};

use crate::counting::{Counters, CountingStore};

/// The proxy's GitHub OAuth client at the fake.
pub const GH_CLIENT_ID: &str = "gh-client-id";
/// Its secret.
pub const GH_CLIENT_SECRET: &str = "gh-client-secret";
/// Scopes the proxy asks GitHub for (and offers to MCP clients).
pub const SCOPES: &str = r#"["read:user", "repo"]"#;

/// A running proxy.
pub struct Proxy {
    /// `http://127.0.0.1:PORT`
    pub base: String,
    /// Its application state.
    pub app: App,
    /// Where its sled store lives (removed on drop).
    pub dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Proxy {
    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// What to start the proxy with.
pub struct Options<'a> {
    /// The fake GitHub's URLs; `None`: unreachable placeholders (nothing calls GitHub).
    pub github: Option<&'a FakeGitHub>,
    /// `[backend] url`, with `auth = "github_token"`.
    pub backend_url: Option<String>,
    /// Count store operations (calibration only).
    pub counters: Option<Arc<Counters>>,
    /// Run the expiry sweeper as `serve` does.
    pub sweeper: bool,
    /// Which store.
    pub store: Backing,
}

/// The proxy's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// sled on disk in a temporary directory.
    Sled,
    /// PostgreSQL: a fresh schema in the run's scratch database ([`set_pg_url`]).
    Postgres,
}

impl Backing {
    /// `sled` or `pg` (as on the command line, `--store NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Backing::Sled => "sled",
            Backing::Postgres => "pg",
        }
    }

    /// From `--store NAME`.
    pub fn parse(s: &str) -> Backing {
        match s {
            "pg" | "postgres" => Backing::Postgres,
            _ => Backing::Sled,
        }
    }
}

/// The fake GitHub with `users` people (`user0`, `user1`, …), none of whom has authorized
/// the app yet.
pub async fn fake_github(users: usize) -> FakeGitHub {
    let mut cfg =
        FakeGitHubConfig::demo(GH_CLIENT_ID, GH_CLIENT_SECRET, "http://127.0.0.1:1/unset");
    cfg.users = (0..users)
        .map(|i| {
            FakeUser::new(
                50_000 + i as u64,
                format!("user{i}"),
                format!("Bench User {i}"),
            )
        })
        .collect();
    FakeGitHub::start(cfg).await.expect("start fake GitHub")
}

/// Starts a proxy.
pub async fn start(opts: Options<'_>) -> Proxy {
    mcp_oauth_proxy::install_crypto_provider();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind proxy");
    let addr = listener.local_addr().expect("proxy addr");
    let base = format!("http://{addr}");
    let (authorize, token, api) = match opts.github {
        Some(gh) => {
            gh.set_callback_url(&format!("{base}/callback/github"));
            (gh.authorize_url(), gh.token_url(), gh.api_url())
        }
        None => (
            "http://127.0.0.1:9/login/oauth/authorize".to_owned(),
            "http://127.0.0.1:9/login/oauth/access_token".to_owned(),
            "http://127.0.0.1:9/api/v3".to_owned(),
        ),
    };
    let dir = tempdir("proxy-");
    let store_toml = match opts.store {
        Backing::Sled => format!("path = \"{}\"", dir.path().display()),
        Backing::Postgres => {
            // A PostgreSQL store needs `[keys]` (every replica shares them): fresh ones.
            let mut keys = String::from("[keys]\n");
            for name in mcp_oauth_proxy::config::KEY_NAMES {
                let k = mcp_oauth_proxy::crypto::random_bytes::<32>().expect("random");
                keys.push_str(&format!(
                    "{name} = \"{}\"\n",
                    mcp_oauth_proxy::crypto::b64(&k)
                ));
            }
            format!(
                "url = \"{}\"\nschema = \"{}\"\n{keys}",
                pg_url().expect("--pg-url: no scratch database for a PostgreSQL proxy"),
                fresh_schema()
            )
        }
    };
    let backend = opts
        .backend_url
        .map(|u| format!("[backend]\nurl = \"{u}\"\nauth = \"github_token\"\n"))
        .unwrap_or_default();
    let toml = format!(
        r#"
[server]
public_url = "{base}"
listen = "{addr}"
# One load generator on one address: the per-source connection cap would cut it off.
max_connections = 65536
max_connections_per_source = 65536
[github]
client_id = "{GH_CLIENT_ID}"
client_secret = "{GH_CLIENT_SECRET}"
scopes = {SCOPES}
authorize_url = "{authorize}"
token_url = "{token}"
api_url = "{api}"
[store]
{store_toml}
# The bench drives thousands of flows a second from one address; it measures the store and
# the flows, not the rate limiter.
[rate_limits]
enabled = false
{backend}
"#,
    );
    let config = Config::from_toml(&toml, &HashMap::<String, String>::new()).expect("config");
    let clock: SharedClock = Arc::new(SystemClock);
    let (store, keys): (SharedStore, Keys) = match opts.store {
        Backing::Sled => (
            Arc::new(
                SledStore::open_with_cache(dir.path(), cache_mb() << 20, clock.clone())
                    .expect("open sled store"),
            ),
            Keys::generate().expect("keys"),
        ),
        Backing::Postgres => (
            // As `serve` connects it (pool, migrations), from `[store] url` and `schema`.
            mcp_oauth_proxy::run::connect_postgres(&config.store, clock.clone())
                .await
                .expect("connect the PostgreSQL store"),
            config.keys.clone().expect("[keys]"),
        ),
    };
    let store: SharedStore = match opts.counters {
        Some(c) => Arc::new(CountingStore::new(store, c)),
        None => store,
    };
    let http = config.http();
    let app = App::new(config, keys, store, clock).expect("app");
    if opts.sweeper {
        let _sweeper = mcp_oauth_proxy::run::spawn_sweeper(&app);
    }
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let serving = app.clone();
    let stop = async {
        let _ = rx.await;
    };
    tokio::spawn(async move {
        mcp_oauth_proxy::http::serve(listener, serving, http, stop)
            .await
            .expect("proxy serve");
    });
    Proxy {
        base,
        app,
        dir,
        _stop: tx,
    }
}

/// Where this run keeps its stores: the parent makes one directory per run and passes it to
/// each child (`--tmp DIR`), and removes it at the end, also after a child that hung and was
/// ended without running its destructors.
static TMP_BASE: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// sled's page cache for the proxies of this process, MiB (`--cache-mb N`, as `store.cache_mb`);
/// the proxy's default when unset.
static CACHE_MB: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// The run's scratch PostgreSQL database (`--pg-url URL`, made by the parent); unset when
/// PostgreSQL is not measured.
static PG_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets [`PG_URL`] (once).
pub fn set_pg_url(url: String) {
    let _ = PG_URL.set(url);
}

/// The run's scratch database, if PostgreSQL is measured.
pub fn pg_url() -> Option<&'static str> {
    PG_URL.get().map(String::as_str)
}

/// Why PostgreSQL is not measured (`--pg-skip REASON`, from the parent).
static PG_SKIP: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets [`PG_SKIP`] (once).
pub fn set_pg_skip(reason: String) {
    let _ = PG_SKIP.set(reason);
}

/// Why PostgreSQL is not measured, if the parent said.
pub fn pg_skip_reason() -> Option<String> {
    PG_SKIP.get().cloned()
}

/// A schema name no other proxy of this run uses (one per proxy, as the tests isolate
/// themselves).
fn fresh_schema() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "bench_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Sets [`CACHE_MB`] (once).
pub fn set_cache_mb(mb: u64) {
    let _ = CACHE_MB.set(mb);
}

/// The page cache the proxies of this process use, MiB.
pub fn cache_mb() -> u64 {
    CACHE_MB
        .get()
        .copied()
        .unwrap_or(mcp_oauth_proxy::config::DEFAULT_SLED_CACHE_MB)
}

/// Sets the base directory for [`tempdir`] (once).
pub fn set_tmp_base(p: std::path::PathBuf) {
    let _ = TMP_BASE.set(p);
}

/// A new temporary directory on disk (under the run's base directory when there is one).
pub fn tempdir(prefix: &str) -> tempfile::TempDir {
    let b = tempfile::Builder::new().prefix(prefix).clone();
    match TMP_BASE.get() {
        Some(base) => b.tempdir_in(base),
        None => b.tempdir(),
    }
    .expect("temp dir")
}

/// An HTTP client that never follows redirects; one per simulated browser or connection.
#[allow(clippy::disallowed_methods)] // the benchmark's client, not the proxy's outbound traffic
pub fn http() -> reqwest::Client {
    mcp_oauth_proxy::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(4)
        // Below the proxy's keep-alive cut-off (an idle HTTP/1.1 connection is closed at
        // `[server] header_read_timeout_secs`, default 10 s), as any well-behaved client keeps
        // it: reusing a connection the server is closing fails the request.
        .pool_idle_timeout(std::time::Duration::from_secs(5))
        .tcp_nodelay(true)
        .build()
        .expect("http client")
}

/// Total size of the files under `dir`, in bytes.
pub fn dir_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => total += dir_size(&e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}
