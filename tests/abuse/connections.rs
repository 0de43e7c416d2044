//! Connections a stranger opens and never uses: half-sent heads, silent sockets, a started
//! HTTP/2 preface, and more connections from one address than it may hold.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep};

use super::support::{Edge, connect_from, raw_get, start, until_closed};

/// `header_read_timeout_secs` in the slow-header test.
const HEADER_TIMEOUT: Duration = Duration::from_secs(4);

/// Hundreds of half-sent requests from three addresses (100 each, within the default cap of
/// 128 per source): a third send nothing, a third a request head they keep extending by one
/// byte every 300 ms (slowloris), a third only the first line of an HTTP/2 preface (hyper
/// waits for the rest before it picks a protocol, with no timer of its own). While they are
/// all open a real client completes a whole flow and a tool call; every stranger is cut off
/// once the header timeout has passed, and not before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_headers_are_cut_off_and_a_real_client_still_completes_a_flow() {
    const STRANGERS: usize = 300;
    let mut edge: Edge = start(&format!(
        "header_read_timeout_secs = {}",
        HEADER_TIMEOUT.as_secs()
    ))
    .await;
    let mut strangers = JoinSet::new();
    let cut_off = Arc::new(AtomicUsize::new(0));
    for i in 0..STRANGERS {
        let cut = cut_off.clone();
        let from = Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(i % 3).unwrap());
        let to = edge.addr;
        strangers.spawn(async move {
            let stream = connect_from(from, to).await;
            let opened = Instant::now();
            let (mut r, mut w) = stream.into_split();
            let kind = i % 3;
            match kind {
                1 => w
                    .write_all(b"POST /register HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                    .await
                    .unwrap(),
                2 => w.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap(),
                _ => {}
            }
            let trickle = async {
                if kind == 1 {
                    while w.write_all(b"a").await.is_ok() {
                        sleep(Duration::from_millis(300)).await;
                    }
                }
                std::future::pending::<()>().await;
            };
            let closed = until_closed(&mut r, Duration::from_secs(30));
            let outcome = tokio::select! {
                c = closed => c,
                () = trickle => None,
            };
            let (_, got) = outcome.unwrap_or_else(|| panic!("stranger {i} was never cut off"));
            cut.fetch_add(1, Ordering::SeqCst);
            (kind, opened.elapsed(), got)
        });
    }
    // Every stranger is connected and accepted before the real client starts.
    sleep(Duration::from_millis(700)).await;
    assert_eq!(cut_off.load(Ordering::SeqCst), 0, "all strangers hold on");
    let flow_started = Instant::now();
    edge.real_client_completes_a_flow().await;
    let flow_took = flow_started.elapsed();
    let open_at_the_end = STRANGERS - cut_off.load(Ordering::SeqCst);

    let mut slowest = [Duration::ZERO; 3];
    while let Some(done) = strangers.join_next().await {
        let (kind, open_for, got) = done.unwrap();
        assert!(
            open_for >= HEADER_TIMEOUT - Duration::from_millis(300),
            "kind {kind} cut off after {open_for:?}, before the header timeout"
        );
        // The timeout, plus the watchdog's 1 s before dropping a half-read head, plus room
        // for a loaded machine.
        assert!(
            open_for < HEADER_TIMEOUT + Duration::from_secs(5),
            "kind {kind} held for {open_for:?}"
        );
        assert!(
            !String::from_utf8_lossy(&got).contains(" 200 "),
            "a half-sent request was never answered as if complete"
        );
        slowest[kind] = slowest[kind].max(open_for);
    }
    eprintln!(
        "{STRANGERS} half-sent requests, header timeout {HEADER_TIMEOUT:?}: the slowest silent, slowloris and HTTP/2-preface ones were cut off after {slowest:?}; the flow took {flow_took:?}, {open_at_the_end} strangers still open when it ended"
    );
    // The listener is still fine afterwards.
    edge.real_client_completes_a_flow().await;
    edge.assert_healthy();
}

/// One address (127.0.0.2) holds as many connections as the per-source cap allows; its next
/// one is closed at once without an answer, while another address (127.0.0.3) and a real
/// client (127.0.0.1) are served; when one of its connections closes, it may open one again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connection_cap_per_source_leaves_other_sources_served() {
    const CAP: usize = 8;
    let noisy = Ipv4Addr::new(127, 0, 0, 2);
    let other = Ipv4Addr::new(127, 0, 0, 3);
    // A long header timeout, so the held connections stay open for the whole test.
    let mut edge = start(&format!(
        "max_connections_per_source = {CAP}\nheader_read_timeout_secs = 60"
    ))
    .await;
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(connect_from(noisy, edge.addr).await);
    }
    sleep(Duration::from_millis(300)).await;

    // Over the cap: accepted by the kernel, closed by the proxy at once, never answered.
    let started = Instant::now();
    let mut over = connect_from(noisy, edge.addr).await;
    let status = raw_get(&mut over, "/healthz").await;
    assert_eq!(status, "", "the connection over the cap got an answer");
    let (closed_after, _) = until_closed(&mut over, Duration::from_secs(5))
        .await
        .expect("the connection over the cap was not closed");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "closed at once, not after {closed_after:?}"
    );

    // The held connections themselves are served.
    assert_eq!(
        raw_get(&mut held[0], "/healthz").await,
        "HTTP/1.1 200 OK",
        "a connection within the cap"
    );

    // Another source is served, over several connections.
    #[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
    let other_client = reqwest::Client::builder()
        .local_address(std::net::IpAddr::V4(other))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    for _ in 0..CAP + 2 {
        let r = other_client
            .get(format!("http://{}/healthz", edge.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // And a real client completes a flow.
    edge.real_client_completes_a_flow().await;

    // A slot given back is a slot the source may use again.
    drop(held.pop());
    sleep(Duration::from_millis(300)).await;
    let mut again = connect_from(noisy, edge.addr).await;
    assert_eq!(raw_get(&mut again, "/healthz").await, "HTTP/1.1 200 OK");
    edge.assert_healthy();
}

/// At the global cap the proxy stops accepting: a new connection (from another source, so the
/// per-source cap is not what stops it) waits in the kernel backlog, unanswered but not
/// closed, and is served as soon as one of the open connections ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_the_global_connection_cap_new_connections_wait_instead_of_being_closed() {
    const CAP: usize = 4;
    let mut edge = start(&format!(
        "max_connections = {CAP}\nmax_connections_per_source = {CAP}\nheader_read_timeout_secs = 60"
    ))
    .await;
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(connect_from(Ipv4Addr::new(127, 0, 0, 2), edge.addr).await);
    }
    sleep(Duration::from_millis(300)).await;
    let waiting = tokio::spawn({
        let to = edge.addr;
        async move {
            let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 3), to).await;
            let status = raw_get(&mut s, "/healthz").await;
            (Instant::now(), status)
        }
    });
    sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "answered although the cap was reached"
    );
    let released = Instant::now();
    drop(held.pop());
    let (answered, status) = waiting.await.unwrap();
    assert_eq!(status, "HTTP/1.1 200 OK", "served once a slot was free");
    assert!(answered >= released, "not before the slot was free");
    edge.assert_healthy();
}
