//! Anonymous traffic writes nothing durable per request (issue 15), against the real binary
//! on loopback: a flood of tokenless `/mcp` requests and callbacks with unknown states grows
//! the sled store by a bounded amount and makes it flush (fsync) a bounded number of times,
//! while the refusals are counted in metrics and, at shutdown, written as per-minute
//! aggregates (one event per source and reason), never one event per request.
//!
//! Uses `target/{release,debug}/mcp-oauth-proxy` if newer than the sources (`MCP_CRASH_BIN`
//! overrides), else builds the debug binary first.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use mcp_oauth_proxy::audit::Audit;
use mcp_oauth_proxy::clock::SystemClock;
use mcp_oauth_proxy::metrics::Metrics;
use mcp_oauth_proxy::store::{SharedStore, SledStore};
use tokio::time::{Instant, sleep, timeout};

use crate::support::binary::{Process, free_port};

/// Requests of each kind in the flood.
const N: usize = 10_000;
/// Requests in flight at once.
const CONCURRENCY: usize = 32;
/// The whole flood must finish within this (a debug binary on a busy machine).
const FLOOD_BOUND: Duration = Duration::from_secs(240);
/// Store growth allowed for the whole flood: the aggregates and sled's own bookkeeping,
/// nowhere near one record per request (20 000 records were about 8.9 MB).
const MAX_GROWTH_BYTES: u64 = 512 * 1024;
/// Disk flushes allowed for the whole flood (the aggregate writer's, a minute's worth at
/// most; one per request before).
const MAX_FLUSHES: u64 = 20;

/// Bytes of every file under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_bytes(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

/// The value of the sample `name{labels}` (exactly these labels, in this order), 0 if absent.
fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0)
}

async fn metrics(http: &reqwest::Client, admin: &str) -> String {
    http.get(format!("{admin}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Sends `urls` (POST with a JSON body if `post`), `CONCURRENCY` at a time; the statuses.
async fn flood(http: &reqwest::Client, urls: Vec<String>, post: bool) -> Vec<u16> {
    futures_util::stream::iter(urls)
        .map(|u| {
            let req = if post {
                http.post(u)
                    .header("content-type", "application/json")
                    .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            } else {
                http.get(u)
            };
            async move { req.send().await.map(|r| r.status().as_u16()).unwrap_or(0) }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await
}

const FLUSHES: &str = "mcp_proxy_store_disk_flushes_total";
const MCP_MISSING: &str = r#"mcp_proxy_rejections_total{source="mcp_token",reason="missing"}"#;
const CALLBACK_UNKNOWN: &str =
    r#"mcp_proxy_rejections_total{source="callback",reason="state_unknown"}"#;

#[tokio::test]
async fn anonymous_flood_writes_no_durable_record_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let (port, admin_port) = (free_port(), free_port());
    let base = format!("http://127.0.0.1:{port}");
    let admin = format!("http://127.0.0.1:{admin_port}");
    let store_dir = dir.path().join("store");
    let config = dir.path().join("proxy.toml");
    // Bad callbacks would mostly meet the callback rate limit (a burst of 100 per address);
    // raised here so that every one of them takes the refusal path being measured.
    std::fs::write(
        &config,
        format!(
            r#"[server]
public_url = "{base}"
listen = "127.0.0.1:{port}"
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = ["read:user"]
authorize_url = "http://127.0.0.1:9/authorize"
token_url = "http://127.0.0.1:9/token"
api_url = "http://127.0.0.1:9"
[admin]
listen = "127.0.0.1:{admin_port}"
[store]
path = {store:?}
[rate_limits.callback]
per_ip_per_minute = 1000000
per_ip_burst = 100000
global_per_minute = 1000000
global_burst = 100000
"#,
            store = store_dir.display().to_string(),
        ),
    )
    .unwrap();
    let http = crate::support::http();
    let mut proxy = Process::start(&config);
    proxy.wait_ready(&http, &format!("{admin}/readyz")).await;
    // Let start-up writes settle before the baseline.
    sleep(Duration::from_millis(500)).await;
    let bytes_before = dir_bytes(&store_dir);
    let m0 = metrics(&http, &admin).await;

    let started = Instant::now();
    let mcp: Vec<String> = (0..N).map(|_| format!("{base}/mcp")).collect();
    let statuses = timeout(FLOOD_BOUND, flood(&http, mcp, true))
        .await
        .expect("the /mcp flood finished in time");
    assert!(statuses.iter().all(|s| *s == 401), "every one refused");
    let bytes_mid = dir_bytes(&store_dir);
    let m1 = metrics(&http, &admin).await;
    let callbacks: Vec<String> = (0..N)
        .map(|i| format!("{base}/callback/github?state=flood-{i}&code=x"))
        .collect();
    let statuses = timeout(FLOOD_BOUND, flood(&http, callbacks, false))
        .await
        .expect("the callback flood finished in time");
    assert!(statuses.iter().all(|s| *s == 400), "every one refused");
    let took = started.elapsed();
    sleep(Duration::from_millis(500)).await;
    let bytes_after = dir_bytes(&store_dir);
    let m2 = metrics(&http, &admin).await;

    let flushes = |m: &str| sample(m, FLUSHES);
    eprintln!(
        "per {N} tokenless /mcp: store +{} bytes, {} disk flushes; per {N} bad callbacks: store +{} bytes, {} disk flushes; {:.1} s",
        bytes_mid.saturating_sub(bytes_before),
        flushes(&m1) - flushes(&m0),
        bytes_after.saturating_sub(bytes_mid),
        flushes(&m2) - flushes(&m1),
        took.as_secs_f64()
    );
    assert!(
        bytes_after.saturating_sub(bytes_before) < MAX_GROWTH_BYTES,
        "store grew from {bytes_before} to {bytes_after} bytes"
    );
    assert!(
        flushes(&m2) - flushes(&m0) <= MAX_FLUSHES,
        "{} disk flushes for {} anonymous requests",
        flushes(&m2) - flushes(&m0),
        2 * N
    );
    // The refusals were counted, every one.
    assert_eq!(
        sample(&m2, MCP_MISSING) - sample(&m0, MCP_MISSING),
        N as u64
    );
    assert_eq!(
        sample(&m2, CALLBACK_UNKNOWN) - sample(&m0, CALLBACK_UNKNOWN),
        N as u64
    );

    // Shutdown writes the counts still in memory; then the trail holds aggregates only.
    assert!(proxy.stop(Duration::from_secs(30)).await.success());
    let store: SharedStore = Arc::new(SledStore::open(&store_dir, Arc::new(SystemClock)).unwrap());
    let audit = Audit::new(store, Arc::new(SystemClock), Metrics::new());
    let trail = audit.all().await.unwrap();
    assert!(
        trail.len() < 100,
        "{} events for {} requests",
        trail.len(),
        2 * N
    );
    assert!(
        !trail
            .iter()
            .any(|r| r.kind == "token_rejected" || r.kind == "callback_rejected"),
        "no event per request"
    );
    let counted = |at: &str, reason: &str| -> u64 {
        trail
            .iter()
            .filter(|r| {
                r.kind == "anonymous_refusals"
                    && r.event["refused_at"] == at
                    && r.event["reason"] == reason
                    && r.event["source"] == "127.0.0.1"
            })
            .filter_map(|r| r.event["count"].as_u64())
            .sum()
    };
    assert_eq!(counted("mcp_token", "missing"), N as u64, "{trail:?}");
    assert_eq!(counted("callback", "state_unknown"), N as u64, "{trail:?}");
}
