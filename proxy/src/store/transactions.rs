//! Authorization transactions started at `/authorize`, by transaction id.

use super::records::TxnRecord;
use super::update::Held;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::TxnId;

/// Stores a transaction until `expires_at`.
pub async fn put(
    store: &dyn Store,
    id: &TxnId,
    rec: &TxnRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Transactions, id.as_str(), rec, Some(expires_at))
        .await
}

/// The transaction, held for one conditional write (see [`Held`]).
pub async fn hold(store: &dyn Store, id: &TxnId) -> Result<Option<Held<TxnRecord>>, StoreError> {
    super::update::hold(store, Keyspace::Transactions, id.as_str()).await
}

/// Takes the transaction (single use: the person decided).
pub async fn take(store: &dyn Store, id: &TxnId) -> Result<Option<TxnRecord>, StoreError> {
    store.take_json(Keyspace::Transactions, id.as_str()).await
}
