//! `mcp-oauth-proxy demo`: the embedded default, offline. A fake GitHub (test users alice,
//! mallory and bob), the proxy with sled in a temporary directory and generated keys, all on
//! loopback.
//!
//! The demo never fails on a port it chose itself: its default proxy and admin ports (8080 and
//! 9090, the ones a person expects) fall back to free ones when taken (9090 is Prometheus' own
//! default), and the URLs it prints are the ones it really uses. Addresses given with
//! `--listen` / `--admin-listen` are bound exactly or the start fails, naming them.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use mcp_examples::backend::{BackendConfig, DemoBackend, ExchangeConfig};
use mcp_examples::{FakeGitHub, FakeGitHubConfig};

use crate::clock::SystemClock;
use crate::config::{Config, Env};
use crate::run::{self, StartError};

/// The proxy's port when nothing else holds it.
pub const DEFAULT_PORT: u16 = 8080;
/// The admin listener's port when nothing else holds it.
pub const DEFAULT_ADMIN_PORT: u16 = 9090;

/// Demo settings.
#[derive(Debug, Clone, Default)]
pub struct DemoOptions {
    /// Where the proxy listens; `None`: 127.0.0.1:8080, or a free port when that is taken.
    pub listen: Option<SocketAddr>,
    /// Where the admin listener listens; `None`: 127.0.0.1:9090, or a free port when taken.
    pub admin_listen: Option<SocketAddr>,
}

/// Binds the address the person asked for exactly, or the default port on loopback, falling
/// back to a free one when something else holds it.
async fn bind_demo_port(
    asked: Option<SocketAddr>,
    default_port: u16,
) -> Result<tokio::net::TcpListener, StartError> {
    if let Some(addr) = asked {
        return run::bind_exactly(addr).await;
    }
    let preferred = SocketAddr::from((Ipv4Addr::LOCALHOST, default_port));
    match tokio::net::TcpListener::bind(preferred).await {
        Ok(l) => Ok(l),
        Err(e) => {
            tracing::info!(%preferred, error = %e, "demo: default port taken; using a free one");
            run::bind_exactly(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await
        }
    }
}

/// The address a bound listener really has.
fn bound(listener: &tokio::net::TcpListener) -> Result<SocketAddr, StartError> {
    listener
        .local_addr()
        .map_err(|e| StartError::Demo(format!("listener address: {e}")))
}

struct NoEnv;
impl Env for NoEnv {
    fn var(&self, _: &str) -> Option<String> {
        None
    }
}

/// Runs the demo until Ctrl-C.
pub async fn run(opts: DemoOptions) -> Result<(), StartError> {
    crate::install_crypto_provider();
    // Ports first: the public URL, GitHub's callback and the backend's token URL name them.
    let listeners = run::Listeners {
        main: bind_demo_port(opts.listen, DEFAULT_PORT).await?,
        admin: bind_demo_port(opts.admin_listen, DEFAULT_ADMIN_PORT).await?,
    };
    let listen = bound(&listeners.main)?;
    let admin_listen = bound(&listeners.admin)?;
    let dir = tempfile::tempdir().map_err(|e| StartError::Demo(format!("temporary store: {e}")))?;
    let public_url = format!("http://{listen}");
    let client_id = "demo-client-id";
    let client_secret = "demo-client-secret";
    let github = FakeGitHub::start(FakeGitHubConfig::demo(
        client_id,
        client_secret,
        format!("{public_url}/callback/github"),
    ))
    .await
    .map_err(|e| StartError::Demo(format!("fake GitHub: {e}")))?;
    // The demo backend exchanges its short-lived proxy token for the person's GitHub token
    // (RFC 8693) with a secret generated for this run.
    let backend_secret = crate::crypto::random_token()
        .map_err(|e| StartError::Demo(format!("backend secret: {e}")))?;
    let backend = DemoBackend::start_with_exchange(
        BackendConfig {
            github_api_url: github.api_url(),
            prefer_sse: false,
        },
        ExchangeConfig::new(
            format!("{public_url}/token"),
            "demo-backend",
            backend_secret.clone(),
        ),
    )
    .await
    .map_err(|e| StartError::Demo(format!("demo backend: {e}")))?;
    let toml = format!(
        r#"
[server]
public_url = "{public_url}"
listen = "{listen}"
resource_name = "mcp-oauth-proxy demo"
[github]
client_id = "{client_id}"
client_secret = "{client_secret}"
scopes = ["read:user", "repo", "read:org"]
authorize_url = "{authorize}"
token_url = "{token}"
api_url = "{api}"
[store]
path = "{store}"
# Admission as a platform team would set it: the fake GitHub's org acme has alice and bob.
[access]
github_orgs = ["acme"]
[admin]
listen = "{admin_listen}"
[backend]
url = "{backend}"
auth = "exchange"
exchange_client_id = "demo-backend"
exchange_client_secret = "{backend_secret}"
"#,
        authorize = github.authorize_url(),
        token = github.token_url(),
        api = github.api_url(),
        store = dir.path().join("store").display(),
        backend = backend.url(),
    );
    let config = Config::from_toml(&toml, &NoEnv)?;
    let app = run::prepare(config, Arc::new(SystemClock)).await?;
    println!(
        "\nmcp-oauth-proxy demo (offline)\n\n  MCP server URL:        {public_url}/mcp\n  Authorization server:  {public_url}\n  Account page:          {public_url}/account\n  Fake GitHub:           {gh}\n  Demo MCP backend:      {be} (tools: whoami, list_repos, slow_count)\n  Metrics and health:    http://{admin}/metrics, /healthz, /readyz\n  Data (temporary):      {store}\n\nPoint an MCP client at the MCP server URL. When the browser reaches the fake GitHub,\npick a test user: alice or bob (members of the org acme, admitted) or mallory (outside acme:\nrefused, to show admission working). Press Ctrl-C to stop.\n",
        gh = github.base_url(),
        be = backend.url(),
        store = dir.path().display(),
        admin = admin_listen,
    );
    let result = run::serve_on(listeners, app, run::shutdown_signal()).await;
    backend.shutdown().await;
    github.shutdown().await;
    drop(dir);
    result
}
