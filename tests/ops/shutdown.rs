//! Graceful shutdown of the real binary: SIGTERM while SSE streams run through `/mcp`. A stream
//! that ends within the grace period completes; one that would not is ended cleanly (a complete
//! chunked response, no reset) at the deadline; the port refuses new connections right away;
//! the store is flushed and the exit status is 0.
//!
//! Uses `target/release/mcp-oauth-proxy` or `target/debug/…` if newer than the proxy's
//! sources (`MCP_CRASH_BIN` overrides), else builds the debug binary first.

use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, sleep};

use crate::support::binary::{BesideHelper, Process, free_port};
use crate::support::mcp::{Mcp, sse_messages};

/// Grace period in the test configuration.
const GRACE: Duration = Duration::from_secs(3);

/// Reads a response to its end; the text and whether it ended cleanly (no transport error).
async fn read_to_end(
    mut resp: reqwest::Response,
    mut text: String,
) -> (String, Result<(), String>) {
    loop {
        match resp.chunk().await {
            Ok(Some(c)) => text.push_str(&String::from_utf8_lossy(&c)),
            Ok(None) => return (text, Ok(())),
            Err(e) => {
                let mut cause: &dyn std::error::Error = &e;
                while let Some(inner) = cause.source() {
                    cause = inner;
                }
                return (text, Err(cause.to_string()));
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_finishes_short_streams_ends_long_ones_cleanly_refuses_new_connections_and_exits_0()
{
    // The in-process helper is only there for its fake GitHub and demo backend, which the
    // binary uses too; the flow helpers then talk to the binary.
    let mut b = BesideHelper::start(GRACE.as_secs(), "", "").await;
    let (helper, proxy, port) = (&b.helper, &mut b.proxy, b.port);
    let mut mcp = Mcp::for_user(helper, "alice").await;
    mcp.initialize(false).await;

    let call = |id: u64, count: u64, delay_ms: u64| {
        mcp.post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "slow_count", "arguments": {"count": count, "delay_ms": delay_ms}}}))
            .send()
    };
    // Ends 1.6 s after the start, well inside the grace period.
    let mut short = call(1, 4, 400).await.unwrap();
    // Would run 25 s: longer than the grace period.
    let mut long = call(2, 50, 500).await.unwrap();
    assert_eq!(short.status(), 200);
    assert_eq!(long.status(), 200);
    let short_first = String::from_utf8_lossy(&short.chunk().await.unwrap().unwrap()).into_owned();
    let long_first = String::from_utf8_lossy(&long.chunk().await.unwrap().unwrap()).into_owned();

    proxy.signal("TERM");
    let signalled = Instant::now();
    let short = tokio::spawn(read_to_end(short, short_first));
    let long = tokio::spawn(read_to_end(long, long_first));

    // The listener closes at once: a new connection is refused, not queued.
    let refused_by = signalled + Duration::from_secs(2);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break,
            other => {
                assert!(
                    Instant::now() < refused_by,
                    "new connections still accepted 2 s after SIGTERM: {other:?}"
                );
                drop(other);
                sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(
        proxy.exited().is_none(),
        "the proxy must wait for the streams"
    );

    let (text, ended) = short.await.unwrap();
    assert_eq!(ended, Ok(()), "the short stream ended cleanly");
    let msgs = sse_messages(&text);
    assert_eq!(
        msgs.len(),
        5,
        "4 progress notifications and the result: {text}"
    );
    assert_eq!(msgs[4]["result"]["content"][0]["text"], "counted to 4");

    let (text, ended) = long.await.unwrap();
    let cut_after = signalled.elapsed();
    assert_eq!(
        ended,
        Ok(()),
        "the long stream was closed cleanly at the deadline (complete chunked body), not reset"
    );
    let msgs = sse_messages(&text);
    assert!(
        !msgs.is_empty() && msgs.iter().all(|m| m.get("result").is_none()),
        "progress only, no result: {text}"
    );
    assert!(
        cut_after >= GRACE - Duration::from_millis(200)
            && cut_after < GRACE + Duration::from_secs(4),
        "the long stream ended at the grace deadline ({GRACE:?}), not after {cut_after:?}"
    );

    let status = proxy.wait(Duration::from_secs(10)).await;
    let log = proxy.log_text();
    assert_eq!(status.code(), Some(0), "exit status; log:\n{log}");
    assert!(log.contains("store flushed"), "{log}");
    assert!(log.contains("grace period over"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
}

/// A client that starts an admin request and never finishes it (here: a body that never
/// arrives; in practice a large export read slowly) must not keep the process from flushing
/// the store and exiting 0: the admin listener gets the grace period plus the close bound,
/// like the main one, then is abandoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_admin_request_cannot_hold_shutdown_past_the_grace_period() {
    use tokio::io::AsyncWriteExt;
    const TOKEN: &str = "shutdown-admin-token-0123456789abcdef";
    let grace = Duration::from_secs(1);
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
public_url = "{base}"
listen = "127.0.0.1:{port}"
shutdown_grace_secs = {grace}
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"
[store]
path = {store:?}
"#,
            grace = grace.as_secs(),
            store = dir.path().join("store").display().to_string(),
        ),
    )
    .unwrap();
    let mut proxy = Process::start(&config);
    let http = crate::support::http();
    proxy
        .wait_ready(&http, &format!("http://127.0.0.1:{admin_port}/healthz"))
        .await;

    // Authorized headers, then 10 of the 100 body bytes announced, then nothing.
    let mut slow = tokio::net::TcpStream::connect(("127.0.0.1", admin_port))
        .await
        .unwrap();
    slow.write_all(
        format!(
            "POST /admin/api/grants/revoke HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"user\": \""
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    sleep(Duration::from_millis(300)).await;

    proxy.signal("TERM");
    let signalled = Instant::now();
    // Grace (1 s) + close bound (5 s), with room for a loaded machine.
    let status = proxy.wait(Duration::from_secs(12)).await;
    let log = proxy.log_text();
    assert_eq!(status.code(), Some(0), "exit status; log:\n{log}");
    assert!(
        signalled.elapsed() >= grace,
        "the admin request got the grace period"
    );
    assert!(log.contains("store flushed"), "{log}");
    assert!(
        log.contains("admin requests still running after the grace period"),
        "{log}"
    );
    drop(slow);
}

/// A graceful stop writes the upstream-action events still waiting in the background group
/// commit: after a clean exit the trail holds every call that was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_makes_the_pending_upstream_action_events_durable_before_exit() {
    use mcp_oauth_proxy::clock::SystemClock;
    use mcp_oauth_proxy::store::{SharedStore, SledStore, audit_log};
    use std::sync::Arc;
    // The longest window and a large group: the calls' events are most likely still pending
    // when the signal arrives (if the machine is slow enough for the window to pass first,
    // they are durable anyway, and the test still checks that none is missing).
    let mut b = BesideHelper::start(
        GRACE.as_secs(),
        "",
        "[audit]\nupstream_action_commit_ms = 1000\nupstream_action_commit_events = 10000\n",
    )
    .await;
    let mut mcp = Mcp::for_user(&b.helper, "alice").await;
    mcp.initialize(false).await;
    const CALLS: usize = 5;
    for _ in 0..CALLS {
        let (status, _) = mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200);
    }
    let status = b.proxy.stop(Duration::from_secs(30)).await;
    let log = b.proxy.log_text();
    assert_eq!(status.code(), Some(0), "exit status; log:\n{log}");
    assert!(
        log.contains("pending upstream-action audit events written"),
        "{log}"
    );
    let store: SharedStore = Arc::new(SledStore::open(&b.store(), Arc::new(SystemClock)).unwrap());
    let calls = audit_log::all(store.as_ref())
        .await
        .unwrap()
        .iter()
        .filter(|r| r.kind == "upstream_action" && r.event["tool"] == "whoami")
        .count();
    assert_eq!(
        calls, CALLS,
        "every answered call is in the trail; log:\n{log}"
    );
}
