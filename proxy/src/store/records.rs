//! The stored record types, one per keyspace, as versioned JSON. Secrets never appear in
//! them in the clear: tokens, codes and states are keys by hash; GitHub tokens are sealed.

use serde::{Deserialize, Serialize};

use crate::clock::UnixTime;
use crate::ids::{ClientId, FamilyId, GitHubLogin, PkceVerifier, TxnId, UserId};
use crate::oauth::pkce::CodeChallenge;
use crate::oauth::registration::{ApplicationType, TokenAuthMethod};
use crate::oauth::scope::ScopeSet;

/// A registered MCP client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Client id.
    pub client_id: ClientId,
    /// Untrusted display name.
    pub client_name: Option<String>,
    /// Redirect URIs, verbatim.
    pub redirect_uris: Vec<String>,
    /// Token endpoint authentication.
    pub auth_method: TokenAuthMethod,
    /// SHA-256 of the client secret, for confidential clients.
    pub secret_hash: Option<String>,
    /// Grant types.
    pub grant_types: Vec<String>,
    /// Allowed scopes (`None`: all offered).
    pub scope: Option<ScopeSet>,
    /// Native or web.
    pub application_type: ApplicationType,
    /// Registration time.
    pub registered_at: UnixTime,
}

impl ClientRecord {
    /// Name to show, never empty.
    pub fn display_name(&self) -> String {
        self.client_name
            .clone()
            .unwrap_or_else(|| "Unnamed client".to_owned())
    }
}

/// What /authorize accepted, kept server-side until the person decides.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxnRecord {
    /// Client.
    pub client_id: ClientId,
    /// Redirect URI as requested (already matched).
    pub redirect_uri: String,
    /// The registered URI it matched (the consent key).
    pub registered_redirect: String,
    /// PKCE challenge from the client.
    pub code_challenge: CodeChallenge,
    /// Canonical resource.
    pub resource: String,
    /// Requested scopes.
    pub scopes: ScopeSet,
    /// The client's `state`, echoed back.
    pub client_state: Option<String>,
    /// SHA-256 of the CSRF cookie of the browser that was shown the consent page.
    pub browser: String,
    /// When it started.
    pub created_at: UnixTime,
}

/// Why the proxy sent a browser to GitHub.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FlowPurpose {
    /// An MCP client's authorization the person approved.
    Authorize {
        /// The transaction id (also the flow id).
        txn_id: TxnId,
        /// The transaction.
        txn: Box<TxnRecord>,
    },
    /// A plain sign-in to the proxy (account page).
    SignIn {
        /// Where to go afterwards: a fixed local path, never from input.
        return_to: ReturnTo,
    },
}

/// Local destinations after sign-in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnTo {
    /// `/account`.
    Account,
}

impl ReturnTo {
    /// The local path.
    pub fn path(self) -> &'static str {
        match self {
            ReturnTo::Account => "/account",
        }
    }
}

/// A `state` sent to GitHub, stored under its hash.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpstreamStateRecord {
    /// The flow id the browser cookie is bound to.
    pub flow_id: String,
    /// Why.
    pub purpose: FlowPurpose,
    /// The proxy's own PKCE verifier toward GitHub.
    pub pkce_verifier: PkceVerifier,
    /// When it was created.
    pub created_at: UnixTime,
}

impl UpstreamStateRecord {
    /// The purpose tag and client id the flow cookie is bound to.
    pub fn binding(&self) -> (&'static str, &str) {
        match &self.purpose {
            FlowPurpose::Authorize { txn, .. } => ("authorize", txn.client_id.as_str()),
            FlowPurpose::SignIn { .. } => ("sign-in", ""),
        }
    }
}

/// A signed-in browser.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The person.
    pub user_id: UserId,
    /// Their GitHub login at sign-in.
    pub login: GitHubLogin,
    /// When they signed in (via GitHub).
    pub auth_time: UnixTime,
}

/// A person's consent for one client and registered redirect URI.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConsentRecord {
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// The registered redirect URI it covers.
    pub redirect_uri: String,
    /// Approved scopes.
    pub scopes: ScopeSet,
    /// When approved.
    pub granted_at: UnixTime,
    /// When a code or refresh last used it.
    pub last_used_at: Option<UnixTime>,
}

/// An authorization code, stored under its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CodeRecord {
    /// Client it was issued to.
    pub client_id: ClientId,
    /// Redirect URI it was sent to.
    pub redirect_uri: String,
    /// PKCE challenge.
    pub code_challenge: CodeChallenge,
    /// Audience.
    pub resource: String,
    /// Scopes.
    pub scopes: ScopeSet,
    /// The person.
    pub user_id: UserId,
    /// The refresh family the code will start (known in advance for reuse detection).
    pub family_id: FamilyId,
    /// When issued.
    pub issued_at: UnixTime,
}

/// Left behind when a code is redeemed, so a second redemption revokes what the first got.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UsedCodeRecord {
    /// The family the code started.
    pub family_id: FamilyId,
    /// Set once the first redemption has issued its tokens.
    #[serde(default)]
    pub completed: bool,
}

/// One authorization's refresh-token family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyRecord {
    /// Id (embedded in its refresh tokens).
    pub family_id: FamilyId,
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// Scopes.
    pub scopes: ScopeSet,
    /// Audience.
    pub resource: String,
    /// Hashes of the refresh tokens that are currently valid (the latest generation; more than
    /// one only when the previous token was replayed inside the grace window).
    pub current: Vec<String>,
    /// Hash of the immediately previous token, honoured until `rotated_at + grace`.
    pub previous: Option<String>,
    /// Hashes of older tokens of this family (bounded): presenting one is reuse. A token
    /// that was never issued is merely unknown and changes nothing.
    #[serde(default)]
    pub retired: Vec<String>,
    /// When `previous` was replaced.
    pub rotated_at: UnixTime,
    /// When the family started.
    pub created_at: UnixTime,
    /// Revoked families stay as tombstones until they expire, so reuse is still recognised.
    pub revoked: bool,
}

/// An access token, stored under its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AccessTokenRecord {
    /// The family it belongs to (revoking the family revokes it).
    pub family_id: FamilyId,
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// Scopes.
    pub scopes: ScopeSet,
    /// Audience.
    pub resource: String,
    /// Issue time.
    pub issued_at: UnixTime,
    /// Expiry.
    pub expires_at: UnixTime,
}

/// A person's GitHub grant. Tokens are sealed with AES-256-GCM; the associated data is the
/// record id, so a sealed token copied into another person's record does not open.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrantRecord {
    /// The person.
    pub user_id: UserId,
    /// GitHub numeric id.
    pub github_id: u64,
    /// GitHub login.
    pub login: GitHubLogin,
    /// Sealed access token (base64url).
    pub sealed_token: String,
    /// Sealed refresh token (GitHub Apps with expiring tokens).
    pub sealed_refresh: Option<String>,
    /// Access token expiry (GitHub Apps), `None` for OAuth App tokens that never expire.
    pub token_expires_at: Option<UnixTime>,
    /// Scopes GitHub granted.
    pub scopes: Vec<String>,
    /// Last change.
    pub updated_at: UnixTime,
    /// Set when GitHub stopped honouring the token (refresh failed, 401).
    pub broken: bool,
}

/// People who approved a client sending access to one redirect host (hashed user ids,
/// bounded): a host counts as known only once several people have, so an attacker approving
/// their own client cannot silence the warning for everyone else.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeenHostRecord {
    /// SHA-256 of each approver's user id.
    pub approvers: Vec<String>,
}
