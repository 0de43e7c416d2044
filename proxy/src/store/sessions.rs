//! The proxy's browser sessions, by the hash of the session token.

use super::records::SessionRecord;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::SessionToken;

/// Stores a new session until `expires_at`.
pub async fn put(
    store: &dyn Store,
    token: &SessionToken,
    rec: &SessionRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Sessions, &token.hash(), rec, Some(expires_at))
        .await
}

/// The session of this token, if live.
pub async fn get(
    store: &dyn Store,
    token: &SessionToken,
) -> Result<Option<SessionRecord>, StoreError> {
    store.get_json(Keyspace::Sessions, &token.hash()).await
}

/// Ends the session whose token hashes to `token_hash` ([`SessionToken::hash`]: what a
/// signed-in request keeps of its token).
pub async fn remove(store: &dyn Store, token_hash: &str) -> Result<(), StoreError> {
    store.remove(Keyspace::Sessions, token_hash).await
}
