//! Binding: an MCP session (or a backend's `requestState`) ↔ the person and client that
//! created it. The gateway records the `Mcp-Session-Id` the backend mints on the response
//! that carries it, and the `requestState` values the backend returns; a later request that
//! presents either with another person's or another client's token is answered as if the
//! handle did not exist and never reaches the backend. Possession is never authentication.

use serde::{Deserialize, Serialize};

use super::audience::Audienced;
use crate::clock::UnixTime;
use crate::crypto;
use crate::ids::{ClientId, UserId};
use crate::store::records::AccessTokenRecord;
use crate::store::{Keyspace, Store, StoreError, StoreExt};

/// How long an idle session binding lives (refreshed by use is not needed: backends end
/// sessions, and a forgotten binding only means the client must re-initialize).
pub const SESSION_TTL_SECS: u64 = 7 * 86_400;
/// How long a backend `requestState` binding lives.
pub const REQUEST_STATE_TTL_SECS: u64 = 3600;

/// A stored session binding.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionRecord {
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// Whether `initialize` declared URL elicitation (2025-11-25).
    pub url_elicitation: bool,
    /// When it was bound.
    pub created_at: UnixTime,
}

/// A handle presented by the right person and client. Only this module makes one.
#[derive(Debug, Clone)]
pub struct SessionBound(SessionRecord);

impl SessionBound {
    /// The binding.
    pub fn get(&self) -> &SessionRecord {
        &self.0
    }
}

/// Unknown, or someone else's: both look the same to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownHandle;

fn owner(token: &Audienced<AccessTokenRecord>) -> (&UserId, &ClientId) {
    (&token.get().user_id, &token.get().client_id)
}

fn session_key(id: &str) -> String {
    crypto::hash_secret(id)
}

fn state_key(state: &str) -> String {
    crypto::hash_secret(state)
}

/// Records the session the backend just minted for this token's person and client. A session
/// id already bound to someone else is not re-bound (returns false).
pub async fn bind_session(
    store: &dyn Store,
    now: UnixTime,
    session_id: &str,
    token: &Audienced<AccessTokenRecord>,
    url_elicitation: bool,
) -> Result<bool, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = SessionRecord {
        user_id: user_id.clone(),
        client_id: client_id.clone(),
        url_elicitation,
        created_at: now,
    };
    let key = session_key(session_id);
    if store
        .insert_json(
            Keyspace::McpSessions,
            &key,
            &rec,
            Some(now.plus(SESSION_TTL_SECS)),
        )
        .await?
    {
        return Ok(true);
    }
    let existing: Option<SessionRecord> = store.get_json(Keyspace::McpSessions, &key).await?;
    Ok(existing.is_some_and(|e| e.user_id == rec.user_id && e.client_id == rec.client_id))
}

/// Checks a presented `Mcp-Session-Id`.
pub async fn check_session(
    store: &dyn Store,
    session_id: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<Result<SessionBound, UnknownHandle>, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec: Option<SessionRecord> = store
        .get_json(Keyspace::McpSessions, &session_key(session_id))
        .await?;
    Ok(match rec {
        Some(r) if r.user_id == *user_id && r.client_id == *client_id => Ok(SessionBound(r)),
        _ => Err(UnknownHandle),
    })
}

/// Forgets a session (after the backend confirmed a DELETE).
pub async fn forget_session(
    store: &dyn Store,
    bound: &SessionBound,
    session_id: &str,
) -> Result<(), StoreError> {
    let _ = bound;
    store
        .remove(Keyspace::McpSessions, &session_key(session_id))
        .await
}

/// Records a `requestState` the backend returned to this token's person and client.
pub async fn bind_request_state(
    store: &dyn Store,
    now: UnixTime,
    state: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<(), StoreError> {
    let (user_id, client_id) = owner(token);
    let rec = SessionRecord {
        user_id: user_id.clone(),
        client_id: client_id.clone(),
        url_elicitation: false,
        created_at: now,
    };
    store
        .put_json(
            Keyspace::RequestStates,
            &state_key(state),
            &rec,
            Some(now.plus(REQUEST_STATE_TTL_SECS)),
        )
        .await
}

/// Checks a `requestState` a client echoed back.
pub async fn check_request_state(
    store: &dyn Store,
    state: &str,
    token: &Audienced<AccessTokenRecord>,
) -> Result<Result<(), UnknownHandle>, StoreError> {
    let (user_id, client_id) = owner(token);
    let rec: Option<SessionRecord> = store
        .get_json(Keyspace::RequestStates, &state_key(state))
        .await?;
    Ok(match rec {
        Some(r) if r.user_id == *user_id && r.client_id == *client_id => Ok(()),
        _ => Err(UnknownHandle),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::audience::audienced;
    use crate::clock::ManualClock;
    use crate::ids::FamilyId;
    use crate::oauth::scope::ScopeSet;
    use crate::store::SledStore;

    fn token(user: u64, client: &str) -> Audienced<AccessTokenRecord> {
        audienced(
            AccessTokenRecord {
                family_id: FamilyId::new("f"),
                user_id: UserId::github(user),
                client_id: ClientId::new(client),
                scopes: ScopeSet::default(),
                resource: "r".into(),
                issued_at: UnixTime(0),
                expires_at: UnixTime(10),
            },
            "r",
        )
        .unwrap()
    }

    #[tokio::test]
    async fn session_of_another_person_is_unknown() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        let alice = token(1, "c");
        assert!(
            bind_session(&s, UnixTime(1), "sess-1", &alice, true)
                .await
                .unwrap()
        );
        assert!(
            check_session(&s, "sess-1", &alice)
                .await
                .unwrap()
                .unwrap()
                .get()
                .url_elicitation
        );
        assert_eq!(
            check_session(&s, "sess-1", &token(2, "c"))
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
        assert_eq!(
            check_session(&s, "sess-1", &token(1, "other"))
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
        assert_eq!(
            check_session(&s, "never-seen", &alice)
                .await
                .unwrap()
                .unwrap_err(),
            UnknownHandle
        );
    }

    #[tokio::test]
    async fn session_bound_to_one_person_is_not_rebound_to_another() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        assert!(
            bind_session(&s, UnixTime(1), "sess-1", &token(1, "c"), false)
                .await
                .unwrap()
        );
        assert!(
            !bind_session(&s, UnixTime(1), "sess-1", &token(2, "c"), false)
                .await
                .unwrap()
        );
        assert!(
            check_session(&s, "sess-1", &token(1, "c"))
                .await
                .unwrap()
                .is_ok()
        );
    }

    #[tokio::test]
    async fn request_state_of_another_person_is_unknown() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1))).unwrap();
        bind_request_state(&s, UnixTime(1), "rs", &token(1, "c"))
            .await
            .unwrap();
        assert!(
            check_request_state(&s, "rs", &token(1, "c"))
                .await
                .unwrap()
                .is_ok()
        );
        assert!(
            check_request_state(&s, "rs", &token(2, "c"))
                .await
                .unwrap()
                .is_err()
        );
        assert!(
            check_request_state(&s, "forged", &token(1, "c"))
                .await
                .unwrap()
                .is_err()
        );
    }
}
