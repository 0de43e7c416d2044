//! Fixtures: a real proxy on an ephemeral loopback port (with an injected clock and a
//! temporary sled store), the fake GitHub, browsers with their own cookie jars, and an MCP
//! client that registers and redeems codes over real HTTP.

pub mod admin;
pub mod binary;
pub mod browser;
pub mod client;
pub mod go_backend;
pub mod logs;
pub mod mcp;
pub mod ops;
pub mod otlp;
pub mod people;

use std::sync::Arc;

use mcp_examples::backend::{BackendConfig, DemoBackend, ExchangeConfig};
use mcp_examples::{FakeGitHub, FakeGitHubConfig};
use mcp_oauth_proxy::app::App;
use mcp_oauth_proxy::clock::{Clock, ManualClock, SystemClock};
use mcp_oauth_proxy::config::{Config, Keys};
use mcp_oauth_proxy::store::{Keyspace, SharedStore, SledStore};

pub use browser::Browser;
pub use client::{Client, Pkce};

/// A running proxy and its fake GitHub.
pub struct TestProxy {
    /// The public URL (the issuer): this proxy's own address, or the first replica's.
    pub base: String,
    /// This process's own address (differs from `base` for a replica).
    pub own_base: String,
    /// What another replica of this proxy needs.
    pub replica: Replica,
    /// The proxy's application state (to inspect the store and audit trail).
    pub app: App,
    /// The proxy's clock.
    pub clock: Arc<ManualClock>,
    /// The fake GitHub.
    pub github: FakeGitHub,
    /// The demo MCP backend, if started.
    pub backend: Option<DemoBackend>,
    /// The configuration it was started with, as TOML (a reload test rewrites a file of it).
    pub toml: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

/// Options for a test proxy.
#[derive(Default)]
pub struct Options {
    /// Extra TOML appended to the config (e.g. a `[tokens]` section).
    pub extra_toml: String,
    /// Start the demo MCP backend and put it behind `/mcp`.
    pub backend: bool,
    /// The backend answers with SSE whenever the client accepts it.
    pub backend_prefers_sse: bool,
    /// Extra lines inside the `[backend]` section.
    pub backend_toml: String,
    /// The backend uses token exchange (`auth = "exchange"`) instead of the GitHub token.
    pub exchange: bool,
    /// Run as another replica of this proxy: same PostgreSQL schema, keys, fake GitHub and
    /// public URL (a load balancer's address), its own listener.
    pub replica_of: Option<Replica>,
    /// Use PostgreSQL (a fresh schema) even without `MCP_TEST_STORE=postgres`.
    pub postgres: bool,
    /// The resolver client metadata documents are fetched through (default: the system's).
    pub client_resolver: Option<Arc<dyn mcp_oauth_proxy::clients::fetch::Resolver>>,
    /// Extra lines inside the `[server]` section (e.g. `trusted_proxies`).
    pub server_toml: String,
    /// Lines of an `[access]` section (admission); with them the default `[github] scopes`
    /// also asks for `read:org`, which org and team rules need.
    pub access: String,
    /// `[github] scopes` as a TOML array (default `["read:user", "repo"]`, plus `read:org`
    /// with `access`).
    pub github_scopes: Option<String>,
    /// Log every store operation of this proxy here (`support::ops`).
    pub op_log: Option<ops::OpLog>,
    /// Put this MCP endpoint behind `/mcp` (github_token mode) instead of the demo backend
    /// (for example the Go backend, `support::go_backend`).
    pub backend_url: Option<String>,
}

/// What replicas of one proxy share.
#[derive(Clone)]
pub struct Replica {
    github: FakeGitHub,
    keys: Keys,
    schema: String,
    public_url: String,
}

/// The PostgreSQL server the tests use.
pub fn pg_url() -> String {
    std::env::var("MCP_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Whether tests should run on PostgreSQL.
pub fn postgres_selected() -> bool {
    std::env::var("MCP_TEST_STORE").as_deref() == Ok("postgres")
}

/// Whether PostgreSQL is reachable; panics if it is required (`MCP_PG=require`) and is not.
pub async fn postgres_available() -> bool {
    let ok = tokio_postgres_probe().await;
    if !ok && std::env::var("MCP_PG").as_deref() == Ok("require") {
        panic!(
            "PostgreSQL at {} is required (MCP_PG=require) but not reachable",
            pg_url()
        );
    }
    if !ok {
        eprintln!("NOTICE: PostgreSQL at {} not reachable; skipping", pg_url());
    }
    ok
}

async fn tokio_postgres_probe() -> bool {
    let clock = ManualClock::new(SystemClock.now());
    mcp_oauth_proxy::store::PgStore::connect(&pg_url(), Some("probe"), clock)
        .await
        .is_ok()
}

fn fresh_schema() -> String {
    let r = mcp_oauth_proxy::crypto::random_bytes::<9>().unwrap();
    format!(
        "it_{}",
        r.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

/// The exchange-mode backend's credentials at the proxy.
pub const BACKEND_CLIENT_ID: &str = "demo-backend";
/// Its secret.
pub const BACKEND_CLIENT_SECRET: &str = "backend-secret-0123456789abcdef";

impl TestProxy {
    /// Starts with defaults.
    pub async fn start() -> TestProxy {
        TestProxy::start_with(Options::default()).await
    }

    /// Starts with options.
    pub async fn start_with(opts: Options) -> TestProxy {
        logs::init();
        mcp_oauth_proxy::install_crypto_provider();
        let github = match &opts.replica_of {
            Some(r) => r.github.clone(),
            None => FakeGitHub::start(FakeGitHubConfig::demo(
                "gh-client-id",
                "gh-client-secret",
                "http://127.0.0.1:1/unset",
            ))
            .await
            .unwrap(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let own_base = format!("http://{addr}");
        let base = opts
            .replica_of
            .as_ref()
            .map_or_else(|| own_base.clone(), |r| r.public_url.clone());
        if opts.replica_of.is_none() {
            github.set_callback_url(&format!("{base}/callback/github"));
        }
        let backend = if opts.backend || opts.exchange {
            let cfg = BackendConfig {
                github_api_url: github.api_url(),
                prefer_sse: opts.backend_prefers_sse,
            };
            Some(if opts.exchange {
                let ex = ExchangeConfig::new(
                    format!("{base}/token"),
                    BACKEND_CLIENT_ID,
                    BACKEND_CLIENT_SECRET,
                );
                DemoBackend::start_with_exchange(cfg, ex).await.unwrap()
            } else {
                DemoBackend::start(cfg).await.unwrap()
            })
        } else {
            None
        };
        let auth = if opts.exchange {
            format!(
                "auth = \"exchange\"\nexchange_client_id = \"{BACKEND_CLIENT_ID}\"\nexchange_client_secret = \"{BACKEND_CLIENT_SECRET}\""
            )
        } else {
            "auth = \"github_token\"".to_owned()
        };
        let backend_url = opts
            .backend_url
            .clone()
            .or_else(|| backend.as_ref().map(|b| b.url()));
        let backend_toml = backend_url
            .map(|url| {
                format!(
                    "[backend]\nurl = \"{url}\"\n{auth}\n{}\n",
                    opts.backend_toml
                )
            })
            .unwrap_or_default();
        let toml = format!(
            r#"
[server]
public_url = "{base}"
listen = "{addr}"
{server_extra}
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = {scopes}
authorize_url = "{a}"
token_url = "{t}"
api_url = "{api}"
[store]
path = "/nonexistent-tests-use-a-temporary-store"
{backend_toml}
{access}
{extra}
"#,
            access = if opts.access.is_empty() {
                String::new()
            } else {
                format!("[access]\n{}\n", opts.access)
            },
            a = github.authorize_url(),
            t = github.token_url(),
            api = github.api_url(),
            extra = opts.extra_toml,
            server_extra = opts.server_toml,
            scopes = opts
                .github_scopes
                .as_deref()
                .unwrap_or(if opts.access.is_empty() {
                    r#"["read:user", "repo"]"#
                } else {
                    r#"["read:user", "repo", "read:org"]"#
                }),
        );
        let config = Config::from_toml(&toml, &std::collections::HashMap::new()).unwrap();
        let started_with = toml.clone();
        // The fake GitHub keeps real time; start the proxy's clock there and move it by hand.
        let clock = ManualClock::new(SystemClock.now());
        let use_pg = opts.postgres || opts.replica_of.is_some() || postgres_selected();
        let schema = opts
            .replica_of
            .as_ref()
            .map_or_else(fresh_schema, |r| r.schema.clone());
        let store: SharedStore = if use_pg {
            Arc::new(
                mcp_oauth_proxy::store::PgStore::connect(&pg_url(), Some(&schema), clock.clone())
                    .await
                    .unwrap(),
            )
        } else {
            Arc::new(SledStore::temporary(clock.clone()).unwrap())
        };
        let store: SharedStore = match &opts.op_log {
            Some(log) => Arc::new(ops::LoggingStore {
                inner: store,
                log: log.clone(),
            }),
            None => store,
        };
        let keys = opts
            .replica_of
            .as_ref()
            .map_or_else(|| Keys::generate().unwrap(), |r| r.keys.clone());
        let replica = Replica {
            github: github.clone(),
            keys: keys.clone(),
            schema,
            public_url: base.clone(),
        };
        let http = config.http();
        let app = match opts.client_resolver {
            Some(r) => App::new_with_resolver(config, keys, store, clock.clone(), r),
            None => App::new(config, keys, store, clock.clone()),
        }
        .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let serving = app.clone();
        tokio::spawn(async move {
            mcp_oauth_proxy::http::serve(listener, serving, http, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        TestProxy {
            own_base,
            replica,
            base,
            app,
            clock,
            github,
            backend,
            toml: started_with,
            _stop: tx,
        }
    }

    /// The backend (panics if the proxy was started without one).
    pub fn backend(&self) -> &DemoBackend {
        self.backend.as_ref().expect("started with a backend")
    }

    /// The PostgreSQL schema this proxy (and its replicas) use.
    pub fn schema(&self) -> &str {
        &self.replica.schema
    }

    /// This process's own address + path (for talking to one replica specifically).
    pub fn own_url(&self, path: &str) -> String {
        format!("{}{path}", self.own_base)
    }

    /// Starts another replica of this proxy (same database, keys, GitHub and public URL).
    pub async fn replica(&self) -> TestProxy {
        TestProxy::start_with(Options {
            replica_of: Some(self.replica.clone()),
            ..Options::default()
        })
        .await
    }

    /// `base + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Number of live records in a keyspace.
    pub async fn count(&self, ks: Keyspace) -> usize {
        self.app.store.scan_prefix(ks, "").await.unwrap().len()
    }

    /// The audit events' names, in order.
    pub async fn audit_events(&self) -> Vec<String> {
        self.app
            .audit
            .all()
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.event["event"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// A reqwest client that never follows redirects.
#[allow(clippy::disallowed_methods)] // the test's browser, not the proxy's outbound traffic
pub fn http() -> reqwest::Client {
    mcp_oauth_proxy::install_crypto_provider();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The value of query parameter `name` in `url`.
pub fn query_param(url: &str, name: &str) -> Option<String> {
    url::Url::parse(url)
        .ok()?
        .query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}
