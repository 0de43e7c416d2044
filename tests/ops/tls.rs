//! HTTPS end to end with certificates generated here: discovery and registration over TLS with
//! HSTS, TLS 1.2/1.3 only (a TLS 1.1 hello and plain HTTP get no HTTP answer), and certificate
//! reload — in-process through the function SIGHUP calls, and on the real binary with a real
//! SIGHUP — reaching new connections while connections opened before keep working; and
//! pending handshakes capped per source, so one host cannot lock others out.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mcp_oauth_proxy::app::App;
use mcp_oauth_proxy::clock::{Clock, ManualClock, SystemClock};
use mcp_oauth_proxy::config::{Config, Keys};
use mcp_oauth_proxy::store::SledStore;
use mcp_oauth_proxy::tls::{HandshakeLimits, Tls};
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, sleep};

use crate::support::TestProxy;
use crate::support::binary::{Process, free_port};

/// The HSTS header the proxy sends over HTTPS.
const HSTS: &str = "max-age=63072000; includeSubDomains";

/// A self-signed certificate for `localhost`.
struct TestCert {
    pem: String,
    key: String,
    der: Vec<u8>,
}

fn new_cert() -> TestCert {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    TestCert {
        pem: c.cert.pem(),
        key: c.signing_key.serialize_pem(),
        der: c.cert.der().to_vec(),
    }
}

/// Writes `c` as `cert.pem` / `key.pem` in `dir` (replacing what was there).
fn write_cert(dir: &Path, c: &TestCert) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &c.pem).unwrap();
    std::fs::write(&key, &c.key).unwrap();
    (cert, key)
}

fn roots(trusted: &[&TestCert]) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    for c in trusted {
        roots.add(CertificateDer::from(c.der.clone())).unwrap();
    }
    roots
}

/// An HTTPS client trusting exactly `trusted`, reaching `localhost` at `addr`, that reports
/// the server's certificate.
fn client(addr: SocketAddr, trusted: &[&TestCert]) -> reqwest::Client {
    client_from(addr, trusted, None)
}

/// [`client`], connecting from `source` (another loopback address is another host to the
/// server; Linux routes all of 127/8 to loopback).
#[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
fn client_from(
    addr: SocketAddr,
    trusted: &[&TestCert],
    source: Option<std::net::IpAddr>,
) -> reqwest::Client {
    mcp_oauth_proxy::install_crypto_provider();
    let tls = rustls::ClientConfig::builder()
        .with_root_certificates(roots(trusted))
        .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .tls_info(true)
        .resolve("localhost", addr)
        .local_address(source)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// The certificate the server presented on this response's connection.
fn peer_cert(resp: &reqwest::Response) -> Vec<u8> {
    resp.extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .expect("a TLS connection")
        .to_vec()
}

fn config_toml(port: u16, cert: &Path, key: &Path, store: &str) -> String {
    format!(
        r#"[server]
public_url = "https://localhost:{port}"
listen = "127.0.0.1:{port}"
tls_cert = {cert:?}
tls_key = {key:?}
shutdown_grace_secs = 2
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
[admin]
listen = "127.0.0.1:0"
[store]
path = {store:?}
"#,
        cert = cert.display().to_string(),
        key = key.display().to_string(),
    )
}

/// The proxy serving HTTPS in this process.
struct HttpsProxy {
    addr: SocketAddr,
    base: String,
    tls: Tls,
    dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl HttpsProxy {
    async fn start(cert: &TestCert) -> HttpsProxy {
        HttpsProxy::start_with(cert, HandshakeLimits::default()).await
    }

    async fn start_with(cert: &TestCert, limits: HandshakeLimits) -> HttpsProxy {
        mcp_oauth_proxy::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = write_cert(dir.path(), cert);
        let text = config_toml(
            addr.port(),
            &c,
            &k,
            "/nonexistent-tests-use-a-temporary-store",
        );
        let config = Config::from_toml(&text, &std::collections::HashMap::new()).unwrap();
        let tls = Tls::new(config.tls.as_ref().unwrap()).unwrap();
        let clock = ManualClock::new(SystemClock.now());
        let store = Arc::new(SledStore::temporary(clock.clone()).unwrap());
        let http = config.http();
        let app = App::new(config, Keys::generate().unwrap(), store, clock).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let listener = tls.listener_with(listener, limits);
        tokio::spawn(async move {
            mcp_oauth_proxy::http::serve_tls(listener, app, http, async {
                let _ = rx.await;
            })
            .await
            .unwrap();
        });
        HttpsProxy {
            addr,
            base: format!("https://localhost:{}", addr.port()),
            tls,
            dir,
            _stop: tx,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

#[tokio::test]
async fn https_serves_discovery_and_registration_with_hsts() {
    let cert = new_cert();
    let proxy = HttpsProxy::start(&cert).await;
    let http = client(proxy.addr, &[&cert]);

    let r = http
        .get(proxy.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["strict-transport-security"], HSTS);
    assert_eq!(peer_cert(&r), cert.der);
    let meta: Value = r.json().await.unwrap();
    assert_eq!(meta["issuer"], proxy.base);
    assert_eq!(meta["token_endpoint"], proxy.url("/token"));

    let r = http
        .get(proxy.url("/.well-known/oauth-protected-resource/mcp"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["strict-transport-security"], HSTS);
    let prm: Value = r.json().await.unwrap();
    assert_eq!(prm["resource"], proxy.url("/mcp"));

    let r = http
        .post(proxy.url("/register"))
        .json(&json!({
            "client_name": "TLS agent",
            "redirect_uris": ["https://agent.example/cb"],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(r.headers()["strict-transport-security"], HSTS);
    let reg: Value = r.json().await.unwrap();
    assert!(reg["client_id"].as_str().is_some_and(|s| !s.is_empty()));

    // A client that does not trust the certificate gets no answer at all.
    let stranger = client(proxy.addr, &[&new_cert()]);
    assert!(
        stranger
            .get(proxy.url("/.well-known/oauth-authorization-server"))
            .send()
            .await
            .is_err()
    );
}

#[tokio::test]
async fn hsts_is_not_sent_for_a_plain_http_loopback_public_url() {
    let proxy = TestProxy::start().await;
    let r = crate::support::http()
        .get(proxy.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("strict-transport-security").is_none());
}

/// A TLS 1.1 ClientHello (no supported_versions extension) offering suites the server does
/// support, so only the version can be the reason for a refusal.
fn tls11_client_hello() -> Vec<u8> {
    let mut body = vec![0x03, 0x02]; // client_version TLS 1.1
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // session id
    // ECDHE-ECDSA/RSA-AES128-GCM-SHA256, TLS_AES_128_GCM_SHA256
    body.extend_from_slice(&[0x00, 0x06, 0xc0, 0x2b, 0xc0, 0x2f, 0x13, 0x01]);
    body.extend_from_slice(&[0x01, 0x00]); // compression: null
    // Extensions a TLS 1.2 server needs to get as far as the version check: signature
    // algorithms (ecdsa_secp256r1_sha256), groups (x25519, secp256r1), point formats.
    body.extend_from_slice(&[
        0x00, 0x18, 0x00, 0x0d, 0x00, 0x04, 0x00, 0x02, 0x04, 0x03, 0x00, 0x0a, 0x00, 0x06, 0x00,
        0x04, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,
    ]);
    let mut hs = vec![0x01, 0x00, 0x00, body.len() as u8];
    hs.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01, 0x00, hs.len() as u8];
    record.extend_from_slice(&hs);
    record
}

/// Sends `bytes` on a fresh connection and returns everything the server sends until it
/// closes (or 5 s pass).
async fn exchange_raw(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut got)).await;
    got
}

#[tokio::test]
async fn tls_1_1_and_plain_http_to_the_tls_port_are_refused() {
    let cert = new_cert();
    let proxy = HttpsProxy::start(&cert).await;

    // TLS 1.1: a fatal protocol_version alert, never a ServerHello.
    let got = exchange_raw(proxy.addr, &tls11_client_hello()).await;
    assert!(got.len() >= 7, "an alert record: {got:?}");
    assert_eq!(got[0], 0x15, "alert record, not a handshake: {got:?}");
    assert_eq!((got[5], got[6]), (2, 70), "fatal protocol_version: {got:?}");

    // Plain HTTP: no HTTP response.
    let got = exchange_raw(
        proxy.addr,
        b"GET /.well-known/oauth-authorization-server HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .await;
    assert!(
        !String::from_utf8_lossy(&got).contains("HTTP/1.1"),
        "plain HTTP must not be answered: {got:?}"
    );
    let r = crate::support::http()
        .get(format!(
            "http://127.0.0.1:{}/.well-known/oauth-authorization-server",
            proxy.addr.port()
        ))
        .send()
        .await;
    assert!(r.is_err(), "{r:?}");

    // TLS 1.2 and 1.3 are both served; ALPN offers h2.
    for (version, alpn, expected_alpn) in [
        (
            &rustls::version::TLS12,
            vec![b"http/1.1".to_vec()],
            b"http/1.1".to_vec(),
        ),
        (
            &rustls::version::TLS13,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()],
            b"h2".to_vec(),
        ),
    ] {
        let mut config = rustls::ClientConfig::builder_with_protocol_versions(&[version])
            .with_root_certificates(roots(&[&cert]))
            .with_no_client_auth();
        config.alpn_protocols = alpn;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
        let mut tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let (_, conn) = tls.get_ref();
        assert_eq!(conn.protocol_version(), Some(version.version));
        assert_eq!(conn.alpn_protocol(), Some(expected_alpn.as_slice()));
        if expected_alpn == b"http/1.1" {
            tls.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut got = Vec::new();
            tls.read_to_end(&mut got).await.unwrap();
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(
                text.to_ascii_lowercase()
                    .contains("strict-transport-security: max-age=63072000; includesubdomains"),
                "{text}"
            );
        }
    }
}

#[tokio::test]
async fn reload_serves_the_new_certificate_to_new_connections_and_keeps_open_ones() {
    let (first, second) = (new_cert(), new_cert());
    let proxy = HttpsProxy::start(&first).await;
    let url = proxy.url("/.well-known/oauth-authorization-server");
    // One client keeps its connection open across the reload.
    let open = client(proxy.addr, &[&first, &second]);
    let r = open.get(&url).send().await.unwrap();
    assert_eq!(peer_cert(&r), first.der);
    r.bytes().await.unwrap();

    write_cert(proxy.dir.path(), &second);
    proxy.tls.reload().unwrap();

    let fresh = client(proxy.addr, &[&first, &second])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(fresh.status(), 200);
    assert_eq!(
        peer_cert(&fresh),
        second.der,
        "a new handshake gets the new certificate"
    );
    let again = open.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(
        peer_cert(&again),
        first.der,
        "the connection opened before the reload is still served, with its certificate"
    );

    // A broken pair on disk: the reload fails and the current certificate stays.
    std::fs::write(proxy.dir.path().join("key.pem"), new_cert().key).unwrap();
    let e = proxy.tls.reload().unwrap_err().to_string();
    assert!(e.contains("key.pem"), "{e}");
    let after = client(proxy.addr, &[&first, &second])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(peer_cert(&after), second.der);
}

/// Opens `n` TCP connections from 127.0.0.1 that never send a ClientHello.
async fn idle_connections(addr: SocketAddr, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut idle = Vec::with_capacity(n);
    for _ in 0..n {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    idle
}

/// How many of `conns` the server has closed (EOF or reset within `wait`).
async fn closed(conns: Vec<tokio::net::TcpStream>, wait: Duration) -> usize {
    let reads = conns.into_iter().map(|mut c| async move {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(wait, c.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    });
    futures_util::future::join_all(reads)
        .await
        .into_iter()
        .filter(|c| *c)
        .count()
}

/// One host opening many TCP connections to the TLS port and never handshaking held every
/// handshake slot: the server then closed everyone else's connections. Now one source gets
/// at most `max_pending_per_source` slots (the rest of its connections are closed), and a
/// client from another address is served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_from_one_host_do_not_lock_out_tls_clients_from_another() {
    let cert = new_cert();
    let limits = HandshakeLimits {
        max_pending: 48,
        ..HandshakeLimits::default()
    };
    let per_source = limits.max_pending_per_source;
    let proxy = HttpsProxy::start_with(&cert, limits).await;
    // More idle connections than the global cap, all from 127.0.0.1.
    let idle = idle_connections(proxy.addr, 100).await;
    sleep(Duration::from_millis(200)).await;

    let other = client_from(proxy.addr, &[&cert], Some([127, 0, 0, 2].into()));
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(3),
        other
            .get(proxy.url("/.well-known/oauth-authorization-server"))
            .send(),
    )
    .await
    .expect("served well before the idle handshakes time out")
    .unwrap();
    assert_eq!(r.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(2));

    // The flooding host kept exactly its share of slots; the rest was closed at once.
    assert_eq!(
        closed(idle, Duration::from_millis(1000)).await,
        100 - per_source
    );
}

/// At the global cap the listener stops accepting instead of closing new connections: a
/// client arriving then waits in the backlog and is served as soon as a slot frees (here when
/// the idle handshakes time out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_handshake_cap_new_connections_wait_instead_of_being_closed() {
    let cert = new_cert();
    let proxy = HttpsProxy::start_with(
        &cert,
        HandshakeLimits {
            timeout: Duration::from_secs(1),
            max_pending: 4,
            ..HandshakeLimits::default()
        },
    )
    .await;
    let idle = idle_connections(proxy.addr, 4).await;
    sleep(Duration::from_millis(100)).await;

    let other = client_from(proxy.addr, &[&cert], Some([127, 0, 0, 2].into()));
    let started = Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        other
            .get(proxy.url("/.well-known/oauth-authorization-server"))
            .send(),
    )
    .await
    .expect("served once the idle handshakes timed out")
    .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "it waited for a slot: {:?}",
        started.elapsed()
    );
    // The idle ones were dropped by the handshake timeout.
    assert_eq!(closed(idle, Duration::from_millis(500)).await, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_certificate_of_the_running_binary() {
    let (first, second) = (new_cert(), new_cert());
    let dir = tempfile::tempdir().unwrap();
    let (c, k) = write_cert(dir.path(), &first);
    let port = free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let config = dir.path().join("proxy.toml");
    let store = dir.path().join("store").display().to_string();
    std::fs::write(&config, config_toml(port, &c, &k, &store)).unwrap();
    let mut proxy = Process::start(&config);
    let url = format!("https://localhost:{port}/.well-known/oauth-authorization-server");
    let open = client(addr, &[&first, &second]);
    proxy.wait_ready(&open, &url).await;
    let r = open.get(&url).send().await.unwrap();
    assert_eq!(peer_cert(&r), first.der);
    assert_eq!(r.headers()["strict-transport-security"], HSTS);
    r.bytes().await.unwrap();

    write_cert(dir.path(), &second);
    proxy.signal("HUP");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client(addr, &[&first, &second])
            .get(&url)
            .send()
            .await
            .unwrap();
        if peer_cert(&r) == second.der {
            break;
        }
        assert!(
            Instant::now() < until,
            "new connections still get the old certificate; log:\n{}",
            proxy.log_text()
        );
        sleep(Duration::from_millis(50)).await;
    }
    let again = open.get(&url).send().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(peer_cert(&again), first.der, "the open connection survived");
    assert!(proxy.exited().is_none(), "SIGHUP must not stop the proxy");
    assert!(proxy.log_text().contains("TLS certificate reloaded"));

    // A bad pair on SIGHUP: logged, the current certificate stays.
    std::fs::write(&k, new_cert().key).unwrap();
    proxy.signal("HUP");
    let until = Instant::now() + Duration::from_secs(10);
    while !proxy.log_text().contains("reload failed") {
        assert!(Instant::now() < until, "{}", proxy.log_text());
        sleep(Duration::from_millis(50)).await;
    }
    let r = client(addr, &[&first, &second])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(peer_cert(&r), second.der);

    drop(open);
    proxy.signal("TERM");
    let status = proxy.wait(Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0), "{}", proxy.log_text());
}
