//! The one door for outbound HTTP: every `reqwest::Client` the proxy (and its admin CLI) uses is
//! built here, one function per purpose, so the policy for each is read side by side.
//! `clippy.toml` bans `reqwest::Client::new`, `reqwest::Client::builder` and
//! `reqwest::ClientBuilder::new` everywhere else.
//!
//! | Purpose (function) | Redirects | Proxy from the environment (`HTTP(S)_PROXY`, `ALL_PROXY`, `NO_PROXY`) | Timeouts | Name resolution | User agent |
//! |---|---|---|---|---|---|
//! | GitHub ([`github`]) | none | honoured: a corporate egress proxy may be the only way to reach github.com; the proxy sees only TLS to GitHub | whole exchange `timeout`, connect `min(timeout, 5 s)` | system | ours |
//! | backend MCP server ([`backend`]) | none | honoured (kept as it was; `NO_PROXY` exempts an internal backend) | connect only: streams may last hours; `TCP_NODELAY` | system | ours |
//! | metadata documents ([`metadata_document`]) | none | **never**: the connection must go to the address that passed the SSRF check, and a proxy would resolve (and reach) the name itself | connect and whole exchange: the fetch policy's timeout | **pinned** to the checked addresses; any other name fails (no DNS) | ours |
//! | audit webhook ([`webhook`]) | none | **never**: deliveries carry the webhook URL, often with a secret in it; only `[audit.webhook] proxy` when configured | whole exchange `timeout` | system | reqwest's (none; kept) |
//! | telemetry exporter ([`telemetry`]) | none | honoured, like GitHub: the collector may sit behind the egress proxy | as GitHub, with at least 1 s | system | ours |
//! | admin CLI ([`admin_cli`]) | none | **never**: each request carries the admin token | connect 60 s; whole exchange 60 s, or each read 60 s for a streamed export | system | reqwest's (none; kept) |
//!
//! TLS is the same for every purpose: rustls with the ring provider
//! ([`crate::install_crypto_provider`]), certificates checked against the system trust store
//! (reqwest's `rustls-platform-verifier`); no purpose adds roots or skips verification.
//! No redirect is ever followed: a redirect answer is returned to the caller as it is (the
//! metadata fetch refuses it, GitHub and the backend answer what they answer).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use url::Url;

const USER_AGENT: &str = concat!("mcp-oauth-proxy/", env!("CARGO_PKG_VERSION"));

/// The one place a client builder is created: no redirects, ring installed for rustls.
#[allow(clippy::disallowed_methods)] // this module is the sanctioned builder of outbound clients
fn builder() -> reqwest::ClientBuilder {
    crate::install_crypto_provider();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none())
}

/// Toward GitHub (OAuth token endpoint and REST API).
pub fn github(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .user_agent(USER_AGENT)
        .build()
}

/// Toward the backend MCP server: no overall timeout (streams may last hours), no compression.
pub fn backend(connect_timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    builder()
        .connect_timeout(connect_timeout)
        .tcp_nodelay(true)
        .user_agent(USER_AGENT)
        .build()
}

/// For one Client ID Metadata Document fetch. `pinned`: the host name and the addresses that
/// passed the SSRF check (`clients::fetch::address_allowed`); the client reaches that name only
/// at those addresses and resolves no other name. `None` for an IP-literal host.
pub fn metadata_document(
    timeout: Duration,
    pinned: Option<(&str, &[SocketAddr])>,
) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout)
        .dns_resolver(Arc::new(NoResolution))
        .user_agent(USER_AGENT);
    if let Some((name, addrs)) = pinned {
        // Pin the name to the checked addresses: reqwest uses these, never DNS.
        builder = builder.resolve_to_addrs(name, addrs);
    }
    builder.build()
}

/// For audit webhook deliveries: only the proxy configured for them, if any.
pub fn webhook(timeout: Duration, proxy: Option<&Url>) -> Result<reqwest::Client, reqwest::Error> {
    let builder = builder().timeout(timeout);
    let builder = match proxy {
        Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy.as_str())?),
        None => builder.no_proxy(),
    };
    builder.build()
}

/// For the OTLP trace exporter.
pub fn telemetry(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    github(Duration::from_secs(timeout.as_secs().max(1)))
}

/// How long an admin CLI exchange may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminExchange {
    /// The whole exchange within 60 s.
    Bounded,
    /// Each read within 60 s (a streamed export may take longer in all).
    Streamed,
}

/// For the admin CLI, toward the admin listener.
pub fn admin_cli(exchange: AdminExchange) -> Result<reqwest::Client, reqwest::Error> {
    let builder = builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(60));
    let builder = match exchange {
        AdminExchange::Bounded => builder.timeout(Duration::from_secs(60)),
        AdminExchange::Streamed => builder.read_timeout(Duration::from_secs(60)),
    };
    builder.build()
}

/// A DNS resolver that never resolves: every name a metadata fetch may reach is pinned with
/// `resolve_to_addrs`, so reaching this means a name was not checked.
struct NoResolution;

impl reqwest::dns::Resolve for NoResolution {
    fn resolve(&self, _name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async {
            Err::<reqwest::dns::Addrs, _>(Box::<dyn std::error::Error + Send + Sync>::from(
                "unpinned name",
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_purpose_builds_a_client() {
        let t = Duration::from_secs(5);
        let addrs: [SocketAddr; 1] = ["127.0.0.1:9".parse().unwrap()];
        assert!(github(t).is_ok());
        assert!(backend(t).is_ok());
        assert!(metadata_document(t, Some(("example.com", &addrs))).is_ok());
        assert!(metadata_document(t, None).is_ok());
        assert!(webhook(t, None).is_ok());
        let proxy = Url::parse("http://proxy.internal:3128").unwrap();
        assert!(webhook(t, Some(&proxy)).is_ok());
        assert!(telemetry(Duration::ZERO).is_ok());
        assert!(admin_cli(AdminExchange::Bounded).is_ok());
        assert!(admin_cli(AdminExchange::Streamed).is_ok());
    }

    #[tokio::test]
    async fn a_metadata_client_reaches_only_the_pinned_name_and_resolves_no_other() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        let client =
            metadata_document(Duration::from_secs(2), Some(("pinned.example", &[addr]))).unwrap();
        let port = addr.port();
        let pinned = client
            .get(format!("http://pinned.example:{port}/"))
            .send()
            .await
            .unwrap();
        assert_eq!(pinned.status(), 200);
        // `localhost` resolves to the listener through any system resolver: refused here.
        let unpinned = client.get(format!("http://localhost:{port}/")).send().await;
        assert!(unpinned.is_err(), "{unpinned:?}");
    }
}
