//! Never-used dynamic registrations are bounded. Open registration lets anyone store a client
//! record (up to a few KB) for `unused_client_ttl_secs`; rate limits bound how fast, not how
//! much. So every registration not vouched for by an initial access token is charged, before
//! anything is stored, to three budgets: its source's (an IPv4 address or an IPv6 /64), its
//! /48's (IPv6 only, [`WIDE_FACTOR`] times the source's) and everyone's, each capped in count
//! and in bytes (the JSON of the registration, of its audit event and of its charge record). A registration that
//! does not fit is refused (429 `slow_down` with `Retry-After`) and stores nothing. The charges
//! are records in the store, changed by compare-and-swap, so every replica of a PostgreSQL
//! deployment counts against the same budgets, and they are written (and flushed) before the
//! 201.
//!
//! A charge lasts until the end of the hour in which its registration would expire unused, so
//! in any span of `unused_client_ttl_secs` a budget admits at most its cap. The first
//! authorization code issued to a registration (which makes it permanent) refunds its charge,
//! as does its removal by registration dedupe: only registrations nobody has used count, and
//! a platform whose users finish signing in is never held back by them.

use std::net::IpAddr;

use crate::clock::UnixTime;
use crate::ids::ClientId;
use crate::limits::{WIDE_FACTOR, bucket_key, wide_key};
use crate::store::records::{BudgetBucket, UnusedBudgetRecord, UnusedChargeRecord};
use crate::store::unused_budget::{self, Budget};
use crate::store::{Step, Store, StoreError, encode};

/// The caps (`[registration]`); a /48 gets [`WIDE_FACTOR`] times a source's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnusedLimits {
    /// Never-used registrations per source (IPv4 address, IPv6 /64).
    pub per_source: u32,
    /// Their bytes per source.
    pub per_source_bytes: u64,
    /// Never-used registrations, everyone's together.
    pub total: u32,
    /// Their bytes, everyone's together.
    pub total_bytes: u64,
}

impl Default for UnusedLimits {
    fn default() -> Self {
        UnusedLimits {
            per_source: 200,
            per_source_bytes: 1 << 20,
            total: 20_000,
            total_bytes: 32 << 20,
        }
    }
}

/// Which budget a registration did not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpentBudget {
    /// The client IP's (address or /64).
    Source,
    /// Its /48's.
    Net,
    /// Everyone's.
    Everyone,
}

impl SpentBudget {
    /// As recorded with anonymous refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            SpentBudget::Source => "unused_budget_source",
            SpentBudget::Net => "unused_budget_net",
            SpentBudget::Everyone => "unused_budget_everyone",
        }
    }
}

/// A registration that does not fit: which budget, and when the earliest charges in it end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent {
    /// The budget.
    pub budget: SpentBudget,
    /// Whole seconds until room may appear (at least 1).
    pub retry_after_secs: u64,
}

/// Why a charge failed.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// The registration does not fit.
    #[error("budget of never-used registrations spent: {0:?}")]
    Spent(Spent),
    /// Every attempt at a budget record lost a race (refused rather than admitted uncounted).
    #[error("budget record contended")]
    Contended,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Charges are grouped by the hour they end.
const HOUR: u64 = 3600;
/// Attempts at one budget record before giving up (it is shared by every registration).
const ATTEMPTS: usize = 16;

/// When a charge for a registration expiring at `expires_at` ends: the end of that hour.
fn bucket_end(expires_at: UnixTime) -> u64 {
    expires_at.0.div_ceil(HOUR).saturating_mul(HOUR)
}

/// The budget as it stands at `now`: charges that ended are dropped.
fn live(mut rec: UnusedBudgetRecord, now: UnixTime) -> UnusedBudgetRecord {
    rec.buckets.retain(|b| b.until > now.0);
    rec
}

/// Whether one more registration of `bytes` fits under (`count`, `bytes_cap`); otherwise the
/// seconds until the earliest charges end.
fn fits(
    rec: &UnusedBudgetRecord,
    now: UnixTime,
    count: u64,
    bytes_cap: u64,
    bytes: u64,
) -> Result<(), u64> {
    let held: u64 = rec.buckets.iter().map(|b| u64::from(b.count)).sum();
    let held_bytes: u64 = rec.buckets.iter().map(|b| b.bytes).sum();
    if held < count && held_bytes.saturating_add(bytes) <= bytes_cap {
        return Ok(());
    }
    let first = rec.buckets.iter().map(|b| b.until).min().unwrap_or(now.0);
    Err(first.saturating_sub(now.0).max(1))
}

fn add(rec: &mut UnusedBudgetRecord, until: u64, bytes: u64) {
    match rec.buckets.iter_mut().find(|b| b.until == until) {
        Some(b) => {
            b.count = b.count.saturating_add(1);
            b.bytes = b.bytes.saturating_add(bytes);
        }
        None => rec.buckets.push(BudgetBucket {
            until,
            count: 1,
            bytes,
        }),
    }
}

fn remove(rec: &mut UnusedBudgetRecord, until: u64, bytes: u64) {
    if let Some(b) = rec.buckets.iter_mut().find(|b| b.until == until) {
        b.count = b.count.saturating_sub(1);
        b.bytes = b.bytes.saturating_sub(bytes);
    }
    rec.buckets.retain(|b| b.count > 0);
}

/// The record is kept until its last charge ends.
fn expiry(rec: &UnusedBudgetRecord) -> Option<UnixTime> {
    rec.buckets.iter().map(|b| b.until).max().map(UnixTime)
}

/// The budgets a registration from `ip` is charged to, narrowest first, with their caps.
fn budgets(ip: Option<IpAddr>, limits: &UnusedLimits) -> Vec<(Budget, u64, u64, SpentBudget)> {
    let mut out = Vec::with_capacity(3);
    if let Some(ip) = ip {
        out.push((
            Budget::Source(bucket_key(ip)),
            u64::from(limits.per_source),
            limits.per_source_bytes,
            SpentBudget::Source,
        ));
        if let Some(net) = wide_key(ip) {
            out.push((
                Budget::Net(net),
                u64::from(limits.per_source).saturating_mul(u64::from(WIDE_FACTOR)),
                limits
                    .per_source_bytes
                    .saturating_mul(u64::from(WIDE_FACTOR)),
                SpentBudget::Net,
            ));
        }
    }
    out.push((
        Budget::Everyone,
        u64::from(limits.total),
        limits.total_bytes,
        SpentBudget::Everyone,
    ));
    out
}

/// What the audit trail adds around an event (its key, id, time, request id and kind), at
/// most: checked against what is really stored by the integration test
/// `charged_bytes_cover_what_a_registration_stores`.
pub const AUDIT_ENVELOPE_BYTES: u64 = 256;

/// The bytes a registration is charged: the JSON of its record (`record_bytes`), of its
/// `client_registered` audit event (`event_bytes`) with the trail's envelope, and of its charge
/// record.
pub fn charged_bytes(
    record_bytes: u64,
    event_bytes: u64,
    source: Option<IpAddr>,
) -> Result<u64, StoreError> {
    // The charge record at its longest: the largest numbers it can hold.
    let charge = UnusedChargeRecord {
        source,
        until: u64::MAX,
        bytes: u64::MAX,
    };
    let charge_bytes = u64::try_from(encode(&charge)?.len()).unwrap_or(u64::MAX);
    Ok(record_bytes
        .saturating_add(event_bytes)
        .saturating_add(AUDIT_ENVELOPE_BYTES)
        .saturating_add(charge_bytes))
}

/// Charges a new registration (`id`, `bytes` from [`charged_bytes`], registered from `ip`,
/// expiring unused at `expires_at`) to its budgets, or refuses it with the first budget it
/// does not fit. Call before storing the registration; a refusal normally writes nothing (the
/// budgets are read first), and one that loses a race to a concurrent registration takes back
/// what it had charged.
pub async fn charge(
    store: &dyn Store,
    limits: &UnusedLimits,
    now: UnixTime,
    ip: Option<IpAddr>,
    id: &ClientId,
    bytes: u64,
    expires_at: UnixTime,
) -> Result<(), BudgetError> {
    let until = bucket_end(expires_at);
    let all = budgets(ip, limits);
    for &(budget, count, cap, which) in &all {
        let rec = live(
            unused_budget::get(store, budget).await?.unwrap_or_default(),
            now,
        );
        if let Err(retry_after_secs) = fits(&rec, now, count, cap, bytes) {
            return Err(BudgetError::Spent(Spent {
                budget: which,
                retry_after_secs,
            }));
        }
    }
    let mut charged = Vec::with_capacity(all.len());
    for &(budget, count, cap, which) in &all {
        let answer = unused_budget::update(store, budget, ATTEMPTS, move |current| async move {
            let mut rec = live(current.map(|e| e.value).unwrap_or_default(), now);
            Ok::<_, StoreError>(match fits(&rec, now, count, cap, bytes) {
                Err(retry) => Step::Keep(Err(retry)),
                Ok(()) => {
                    add(&mut rec, until, bytes);
                    let keep_until = expiry(&rec);
                    Step::PutUntil(rec, keep_until, Ok(()))
                }
            })
        })
        .await;
        let failure = match answer {
            Ok(Some(Ok(()))) => {
                charged.push(budget);
                continue;
            }
            Ok(Some(Err(retry_after_secs))) => BudgetError::Spent(Spent {
                budget: which,
                retry_after_secs,
            }),
            Ok(None) => BudgetError::Contended,
            Err(e) => BudgetError::Store(e),
        };
        for b in charged {
            uncharge(store, b, now, until, bytes).await?;
        }
        return Err(failure);
    }
    unused_budget::put_charge(
        store,
        id,
        &UnusedChargeRecord {
            source: ip,
            until,
            bytes,
        },
        UnixTime(until),
    )
    .await?;
    Ok(())
}

/// Takes one charge back from a budget (a lost race leaves it charged until it ends: the safe
/// side).
async fn uncharge(
    store: &dyn Store,
    budget: Budget,
    now: UnixTime,
    until: u64,
    bytes: u64,
) -> Result<(), StoreError> {
    let done = unused_budget::update(store, budget, ATTEMPTS, move |current| async move {
        Ok::<_, StoreError>(match current {
            None => Step::Keep(()),
            Some(e) => {
                let mut rec = live(e.value, now);
                remove(&mut rec, until, bytes);
                if rec.buckets.is_empty() {
                    Step::Delete(())
                } else {
                    let keep_until = expiry(&rec);
                    Step::PutUntil(rec, keep_until, ())
                }
            }
        })
    })
    .await?;
    if done.is_none() {
        tracing::warn!(
            ?budget,
            "budget of never-used registrations contended; a charge stays until it ends"
        );
    }
    Ok(())
}

/// Refunds what registration `id` was charged, once: it was used (its first code) or removed
/// unused. Nothing if it was never charged (vouched for, or registered before budgets).
pub async fn refund(store: &dyn Store, id: &ClientId, now: UnixTime) -> Result<(), StoreError> {
    let Some(charge) = unused_budget::take_charge(store, id).await? else {
        return Ok(());
    };
    // The limits only size the budgets; the refund needs just which ones.
    for (budget, ..) in budgets(charge.source, &UnusedLimits::default()) {
        uncharge(store, budget, now, charge.until, charge.bytes).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::SledStore;

    const TTL: u64 = 86_400;

    fn limits() -> UnusedLimits {
        UnusedLimits {
            per_source: 3,
            per_source_bytes: 10_000,
            total: 10,
            total_bytes: 100_000,
        }
    }

    fn id(n: u32) -> ClientId {
        ClientId::new(format!("mcpc_test{n}"))
    }

    async fn setup() -> (SledStore, std::sync::Arc<ManualClock>) {
        let clock = ManualClock::new(UnixTime(1_000_000));
        (SledStore::temporary(clock.clone()).unwrap(), clock)
    }

    async fn try_one(
        s: &SledStore,
        now: UnixTime,
        ip: &str,
        n: u32,
        bytes: u64,
    ) -> Result<(), BudgetError> {
        let ip: IpAddr = ip.parse().unwrap();
        charge(s, &limits(), now, Some(ip), &id(n), bytes, now.plus(TTL)).await
    }

    fn spent(r: Result<(), BudgetError>) -> Spent {
        match r {
            Err(BudgetError::Spent(s)) => s,
            other => panic!("expected a spent budget, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_source_gets_its_count_then_is_refused_until_the_hour_its_charges_end() {
        let (s, c) = setup().await;
        let now = crate::clock::Clock::now(c.as_ref());
        for n in 0..3 {
            try_one(&s, now, "203.0.113.7", n, 100).await.unwrap();
        }
        let refused = spent(try_one(&s, now, "203.0.113.7", 3, 100).await);
        assert_eq!(refused.budget, SpentBudget::Source);
        let ends = bucket_end(now.plus(TTL));
        assert_eq!(refused.retry_after_secs, ends - now.0);
        assert!(refused.retry_after_secs >= TTL);
        // Another address is unaffected.
        try_one(&s, now, "203.0.113.8", 4, 100).await.unwrap();
        // Once the charges end, the source has room again.
        let later = UnixTime(ends);
        try_one(&s, later, "203.0.113.7", 5, 100).await.unwrap();
    }

    #[tokio::test]
    async fn bytes_count_as_well_as_registrations() {
        let (s, c) = setup().await;
        let now = crate::clock::Clock::now(c.as_ref());
        try_one(&s, now, "203.0.113.7", 0, 9_000).await.unwrap();
        let refused = spent(try_one(&s, now, "203.0.113.7", 1, 1_001).await);
        assert_eq!(refused.budget, SpentBudget::Source);
        try_one(&s, now, "203.0.113.7", 2, 1_000).await.unwrap();
    }

    /// Rotating /64s inside one /48 meets the /48's budget (4 x a source's); rotating whole
    /// addresses meets everyone's. A refusal leaves nothing charged.
    #[tokio::test]
    async fn a_48_is_bounded_across_its_64s_and_everyone_across_all() {
        let (s, c) = setup().await;
        let now = crate::clock::Clock::now(c.as_ref());
        let wide = UnusedLimits {
            total: 100,
            ..limits()
        };
        let mut n = 0;
        for sub in 0..4 {
            for _ in 0..3 {
                let ip: IpAddr = format!("2001:db8:1:{sub}::1").parse().unwrap();
                charge(&s, &wide, now, Some(ip), &id(n), 10, now.plus(TTL))
                    .await
                    .unwrap();
                n += 1;
            }
        }
        let ip: IpAddr = "2001:db8:1:9::1".parse().unwrap();
        let refused = spent(charge(&s, &wide, now, Some(ip), &id(n), 10, now.plus(TTL)).await);
        assert_eq!(refused.budget, SpentBudget::Net);
        let fresh = Budget::Source("2001:db8:1:9::".parse().unwrap());
        assert_eq!(unused_budget::get(&s, fresh).await.unwrap(), None);
        assert_eq!(unused_budget::take_charge(&s, &id(n)).await.unwrap(), None);

        let (s, _) = setup().await;
        for n in 0..10 {
            try_one(&s, now, &format!("198.51.100.{n}"), n, 10)
                .await
                .unwrap();
        }
        let refused = spent(try_one(&s, now, "198.51.100.77", 10, 10).await);
        assert_eq!(refused.budget, SpentBudget::Everyone);
        let fresh = Budget::Source("198.51.100.77".parse().unwrap());
        assert_eq!(unused_budget::get(&s, fresh).await.unwrap(), None);
    }

    #[tokio::test]
    async fn first_use_refunds_exactly_once() {
        let (s, c) = setup().await;
        let now = crate::clock::Clock::now(c.as_ref());
        for n in 0..3 {
            try_one(&s, now, "203.0.113.7", n, 100).await.unwrap();
        }
        spent(try_one(&s, now, "203.0.113.7", 3, 100).await);
        refund(&s, &id(0), now).await.unwrap();
        refund(&s, &id(0), now).await.unwrap();
        try_one(&s, now, "203.0.113.7", 4, 100).await.unwrap();
        spent(try_one(&s, now, "203.0.113.7", 5, 100).await);
    }
}
