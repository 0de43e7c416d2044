//! `mcp-oauth-proxy demo`: the embedded default, offline. A fake GitHub (test users alice,
//! mallory and bob), the proxy with sled in a temporary directory and generated keys, all on
//! loopback.

use std::net::SocketAddr;
use std::sync::Arc;

use mcp_examples::backend::{BackendConfig, DemoBackend, ExchangeConfig};
use mcp_examples::{FakeGitHub, FakeGitHubConfig};

use crate::clock::SystemClock;
use crate::config::{Config, Env};
use crate::run::{self, StartError};

/// Demo settings.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where the proxy listens.
    pub listen: SocketAddr,
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
    let dir = tempfile::tempdir().map_err(|e| StartError::Keys(e.to_string()))?;
    let public_url = format!("http://{}", opts.listen);
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
    let backend_secret =
        crate::crypto::random_token().map_err(|e| StartError::Keys(e.to_string()))?;
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
scopes = ["read:user", "repo"]
authorize_url = "{authorize}"
token_url = "{token}"
api_url = "{api}"
[store]
path = "{store}"
[backend]
url = "{backend}"
auth = "exchange"
exchange_client_id = "demo-backend"
exchange_client_secret = "{backend_secret}"
"#,
        listen = opts.listen,
        authorize = github.authorize_url(),
        token = github.token_url(),
        api = github.api_url(),
        store = dir.path().join("store").display(),
        backend = backend.url(),
    );
    let config = Config::from_toml(&toml, &NoEnv).map_err(|e| StartError::Keys(e.to_string()))?;
    let app = run::prepare(config, Arc::new(SystemClock)).await?;
    println!(
        "\nmcp-oauth-proxy demo (offline)\n\n  MCP server URL:        {public_url}/mcp\n  Authorization server:  {public_url}\n  Account page:          {public_url}/account\n  Fake GitHub:           {gh}\n  Demo MCP backend:      {be} (tools: whoami, list_repos, slow_count)\n  Metrics and health:    http://{admin}/metrics, /healthz, /readyz\n  Data (temporary):      {store}\n\nPoint an MCP client at the MCP server URL. When the browser reaches the fake GitHub,\npick a test user: alice, mallory or bob. Press Ctrl-C to stop.\n",
        gh = github.base_url(),
        be = backend.url(),
        store = dir.path().display(),
        admin = app.config.admin.listen,
    );
    let result = run::serve_on(opts.listen, app, run::shutdown_signal()).await;
    backend.shutdown().await;
    github.shutdown().await;
    drop(dir);
    result
}
