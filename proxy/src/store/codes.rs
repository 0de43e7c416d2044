//! Authorization codes and the tombstones redeemed codes leave behind (reuse detection), both
//! by the hash of the code: the code itself is never stored.

use std::future::Future;

use super::records::{CodeRecord, UsedCodeRecord};
use super::update::{Entry, Step};
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::AuthCode;

/// Stores a new code until `expires_at`.
pub async fn put(
    store: &dyn Store,
    code: &AuthCode,
    rec: &CodeRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Codes, &code.hash(), rec, Some(expires_at))
        .await
}

/// The code's record, if it is live (read without consuming it).
pub async fn get(store: &dyn Store, code: &AuthCode) -> Result<Option<CodeRecord>, StoreError> {
    store.get_json(Keyspace::Codes, &code.hash()).await
}

/// Consumes the code (single use: an atomic take); true if it was live.
pub async fn take(store: &dyn Store, code: &AuthCode) -> Result<bool, StoreError> {
    Ok(store.take(Keyspace::Codes, &code.hash()).await?.is_some())
}

/// Leaves the tombstone of a code being redeemed unless one exists; true if this call left it
/// (the first redeemer).
pub async fn insert_used(
    store: &dyn Store,
    code: &AuthCode,
    rec: &UsedCodeRecord,
    expires_at: UnixTime,
) -> Result<bool, StoreError> {
    store
        .insert_json(Keyspace::UsedCodes, &code.hash(), rec, Some(expires_at))
        .await
}

/// The tombstone of a redeemed code, if it is still kept.
pub async fn used(
    store: &dyn Store,
    code: &AuthCode,
) -> Result<Option<UsedCodeRecord>, StoreError> {
    store.get_json(Keyspace::UsedCodes, &code.hash()).await
}

/// Read-modify-write of a code's tombstone (see [`super::update`]).
pub async fn update_used<R, E, Fut>(
    store: &dyn Store,
    code: &AuthCode,
    attempts: usize,
    step: impl FnMut(Option<Entry<UsedCodeRecord>>) -> Fut,
) -> Result<Option<R>, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<Step<UsedCodeRecord, R>, E>>,
{
    super::update(store, Keyspace::UsedCodes, &code.hash(), attempts, step).await
}
