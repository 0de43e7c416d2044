//! Rate limits on `/register` and `/token`: GCRA token buckets per client IP (IPv4 per
//! address; IPv6 per /64, the smallest block one subscriber usually holds, and per /48, one
//! site's allocation, with [`WIDE_FACTOR`] times the allowance) plus one global bucket per
//! endpoint. Time comes from the injected clock, so tests move it by hand.
//!
//! A request is let through only if every bucket it touches has room, and only then are they
//! charged, all under one lock. Checking the global bucket first would let one source spend
//! everyone's allowance with requests its own bucket refuses; charging the per-IP bucket
//! before the global one answers would let a flood elsewhere drain a quiet source's bucket
//! and grow the table with refused requests. So a refused request changes no bucket.
//!
//! Memory stays bounded without scanning: buckets are also kept ordered by when they are
//! full again, and every check forgets those that are (each is dropped once, so the cost is
//! amortised). Only admitted requests add buckets, so the global rate bounds the table; if it
//! still reaches [`MAX_TRACKED`], the bucket closest to full is forgotten to make room (that
//! address loses the least).

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};

use ipnet::{IpNet, Ipv6Net};

use crate::clock::SharedClock;
use crate::config::{RateLimit, RateLimits};

/// Most client-IP buckets one endpoint keeps at a time.
const MAX_TRACKED: usize = 100_000;

/// A /48 may send this many times what one /64 (or IPv4 address) may: enough for a site with
/// a few hosts on separate /64s, while one holder of a /48 (65 536 /64s) cannot take the
/// global allowance by rotating through them.
pub const WIDE_FACTOR: u32 = 4;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Which endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /register`.
    Register,
    /// `POST /token`.
    Token,
}

/// Which bucket ran dry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// This client IP's (or its IPv6 /64's or /48's).
    PerIp,
    /// Everyone's together.
    Global,
}

/// A refused request: try again after this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    /// Whole seconds until a request would be let through (at least 1).
    pub retry_after_secs: u64,
    /// Which bucket refused (the per-IP one if both did).
    pub bucket: Bucket,
}

/// One GCRA quota: a request is one `period`; up to `burst` periods may be owed at once.
#[derive(Debug, Clone, Copy)]
struct Quota {
    period: u64,
    burst: u64,
}

impl Quota {
    fn new(per_minute: u32, burst: u32) -> Quota {
        Quota {
            period: (60 * NANOS_PER_SEC / u64::from(per_minute.max(1))).max(1),
            burst: u64::from(burst.max(1)),
        }
    }

    fn times(self, factor: u32) -> Quota {
        Quota {
            period: (self.period / u64::from(factor.max(1))).max(1),
            burst: self.burst.saturating_mul(u64::from(factor.max(1))),
        }
    }

    /// The bucket's new "full again at" time if one more request is admitted at `now`, or
    /// how many nanoseconds to wait.
    fn admit(self, full_at: u64, now: u64) -> Result<u64, u64> {
        let next = full_at.max(now).saturating_add(self.period);
        let limit = now.saturating_add(self.period.saturating_mul(self.burst));
        if next <= limit {
            Ok(next)
        } else {
            Err(next - limit)
        }
    }
}

/// Client-IP buckets: when each is full again, by key and in that order.
struct Table {
    full_at: HashMap<IpNet, u64>,
    by_time: BTreeSet<(u64, IpNet)>,
    cap: usize,
}

impl Table {
    fn new(cap: usize) -> Table {
        Table {
            full_at: HashMap::new(),
            by_time: BTreeSet::new(),
            cap,
        }
    }

    fn get(&self, key: &IpNet) -> Option<u64> {
        self.full_at.get(key).copied()
    }

    /// Forgets every bucket that is full again at `now`.
    fn prune(&mut self, now: u64) {
        while let Some(&(t, key)) = self.by_time.first() {
            if t > now {
                break;
            }
            self.by_time.pop_first();
            self.full_at.remove(&key);
        }
    }

    fn set(&mut self, key: IpNet, full_at: u64) {
        match self.full_at.insert(key, full_at) {
            Some(old) => {
                self.by_time.remove(&(old, key));
            }
            None if self.full_at.len() > self.cap => {
                // Make room by forgetting the bucket closest to full.
                if let Some((_, evicted)) = self.by_time.pop_first() {
                    self.full_at.remove(&evicted);
                }
            }
            None => {}
        }
        self.by_time.insert((full_at, key));
    }

    fn len(&self) -> usize {
        self.full_at.len()
    }
}

struct State {
    global_full_at: u64,
    table: Table,
}

struct EndpointLimiter {
    per_ip: Quota,
    wide: Quota,
    global: Quota,
    state: Mutex<State>,
}

impl EndpointLimiter {
    fn new(l: &RateLimit) -> EndpointLimiter {
        let per_ip = Quota::new(l.per_ip_per_minute, l.per_ip_burst);
        EndpointLimiter {
            per_ip,
            wide: per_ip.times(WIDE_FACTOR),
            global: Quota::new(l.global_per_minute, l.global_burst),
            state: Mutex::new(State {
                global_full_at: 0,
                table: Table::new(MAX_TRACKED),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a set of numbers that is valid after any partial update.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check(&self, ip: Option<IpAddr>, now: u64) -> Result<(), RateLimited> {
        let mut s = self.state();
        s.table.prune(now);
        let mut charges = [None; 2];
        let mut wait_ip = 0;
        for (slot, (key, quota)) in charges
            .iter_mut()
            .zip(ip.map(|ip| self.keys(ip)).into_iter().flatten().flatten())
        {
            match quota.admit(s.table.get(&key).unwrap_or(now), now) {
                Ok(next) => *slot = Some((key, next)),
                Err(w) => wait_ip = wait_ip.max(w),
            }
        }
        let global = self.global.admit(s.global_full_at, now);
        let (bucket, wait) = match global {
            Ok(next) if wait_ip == 0 => {
                s.global_full_at = next;
                for (key, next) in charges.into_iter().flatten() {
                    s.table.set(key, next);
                }
                return Ok(());
            }
            Ok(_) => (Bucket::PerIp, wait_ip),
            Err(w) if wait_ip > 0 => (Bucket::PerIp, wait_ip.max(w)),
            Err(w) => (Bucket::Global, w),
        };
        Err(RateLimited {
            retry_after_secs: wait.div_ceil(NANOS_PER_SEC).max(1),
            bucket,
        })
    }

    fn check_global(&self, now: u64) -> Result<(), RateLimited> {
        self.check(None, now)
    }

    /// The buckets an address is counted in, with their quotas.
    fn keys(&self, ip: IpAddr) -> [Option<(IpNet, Quota)>; 2] {
        match ip.to_canonical() {
            v4 @ IpAddr::V4(_) => [Some((IpNet::from(v4), self.per_ip)), None],
            IpAddr::V6(v6) => {
                let net = |len| Ipv6Net::new(v6, len).ok().map(|n| IpNet::V6(n.trunc()));
                [
                    net(64).map(|n| (n, self.per_ip)),
                    net(48).map(|n| (n, self.wide)),
                ]
            }
        }
    }
}

/// The rate limiters, held in `App`.
pub struct Limits {
    enabled: bool,
    clock: SharedClock,
    register: EndpointLimiter,
    token: EndpointLimiter,
}

/// The bucket key for an address: IPv4 as is, IPv6 by its /64 (also the registration dedupe
/// key).
pub fn bucket_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl Limits {
    /// Builds the limiters from configuration.
    pub fn new(cfg: &RateLimits, clock: SharedClock) -> Limits {
        Limits {
            enabled: cfg.enabled,
            register: EndpointLimiter::new(&cfg.register),
            token: EndpointLimiter::new(&cfg.token),
            clock,
        }
    }

    fn now(&self) -> u64 {
        self.clock.now().0.saturating_mul(NANOS_PER_SEC)
    }

    fn endpoint(&self, endpoint: Endpoint) -> &EndpointLimiter {
        match endpoint {
            Endpoint::Register => &self.register,
            Endpoint::Token => &self.token,
        }
    }

    /// Lets one request from `ip` through to `endpoint`, or says when to retry. Without a
    /// known client IP (a router run without connection info) only the global bucket applies.
    pub fn check(&self, endpoint: Endpoint, ip: Option<IpAddr>) -> Result<(), RateLimited> {
        if !self.enabled {
            return Ok(());
        }
        self.endpoint(endpoint).check(ip, self.now())
    }

    /// Lets through a request the operator vouched for (it carries the initial access token):
    /// only the global bucket applies, and no per-IP bucket is touched or created.
    pub fn check_vouched(&self, endpoint: Endpoint) -> Result<(), RateLimited> {
        if !self.enabled {
            return Ok(());
        }
        self.endpoint(endpoint).check_global(self.now())
    }

    /// Forgets every bucket that is full again (called by the sweeper; checks do it too).
    pub fn retain_recent(&self) {
        let now = self.now();
        for l in [&self.register, &self.token] {
            let mut s = l.state();
            s.table.prune(now);
            s.table.full_at.shrink_to_fit();
        }
    }

    /// Client-IP buckets currently tracked (for tests and metrics).
    pub fn tracked_ips(&self) -> usize {
        [&self.register, &self.token]
            .iter()
            .map(|l| l.state().table.len())
            .sum()
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, UnixTime};

    fn limits(register: RateLimit) -> (Limits, std::sync::Arc<ManualClock>) {
        let clock = ManualClock::new(UnixTime(1_000_000));
        let cfg = RateLimits {
            enabled: true,
            register,
            token: RateLimit::TOKEN,
        };
        (Limits::new(&cfg, clock.clone()), clock)
    }

    const SMALL: RateLimit = RateLimit {
        per_ip_per_minute: 1,
        per_ip_burst: 2,
        global_per_minute: 2,
        global_burst: 3,
    };

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn per_ip_burst_then_refusal_with_retry_after_then_refill() {
        let (l, clock) = limits(SMALL);
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        let e = l.check(Endpoint::Register, ip("192.0.2.1")).unwrap_err();
        assert_eq!(e.bucket, Bucket::PerIp);
        assert_eq!(e.retry_after_secs, 60);
        // Another endpoint has its own buckets.
        assert!(l.check(Endpoint::Token, ip("192.0.2.1")).is_ok());
        clock.advance(60);
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
    }

    #[test]
    fn global_ceiling_holds_across_addresses() {
        let (l, _) = limits(SMALL);
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.3")).is_ok());
        let e = l.check(Endpoint::Register, ip("192.0.2.4")).unwrap_err();
        assert_eq!(e.bucket, Bucket::Global);
        assert_eq!(e.retry_after_secs, 30);
    }

    #[test]
    fn rotating_through_an_ipv6_slash_64_shares_one_bucket() {
        let (l, _) = limits(SMALL);
        assert!(l.check(Endpoint::Register, ip("2001:db8::1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("2001:db8::2")).is_ok());
        let e = l
            .check(Endpoint::Register, ip("2001:db8::ffff:3"))
            .unwrap_err();
        assert_eq!(e.bucket, Bucket::PerIp);
        assert_eq!(
            bucket_key("::ffff:192.0.2.1".parse().unwrap()),
            "192.0.2.1".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn full_buckets_are_forgotten() {
        let (l, clock) = limits(SMALL);
        l.check(Endpoint::Register, ip("192.0.2.1")).unwrap();
        l.check(Endpoint::Token, ip("192.0.2.9")).unwrap();
        assert_eq!(l.tracked_ips(), 2);
        clock.advance(3600);
        l.retain_recent();
        assert_eq!(l.tracked_ips(), 0);
    }

    #[test]
    fn requests_the_global_bucket_refuses_charge_no_per_ip_bucket_and_track_no_address() {
        // Per IP: a burst of 2, then 1 a minute. Everyone: a burst of 3, then 1 a second.
        let (l, clock) = limits(RateLimit {
            global_per_minute: 60,
            ..SMALL
        });
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        for _ in 0..5 {
            let e = l.check(Endpoint::Register, ip("192.0.2.1")).unwrap_err();
            assert_eq!(e.bucket, Bucket::Global);
        }
        let e = l.check(Endpoint::Register, ip("192.0.2.3")).unwrap_err();
        assert_eq!(e.bucket, Bucket::Global);
        assert_eq!(l.tracked_ips(), 2, "a refused address is not tracked");
        clock.advance(2);
        // 192.0.2.1 still has the second request of its burst: the refusals cost it nothing.
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        let e = l.check(Endpoint::Register, ip("192.0.2.1")).unwrap_err();
        assert_eq!(e.bucket, Bucket::PerIp);
    }

    #[test]
    fn rotating_through_the_slash_64s_of_one_slash_48_is_capped() {
        let (l, _) = limits(RateLimit {
            global_per_minute: 1000,
            global_burst: 1000,
            ..SMALL
        });
        // Each /64 gets its burst of 2; the /48 gets WIDE_FACTOR times that.
        let per_48 = 2 * WIDE_FACTOR;
        for n in 0..per_48 / 2 {
            for host in 1..=2 {
                let a = format!("2001:db8:0:{n:x}::{host}");
                assert!(l.check(Endpoint::Register, ip(&a)).is_ok(), "{a}");
            }
        }
        let e = l
            .check(Endpoint::Register, ip("2001:db8:0:ffff::1"))
            .unwrap_err();
        assert_eq!(e.bucket, Bucket::PerIp);
        // Another /48 is not affected.
        assert!(l.check(Endpoint::Register, ip("2001:db8:1::1")).is_ok());
    }

    #[test]
    fn a_vouched_request_skips_the_per_ip_bucket_but_not_the_global_one() {
        let (l, _) = limits(SMALL);
        l.check(Endpoint::Register, ip("192.0.2.1")).unwrap();
        l.check(Endpoint::Register, ip("192.0.2.1")).unwrap();
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_err());
        assert!(l.check_vouched(Endpoint::Register).is_ok());
        assert_eq!(l.tracked_ips(), 1);
        let e = l.check_vouched(Endpoint::Register).unwrap_err();
        assert_eq!(e.bucket, Bucket::Global);
    }

    #[test]
    fn a_flood_of_distinct_addresses_at_the_cap_forgets_the_bucket_closest_to_full() {
        let mut t = Table::new(3);
        let key = |s: &str| IpNet::from(s.parse::<IpAddr>().unwrap());
        t.set(key("192.0.2.1"), 30);
        t.set(key("192.0.2.2"), 10);
        t.set(key("192.0.2.3"), 20);
        t.set(key("192.0.2.2"), 40); // an update is not a new key
        assert_eq!(t.len(), 3);
        t.set(key("192.0.2.4"), 50);
        assert_eq!(t.len(), 3);
        assert_eq!(t.get(&key("192.0.2.3")), None, "the one full soonest went");
        assert_eq!(t.get(&key("192.0.2.4")), Some(50));
        assert_eq!(t.by_time.len(), 3);
        t.prune(40);
        assert_eq!(t.len(), 1);
        assert_eq!(t.by_time.len(), 1);
    }

    #[test]
    fn disabled_limits_let_everything_through() {
        let clock = ManualClock::new(UnixTime(1));
        let cfg = RateLimits {
            enabled: false,
            register: SMALL,
            token: SMALL,
        };
        let l = Limits::new(&cfg, clock);
        for _ in 0..10 {
            assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        }
    }
}
