//! Crash test (issue 7): the `mcp-oauth-proxy` binary under a load of full OAuth flows,
//! refreshes, revocations and `/mcp` calls is killed with SIGKILL at random moments and
//! restarted on the same sled directory, many times. After every restart (and at the end) it
//! checks, from the client side only, over HTTP:
//!
//! 1. a code confirmed redeemed (200) is refused when presented again, and no code is ever
//!    confirmed twice;
//! 2. a refresh token confirmed rotated away is never accepted again (`refresh_reuse =
//!    "strict"`, `refresh_grace_secs = 0`;
//!    the only tolerated answer is the documented replay of the very same successor), and no
//!    rotation ever yields two different successors;
//! 3. nothing revoked is honoured after its revocation response (`/revoke` of a refresh or an
//!    access token, the account page's "revoke", reuse detection, a replayed code);
//! 4. every client confirmed registered (201) is still known;
//! 5. every access token confirmed issued and not revoked is still accepted at `/mcp` (a
//!    `tools/call` to the demo backend: 200 = accepted, 401 = refused), every refresh token
//!    confirmed current still
//!    rotates, every consent confirmed (a redirect with a code) is still remembered, every code
//!    confirmed to a client can still be redeemed once;
//! 6. the server comes up within a bound every time (also after a kill during its start-up),
//!    completes a write right away, keeps completing them (a server whose requests that write
//!    hang while its metadata still answers is reported), and never logs a panic or an error;
//! 7. upstream-action events are not security state (issue 17): a crash may lose the last
//!    group-commit window of them, no more. Every `tools/call` sent before a kill and answered
//!    more than [`UPSTREAM_LOSS_BOUND`] before it has its `upstream_action` event (its tool is
//!    named uniquely per call) in the trail after the restart, read through the admin API
//!    every [`UPSTREAM_LOOK_EVERY`] kills and at the end. Before the final kill the load has
//!    been quiet for that long, so the final pass owes every call sent since the kill before.
//!
//! A request whose response was not received is unconfirmed: neither success nor failure. A
//! request whose TCP connection was refused never reached the server and changed nothing.
//! Checks run while the load is paused; each pass favours what has not been checked yet, and
//! the last pass (after a final kill and restart) checks everything and then presents every
//! redeemed code and every rotated-away refresh token once more.
//!
//! Uses `target/release/mcp-oauth-proxy` (CI builds it first), else `target/debug/…`
//! (`MCP_CRASH_BIN` overrides). Without a binary it passes with a notice, unless
//! `MCP_CRASH=require`. `MCP_CRASH_CYCLES` sets the number of kills, `MCP_CRASH_CONCURRENCY`
//! the number of concurrent clients, `MCP_CRASH_SEED` the seed (printed; the operations are
//! reproducible from it, the moments they meet a kill are not).
//!
//! Here the test and its driver; `model` (what the clients were told), `ctx` (the shared
//! context and its HTTP requests), `ops` (the operations of the load), `load` (the workers),
//! `checks` (after every restart and at the end), `server` (the process: start, kill, probe).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mcp_examples::backend::{BackendConfig, DemoBackend};
use mcp_examples::{FakeGitHub, FakeGitHubConfig};
use tokio::sync::RwLock;
use tokio::time::{Instant, sleep, timeout};

mod checks;
mod ctx;
mod load;
mod model;
mod ops;
mod server;

use checks::{check_pass, check_upstream_actions, final_replays};
use ctx::Ctx;
use load::worker;
use model::{Fam, Model};
use server::{Server, config_toml, kill, stable_port, start, still_serving};

/// Concurrent load tasks, and concurrent checks (`MCP_CRASH_CONCURRENCY` overrides).
const DEFAULT_CONCURRENCY: usize = 8;
/// Kills during load, unless `MCP_CRASH_CYCLES` says otherwise.
const DEFAULT_CYCLES: usize = 40;
/// The kill loop stops after this long even if cycles remain.
const LOOP_BUDGET: Duration = Duration::from_secs(90);
/// The whole test, including the final checks.
const TEST_BOUND: Duration = Duration::from_secs(240);
/// A start must answer within this.
const READY_BOUND: Duration = Duration::from_secs(30);
/// Any single HTTP request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A check pass (sampled) must finish within this.
const PASS_BOUND: Duration = Duration::from_secs(60);
/// The final, complete checks must finish within this.
const FINAL_BOUND: Duration = Duration::from_secs(90);
/// Codes live 60 s; an older one may have expired legitimately.
const CODE_FRESH: Duration = Duration::from_secs(45);
/// People at the fake GitHub.
const LOGINS: [&str; 3] = ["alice", "bob", "mallory"];
/// The proxy's `[audit] upstream_action_commit_ms` in this test (its default, set explicitly).
const UPSTREAM_COMMIT_WINDOW: Duration = Duration::from_millis(10);
/// How long before a kill a `tools/call` may have been answered and still lose its event: the
/// commit window, plus the group's write and flush, plus scheduling. The event is queued
/// before the answer's last byte leaves, so its group is due at most one window after the
/// answer; what remains is how late the committer runs and how long its flush takes. On this
/// shared 2-core machine under the test's load (8 clients, every write of theirs an fsync,
/// plus the build and other tests beside it), flushes take milliseconds to tens of them and
/// a task may wait hundreds of milliseconds for a core — and a group queued behind a slow
/// flush waits for that one and its own: CI saw an event still not durable 535 ms after its
/// answer (2026-12-02). 1000 ms covers that with room, and is shorter than the check pass
/// and load between kills (the pass alone takes 0.4–2 s), so most calls are still owed at
/// their kill, not only those of the quiet end (with 500 ms, 7719 of 8054 were).
const UPSTREAM_MARGIN: Duration = Duration::from_millis(1000);
/// The trail is read for owed upstream-action events after every this many kills.
const UPSTREAM_LOOK_EVERY: usize = 8;
/// [`UPSTREAM_COMMIT_WINDOW`] plus [`UPSTREAM_MARGIN`].
const UPSTREAM_LOSS_BOUND: Duration = Duration::from_millis(
    UPSTREAM_COMMIT_WINDOW.as_millis() as u64 + UPSTREAM_MARGIN.as_millis() as u64,
);

/// SplitMix64: enough for choosing moments and operations reproducibly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % (n.max(1) as u64)) as usize
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64) / ((1u64 << 53) as f64) < p
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_at_random_moments_loses_nothing_confirmed_and_honours_nothing_revoked() {
    if crate::support::postgres_selected() {
        // The suite's re-run on PostgreSQL: this test starts the binary on its sled store.
        eprintln!("NOTICE: crash test skipped in the PostgreSQL run (it tests the sled store)");
        return;
    }
    let Some(bin) = crate::support::binary::built_proxy_binary() else {
        assert!(
            std::env::var("MCP_CRASH").as_deref() != Ok("require"),
            "MCP_CRASH=require but no proxy binary: run `cargo build --release -p mcp-oauth-proxy`"
        );
        eprintln!(
            "NOTICE: crash test skipped: no target/release/mcp-oauth-proxy (build it with `cargo build --release -p mcp-oauth-proxy`)"
        );
        return;
    };
    match timeout(TEST_BOUND, crash_test(bin)).await {
        Ok(()) => {}
        Err(_) => panic!("the crash test did not finish within {TEST_BOUND:?}"),
    }
}

async fn crash_test(bin: PathBuf) {
    let test_started = Instant::now();
    mcp_oauth_proxy::install_crypto_provider();
    let seed = env_number("MCP_CRASH_SEED").unwrap_or_else(|| {
        u64::from_le_bytes(mcp_oauth_proxy::crypto::random_bytes::<8>().unwrap())
    });
    let cycles = env_number("MCP_CRASH_CYCLES").map_or(DEFAULT_CYCLES, |n| n as usize);
    let concurrency = env_number("MCP_CRASH_CONCURRENCY")
        .map_or(DEFAULT_CONCURRENCY, |n| n as usize)
        .max(1);
    let mut rng = Rng(seed);
    let age = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .map_or_else(|| "?".to_owned(), |d| format!("{} s", d.as_secs()));
    eprintln!(
        "crash test: binary {} (built {age} ago), seed {seed} (MCP_CRASH_SEED), {cycles} kills (MCP_CRASH_CYCLES), {concurrency} concurrent clients (MCP_CRASH_CONCURRENCY)",
        bin.display()
    );
    if crate::support::binary::older_than_sources(&bin) {
        eprintln!(
            "WARNING: {} is older than the proxy's sources: rebuild it (`cargo build --release -p mcp-oauth-proxy`) to test the current code",
            bin.display()
        );
    }

    let github = FakeGitHub::start(FakeGitHubConfig::demo(
        "gh-client-id",
        "gh-client-secret",
        "http://127.0.0.1:1/unset",
    ))
    .await
    .unwrap();
    // The backend outlives every kill of the proxy, like a real one.
    let backend = DemoBackend::start(BackendConfig {
        github_api_url: github.api_url(),
        prefer_sse: false,
    })
    .await
    .unwrap();
    let port = stable_port(&mut rng);
    let admin_port = loop {
        let p = stable_port(&mut rng);
        if p != port {
            break p;
        }
    };
    let base = format!("http://127.0.0.1:{port}");
    github.set_callback_url(&format!("{base}/callback/github"));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        config_toml(
            port,
            admin_port,
            &backend.url(),
            &github,
            &dir.path().join("store"),
        ),
    )
    .unwrap();

    #[allow(clippy::disallowed_methods)] // the test's client, not the proxy's outbound traffic
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let mut server = Server::new(bin, config, dir.path().to_owned());
    let ctx = Arc::new(Ctx {
        http: http.clone(),
        base: base.clone(),
        admin: format!("http://127.0.0.1:{admin_port}"),
        model: Mutex::new(Model::default()),
        gate: RwLock::new(()),
        stop: AtomicBool::new(false),
        hung: AtomicBool::new(false),
        concurrency,
    });

    let mut healthy = start(&mut server, &ctx, &mut rng).await;
    let workers: Vec<_> = (0..concurrency)
        .map(|w| tokio::spawn(worker(ctx.clone(), w, rng.next())))
        .collect();

    let loop_started = Instant::now();
    let mut cycle = 0;
    while healthy && cycle < cycles && loop_started.elapsed() < LOOP_BUDGET {
        cycle += 1;
        let load_ms = rng.range(150, 900);
        sleep(Duration::from_millis(load_ms)).await;
        let before = {
            let m = ctx.m();
            m.stats.codes_redeemed + m.stats.refreshes
        };
        kill(&mut server, &ctx);
        let killed = Instant::now();
        healthy = start(&mut server, &ctx, &mut rng).await;
        if !healthy {
            break;
        }
        let pass_started = Instant::now();
        let checks = {
            let _exclusive = ctx.gate.write().await;
            // The trail is read every few restarts (and at the end): reading it costs more
            // as it grows, and an event durable at one kill is still there at the next.
            let look = cycle % UPSTREAM_LOOK_EVERY == 0;
            check_upstream_actions(&ctx, killed, look).await;
            timeout(PASS_BOUND, check_pass(&ctx, false, &mut rng)).await
        };
        healthy = still_serving(&ctx, &mut server, checks.is_err()).await;
        let (fams, viol) = {
            let m = ctx.m();
            (m.families.len(), m.violations.len())
        };
        eprintln!(
            "cycle {cycle:>2}: killed after {load_ms} ms of load ({before} codes+refreshes so far), restarted, {} checks in {} ms, {fams} families, {viol} violations",
            checks.unwrap_or_default(),
            pass_started.elapsed().as_millis()
        );
        if viol > 50 {
            break;
        }
    }

    // Stop the load, kill once more, restart, and check everything.
    ctx.stop.store(true, Ordering::SeqCst);
    for w in workers {
        if healthy {
            let _ = timeout(Duration::from_secs(40), w).await;
        } else {
            w.abort();
        }
    }
    let mut full = 0;
    let mut final_ms = 0;
    let mut final_kill = None;
    if healthy {
        // Quiet for longer than a lost upstream action may be old: the final pass owes every
        // call's event.
        sleep(UPSTREAM_LOSS_BOUND + Duration::from_millis(100)).await;
        kill(&mut server, &ctx);
        final_kill = Some(Instant::now());
        healthy = start(&mut server, &ctx, &mut rng).await;
    }
    if healthy {
        let final_started = Instant::now();
        let checked = {
            let _exclusive = ctx.gate.write().await;
            if let Some(killed) = final_kill {
                check_upstream_actions(&ctx, killed, true).await;
            }
            timeout(FINAL_BOUND, async {
                check_pass(&ctx, true, &mut rng).await + final_replays(&ctx).await
            })
            .await
        };
        final_ms = final_started.elapsed().as_millis();
        if still_serving(&ctx, &mut server, checked.is_err()).await {
            if checked.is_err() {
                ctx.violation(format!(
                    "the final checks did not finish within {FINAL_BOUND:?} although the server kept answering"
                ));
            }
            full = checked.unwrap_or_default();
            for p in server.log_problems() {
                ctx.violation(format!("the server logged: {p}"));
            }
        }
    }
    server.kill();

    let m = ctx.m();
    let s = &m.stats;
    let live = m.families.iter().filter(|f| f.state == Fam::Live).count();
    let revoked = m
        .families
        .iter()
        .filter(|f| matches!(f.state, Fam::Revoked(_)))
        .count();
    eprintln!(
        "crash test summary: binary {}, seed {seed}, {concurrency} concurrent clients\n  kills: {} (the last one after the load stopped) + {} during start-up, {} starts, ready in {} ms on average (max {} ms)\n  clients registered {}, consent pages {}, consent skips {}, codes issued {}, codes redeemed {} (= full flows completed), families {} ({live} live and {revoked} revoked before the final replays)\n  refreshes {}, replays of the previous token {}, revocations: refresh {} access {} account page {}, reuse detected {}, redeemed codes presented again and refused {}\n  /mcp calls {} (tools/calls whose event was looked for in the trail after a kill {}, answered within {} ms of a kill {}), checks {} ({full} in the final pass, {final_ms} ms), requests not sent {}, lost {} (timed out {})\n  total {} s, violations {}",
        server.bin.display(),
        s.kills,
        s.startup_kills,
        s.starts,
        s.ready_total_ms / s.starts.max(1),
        s.ready_max_ms,
        s.registrations,
        s.consent_pages,
        s.consent_skips,
        s.codes_issued,
        s.codes_redeemed,
        m.families.len(),
        s.refreshes,
        s.replays,
        s.revoked_refresh,
        s.revoked_access,
        s.revoked_account,
        s.reuse_detected,
        s.codes_replayed,
        s.mcp_calls,
        s.upstream_checked,
        UPSTREAM_LOSS_BOUND.as_millis(),
        s.upstream_exempt,
        s.checks,
        s.not_sent,
        s.lost,
        s.timeouts,
        test_started.elapsed().as_secs(),
        m.violations.len(),
    );
    for (why, n) in &m.lost_reasons {
        eprintln!("  lost answers: {n} x {why}");
    }
    if !m.violations.is_empty() {
        let kept = dir.keep();
        let shown = m.violations.len().min(40);
        panic!(
            "{} violation(s) (seed {seed}; store and logs kept in {}); the first {shown}:\n{}",
            m.violations.len(),
            kept.display(),
            m.violations[..shown].join("\n")
        );
    }
    assert!(s.kills >= 2, "the server was never killed under load");
    assert!(
        s.codes_redeemed > 0 && s.refreshes > 0,
        "the load did nothing"
    );
    assert!(
        s.upstream_checked > 0,
        "no tools/call was checked against the trail"
    );
}
