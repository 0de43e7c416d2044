//! Benchmark 1: `tools/call` straight to a trivial backend and through each gateway in front of
//! the same backend, at several connection counts, in interleaved segments (the order of the
//! sides rotates every round) so machine noise lands on all of them. The sides: direct, nginx
//! as a plain reverse proxy (`nginx.rs`), a bare forwarder without any checks
//! (`forwarder.rs`: the second HTTP hop alone, built from the proxy's crates), and the proxy on
//! sled and on PostgreSQL. The load generator is the same for every side: one in-process
//! HTTP/1.1 client (reqwest, one kept-alive connection) per simulated connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::timing::{Samples, now, ns_since, segment};

/// What one side of the comparison is.
#[derive(Clone)]
pub struct Target {
    /// URL to POST to.
    pub url: String,
    /// Bearer token (the proxy's access token; the others ignore it).
    pub token: String,
}

/// One side: its key in the JSON result, its label, where it is.
#[derive(Clone)]
pub struct Side {
    /// `direct`, `nginx`, `bare`, `sled`, `pg`.
    pub key: &'static str,
    /// For progress lines.
    pub label: &'static str,
    /// Where to send calls.
    pub target: Target,
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

/// Runs the comparison at each connection count: `rounds` rounds of one `seg`-long segment
/// per side, the order rotating every round. Prints one JSON result line per level as soon as
/// it is done: `{"kind": "mcp", "conns": N, KEY: samples, …}` for every side.
pub async fn compare(sides: &[Side], levels: &[usize], rounds: usize, seg: Duration) {
    for &conns in levels {
        let names: Vec<String> = sides
            .iter()
            .map(|s| format!("tools/call {}, {conns} conn", s.label))
            .collect();
        // One client (so one kept-alive connection) per simulated connection and side.
        let clients: Vec<Arc<Vec<reqwest::Client>>> = sides
            .iter()
            .map(|_| Arc::new((0..conns).map(|_| crate::harness::http()).collect()))
            .collect();
        // Warm up every side (connections, caches, pools behind it).
        for ((name, side), c) in names.iter().zip(sides).zip(&clients) {
            let _ = run(name, c.clone(), side.target.clone(), conns, seg / 2).await;
        }
        let mut samples: Vec<Samples> = vec![Samples::default(); sides.len()];
        for r in 0..rounds {
            // Over `sides.len()` rounds, each side is in each position once.
            for k in 0..sides.len() {
                let i = (r + k) % sides.len();
                let ticks = crate::timing::cpu_ticks();
                let (ns, wall) = run(
                    &names[i],
                    clients[i].clone(),
                    sides[i].target.clone(),
                    conns,
                    seg,
                )
                .await;
                samples[i].add(ns, wall);
                samples[i].add_cpu(ticks, crate::timing::cpu_ticks());
            }
        }
        let progress: Vec<String> = sides
            .iter()
            .zip(&samples)
            .map(|(s, x)| {
                format!(
                    "{} {:.0}/s p50 {:.1} µs",
                    s.key,
                    x.per_sec(),
                    x.pct_us(50.0)
                )
            })
            .collect();
        eprintln!("  {conns:>3} conn: {}", progress.join(" | "));
        let mut v = json!({"kind": "mcp", "conns": conns});
        for (s, x) in sides.iter().zip(&samples) {
            v[s.key] = x.json();
        }
        println!("{v}");
    }
}

/// Benchmark 1 in a child process: the trivial backend; nginx in front of it (`nginx`: the
/// binary, or the reason it is not measured); the bare forwarder; a proxy on sled and, with
/// a scratch database (`--pg-url`), one on PostgreSQL, each with the backend as its
/// `[backend]` and an access token from a real flow; then [`compare`]. A side that is not
/// measured is printed as `{"kind": "skipped", "side": KEY, "reason": …}`.
pub async fn child(
    levels: &[usize],
    rounds: usize,
    seg: Duration,
    nginx: Result<std::path::PathBuf, String>,
    only: Option<&[String]>,
) {
    use crate::harness::Backing;
    let backend_url = crate::backend::start().await;
    let skipped = |side: &str, reason: &str| {
        eprintln!("  {side}: SKIPPED ({reason})");
        println!(
            "{}",
            json!({"kind": "skipped", "side": side, "reason": reason})
        );
    };
    let mut sides = vec![Side {
        key: "direct",
        label: "direct",
        target: Target {
            url: backend_url.clone(),
            token: "direct-bench-token".to_owned(),
        },
    }];
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let nginx = match nginx {
        Ok(bin) => crate::nginx::Nginx::start(&bin, &backend_url, workers).await,
        Err(e) => Err(e),
    };
    match &nginx {
        Ok(n) => sides.push(Side {
            key: "nginx",
            label: "through nginx",
            target: Target {
                url: n.url.clone(),
                token: "nginx-bench-token".to_owned(),
            },
        }),
        Err(reason) => skipped("nginx", reason),
    }
    sides.push(Side {
        key: "bare",
        label: "through the bare forwarder",
        target: Target {
            url: crate::forwarder::start(backend_url.clone()).await,
            token: "bare-bench-token".to_owned(),
        },
    });
    // Each proxy has a fake GitHub of its own (the fake knows one callback URL).
    let mut keep = Vec::new();
    for (store, key, label) in [
        (Backing::Sled, "sled", "through the proxy (sled)"),
        (Backing::Postgres, "pg", "through the proxy (PostgreSQL)"),
    ] {
        if store == Backing::Postgres && crate::harness::pg_url().is_none() {
            skipped(
                "pg",
                &crate::harness::pg_skip_reason()
                    .unwrap_or_else(|| "no scratch database".to_owned()),
            );
            continue;
        }
        let github = crate::harness::fake_github(1).await;
        let proxy = crate::harness::start(crate::harness::Options {
            github: Some(&github),
            backend_url: Some(backend_url.clone()),
            counters: None,
            sweeper: true,
            store,
        })
        .await;
        let http = crate::harness::http();
        let client = crate::flows::register(&http, &proxy).await;
        let (tokens, _) = crate::flows::flow(&http, &proxy, &client, "user0").await;
        sides.push(Side {
            key,
            label,
            target: Target {
                url: proxy.url("/mcp"),
                token: tokens.access,
            },
        });
        keep.push((github, proxy));
    }
    // `--sides sled` (a child only): one side alone, for a profiler's view of it.
    if let Some(only) = only {
        sides.retain(|s| only.iter().any(|o| o == s.key));
    }
    compare(&sides, levels, rounds, seg).await;
    if let Ok(n) = nginx {
        n.stop().await;
    }
}
