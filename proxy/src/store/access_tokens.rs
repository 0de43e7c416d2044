//! Access tokens, by the hash of the token.

use std::sync::Arc;

use super::records::AccessTokenRecord;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::AccessToken;

/// Stores a new token's record, kept until `kept_until`.
pub async fn put(
    store: &dyn Store,
    token: &AccessToken,
    rec: &AccessTokenRecord,
    kept_until: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::AccessTokens, &token.hash(), rec, Some(kept_until))
        .await
}

/// The token's record, if it is kept.
pub async fn get(
    store: &dyn Store,
    token: &AccessToken,
) -> Result<Option<AccessTokenRecord>, StoreError> {
    store.get_json(Keyspace::AccessTokens, &token.hash()).await
}

/// [`get`] for the `/mcp` checks, which the replica's cache may answer (`store::cache`).
/// The record is shared with the cache's entry, decoded once (`store::cache::CachedRecord`).
pub async fn get_cached(
    store: &dyn Store,
    token: &AccessToken,
) -> Result<Option<Arc<AccessTokenRecord>>, StoreError> {
    let hash = token.hash();
    let found = store
        .get_many_cached(&[(Keyspace::AccessTokens, &hash)])
        .await?
        .into_iter()
        .next()
        .flatten();
    found.map(|r| r.decoded(Keyspace::AccessTokens)).transpose()
}

/// Forgets the token.
pub async fn remove(store: &dyn Store, token: &AccessToken) -> Result<(), StoreError> {
    store.remove(Keyspace::AccessTokens, &token.hash()).await
}
