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

/// What a call is, for the index and the approval: the rule that holds it, the tool and the
/// digest of its arguments (an approval given under one rule is no approval under another).
fn call_digest(rule: &Rule<'_>) -> String {
    // Length-prefixed: no two (rule, tool, digest) triples hash the same input.
    crypto::b64url(&crypto::sha256(
        format!(
            "{}:{}{}:{}{}",
            rule.rule_id.len(),
            rule.rule_id,
            rule.tool.len(),
            rule.tool,
            rule.arguments_digest
        )
        .as_bytes(),
    ))
}

/// One held call, as the keys see it.
#[derive(Debug, Clone, Copy)]
pub struct Rule<'a> {
    /// The rule that holds it.
    pub rule_id: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The digest of its arguments.
    pub arguments_digest: &'a str,
}

impl<'a> Rule<'a> {
    fn of(rec: &'a ApprovalLinkRecord) -> Rule<'a> {
        Rule {
            rule_id: &rec.rule_id,
            tool: &rec.tool,
            arguments_digest: &rec.arguments_digest,
        }
    }
}

fn call_key(user: &UserId, client: &ClientId, call: &Rule<'_>) -> String {
    format!(
        "{}|{}|{}",
        user.as_str(),
        client.as_str(),
        call_digest(call)
    )
}

fn agent_prefix(user: &UserId, client: &ClientId) -> String {
    format!("{}|{}|", user.as_str(), client.as_str())
}

/// Length of `call_digest` (base64url of 32 bytes).
const CALL_DIGEST_LEN: usize = 43;

/// Whether `key`, found under `prefix`, is this agent's own and not that of a client whose id
/// extends this one's with a `|` (client ids may hold one): the rest is exactly one digest.
fn of_agent(key: &str, prefix: &str) -> bool {
    key.len() == prefix.len() + CALL_DIGEST_LEN
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
            &call_key(&rec.user_id, &rec.client_id, &Rule::of(rec)),
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
    call: &Rule<'_>,
) -> Result<Option<ApprovalIndexRecord>, StoreError> {
    store
        .get_json(Keyspace::ApprovalLinkIndex, &call_key(user, client, call))
        .await
}

/// How many links of `user` for `client` are open.
pub async fn open_of_agent(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<usize, StoreError> {
    let prefix = agent_prefix(user, client);
    Ok(store
        .scan_prefix(Keyspace::ApprovalLinkIndex, &prefix)
        .await?
        .iter()
        .filter(|(k, _)| of_agent(k, &prefix))
        .count())
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

/// Records when the link's confirmation step was shown, if the link is still open (an answer
/// that took it in the meantime wins: a closed link never comes back).
pub async fn confirm_shown(
    store: &dyn Store,
    key: &ApprovalKey,
    shown_at_ms: u64,
) -> Result<Option<ApprovalLinkRecord>, StoreError> {
    update::<ApprovalLinkRecord, Option<ApprovalLinkRecord>, StoreError, _, _>(
        store,
        Keyspace::ApprovalLinks,
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

/// Takes the link (single use): `Some` only for the one caller that removed it.
pub async fn take(
    store: &dyn Store,
    key: &ApprovalKey,
) -> Result<Option<ApprovalLinkRecord>, StoreError> {
    store.take_json(Keyspace::ApprovalLinks, &key.0).await
}

/// Removes a link (answered): its code becomes unknown and its call has no open link.
pub async fn close(
    store: &dyn Store,
    key: &ApprovalKey,
    rec: &ApprovalLinkRecord,
) -> Result<(), StoreError> {
    store.remove(Keyspace::ApprovalLinks, &key.0).await?;
    let idx = call_key(&rec.user_id, &rec.client_id, &Rule::of(rec));
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
            &call_key(&rec.user_id, &rec.client_id, &Rule::of(rec)),
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
    call: &Rule<'_>,
) -> Result<Option<ToolApprovalRecord>, StoreError> {
    store
        .take_json(Keyspace::ToolApprovals, &call_key(user, client, call))
        .await
}

/// Forgets `user`'s held calls and unused approvals for `client` (the person or an operator
/// revoked the client for them).
pub async fn remove_of_agent(
    store: &dyn Store,
    user: &UserId,
    client: &ClientId,
) -> Result<(), StoreError> {
    let prefix = agent_prefix(user, client);
    for (key, open) in store
        .scan_json::<ApprovalIndexRecord>(Keyspace::ApprovalLinkIndex, &prefix)
        .await?
    {
        if of_agent(&key, &prefix) {
            store
                .remove(Keyspace::ApprovalLinks, &open.code_hash)
                .await?;
            store.remove(Keyspace::ApprovalLinkIndex, &key).await?;
        }
    }
    for (key, _) in store.scan_prefix(Keyspace::ToolApprovals, &prefix).await? {
        if of_agent(&key, &prefix) {
            store.remove(Keyspace::ToolApprovals, &key).await?;
        }
    }
    Ok(())
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

    fn rule<'a>(rule_id: &'a str, tool: &'a str, d: &'a str) -> Rule<'a> {
        Rule {
            rule_id,
            tool,
            arguments_digest: d,
        }
    }

    #[test]
    fn keys_of_different_calls_differ() {
        let (u, c) = (UserId::github(1), ClientId::new("c"));
        assert_ne!(
            call_key(&u, &c, &rule("r", "ab", "c")),
            call_key(&u, &c, &rule("r", "a", "bc"))
        );
        assert_ne!(
            call_key(&u, &c, &rule("r", "t", "d")),
            call_key(&u, &c, &rule("s", "t", "d"))
        );
        assert_ne!(
            call_key(&u, &c, &rule("r", "t", "d")),
            call_key(&u, &ClientId::new("d"), &rule("r", "t", "d"))
        );
        let k = call_key(&u, &c, &rule("r", "t", "d"));
        assert!(k.starts_with(&user_prefix(&u)) && k.starts_with(&agent_prefix(&u, &c)));
        assert!(of_agent(&k, &agent_prefix(&u, &c)));
        // A client whose id extends this one's with a bar is another agent.
        let longer = call_key(&u, &ClientId::new("c|x"), &rule("r", "t", "d"));
        assert!(longer.starts_with(&agent_prefix(&u, &c)));
        assert!(!of_agent(&longer, &agent_prefix(&u, &c)));
    }
}
