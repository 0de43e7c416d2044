//! MCP sessions and backend `requestState` values bound to a person and client, each by the
//! hash of the value the backend minted (possession of it is never authentication).

use super::records::McpSessionRecord;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::crypto;

/// Binds a session id unless it is bound already; true if this call bound it.
pub async fn insert_new(
    store: &dyn Store,
    session_id: &str,
    rec: &McpSessionRecord,
    expires_at: UnixTime,
) -> Result<bool, StoreError> {
    store
        .insert_json(
            Keyspace::McpSessions,
            &crypto::hash_secret(session_id),
            rec,
            Some(expires_at),
        )
        .await
}

/// The binding of a session id, if live.
pub async fn get(
    store: &dyn Store,
    session_id: &str,
) -> Result<Option<McpSessionRecord>, StoreError> {
    store
        .get_json(Keyspace::McpSessions, &crypto::hash_secret(session_id))
        .await
}

/// Forgets a session id's binding.
pub async fn remove(store: &dyn Store, session_id: &str) -> Result<(), StoreError> {
    store
        .remove(Keyspace::McpSessions, &crypto::hash_secret(session_id))
        .await
}

/// Binds (or rebinds) a `requestState` value until `expires_at`.
pub async fn put_request_state(
    store: &dyn Store,
    state: &str,
    rec: &McpSessionRecord,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put_json(
            Keyspace::RequestStates,
            &crypto::hash_secret(state),
            rec,
            Some(expires_at),
        )
        .await
}

/// The binding of a `requestState` value, if live.
pub async fn request_state(
    store: &dyn Store,
    state: &str,
) -> Result<Option<McpSessionRecord>, StoreError> {
    store
        .get_json(Keyspace::RequestStates, &crypto::hash_secret(state))
        .await
}
