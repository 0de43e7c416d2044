//! Audit events: typed, stored durably and emitted as structured `tracing` events on the
//! `audit` target. They carry ids, names, hosts and scopes, never a token, code, state,
//! cookie value or secret (the types that hold those cannot be put in an event).

use serde::Serialize;

pub mod verify;

use crate::clock::{SharedClock, UnixTime};
use crate::crypto;
use crate::ids::{ClientId, FamilyId, UserId};
use crate::metrics::Metrics;
use crate::store::{Keyspace, SharedStore, StoreError, StoreExt};

/// Keep audit events this long.
const RETENTION_SECS: u64 = 90 * 86_400;

/// Something security-relevant happened.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    /// A client registered.
    ClientRegistered {
        /// Client.
        client_id: ClientId,
        /// Untrusted name.
        client_name: Option<String>,
        /// Its redirect URIs.
        redirect_uris: Vec<String>,
    },
    /// An operator deleted a client through the admin API.
    ClientDeleted {
        /// Client.
        client_id: ClientId,
        /// Consents forgotten.
        consents: usize,
        /// Families revoked.
        families: usize,
    },
    /// An operator revoked a person's GitHub grant and tokens through the admin API.
    GrantRevokedByAdmin {
        /// Person.
        user_id: UserId,
        /// Families revoked.
        families: usize,
    },
    /// The consent page was shown.
    ConsentShown {
        /// Client.
        client_id: ClientId,
        /// Redirect host.
        redirect_host: String,
        /// Warnings shown.
        warnings: Vec<String>,
    },
    /// The person approved on the consent page (identity confirmed at the callback).
    ConsentApproved {
        /// Client.
        client_id: ClientId,
        /// Scopes.
        scopes: String,
    },
    /// The person denied.
    ConsentDenied {
        /// Client.
        client_id: ClientId,
    },
    /// A consent was recorded for a person after GitHub confirmed who they are.
    ConsentRecorded {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Registered redirect URI.
        redirect_uri: String,
        /// Scopes.
        scopes: String,
    },
    /// A callback was refused (state unknown or not bound to this browser).
    CallbackRejected {
        /// Why.
        reason: String,
    },
    /// A person signed in through GitHub.
    SignedIn {
        /// Person.
        user_id: UserId,
        /// GitHub login.
        login: String,
    },
    /// A code was issued.
    CodeIssued {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Without the consent page (remembered consent, fresh session).
        consent_remembered: bool,
    },
    /// A code was presented a second time; what it produced was revoked.
    CodeReuse {
        /// Family revoked.
        family_id: FamilyId,
    },
    /// Tokens were issued from a code.
    TokenIssued {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
    },
    /// A refresh token was rotated.
    TokenRefreshed {
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
        /// Honoured inside the grace window.
        grace: bool,
    },
    /// An old refresh token was presented: the family is revoked.
    RefreshReuse {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
    },
    /// A token was revoked by its client (RFC 7009).
    TokenRevoked {
        /// Client.
        client_id: ClientId,
        /// "access_token" or "refresh_token".
        kind: &'static str,
    },
    /// A token was refused at `/mcp`.
    TokenRejected {
        /// "missing", "unknown", "revoked", "wrong_audience", "insufficient_scope", "in_query".
        reason: &'static str,
    },
    /// A request presented an MCP session or request state that is not the caller's.
    HandleRejected {
        /// Person presenting it.
        user_id: UserId,
        /// Client presenting it.
        client_id: ClientId,
        /// "session" or "request_state".
        kind: &'static str,
    },
    /// A `tools/call` forwarded to the backend, and what became of it (never its arguments).
    UpstreamAction {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Tool name.
        tool: String,
        /// "ok", "tool_error", "error", "input_required", "cancelled", "backend_error", or an HTTP status.
        outcome: String,
    },
    /// A person's GitHub grant was stored (authorization or connect link).
    GitHubGrantStored {
        /// Person.
        user_id: UserId,
        /// GitHub login.
        login: String,
    },
    /// A person disconnected GitHub on the account page.
    GitHubGrantDisconnected {
        /// Person.
        user_id: UserId,
    },
    /// A person stopped an agent from using GitHub.
    AllowanceWithdrawn {
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
    },
    /// A connect link was handed to an agent.
    ConnectLinkCreated {
        /// Link id.
        link_id: String,
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
        /// "connect", "allow" or "reconnect".
        kind: String,
    },
    /// A connect link was opened by someone other than its person (operators: a phishing
    /// attempt or a mistake).
    ConnectLinkRefused {
        /// Link id.
        link_id: String,
        /// Whose link.
        owner: UserId,
        /// Who opened it.
        opener: UserId,
    },
    /// A connect flow came back from GitHub with another account than the link's person.
    ConnectLinkWrongAccount {
        /// Link id.
        link_id: String,
        /// Whose link.
        owner: UserId,
        /// The GitHub account that came back.
        returned: UserId,
    },
    /// A connect link's action was completed.
    ConnectLinkCompleted {
        /// Link id.
        link_id: String,
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
    },
    /// A connect link was declined.
    ConnectLinkDeclined {
        /// Link id.
        link_id: String,
        /// Person.
        user_id: UserId,
    },
    /// A backend exchanged its token for the person's GitHub token (RFC 8693).
    TokenExchanged {
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
    },
    /// A token exchange was refused.
    TokenExchangeRefused {
        /// "connect_required", "allow_required", "reconnect_required", or why the request was invalid.
        reason: String,
    },
    /// A person revoked a client on the account page.
    ClientAccessRevoked {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Families revoked.
        families: usize,
    },
}

/// The audit sink.
#[derive(Clone)]
pub struct Audit {
    store: SharedStore,
    clock: SharedClock,
    metrics: Metrics,
}

/// A stored event.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct AuditRecord {
    /// Event id.
    pub id: String,
    /// When.
    pub at: UnixTime,
    /// The event as JSON.
    pub event: serde_json::Value,
}

impl Audit {
    /// New sink.
    pub fn new(store: SharedStore, clock: SharedClock, metrics: Metrics) -> Audit {
        Audit {
            store,
            clock,
            metrics,
        }
    }

    /// Records an event durably and logs it.
    pub async fn record(&self, event: AuditEvent) -> Result<(), StoreError> {
        let at = self.clock.now();
        let id = crypto::b64url(
            &crypto::random_bytes::<12>().map_err(|e| StoreError::Backend(e.to_string()))?,
        );
        let json = serde_json::to_value(&event).map_err(|e| StoreError::Backend(e.to_string()))?;
        tracing::info!(target: "audit", id = %id, at = at.0, event = %json, "audit");
        self.metrics.audit_event(&event);
        let rec = AuditRecord {
            id: id.clone(),
            at,
            event: json,
        };
        self.store
            .put_json(
                Keyspace::Audit,
                &format!("{:020}-{id}", at.0),
                &rec,
                Some(at.plus(RETENTION_SECS)),
            )
            .await
    }

    /// The newest `limit` stored events, oldest first.
    pub async fn recent(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        let mut all = self.all().await?;
        let skip = all.len().saturating_sub(limit);
        Ok(all.split_off(skip))
    }

    /// All stored events, oldest first.
    pub async fn all(&self) -> Result<Vec<AuditRecord>, StoreError> {
        Ok(self
            .store
            .scan_json(Keyspace::Audit, "")
            .await?
            .into_iter()
            .map(|(_, r)| r)
            .collect())
    }
}
