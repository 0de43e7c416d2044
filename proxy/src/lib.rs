//! mcp-oauth-proxy: an OAuth 2.1 authorization server for MCP clients that signs people in
//! through GitHub as one static OAuth client, with per-client consent, browser-bound state and
//! audience-bound tokens. See `SECURITY.md` for where each binding is enforced.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod audit;
pub mod bindings;
pub mod cli;
pub mod clients;
pub mod clock;
pub mod config;
pub mod cookies;
pub mod crypto;
pub mod csrf;
#[cfg(feature = "demo")]
pub mod demo;
pub mod flows;
pub mod gateway;
pub mod github;
pub mod http;
pub mod ids;
pub mod limits;
pub mod metrics;
pub mod oauth;
pub mod outbound;
pub mod run;
pub mod secrets;
pub mod session;
pub mod shutdown;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod tool_policy;

/// The allocator of every binary that links this crate (the proxy, the benchmark, the tests),
/// so the benchmark measures what ships. mimalloc in secure mode (guard pages, encoded free
/// lists, double-free detection) for the heap that ring's and sled's unsafe code share with
/// ours; it runs the OAuth flows 25–65% faster than glibc malloc on the benchmark, whose
/// sled-heavy write paths spent about 15% of their time in malloc/free (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Installs rustls' ring provider as the process default (reqwest is built without one, to
/// keep aws-lc out of the tree). Safe to call more than once.
pub fn install_crypto_provider() {
    // An Err only means a provider is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
