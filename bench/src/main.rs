//! proxy-bench: the benchmark suite of mcp-oauth-proxy (issue 7). Every result is a ratio
//! measured side by side in the same run, with absolute figures for context:
//!
//! 1. `tools/call` through the proxy vs straight to the same trivial backend (1, 16, 64
//!    connections), interleaved A/B segments;
//! 2. full authorization flows per second against a durable store, with the GitHub legs alone
//!    and bare sled insert+flush measured in the same rounds;
//! 3. refresh grants per second, durable, many families at once;
//! 4. the `/mcp` token check with 10 thousand vs 1 million live tokens, and resident memory of
//!    the proxy idle and with 1 million tokens.
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
mod oauth_bench;
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
                mcp_rounds: 6,
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
    match args
        .iter()
        .position(|a| a == "--child")
        .and_then(|p| args.get(p + 1))
    {
        Some(name) => rt.block_on(child(name, &plan, &args)),
        None => rt.block_on(parent(plan, &args)),
    }
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
            mcp_bench::child(&levels, plan.mcp_rounds, plan.mcp_seg).await;
        }
        "flows" => {
            let levels = levels_arg(args, &plan.oauth_levels);
            oauth_bench::flows_child(&levels, plan.oauth_rounds, plan.oauth_seg).await;
        }
        "refresh" => {
            let levels = levels_arg(args, &plan.oauth_levels);
            oauth_bench::refresh_child(&levels, plan.oauth_rounds, plan.oauth_seg).await;
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
    let before = counters.snapshot();
    mcp_bench::call(&http, &target).await;
    // The audit write of a call lands before its last byte is relayed; settle anyway.
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

fn mcp_section(report: &mut String, title: &str, out: &ChildOut) {
    let _ = writeln!(report, "   [{title}; {}]", noise(out));
    let _ = writeln!(
        report,
        "   conns | direct req/s | proxied req/s | ratio | direct p50/p99 µs | proxied p50/p99 µs | added p50/p99 µs | bare fwd req/s | ratio | bare added p50 µs"
    );
    for v in out.of("mcp") {
        let direct = f(v, &["direct", "per_s"]).max(f64::MIN_POSITIVE);
        let _ = writeln!(
            report,
            "   {:>5} | {:>12.0} | {:>13.0} | {:>4.2}× | {:>8.1} / {:>7.1} | {:>8.1} / {:>7.1} | {:>7.1} / {:>7.1} | {:>14.0} | {:>4.2}× | {:>7.1}",
            v["conns"].as_u64().unwrap_or(0),
            f(v, &["direct", "per_s"]),
            f(v, &["proxied", "per_s"]),
            f(v, &["proxied", "per_s"]) / direct,
            f(v, &["direct", "p50_us"]),
            f(v, &["direct", "p99_us"]),
            f(v, &["proxied", "p50_us"]),
            f(v, &["proxied", "p99_us"]),
            f(v, &["proxied", "p50_us"]) - f(v, &["direct", "p50_us"]),
            f(v, &["proxied", "p99_us"]) - f(v, &["direct", "p99_us"]),
            f(v, &["bare", "per_s"]),
            f(v, &["bare", "per_s"]) / direct,
            f(v, &["bare", "p50_us"]) - f(v, &["direct", "p50_us"]),
        );
    }
    let _ = writeln!(
        report,
        "   (bare fwd: axum in, reqwest out, answer streamed back; no auth, parsing, store or audit: the second hop alone)"
    );
    if let Some(h) = &out.hung {
        let _ = writeln!(
            report,
            "   HUNG: {h} (no response within the grace period; later levels not run)"
        );
    }
}

fn flows_section(report: &mut String, title: &str, out: &ChildOut, writes: f64) {
    let _ = writeln!(report, "   [{title}; {}]", noise(out));
    let _ = writeln!(
        report,
        "   browsers | flows/s | flow p50/p99 ms | GitHub legs alone/s | bare sled insert+flush/s (p50 ms) | sled/s ÷ {writes:.0} flushes per flow"
    );
    for v in out.of("flows") {
        let _ = writeln!(
            report,
            "   {:>8} | {:>7.0} | {:>6.1} / {:>6.1} | {:>19.0} | {:>24.0} ({:>5.2}) | {:>8.0}",
            v["conns"].as_u64().unwrap_or(0),
            f(v, &["flows", "per_s"]),
            f(v, &["flows", "p50_us"]) / 1000.0,
            f(v, &["flows", "p99_us"]) / 1000.0,
            f(v, &["github", "per_s"]),
            f(v, &["sled", "per_s"]),
            f(v, &["sled", "p50_us"]) / 1000.0,
            f(v, &["sled", "per_s"]) / writes.max(1.0),
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

fn refresh_section(report: &mut String, title: &str, out: &ChildOut, writes: f64) {
    let _ = writeln!(report, "   [{title}; {}]", noise(out));
    let _ = writeln!(
        report,
        "   clients | refreshes/s | p50/p99 ms | bare sled insert+flush/s | sled/s ÷ {writes:.0} flushes per refresh"
    );
    for v in out.of("refresh") {
        let _ = writeln!(
            report,
            "   {:>7} | {:>11.0} | {:>5.2} / {:>6.2} | {:>24.0} | {:>8.0}",
            v["conns"].as_u64().unwrap_or(0),
            f(v, &["refresh", "per_s"]),
            f(v, &["refresh", "p50_us"]) / 1000.0,
            f(v, &["refresh", "p99_us"]) / 1000.0,
            f(v, &["sled", "per_s"]),
            f(v, &["sled", "per_s"]) / writes.max(1.0),
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

/// Rows for a throughput target ("best level").
fn throughput_row(
    rows: &mut Vec<Row>,
    name: &str,
    out: &ChildOut,
    kind: &str,
    field: &str,
    unit: &str,
    target: f64,
) {
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
                &format!("≥ {target:.0}/s"),
                Some(x / target),
                Some(x >= target && !hung),
            ));
        }
        None => rows.push(row(
            name,
            "HUNG".to_owned(),
            &format!("≥ {target:.0}/s"),
            None,
            Some(false),
        )),
    }
}

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
        "proxy-bench {} — {date}\nmachine: {nproc} CPUs ({}), {} RAM\ncommand: {command}\n",
        if plan.quick { "--quick" } else { "(full run)" },
        cpu_model(),
        mem_total()
    );
    eprint!("{report}");
    let budget = |secs: u64| Duration::from_secs(secs + 2 * plan.grace.as_secs());
    let mut rows: Vec<Row> = Vec::new();

    // ---- calibration --------------------------------------------------------------------------
    eprintln!("calibration: store operations per operation (counting store, not timed) …");
    let calib = run_child("calib", Vec::new(), plan.quick, budget(60)).await;
    let cal = calib
        .of("calib")
        .first()
        .copied()
        .cloned()
        .unwrap_or(Value::Null);
    let (flow_writes, refresh_writes) = (
        f(&cal, &["flow", "flushes"]),
        f(&cal, &["refresh", "flushes"]),
    );
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
        "store operations per operation (calibration proxy with a counting store, not timed):"
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
    let mcp_secs = |levels: usize| {
        (levels as u64)
            * ((3 * plan.mcp_rounds as u64 + 2) * plan.mcp_seg.as_millis() as u64 / 1000 + 5)
    };
    eprintln!("1. tools/call through the proxy vs direct, shipped proxy …");
    let mcp_shipped = run_child(
        "mcp",
        Vec::new(),
        plan.quick,
        budget(mcp_secs(plan.mcp_levels.len()) + 30),
    )
    .await;
    let _ = writeln!(
        report,
        "1. tools/call, proxied vs direct to the same trivial backend, with a bare forwarder for context ({} rounds of {} ms per side and level, interleaved)",
        plan.mcp_rounds,
        plan.mcp_seg.as_millis()
    );
    mcp_section(&mut report, "shipped proxy", &mcp_shipped);
    let _ = writeln!(report);
    {
        let (label, out) = ("", &mcp_shipped);
        let at = |conns: usize| level(out, "mcp", conns);
        match at(16) {
            Some(v) => {
                let r =
                    f(v, &["proxied", "per_s"]) / f(v, &["direct", "per_s"]).max(f64::MIN_POSITIVE);
                rows.push(row(
                    &format!("tools/call throughput proxied/direct, 16 conn{label}"),
                    format!("{r:.2}×"),
                    "≥ 0.60×",
                    Some(r / 0.6),
                    Some(r >= 0.6),
                ));
            }
            None => rows.push(row(
                &format!("tools/call throughput proxied/direct, 16 conn{label}"),
                "HUNG".to_owned(),
                "≥ 0.60×",
                None,
                Some(false),
            )),
        }
        if let Some(v) = at(16) {
            let bare = f(v, &["bare", "per_s"]) / f(v, &["direct", "per_s"]).max(f64::MIN_POSITIVE);
            rows.push(row(
                "  same rounds: bare forwarder (no checks)/direct, 16 conn",
                format!("{bare:.2}×"),
                "— (context)",
                None,
                None,
            ));
        }
        match at(1) {
            Some(v) => {
                let added = f(v, &["proxied", "p50_us"]) - f(v, &["direct", "p50_us"]);
                rows.push(row(
                    &format!("tools/call added p50 latency, 1 conn{label}"),
                    format!("{added:.0} µs"),
                    "< 100 µs",
                    Some(added / 100.0),
                    Some(added < 100.0),
                ));
                let bare = f(v, &["bare", "p50_us"]) - f(v, &["direct", "p50_us"]);
                rows.push(row(
                    "  same rounds: bare forwarder added p50, 1 conn",
                    format!("{bare:.0} µs"),
                    "— (context)",
                    None,
                    None,
                ));
            }
            None => rows.push(row(
                &format!("tools/call added p50 latency, 1 conn{label}"),
                "HUNG".to_owned(),
                "< 100 µs",
                None,
                Some(false),
            )),
        }
    }

    // ---- 2. flows -----------------------------------------------------------------------------
    let oauth_secs = |segs_per_round: u64| {
        plan.oauth_levels.len() as u64
            * (plan.oauth_rounds as u64 * segs_per_round * plan.oauth_seg.as_millis() as u64 / 1000
                + 10)
            + 60
    };
    eprintln!("2. full authorization flows per second, shipped proxy …");
    let flows_shipped = run_child("flows", Vec::new(), plan.quick, budget(oauth_secs(3))).await;
    let _ = writeln!(
        report,
        "2. full authorization flows/s, durable (sled on disk, SystemClock); register once, then per flow a fresh browser:\n   /authorize → consent approve → fake GitHub (already authorized: silent) → /callback/github → /token\n   ({} rounds of {} ms per level; each round: flows, then the GitHub legs alone, then bare sled, at the same concurrency)",
        plan.oauth_rounds,
        plan.oauth_seg.as_millis()
    );
    flows_section(&mut report, "shipped proxy", &flows_shipped, flow_writes);
    let _ = writeln!(report);
    throughput_row(
        &mut rows,
        "full authorization flows/s, durable",
        &flows_shipped,
        "flows",
        "flows",
        "browsers",
        1000.0,
    );
    if let Some(b) = best(&flows_shipped, "flows", "flows") {
        rows.push(row(
            &format!(
                "  same rounds, {} conc.: GitHub legs alone / bare sled writes",
                b["conns"]
            ),
            format!(
                "{:.0}/s / {:.0}/s",
                f(b, &["github", "per_s"]),
                f(b, &["sled", "per_s"])
            ),
            "— (context)",
            None,
            None,
        ));
    }

    // ---- 3. refresh ---------------------------------------------------------------------------
    eprintln!("3. refresh grants per second, shipped proxy …");
    let refresh_shipped = run_child("refresh", Vec::new(), plan.quick, budget(oauth_secs(2))).await;
    let max_level = plan.oauth_levels.iter().copied().max().unwrap_or(1);
    let _ = writeln!(
        report,
        "3. refresh grants/s, durable; {} families of {} different people, each family refreshed by one client at a time\n   ({} rounds of {} ms per level; each round: refreshes, then bare sled at the same concurrency)",
        2 * max_level,
        2 * max_level,
        plan.oauth_rounds,
        plan.oauth_seg.as_millis()
    );
    refresh_section(
        &mut report,
        "shipped proxy",
        &refresh_shipped,
        refresh_writes,
    );
    let _ = writeln!(report);
    throughput_row(
        &mut rows,
        "refresh grants/s, durable",
        &refresh_shipped,
        "refresh",
        "refresh",
        "clients",
        5000.0,
    );

    // ---- 4. token check and memory ------------------------------------------------------------
    eprintln!(
        "4. token check with {} vs {} live tokens; memory (shipped proxy) …",
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
                "4. /mcp token check: flows::access::authenticate (token record + family record lookups), {} checks per side in {} interleaved rounds\n   ({}; first pass over every token after writing them, cold: {sl} {:.2} µs, {ll} {:.2} µs)",
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
            rows.push(row(
                &format!("token check cost, {ll} vs {sl} live tokens"),
                format!("{ratio:.2}×"),
                "≤ 1.50×",
                Some(ratio / 1.5),
                Some(ratio <= 1.5),
            ));
            let idle_mb = f(v, &["rss_idle_kib"]) * 1024.0 / 1e6;
            rows.push(row(
                "proxy resident memory, idle",
                format!("{idle_mb:.1} MB"),
                "< 50 MB",
                Some(idle_mb / 50.0),
                Some(idle_mb < 50.0),
            ));
            rows.push(row(
                &format!(
                    "proxy resident memory, {ll} live tokens, cache_mb {}",
                    harness::cache_mb()
                ),
                format!("{:.0} MB", f(v, &["rss_large_kib"]) * 1024.0 / 1e6),
                "— (context)",
                None,
                None,
            ));
        }
        None => {
            let _ = writeln!(
                report,
                "4. token check: HUNG ({})\n",
                tokens.hung.clone().unwrap_or_default()
            );
            rows.push(row(
                &format!("token check cost, {ll} vs {sl} live tokens"),
                "HUNG".to_owned(),
                "≤ 1.50×",
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
        "{:<w$} | {:>mw$} | {:>9} | {:>5} | result",
        "benchmark", "measured", "target", "ratio"
    );
    let _ = writeln!(report, "{}", "-".repeat(w + mw + 30));
    for r in &rows {
        let ratio = r.ratio.map_or("—".to_owned(), |x| format!("{x:.2}"));
        let result = match r.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "",
        };
        let _ = writeln!(
            report,
            "{:<w$} | {:>mw$} | {:>9} | {:>5} | {result}",
            r.name, r.measured, r.target, ratio
        );
    }
    let _ = writeln!(
        report,
        "(ratio = measured / target; PASS when the target is met)\ntook {:.0} s; other processes used {:.0}% of the machine's CPU during the run",
        now().duration_since(started).as_secs_f64(),
        timing::others_share(run_ticks, timing::cpu_ticks()) * 100.0
    );
    print!("{report}");
    // Statics are not dropped: remove the run's stores (children that hung left theirs).
    if let Some(t) = TMP.get() {
        let _ = std::fs::remove_dir_all(t.path());
    }
}
