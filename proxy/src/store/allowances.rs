//! Agent allowances: which agents (MCP clients) a person lets use their GitHub account, with
//! which scopes. Stored under `user|client`; callers see only these typed functions.

use super::records::{AllowanceRecord, GrantRecord};
use super::{Keyspace, Store, StoreError, StoreExt, decode};
use crate::ids::{ClientId, UserId};

fn key(user: &UserId, client: &ClientId) -> String {
    format!("{}|{}", user.as_str(), client.as_str())
}

/// Where `client`'s allowance for `user` is stored, for a read batched with others
/// ([`super::call_records`]).
pub(super) fn key_of(user: &UserId, client: &ClientId) -> String {
    key(user, client)
}

/// Prefix of every allowance of `user` (user ids never contain `|`).
fn user_prefix(user: &UserId) -> String {
    format!("{}|", user.as_str())
}

/// The allowance of `client` for `user`, if any.
pub async fn get(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<Option<AllowanceRecord>, StoreError> {
    store
        .get_json(Keyspace::Allowances, &key(user, client))
        .await
}

/// The person's GitHub grant and the allowance of `client` for them, read together (one
/// statement on PostgreSQL: a `tools/call` needs both, and neither read depends on the other).
pub async fn with_grant(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<(Option<GrantRecord>, Option<AllowanceRecord>), StoreError> {
    let allowance = key(user, client);
    let mut found = store
        .get_many(&[super::grants::at(user), (Keyspace::Allowances, &allowance)])
        .await?
        .into_iter();
    let (grant, allowance) = (found.next().flatten(), found.next().flatten());
    Ok((
        grant
            .map(|v| decode(Keyspace::Grants, &v.value))
            .transpose()?,
        allowance
            .map(|v| decode(Keyspace::Allowances, &v.value))
            .transpose()?,
    ))
}

/// Stores (replaces) an allowance.
pub async fn put(store: &dyn Store, rec: &AllowanceRecord) -> Result<(), StoreError> {
    store
        .put_json(
            Keyspace::Allowances,
            &key(&rec.user_id, &rec.client_id),
            rec,
            None,
        )
        .await
}

/// Removes the allowance of `client` for `user`; returns whether there was one.
pub async fn remove(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<bool, StoreError> {
    Ok(store
        .take(Keyspace::Allowances, &key(user, client))
        .await?
        .is_some())
}

/// Every allowance `user` gave.
pub async fn of_user(store: &dyn Store, user: &UserId) -> Result<Vec<AllowanceRecord>, StoreError> {
    Ok(store
        .scan_json::<AllowanceRecord>(Keyspace::Allowances, &user_prefix(user))
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .filter(|r| &r.user_id == user)
        .collect())
}

/// Removes every allowance `user` gave; returns how many.
pub async fn remove_of_user(store: &dyn Store, user: &UserId) -> Result<usize, StoreError> {
    let mut n = 0;
    for rec in of_user(store, user).await? {
        if remove(store, user, &rec.client_id).await? {
            n += 1;
        }
    }
    Ok(n)
}

/// Removes every person's allowance for `client` (the client is being deleted); returns how
/// many.
pub async fn remove_of_client(store: &dyn Store, client: &ClientId) -> Result<usize, StoreError> {
    let mut n = 0;
    for (_, rec) in store
        .scan_json::<AllowanceRecord>(Keyspace::Allowances, "")
        .await?
    {
        if &rec.client_id == client && remove(store, &rec.user_id, client).await? {
            n += 1;
        }
    }
    Ok(n)
}
