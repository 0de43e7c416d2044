//! Connect links, by the hash of their code, and the one open link per person, agent and
//! service, by `user|client|service`. The key layout stays here: user ids never contain `|`
//! and the service is a fixed word, so no two (person, agent) pairs share an index key.

use super::records::{ConnectIndexRecord, ConnectLinkRecord};
use super::{Keyspace, Step, Store, StoreError, StoreExt, update};
use crate::crypto;
use crate::ids::{ClientId, UserId};

/// Where a link is stored: the hash of its code (the code itself is never stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkKey(String);

impl LinkKey {
    /// The key of the link with this code.
    pub fn of_code(code: &str) -> LinkKey {
        LinkKey(crypto::hash_secret(code))
    }
    /// The key of the link an index record points to.
    pub fn of_open(open: &ConnectIndexRecord) -> LinkKey {
        LinkKey(open.code_hash.clone())
    }
}

/// The link, if it is live.
pub async fn get(
    store: &dyn Store,
    key: &LinkKey,
) -> Result<Option<ConnectLinkRecord>, StoreError> {
    store.get_json(Keyspace::ConnectLinks, &key.0).await
}

/// Stores a link until it expires.
pub async fn put(
    store: &dyn Store,
    key: &LinkKey,
    rec: &ConnectLinkRecord,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::ConnectLinks, &key.0, rec, Some(rec.expires_at))
        .await
}

/// Records when the link's no-JavaScript confirmation step was shown, if the link is still
/// open (one closed in the meantime stays closed: a mark never brings it back).
pub async fn confirm_shown(
    store: &dyn Store,
    key: &LinkKey,
    shown_at_ms: u64,
) -> Result<Option<ConnectLinkRecord>, StoreError> {
    update::<ConnectLinkRecord, Option<ConnectLinkRecord>, StoreError, _, _>(
        store,
        Keyspace::ConnectLinks,
        &key.0,
        8,
        |current| async move {
            Ok(match current {
                None => Step::Keep(None),
                Some(e) => {
                    let mut rec = e.value;
                    rec.confirm_shown_at_ms = Some(shown_at_ms);
                    let expires = Some(rec.expires_at);
                    Step::PutUntil(rec.clone(), expires, Some(rec))
                }
            })
        },
    )
    .await
    .map(Option::flatten)
}

/// Removes a link: its code becomes unknown.
pub async fn remove(store: &dyn Store, key: &LinkKey) -> Result<(), StoreError> {
    store.remove(Keyspace::ConnectLinks, &key.0).await
}

fn index_key(user: &UserId, client: &ClientId, service: &str) -> String {
    format!("{}|{}|{service}", user.as_str(), client.as_str())
}

/// The open link of (person, agent, service), if any.
pub async fn open(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    service: &str,
) -> Result<Option<ConnectIndexRecord>, StoreError> {
    store
        .get_json(
            Keyspace::ConnectLinkIndex,
            &index_key(user, client, service),
        )
        .await
}

/// Records `link` (stored at `key`) as the open link of its person, agent and service until
/// it expires, replacing any.
pub async fn put_open(
    store: &dyn Store,
    key: &LinkKey,
    link: &ConnectLinkRecord,
) -> Result<(), StoreError> {
    let idx = ConnectIndexRecord {
        link_id: link.link_id.clone(),
        kind: link.kind,
        code_hash: key.0.clone(),
    };
    store
        .put_json(
            Keyspace::ConnectLinkIndex,
            &index_key(&link.user_id, &link.client_id, &link.service),
            &idx,
            Some(link.expires_at),
        )
        .await
}

/// Forgets the open link of (person, agent, service).
pub async fn remove_open(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    service: &str,
) -> Result<(), StoreError> {
    store
        .remove(
            Keyspace::ConnectLinkIndex,
            &index_key(user, client, service),
        )
        .await
}
