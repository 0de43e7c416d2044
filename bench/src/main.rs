//! proxy-bench: the benchmark suite of mcp-oauth-proxy (issues 7 and 17). Every comparison is
//! a ratio measured side by side in the same run, with absolute figures for context:
//!
//! 1. `tools/call` straight to a trivial backend, through nginx as a plain reverse proxy,
//!    through a bare forwarder, and through the proxy on sled and on PostgreSQL (1, 16, 64
//!    connections), in interleaved segments with one load generator;
//! 2. full authorization flows per second against a durable store, sled and PostgreSQL, with
//!    the GitHub legs alone and the bare store measured in the same rounds;
//! 3. refresh grants per second, durable, many families at once, sled and PostgreSQL;
//! 4. resident memory of the proxy idle and with 1 million tokens, and the `/mcp` token check
//!    with 10 thousand vs 1 million live tokens (context).
//!
//! nginx is installed from Debian's package when missing; PostgreSQL is the machine's server
//! (`--pg-url`, default [`pg::DEFAULT_ADMIN_URL`]), in a scratch database made for the run and
//! dropped at its end. A side that cannot be had is reported SKIPPED with the reason, and the
//! targets that need it as MISS "not measured".
//!
//! `cargo run --release -p proxy-bench [-- --quick]`. Not part of the test suite. Each
//! benchmark runs in a child process of this binary (`--child NAME`), so memory figures are
//! the proxy's own and a proxy that hangs (as sled 0.34.7's `flush_async` once made it) ends
//! only its own benchmark, which is then reported as hung. Progress goes to stderr, the
//! report to stdout.

// A benchmark binary: a broken setup (a refused request, a failed bind) must stop the run
// loudly rather than produce numbers, so unwrap/expect/panic are the right tools here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod backend;
mod counting;
mod flows;
mod forwarder;
mod harness;
mod mcp_bench;
mod nginx;
mod oauth_bench;
mod pg;
mod sled_baseline;
mod timing;
mod token_check;

use std::fmt::Write as _;
use std::io::Read as _;
use std::sync::Arc;
use std::time::Duration;

use mcp_oauth_proxy::clock::{Clock, SystemClock};
use serde_json::{Value, json};

use crate::counting::Counters;
use crate::timing::now;

/// Sizes of a run.
struct Plan {
    quick: bool,
    mcp_levels: Vec<usize>,
    mcp_rounds: usize,
    mcp_seg: Duration,
    oauth_levels: Vec<usize>,
    oauth_rounds: usize,
    oauth_seg: Duration,
    small: u64,
    large: u64,
    check_rounds: usize,
    check_calls: usize,
    grace: Duration,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                mcp_levels: vec![1, 16, 64],
                mcp_rounds: 2,
                mcp_seg: Duration::from_millis(300),
                oauth_levels: vec![4, 16, 64],
                oauth_rounds: 1,
                oauth_seg: Duration::from_millis(400),
                small: 10_000,
                large: 100_000,
                check_rounds: 2,
                check_calls: 5_000,
                grace: Duration::from_secs(3),
            }
        } else {
            Plan {
                quick,
                mcp_levels: vec![1, 16, 64],
                mcp_rounds: 5,
                mcp_seg: Duration::from_millis(1_000),
                oauth_levels: vec![4, 16, 64],
                oauth_rounds: 3,
                oauth_seg: Duration::from_millis(1_500),
                small: 10_000,
                large: 1_000_000,
                check_rounds: 6,
                check_calls: 20_000,
                grace: Duration::from_secs(10),
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let plan = Plan::new(quick);
    timing::set_grace(plan.grace);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    if let Some(dir) = args
        .iter()
        .position(|a| a == "--tmp")
        .and_then(|p| args.get(p + 1))
    {
        harness::set_tmp_base(dir.into());
    }
    if let Some(mb) = args
        .iter()
        .position(|a| a == "--cache-mb")
        .and_then(|p| args.get(p + 1))
        .and_then(|s| s.parse().ok())
    {
        harness::set_cache_mb(mb);
    }
    if let Some(url) = arg(&args, "--pg-url").filter(|_| arg(&args, "--child").is_some()) {
        harness::set_pg_url(url.to_owned());
    }
    if let Some(reason) = arg(&args, "--pg-skip") {
        harness::set_pg_skip(reason.to_owned());
    }
    match args
        .iter()
        .position(|a| a == "--child")
        .and_then(|p| args.get(p + 1))
    {
        Some(name) => rt.block_on(child(name, &plan, &args)),
        None => rt.block_on(parent(plan, &args)),
    }
}

/// The value after `name`, if given.
fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|p| args.get(p + 1))
        .map(String::as_str)
}

/// Levels given as `--levels 1,16,64`, else `default`.
fn levels_arg(args: &[String], default: &[usize]) -> Vec<usize> {
    args.iter()
        .position(|a| a == "--levels")
        .and_then(|p| args.get(p + 1))
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

async fn child(name: &str, plan: &Plan, args: &[String]) {
    match name {
        "calib" => calibrate().await,
        "mcp" => {
            let levels = levels_arg(args, &plan.mcp_levels);
            let nginx = match (arg(args, "--nginx"), arg(args, "--nginx-skip")) {
                (Some(bin), _) => Ok(bin.into()),
                (None, Some(reason)) => Err(reason.to_owned()),
                (None, None) => nginx::ensure(),
            };
            let only: Option<Vec<String>> =
                arg(args, "--sides").map(|s| s.split(',').map(str::to_owned).collect());
            mcp_bench::child(
                &levels,
                plan.mcp_rounds,
                plan.mcp_seg,
                nginx,
                only.as_deref(),
            )
            .await;
        }
        "flows" => {
            let levels = levels_arg(args, &plan.oauth_levels);
            let store = harness::Backing::parse(arg(args, "--store").unwrap_or("sled"));
            oauth_bench::flows_child(&levels, plan.oauth_rounds, plan.oauth_seg, store).await;
        }
        "refresh" => {
            let levels = levels_arg(args, &plan.oauth_levels);
            let store = harness::Backing::parse(arg(args, "--store").unwrap_or("sled"));
            oauth_bench::refresh_child(&levels, plan.oauth_rounds, plan.oauth_seg, store).await;
        }
        "tokens" => {
            token_check::child(plan.small, plan.large, plan.check_rounds, plan.check_calls).await;
        }
        other => panic!("unknown child {other}"),
    }
}

/// Store operations of one flow, one refresh and one proxied `tools/call`, counted on a proxy
/// whose store is wrapped in a counter (never timed).
async fn calibrate() {
    let counters = Arc::new(Counters::default());
    let backend_url = backend::start().await;
    let github = harness::fake_github(1).await;
    let proxy = harness::start(harness::Options {
        github: Some(&github),
        backend_url: Some(backend_url),
        counters: Some(counters.clone()),
        sweeper: false,
        store: harness::Backing::Sled,
    })
    .await;
    let http = harness::http();
    let client = flows::register(&http, &proxy).await;
    let _ = flows::flow(&http, &proxy, &client, "user0").await;
    let before = counters.snapshot();
    let (tokens, _) = flows::flow(&http, &proxy, &client, "user0").await;
    let per_flow = counters.snapshot().since(&before);
    let before = counters.snapshot();
    let _ = flows::refresh(&http, &proxy, &client, &tokens.refresh).await;
    let per_refresh = counters.snapshot().since(&before);
    let target = mcp_bench::Target {
        url: proxy.url("/mcp"),
        token: tokens.access.clone(),
    };
    mcp_bench::call(&http, &target).await;
    // A call's audit event is group-committed in the background within 10 ms (`[audit]`): let
    // the warm-up call's land before counting, and the counted call's before reading.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let before = counters.snapshot();
    mcp_bench::call(&http, &target).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let per_call = counters.snapshot().since(&before);
    let c = |x: counting::Counts| json!({"writes": x.durable_writes(), "flushes": x.flushes, "by_keyspace": x.writes, "reads": x.reads, "scans": x.scans});
    println!(
        "{}",
        json!({"kind": "calib", "flow": c(per_flow), "refresh": c(per_refresh), "call": c(per_call)})
    );
}

/// What a child printed, whether it reported a hang, and how busy the rest of the machine was.
struct ChildOut {
    lines: Vec<Value>,
    hung: Option<String>,
    /// Share of the machine's CPU used by other processes while the child ran.
    others: f64,
}

impl ChildOut {
    fn of(&self, kind: &str) -> Vec<&Value> {
        self.lines.iter().filter(|v| v["kind"] == kind).collect()
    }
}

async fn run_child(name: &str, extra: Vec<String>, quick: bool, budget: Duration) -> ChildOut {
    let exe = std::env::current_exe().expect("current exe");
    let mut args = vec!["--child".to_owned(), name.to_owned()];
    if quick {
        args.push("--quick".to_owned());
    }
    if let Some(base) = TMP.get() {
        args.push("--tmp".to_owned());
        args.push(base.path().display().to_string());
    }
    args.push("--cache-mb".to_owned());
    args.push(harness::cache_mb().to_string());
    args.extend(PG_ARGS.get().cloned().unwrap_or_default());
    args.extend(extra);
    let ticks = timing::cpu_ticks();
    let mut child = std::process::Command::new(exe)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let start = now();
    let mut killed = false;
    loop {
        if child.try_wait().expect("wait child").is_some() {
            break;
        }
        if now().duration_since(start) > budget {
            // The child's own watchdog should have fired; this is the backstop.
            let _ = child.kill();
            let _ = child.wait();
            killed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut text = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut text);
    }
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let hung = lines
        .iter()
        .find(|v| v["kind"] == "hung")
        .map(|v| v["what"].as_str().unwrap_or("?").to_owned())
        .or_else(|| killed.then(|| format!("{name} (killed after {} s)", budget.as_secs())));
    let others = timing::others_share(ticks, timing::cpu_ticks());
    if others > 0.05 {
        eprintln!(
            "  note: other processes used {:.0}% of the machine's CPU meanwhile",
            others * 100.0
        );
    }
    ChildOut {
        lines,
        hung,
        others,
    }
}

/// The run's directory for stores (removed when the parent ends).
static TMP: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();

fn noise(out: &ChildOut) -> String {
    format!(
        "other processes used {:.0}% of the machine's CPU meanwhile",
        out.others * 100.0
    )
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `/proc/loadavg`'s 1, 5 and 15 minute figures.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".to_owned())
}

fn mem_total() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map(|kib| format!("{:.1} GiB", kib / 1_048_576.0))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `YYYY-MM-DD HH:MM UTC` from Unix seconds (civil-from-days, proleptic Gregorian).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or(0.0)
}

/// One line of the summary table.
struct Row {
    name: String,
    measured: String,
    target: String,
    ratio: Option<f64>,
    pass: Option<bool>,
}

fn row(name: &str, measured: String, target: &str, ratio: Option<f64>, pass: Option<bool>) -> Row {
    Row {
        name: name.to_owned(),
        measured,
        target: target.to_owned(),
        ratio,
        pass,
    }
}

fn level<'a>(out: &'a ChildOut, kind: &str, conns: usize) -> Option<&'a Value> {
    out.of(kind)
        .into_iter()
        .find(|v| v["conns"].as_u64() == Some(conns as u64))
}

/// The sides of benchmark 1, in the order the report lists them: JSON key, label.
const SIDES: [(&str, &str); 5] = [
    ("direct", "direct"),
    ("nginx", "nginx"),
    ("bare", "bare forwarder"),
    ("sled", "proxy (sled)"),
    ("pg", "proxy (pg)"),
];

/// One side's samples at one level, if it was measured.
fn side<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|s| s.is_object())
}

/// `a.per_s / b.per_s` for sides `a` and `b` of one level.
fn per_s_ratio(v: &Value, a: &str, b: &str) -> Option<f64> {
    let (x, y) = (side(v, a)?, side(v, b)?);
    Some(f(x, &["per_s"]) / f(y, &["per_s"]).max(f64::MIN_POSITIVE))
}

/// Side `key`'s p`pct` minus direct's, µs.
fn added(v: &Value, key: &str, pct: &str) -> Option<f64> {
    Some(f(side(v, key)?, &[pct]) - f(side(v, "direct")?, &[pct]))
}

/// The machine's busy CPU per call of side `key` beyond direct's, µs: an estimate of the
/// side's own cost (direct's is the load generator's and the backend's, which every side also
/// spends; at direct's higher call rate their share per call may be somewhat lower).
fn own_cpu(v: &Value, key: &str) -> Option<f64> {
    let cpu = |k: &str| side(v, k)?.get("cpu_us_per_op")?.as_f64();
    Some(cpu(key)? - cpu("direct")?)
}

/// The machine-busy share from which a level's calls/s are taken as bound by CPU.
const BUSY: f64 = 0.9;

/// What the proxy (sled) may spend of its own per call to reach `target` × nginx's calls/s,
/// keeping the busy CPU it had: calls/s = busy CPU ÷ CPU per call, so its CPU per call would
/// have to be its busy CPU ÷ (`target` × nginx's calls/s), i.e. its CPU per call × (its calls/s
/// ÷ nginx's) ÷ `target`; less direct's. Meaningful only while the machine is busy: also
/// returns the lowest busy share of direct, nginx and the proxy.
fn own_budget(v: &Value, target: f64) -> Option<(f64, f64)> {
    let cpu = |k: &str| side(v, k)?.get("cpu_us_per_op")?.as_f64();
    let busy = ["direct", "nginx", "sled"]
        .iter()
        .map(|k| side(v, k)?.get("machine_busy")?.as_f64())
        .try_fold(f64::INFINITY, |m, b| b.map(|b| m.min(b)))?;
    let needed = cpu("sled")? * per_s_ratio(v, "sled", "nginx")? / target;
    Some((needed - cpu("direct")?, busy))
}

/// [`own_budget`] at 0.8× for the report, or why there is none. The busy share is floored, so
/// that what is printed agrees with the gate.
fn budget_text(v: &Value) -> String {
    match own_budget(v, 0.8) {
        Some((budget, busy)) if busy >= BUSY => format!(
            "0.80× nginx's calls/s leaves it {budget:.1} µs (machine busy ≥ {:.0}%)",
            (busy * 100.0).floor()
        ),
        Some((_, busy)) => format!(
            "no budget: machine busy {:.0}%, calls/s not bound by the machine's CPU here",
            (busy * 100.0).floor()
        ),
        None => "no budget: nginx or direct not measured".to_owned(),
    }
}

/// Why side `key` was not measured, if the child said.
fn skip_reason(out: &ChildOut, key: &str) -> Option<String> {
    out.of("skipped")
        .into_iter()
        .find(|v| v["side"] == key)
        .map(|v| v["reason"].as_str().unwrap_or("?").to_owned())
}

fn mcp_section(report: &mut String, out: &ChildOut) {
    let _ = writeln!(report, "   [{}]", noise(out));
    for (key, label) in SIDES {
        if let Some(r) = skip_reason(out, key) {
            let _ = writeln!(report, "   {label}: SKIPPED ({r})");
        }
    }
    let _ = writeln!(
        report,
        "   conns | side           |  calls/s | ×direct | p50 µs  | p99 µs  | added p50 µs | added p99 µs | CPU µs/call | own CPU µs"
    );
    for v in out.of("mcp") {
        let conns = v["conns"].as_u64().unwrap_or(0);
        for (key, label) in SIDES {
            let Some(x) = side(v, key) else { continue };
            let (a50, a99) = if key == "direct" {
                ("—".to_owned(), "—".to_owned())
            } else {
                (
                    format!("{:.1}", added(v, key, "p50_us").unwrap_or(0.0)),
                    format!("{:.1}", added(v, key, "p99_us").unwrap_or(0.0)),
                )
            };
            let cpu = x
                .get("cpu_us_per_op")
                .and_then(Value::as_f64)
                .map_or("—".to_owned(), |c| format!("{c:.1}"));
            let own = match key {
                "direct" => None,
                _ => own_cpu(v, key),
            }
            .map_or("—".to_owned(), |c| format!("{c:.1}"));
            let _ = writeln!(
                report,
                "   {conns:>5} | {label:<14} | {:>8.0} | {:>6.2}× | {:>7.1} | {:>7.1} | {a50:>12} | {a99:>12} | {cpu:>11} | {own:>10}",
                f(x, &["per_s"]),
                per_s_ratio(v, key, "direct").unwrap_or(0.0),
                f(x, &["p50_us"]),
                f(x, &["p99_us"]),
            );
        }
        let fmt = |r: Option<f64>| r.map_or("not measured".to_owned(), |r| format!("{r:.2}×"));
        let added_ratio = match (added(v, "sled", "p50_us"), added(v, "nginx", "p50_us")) {
            (Some(p), Some(n)) if n > 0.0 => Some(p / n),
            _ => None,
        };
        let _ = writeln!(
            report,
            "         calls/s proxy(sled)/nginx {}, proxy(sled)/bare forwarder {}, proxy(pg)/proxy(sled) {}; added p50 proxy(sled)/nginx {}",
            fmt(per_s_ratio(v, "sled", "nginx")),
            fmt(per_s_ratio(v, "sled", "bare")),
            fmt(per_s_ratio(v, "pg", "sled")),
            fmt(added_ratio),
        );
        if let Some(own) = own_cpu(v, "sled") {
            let _ = writeln!(
                report,
                "         own CPU per call proxy(sled) {own:.1} µs; {}",
                budget_text(v)
            );
        }
    }
    let _ = writeln!(
        report,
        "   (added = side minus direct, same rounds. nginx: plain reverse proxy, keep-alive upstream. bare forwarder: axum in,\n    reqwest out, answer streamed back; no auth, parsing, store or audit: the second hop alone, built from the proxy's crates.\n    CPU µs/call: the whole machine's busy CPU during the side's segments, per call; own: less direct's (the load generator's\n    and the backend's), an estimate of the side's own cost. Budget: what the proxy's own CPU per call may be for 0.80× nginx's\n    calls/s at the busy CPU it had (calls/s = busy CPU ÷ CPU per call); given where the machine was ≥ 90% busy)"
    );
    if let Some(h) = &out.hung {
        let _ = writeln!(
            report,
            "   HUNG: {h} (no response within the grace period; later levels not run)"
        );
    }
}

/// The bare-store baseline's name, and what one operation's writes wait for on that store.
fn bare_names(store: harness::Backing) -> (&'static str, &'static str) {
    match store {
        harness::Backing::Sled => ("bare sled insert+flush", "flushes"),
        harness::Backing::Postgres => ("bare PG INSERT (1 commit)", "WAL-flushing commits"),
    }
}

fn flows_section(report: &mut String, store: harness::Backing, out: &ChildOut, waits: f64) {
    let (bare, per) = bare_names(store);
    let _ = writeln!(report, "   [proxy on {}; {}]", store.name(), noise(out));
    let _ = writeln!(
        report,
        "   browsers | flows/s | flow p50/p99 ms | GitHub legs alone/s | {bare}/s (p50 ms) | bare/s ÷ {waits:.0} {per} per flow"
    );
    for v in out.of("flows") {
        let _ = writeln!(
            report,
            "   {:>8} | {:>7.0} | {:>6.1} / {:>6.1} | {:>19.0} | {:>w$.0} ({:>5.2}) | {:>8.0}",
            v["conns"].as_u64().unwrap_or(0),
            f(v, &["flows", "per_s"]),
            f(v, &["flows", "p50_us"]) / 1000.0,
            f(v, &["flows", "p99_us"]) / 1000.0,
            f(v, &["github", "per_s"]),
            f(v, &["bare", "per_s"]),
            f(v, &["bare", "p50_us"]) / 1000.0,
            f(v, &["bare", "per_s"]) / waits.max(1.0),
            w = bare.chars().count() + 2,
        );
    }
    if let Some(best) = best(out, "flows", "flows") {
        let _ = writeln!(
            report,
            "   where a flow's time goes at {} browsers (mean per flow):",
            best["conns"]
        );
        for (i, name) in flows::STEP_NAMES.iter().enumerate() {
            let ms = best["steps_ms"][i].as_f64().unwrap_or(0.0);
            let _ = writeln!(report, "     {name:<32} {ms:>7.2} ms");
        }
    }
    if let Some(h) = &out.hung {
        let _ = writeln!(
            report,
            "   HUNG: {h} (no response within the grace period; later levels not run)"
        );
    }
}

fn refresh_section(report: &mut String, store: harness::Backing, out: &ChildOut, waits: f64) {
    let (bare, per) = bare_names(store);
    let _ = writeln!(report, "   [proxy on {}; {}]", store.name(), noise(out));
    let _ = writeln!(
        report,
        "   clients | refreshes/s | p50/p99 ms | {bare}/s | bare/s ÷ {waits:.0} {per} per refresh"
    );
    for v in out.of("refresh") {
        let _ = writeln!(
            report,
            "   {:>7} | {:>11.0} | {:>5.2} / {:>6.2} | {:>w$.0} | {:>8.0}",
            v["conns"].as_u64().unwrap_or(0),
            f(v, &["refresh", "per_s"]),
            f(v, &["refresh", "p50_us"]) / 1000.0,
            f(v, &["refresh", "p99_us"]) / 1000.0,
            f(v, &["bare", "per_s"]),
            f(v, &["bare", "per_s"]) / waits.max(1.0),
            w = bare.chars().count() + 2,
        );
    }
    if let Some(h) = &out.hung {
        let _ = writeln!(
            report,
            "   HUNG: {h} (no response within the grace period; later levels not run)"
        );
    }
}

/// The level with the highest `field.per_s` among lines of `kind`.
fn best<'a>(out: &'a ChildOut, kind: &str, field: &str) -> Option<&'a Value> {
    out.of(kind)
        .into_iter()
        .max_by(|a, b| f(a, &[field, "per_s"]).total_cmp(&f(b, &[field, "per_s"])))
}

/// The row of a target that was not measured.
fn not_measured(name: &str, target: &str, why: &str) -> Row {
    row(
        name,
        format!("not measured ({why})"),
        target,
        None,
        Some(false),
    )
}

/// Rows for a throughput target ("best level"). `out` is `Err(reason)` when the benchmark was
/// not run.
fn throughput_row(
    rows: &mut Vec<Row>,
    name: &str,
    out: Result<&ChildOut, &str>,
    kind: &str,
    field: &str,
    unit: &str,
    target: f64,
) {
    let t = format!("≥ {target:.0}/s");
    let out = match out {
        Ok(o) => o,
        Err(why) => return rows.push(not_measured(name, &t, why)),
    };
    let hung = out.hung.is_some();
    match best(out, kind, field) {
        Some(b) => {
            let x = f(b, &[field, "per_s"]);
            let mut measured = format!("{x:.0}/s at {} {unit}", b["conns"]);
            if hung {
                measured.push_str(", then HUNG");
            }
            rows.push(row(
                name,
                measured,
                &t,
                Some(x / target),
                Some(x >= target && !hung),
            ));
        }
        None => rows.push(row(name, "HUNG".to_owned(), &t, None, Some(false))),
    }
}

/// Summary rows of benchmark 1: issue 17's targets, as ratios of the same rounds.
fn mcp_rows(rows: &mut Vec<Row>, out: &ChildOut) {
    let unmeasured = |key: &str, what: &str| -> String {
        match skip_reason(out, key) {
            Some(r) => format!("{what} SKIPPED: {r}"),
            None if out.hung.is_some() => "HUNG".to_owned(),
            None => format!("{what} not in the results"),
        }
    };
    let at16 = level(out, "mcp", 16);
    let at1 = level(out, "mcp", 1);
    // tools/call at 16 connections: proxy (sled) ≥ 0.8× nginx.
    let name = "tools/call calls/s, 16 conn: proxy (sled) / nginx";
    match at16.and_then(|v| per_s_ratio(v, "sled", "nginx")) {
        Some(r) => rows.push(row(
            name,
            format!("{r:.2}×"),
            "≥ 0.80×",
            Some(r / 0.8),
            Some(r >= 0.8),
        )),
        None => rows.push(not_measured(
            name,
            "≥ 0.80×",
            &if at16.is_some() {
                unmeasured("nginx", "nginx")
            } else {
                unmeasured("sled", "level 16")
            },
        )),
    }
    if let Some(v) = at16 {
        let ctx = |a: &str, b: &str| {
            per_s_ratio(v, a, b).map_or("not measured".to_owned(), |r| format!("{r:.2}×"))
        };
        rows.push(row(
            "  same rounds, 16 conn: proxy (sled) / bare forwarder",
            ctx("sled", "bare"),
            "— (context)",
            None,
            None,
        ));
        rows.push(row(
            "  same rounds, 16 conn: nginx / direct, bare forwarder / direct",
            format!("{} / {}", ctx("nginx", "direct"), ctx("bare", "direct")),
            "— (context)",
            None,
            None,
        ));
        let us = |k: &str| own_cpu(v, k).map_or("—".to_owned(), |c| format!("{c:.0}"));
        if own_cpu(v, "sled").is_some() {
            rows.push(row(
                "  same rounds, 16 conn: own CPU per call, proxy (sled) / nginx / bare forwarder",
                format!(
                    "{} / {} / {} µs; {}",
                    us("sled"),
                    us("nginx"),
                    us("bare"),
                    budget_text(v)
                ),
                "— (context)",
                None,
                None,
            ));
        }
    }
    // Added p50 at 1 connection: proxy (sled) ≤ 1.5× nginx's.
    let name = "tools/call added p50, 1 conn: proxy (sled) / nginx";
    match at1.map(|v| (added(v, "sled", "p50_us"), added(v, "nginx", "p50_us"))) {
        Some((Some(p), Some(n))) if n > 0.0 => {
            let r = p / n;
            rows.push(row(
                name,
                format!("{r:.2}× ({p:.0} vs {n:.0} µs)"),
                "≤ 1.50×",
                Some(r / 1.5),
                Some(r <= 1.5),
            ));
        }
        Some((Some(p), Some(n))) => rows.push(not_measured(
            name,
            "≤ 1.50×",
            &format!("nginx added {n:.0} µs, proxy {p:.0} µs: no ratio"),
        )),
        Some((_, None)) => rows.push(not_measured(name, "≤ 1.50×", &unmeasured("nginx", "nginx"))),
        _ => rows.push(not_measured(
            name,
            "≤ 1.50×",
            &unmeasured("sled", "level 1"),
        )),
    }
    if let Some(v) = at1 {
        let us = |k: &str| added(v, k, "p50_us").map_or("—".to_owned(), |a| format!("{a:.0} µs"));
        rows.push(row(
            "  same rounds, added p50 1 conn: bare forwarder / proxy (pg)",
            format!("{} / {}", us("bare"), us("pg")),
            "— (context)",
            None,
            None,
        ));
    }
    // PostgreSQL: tools/call ≥ 0.7× sled.
    let name = "tools/call calls/s, 16 conn: proxy (pg) / proxy (sled)";
    match at16.and_then(|v| per_s_ratio(v, "pg", "sled")) {
        Some(r) => rows.push(row(
            name,
            format!("{r:.2}×"),
            "≥ 0.70×",
            Some(r / 0.7),
            Some(r >= 0.7),
        )),
        None => rows.push(not_measured(
            name,
            "≥ 0.70×",
            &if at16.is_some() {
                unmeasured("pg", "PostgreSQL")
            } else {
                unmeasured("sled", "level 16")
            },
        )),
    }
}

/// The `--pg-url` / `--pg-skip` arguments every child gets.
static PG_ARGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();

async fn parent(plan: Plan, args: &[String]) {
    let started = now();
    let _ = TMP.set(harness::tempdir("proxy-bench-run-"));
    let run_ticks = timing::cpu_ticks();
    let mut report = String::new();
    let date = utc(SystemClock.now().0);
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let command = format!(
        "cargo run --release -p proxy-bench{}",
        if args.len() > 1 {
            format!(
                " --{}",
                args.iter().skip(1).fold(String::new(), |a, s| a + " " + s)
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        report,
        "proxy-bench {} — {date}\nmachine: {nproc} CPUs ({}), {} RAM; load average at start {}\ncommand: {command}",
        if plan.quick { "--quick" } else { "(full run)" },
        cpu_model(),
        mem_total(),
        load_average(),
    );
    eprint!("{report}");
    let budget = |secs: u64| Duration::from_secs(secs + 2 * plan.grace.as_secs());
    let mut rows: Vec<Row> = Vec::new();

    // ---- the other sides: nginx, PostgreSQL ---------------------------------------------------
    let flag = |name: &str| args.iter().any(|a| a == name);
    let nginx = if flag("--no-nginx") {
        Err("--no-nginx given".to_owned())
    } else {
        nginx::ensure()
    };
    let nginx_args = match &nginx {
        Ok(bin) => {
            let _ = writeln!(
                report,
                "nginx: {} ({}), {nproc} worker processes",
                nginx::version(bin),
                bin.display()
            );
            vec!["--nginx".to_owned(), bin.display().to_string()]
        }
        Err(reason) => {
            let _ = writeln!(report, "nginx: SKIPPED ({reason})");
            vec!["--nginx-skip".to_owned(), reason.clone()]
        }
    };
    let admin_url = arg(args, "--pg-url").unwrap_or(pg::DEFAULT_ADMIN_URL);
    let scratch = if flag("--no-pg") {
        Err("--no-pg given".to_owned())
    } else {
        pg::Scratch::create(admin_url)
            .await
            .map_err(|e| format!("PostgreSQL at {admin_url}: {e}"))
    };
    let pg_skip: Option<String> = scratch.as_ref().err().cloned();
    match &scratch {
        Ok(s) => {
            let _ = writeln!(
                report,
                "PostgreSQL {} at {admin_url}, scratch database {} (dropped at the end); synchronous_commit = {}, fsync = {}, wal_sync_method = {}, commit_delay = {}:\n  each statement of the store commits before it returns (inside a batched request without waiting for the WAL flush, which the request's final flush waits for){}",
                s.setting("server_version"),
                s.name,
                s.setting("synchronous_commit"),
                s.setting("fsync"),
                s.setting("wal_sync_method"),
                s.setting("commit_delay"),
                if s.setting("synchronous_commit") == "on" && s.setting("fsync") == "on" {
                    format!(
                        ", and its commit waits for the WAL to be flushed to disk ({}; concurrent commits share a flush)",
                        s.setting("wal_sync_method")
                    )
                } else {
                    ", but this server does not wait for the WAL flush at commit: not the durability of a production server".to_owned()
                }
            );
            let _ = PG_ARGS.set(vec!["--pg-url".to_owned(), s.url.clone()]);
        }
        Err(reason) => {
            let _ = writeln!(report, "PostgreSQL: SKIPPED ({reason})");
            let _ = PG_ARGS.set(vec!["--pg-skip".to_owned(), reason.clone()]);
        }
    }
    let _ = writeln!(report);

    // ---- calibration --------------------------------------------------------------------------
    eprintln!("calibration: store operations per operation (counting store, not timed) …");
    let calib = run_child("calib", Vec::new(), plan.quick, budget(60)).await;
    let cal = calib
        .of("calib")
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    // What one flow or refresh waits for: sled flushes; on PostgreSQL the same count of
    // commits that wait for the WAL flush (inside a batched request each write commits
    // without waiting, and the request's final flush is the one commit that waits).
    let waits = |_: harness::Backing, key: &str| f(&cal, &[key, "flushes"]);
    let ks = |v: &Value| -> String {
        let mut pairs: Vec<(String, u64)> = v
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        pairs
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        report,
        "store operations per operation (calibration proxy on sled with a counting store, not timed; on PostgreSQL each write is its own commit, and the flushes are the commits that wait for the WAL flush):"
    );
    for (name, key) in [
        ("full flow", "flow"),
        ("refresh", "refresh"),
        ("tools/call via proxy", "call"),
    ] {
        let _ = writeln!(
            report,
            "  {name:<21} {:>2} durable writes ({}) under {} flushes waited for, {} reads, {} prefix scans",
            cal[key]["writes"],
            ks(&cal[key]["by_keyspace"]),
            cal[key]["flushes"],
            cal[key]["reads"],
            cal[key]["scans"],
        );
    }
    let _ = writeln!(report);

    // ---- 1. tools/call ------------------------------------------------------------------------
    let seg_ms = plan.mcp_seg.as_millis() as u64;
    let mcp_secs = (plan.mcp_levels.len() as u64)
        * ((SIDES.len() as u64 * (2 * plan.mcp_rounds as u64 + 1)) * seg_ms / 2000 + 5);
    eprintln!("1. tools/call: direct, nginx, bare forwarder, proxy on sled and on PostgreSQL …");
    let mcp = run_child("mcp", nginx_args, plan.quick, budget(mcp_secs + 60)).await;
    if let Some(t) = TMP.get() {
        nginx::reap(t.path());
    }
    let _ = writeln!(
        report,
        "1. tools/call to the same trivial backend: direct, through nginx, through a bare forwarder, through the proxy on sled and on PostgreSQL\n   (one load generator for all: an in-process HTTP/1.1 client per connection; {} rounds of {} ms per side and level, the order rotating)",
        plan.mcp_rounds,
        plan.mcp_seg.as_millis()
    );
    mcp_section(&mut report, &mcp);
    let _ = writeln!(report);
    mcp_rows(&mut rows, &mcp);

    // ---- 2. flows -----------------------------------------------------------------------------
    let oauth_secs = |segs_per_round: u64| {
        plan.oauth_levels.len() as u64
            * (plan.oauth_rounds as u64 * segs_per_round * plan.oauth_seg.as_millis() as u64 / 1000
                + 10)
            + 60
    };
    let stores = [harness::Backing::Sled, harness::Backing::Postgres];
    let store_arg = |s: harness::Backing| vec!["--store".to_owned(), s.name().to_owned()];
    let _ = writeln!(
        report,
        "2. full authorization flows/s, durable (SystemClock); register once, then per flow a fresh browser:\n   /authorize → consent approve → fake GitHub (already authorized: silent) → /callback/github → /token\n   ({} rounds of {} ms per level; each round: flows, then the GitHub legs alone, then the bare store, at the same concurrency)",
        plan.oauth_rounds,
        plan.oauth_seg.as_millis()
    );
    let mut flows_out = Vec::new();
    for store in stores {
        if store == harness::Backing::Postgres
            && let Some(why) = &pg_skip
        {
            let _ = writeln!(report, "   [proxy on pg: SKIPPED ({why})]");
            flows_out.push(Err(format!("PostgreSQL SKIPPED: {why}")));
            continue;
        }
        eprintln!(
            "2. full authorization flows per second, proxy on {} …",
            store.name()
        );
        let out = run_child("flows", store_arg(store), plan.quick, budget(oauth_secs(3))).await;
        flows_section(&mut report, store, &out, waits(store, "flow"));
        flows_out.push(Ok(out));
    }
    let _ = writeln!(report);
    for (store, out, target) in [
        (stores[0], &flows_out[0], 1000.0),
        (stores[1], &flows_out[1], 500.0),
    ] {
        throughput_row(
            &mut rows,
            &format!("full authorization flows/s, durable, {}", store.name()),
            out.as_ref().map_err(String::as_str),
            "flows",
            "flows",
            "browsers",
            target,
        );
        if let Ok(out) = out
            && let Some(b) = best(out, "flows", "flows")
        {
            rows.push(row(
                &format!(
                    "  same rounds, {} conc.: GitHub legs alone / {}",
                    b["conns"],
                    bare_names(store).0
                ),
                format!(
                    "{:.0}/s / {:.0}/s",
                    f(b, &["github", "per_s"]),
                    f(b, &["bare", "per_s"])
                ),
                "— (context)",
                None,
                None,
            ));
        }
    }

    // ---- 3. refresh ---------------------------------------------------------------------------
    let max_level = plan.oauth_levels.iter().copied().max().unwrap_or(1);
    let _ = writeln!(
        report,
        "3. refresh grants/s, durable; {} families of {} different people, each family refreshed by one client at a time\n   ({} rounds of {} ms per level; each round: refreshes, then the bare store at the same concurrency)",
        2 * max_level,
        2 * max_level,
        plan.oauth_rounds,
        plan.oauth_seg.as_millis()
    );
    let mut refresh_out = Vec::new();
    for store in stores {
        if store == harness::Backing::Postgres
            && let Some(why) = &pg_skip
        {
            let _ = writeln!(report, "   [proxy on pg: SKIPPED ({why})]");
            refresh_out.push(Err(format!("PostgreSQL SKIPPED: {why}")));
            continue;
        }
        eprintln!("3. refresh grants per second, proxy on {} …", store.name());
        let out = run_child(
            "refresh",
            store_arg(store),
            plan.quick,
            budget(oauth_secs(2)),
        )
        .await;
        refresh_section(&mut report, store, &out, waits(store, "refresh"));
        refresh_out.push(Ok(out));
    }
    let _ = writeln!(report);
    for (store, out, target) in [
        (stores[0], &refresh_out[0], 5000.0),
        (stores[1], &refresh_out[1], 2000.0),
    ] {
        throughput_row(
            &mut rows,
            &format!("refresh grants/s, durable, {}", store.name()),
            out.as_ref().map_err(String::as_str),
            "refresh",
            "refresh",
            "clients",
            target,
        );
    }

    // ---- 4. memory and token check ------------------------------------------------------------
    eprintln!(
        "4. memory; token check with {} vs {} live tokens (proxy on sled) …",
        plan.small, plan.large
    );
    let tokens = run_child(
        "tokens",
        Vec::new(),
        plan.quick,
        budget(120 + plan.large / 5_000),
    )
    .await;
    let label = |n: u64| {
        if n >= 1_000_000 {
            format!("{}M", n / 1_000_000)
        } else {
            format!("{}k", n / 1_000)
        }
    };
    let (sl, ll) = (label(plan.small), label(plan.large));
    match tokens.of("tokens").first() {
        Some(v) => {
            let ratio = f(v, &["large_mean_us"]) / f(v, &["small_mean_us"]).max(f64::MIN_POSITIVE);
            let _ = writeln!(
                report,
                "4. /mcp token check (context, no target): flows::access::authenticate (token record + family record lookups), {} checks per side in {} interleaved rounds\n   ({}; first pass over every token after writing them, cold: {sl} {:.2} µs, {ll} {:.2} µs)",
                v["checks_per_side"],
                plan.check_rounds,
                noise(&tokens),
                f(v, &["warm_small_mean_us"]),
                f(v, &["warm_large_mean_us"]),
            );
            let _ = writeln!(
                report,
                "   {sl} tokens: mean {:.2} µs, p50 {:.2} µs, p99 {:.2} µs\n   {ll} tokens: mean {:.2} µs, p50 {:.2} µs, p99 {:.2} µs\n   ratio of means {ll}/{sl}: {ratio:.2}×",
                f(v, &["small_mean_us"]),
                f(v, &["small_p50_us"]),
                f(v, &["small_p99_us"]),
                f(v, &["large_mean_us"]),
                f(v, &["large_p50_us"]),
                f(v, &["large_p99_us"]),
            );
            let mib = |k: &str| f(v, &[k]) / 1024.0;
            let _ = writeln!(
                report,
                "   proxy process VmRSS: at start {:.1} MiB; idle (serving, empty store) {:.1} MiB; with {ll} live tokens {:.1} MiB\n   (sled page cache (store.cache_mb) {} MiB; store on disk {:.1} MiB; {} records written through the Store trait in {:.1} s)\n",
                mib("rss_start_kib"),
                mib("rss_idle_kib"),
                mib("rss_large_kib"),
                harness::cache_mb(),
                f(v, &["disk_large_bytes"]) / 1_048_576.0,
                2 * plan.large,
                f(v, &["populate_large_secs"]),
            );
            let idle_mb = f(v, &["rss_idle_kib"]) * 1024.0 / 1e6;
            rows.push(row(
                "proxy resident memory, idle (sled)",
                format!("{idle_mb:.1} MB"),
                "< 50 MB",
                Some(idle_mb / 50.0),
                Some(idle_mb < 50.0),
            ));
            rows.push(row(
                &format!(
                    "  proxy resident memory, {ll} live tokens, cache_mb {}",
                    harness::cache_mb()
                ),
                format!("{:.0} MB", f(v, &["rss_large_kib"]) * 1024.0 / 1e6),
                "— (context)",
                None,
                None,
            ));
            rows.push(row(
                &format!("  token check cost, {ll} vs {sl} live tokens (target retired)"),
                format!("{ratio:.2}×"),
                "— (context)",
                None,
                None,
            ));
        }
        None => {
            let _ = writeln!(
                report,
                "4. memory and token check: HUNG ({})\n",
                tokens.hung.clone().unwrap_or_default()
            );
            rows.push(row(
                "proxy resident memory, idle (sled)",
                "HUNG".to_owned(),
                "< 50 MB",
                None,
                Some(false),
            ));
        }
    }

    // ---- summary ------------------------------------------------------------------------------
    let _ = writeln!(report, "SUMMARY");
    let w = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(10);
    let mw = rows
        .iter()
        .map(|r| r.measured.chars().count())
        .max()
        .unwrap_or(10);
    let _ = writeln!(
        report,
        "{:<w$} | {:>mw$} | {:>11} | {:>5} | result",
        "benchmark", "measured", "target", "ratio"
    );
    let _ = writeln!(report, "{}", "-".repeat(w + mw + 32));
    for r in &rows {
        let ratio = r.ratio.map_or("—".to_owned(), |x| format!("{x:.2}"));
        let result = match r.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "",
        };
        let _ = writeln!(
            report,
            "{:<w$} | {:>mw$} | {:>11} | {:>5} | {result}",
            r.name, r.measured, r.target, ratio
        );
    }
    let _ = writeln!(
        report,
        "(ratio = measured / target; PASS when the target is met)\ntook {:.0} s; other processes used {:.0}% of the machine's CPU during the run; load average at the end {}",
        now().duration_since(started).as_secs_f64(),
        timing::others_share(run_ticks, timing::cpu_ticks()) * 100.0,
        load_average(),
    );
    print!("{report}");
    if let Ok(s) = &scratch
        && let Err(e) = s.drop_db().await
    {
        eprintln!("note: could not drop the scratch database {}: {e}", s.name);
    }
    // Statics are not dropped: remove the run's stores (children that hung left theirs).
    if let Some(t) = TMP.get() {
        nginx::reap(t.path());
        let _ = std::fs::remove_dir_all(t.path());
    }
}
