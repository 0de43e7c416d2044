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
    /// Whether `/authorize` named `redirect_uri` itself (the code then requires it at
    /// `/token`). A transaction stored before this field existed counts as explicit.
    #[serde(default = "explicit_by_default")]
    pub redirect_uri_explicit: bool,
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
    /// Fingerprint of the client metadata the person is shown (see `clients::fingerprint`).
    #[serde(default)]
    pub client_fingerprint: String,
    /// Titles of the warnings shown on the consent page, for the decision's audit event.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// When the confirmation page (the no-JavaScript path) was last shown, in Unix
    /// milliseconds; an Approve within `consent::CONFIRM_MIN_MS` of it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_shown_at_ms: Option<u64>,
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
    /// A plain sign-in to the proxy (account page, connect links): identity only.
    SignIn {
        /// Where to go afterwards: a fixed local path, never from input.
        return_to: ReturnTo,
        /// How GitHub was asked to run it; the session it starts keeps this. A flow stored
        /// before this field existed reads as [`SignInKind::Silent`].
        #[serde(default)]
        sign_in: SignInKind,
    },
    /// Connecting (or reconnecting) GitHub from a connect link opened by its own person.
    Connect {
        /// The link.
        link_id: String,
    },
}

/// Local destinations after sign-in: fixed places, never a URL from input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "to", rename_all = "snake_case")]
pub enum ReturnTo {
    /// `/account`.
    Account,
    /// A connect link, by its id (the path is derived from the id with the link key).
    Connect {
        /// The link.
        link_id: String,
    },
    /// An approval link, by its id (likewise).
    Approve {
        /// The link.
        link_id: String,
    },
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
    /// How the browser coming back from GitHub shows it is the one that approved, beyond the
    /// flow cookie (`bindings::browser_state`): set for authorizations, absent for sign-ins
    /// and connect links (and in records written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_check: Option<ReturnCheck>,
}

/// The return check of an authorization (see `bindings::browser_state`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnCheck {
    /// Hash of the value the approving page kept in its own storage (`flow_proof`); `None`
    /// when it sent none (no JavaScript), so the returning browser must confirm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_proof: Option<String>,
    /// When the finish page was last shown to the returning browser (milliseconds of the
    /// injected clock); its Approve counts only a moment after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_shown_at_ms: Option<u64>,
}

impl UpstreamStateRecord {
    /// The purpose tag and client id the flow cookie is bound to.
    pub fn binding(&self) -> (&'static str, &str) {
        match &self.purpose {
            FlowPurpose::Authorize { txn, .. } => ("authorize", txn.client_id.as_str()),
            FlowPurpose::SignIn { .. } => ("sign-in", ""),
            FlowPurpose::Connect { link_id } => ("connect", link_id.as_str()),
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
    /// How GitHub was asked to run that sign-in: only [`SignInKind::AccountPicker`] can satisfy
    /// a link's freshness check (`session::Session::fresh_for_link`). A session stored before
    /// this field existed reads as [`SignInKind::Silent`], so it never does.
    #[serde(default)]
    pub sign_in: SignInKind,
}

/// How the proxy asked GitHub to run a sign-in. What GitHub really does with it (its
/// "Authorizing OAuth apps" page and the 2024-06-07 changelog "Account picker updates"):
/// without `prompt`, a person signed in at GitHub (one account) who already authorized the app
/// is sent straight back, seeing nothing; `prompt=select_account` "forces the account picker to
/// appear", a page where the person must choose an account (or sign in) before GitHub sends
/// them back. GitHub documents no other `prompt` value, no `max_age`, and returns nothing that
/// says whether its picker or its sign-in form was shown: the proxy knows what it *asked*, not
/// what GitHub *did* (an older GitHub Enterprise Server may ignore the parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignInKind {
    /// No `prompt` (the account page, the consent flow): GitHub may answer at once, without a
    /// screen, so the sign-in proves only that the browser holds a GitHub session.
    #[default]
    Silent,
    /// `prompt=select_account`, sent only by a link's opener checks (connect and approval
    /// links, DESIGN §6): GitHub shows its account picker, where the person must click.
    AccountPicker,
}

impl SignInKind {
    /// The `prompt` parameter of GitHub's authorize URL for this kind.
    pub fn github_prompt(self) -> Option<&'static str> {
        match self {
            SignInKind::Silent => None,
            SignInKind::AccountPicker => Some("select_account"),
        }
    }
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
    /// Fingerprint of the client metadata approved (redirect URIs, name, auth method); a
    /// changed client is not covered. `None` in records from before fingerprints.
    #[serde(default)]
    pub client_fingerprint: Option<String>,
}

/// An authorization code, stored under its hash.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CodeRecord {
    /// Client it was issued to.
    pub client_id: ClientId,
    /// Redirect URI it was sent to.
    pub redirect_uri: String,
    /// Whether `/authorize` named `redirect_uri` itself: `/token` must then send the same
    /// (RFC 6749 §4.1.3, OAuth 2.1 §"Redirect URI Parameter in Token Request"). A code stored
    /// before this field existed (at most `code_ttl_secs` old) counts as explicit.
    #[serde(default = "explicit_by_default")]
    pub redirect_uri_explicit: bool,
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
    /// Random id naming the code in the audit trail (never the code itself).
    #[serde(default)]
    pub code_id: String,
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

/// One authorization's refresh-token family: defined with the rotation rule it obeys
/// (`oauth::grant`, protocol logic without I/O), stored here unchanged.
pub use crate::oauth::grant::FamilyRecord;

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
    /// The branch of its family it was minted on (ending that branch on the account page
    /// revokes it); absent on tokens minted before branches were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<u32>,
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

/// Admitted people who approved a client sending access to one redirect host (hashed user
/// ids, bounded): a host counts as known only once several admitted people other than the one
/// approving now have (`bindings::approvals`). Approvals made while admission was open were
/// kept under another field name and are ignored: they prove nothing.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SeenHostRecord {
    /// SHA-256 of each admitted approver's user id.
    #[serde(default)]
    pub admitted_approvers: Vec<String>,
}

/// One admitted person's first approval of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientApproval {
    /// SHA-256 of the approver's user id.
    pub approver: String,
    /// When they first approved it.
    pub at: UnixTime,
}

/// Who (admitted) first approved a client, and when (bounded), by client id.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientApprovalsRecord {
    /// In the order they happened.
    pub approvals: Vec<ClientApproval>,
}

/// A metadata-document client as last validated, by its URL: when this proxy first saw it,
/// when what a consent covers last changed (for the "registered moments ago" warning), its
/// last valid record (for display, and served for a bounded time when the document cannot be
/// fetched), and whether an operator blocked it. Stored with an expiry until the client gets
/// its first code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CimdClientRecord {
    /// First successful fetch.
    pub first_seen: UnixTime,
    /// The client as last validated; `registered_at` is the last change of its fingerprint.
    pub client: ClientRecord,
    /// Last fingerprint change (redirect URIs, name, auth method); `first_seen` if absent.
    #[serde(default)]
    pub changed_at: Option<UnixTime>,
    /// Last successful fetch and validation; absent in records from before it was kept.
    #[serde(default)]
    pub validated_at: Option<UnixTime>,
    /// When an operator deleted the client: it is never fetched or served again.
    #[serde(default)]
    pub blocked_at: Option<UnixTime>,
}

/// An agent's permission to use a person's GitHub account, with the scopes it may use.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AllowanceRecord {
    /// The person.
    pub user_id: UserId,
    /// The agent (MCP client).
    pub client_id: ClientId,
    /// Scopes it may use.
    pub scopes: ScopeSet,
    /// When allowed.
    pub granted_at: UnixTime,
}

/// What a connect link asks the person to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkKind {
    /// No working GitHub account connected.
    Connect,
    /// An account is connected but this agent may not use it (or not with these scopes).
    Allow,
    /// GitHub stopped honouring the stored token.
    Reconnect,
}

impl LinkKind {
    /// The `reason` of a token-exchange refusal.
    pub fn reason(self) -> &'static str {
        match self {
            LinkKind::Connect => "connect_required",
            LinkKind::Allow => "allow_required",
            LinkKind::Reconnect => "reconnect_required",
        }
    }
}

/// A connect link, stored under the hash of its code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectLinkRecord {
    /// Public id (the `elicitationId` / `connect_id`).
    pub link_id: String,
    /// The person it was made for.
    pub user_id: UserId,
    /// The agent that needs access.
    pub client_id: ClientId,
    /// The service ("github").
    pub service: String,
    /// What it asks.
    pub kind: LinkKind,
    /// Scopes the agent needs.
    pub scopes: ScopeSet,
    /// Created.
    pub created_at: UnixTime,
    /// Expires.
    pub expires_at: UnixTime,
    /// When the no-JavaScript confirmation step was last shown, in Unix milliseconds: an
    /// action within `consent::CONFIRM_MIN_MS` of it is refused by showing it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_shown_at_ms: Option<u64>,
}

/// The open link of one person, agent and service.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectIndexRecord {
    /// Its id.
    pub link_id: String,
    /// Its kind.
    pub kind: LinkKind,
    /// Hash of its code.
    pub code_hash: String,
}

/// A tool call waiting for its person's approval (`[[policy]] decision = "ask"`), stored under
/// the hash of its link's code (the code itself is never stored). It holds the arguments the
/// page shows, until the link expires or is answered.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalLinkRecord {
    /// Public id (the `elicitationId`).
    pub link_id: String,
    /// The person the call was made for.
    pub user_id: UserId,
    /// The agent that made it.
    pub client_id: ClientId,
    /// The tool.
    pub tool: String,
    /// The `[[policy]]` rule that asked.
    pub rule_id: String,
    /// `tool_policy::arguments_digest` of the call's arguments: what an approval is bound to.
    pub arguments_digest: String,
    /// The arguments as canonical JSON text, for the page (bounded by the gateway).
    pub arguments: String,
    /// Created.
    pub created_at: UnixTime,
    /// Expires (`ask_ttl_secs` after it was created); an approval given lasts until then.
    pub expires_at: UnixTime,
    /// When the no-JavaScript confirmation step was last shown (milliseconds): an Approve
    /// within `CONFIRM_MIN_MS` of it is refused by showing it again.
    #[serde(default)]
    pub confirm_shown_at_ms: Option<u64>,
}

/// The one open approval link of one person, agent and call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalIndexRecord {
    /// Its id.
    pub link_id: String,
    /// Hash of its code.
    pub code_hash: String,
    /// The tool (for the person's account page).
    pub tool: String,
    /// The agent.
    pub client_id: ClientId,
    /// The rule.
    pub rule_id: String,
    /// Created.
    pub created_at: UnixTime,
    /// Expires.
    pub expires_at: UnixTime,
}

/// A person's approval of one call: single use, bound to the person, the agent, the tool and
/// the digest of the arguments (the key), until the ask expires.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ToolApprovalRecord {
    /// The link it answered.
    pub link_id: String,
    /// The rule that asked.
    pub rule_id: String,
    /// When the person approved.
    pub approved_at: UnixTime,
}

/// How a person answered an approval link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalAnswer {
    /// Approve once.
    Approved,
    /// Deny.
    Denied,
}

impl ApprovalAnswer {
    /// The word in audit events and on the account page.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalAnswer::Approved => "approved",
            ApprovalAnswer::Denied => "denied",
        }
    }
}

/// One answered approval, for the person's account page.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApprovalHistoryEntry {
    /// The link.
    pub link_id: String,
    /// The agent.
    pub client_id: ClientId,
    /// The tool.
    pub tool: String,
    /// The rule.
    pub rule_id: String,
    /// The answer.
    pub answer: ApprovalAnswer,
    /// When.
    pub at: UnixTime,
}

/// A person's most recent answers, newest first (bounded by the store).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApprovalHistoryRecord {
    /// The answers.
    pub entries: Vec<ApprovalHistoryEntry>,
}

/// A short-lived token the proxy gave an exchange-mode backend for one request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BackendTokenRecord {
    /// The person.
    pub user_id: UserId,
    /// The agent.
    pub client_id: ClientId,
    /// Scopes of the agent's token.
    pub scopes: ScopeSet,
    /// Expiry.
    pub expires_at: UnixTime,
    /// The refresh family of the access token it was minted from: revoking the family (the
    /// client revoked, deleted, the person's tokens revoked) ends it at token exchange.
    /// `None` in records from before this field: such a token never exchanges.
    #[serde(default)]
    pub family_id: Option<FamilyId>,
}

/// An MCP session (or a backend `requestState`) bound to the person and client that created
/// it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct McpSessionRecord {
    /// The person.
    pub user_id: UserId,
    /// The client.
    pub client_id: ClientId,
    /// Whether `initialize` declared URL elicitation (2025-11-25).
    pub url_elicitation: bool,
    /// When it was bound.
    pub created_at: UnixTime,
}

/// The unused registrations with one (client IP, metadata), oldest first.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct DedupeRecord {
    /// Their ids.
    pub clients: Vec<ClientId>,
}

/// A stored audit event.
#[derive(Debug, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Event id.
    pub id: String,
    /// When.
    pub at: UnixTime,
    /// The HTTP request it happened in (`X-Request-Id`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// The event kind (same as `event.event`).
    #[serde(default)]
    pub kind: String,
    /// The event as JSON.
    pub event: serde_json::Value,
}

/// A person's standing as last established with GitHub (stored per person).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Admitted, and GitHub honoured their token.
    Admitted,
    /// GitHub no longer honours their token (revoked at GitHub, or SSO authorization needed):
    /// the next tool call gets a reconnect link.
    TokenBroken,
}

/// When standing was last asked and answered, and what the tool-call policy needs to know of
/// the person as of that answer (so a `tools/call` never asks GitHub).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StandingCheck {
    /// The answer.
    pub standing: Standing,
    /// When GitHub was last asked (answered or not).
    pub checked_at: UnixTime,
    /// When GitHub last answered.
    pub verified_at: UnixTime,
    /// Their GitHub login as of the last answer (`people = ["login"]`). `None` in records
    /// from before the policy existed.
    #[serde(default)]
    pub login: Option<String>,
    /// Their active memberships among those asked (`acme`, `acme/platform`, lower-case).
    #[serde(default)]
    pub memberships: Vec<String>,
    /// The membership questions (same form) `memberships` answers; a policy that asks more
    /// makes the next request check again (`flows::admission::standing`).
    #[serde(default)]
    pub asked: Vec<String>,
}

impl StandingCheck {
    /// A check that learnt nothing for the tool-call policy.
    pub fn new(standing: Standing, checked_at: UnixTime, verified_at: UnixTime) -> StandingCheck {
        StandingCheck {
            standing,
            checked_at,
            verified_at,
            login: None,
            memberships: Vec::new(),
            asked: Vec::new(),
        }
    }
}

/// Records from before `redirect_uri_explicit` existed: the strict reading.
fn explicit_by_default() -> bool {
    true
}

/// What never-used dynamic registrations hold of one budget (a source, its /48, or everyone),
/// grouped by the hour their charges end (`clients::budget`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnusedBudgetRecord {
    /// Live charges, by when they end; a bucket past its end no longer counts.
    pub buckets: Vec<BudgetBucket>,
}

/// The charges of one budget that end in the same hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetBucket {
    /// When they end (unix seconds, a whole hour): at or after each one's registration
    /// expires.
    pub until: u64,
    /// How many registrations.
    pub count: u32,
    /// Their stored bytes.
    pub bytes: u64,
}

/// What one dynamic registration charged to the budgets of never-used registrations, kept
/// (under its client id) until its first use or its removal refunds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnusedChargeRecord {
    /// The client IP it registered from (its /64 and /48 budgets are derived from it), if
    /// known.
    pub source: Option<std::net::IpAddr>,
    /// The bucket charged.
    pub until: u64,
    /// The bytes charged.
    pub bytes: u64,
}
