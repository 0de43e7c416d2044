//! Short-lived tokens given to exchange-mode backends, by the hash of the token.

use super::records::BackendTokenRecord;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::BackendToken;

/// Stores a new token's record until `expires_at`.
pub async fn put(
    store: &dyn Store,
    token: &BackendToken,
    rec: &BackendTokenRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(
            Keyspace::BackendTokens,
            &token.hash(),
            rec,
            Some(expires_at),
        )
        .await
}

/// The token's record, if it is live.
pub async fn get(
    store: &dyn Store,
    token: &BackendToken,
) -> Result<Option<BackendTokenRecord>, StoreError> {
    store.get_json(Keyspace::BackendTokens, &token.hash()).await
}
