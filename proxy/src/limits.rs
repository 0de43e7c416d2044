//! Rate limits on every public endpoint that does work for a stranger (`/register`, `/token`,
//! `/revoke`, `/authorize`, `/callback/github`, `/consent`, `/connect/{code}` and the account
//! page's forms), with `governor`'s GCRA: token buckets per client
//! IP (IPv4 per address; IPv6 per /64, the smallest block one subscriber usually holds, and
//! per /48, one site's allocation, with [`WIDE_FACTOR`] times the allowance) plus one global
//! bucket per endpoint. Time comes from the injected clock, so tests move it by hand.
//!
//! The buckets are checked in order, per-IP (/64), then /48, then global, and governor
//! charges each bucket as it admits: a request is charged only to buckets its sender belongs
//! to, so one noisy source spends its own buckets first and cannot take everyone's allowance
//! with requests its own bucket refuses. Governor cannot check several buckets and charge
//! them only if all have room, so a request refused by the /48 bucket has been charged to its
//! /64 (or address) bucket, and one refused by the global bucket to its /64 and /48 buckets.
//! Those are the sender's own buckets: its own refused requests count against its own rate,
//! and no other address's or /64's bucket is touched (a /48's is shared by its /64s by
//! design, and one /64 spends at most its own allowance, a [`WIDE_FACTOR`]th of it).
//!
//! Memory stays bounded: the sweeper calls [`Limits::retain_recent`] every minute, which
//! forgets every bucket that is full again. Each table holds at most [`MAX_TRACKED`] buckets
//! (plus one per request in flight). A new address at the cap prunes the table, at most once
//! per [`PRUNE_EVERY_SECS`] (no scan per request), and is refused like an exhausted global
//! bucket only if that made no room: while more than [`MAX_TRACKED`] addresses (or /64s, or
//! /48s) have buckets that are not yet full again. Addresses already tracked are unaffected.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::{DashMapStateStore, ShrinkableKeyedStateStore};
use governor::state::{InMemoryState, NotKeyed, StateStore};
use governor::{NotUntil, Quota, RateLimiter};

use crate::clock::SharedClock;

pub mod bodies;
mod settings;
pub use settings::{RateLimit, RateLimits, RawRateLimits, rate_limits};

/// Most buckets one table (an endpoint's per-IP or /48 buckets) keeps at a time.
pub const MAX_TRACKED: usize = 100_000;

/// A table at the cap is pruned at most this often (it is a scan of the whole table).
pub const PRUNE_EVERY_SECS: u64 = 1;

/// A /48 may send this many times what one /64 (or IPv4 address) may, in rate and burst:
/// enough for a site with a few hosts on separate /64s, while one holder of a /48 (65 536
/// /64s) cannot take the global allowance by rotating through them.
pub const WIDE_FACTOR: u32 = 4;

/// The application clock as governor's time source.
#[derive(Clone)]
struct InjectedClock(SharedClock);

impl GovernorClock for InjectedClock {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::from(Duration::from_secs(self.0.now().0))
    }
}

/// Governor's `DashMap` store, shared so that [`Table`] can ask whether an address is
/// tracked (governor keeps its store private). Every operation is the `DashMap` store's.
#[derive(Clone, Default)]
struct SharedStore(Arc<DashMapStateStore<IpAddr>>);

impl StateStore for SharedStore {
    type Key = IpAddr;
    fn measure_and_replace<T, F, E>(&self, key: &IpAddr, f: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        self.0.measure_and_replace(key, f)
    }
}

impl ShrinkableKeyedStateStore<IpAddr> for SharedStore {
    fn retain_recent(&self, drop_below: Nanos) {
        ShrinkableKeyedStateStore::retain_recent(&*self.0, drop_below);
    }
    fn shrink_to_fit(&self) {
        ShrinkableKeyedStateStore::shrink_to_fit(&*self.0);
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

type Keyed = RateLimiter<IpAddr, SharedStore, InjectedClock, NoOpMiddleware<Nanos>>;
type Direct = RateLimiter<NotKeyed, InMemoryState, InjectedClock, NoOpMiddleware<Nanos>>;

/// Which endpoint a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /register`.
    Register,
    /// `POST /token`.
    Token,
    /// `POST /revoke`.
    Revoke,
    /// `GET /authorize`.
    Authorize,
    /// `GET /callback/github`.
    Callback,
    /// `POST /consent`.
    Consent,
    /// `GET` and `POST /connect/{code}`.
    Connect,
    /// `POST /account/...`.
    Account,
}

impl Endpoint {
    /// Every endpoint, in the order [`Limits`] keeps their limiters.
    pub const ALL: [Endpoint; 8] = [
        Endpoint::Register,
        Endpoint::Token,
        Endpoint::Revoke,
        Endpoint::Authorize,
        Endpoint::Callback,
        Endpoint::Consent,
        Endpoint::Connect,
        Endpoint::Account,
    ];

    /// Its `[rate_limits.<name>]` section, also its metric label.
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Register => "register",
            Endpoint::Token => "token",
            Endpoint::Revoke => "revoke",
            Endpoint::Authorize => "authorize",
            Endpoint::Callback => "callback",
            Endpoint::Consent => "consent",
            Endpoint::Connect => "connect",
            Endpoint::Account => "account",
        }
    }

    fn config(self, cfg: &RateLimits) -> &RateLimit {
        match self {
            Endpoint::Register => &cfg.register,
            Endpoint::Token => &cfg.token,
            Endpoint::Revoke => &cfg.revoke,
            Endpoint::Authorize => &cfg.authorize,
            Endpoint::Callback => &cfg.callback,
            Endpoint::Consent => &cfg.consent,
            Endpoint::Connect => &cfg.connect,
            Endpoint::Account => &cfg.account,
        }
    }
}

/// Which bucket ran dry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bucket {
    /// This client IP's (or its IPv6 /64's or /48's).
    PerIp,
    /// Everyone's together (also: too many addresses tracked to add this one).
    Global,
}

/// A refused request: try again after this many seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimited {
    /// Whole seconds until a request would be let through (at least 1).
    pub retry_after_secs: u64,
    /// Which bucket refused.
    pub bucket: Bucket,
}

fn quota(per_minute: u32, burst: u32) -> Quota {
    let per_minute = u64::from(per_minute.max(1));
    let period = Duration::from_nanos(60_000_000_000 / per_minute).max(Duration::from_nanos(1));
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

/// One keyed limiter with its bounded table.
struct Table {
    limiter: Keyed,
    store: SharedStore,
    cap: usize,
    /// Clock second of the last prune at the cap.
    last_prune: AtomicU64,
}

impl Table {
    fn new(quota: Quota, clock: &InjectedClock, cap: usize) -> Table {
        let store = SharedStore::default();
        Table {
            limiter: RateLimiter::new(quota, store.clone(), clock.clone()),
            store,
            cap,
            last_prune: AtomicU64::new(0),
        }
    }

    /// Whether `key` has a bucket or one may be added: at the cap, prunes first (at most once
    /// per [`PRUNE_EVERY_SECS`]).
    fn has_room(&self, key: &IpAddr, now: u64) -> bool {
        if self.store.0.len() < self.cap || self.store.0.contains_key(key) {
            return true;
        }
        let last = self.last_prune.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= PRUNE_EVERY_SECS
            && self
                .last_prune
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.prune();
        }
        self.store.0.len() < self.cap
    }

    /// Forgets every bucket that is full again.
    fn prune(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

struct EndpointLimiter {
    /// IPv4 addresses and IPv6 /64s.
    per_ip: Table,
    /// IPv6 /48s.
    wide: Table,
    global: Direct,
}

impl EndpointLimiter {
    fn new(l: &RateLimit, clock: &InjectedClock, cap: usize) -> EndpointLimiter {
        EndpointLimiter {
            per_ip: Table::new(quota(l.per_ip_per_minute, l.per_ip_burst), clock, cap),
            wide: Table::new(
                quota(
                    l.per_ip_per_minute.saturating_mul(WIDE_FACTOR),
                    l.per_ip_burst.saturating_mul(WIDE_FACTOR),
                ),
                clock,
                cap,
            ),
            global: RateLimiter::direct_with_clock(
                quota(l.global_per_minute, l.global_burst),
                clock.clone(),
            ),
        }
    }

    fn tables(&self) -> [&Table; 2] {
        [&self.per_ip, &self.wide]
    }
}

/// The rate limiters, held in `App`.
pub struct Limits {
    enabled: bool,
    clock: InjectedClock,
    /// One per [`Endpoint::ALL`], in that order.
    endpoints: Vec<EndpointLimiter>,
}

/// The bucket key for an address: IPv4 as is, IPv6 by its /64 (also the registration dedupe
/// key).
pub fn bucket_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// The /48 bucket key for an IPv6 address; IPv4 (and IPv4-mapped) addresses have none.
pub fn wide_key(ip: IpAddr) -> Option<IpAddr> {
    match ip.to_canonical() {
        IpAddr::V6(v6) => Some(IpAddr::V6((u128::from(v6) & !((1u128 << 80) - 1)).into())),
        IpAddr::V4(_) => None,
    }
}

impl Limits {
    /// Builds the limiters from configuration.
    pub fn new(cfg: &RateLimits, clock: SharedClock) -> Limits {
        Limits::with_cap(cfg, clock, MAX_TRACKED)
    }

    fn with_cap(cfg: &RateLimits, clock: SharedClock, cap: usize) -> Limits {
        let clock = InjectedClock(clock);
        Limits {
            enabled: cfg.enabled,
            endpoints: Endpoint::ALL
                .iter()
                .map(|e| EndpointLimiter::new(e.config(cfg), &clock, cap))
                .collect(),
            clock,
        }
    }

    fn endpoint(&self, endpoint: Endpoint) -> Option<&EndpointLimiter> {
        let i = Endpoint::ALL.iter().position(|e| *e == endpoint)?;
        self.endpoints.get(i)
    }

    fn refused(&self, n: &NotUntil<Nanos>, bucket: Bucket) -> RateLimited {
        let wait = n.wait_time_from(self.clock.now());
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        RateLimited {
            retry_after_secs: secs.max(1),
            bucket,
        }
    }

    /// Lets one request from `ip` through to `endpoint`, or says when to retry. Without a
    /// known client IP (a router run without connection info) only the global bucket applies.
    pub fn check(&self, endpoint: Endpoint, ip: Option<IpAddr>) -> Result<(), RateLimited> {
        if !self.enabled {
            return Ok(());
        }
        let Some(l) = self.endpoint(endpoint) else {
            return Ok(());
        };
        if let Some(ip) = ip {
            let key = bucket_key(ip);
            let wide = wide_key(ip);
            let now = self.clock.0.now().0;
            // Room for every bucket first, so a refusal here charges none.
            if !l.per_ip.has_room(&key, now) || wide.is_some_and(|w| !l.wide.has_room(&w, now)) {
                return Err(RateLimited {
                    retry_after_secs: PRUNE_EVERY_SECS,
                    bucket: Bucket::Global,
                });
            }
            l.per_ip
                .limiter
                .check_key(&key)
                .map_err(|n| self.refused(&n, Bucket::PerIp))?;
            if let Some(w) = wide {
                l.wide
                    .limiter
                    .check_key(&w)
                    .map_err(|n| self.refused(&n, Bucket::PerIp))?;
            }
        }
        l.global
            .check()
            .map_err(|n| self.refused(&n, Bucket::Global))
    }

    /// Lets through a request the operator vouched for (it carries the initial access token):
    /// only the global bucket applies, and no per-IP bucket is touched or created.
    pub fn check_vouched(&self, endpoint: Endpoint) -> Result<(), RateLimited> {
        self.check(endpoint, None)
    }

    /// Forgets every bucket that is full again (called by the sweeper).
    pub fn retain_recent(&self) {
        for l in &self.endpoints {
            for t in l.tables() {
                t.prune();
            }
        }
    }

    /// Buckets currently tracked, per-IP and /48, every endpoint (for tests and metrics).
    pub fn tracked_ips(&self) -> usize {
        self.endpoints
            .iter()
            .flat_map(|l| l.tables())
            .map(|t| t.store.0.len())
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
            register,
            ..RateLimits::default()
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
    fn a_flooding_source_cannot_drain_another_addresses_per_ip_bucket() {
        // Per IP: a burst of 2, then 1 a minute. Everyone: a burst of 3, then 1 a second.
        let (l, clock) = limits(RateLimit {
            global_per_minute: 60,
            ..SMALL
        });
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        // The flooder's own bucket refuses it before the global bucket is asked.
        for _ in 0..5 {
            let e = l.check(Endpoint::Register, ip("192.0.2.2")).unwrap_err();
            assert_eq!(e.bucket, Bucket::PerIp);
        }
        // Everyone's bucket is empty: a flood from other addresses is refused by it and
        // charged to each sender's own bucket, never to 192.0.2.1's.
        for n in 3..8 {
            let e = l
                .check(Endpoint::Register, ip(&format!("192.0.2.{n}")))
                .unwrap_err();
            assert_eq!(e.bucket, Bucket::Global);
        }
        clock.advance(1);
        // 192.0.2.1 still has the second request of its burst.
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        let e = l.check(Endpoint::Register, ip("192.0.2.1")).unwrap_err();
        assert_eq!(e.bucket, Bucket::PerIp);
        // What governor cannot avoid: a sender's own refused request counted against its own
        // bucket (192.0.2.3 was refused once, so one request of its burst is left).
        clock.advance(1);
        assert!(l.check(Endpoint::Register, ip("192.0.2.3")).is_ok());
        clock.advance(1);
        let e = l.check(Endpoint::Register, ip("192.0.2.3")).unwrap_err();
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
    fn at_the_cap_new_addresses_are_refused_only_until_pruning_makes_room() {
        let clock = ManualClock::new(UnixTime(1_000_000));
        let cfg = RateLimits {
            register: SMALL,
            ..RateLimits::default()
        };
        let l = Limits::with_cap(&cfg, clock.clone(), 2);
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        assert!(l.check(Endpoint::Register, ip("192.0.2.2")).is_ok());
        // Both buckets are still refilling, so pruning makes no room: a new address is
        // refused without being tracked or charged; tracked ones are unaffected.
        let e = l.check(Endpoint::Register, ip("192.0.2.3")).unwrap_err();
        assert_eq!(e.bucket, Bucket::Global);
        assert_eq!(e.retry_after_secs, PRUNE_EVERY_SECS);
        assert_eq!(l.tracked_ips(), 2);
        assert_eq!(
            l.endpoint(Endpoint::Register)
                .unwrap()
                .per_ip
                .last_prune
                .load(Ordering::Relaxed),
            1_000_000
        );
        assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        // Once the buckets are full again, the next new address prunes them and gets in.
        clock.advance(3600);
        assert!(l.check(Endpoint::Register, ip("192.0.2.3")).is_ok());
        assert_eq!(l.tracked_ips(), 1);
        assert_eq!(
            l.endpoint(Endpoint::Register)
                .unwrap()
                .per_ip
                .last_prune
                .load(Ordering::Relaxed),
            1_003_600
        );
    }

    #[test]
    fn ipv4_addresses_have_no_slash_48_bucket() {
        assert_eq!(wide_key("192.0.2.1".parse().unwrap()), None);
        assert_eq!(wide_key("::ffff:192.0.2.1".parse().unwrap()), None);
        assert_eq!(
            wide_key("2001:db8:1:2:3::4".parse().unwrap()),
            "2001:db8:1::".parse().ok()
        );
    }

    #[test]
    fn every_endpoint_has_its_own_per_ip_and_global_buckets_from_its_section() {
        let clock = ManualClock::new(UnixTime(1_000_000));
        let cfg = RateLimits {
            revoke: SMALL,
            authorize: SMALL,
            callback: SMALL,
            consent: SMALL,
            connect: SMALL,
            account: SMALL,
            ..RateLimits::default()
        };
        let l = Limits::new(&cfg, clock.clone());
        for e in &Endpoint::ALL[2..] {
            // Per IP: a burst of 2, then refused until a minute has passed.
            assert!(l.check(*e, ip("192.0.2.1")).is_ok(), "{e:?}");
            assert!(l.check(*e, ip("192.0.2.1")).is_ok(), "{e:?}");
            let r = l.check(*e, ip("192.0.2.1")).unwrap_err();
            assert_eq!((r.bucket, r.retry_after_secs), (Bucket::PerIp, 60), "{e:?}");
            // Everyone: a burst of 3.
            assert!(l.check(*e, ip("192.0.2.2")).is_ok(), "{e:?}");
            let r = l.check(*e, ip("192.0.2.3")).unwrap_err();
            assert_eq!(r.bucket, Bucket::Global, "{e:?}");
        }
        // Spending one endpoint's buckets left the defaults of /register and /token alone.
        assert!(l.check(Endpoint::Token, ip("192.0.2.1")).is_ok());
        clock.advance(60);
        for e in &Endpoint::ALL[2..] {
            assert!(l.check(*e, ip("192.0.2.1")).is_ok(), "{e:?} refilled");
        }
        let names: Vec<_> = Endpoint::ALL.iter().map(|e| e.name()).collect();
        assert_eq!(
            names,
            [
                "register",
                "token",
                "revoke",
                "authorize",
                "callback",
                "consent",
                "connect",
                "account"
            ]
        );
    }

    #[test]
    fn disabled_limits_let_everything_through() {
        let clock = ManualClock::new(UnixTime(1));
        let cfg = RateLimits {
            enabled: false,
            register: SMALL,
            token: SMALL,
            ..RateLimits::default()
        };
        let l = Limits::new(&cfg, clock);
        for _ in 0..10 {
            assert!(l.check(Endpoint::Register, ip("192.0.2.1")).is_ok());
        }
    }
}
