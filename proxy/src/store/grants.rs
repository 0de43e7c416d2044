//! People's GitHub grants (sealed tokens), by user id.

use super::records::GrantRecord;
use super::update::Held;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::ids::UserId;

/// Stores (replaces) the person's grant.
pub async fn put(store: &dyn Store, user: &UserId, rec: &GrantRecord) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Grants, user.as_str(), rec, None)
        .await
}

/// The person's grant, if any.
pub async fn get(store: &dyn Store, user: &UserId) -> Result<Option<GrantRecord>, StoreError> {
    store.get_json(Keyspace::Grants, user.as_str()).await
}

/// Where the person's grant is stored, for a read batched with others
/// ([`super::allowances::with_grant`]).
pub(super) fn at(user: &UserId) -> (Keyspace, &str) {
    (Keyspace::Grants, user.as_str())
}

/// The person's grant, held for one conditional write (see [`Held`]).
pub async fn hold(
    store: &dyn Store,
    user: &UserId,
) -> Result<Option<Held<GrantRecord>>, StoreError> {
    super::update::hold(store, Keyspace::Grants, user.as_str()).await
}

/// Takes the person's grant away (atomically: a grant stored meanwhile is the one taken).
pub async fn take(store: &dyn Store, user: &UserId) -> Result<Option<GrantRecord>, StoreError> {
    store.take_json(Keyspace::Grants, user.as_str()).await
}
