//! Approval links of `[[policy]] decision = "ask"` and the approvals they yield.
//!
//! * A link is stored by the hash of its code (the code is never stored), until it expires.
//! * One open link per person, agent and call (`user|client|call`, where `call` is a digest of
//!   the tool name and the arguments' digest): asking again for the same call finds it, and a
//!   person's open links are one prefix scan (user ids never contain `|`, and `call` has a fixed
//!   length, so no two triples share a key whatever the client id holds).
//! * An approval is stored under the same `user|client|call` key until the ask expires, and is
//!   used with `take`: one approval forwards one call, on every replica sharing the store.
//! * Each person's recent answers, newest first, at most [`HISTORY_LEN`].

use super::records::{
    ApprovalHistoryEntry, ApprovalHistoryRecord, ApprovalIndexRecord, ApprovalLinkRecord,
    ToolApprovalRecord,
};
use super::{Keyspace, Step, Store, StoreError, StoreExt, update};
use crate::clock::UnixTime;
use crate::crypto;
use crate::ids::{ClientId, UserId};

/// Answers kept per person for the account page.
pub const HISTORY_LEN: usize = 20;

/// Where an approval link is stored: the hash of its code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalKey(String);

impl ApprovalKey {
    /// The key of the link with this code.
    pub fn of_code(code: &str) -> ApprovalKey {
        ApprovalKey(crypto::hash_secret(code))
    }
    /// The key of the link an index record points to.
    pub fn of_open(open: &ApprovalIndexRecord) -> ApprovalKey {
        ApprovalKey(open.code_hash.clone())
    }
}

/// What a call is, for the index and the approval: the tool and the digest of its arguments.
fn call_digest(tool: &str, arguments_digest: &str) -> String {
    // Length-prefixed: no two (tool, digest) pairs hash the same input.
    crypto::b64url(&crypto::sha256(
        format!("{}:{tool}{arguments_digest}", tool.len()).as_bytes(),
    ))
}

fn call_key(user: &UserId, client: &ClientId, tool: &str, arguments_digest: &str) -> String {
    format!(
        "{}|{}|{}",
        user.as_str(),
        client.as_str(),
        call_digest(tool, arguments_digest)
    )
}

fn user_prefix(user: &UserId) -> String {
    format!("{}|", user.as_str())
}

/// The link, if it is live.
pub async fn get(
    store: &dyn Store,
    key: &ApprovalKey,
) -> Result<Option<ApprovalLinkRecord>, StoreError> {
    store.get_json(Keyspace::ApprovalLinks, &key.0).await
}

/// Stores a link and records it as the open link of its call, both until it expires.
pub async fn put(
    store: &dyn Store,
    key: &ApprovalKey,
    rec: &ApprovalLinkRecord,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::ApprovalLinks, &key.0, rec, Some(rec.expires_at))
        .await?;
    let idx = ApprovalIndexRecord {
        link_id: rec.link_id.clone(),
        code_hash: key.0.clone(),
        tool: rec.tool.clone(),
        client_id: rec.client_id.clone(),
        rule_id: rec.rule_id.clone(),
        created_at: rec.created_at,
        expires_at: rec.expires_at,
    };
    store
        .put_json(
            Keyspace::ApprovalLinkIndex,
            &call_key(
                &rec.user_id,
                &rec.client_id,
                &rec.tool,
                &rec.arguments_digest,
            ),
            &idx,
            Some(rec.expires_at),
        )
        .await
}

/// The open link of this call, if any.
pub async fn open(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    tool: &str,
    arguments_digest: &str,
) -> Result<Option<ApprovalIndexRecord>, StoreError> {
    store
        .get_json(
            Keyspace::ApprovalLinkIndex,
            &call_key(user, client, tool, arguments_digest),
        )
        .await
}

/// Every open link of `user`.
pub async fn open_of_user(
    store: &dyn Store,
    user: &UserId,
) -> Result<Vec<ApprovalIndexRecord>, StoreError> {
    Ok(store
        .scan_json::<ApprovalIndexRecord>(Keyspace::ApprovalLinkIndex, &user_prefix(user))
        .await?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// Records when the link's confirmation step was shown (its code and expiry unchanged).
pub async fn confirm_shown(
    store: &dyn Store,
    key: &ApprovalKey,
    rec: &ApprovalLinkRecord,
) -> Result<(), StoreError> {
    store
        .put_json(Keyspace::ApprovalLinks, &key.0, rec, Some(rec.expires_at))
        .await
}

/// Removes a link (answered): its code becomes unknown and its call has no open link.
pub async fn close(
    store: &dyn Store,
    key: &ApprovalKey,
    rec: &ApprovalLinkRecord,
) -> Result<(), StoreError> {
    store.remove(Keyspace::ApprovalLinks, &key.0).await?;
    let idx = call_key(
        &rec.user_id,
        &rec.client_id,
        &rec.tool,
        &rec.arguments_digest,
    );
    if let Some(open) = store
        .get_json::<ApprovalIndexRecord>(Keyspace::ApprovalLinkIndex, &idx)
        .await?
        && open.link_id == rec.link_id
    {
        store.remove(Keyspace::ApprovalLinkIndex, &idx).await?;
    }
    Ok(())
}

/// Stores the approval of the link's call, usable once until the link would have expired.
pub async fn approve(
    store: &dyn Store,
    rec: &ApprovalLinkRecord,
    approved_at: UnixTime,
) -> Result<(), StoreError> {
    let approval = ToolApprovalRecord {
        link_id: rec.link_id.clone(),
        rule_id: rec.rule_id.clone(),
        approved_at,
    };
    store
        .put_json(
            Keyspace::ToolApprovals,
            &call_key(
                &rec.user_id,
                &rec.client_id,
                &rec.tool,
                &rec.arguments_digest,
            ),
            &approval,
            Some(rec.expires_at),
        )
        .await
}

/// Uses the approval of this call, if there is a live one: it is gone once this returns.
pub async fn take_approval(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
    tool: &str,
    arguments_digest: &str,
) -> Result<Option<ToolApprovalRecord>, StoreError> {
    store
        .take_json(
            Keyspace::ToolApprovals,
            &call_key(user, client, tool, arguments_digest),
        )
        .await
}

/// Adds an answer to the person's history, newest first, keeping [`HISTORY_LEN`].
pub async fn remember(
    store: &dyn Store,
    user: &UserId,
    entry: ApprovalHistoryEntry,
) -> Result<(), StoreError> {
    update::<ApprovalHistoryRecord, (), StoreError, _, _>(
        store,
        Keyspace::ApprovalHistory,
        user.as_str(),
        8,
        |current| {
            let entry = entry.clone();
            async move {
                let mut h = current.map(|e| e.value).unwrap_or_default();
                h.entries.insert(0, entry);
                h.entries.truncate(HISTORY_LEN);
                Ok(Step::PutUntil(h, None, ()))
            }
        },
    )
    .await
    .map(|_| ())
}

/// The person's recent answers, newest first.
pub async fn history(
    store: &dyn Store,
    user: &UserId,
) -> Result<Vec<ApprovalHistoryEntry>, StoreError> {
    Ok(store
        .get_json::<ApprovalHistoryRecord>(Keyspace::ApprovalHistory, user.as_str())
        .await?
        .map(|h| h.entries)
        .unwrap_or_default())
}

/// Forgets everything of `user` (the person is removed or lost access).
pub async fn remove_of_user(store: &dyn Store, user: &UserId) -> Result<(), StoreError> {
    for (key, open) in store
        .scan_json::<ApprovalIndexRecord>(Keyspace::ApprovalLinkIndex, &user_prefix(user))
        .await?
    {
        store
            .remove(Keyspace::ApprovalLinks, &open.code_hash)
            .await?;
        store.remove(Keyspace::ApprovalLinkIndex, &key).await?;
    }
    for (key, _) in store
        .scan_prefix(Keyspace::ToolApprovals, &user_prefix(user))
        .await?
    {
        store.remove(Keyspace::ToolApprovals, &key).await?;
    }
    store.remove(Keyspace::ApprovalHistory, user.as_str()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_calls_differ() {
        let (u, c) = (UserId::github(1), ClientId::new("c"));
        assert_ne!(call_key(&u, &c, "ab", "c"), call_key(&u, &c, "a", "bc"));
        assert_ne!(
            call_key(&u, &c, "t", "d"),
            call_key(&u, &ClientId::new("d"), "t", "d")
        );
        assert!(call_key(&u, &c, "t", "d").starts_with(&user_prefix(&u)));
    }
}
