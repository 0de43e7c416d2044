//! Benchmarks 2 and 3: full authorization flows per second and refresh grants per second, both
//! against a durable proxy on sled or on PostgreSQL, each interleaved with its baselines in
//! the same rounds. The bare-store baseline is the store's own: bare sled insert+flush for
//! sled, bare single-statement INSERTs (each its own commit) for PostgreSQL.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mcp_examples::FakeGitHub;

use crate::flows::{self, RegisteredClient, Steps, Tokens};
use crate::harness::{Backing, Proxy};
use crate::pg::BarePg;
use crate::sled_baseline::BareSled;
use crate::timing::{Samples, now, ns_since, or_hang, segment};

/// One concurrency level of benchmark 2.
#[derive(Debug, Clone, Default)]
pub struct FlowLevel {
    /// Concurrent browsers.
    pub conns: usize,
    /// Full flows.
    pub flows: Samples,
    /// Sum of step times over all flows, ns.
    pub steps: [u64; 5],
    /// Baseline: the fake GitHub's part of a flow alone.
    pub github: Samples,
    /// Baseline: bare durable writes to the same kind of store.
    pub bare: Samples,
}

/// The bare-store baseline: one durable write after another, nothing else.
pub enum Bare {
    /// sled insert+flush.
    Sled(Arc<BareSled>),
    /// One INSERT, committed.
    Pg(Arc<BarePg>),
}

impl Bare {
    /// The baseline for `store`.
    pub async fn open(store: Backing) -> Bare {
        match store {
            Backing::Sled => Bare::Sled(BareSled::open()),
            Backing::Postgres => {
                Bare::Pg(BarePg::open(crate::harness::pg_url().expect("scratch database")).await)
            }
        }
    }

    /// A segment of `workers` concurrent writers.
    pub async fn run(&self, workers: usize, dur: Duration) -> (Vec<u64>, Duration) {
        match self {
            Bare::Sled(s) => s.run(workers, dur).await,
            Bare::Pg(p) => p.run(workers, dur).await,
        }
    }

    /// For progress lines.
    pub fn label(&self) -> &'static str {
        match self {
            Bare::Sled(_) => "bare sled insert+flush",
            Bare::Pg(_) => "bare PostgreSQL INSERT (1 commit)",
        }
    }
}

/// One concurrency level of benchmark 3.
#[derive(Debug, Clone, Default)]
pub struct RefreshLevel {
    /// Concurrent clients.
    pub conns: usize,
    /// Refreshes.
    pub refreshes: Samples,
    /// Baseline: bare durable writes to the same kind of store.
    pub bare: Samples,
}

/// Everything a flow worker needs.
#[derive(Clone)]
pub struct FlowCtx {
    /// The proxy.
    pub proxy: Arc<Proxy>,
    /// The registered client.
    pub client: RegisteredClient,
    /// One browser (HTTP client) per worker slot.
    pub browsers: Arc<Vec<reqwest::Client>>,
}

/// Logins of the people the flows are run for.
pub fn login(i: usize) -> String {
    format!("user{i}")
}

/// At most this many requests at once while setting up: below the 7 concurrent `flush_async`
/// callers at which sled 0.34.7 can hang (see `store_fixed.rs`), so setup never hangs.
pub const SAFE_CONCURRENCY: usize = 4;

/// Each person's first authorization, which goes through GitHub's own consent page; after
/// it, GitHub sends them back silently. Returns their tokens.
pub async fn first_flows(ctx: &FlowCtx, people: usize) -> Vec<Tokens> {
    let mut out = Vec::new();
    let chunk = SAFE_CONCURRENCY;
    let mut start = 0;
    while start < people {
        let end = (start + chunk).min(people);
        let handles: Vec<_> = (start..end)
            .map(|i| {
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    let http = &ctx.browsers[i % ctx.browsers.len()];
                    flows::flow(http, &ctx.proxy, &ctx.client, &login(i))
                        .await
                        .0
                })
            })
            .collect();
        for h in handles {
            out.push(
                or_hang("setup flow", Duration::from_secs(30), h)
                    .await
                    .expect("first flow"),
            );
        }
        start = end;
    }
    out
}

async fn flow_segment(
    ctx: &FlowCtx,
    conns: usize,
    dur: Duration,
    steps: Arc<Mutex<[u64; 5]>>,
) -> (Vec<u64>, Duration) {
    let ctx = ctx.clone();
    let what = format!("full flows, {conns} browsers");
    segment(&what, conns, dur, move |i, deadline: Instant| {
        let ctx = ctx.clone();
        let steps = steps.clone();
        async move {
            let http = &ctx.browsers[i];
            let who = login(i);
            let mut lat = Vec::new();
            let mut sum = Steps::default().as_array();
            while now() < deadline {
                let s = now();
                let (_, st) = flows::flow(http, &ctx.proxy, &ctx.client, &who).await;
                lat.push(ns_since(s));
                for (a, b) in sum.iter_mut().zip(st.as_array()) {
                    *a += b;
                }
            }
            let mut total = steps.lock().expect("steps");
            for (a, b) in total.iter_mut().zip(sum) {
                *a += b;
            }
            lat
        }
    })
    .await
}

async fn github_segment(
    github: &FakeGitHub,
    callback: &str,
    browsers: &Arc<Vec<reqwest::Client>>,
    conns: usize,
    dur: Duration,
) -> (Vec<u64>, Duration) {
    let base = github.base_url();
    let callback = callback.to_owned();
    let browsers = browsers.clone();
    segment(
        "fake GitHub legs",
        conns,
        dur,
        move |i, deadline: Instant| {
            let base = base.clone();
            let callback = callback.clone();
            let browsers = browsers.clone();
            async move {
                let http = &browsers[i];
                let who = login(i);
                let mut lat = Vec::new();
                while now() < deadline {
                    let s = now();
                    flows::github_legs(http, &base, &callback, &who).await;
                    lat.push(ns_since(s));
                }
                lat
            }
        },
    )
    .await
}

/// Benchmark 2. Level by level (lowest first, so a hang at a high level keeps the lower
/// ones); in each round: flows, then the GitHub legs alone, then the bare store, all at the
/// same concurrency. Prints one JSON result line per level.
pub async fn flows_per_sec(
    ctx: &FlowCtx,
    github: &FakeGitHub,
    bare: &Bare,
    levels: &[usize],
    rounds: usize,
    seg: Duration,
) {
    let callback = ctx.proxy.url("/callback/github");
    for &conns in levels {
        let mut l = FlowLevel {
            conns,
            ..FlowLevel::default()
        };
        for _ in 0..rounds {
            let steps = Arc::new(Mutex::new([0u64; 5]));
            let (ns, wall) = flow_segment(ctx, conns, seg, steps.clone()).await;
            l.flows.add(ns, wall);
            for (a, b) in l.steps.iter_mut().zip(*steps.lock().expect("steps")) {
                *a += b;
            }
            let (ns, wall) = github_segment(github, &callback, &ctx.browsers, conns, seg).await;
            l.github.add(ns, wall);
            let (ns, wall) = bare.run(conns, seg).await;
            l.bare.add(ns, wall);
        }
        eprintln!(
            "  {:>3} browsers: {:>7.0} flows/s (p50 {:>6.1} ms) | GitHub legs alone {:>7.0}/s | {} {:>7.0}/s (p50 {:>6.2} ms)",
            l.conns,
            l.flows.per_sec(),
            l.flows.pct_us(50.0) / 1000.0,
            l.github.per_sec(),
            bare.label(),
            l.bare.per_sec(),
            l.bare.pct_us(50.0) / 1000.0,
        );
        let n = l.flows.count().max(1) as f64;
        let steps_ms: Vec<f64> = l.steps.iter().map(|&t| t as f64 / n / 1e6).collect();
        println!(
            "{}",
            serde_json::json!({
                "kind": "flows",
                "conns": conns,
                "flows": l.flows.json(),
                "github": l.github.json(),
                "bare": l.bare.json(),
                "steps_ms": steps_ms,
            })
        );
    }
}

/// Benchmark 3. `families` are refresh tokens of distinct families; at each level, worker `i`
/// refreshes the families `j` with `j % conns == i` in turn, so no two requests ever present
/// the same family at once (no reuse detection, no compare-and-swap retries). Level by level,
/// each round a refresh segment then a bare-store one. Prints one JSON result line per level.
pub async fn refresh_per_sec(
    proxy: &Arc<Proxy>,
    client: &RegisteredClient,
    families: Vec<String>,
    bare: &Bare,
    levels: &[usize],
    rounds: usize,
    seg: Duration,
) {
    let families: Arc<Vec<Mutex<String>>> =
        Arc::new(families.into_iter().map(Mutex::new).collect());
    let max = levels.iter().copied().max().unwrap_or(1);
    let clients: Arc<Vec<reqwest::Client>> =
        Arc::new((0..max).map(|_| crate::harness::http()).collect());
    for &conns in levels {
        let mut l = RefreshLevel {
            conns,
            ..RefreshLevel::default()
        };
        for _ in 0..rounds {
            let fams = families.clone();
            let clients = clients.clone();
            let proxy = proxy.clone();
            let client = client.clone();
            let what = format!("refresh, {conns} clients");
            let (ns, wall) = segment(&what, conns, seg, move |i, deadline: Instant| {
                let fams = fams.clone();
                let clients = clients.clone();
                let proxy = proxy.clone();
                let client = client.clone();
                async move {
                    let http = &clients[i];
                    let mine: Vec<usize> = (i..fams.len()).step_by(conns).collect();
                    let mut lat = Vec::new();
                    let mut k = 0;
                    while now() < deadline && !mine.is_empty() {
                        let j = mine[k % mine.len()];
                        k += 1;
                        let current = fams[j].lock().expect("family").clone();
                        let s = now();
                        let next = flows::refresh(http, &proxy, &client, &current).await;
                        lat.push(ns_since(s));
                        *fams[j].lock().expect("family") = next;
                    }
                    lat
                }
            })
            .await;
            l.refreshes.add(ns, wall);
            let (ns, wall) = bare.run(conns, seg).await;
            l.bare.add(ns, wall);
        }
        eprintln!(
            "  {:>3} clients: {:>7.0} refreshes/s (p50 {:>6.2} ms, p99 {:>6.2} ms) | {} {:>7.0}/s",
            l.conns,
            l.refreshes.per_sec(),
            l.refreshes.pct_us(50.0) / 1000.0,
            l.refreshes.pct_us(99.0) / 1000.0,
            bare.label(),
            l.bare.per_sec(),
        );
        println!(
            "{}",
            serde_json::json!({
                "kind": "refresh",
                "conns": conns,
                "refresh": l.refreshes.json(),
                "bare": l.bare.json(),
            })
        );
    }
}

async fn setup(people: usize, store: Backing) -> (FlowCtx, FakeGitHub, Vec<Tokens>) {
    let github = crate::harness::fake_github(people).await;
    let proxy = Arc::new(
        crate::harness::start(crate::harness::Options {
            github: Some(&github),
            backend_url: None,
            counters: None,
            sweeper: true,
            store,
        })
        .await,
    );
    let http = crate::harness::http();
    let client = flows::register(&http, &proxy).await;
    let ctx = FlowCtx {
        proxy,
        client,
        browsers: Arc::new((0..people).map(|_| crate::harness::http()).collect()),
    };
    let tokens = first_flows(&ctx, people).await;
    (ctx, github, tokens)
}

/// Benchmark 2 in a child process, on `store`.
pub async fn flows_child(levels: &[usize], rounds: usize, seg: Duration, store: Backing) {
    let people = levels.iter().copied().max().unwrap_or(1);
    let (ctx, github, _) = setup(people, store).await;
    let bare = Bare::open(store).await;
    flows_per_sec(&ctx, &github, &bare, levels, rounds, seg).await;
}

/// Benchmark 3 in a child process, on `store`: two families per client slot, each of a
/// different person.
pub async fn refresh_child(levels: &[usize], rounds: usize, seg: Duration, store: Backing) {
    let people = 2 * levels.iter().copied().max().unwrap_or(1);
    let (ctx, _github, tokens) = setup(people, store).await;
    let bare = Bare::open(store).await;
    let families = tokens.into_iter().map(|t| t.refresh).collect();
    refresh_per_sec(
        &ctx.proxy,
        &ctx.client,
        families,
        &bare,
        levels,
        rounds,
        seg,
    )
    .await;
}
