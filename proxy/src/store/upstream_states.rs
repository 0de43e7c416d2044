//! The `state` values sent to GitHub, by the hash of the state.

use super::records::UpstreamStateRecord;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::UpstreamState;

/// Stores a new state until `expires_at` unless one exists; true if stored.
pub async fn insert_new(
    store: &dyn Store,
    state: &UpstreamState,
    rec: &UpstreamStateRecord,
    expires_at: UnixTime,
) -> Result<bool, StoreError> {
    store
        .insert_json(
            Keyspace::UpstreamStates,
            &state.hash(),
            rec,
            Some(expires_at),
        )
        .await
}

/// Takes the state (single use).
pub async fn take(
    store: &dyn Store,
    state: &UpstreamState,
) -> Result<Option<UpstreamStateRecord>, StoreError> {
    store
        .take_json(Keyspace::UpstreamStates, &state.hash())
        .await
}

/// The state, held for one conditional write or removal (see [`super::Held`]): a return that
/// must be confirmed records when its page was shown, and is taken only if unchanged.
pub async fn hold(
    store: &dyn Store,
    state: &UpstreamState,
) -> Result<Option<super::Held<UpstreamStateRecord>>, StoreError> {
    super::update::hold(store, Keyspace::UpstreamStates, &state.hash()).await
}
