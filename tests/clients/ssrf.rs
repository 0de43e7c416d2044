//! SSRF through client metadata documents: a `client_id` URL whose host is, or resolves to,
//! a loopback, private, link-local or otherwise special-use address is refused before any
//! connection is made. Names resolve through an injected resolver (counting lookups); the
//! loopback targets point at a listener that counts connection attempts.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::doc_server::Tarpit;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_oauth_proxy::clients::fetch::Resolver;
use mcp_oauth_proxy::store::Keyspace;

/// Maps names to fixed addresses and counts lookups.
pub struct MapResolver {
    names: HashMap<String, Vec<SocketAddr>>,
    /// Lookups so far.
    pub lookups: AtomicUsize,
}

impl MapResolver {
    /// A resolver for these `(name, addresses)`.
    pub fn new(entries: &[(&str, &[SocketAddr])]) -> Arc<MapResolver> {
        Arc::new(MapResolver {
            names: entries
                .iter()
                .map(|(n, a)| ((*n).to_owned(), a.to_vec()))
                .collect(),
            lookups: AtomicUsize::new(0),
        })
    }
}

#[async_trait::async_trait]
impl Resolver for MapResolver {
    async fn resolve(&self, host: &str, _port: u16) -> std::io::Result<Vec<SocketAddr>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        self.names
            .get(host)
            .cloned()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, host.to_owned()))
    }
}

async fn refused(proxy: &TestProxy, client_id: &str) -> String {
    let c = Client {
        id: client_id.to_owned(),
        secret: None,
        redirect_uri: "https://app.example/cb".to_owned(),
    };
    let page = Browser::new()
        .navigate(&c.authorize_url(proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 400, "{client_id}: {}", page.body);
    assert!(page.location().is_none(), "{client_id}");
    let t = c.redeem(proxy, "mcpac_x", &Pkce::new(), &[]).await;
    assert_eq!(
        (t.status, t.error()),
        (401, "invalid_client"),
        "{client_id}"
    );
    page.body
}

#[tokio::test]
async fn names_resolving_to_special_use_addresses_are_refused_without_connecting() {
    let pit = Tarpit::start().await;
    let p = pit.port;
    let addr = |s: &str| -> SocketAddr { s.parse().unwrap() };
    let loop4 = [addr(&format!("127.0.0.1:{p}"))];
    let loop6 = [addr(&format!("[::1]:{p}"))];
    let mapped = [addr(&format!("[::ffff:127.0.0.1]:{p}"))];
    let private = [addr("10.1.2.3:443")];
    let cloud = [addr("169.254.169.254:443")];
    let mixed = [addr("8.8.8.8:443"), addr(&format!("127.0.0.1:{p}"))];
    let resolver = MapResolver::new(&[
        ("loopback.attacker.test", &loop4),
        ("v6loopback.attacker.test", &loop6),
        ("mapped.attacker.test", &mapped),
        ("private.attacker.test", &private),
        ("metadata.attacker.test", &cloud),
        ("rebind.attacker.test", &mixed),
    ]);
    let proxy = TestProxy::start_with(Options {
        client_resolver: Some(resolver.clone()),
        ..Options::default()
    })
    .await;
    let names = [
        "loopback.attacker.test",
        "v6loopback.attacker.test",
        "mapped.attacker.test",
        "private.attacker.test",
        "metadata.attacker.test",
        "rebind.attacker.test",
    ];
    for name in names {
        // A fresh minute each: the per-client-IP fetch budget is not what is tested here.
        proxy.clock.advance(60);
        let body = refused(&proxy, &format!("https://{name}:{p}/client.json")).await;
        assert!(
            body.contains("special-use network address"),
            "{name}: {body}"
        );
    }
    // Each name was resolved by the proxy itself (once at /authorize, once at /token) and
    // nothing was connected to.
    assert_eq!(resolver.lookups.load(Ordering::SeqCst), names.len() * 2);
    assert_eq!(pit.connections(), 0);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
}

#[tokio::test]
async fn numeric_host_tricks_are_refused_before_resolution_or_connection() {
    let pit = Tarpit::start().await;
    let p = pit.port;
    let resolver = MapResolver::new(&[]);
    let proxy = TestProxy::start_with(Options {
        client_resolver: Some(resolver.clone()),
        ..Options::default()
    })
    .await;
    // Forms the URL parser would rewrite to 127.0.0.1 (decimal, hex, short, octal, dotted
    // v4 inside v6) are not in normalized form, so they are refused as malformed.
    for trick in [
        format!("https://2130706433:{p}/client.json"),
        format!("https://0x7f.1:{p}/client.json"),
        format!("https://127.1:{p}/client.json"),
        format!("https://0177.0.0.1:{p}/client.json"),
        format!("https://[::ffff:127.0.0.1]:{p}/client.json"),
    ] {
        let body = refused(&proxy, &trick).await;
        assert!(body.contains("not in normalized form"), "{trick}: {body}");
    }
    // Normalized address literals are judged by the address policy.
    for literal in [
        format!("https://127.0.0.1:{p}/client.json"),
        format!("https://[::1]:{p}/client.json"),
        format!("https://[::ffff:7f00:1]:{p}/client.json"),
        "https://169.254.169.254/latest/meta-data".to_owned(),
        "https://10.0.0.1/client.json".to_owned(),
    ] {
        proxy.clock.advance(60);
        let body = refused(&proxy, &literal).await;
        assert!(
            body.contains("special-use network address"),
            "{literal}: {body}"
        );
    }
    assert_eq!(
        resolver.lookups.load(Ordering::SeqCst),
        0,
        "literals are never resolved"
    );
    assert_eq!(pit.connections(), 0);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
}
