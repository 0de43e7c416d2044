//! Unused dynamic registrations with identical metadata from one client IP (registration
//! dedupe), by the hash of a canonical description of both: the description may hold the
//! client's IP, so only its hash is a key.

use std::future::Future;

use super::records::DedupeRecord;
use super::update::{Entry, Step};
use super::{Keyspace, Store, StoreError};
use crate::crypto;

/// Read-modify-write of the list for `identity` (see [`super::update`]).
pub async fn update<R, E, Fut>(
    store: &dyn Store,
    identity: &str,
    attempts: usize,
    step: impl FnMut(Option<Entry<DedupeRecord>>) -> Fut,
) -> Result<Option<R>, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<Step<DedupeRecord, R>, E>>,
{
    super::update(
        store,
        Keyspace::ClientDedupe,
        &crypto::hash_secret(identity),
        attempts,
        step,
    )
    .await
}
