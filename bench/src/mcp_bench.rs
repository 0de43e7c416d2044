//! Benchmark 1: `tools/call` through the proxy versus straight to the same trivial backend, at
//! several connection counts, in interleaved segments (the order of the sides rotates every
//! round) so machine noise lands on all of them. A third side, a bare forwarder without any
//! checks (`forwarder.rs`), gives the cost of the second HTTP hop alone, for context.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::timing::{Samples, now, ns_since, segment};

/// What one side of the comparison is.
#[derive(Clone)]
pub struct Target {
    /// URL to POST to.
    pub url: String,
    /// Bearer token (the proxy's access token; the backend ignores it).
    pub token: String,
}

/// Results for one connection count.
#[derive(Debug, Clone, Default)]
pub struct Level {
    /// Straight to the backend.
    pub direct: Samples,
    /// Through the proxy.
    pub proxied: Samples,
    /// Through the bare forwarder (context).
    pub bare: Samples,
}

impl Level {
    /// Proxied throughput / direct throughput.
    pub fn throughput_ratio(&self) -> f64 {
        self.proxied.per_sec() / self.direct.per_sec().max(f64::MIN_POSITIVE)
    }
}

const BODY: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}"#;

/// One `tools/call` on a kept-alive connection.
pub async fn call(http: &reqwest::Client, t: &Target) {
    let resp = http
        .post(&t.url)
        .bearer_auth(&t.token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .body(BODY)
        .send()
        .await
        .expect("tools/call");
    let status = resp.status().as_u16();
    let body = resp.bytes().await.expect("tools/call body");
    assert!(
        status == 200 && body.starts_with(b"{") && body.len() > 40,
        "tools/call failed: {status} {}",
        String::from_utf8_lossy(&body)
    );
}

async fn run(
    what: &str,
    clients: Arc<Vec<reqwest::Client>>,
    t: Target,
    conns: usize,
    dur: Duration,
) -> (Vec<u64>, Duration) {
    segment(what, conns, dur, move |i, deadline: Instant| {
        let clients = clients.clone();
        let t = t.clone();
        async move {
            let http = &clients[i];
            let mut lat = Vec::with_capacity(4096);
            while now() < deadline {
                let s = now();
                call(http, &t).await;
                lat.push(ns_since(s));
            }
            lat
        }
    })
    .await
}

/// Runs the comparison at each connection count: `rounds` pairs of `seg`-long segments.
/// Prints one JSON result line per level as soon as it is done.
pub async fn compare(
    direct: Target,
    proxied: Target,
    bare: Target,
    levels: &[usize],
    rounds: usize,
    seg: Duration,
) {
    for &conns in levels {
        let sides = [
            (format!("tools/call direct, {conns} conn"), direct.clone()),
            (
                format!("tools/call through the proxy, {conns} conn"),
                proxied.clone(),
            ),
            (
                format!("tools/call through the bare forwarder, {conns} conn"),
                bare.clone(),
            ),
        ];
        // One client (so one kept-alive connection) per simulated connection and side.
        let clients: Vec<Arc<Vec<reqwest::Client>>> = sides
            .iter()
            .map(|_| Arc::new((0..conns).map(|_| crate::harness::http()).collect()))
            .collect();
        // Warm up every side (connections, caches, the proxy's backend pool).
        for ((name, t), c) in sides.iter().zip(&clients) {
            let _ = run(name, c.clone(), t.clone(), conns, seg / 2).await;
        }
        let mut level = Level::default();
        for r in 0..rounds {
            // Each side goes first, second and last equally often.
            for k in 0..sides.len() {
                let i = (r + k) % sides.len();
                let (name, t) = &sides[i];
                let (ns, wall) = run(name, clients[i].clone(), t.clone(), conns, seg).await;
                match i {
                    0 => level.direct.add(ns, wall),
                    1 => level.proxied.add(ns, wall),
                    _ => level.bare.add(ns, wall),
                }
            }
        }
        eprintln!(
            "  {conns:>3} conn: direct {:>8.0}/s p50 {:>7.1} µs | proxied {:>8.0}/s p50 {:>7.1} µs | bare forwarder {:>8.0}/s p50 {:>7.1} µs | ratio {:.2}×",
            level.direct.per_sec(),
            level.direct.pct_us(50.0),
            level.proxied.per_sec(),
            level.proxied.pct_us(50.0),
            level.bare.per_sec(),
            level.bare.pct_us(50.0),
            level.throughput_ratio()
        );
        println!(
            "{}",
            serde_json::json!({
                "kind": "mcp",
                "conns": conns,
                "direct": level.direct.json(),
                "proxied": level.proxied.json(),
                "bare": level.bare.json(),
            })
        );
    }
}

/// Benchmark 1 in a child process: the trivial backend, a proxy with it as its
/// `[backend]`, an access token from a real flow, then [`compare`].
pub async fn child(levels: &[usize], rounds: usize, seg: Duration) {
    let backend_url = crate::backend::start().await;
    let github = crate::harness::fake_github(1).await;
    let proxy = crate::harness::start(crate::harness::Options {
        github: Some(&github),
        backend_url: Some(backend_url.clone()),
        counters: None,
        sweeper: true,
    })
    .await;
    let http = crate::harness::http();
    let client = crate::flows::register(&http, &proxy).await;
    let (tokens, _) = crate::flows::flow(&http, &proxy, &client, "user0").await;
    let bare = Target {
        url: crate::forwarder::start(backend_url.clone()).await,
        token: "bare-bench-token".to_owned(),
    };
    let direct = Target {
        url: backend_url,
        token: "direct-bench-token".to_owned(),
    };
    let proxied = Target {
        url: proxy.url("/mcp"),
        token: tokens.access,
    };
    compare(direct, proxied, bare, levels, rounds, seg).await;
}
