//! Rate limits on `/register` and `/token`: a GCRA token bucket per client IP (IPv6 per /64,
//! the smallest block one subscriber usually holds) plus one global bucket per endpoint
//! (`governor`). The per-IP bucket is checked first, so one noisy source spends its own
//! bucket and not everyone's. Time comes from the injected clock, so tests move it by hand.
//!
//! Memory stays bounded: the sweeper calls [`Limits::retain_recent`] every minute, which drops
//! every bucket that is back to full; and if a flood of distinct addresses fills the table
//! between sweeps, it is pruned on the spot and, if still full, new addresses are refused
//! like an exhausted global bucket until it drains.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{NotUntil, Quota, RateLimiter};

use crate::clock::SharedClock;
use crate::config::{RateLimit, RateLimits};

/// Most client-IP buckets one limiter keeps at a time.
const MAX_TRACKED_IPS: usize = 100_000;

/// The application clock as governor's time source.
#[derive(Clone)]
struct InjectedClock(SharedClock);

impl GovernorClock for InjectedClock {
    type Instant = Nanos;
    fn now(&self) -> Nanos {
        Nanos::from(Duration::from_secs(self.0.now().0))
    }
}

type Keyed = RateLimiter<IpAddr, DashMapStateStore<IpAddr>, InjectedClock, NoOpMiddleware<Nanos>>;
type Direct = RateLimiter<NotKeyed, InMemoryState, InjectedClock, NoOpMiddleware<Nanos>>;

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
    /// This client IP's.
    PerIp,
    /// Everyone's together.
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

struct EndpointLimiter {
    per_ip: Keyed,
    global: Direct,
}

fn quota(per_minute: u32, burst: u32) -> Quota {
    let per_minute = u64::from(per_minute.max(1));
    let period = Duration::from_nanos(60_000_000_000 / per_minute).max(Duration::from_nanos(1));
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

impl EndpointLimiter {
    fn new(l: &RateLimit, clock: &InjectedClock) -> EndpointLimiter {
        EndpointLimiter {
            per_ip: RateLimiter::dashmap_with_clock(
                quota(l.per_ip_per_minute, l.per_ip_burst),
                clock.clone(),
            ),
            global: RateLimiter::direct_with_clock(
                quota(l.global_per_minute, l.global_burst),
                clock.clone(),
            ),
        }
    }
}

/// The rate limiters, held in `App`.
pub struct Limits {
    enabled: bool,
    clock: InjectedClock,
    register: EndpointLimiter,
    token: EndpointLimiter,
}

/// The bucket key for an address: IPv4 as is, IPv6 by its /64.
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
        let clock = InjectedClock(clock);
        Limits {
            enabled: cfg.enabled,
            register: EndpointLimiter::new(&cfg.register, &clock),
            token: EndpointLimiter::new(&cfg.token, &clock),
            clock,
        }
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
        let l = match endpoint {
            Endpoint::Register => &self.register,
            Endpoint::Token => &self.token,
        };
        if let Some(ip) = ip {
            if l.per_ip.len() >= MAX_TRACKED_IPS {
                l.per_ip.retain_recent();
                if l.per_ip.len() >= MAX_TRACKED_IPS {
                    return Err(RateLimited {
                        retry_after_secs: 1,
                        bucket: Bucket::Global,
                    });
                }
            }
            l.per_ip
                .check_key(&bucket_key(ip))
                .map_err(|n| self.refused(&n, Bucket::PerIp))?;
        }
        l.global
            .check()
            .map_err(|n| self.refused(&n, Bucket::Global))
    }

    /// Forgets every bucket that is full again (called by the sweeper).
    pub fn retain_recent(&self) {
        for l in [&self.register, &self.token] {
            l.per_ip.retain_recent();
            l.per_ip.shrink_to_fit();
        }
    }

    /// Client-IP buckets currently tracked (for tests and metrics).
    pub fn tracked_ips(&self) -> usize {
        self.register.per_ip.len() + self.token.per_ip.len()
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
