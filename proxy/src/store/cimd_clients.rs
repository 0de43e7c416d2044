//! Metadata-document clients seen, by their `client_id` URL.

use std::future::Future;

use super::records::CimdClientRecord;
use super::update::{Entry, Step};
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::ids::ClientId;

/// The record of a metadata-document client, if it has one.
pub async fn get(store: &dyn Store, id: &ClientId) -> Result<Option<CimdClientRecord>, StoreError> {
    store.get_json(Keyspace::CimdClients, id.as_str()).await
}

/// Every metadata-document client's record.
pub async fn all(store: &dyn Store) -> Result<Vec<CimdClientRecord>, StoreError> {
    Ok(store
        .scan_json::<CimdClientRecord>(Keyspace::CimdClients, "")
        .await?
        .into_iter()
        .map(|(_, d)| d)
        .collect())
}

/// Read-modify-write of one record (see [`super::update`]).
pub async fn update<R, E, Fut>(
    store: &dyn Store,
    id: &ClientId,
    attempts: usize,
    step: impl FnMut(Option<Entry<CimdClientRecord>>) -> Fut,
) -> Result<Option<R>, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<Step<CimdClientRecord, R>, E>>,
{
    super::update(store, Keyspace::CimdClients, id.as_str(), attempts, step).await
}
