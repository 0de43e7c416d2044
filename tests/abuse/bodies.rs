//! Bodies a stranger sends without a credential: `/mcp` answers from the headers and never
//! buffers them, so they cost the proxy no memory; forms count against the source's body
//! budget (HTTP/1.1 here; HTTP/2 in `http2.rs`).

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};

use super::support::{Edge, connect_from, start};
use crate::support::mcp::Mcp;

/// Unfinished bodies held open at once.
const BODIES: usize = 120;
/// What each announces (under the 4 MiB `/mcp` limit, so only authentication can refuse it).
const ANNOUNCED: usize = 4_000_000;
/// What each sends before it stalls.
const SENT: usize = 3 * 1024 * 1024;
/// The proxy's resident memory may grow by at most this while they are open. Buffering them
/// would take `BODIES * SENT` = 360 MiB; the proxy's own per-connection cost (an HTTP/1.1
/// read buffer, the task, the 401) is a few KiB each.
const BOUND_KIB: u64 = 48 * 1024;
/// And must be back within this of where it started once they are gone.
const AFTER_KIB: u64 = 24 * 1024;

/// 120 strangers from two addresses announce a 4 MB `/mcp` body, send 3 MiB of it and stall,
/// half without a token and half with a made-up one. Each gets its 401 at once, before its
/// body is read; the proxy's RSS stays within [`BOUND_KIB`] of the baseline while they are
/// open and a real client's tool call goes through, and it is back near the baseline after.
///
/// Needs no new configuration key, so it runs against an older binary too
/// (`MCP_CRASH_BIN=…`) and prints the figures before failing there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokenless_bodies_are_refused_before_buffering_and_memory_stays_bounded() {
    let mut edge: Edge = start("").await;
    // The real client first, so the baseline is a warmed-up process.
    let mut mcp = Mcp::for_user(&edge.helper, "alice").await;
    mcp.initialize(false).await;
    edge.real_client_calls_a_tool(&mcp).await;
    sleep(Duration::from_millis(500)).await;
    let baseline = edge.rss_kib();

    let peak = Arc::new(AtomicU64::new(baseline));
    let sampling = {
        let peak = peak.clone();
        let pid = edge.proxy.id();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(super::support::rss_kib(pid), Ordering::SeqCst);
                sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let (release_tx, release_rx) = watch::channel(false);
    let chunk: &'static [u8] = Box::leak(vec![b'x'; 64 * 1024].into_boxed_slice());
    let mut strangers = JoinSet::new();
    for i in 0..BODIES {
        let from = Ipv4Addr::new(127, 0, 0, 2 + u8::try_from(i % 2).unwrap());
        let to = edge.addr;
        let mut release = release_rx.clone();
        strangers.spawn(async move {
            let stream = connect_from(from, to).await;
            let (mut r, mut w) = stream.into_split();
            let token = if i % 2 == 0 {
                String::new()
            } else {
                "Authorization: Bearer mcpat_made-up-by-a-stranger\r\n".to_owned()
            };
            let head = format!(
                "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{token}Content-Length: {ANNOUNCED}\r\n\r\n"
            );
            w.write_all(head.as_bytes()).await.unwrap();
            // Sends its 3 MiB (or until the proxy stops listening), then stalls, holding
            // the connection, until released.
            let send = async move {
                let mut sent = 0;
                while sent < SENT {
                    if w.write_all(chunk).await.is_err() {
                        break;
                    }
                    sent += chunk.len();
                }
                let _ = release.wait_for(|r| *r).await;
                drop(w);
            };
            let answer = async {
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.windows(2).any(|w| w == b"\r\n") {
                    match r.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                String::from_utf8_lossy(&got)
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .to_owned()
            };
            let (status, ()) = tokio::join!(timeout(Duration::from_secs(20), answer), send);
            status.unwrap_or_default()
        });
    }
    // Everything the strangers could send has been sent (or refused by the proxy).
    sleep(Duration::from_secs(5)).await;
    let while_open = edge.rss_kib();
    // A real client is served while they are open.
    edge.real_client_calls_a_tool(&mcp).await;
    let _ = release_tx.send(true);
    let mut statuses = Vec::new();
    while let Some(s) = strangers.join_next().await {
        statuses.push(s.unwrap());
    }
    sleep(Duration::from_secs(2)).await;
    sampling.abort();
    let peak = peak.load(Ordering::SeqCst);
    let after = edge.rss_kib();
    let mib = |kib: u64| kib as f64 / 1024.0;
    eprintln!(
        "RSS of the proxy: baseline {:.1} MiB; {BODIES} unfinished {} MiB bodies open: {:.1} MiB (peak {:.1} MiB); after they closed: {:.1} MiB",
        mib(baseline),
        SENT >> 20,
        mib(while_open),
        mib(peak),
        mib(after)
    );
    let answered = statuses
        .iter()
        .filter(|s| s.as_str() == "HTTP/1.1 401 Unauthorized")
        .count();
    assert_eq!(
        answered, BODIES,
        "every stranger got its 401 before finishing its body: {statuses:?}"
    );
    assert!(
        peak < baseline + BOUND_KIB,
        "RSS grew from {baseline} KiB to {peak} KiB under the flood (bound {BOUND_KIB} KiB)"
    );
    assert!(
        after < baseline + AFTER_KIB,
        "RSS stayed at {after} KiB after the flood (baseline {baseline} KiB)"
    );
    edge.real_client_calls_a_tool(&mcp).await;
    edge.assert_healthy();
}

/// Once a caller is authenticated its body is held to the limits: an announced length over
/// 4 MiB is refused with 413 before a byte is read, and a body that stalls gets 408 when
/// `body_read_timeout_secs` has passed since the proxy began reading it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn authenticated_bodies_are_bounded_in_size_and_time() {
    let mut edge = start("body_read_timeout_secs = 2").await;
    let mcp = Mcp::for_user(&edge.helper, "alice").await;
    let head = |len: usize| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {}\r\nContent-Length: {len}\r\n\r\n",
            mcp.token
        )
    };
    let status_of = |mut s: tokio::net::TcpStream| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(2).any(|w| w == b"\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };

    let mut s = connect_from(Ipv4Addr::LOCALHOST, edge.addr).await;
    s.write_all(head(5 * 1024 * 1024).as_bytes()).await.unwrap();
    let status = timeout(Duration::from_secs(5), status_of(s)).await.unwrap();
    assert_eq!(status, "HTTP/1.1 413 Payload Too Large");

    let mut s = connect_from(Ipv4Addr::LOCALHOST, edge.addr).await;
    s.write_all(head(1000).as_bytes()).await.unwrap();
    s.write_all(br#"{"jsonrpc": "2.0", "id": 1, "#)
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let status = timeout(Duration::from_secs(10), status_of(s))
        .await
        .unwrap();
    assert_eq!(status, "HTTP/1.1 408 Request Timeout");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1800) && took < Duration::from_secs(6),
        "408 after {took:?}"
    );
    edge.assert_healthy();
}

/// HTTP/1.1's side of the held-body budget: one address holds 64 forms announcing 64 KiB and
/// sent all but their last 512 bytes, nearly all its 4 MiB `max_body_bytes_per_source` allows (the
/// least it may be set to; bodies count as their bytes arrive); its next form, announcing more
/// than is free, gets 503 with `Retry-After: 1` at once, without a byte of it read, while
/// another address is answered normally; once the held forms reach their deadline (400) the
/// address may post again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http1_form_beyond_the_source_body_budget_gets_503_and_another_address_is_served() {
    const HELD: usize = 64;
    const FORM: usize = 64 * 1024;
    let mut edge =
        start("max_body_bytes_per_source = 4194304\nform_body_read_timeout_secs = 4").await;
    let head = format!(
        "POST /token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {FORM}\r\n\r\n"
    );
    let status_of = |mut s: tokio::net::TcpStream| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    };
    let noisy = Ipv4Addr::new(127, 0, 0, 2);
    let mut held = JoinSet::new();
    let started = tokio::time::Instant::now();
    for _ in 0..HELD {
        let mut s = connect_from(noisy, edge.addr).await;
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&vec![b'a'; FORM - 512]).await.unwrap();
        held.spawn(async move { (status_of(s).await, started.elapsed()) });
    }
    sleep(Duration::from_millis(500)).await;

    let mut over = connect_from(noisy, edge.addr).await;
    over.write_all(head.as_bytes()).await.unwrap();
    let answer = timeout(Duration::from_secs(3), status_of(over))
        .await
        .expect("the form over the budget is answered at once");
    assert!(
        answer.starts_with("HTTP/1.1 503 Service Unavailable"),
        "{answer}"
    );
    let lower = answer.to_ascii_lowercase();
    assert!(lower.contains("retry-after: 1"), "{answer}");
    assert!(lower.contains("connection: close"), "{answer}");

    let mut other = connect_from(Ipv4Addr::new(127, 0, 0, 3), edge.addr).await;
    other.write_all(head.as_bytes()).await.unwrap();
    other.write_all(&vec![b'a'; FORM]).await.unwrap();
    let answer = timeout(Duration::from_secs(5), status_of(other))
        .await
        .unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 400") || answer.starts_with("HTTP/1.1 401"),
        "another address is answered by /token itself: {answer}"
    );

    while let Some(done) = held.join_next().await {
        let (answer, after) = done.unwrap();
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(
            after >= Duration::from_millis(3500),
            "answered after {after:?}"
        );
    }
    // The budget is back: the address may post again.
    let mut again = connect_from(noisy, edge.addr).await;
    again.write_all(head.as_bytes()).await.unwrap();
    again.write_all(&vec![b'a'; FORM]).await.unwrap();
    let answer = timeout(Duration::from_secs(5), status_of(again))
        .await
        .unwrap();
    assert!(!answer.starts_with("HTTP/1.1 503"), "{answer}");
    edge.assert_healthy();
}
