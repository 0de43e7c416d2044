//! The fake GitHub and the demo MCP backend on their own, for trying `mcp-oauth-proxy serve`
//! with a configuration of your own (a `[[policy]]`, another backend, TLS) against the same
//! offline stand-ins the demo uses:
//!
//! ```sh
//! cargo run -p mcp-examples --example fakes -- --callback http://127.0.0.1:8443/callback/github
//! ```
//!
//! It prints the `[github]` and `[backend]` settings to paste into the proxy's config. The fake
//! GitHub knows alice and bob (org `acme`) and mallory (outside it); it accepts only the given
//! callback URL, as GitHub accepts only an app's registered one. Ctrl-C stops both.

#![allow(clippy::print_stdout)]

use mcp_examples::backend::{BackendConfig, DemoBackend};
use mcp_examples::{FakeGitHub, FakeGitHubConfig};

const CLIENT_ID: &str = "fakes-client-id";
const CLIENT_SECRET: &str = "fakes-client-secret";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let callback = match args.as_slice() {
        [flag, url] if flag == "--callback" => url.clone(),
        _ => {
            eprintln!("usage: fakes --callback <the proxy's public URL>/callback/github");
            std::process::exit(64);
        }
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let github =
        FakeGitHub::start(FakeGitHubConfig::demo(CLIENT_ID, CLIENT_SECRET, callback)).await?;
    let backend = DemoBackend::start(BackendConfig {
        github_api_url: github.api_url(),
        prefer_sse: false,
    })
    .await?;
    println!(
        "[github]\nclient_id = \"{CLIENT_ID}\"\nclient_secret = \"{CLIENT_SECRET}\"\nscopes = [\"read:user\", \"repo\", \"read:org\"]\nauthorize_url = \"{}\"\ntoken_url = \"{}\"\napi_url = \"{}\"\n\n[backend]\nurl = \"{}\"\nauth = \"github_token\"\n",
        github.authorize_url(),
        github.token_url(),
        github.api_url(),
        backend.url(),
    );
    tokio::signal::ctrl_c().await?;
    backend.shutdown().await;
    github.shutdown().await;
    Ok(())
}
