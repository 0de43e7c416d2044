//! Dynamically registered MCP clients, by client id. A registration nobody has used yet is
//! stored with an expiry (the reaper's sweep removes it); its first authorization code makes
//! it permanent (no expiry). That expiry is the "unused" mark, so it is read and changed only
//! here.

use super::records::ClientRecord;
use super::update::{Entry, Held, Step};
use super::{Keyspace, Store, StoreError, StoreExt, Versioned, encode};
use crate::clock::UnixTime;
use crate::ids::ClientId;

/// The registration, if it exists.
pub async fn get(store: &dyn Store, id: &ClientId) -> Result<Option<ClientRecord>, StoreError> {
    store.get_json(Keyspace::Clients, id.as_str()).await
}

/// Every registration.
pub async fn all(store: &dyn Store) -> Result<Vec<ClientRecord>, StoreError> {
    Ok(store
        .scan_json::<ClientRecord>(Keyspace::Clients, "")
        .await?
        .into_iter()
        .map(|(_, c)| c)
        .collect())
}

/// Stores a new registration, unused until `expires_at`, unless its id exists. Holds what it
/// wrote (`None`: the id was taken), so a later change of its lifetime happens only if
/// nothing touched it meanwhile.
pub async fn insert_unused(
    store: &dyn Store,
    rec: ClientRecord,
    expires_at: UnixTime,
) -> Result<Option<Held<ClientRecord>>, StoreError> {
    let raw = Versioned {
        value: encode(&rec)?,
        expires_at: Some(expires_at),
    };
    let key = rec.client_id.as_str().to_owned();
    if !store
        .insert_new(Keyspace::Clients, &key, raw.value.clone(), raw.expires_at)
        .await?
    {
        return Ok(None);
    }
    Ok(Some(Held::written(Keyspace::Clients, key, raw, rec)))
}

/// Removes a registration; true if there was one.
pub async fn remove(store: &dyn Store, id: &ClientId) -> Result<bool, StoreError> {
    Ok(store.take(Keyspace::Clients, id.as_str()).await?.is_some())
}

/// A registration nobody has used yet, as read.
#[derive(Debug)]
pub struct Unused {
    key: String,
    raw: Versioned,
    registered_at: Option<UnixTime>,
}

impl Unused {
    /// When it registered; `None` if its record does not decode (such a record is not worth
    /// protecting: removing it loses nothing).
    pub fn registered_at(&self) -> Option<UnixTime> {
        self.registered_at
    }

    /// Removes it if it is still exactly as read (still unused); true if removed.
    pub async fn evict(&self, store: &dyn Store) -> Result<bool, StoreError> {
        store
            .compare_and_swap(Keyspace::Clients, &self.key, &self.raw, None)
            .await
    }
}

/// The registration if it exists and is still unused.
pub async fn unused(store: &dyn Store, id: &ClientId) -> Result<Option<Unused>, StoreError> {
    Ok(match store.get(Keyspace::Clients, id.as_str()).await? {
        Some(raw) if raw.expires_at.is_some() => Some(Unused {
            registered_at: super::decode::<ClientRecord>(Keyspace::Clients, &raw.value)
                .ok()
                .map(|r| r.registered_at),
            key: id.as_str().to_owned(),
            raw,
        }),
        _ => None,
    })
}

/// What [`mark_used`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkedUsed {
    /// There is no such registration.
    Gone,
    /// It was unused, and this call made it permanent (exactly one call sees this).
    Made,
    /// It was permanent already.
    Kept,
}

/// Makes a registration permanent (it is about to get its first code), the record's bytes
/// untouched. `Ok(None)`: every one of `attempts` lost a race.
pub async fn mark_used(
    store: &dyn Store,
    id: &ClientId,
    attempts: usize,
) -> Result<Option<MarkedUsed>, StoreError> {
    super::update(
        store,
        Keyspace::Clients,
        id.as_str(),
        attempts,
        |current: Option<Entry<ClientRecord>>| async move {
            Ok::<_, StoreError>(match current {
                None => Step::Keep(MarkedUsed::Gone),
                Some(c) if c.expires_at.is_none() => Step::Keep(MarkedUsed::Kept),
                Some(_) => Step::SetExpiry(None, MarkedUsed::Made),
            })
        },
    )
    .await
}

/// A probe read for readiness checks: whether the store answers at all.
pub async fn probe(store: &dyn Store) -> Result<(), StoreError> {
    store
        .get(Keyspace::Clients, "readyz-probe")
        .await
        .map(|_| ())
}
