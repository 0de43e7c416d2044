//! Per-person consents, by `user|client|sha256(registered redirect URI)`. The key layout stays
//! here: user ids never contain `|` and the redirect hash is hex, so the rows of one (person,
//! client) are exactly those whose key is the `user|client|` prefix and then no further `|`,
//! whatever the client id holds.

use super::records::ConsentRecord;
use super::update::Held;
use super::{Keyspace, Store, StoreError, StoreExt, Versioned};
use crate::crypto;
use crate::ids::{ClientId, UserId};

fn key(user: &UserId, client: &ClientId, registered_redirect: &str) -> String {
    format!(
        "{}|{}|{}",
        user.as_str(),
        client.as_str(),
        crypto::hash_secret(registered_redirect)
    )
}

fn user_prefix(user: &UserId) -> String {
    format!("{}|", user.as_str())
}

/// The consent rows of exactly one (person, client).
async fn client_rows(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<Vec<(String, Versioned)>, StoreError> {
    let prefix = format!("{}{}|", user_prefix(user), client.as_str());
    let mut rows = store.scan_prefix(Keyspace::Consents, &prefix).await?;
    rows.retain(|(k, _)| {
        k.get(prefix.len()..)
            .is_some_and(|rest| !rest.contains('|'))
    });
    Ok(rows)
}

/// The person's consent for this client and registered redirect URI, if any.
pub async fn get(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    registered_redirect: &str,
) -> Result<Option<ConsentRecord>, StoreError> {
    store
        .get_json(Keyspace::Consents, &key(user, client, registered_redirect))
        .await
}

/// Stores (replaces) a consent, under its person, client and registered redirect URI.
pub async fn put(store: &dyn Store, rec: &ConsentRecord) -> Result<(), StoreError> {
    store
        .put_json(
            Keyspace::Consents,
            &key(&rec.user_id, &rec.client_id, &rec.redirect_uri),
            rec,
            None,
        )
        .await
}

/// The person's consents for one client, each held for one conditional write.
pub async fn hold_of_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<Vec<Held<ConsentRecord>>, StoreError> {
    client_rows(store, user, client)
        .await?
        .into_iter()
        .map(|(k, v)| Held::decode(Keyspace::Consents, k, v))
        .collect()
}

/// Whether the person has any consent for the client.
pub async fn exists_for_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<bool, StoreError> {
    Ok(!client_rows(store, user, client).await?.is_empty())
}

/// All of a person's consents.
pub async fn of_user(store: &dyn Store, user: &UserId) -> Result<Vec<ConsentRecord>, StoreError> {
    Ok(store
        .scan_json::<ConsentRecord>(Keyspace::Consents, &user_prefix(user))
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// Every consent anyone gave (the admin API's per-client counts).
pub async fn all(store: &dyn Store) -> Result<Vec<ConsentRecord>, StoreError> {
    Ok(store
        .scan_json::<ConsentRecord>(Keyspace::Consents, "")
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// Forgets every consent the person gave the client; returns how many there were.
pub async fn remove_of_client(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<usize, StoreError> {
    let rows = client_rows(store, user, client).await?;
    for (k, _) in &rows {
        store.remove(Keyspace::Consents, k).await?;
    }
    Ok(rows.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{ManualClock, UnixTime};
    use crate::oauth::scope::ScopeSet;
    use crate::store::SledStore;

    fn consent(user: &UserId, client: &str) -> ConsentRecord {
        ConsentRecord {
            user_id: user.clone(),
            client_id: ClientId::new(client),
            redirect_uri: "https://a.example/cb".into(),
            scopes: ScopeSet::default(),
            granted_at: UnixTime(1),
            last_used_at: None,
            client_fingerprint: None,
        }
    }

    #[tokio::test]
    async fn a_client_id_that_extends_another_shares_none_of_its_rows() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap();
        let alice = UserId::github(1);
        let (short, long) = ("https://a.example/c", "https://a.example/c|x");
        put(&s, &consent(&alice, long)).await.unwrap();
        assert!(
            !exists_for_client(&s, &alice, &ClientId::new(short))
                .await
                .unwrap()
        );
        assert_eq!(
            remove_of_client(&s, &alice, &ClientId::new(short))
                .await
                .unwrap(),
            0
        );
        assert!(
            exists_for_client(&s, &alice, &ClientId::new(long))
                .await
                .unwrap()
        );
        put(&s, &consent(&alice, short)).await.unwrap();
        assert_eq!(
            hold_of_client(&s, &alice, &ClientId::new(long))
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            remove_of_client(&s, &alice, &ClientId::new(short))
                .await
                .unwrap(),
            1
        );
        assert!(
            exists_for_client(&s, &alice, &ClientId::new(long))
                .await
                .unwrap()
        );
    }
}
