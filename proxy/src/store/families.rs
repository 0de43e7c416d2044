//! Refresh-token families, by family id, and the index of which person holds which family for
//! which client, by `user|client|family` (an empty value), to revoke a person's tokens for a
//! client. The key layout stays here: user ids (`github:<n>`) and family ids (base64url) never
//! contain `|`, so a key splits at its first and last `|` whatever the client id holds.

use std::future::Future;

use super::records::FamilyRecord;
use super::update::{Entry, Step};
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::{ClientId, FamilyId, UserId};

/// The family, if it still exists (revoked ones stay as tombstones until they expire).
pub async fn get(store: &dyn Store, id: &FamilyId) -> Result<Option<FamilyRecord>, StoreError> {
    store.get_json(Keyspace::RefreshFamilies, id.as_str()).await
}

/// Stores a new family unless one with its id exists; true if stored.
pub async fn insert_new(
    store: &dyn Store,
    rec: &FamilyRecord,
    expires_at: UnixTime,
) -> Result<bool, StoreError> {
    store
        .insert_json(
            Keyspace::RefreshFamilies,
            rec.family_id.as_str(),
            rec,
            Some(expires_at),
        )
        .await
}

/// Read-modify-write of one family (see [`super::update`]): `Ok(None)` if every one of
/// `attempts` lost a race.
pub async fn update<R, E, Fut>(
    store: &dyn Store,
    id: &FamilyId,
    attempts: usize,
    step: impl FnMut(Option<Entry<FamilyRecord>>) -> Fut,
) -> Result<Option<R>, E>
where
    E: From<StoreError>,
    Fut: Future<Output = Result<Step<FamilyRecord, R>, E>>,
{
    super::update(
        store,
        Keyspace::RefreshFamilies,
        id.as_str(),
        attempts,
        step,
    )
    .await
}

fn index_key(user: &UserId, client: &ClientId, family: &FamilyId) -> String {
    format!("{}|{}|{}", user.as_str(), client.as_str(), family.as_str())
}

/// Notes that `user` holds `family` for `client`, until `expires_at`.
pub async fn index(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    family: &FamilyId,
    expires_at: UnixTime,
) -> Result<(), StoreError> {
    store
        .put(
            Keyspace::UserFamilies,
            &index_key(user, client, family),
            Vec::new(),
            Some(expires_at),
        )
        .await
}

/// Every family a person holds, for all clients.
pub async fn of_user(store: &dyn Store, user: &UserId) -> Result<Vec<FamilyId>, StoreError> {
    Ok(store
        .scan_prefix(Keyspace::UserFamilies, &format!("{}|", user.as_str()))
        .await?
        .into_iter()
        // The family id is what follows the last `|`.
        .filter_map(|(k, _)| k.rsplit_once('|').map(|(_, f)| FamilyId::new(f)))
        .collect())
}

/// Every family a person holds for one client.
pub async fn of_user_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<Vec<FamilyId>, StoreError> {
    let prefix = format!("{}|{}|", user.as_str(), client.as_str());
    Ok(store
        .scan_prefix(Keyspace::UserFamilies, &prefix)
        .await?
        .into_iter()
        // Exactly this client's keys: after the prefix comes the family id alone (a client id
        // with a `|` in it could otherwise share the prefix).
        .filter_map(|(key, _)| {
            key.strip_prefix(&prefix)
                .filter(|f| !f.contains('|'))
                .map(FamilyId::new)
        })
        .collect())
}

/// The whole index, as (person, client, family).
pub async fn index_all(store: &dyn Store) -> Result<Vec<(UserId, ClientId, FamilyId)>, StoreError> {
    Ok(store
        .scan_prefix(Keyspace::UserFamilies, "")
        .await?
        .into_iter()
        .filter_map(|(k, _)| parse_index_key(&k))
        .collect())
}

/// Splits a `user|client|family` key: the user ends at the first `|` and the family starts
/// after the last, so a client id with a `|` in it still parses as a whole.
fn parse_index_key(k: &str) -> Option<(UserId, ClientId, FamilyId)> {
    let (user, rest) = k.split_once('|')?;
    let (client, family) = rest.rsplit_once('|')?;
    if user.is_empty() || client.is_empty() || family.is_empty() {
        return None;
    }
    Some((
        UserId::new(user),
        ClientId::new(client),
        FamilyId::new(family),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_keys_with_a_bar_in_the_client_id_parse_to_the_real_family() {
        let (u, c, f) = parse_index_key("github:1|https://evil.example/x|y|fam123").unwrap();
        assert_eq!(u.as_str(), "github:1");
        assert_eq!(c.as_str(), "https://evil.example/x|y");
        assert_eq!(f.as_str(), "fam123");
        let (u, c, f) = parse_index_key("github:1|mcpc_abc|fam").unwrap();
        assert_eq!(
            (u.as_str(), c.as_str(), f.as_str()),
            ("github:1", "mcpc_abc", "fam")
        );
        for bad in ["", "github:1", "github:1|fam", "|c|f", "u||f", "u|c|"] {
            assert!(parse_index_key(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn index_keys_round_trip_for_any_client_id() {
        let user = UserId::github(7);
        let fam = FamilyId::new("AAAAAAAAAAAAAAAAAAAAAA");
        for client in [
            "mcpc_abc",
            "https://app.example/c",
            "https://a.example/x|y",
            "a|b|c",
        ] {
            let client = ClientId::new(client);
            assert_eq!(
                parse_index_key(&index_key(&user, &client, &fam)),
                Some((user.clone(), client, fam.clone()))
            );
        }
    }
}
