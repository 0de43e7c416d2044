//! HTTP/2 that cannot hold the proxy (issue 31, H2 and M1): raw HTTP/2 from the `h2` crate
//! against the real binary, with a zero (or tiny) initial window, streams held open, bodies
//! left unfinished. RSS figures are the proxy process's `VmRSS` from `/proc/<pid>/status`
//! (`Edge::rss_kib`), printed by each test.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, timeout};

use super::support::{Edge, connect_from, rss_kib, start};
use crate::support::mcp::Mcp;

/// `response_stall_timeout_secs` in these tests.
const STALL: Duration = Duration::from_secs(2);
/// The watchdog's wait between GOAWAY and dropping a stalled connection (`FORCE_CLOSE_AFTER`).
const FORCE: Duration = Duration::from_secs(1);

/// An HTTP/2 connection (prior knowledge) from `from` whose streams start with `window`
/// bytes of receive window; the connection's task ends when the proxy closes it.
async fn h2_connect(
    from: Ipv4Addr,
    to: SocketAddr,
    window: u32,
) -> (SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let tcp = connect_from(from, to).await;
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(window)
        .max_concurrent_reset_streams(1000)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("HTTP/2 handshake");
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    (client, task)
}

fn request(method: &str, path: &str, headers: &[(&str, String)]) -> http::Request<()> {
    let mut r = http::Request::builder()
        .method(method)
        .uri(format!("http://127.0.0.1{path}"));
    for (k, v) in headers {
        r = r.header(*k, v);
    }
    r.body(()).unwrap()
}

/// Samples the proxy's RSS every 50 ms into `peak` until aborted.
fn sample_peak(edge: &Edge, peak: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    let pid = edge.proxy.id();
    tokio::spawn(async move {
        loop {
            peak.fetch_max(rss_kib(pid), Ordering::SeqCst);
            sleep(Duration::from_millis(50)).await;
        }
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// A stranger opens an HTTP/2 connection announcing `SETTINGS_INITIAL_WINDOW_SIZE = 0` and
/// sends 20 unauthenticated GETs: every answer's head arrives (HEADERS are not flow
/// controlled), no body byte can. Nothing on the connection moves, so it is closed (GOAWAY,
/// then dropped) once the stall timeout has passed, and not before; no stream ever yields a
/// body byte. A second connection whose client reads one stream and leaves another shut
/// keeps serving: only the shut stream is reset (`RST_STREAM(CANCEL)`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_zero_window_connection_is_closed_within_the_deadline() {
    let mut edge = start(&format!(
        "response_stall_timeout_secs = {}",
        STALL.as_secs()
    ))
    .await;
    let baseline = edge.rss_kib();
    let (mut client, conn) = h2_connect(Ipv4Addr::new(127, 0, 0, 2), edge.addr, 0).await;
    let mut pending = Vec::new();
    for _ in 0..20 {
        client = client.ready().await.unwrap();
        let (resp, _) = client
            .send_request(
                request("GET", "/.well-known/oauth-authorization-server", &[]),
                true,
            )
            .unwrap();
        pending.push(resp);
    }
    let mut bodies = Vec::new();
    for resp in pending {
        let resp = timeout(Duration::from_secs(10), resp)
            .await
            .expect("head")
            .unwrap();
        assert_eq!(resp.status(), 200);
        bodies.push(resp.into_body());
    }
    let waiting = Instant::now();
    timeout(STALL + FORCE + Duration::from_secs(6), conn)
        .await
        .expect("the zero-window connection was never closed")
        .unwrap();
    let held = waiting.elapsed();
    let after = edge.rss_kib();
    for mut body in bodies {
        let end = body.data().await;
        assert!(
            !matches!(end, Some(Ok(_))),
            "a body byte got through a shut window: {end:?}"
        );
    }
    eprintln!(
        "zero-window HTTP/2 connection with 20 answers waiting: closed {held:?} after its answers' heads (stall timeout {STALL:?}); proxy RSS {:.1} MiB before, {:.1} MiB after",
        mib(baseline),
        mib(after)
    );
    assert!(
        held >= STALL - Duration::from_millis(300),
        "closed after {held:?}, before the stall timeout"
    );
    assert!(
        held < STALL + FORCE + Duration::from_secs(3),
        "held for {held:?}"
    );

    // One connection, a tiny window: the client reads one stream's answer a little at a time
    // and never the other's. The shut one is reset; the read one completes; the connection
    // then serves another request.
    let (mut client, conn) = h2_connect(Ipv4Addr::new(127, 0, 0, 3), edge.addr, 100).await;
    client = client.ready().await.unwrap();
    let (shut, _) = client
        .send_request(
            request("GET", "/.well-known/oauth-authorization-server", &[]),
            true,
        )
        .unwrap();
    let mut shut = shut.await.unwrap().into_body();
    let started = Instant::now();
    // What its window let through, never given back.
    let first = shut.data().await.unwrap().unwrap();
    assert!(
        first.len() <= 100,
        "{} bytes through a 100-byte window",
        first.len()
    );
    let read_slowly = |mut client: SendRequest<Bytes>| async move {
        client = client.ready().await.unwrap();
        let (resp, _) = client
            .send_request(
                request("GET", "/.well-known/oauth-protected-resource", &[]),
                true,
            )
            .unwrap();
        let mut body = resp.await.unwrap().into_body();
        let mut got = 0;
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("the stream being read is not reset");
            got += chunk.len();
            body.flow_control().release_capacity(chunk.len()).unwrap();
            // A slow reader, but one that reads.
            sleep(Duration::from_millis(5)).await;
        }
        (client, got)
    };
    // Keep reading answers on the connection until the shut stream has been reset.
    let mut answers = 0;
    let reset = loop {
        let (c, got) = read_slowly(client).await;
        client = c;
        assert!(got > 100, "a whole answer: {got} bytes");
        answers += 1;
        if let Some(r) = futures_util::FutureExt::now_or_never(shut.data()) {
            break r;
        }
        assert!(
            started.elapsed() < STALL + Duration::from_secs(8),
            "the shut stream was never reset"
        );
    };
    let reset_after = started.elapsed();
    match reset {
        Some(Err(e)) => assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}"),
        other => panic!("the shut stream ended with {other:?}, not a reset"),
    }
    assert!(
        reset_after >= STALL - Duration::from_millis(300),
        "reset after {reset_after:?}"
    );
    let (_, got) = read_slowly(client).await;
    assert!(got > 100, "the connection still serves");
    assert!(!conn.is_finished(), "the connection that moved stays open");
    eprintln!(
        "a shut stream beside a read one: reset (CANCEL) after {reset_after:?}, {answers} answers read on the same connection meanwhile"
    );
    edge.real_client_completes_a_flow().await;
    edge.assert_healthy();
}

/// The report's attack: `max_connections = 64`, and four addresses hold 64 zero-window HTTP/2
/// connections with ten GETs each, reconnecting as soon as one is closed, for 15 s. Another
/// source's requests are served throughout (each within the stall timeout plus the force
/// close and some room), and a real client completes a whole flow during the flood.
/// Before, the proxy answered nobody else for as long as the attack lasted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_zero_window_flood_does_not_deny_service_to_another_source() {
    const PER_SOURCE: usize = 16;
    /// Ten, not the 100 a connection may carry: at 100 the attack is a request flood that
    /// saturates this test machine's two cores (attacker included), which measures the CPU,
    /// not whether the proxy can be held. Run at 10 and at 100, the printed RSS per waiting
    /// answer (17.5 and 5.0 KiB on the debug binary) gives the per-stream and per-connection
    /// cost SECURITY.md states (about 4 KiB and 140 KiB).
    const STREAMS: usize = 10;
    const ATTACK: Duration = Duration::from_secs(15);
    let mut edge = start(&format!(
        "max_connections = 64\nmax_connections_per_source = {PER_SOURCE}\nresponse_stall_timeout_secs = {}",
        STALL.as_secs()
    ))
    .await;
    let baseline = edge.rss_kib();
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = sample_peak(&edge, peak.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let cut = Arc::new(AtomicUsize::new(0));
    let mut attackers = JoinSet::new();
    for i in 0..4 * PER_SOURCE {
        let from = Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(i / PER_SOURCE).unwrap());
        let (to, stop, cut) = (edge.addr, stop.clone(), cut.clone());
        attackers.spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let Ok(Ok((mut client, conn))) = timeout(
                    Duration::from_secs(20),
                    h2::client::Builder::new()
                        .initial_window_size(0)
                        .handshake::<_, Bytes>(connect_from(from, to).await),
                )
                .await
                else {
                    continue;
                };
                let conn = tokio::spawn(async move {
                    let _ = conn.await;
                });
                let mut streams = Vec::new();
                for _ in 0..STREAMS {
                    let Ok(ready) = client.ready().await else {
                        break;
                    };
                    client = ready;
                    match client.send_request(
                        request("GET", "/.well-known/oauth-authorization-server", &[]),
                        true,
                    ) {
                        Ok((resp, _)) => streams.push(resp),
                        Err(_) => break,
                    }
                }
                let _ = conn.await;
                drop(streams);
                cut.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    // The attack is in place before the other source starts.
    sleep(Duration::from_millis(500)).await;
    #[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST))
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < ATTACK {
        let t = Instant::now();
        let r = other
            .get(format!("http://{}/healthz", edge.addr))
            .send()
            .await
            .expect("another source is served during the flood");
        assert_eq!(r.status(), 200);
        latencies.push(t.elapsed());
        sleep(Duration::from_millis(300)).await;
    }
    let flow = Instant::now();
    edge.real_client_completes_a_flow().await;
    let flow_took = flow.elapsed();
    stop.store(true, Ordering::SeqCst);
    let cut_during = cut.load(Ordering::SeqCst);
    sampling.abort();
    latencies.sort();
    let worst = *latencies.last().unwrap();
    let median = latencies[latencies.len() / 2];
    eprintln!(
        "64 zero-window HTTP/2 connections from 4 addresses with {STREAMS} answers waiting each, max_connections = 64, for {ATTACK:?}: {cut_during} attacker connections ended (closed by the proxy, or over the per-source cap); another source got {} answers, median {median:?}, worst {worst:?}; a real client's whole flow took {flow_took:?}; proxy RSS {:.1} MiB before, peak {:.1} MiB ({:.1} KiB per waiting answer at most)",
        latencies.len(),
        mib(baseline),
        mib(peak.load(Ordering::SeqCst)),
        (peak.load(Ordering::SeqCst) - baseline) as f64 / (64 * STREAMS) as f64
    );
    assert!(
        cut_during >= 64,
        "the proxy closed {cut_during} attacker connections"
    );
    assert!(
        worst < STALL + FORCE + Duration::from_secs(4),
        "another source waited {worst:?}"
    );
    attackers.abort_all();
    edge.assert_healthy();
}

/// A stranger from one address opens 10 HTTP/2 connections with 100 streams each, every
/// stream a `POST /token` announcing a 64 KiB form and sending all but 1 KiB of it (the
/// report's M1: 36 → 135 MB). The source may hold 16 MiB of bodies: about 260 of the streams are
/// taken and answered 400 at the form deadline (20 s here), the other 744 are refused at once with
/// `REFUSED_STREAM`; the proxy's RSS stays within a bound far below the flood's 64 MiB of
/// bodies, and another address's `/token` request is answered normally meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_held_bodies_are_bounded_per_source() {
    const CONNS: usize = 10;
    const STREAMS: usize = 100;
    const ANNOUNCED: usize = 64 * 1024;
    const SENT: usize = ANNOUNCED - 1024;
    /// Long enough that every stream is open before the first is answered (checked below), so
    /// that the streams taken are the ones the budget held at once.
    const FORM_DEADLINE: Duration = Duration::from_secs(20);
    /// `max_body_bytes_per_source` (the default) over the bytes each stream sends: bodies are
    /// charged as they arrive.
    const TAKEN: usize = 16 * 1024 * 1024 / SENT;
    let mut edge = start(&format!(
        "form_body_read_timeout_secs = {}",
        FORM_DEADLINE.as_secs()
    ))
    .await;
    // Warm up: one real flow, so the baseline is a process that has served.
    edge.real_client_completes_a_flow().await;
    sleep(Duration::from_millis(500)).await;
    let baseline = edge.rss_kib();
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = sample_peak(&edge, peak.clone());
    let form = Bytes::from(vec![b'a'; SENT]);
    let mut outcomes = JoinSet::new();
    let mut conns = Vec::new();
    let opened = Instant::now();
    for _ in 0..CONNS {
        let (mut client, conn) = h2_connect(Ipv4Addr::new(127, 0, 0, 2), edge.addr, 65_535).await;
        conns.push(conn);
        for _ in 0..STREAMS {
            client = client.ready().await.unwrap();
            let (resp, mut send) = client
                .send_request(
                    request(
                        "POST",
                        "/token",
                        &[
                            (
                                "content-type",
                                "application/x-www-form-urlencoded".to_owned(),
                            ),
                            ("content-length", ANNOUNCED.to_string()),
                        ],
                    ),
                    false,
                )
                .unwrap();
            let _ = send.send_data(form.clone(), false);
            outcomes.spawn(async move {
                let r = timeout(Duration::from_secs(60), resp).await;
                // The stream stays unfinished until the answer is in.
                drop(send);
                match r {
                    Ok(Ok(resp)) => Ok((resp.status().as_u16(), opened.elapsed())),
                    Ok(Err(e)) => Err(e.reason()),
                    Err(_) => Err(None),
                }
            });
        }
    }
    let all_open = opened.elapsed();
    // While the bodies are held: another address's /token request is answered normally.
    sleep(Duration::from_secs(2)).await;
    let while_held = edge.rss_kib();
    #[allow(clippy::disallowed_methods)] // the test's client
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3)))
        .build()
        .unwrap();
    let r = other
        .post(format!("http://{}/token", edge.addr))
        .form(&[("grant_type", "authorization_code"), ("code", "nope")])
        .send()
        .await
        .unwrap();
    let other_status = r.status().as_u16();
    let (mut taken, mut refused, mut statuses) = (0, 0, Vec::new());
    let mut answered_after = Duration::ZERO;
    let mut first_answer = Duration::MAX;
    while let Some(o) = outcomes.join_next().await {
        match o.unwrap() {
            Ok((status, after)) => {
                taken += 1;
                statuses.push(status);
                answered_after = answered_after.max(after);
                first_answer = first_answer.min(after);
            }
            Err(Some(h2::Reason::REFUSED_STREAM)) => refused += 1,
            Err(other) => panic!("a stream ended with {other:?}"),
        }
    }
    sleep(Duration::from_secs(1)).await;
    sampling.abort();
    let peak = peak.load(Ordering::SeqCst);
    let after = edge.rss_kib();
    eprintln!(
        "{} unfinished 64 KiB /token bodies over {CONNS} HTTP/2 connections from one address (all open after {all_open:?}): {taken} taken (answered from {first_answer:?} to {answered_after:?}), {refused} refused with REFUSED_STREAM; proxy RSS baseline {:.1} MiB, while held {:.1} MiB, peak {:.1} MiB, after {:.1} MiB",
        CONNS * STREAMS,
        mib(baseline),
        mib(while_held),
        mib(peak),
        mib(after)
    );
    assert!(
        other_status == 400 || other_status == 401,
        "another address's /token request got {other_status}"
    );
    assert_eq!(taken + refused, CONNS * STREAMS);
    assert!(
        all_open < first_answer,
        "opening the streams took {all_open:?}, past the first answer ({first_answer:?}): the count below would not be of bodies held at once"
    );
    assert!(
        first_answer >= FORM_DEADLINE - Duration::from_millis(500),
        "a held form was answered after {first_answer:?}, before its deadline"
    );
    assert!(
        (1..=TAKEN).contains(&taken),
        "{taken} bodies taken; the source's budget holds {TAKEN}"
    );
    assert!(
        statuses.iter().all(|s| *s == 400),
        "an unfinished form is a bad request: {statuses:?}"
    );
    // The bodies the budget lets in (16 MiB) plus HTTP/2's receive windows and per-stream
    // state; the flood carried 63 MiB of bodies.
    assert!(
        peak < baseline + 40 * 1024,
        "RSS grew from {baseline} KiB to {peak} KiB"
    );
    edge.real_client_completes_a_flow().await;
    drop(conns);
    edge.assert_healthy();
}

/// One access token, four addresses, one HTTP/2 connection each, 25 streams each: 100
/// `POST /mcp` announcing 4 000 000 bytes and sending all but 100 KB (the report's M1:
/// 30 → 422 MB on one connection). The token may hold 16 MiB of bodies: four bodies are
/// taken (and answered 408 at the body deadline), the other 96 requests get 429 before a
/// byte of their body is read; the proxy's RSS stays far below the flood's 390 MB, and
/// another person's tool call goes through meanwhile. The per-source budget is raised here so
/// that the token's is the one that binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_held_mcp_bodies_are_bounded_per_token() {
    const SOURCES: u8 = 4;
    const STREAMS: usize = 25;
    const ANNOUNCED: usize = 4_000_000;
    const SENT: usize = ANNOUNCED - 100_000;
    /// `mcp_max_body_bytes_per_token` (the default) over the announced length.
    const TAKEN: usize = 16 * 1024 * 1024 / ANNOUNCED;
    let mut edge = start("body_read_timeout_secs = 5\nmax_body_bytes_per_source = 268435456").await;
    let mut alice = Mcp::for_user(&edge.helper, "alice").await;
    alice.initialize(false).await;
    let mut bob = Mcp::for_user(&edge.helper, "bob").await;
    bob.initialize(false).await;
    edge.real_client_calls_a_tool(&bob).await;
    sleep(Duration::from_millis(500)).await;
    let baseline = edge.rss_kib();
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = sample_peak(&edge, peak.clone());
    let body = Bytes::from(vec![b' '; SENT]);
    let mut outcomes = JoinSet::new();
    let mut conns = Vec::new();
    for s in 0..SOURCES {
        let (mut client, conn) =
            h2_connect(Ipv4Addr::new(127, 0, 0, 2 + s), edge.addr, 65_535).await;
        conns.push(conn);
        for _ in 0..STREAMS {
            client = client.ready().await.unwrap();
            let (resp, mut send) = client
                .send_request(
                    request(
                        "POST",
                        "/mcp",
                        &[
                            ("authorization", format!("Bearer {}", alice.token)),
                            ("content-type", "application/json".to_owned()),
                            ("accept", "application/json, text/event-stream".to_owned()),
                            ("content-length", ANNOUNCED.to_string()),
                        ],
                    ),
                    false,
                )
                .unwrap();
            let _ = send.send_data(body.clone(), false);
            outcomes.spawn(async move {
                let r = timeout(Duration::from_secs(60), resp).await;
                drop(send);
                match r {
                    Ok(Ok(resp)) => Ok(resp.status().as_u16()),
                    Ok(Err(e)) => Err(e.reason()),
                    Err(_) => Err(None),
                }
            });
        }
    }
    sleep(Duration::from_secs(2)).await;
    let while_held = edge.rss_kib();
    // Another person is served while alice's bodies are held.
    edge.real_client_calls_a_tool(&bob).await;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    while let Some(o) = outcomes.join_next().await {
        match o.unwrap() {
            Ok(status) => *statuses.entry(status).or_default() += 1,
            Err(reason) => panic!("a stream ended with {reason:?}"),
        }
    }
    sleep(Duration::from_secs(1)).await;
    sampling.abort();
    let peak = peak.load(Ordering::SeqCst);
    let after = edge.rss_kib();
    eprintln!(
        "{} unfinished 4 MB /mcp bodies with one token from {SOURCES} addresses over HTTP/2: answers {statuses:?}; proxy RSS baseline {:.1} MiB, while held {:.1} MiB, peak {:.1} MiB, after {:.1} MiB",
        usize::from(SOURCES) * STREAMS,
        mib(baseline),
        mib(while_held),
        mib(peak),
        mib(after)
    );
    let taken = statuses.get(&408).copied().unwrap_or(0);
    let limited = statuses.get(&429).copied().unwrap_or(0);
    assert_eq!(
        taken + limited,
        usize::from(SOURCES) * STREAMS,
        "{statuses:?}"
    );
    assert!(
        (1..=TAKEN).contains(&taken),
        "{taken} bodies taken; the token's budget holds {TAKEN}"
    );
    // Four 4 MB bodies plus HTTP/2 receive windows (1 MiB per connection); the flood carried
    // 390 MB.
    assert!(
        peak < baseline + 64 * 1024,
        "RSS grew from {baseline} KiB to {peak} KiB"
    );
    // The token works again once its bodies are gone.
    edge.real_client_calls_a_tool(&alice).await;
    drop(conns);
    edge.assert_healthy();
}

/// The same attack over TLS (ALPN `h2`), against the listener `serve` builds for
/// `tls_cert`/`tls_key` (in this process: the TLS listener and the accept loop are the
/// binary's): the zero-window connection is closed within the stall timeout, and a client
/// over TLS is served meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_zero_window_connection_over_tls_is_closed_within_the_deadline() {
    use mcp_oauth_proxy::app::App;
    use mcp_oauth_proxy::clock::{Clock, ManualClock, SystemClock};
    use mcp_oauth_proxy::config::{Config, Keys};
    use mcp_oauth_proxy::store::SledStore;
    use mcp_oauth_proxy::tls::{HandshakeLimits, Tls};
    use rustls::pki_types::{CertificateDer, ServerName};

    mcp_oauth_proxy::install_crypto_provider();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.signing_key.serialize_pem()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let text = format!(
        r#"[server]
public_url = "https://localhost:{port}"
listen = "127.0.0.1:{port}"
tls_cert = {cert:?}
tls_key = {key:?}
response_stall_timeout_secs = {stall}
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
[admin]
listen = "127.0.0.1:0"
[store]
path = "/nonexistent-tests-use-a-temporary-store"
"#,
        port = addr.port(),
        cert = cert_path.display().to_string(),
        key = key_path.display().to_string(),
        stall = STALL.as_secs(),
    );
    let config = Config::from_toml(&text, &std::collections::HashMap::new()).unwrap();
    let tls = Tls::new(config.tls.as_ref().unwrap()).unwrap();
    let clock = ManualClock::new(SystemClock.now());
    let store = Arc::new(SledStore::temporary(clock.clone()).unwrap());
    let http = config.http();
    let app = App::new(config, Keys::generate().unwrap(), store, clock).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listener = tls.listener_with(listener, HandshakeLimits::default());
    tokio::spawn(async move {
        mcp_oauth_proxy::http::serve_tls(listener, app, http, async {
            let _ = stopped.await;
        })
        .await
        .unwrap();
    });

    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(cert.cert.der().to_vec()))
        .unwrap();
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = connect_from(Ipv4Addr::new(127, 0, 0, 2), addr).await;
    let stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut client, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(stream)
        .await
        .unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut bodies = Vec::new();
    for _ in 0..20 {
        client = client.ready().await.unwrap();
        let (resp, _) = client
            .send_request(
                request("GET", "/.well-known/oauth-authorization-server", &[]),
                true,
            )
            .unwrap();
        let resp = timeout(Duration::from_secs(10), resp)
            .await
            .expect("head")
            .unwrap();
        assert_eq!(resp.status(), 200);
        bodies.push(resp.into_body());
    }
    let waiting = Instant::now();

    // Another client over TLS is served while the zero-window one waits.
    #[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
    let other = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_der(cert.cert.der()).unwrap())
        .resolve("localhost", addr)
        .no_proxy()
        .build()
        .unwrap();
    let r = other
        .get(format!("https://localhost:{}/healthz", addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    timeout(STALL + FORCE + Duration::from_secs(6), conn)
        .await
        .expect("the zero-window TLS connection was never closed")
        .unwrap();
    let held = waiting.elapsed();
    for mut body in bodies {
        let end = body.data().await;
        assert!(
            !matches!(end, Some(Ok(_))),
            "a body byte got through a shut window: {end:?}"
        );
    }
    eprintln!(
        "zero-window HTTP/2 connection over TLS with 20 answers waiting: closed {held:?} after its answers' heads (stall timeout {STALL:?})"
    );
    assert!(
        held >= STALL - Duration::from_millis(300),
        "closed after {held:?}, before the stall timeout"
    );
    assert!(
        held < STALL + FORCE + Duration::from_secs(3),
        "held for {held:?}"
    );
    drop(stop);
}

/// The review of 2026-12-04 (M1's sequel): 17 addresses, each with 3 HTTP/2 connections of
/// 100 `POST /token` streams announcing 64 KiB and sending nothing, spent the global body
/// budget, because bodies were charged by their announced length: every other client's
/// `/token` and `/mcp` got 503 at almost no cost to the sender. Here, four addresses announce
/// 50 MiB against a 4 MiB budget without sending a byte: another address's `/token` request
/// and a new client's whole flow go through meanwhile. Then four more addresses send real
/// bytes and leave their bodies unfinished, more than strangers may hold: they get
/// `REFUSED_STREAM` once the strangers' half is spent, and an authenticated tool call still
/// finds the half kept for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn h2_announced_bodies_hold_nothing_and_strangers_cannot_spend_the_authenticated_half() {
    const ANNOUNCED: usize = 64 * 1024;
    let mut edge = start(
        "max_body_bytes = 4194304\nmax_body_bytes_per_source = 4194304\nmcp_max_body_bytes_per_token = 4194304\nform_body_read_timeout_secs = 20",
    )
    .await;
    let mut mcp = Mcp::for_user(&edge.helper, "bob").await;
    mcp.initialize(false).await;

    // Streams of `POST /token` from `from`, announcing 64 KiB and sending `send` bytes each.
    async fn flood(
        edge: &Edge,
        from: Ipv4Addr,
        conns: usize,
        streams: usize,
        send: usize,
        outcomes: &mut JoinSet<Result<u16, Option<h2::Reason>>>,
        keep: &mut Vec<tokio::task::JoinHandle<()>>,
    ) {
        let data = Bytes::from(vec![b'a'; send]);
        for _ in 0..conns {
            let (mut client, conn) = h2_connect(from, edge.addr, 65_535).await;
            keep.push(conn);
            for _ in 0..streams {
                client = client.ready().await.unwrap();
                let (resp, mut body) = client
                    .send_request(
                        request(
                            "POST",
                            "/token",
                            &[
                                (
                                    "content-type",
                                    "application/x-www-form-urlencoded".to_owned(),
                                ),
                                ("content-length", ANNOUNCED.to_string()),
                            ],
                        ),
                        false,
                    )
                    .unwrap();
                if send > 0 {
                    let _ = body.send_data(data.clone(), false);
                }
                outcomes.spawn(async move {
                    let r = timeout(Duration::from_secs(60), resp).await;
                    drop(body);
                    match r {
                        Ok(Ok(resp)) => Ok(resp.status().as_u16()),
                        Ok(Err(e)) => Err(e.reason()),
                        Err(_) => Err(None),
                    }
                });
            }
        }
    }

    let mut silent = JoinSet::new();
    let mut keep = Vec::new();
    for i in 0..4u8 {
        flood(
            &edge,
            Ipv4Addr::new(127, 0, 0, 2 + i),
            2,
            100,
            0,
            &mut silent,
            &mut keep,
        )
        .await;
    }
    sleep(Duration::from_millis(500)).await;
    #[allow(clippy::disallowed_methods)] // the test's client
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 20)))
        .build()
        .unwrap();
    let r = other
        .post(format!("http://{}/token", edge.addr))
        .form(&[("grant_type", "authorization_code"), ("code", "nope")])
        .send()
        .await
        .unwrap();
    // 401: the request was read and judged (no client authentication), not refused unread.
    assert_eq!(
        r.status().as_u16(),
        401,
        "800 silent streams announcing 50 MiB must not spend a 4 MiB budget"
    );
    edge.real_client_completes_a_flow().await;

    // Strangers sending real bytes: 4 addresses × 40 streams × 60 KiB, about 9.4 MiB, against
    // the strangers' half of 2 MiB.
    let mut loud = JoinSet::new();
    for i in 0..4u8 {
        flood(
            &edge,
            Ipv4Addr::new(127, 0, 0, 10 + i),
            1,
            40,
            60 * 1024,
            &mut loud,
            &mut keep,
        )
        .await;
    }
    sleep(Duration::from_secs(2)).await;
    edge.real_client_calls_a_tool(&mcp).await;
    let r = other
        .post(format!("http://{}/token", edge.addr))
        .form(&[("grant_type", "authorization_code"), ("code", "nope")])
        .send()
        .await
        .unwrap();
    let stranger_while_full = r.status().as_u16();

    let (mut taken, mut refused) = (0, 0);
    while let Some(o) = loud.join_next().await {
        match o.unwrap() {
            Ok(status) => {
                assert_eq!(status, 400, "an unfinished form is a bad request");
                taken += 1;
            }
            Err(Some(h2::Reason::REFUSED_STREAM)) => refused += 1,
            Err(other) => panic!("a stream ended with {other:?}"),
        }
    }
    eprintln!(
        "800 silent streams announcing 50 MiB held nothing; 160 streams sending 60 KiB each: {taken} held to the form deadline, {refused} refused with REFUSED_STREAM; a stranger's /token while the strangers' half was spent: {stranger_while_full}; an authenticated tool call went through"
    );
    assert!(
        (1..=34).contains(&taken),
        "the strangers' half (2 MiB) holds at most 34 bodies of 60 KiB, took {taken}"
    );
    assert!(refused > 0, "nothing was refused");
    assert!(
        stranger_while_full == 401 || stranger_while_full == 503,
        "{stranger_while_full}"
    );
    silent.abort_all();
    drop(keep);
    edge.assert_healthy();
}
