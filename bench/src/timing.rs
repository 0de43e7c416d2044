//! The benchmark's one clock read, and the statistics computed from what it measures.

use std::time::{Duration, Instant};

/// Now, on the monotonic clock.
#[allow(clippy::disallowed_methods)] // a benchmark measures elapsed time: this is its one clock read
pub fn now() -> Instant {
    Instant::now()
}

/// Nanoseconds since `t`.
pub fn ns_since(t: Instant) -> u64 {
    u64::try_from(now().duration_since(t).as_nanos()).unwrap_or(u64::MAX)
}

/// Latency samples (nanoseconds) and what they add up to.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    ns: Vec<u64>,
    /// Wall time of the segments the samples were taken in.
    pub wall: Duration,
    /// The whole machine's busy and total CPU ticks during those segments ([`cpu_ticks`]).
    machine: (u64, u64),
}

impl Samples {
    /// Adds one segment's samples and its wall time.
    pub fn add(&mut self, ns: Vec<u64>, wall: Duration) {
        self.ns.extend(ns);
        self.wall += wall;
    }

    /// Adds the machine's CPU ticks between two [`cpu_ticks`] readings around one segment.
    pub fn add_cpu(&mut self, before: (u64, u64, u64), after: (u64, u64, u64)) {
        self.machine.0 += after.0.saturating_sub(before.0);
        self.machine.1 += after.1.saturating_sub(before.1);
    }

    /// The whole machine's busy CPU time per operation, µs: everything that ran (the load
    /// generator, the side, the backend, the kernel's share, and any other process), so
    /// comparable between sides of the same rounds only while the machine is otherwise idle.
    pub fn cpu_us_per_op(&self) -> f64 {
        if self.ns.is_empty() {
            return 0.0;
        }
        self.machine.0 as f64 * 1e6 / USER_HZ / self.ns.len() as f64
    }

    /// Share of the machine's CPU that was busy during the segments (0..=1).
    pub fn machine_busy(&self) -> f64 {
        if self.machine.1 == 0 {
            0.0
        } else {
            self.machine.0 as f64 / self.machine.1 as f64
        }
    }

    /// Number of operations.
    pub fn count(&self) -> usize {
        self.ns.len()
    }

    /// Operations per second of wall time.
    pub fn per_sec(&self) -> f64 {
        let s = self.wall.as_secs_f64();
        if s > 0.0 {
            self.ns.len() as f64 / s
        } else {
            0.0
        }
    }

    /// The `p`-th percentile (0..=100) in microseconds.
    pub fn pct_us(&self, p: f64) -> f64 {
        if self.ns.is_empty() {
            return 0.0;
        }
        let mut v = self.ns.clone();
        v.sort_unstable();
        let idx = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
        v.get(idx.min(v.len() - 1)).copied().unwrap_or(0) as f64 / 1_000.0
    }

    /// Summary as JSON.
    pub fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "count": self.count(),
            "wall_s": self.wall.as_secs_f64(),
            "per_s": self.per_sec(),
            "p50_us": self.pct_us(50.0),
            "p99_us": self.pct_us(99.0),
            "mean_us": self.mean_us(),
        });
        // Only where the segments' CPU was read (`add_cpu`).
        if self.machine.1 > 0 {
            v["cpu_us_per_op"] = self.cpu_us_per_op().into();
            v["machine_busy"] = self.machine_busy().into();
        }
        v
    }

    /// Mean in microseconds.
    pub fn mean_us(&self) -> f64 {
        if self.ns.is_empty() {
            return 0.0;
        }
        self.ns.iter().map(|&n| n as f64).sum::<f64>() / self.ns.len() as f64 / 1_000.0
    }
}

/// How long past its planned end a segment may run before the bench calls it hung.
static GRACE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(10_000);

/// Sets [`GRACE_MS`].
pub fn set_grace(d: Duration) {
    GRACE_MS.store(
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Reports a hang as a result line and ends this (child) process: whatever hung holds
/// threads that will never come back, so nothing after it in this process could be trusted.
pub fn hung(what: &str) -> ! {
    eprintln!("  HUNG: {what} made no progress; ending this benchmark process");
    println!("{}", serde_json::json!({"kind": "hung", "what": what}));
    std::process::exit(0)
}

/// Runs `workers` copies of a loop until `dur` has passed and returns every latency together
/// with the wall time from start until the last worker stopped. `make(i, deadline)` builds
/// worker `i`, which must stop starting new operations at `deadline`. A segment still running
/// a grace period after its deadline is reported as hung (see [`hung`]).
pub async fn segment<F, Fut>(
    what: &str,
    workers: usize,
    dur: Duration,
    make: F,
) -> (Vec<u64>, Duration)
where
    F: Fn(usize, Instant) -> Fut,
    Fut: std::future::Future<Output = Vec<u64>> + Send + 'static,
{
    let start = now();
    let deadline = start + dur;
    let handles: Vec<_> = (0..workers)
        .map(|i| tokio::spawn(make(i, deadline)))
        .collect();
    let grace = Duration::from_millis(GRACE_MS.load(std::sync::atomic::Ordering::Relaxed));
    let joined = tokio::time::timeout(dur + grace, futures_util::future::join_all(handles)).await;
    let Ok(results) = joined else {
        hung(what);
    };
    let mut all = Vec::new();
    for r in results {
        all.extend(r.expect("benchmark worker panicked"));
    }
    (all, now().duration_since(start))
}

/// Awaits `fut`, or reports a hang after `limit`.
pub async fn or_hang<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => hung(what),
    }
}

/// A small deterministic PRNG (xorshift64*), so runs pick the same keys.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded (a zero seed is replaced).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    /// Next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Resident memory of this process in KiB (`VmRSS` in /proc/self/status).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Clock ticks per second of `/proc/stat` and `/proc/PID/stat`: `USER_HZ`, 100 in Linux's
/// user ABI on every architecture the benchmark runs on (the kernel's own `HZ` may differ).
const USER_HZ: f64 = 100.0;

/// CPU time, in clock ticks: (busy time of the whole machine, total time of the whole machine,
/// time of this process and its reaped children).
pub fn cpu_ticks() -> (u64, u64, u64) {
    let machine = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| {
            let line = s.lines().next()?.to_owned();
            let v: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal …
            let get = |i: usize| v.get(i).copied().unwrap_or(0);
            let busy = get(0) + get(1) + get(2) + get(5) + get(6);
            let total = busy + get(3) + get(4) + get(7);
            Some((busy, total))
        })
        .unwrap_or((0, 0));
    let own = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_owned();
            // After the command: state, then ppid (field 4) …; utime, stime, cutime, cstime
            // are fields 14 to 17, i.e. indices 10..14 after the state.
            let v: Vec<u64> = rest
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            Some(v.get(10..14)?.iter().sum())
        })
        .unwrap_or(0);
    (machine.0, machine.1, own)
}

/// Share of the machine's CPU used by other processes between two [`cpu_ticks`] readings.
pub fn others_share(before: (u64, u64, u64), after: (u64, u64, u64)) -> f64 {
    let busy = after.0.saturating_sub(before.0);
    let total = after.1.saturating_sub(before.1);
    let own = after.2.saturating_sub(before.2);
    if total == 0 {
        0.0
    } else {
        busy.saturating_sub(own) as f64 / total as f64
    }
}
