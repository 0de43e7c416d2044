//! The budgets of never-used dynamic registrations (`clients::budget`): one record per budget
//! (everyone, a source, a source's /48), and one per registration saying what it was charged,
//! so that its first use refunds exactly that. Budget keys name an address prefix, never a
//! whole IPv6 address.

use std::future::Future;
use std::net::IpAddr;

use super::records::{UnusedBudgetRecord, UnusedChargeRecord};
use super::update::{Entry, Step};
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::ClientId;

/// One budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Everyone's.
    Everyone,
    /// A client IP's: an IPv4 address, or an IPv6 /64 (the prefix itself).
    Source(IpAddr),
    /// An IPv6 /48's (the prefix itself).
    Net(IpAddr),
}

impl Budget {
    fn key(self) -> String {
        match self {
            Budget::Everyone => "all".to_owned(),
            Budget::Source(ip) => format!("ip|{ip}"),
            Budget::Net(ip) => format!("net|{ip}"),
        }
    }
}

fn charge_key(id: &ClientId) -> String {
    format!("charge|{}", id.as_str())
}

/// The budget as stored (`None`: nothing charged to it, or all of it ended).
pub async fn get(
    store: &dyn Store,
    budget: Budget,
) -> Result<Option<UnusedBudgetRecord>, StoreError> {
    store.get_json(Keyspace::UnusedBudgets, &budget.key()).await
}

/// Read-modify-write of a budget (see [`super::update`]).
pub async fn update<R, E, Fut>(
    store: &dyn Store,
    budget: Budget,
    attempts: usize,
    step: impl FnMut(Option<Entry<UnusedBudgetRecord>>) -> Fut,
) -> Result<Option<R>, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<Step<UnusedBudgetRecord, R>, E>>,
{
    super::update(
        store,
        Keyspace::UnusedBudgets,
        &budget.key(),
        attempts,
        step,
    )
    .await
}

/// Stores what a registration was charged, until `expires_at`.
pub async fn put_charge(
    store: &dyn Store,
    id: &ClientId,
    charge: &UnusedChargeRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(
            Keyspace::UnusedBudgets,
            &charge_key(id),
            charge,
            Some(expires_at),
        )
        .await
}

/// Takes what a registration was charged (once: its refund).
pub async fn take_charge(
    store: &dyn Store,
    id: &ClientId,
) -> Result<Option<UnusedChargeRecord>, StoreError> {
    store
        .take_json(Keyspace::UnusedBudgets, &charge_key(id))
        .await
}
