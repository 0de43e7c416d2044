//! The only place that reads wall-clock time. Everything else takes a `Clock`, so expiry
//! rules are tested by moving a `ManualClock` instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// Seconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct UnixTime(pub u64);

impl UnixTime {
    /// `self + secs`, saturating.
    pub fn plus(self, secs: u64) -> UnixTime {
        UnixTime(self.0.saturating_add(secs))
    }
    /// Seconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn since(self, earlier: UnixTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> UnixTime;
    /// The current time in milliseconds since the Unix epoch, for the few rules that need
    /// sub-second precision (how long a page was in front of the person before a click).
    fn now_millis(&self) -> u64 {
        self.now().0.saturating_mul(1000)
    }
}

/// Shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// Real time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // this is the one sanctioned reader of wall-clock time
    fn now(&self) -> UnixTime {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        UnixTime(secs)
    }

    #[allow(clippy::disallowed_methods)] // this is the one sanctioned reader of wall-clock time
    fn now_millis(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock tests move by hand (kept in milliseconds; `now` is whole seconds of it).
#[derive(Debug)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// Starts at `start`.
    pub fn new(start: UnixTime) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(start.0.saturating_mul(1000))))
    }
    /// Moves the clock forward.
    pub fn advance(&self, secs: u64) {
        self.advance_millis(secs.saturating_mul(1000));
    }
    /// Moves the clock forward by `millis` milliseconds.
    pub fn advance_millis(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> UnixTime {
        UnixTime(self.0.load(Ordering::SeqCst) / 1000)
    }
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// "3 minutes ago"-style text for pages.
pub fn ago(now: UnixTime, then: UnixTime) -> String {
    let s = now.since(then);
    let (n, unit) = match s {
        0..=59 => return "just now".to_owned(),
        60..=3599 => (s / 60, "minute"),
        3600..=86_399 => (s / 3600, "hour"),
        _ => (s / 86_400, "day"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ago_reads_naturally() {
        let t = UnixTime(1_000_000);
        assert_eq!(ago(t, t), "just now");
        assert_eq!(ago(t.plus(60), t), "1 minute ago");
        assert_eq!(ago(t.plus(7200), t), "2 hours ago");
        assert_eq!(ago(t.plus(3 * 86_400), t), "3 days ago");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(UnixTime(10));
        assert_eq!(c.now(), UnixTime(10));
        c.advance(5);
        assert_eq!(c.now(), UnixTime(15));
    }

    #[test]
    fn manual_clock_counts_milliseconds() {
        let c = ManualClock::new(UnixTime(10));
        assert_eq!(c.now_millis(), 10_000);
        c.advance_millis(999);
        assert_eq!((c.now(), c.now_millis()), (UnixTime(10), 10_999));
        c.advance_millis(1);
        assert_eq!((c.now(), c.now_millis()), (UnixTime(11), 11_000));
    }
}
