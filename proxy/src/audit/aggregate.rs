//! Anonymous refusals, counted instead of stored one by one.
//!
//! A request that presents nothing of ours (no token, a token we never issued, a callback
//! whose state is missing, unknown or bound to another browser, a wrong initial access token)
//! is refused without a durable record of its own: a stranger could otherwise make the
//! server store and fsync one event per request. Each refusal moves a Prometheus counter at
//! once and one cell of an in-memory table keyed by (minute, source, refusal), where the
//! source is the client IP as the edge resolved it (IPv6 by its /64, like the rate limits).
//! A background task writes each finished minute's cells as one `anonymous_refusals` event
//! per (source, refusal) under one flush ([`super::Audit::flush_refusals`]); shutdown writes
//! the current minute too. A crash loses at most the unwritten minutes of these counts, never
//! security state.
//!
//! The table holds at most [`MAX_CELLS`] cells. Once full, a refusal from a source without a
//! cell of its own is counted in its minute's `overflow` cell for that refusal (there are
//! only [`Refusal::ALL`] of them per minute), and in `mcp_proxy_audit_refusal_overflow_total`:
//! the count survives, only the source is dropped.
//!
//! Refusals an investigation needs one by one (a wrong-audience, expired or revoked token,
//! replayed codes and refresh tokens, consent decisions, connect-link refusals) are not
//! anonymous and stay individual events.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Seconds one aggregate covers.
pub const MINUTE_SECS: u64 = 60;

/// Most cells the table keeps (about 100 bytes each) before sources are folded into
/// `overflow`.
pub const MAX_CELLS: usize = 10_000;

/// A refusal that needs no record of its own: where it happened and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Refusal {
    /// `/mcp` without a bearer token.
    McpMissing,
    /// `/mcp` with a bearer token we never issued (malformed or unknown).
    McpUnknown,
    /// `/mcp` with `access_token` in the query string.
    McpInQuery,
    /// `/callback/github` without `state`.
    CallbackStateMissing,
    /// `/callback/github` with a state that is unknown, used or expired.
    CallbackStateUnknown,
    /// `/callback/github` with a state not bound to this browser (no or another flow cookie).
    CallbackStateNotThisBrowser,
    /// `/register` refused by the policy: registration closed.
    RegistrationClosed,
    /// `/register` without the initial access token.
    RegistrationMissingToken,
    /// `/register` with a wrong initial access token (someone guessing).
    RegistrationWrongToken,
    /// `/register` refused: its source (address, /64 or /48) holds its share of never-used
    /// registrations (`clients::budget`).
    RegistrationBudgetSource,
    /// `/register` refused: everyone's never-used registrations fill the server's budget.
    RegistrationBudgetEveryone,
}

impl Refusal {
    /// Every refusal (the overflow cells of one minute are at most this many).
    pub const ALL: [Refusal; 11] = [
        Refusal::McpMissing,
        Refusal::McpUnknown,
        Refusal::McpInQuery,
        Refusal::CallbackStateMissing,
        Refusal::CallbackStateUnknown,
        Refusal::CallbackStateNotThisBrowser,
        Refusal::RegistrationClosed,
        Refusal::RegistrationMissingToken,
        Refusal::RegistrationWrongToken,
        Refusal::RegistrationBudgetSource,
        Refusal::RegistrationBudgetEveryone,
    ];

    /// Where it was refused: the `source` label of `mcp_proxy_rejections_total` (the same
    /// values the individual events used to move).
    pub fn at(self) -> &'static str {
        match self {
            Refusal::McpMissing | Refusal::McpUnknown | Refusal::McpInQuery => "mcp_token",
            Refusal::CallbackStateMissing
            | Refusal::CallbackStateUnknown
            | Refusal::CallbackStateNotThisBrowser => "callback",
            Refusal::RegistrationClosed
            | Refusal::RegistrationMissingToken
            | Refusal::RegistrationWrongToken
            | Refusal::RegistrationBudgetSource
            | Refusal::RegistrationBudgetEveryone => "registration",
        }
    }

    /// Why: one short word (a metric label).
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::McpMissing => "missing",
            Refusal::McpUnknown => "unknown",
            Refusal::McpInQuery => "in_query",
            Refusal::CallbackStateMissing => "state_missing",
            Refusal::CallbackStateUnknown => "state_unknown",
            Refusal::CallbackStateNotThisBrowser => "state_not_this_browser",
            Refusal::RegistrationClosed => "closed",
            Refusal::RegistrationMissingToken => "missing_token",
            Refusal::RegistrationWrongToken => "wrong_token",
            Refusal::RegistrationBudgetSource => "unused_budget_source",
            Refusal::RegistrationBudgetEveryone => "unused_budget_everyone",
        }
    }
}

/// Whose refusals a cell counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// A client IP (IPv6: its /64).
    Ip(IpAddr),
    /// The request's address was not known (a router run without connection info).
    Unknown,
    /// Sources that found the table full.
    Overflow,
}

impl Source {
    /// For a client IP, if known.
    pub fn of(ip: Option<IpAddr>) -> Source {
        ip.map_or(Source::Unknown, |ip| {
            Source::Ip(crate::limits::bucket_key(ip))
        })
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Ip(IpAddr::V6(v6)) => write!(f, "{v6}/64"),
            Source::Ip(ip) => write!(f, "{ip}"),
            Source::Unknown => f.write_str("unknown"),
            Source::Overflow => f.write_str("overflow"),
        }
    }
}

/// One finished cell: `count` refusals of one kind from one source in one minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// Start of the minute (Unix seconds, a multiple of [`MINUTE_SECS`]).
    pub minute: u64,
    /// Whose.
    pub source: Source,
    /// What.
    pub refusal: Refusal,
    /// How many.
    pub count: u64,
}

type Key = (u64, Source, Refusal);

/// The in-memory table. Locked only to bump a counter or to take finished minutes.
#[derive(Debug)]
pub struct Table {
    cells: Mutex<BTreeMap<Key, u64>>,
    cap: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table::with_cap(MAX_CELLS)
    }
}

impl Table {
    /// A table holding at most `cap` cells before sources overflow (plus the overflow cells).
    pub fn with_cap(cap: usize) -> Table {
        Table {
            cells: Mutex::new(BTreeMap::new()),
            cap,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, u64>> {
        // A poisoned lock only means another thread panicked mid-update; counts stay usable.
        self.cells
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one refusal at Unix time `now`; false if its source was folded into `overflow`.
    pub fn count(&self, now: u64, source: Source, refusal: Refusal) -> bool {
        let minute = now - now % MINUTE_SECS;
        let mut cells = self.lock();
        let key = (minute, source, refusal);
        let own = cells.len() < self.cap || cells.contains_key(&key);
        let key = if own {
            key
        } else {
            (minute, Source::Overflow, refusal)
        };
        *cells.entry(key).or_insert(0) += 1;
        own
    }

    /// Removes and returns the cells of minutes that ended before `now` (all of them with
    /// `everything`), oldest first.
    pub fn take_finished(&self, now: u64, everything: bool) -> Vec<Counted> {
        let current = now - now % MINUTE_SECS;
        let mut cells = self.lock();
        let keep = if everything {
            BTreeMap::new()
        } else {
            cells.split_off(&(current, Source::Ip(IpAddr::from([0u8; 4])), Refusal::ALL[0]))
        };
        let done = std::mem::replace(&mut *cells, keep);
        done.into_iter()
            .map(|((minute, source, refusal), count)| Counted {
                minute,
                source,
                refusal,
                count,
            })
            .collect()
    }

    /// Puts cells back (a write of them failed), adding to any counted since.
    pub fn restore(&self, counted: Vec<Counted>) {
        let mut cells = self.lock();
        for c in counted {
            *cells.entry((c.minute, c.source, c.refusal)).or_insert(0) += c.count;
        }
    }

    /// Cells held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no cell is held.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Source {
        Source::of(Some(s.parse().unwrap()))
    }

    #[test]
    fn refusals_are_counted_per_minute_source_and_reason_and_taken_once_the_minute_ends() {
        let t = Table::default();
        let t0 = 1_800_000_000; // a multiple of 60
        for _ in 0..3 {
            assert!(t.count(t0 + 5, ip("192.0.2.1"), Refusal::McpMissing));
        }
        t.count(t0 + 59, ip("192.0.2.1"), Refusal::CallbackStateUnknown);
        // The same /64, another address: one source.
        t.count(t0 + 10, ip("2001:db8::1"), Refusal::McpUnknown);
        t.count(t0 + 11, ip("2001:db8::ffff"), Refusal::McpUnknown);
        t.count(t0 + 60, ip("192.0.2.1"), Refusal::McpMissing);
        // The minute has not ended: nothing is due.
        assert!(t.take_finished(t0 + 59, false).is_empty());
        let due = t.take_finished(t0 + 60, false);
        assert_eq!(
            due,
            vec![
                Counted {
                    minute: t0,
                    source: ip("192.0.2.1"),
                    refusal: Refusal::McpMissing,
                    count: 3
                },
                Counted {
                    minute: t0,
                    source: ip("192.0.2.1"),
                    refusal: Refusal::CallbackStateUnknown,
                    count: 1
                },
                Counted {
                    minute: t0,
                    source: ip("2001:db8::"),
                    refusal: Refusal::McpUnknown,
                    count: 2
                },
            ]
        );
        assert_eq!(due[2].source.to_string(), "2001:db8::/64");
        // The next minute stays until it ends, or until shutdown takes everything.
        assert_eq!(t.len(), 1);
        assert!(t.take_finished(t0 + 119, false).is_empty());
        assert_eq!(t.take_finished(t0 + 119, true).len(), 1);
        assert!(t.is_empty());
    }

    #[test]
    fn a_full_table_folds_new_sources_into_overflow_and_keeps_the_count() {
        let t = Table::with_cap(2);
        let t0 = 1_800_000_000;
        assert!(t.count(t0, ip("192.0.2.1"), Refusal::McpMissing));
        assert!(t.count(t0, ip("192.0.2.2"), Refusal::McpMissing));
        for n in 3..100 {
            assert!(!t.count(t0, ip(&format!("192.0.2.{n}")), Refusal::McpMissing));
        }
        // Known cells still count on their own.
        assert!(t.count(t0, ip("192.0.2.1"), Refusal::McpMissing));
        assert_eq!(t.len(), 3);
        let due = t.take_finished(t0 + 60, false);
        let total: u64 = due.iter().map(|c| c.count).sum();
        assert_eq!(total, 100);
        assert!(
            due.iter()
                .any(|c| c.source == Source::Overflow && c.count == 97)
        );
    }

    #[test]
    fn restored_cells_add_to_new_counts() {
        let t = Table::default();
        let t0 = 1_800_000_000;
        t.count(t0, Source::Unknown, Refusal::RegistrationWrongToken);
        let due = t.take_finished(t0 + 60, false);
        t.count(t0, Source::Unknown, Refusal::RegistrationWrongToken);
        t.restore(due);
        let again = t.take_finished(t0 + 60, false);
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].count, 2);
        assert_eq!(again[0].source.to_string(), "unknown");
    }

    #[test]
    fn every_reason_is_a_metric_word() {
        for r in Refusal::ALL {
            assert!(
                r.reason()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{r:?}"
            );
        }
    }
}
