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
//!
//! The backend is the one hot purpose (every `/mcp` request): a plain `http://` backend at an
//! IP literal or `localhost` that no proxy from the environment applies to is reached through
//! hyper's own pooled HTTP/1.1 client
//! ([`Backend`]; keep-alive pool of up to [`BACKEND_POOL_IDLE`] idle connections, closed after
//! 90 s idle, as reqwest's), without reqwest's per-request URL, header and body conversions. An
//! `https://` backend, or one an environment proxy applies to, goes through reqwest as before,
//! so TLS and proxy policy are reqwest's in one place. `clippy.toml` bans building a hyper
//! client elsewhere too.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
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

/// Idle keep-alive connections kept toward the backend: enough for every connection a busy
/// proxy has in flight to find one ready (a pool that is too small reconnects under load).
pub const BACKEND_POOL_IDLE: usize = 1024;

/// A backend answer's body, streamed as it arrives; dropping it drops the backend request.
pub type BackendBody = Pin<Box<dyn Stream<Item = Result<Bytes, BackendError>> + Send>>;

/// A backend answer: its status and headers, the body still streaming.
pub struct BackendResponse {
    /// Status.
    pub status: StatusCode,
    /// Headers, unfiltered (the gateway filters them).
    pub headers: HeaderMap,
    /// Body.
    pub body: BackendBody,
}

/// Why the backend exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// No connection could be made.
    #[error("connect")]
    Connect,
    /// The request failed once connected.
    #[error("request")]
    Request,
    /// The body failed mid-stream.
    #[error("body")]
    Body,
}

/// The client toward the backend MCP server, bound to its URL: no overall timeout (streams may
/// last hours), connect timeout, `TCP_NODELAY`, no redirects, no compression, our user agent.
#[derive(Clone)]
pub struct Backend {
    url: Url,
    via: Via,
}

/// hyper's client and the backend URL it was built for, parsed once.
#[derive(Clone)]
struct Direct {
    client: HyperClient<HttpConnector, Full<Bytes>>,
    uri: http::Uri,
}

#[derive(Clone)]
enum Via {
    /// hyper's pooled HTTP/1.1 client: a plain `http://` backend with no proxy.
    Hyper(Box<Direct>),
    /// reqwest: TLS or a proxy from the environment.
    Reqwest(reqwest::Client),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let via = match self.via {
            Via::Hyper(_) => "hyper",
            Via::Reqwest(_) => "reqwest",
        };
        f.debug_struct("Backend")
            .field("via", &via)
            .finish_non_exhaustive()
    }
}

/// Toward the backend MCP server at `url` (see [`Backend`] and the table above).
#[allow(clippy::disallowed_methods)] // this module is the sanctioned builder of outbound clients
pub fn backend(url: &Url, connect_timeout: Duration) -> Result<Backend, String> {
    let uri: http::Uri = url.as_str().parse().map_err(|_| "backend URL".to_owned())?;
    let proxied = hyper_util::client::proxy::matcher::Matcher::from_system()
        .intercept(&uri)
        .is_some();
    // hyper's connect timeout does not cover the name lookup (reqwest's does): only an IP
    // literal, or `localhost`, which never waits on a resolver, takes the hyper path, so a
    // hanging resolver cannot stall `/mcp` without a bound.
    let no_lookup = matches!(url.host(), Some(url::Host::Ipv4(_) | url::Host::Ipv6(_)))
        || url.host_str() == Some("localhost");
    let via = if url.scheme() == "http" && !proxied && no_lookup {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        connector.enforce_http(true);
        let client = HyperClient::builder(hyper_util::rt::TokioExecutor::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(BACKEND_POOL_IDLE)
            .build(connector);
        Via::Hyper(Box::new(Direct { client, uri }))
    } else {
        let client = builder()
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| e.without_url().to_string())?;
        Via::Reqwest(client)
    };
    Ok(Backend {
        url: url.clone(),
        via,
    })
}

impl Backend {
    /// Whether requests go through hyper's own pool (a plain, unproxied `http://` backend).
    pub fn is_direct(&self) -> bool {
        matches!(self.via, Via::Hyper(_))
    }

    /// Sends one request to the backend URL; the answer's body streams.
    pub async fn send(
        &self,
        method: Method,
        mut headers: HeaderMap,
        body: Bytes,
    ) -> Result<BackendResponse, BackendError> {
        match &self.via {
            Via::Hyper(direct) => {
                let Direct { client, uri } = &**direct;
                headers.insert(
                    http::header::USER_AGENT,
                    HeaderValue::from_static(USER_AGENT),
                );
                let mut req = http::Request::new(Full::new(body));
                *req.method_mut() = method;
                *req.uri_mut() = uri.clone();
                *req.headers_mut() = headers;
                let resp = client.request(req).await.map_err(|e| {
                    if e.is_connect() {
                        BackendError::Connect
                    } else {
                        BackendError::Request
                    }
                })?;
                let (parts, body) = resp.into_parts();
                Ok(BackendResponse {
                    status: parts.status,
                    headers: parts.headers,
                    body: Box::pin(body.into_data_stream().map_err(|_| BackendError::Body)),
                })
            }
            Via::Reqwest(client) => {
                let resp = client
                    .request(method, self.url.clone())
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| {
                        if e.is_connect() {
                            BackendError::Connect
                        } else {
                            BackendError::Request
                        }
                    })?;
                let mut resp = resp;
                let status = resp.status();
                let headers = std::mem::take(resp.headers_mut());
                Ok(BackendResponse {
                    status,
                    headers,
                    body: Box::pin(
                        resp.bytes_stream()
                            .map(|r| r.map_err(|_| BackendError::Body)),
                    ),
                })
            }
        }
    }
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
        let plain = Url::parse("http://127.0.0.1:9/mcp").unwrap();
        assert!(backend(&plain, t).is_ok());
        let tls = Url::parse("https://backend.internal/mcp").unwrap();
        assert!(backend(&tls, t).is_ok_and(|b| !b.is_direct()));
        // A name to look up goes through reqwest, whose connect timeout covers the lookup.
        let named = Url::parse("http://backend.internal:8080/mcp").unwrap();
        assert!(backend(&named, t).is_ok_and(|b| !b.is_direct()));
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
