//! Each person's standing with GitHub as the admission binding last established it, by user
//! id. Callers name the person; the key layout stays here. Not a secret: ids and times only.

use super::records::StandingCheck;
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::ids::UserId;

/// The person's last standing check, if any.
pub async fn get(store: &dyn Store, user: &UserId) -> Result<Option<StandingCheck>, StoreError> {
    store.get_json(Keyspace::Standing, user.as_str()).await
}

/// Records a check (replacing the previous one).
pub async fn put(
    store: &dyn Store,
    user: &UserId,
    check: &StandingCheck,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::Standing, user.as_str(), check, None)
        .await
}

/// Forgets the person's standing (they lost access: the next sign-in decides afresh).
pub async fn remove(store: &dyn Store, user: &UserId) -> Result<(), StoreError> {
    store.remove(Keyspace::Standing, user.as_str()).await
}
