//! Audit events: typed, stored durably and emitted as structured `tracing` events on the
//! `audit` target. They carry ids, names, hosts and scopes, never a token, code, state,
//! cookie value or secret (the types that hold those cannot be put in an event).

use serde::Serialize;

pub mod aggregate;
pub mod detect;
pub mod request_id;
mod settings;
pub use settings::{
    AlertPolicy, GroupCommit, LogConfig, LogFormat, RawAlerts, RawAudit, RawLog, RawWebhook,
    WebhookConfig,
};
mod commit;
pub mod source;
pub mod verify;
pub mod webhook;

use crate::clock::SharedClock;
use crate::crypto;
use crate::ids::{ClientId, FamilyId, UserId};
use crate::store::records::SignInKind;
use crate::store::{SharedStore, StoreError, audit_log};

/// Reading the trail in windows of this many seconds (about 28 hours) bounds what export and
/// tail hold in memory at once; a window is a key prefix, so the store defines it.
pub use crate::store::audit_log::WINDOW_SECS;

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
        /// How it registered: `dynamic` (RFC 7591).
        source: &'static str,
        /// The client IP it registered from, if known.
        ip: Option<std::net::IpAddr>,
    },
    /// The registration policy refused a `POST /register` (registration closed, or the initial
    /// access token missing or wrong: repeated wrong tokens are someone guessing).
    RegistrationRefused {
        /// "closed", "missing_token" or "wrong_token".
        reason: &'static str,
        /// The client IP it came from, if known.
        ip: Option<std::net::IpAddr>,
    },
    /// An operator deleted a client through the admin API.
    ClientDeleted {
        /// Client.
        client_id: ClientId,
        /// Consents forgotten.
        consents: usize,
        /// Families revoked.
        families: usize,
        /// People's GitHub allowances for it withdrawn.
        allowances: usize,
    },
    /// An operator lifted the block a delete put on a metadata-document client.
    ClientUnblocked {
        /// Client.
        client_id: ClientId,
    },
    /// An operator revoked a person's GitHub grant and tokens through the admin API.
    GrantRevokedByAdmin {
        /// Person.
        user_id: UserId,
        /// Families revoked.
        families: usize,
        /// What happened at GitHub (`revoked`, `no_grant`, or why it was not confirmed).
        github_revocation: &'static str,
        /// Agent allowances withdrawn.
        allowances: usize,
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
        /// The signed-in person, if the browser had a session (GitHub confirms it later).
        #[serde(skip_serializing_if = "Option::is_none")]
        user_id: Option<UserId>,
        /// The registered redirect URI the consent is for.
        redirect_uri: String,
        /// Warnings the page showed when the person decided.
        warnings: Vec<String>,
    },
    /// The person denied.
    ConsentDenied {
        /// Client.
        client_id: ClientId,
        /// The signed-in person, if the browser had a session.
        #[serde(skip_serializing_if = "Option::is_none")]
        user_id: Option<UserId>,
        /// The registered redirect URI the request named.
        redirect_uri: String,
        /// Warnings the page showed when the person decided.
        warnings: Vec<String>,
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
        /// How GitHub was asked to run it (`silent` or `account_picker`): only the second can
        /// open a connect or approval link.
        sign_in: SignInKind,
    },
    /// A code was issued.
    CodeIssued {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Without the consent page (remembered consent, fresh session).
        consent_remembered: bool,
        /// Random id stored with the code (never the code), to join with `TokenIssued`.
        code_id: String,
        /// The family its tokens will belong to.
        family_id: FamilyId,
        /// The registered redirect URI the consent covers.
        redirect_uri: String,
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
        /// The code it was redeemed from (its `CodeIssued` id).
        code_id: String,
    },
    /// A refresh token was rotated (or replayed, or forked).
    TokenRefreshed {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
        /// Honoured inside the grace window.
        grace: bool,
        /// The family's branch whose token went out (what the account page lists).
        branch: u32,
        /// The client IP it came from, if known.
        ip: Option<std::net::IpAddr>,
        /// That address's network (IPv4 /24, IPv6 /48: `oauth::grant::network_of`).
        network: Option<String>,
        /// The `User-Agent` it sent, bounded (`oauth::grant::bounded_user_agent`).
        user_agent: Option<String>,
    },
    /// An old refresh token was presented: the family is revoked.
    RefreshReuse {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
        /// Which case the refresh policy believes it saw (`oauth::grant::ReuseCase`):
        /// "previous_outside_grace", "retired", "stale_beyond_window" or "branch_limit".
        case: &'static str,
    },
    /// A recently superseded refresh token of the family's own client started a branch of
    /// its own (`[tokens] refresh_reuse = "branch"`): another process of the client, or a
    /// thief with a recent copy (not an alert; the trail and the metric show how often).
    RefreshBranched {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
        /// Branches the family holds after the fork.
        branches: usize,
        /// How many of them are live (count against `refresh_max_branches`).
        live: usize,
        /// The new branch.
        branch: u32,
        /// The client IP it came from, if known.
        ip: Option<std::net::IpAddr>,
        /// That address's network.
        network: Option<String>,
        /// The `User-Agent` it sent, bounded.
        user_agent: Option<String>,
    },
    /// A person ended one branch of a refresh family on the account page (a session they did
    /// not recognise): its refresh and access tokens stop; the family's other branches go on.
    RefreshBranchEnded {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Family.
        family_id: FamilyId,
        /// The branch ended.
        branch: u32,
        /// It was the last branch, or one too many was ended: the whole family was revoked.
        family_revoked: bool,
    },
    /// A `[[policy]]` decision on a `tools/call` (or a tool hidden from a `tools/list`).
    /// Arguments are never stored: their digest and the names of the conditions that matched.
    PolicyDecision {
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
        /// The tool.
        tool: String,
        /// The rule's id; `policy_defaults` when no rule matched.
        rule_id: String,
        /// `allow`, `deny`, `ask` or `step_up`.
        decision: &'static str,
        /// What happened: `allowed` (let through to the gateway's next checks), `denied`,
        /// `hidden`, `step_up_required`,
        /// `approval_requested`, `approval_used`, `approval_declined` (a 2026-07-28 client's
        /// person declined the link), `refused_tool_name`; for every request, policy or not,
        /// `refused_unreadable`, `refused_ambiguous_keys`, `refused_mirrored_headers`,
        /// `refused_method`, `refused_body`, `refused_not_jsonrpc` (`gateway::jsonrpc::BodyRefusal`).
        outcome: &'static str,
        /// `tool_policy::arguments_digest` of the call's arguments.
        arguments_digest: String,
        /// Which conditions matched (names and JSON pointers, never values).
        matched: Vec<String>,
    },
    /// A person answered an approval link (`[[policy]] decision = "ask"`).
    ApprovalAnswered {
        /// Link id.
        link_id: String,
        /// Person.
        user_id: UserId,
        /// Agent.
        client_id: ClientId,
        /// The tool.
        tool: String,
        /// The rule.
        rule_id: String,
        /// `approved` or `denied`.
        answer: &'static str,
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
        /// "missing", "unknown", "expired", "revoked", "wrong_audience", "insufficient_scope",
        /// "in_query".
        reason: &'static str,
    },
    /// A request presented an MCP session or request state that is not the caller's, or tried
    /// to get one past the check (a repeated or malformed transport header, a batch).
    HandleRejected {
        /// Person presenting it.
        user_id: UserId,
        /// Client presenting it.
        client_id: ClientId,
        /// "session", "request_state", "transport_header" or "batch".
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
    /// A person's GitHub grant stopped working (GitHub refused it): agents get reconnect links.
    GitHubGrantBroken {
        /// Person.
        user_id: UserId,
        /// Where the refusal was seen.
        reason: String,
    },
    /// A person disconnected GitHub on the account page.
    GitHubGrantDisconnected {
        /// Person.
        user_id: UserId,
        /// What happened at GitHub (`revoked`, `no_grant`, or why it was not confirmed).
        github_revocation: &'static str,
        /// Agent allowances withdrawn.
        allowances: usize,
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
        /// "connect_required", "allow_required", "reconnect_required", "subject_revoked" (the
        /// backend token's authorization was revoked), or why the request was invalid.
        reason: String,
    },
    /// A person revoked a client on the account page (or an operator did for them).
    ClientAccessRevoked {
        /// Person.
        user_id: UserId,
        /// Client.
        client_id: ClientId,
        /// Families revoked.
        families: usize,
        /// Whether the client's GitHub allowance was withdrawn.
        allowance: bool,
    },
    /// Someone GitHub identified is not admitted by `[access]`: refused at sign-in before any
    /// session, grant, consent or code; the token minted for the sign-in was revoked at GitHub.
    SignInRefused {
        /// Person.
        user_id: UserId,
        /// GitHub login.
        login: String,
        /// `outside` (no rule admits them) or `sso_required` (an org's SAML SSO hides it).
        reason: &'static str,
    },
    /// A person no longer belongs (left the org or team, or is no longer listed): every token
    /// of theirs was revoked, and their GitHub grant too.
    AccessLost {
        /// Person.
        user_id: UserId,
        /// Refresh families revoked.
        families: usize,
    },
    /// Anonymous refusals of one kind from one source within one minute, counted rather than
    /// recorded one by one (see `aggregate`): written once the minute is over.
    AnonymousRefusals {
        /// Start of the minute (Unix seconds).
        minute: u64,
        /// The client IP (IPv6: its /64), `unknown`, or `overflow` (sources that found the
        /// in-memory table full).
        source: String,
        /// Where: `mcp_token`, `callback` or `registration`.
        refused_at: &'static str,
        /// Why (`missing`, `unknown`, `in_query`, `state_missing`, `state_unknown`,
        /// `state_not_this_browser`, `closed`, `missing_token`, `wrong_token`).
        reason: &'static str,
        /// How many.
        count: u64,
    },
    /// A detection rule fired (see `detect`): something an operator should look at now.
    AlertRaised {
        /// Which rule.
        alert: detect::AlertKind,
        /// Person concerned, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        user_id: Option<UserId>,
        /// Client concerned, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        client_id: Option<ClientId>,
        /// What was seen, in words (ids, hosts and counts only).
        detail: String,
    },
}

/// The kind of an [`AuditEvent`]: its `event` tag, one variant per event. Metrics key their
/// counters on it with an exhaustive `match` (`metrics.rs`), so an event added or renamed
/// without a decision about its counter does not compile; configuration that names kinds
/// (`[webhook] events`) is checked against [`Kind::ALL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `client_registered`.
    ClientRegistered,
    /// `registration_refused`.
    RegistrationRefused,
    /// `client_deleted`.
    ClientDeleted,
    /// `client_unblocked`.
    ClientUnblocked,
    /// `grant_revoked_by_admin`.
    GrantRevokedByAdmin,
    /// `consent_shown`.
    ConsentShown,
    /// `consent_approved`.
    ConsentApproved,
    /// `consent_denied`.
    ConsentDenied,
    /// `consent_recorded`.
    ConsentRecorded,
    /// `callback_rejected`.
    CallbackRejected,
    /// `signed_in`.
    SignedIn,
    /// `code_issued`.
    CodeIssued,
    /// `code_reuse`.
    CodeReuse,
    /// `token_issued`.
    TokenIssued,
    /// `token_refreshed`.
    TokenRefreshed,
    /// `refresh_reuse`.
    RefreshReuse,
    /// `refresh_branched`.
    RefreshBranched,
    /// `refresh_branch_ended`.
    RefreshBranchEnded,
    /// `policy_decision`.
    PolicyDecision,
    /// `approval_answered`.
    ApprovalAnswered,
    /// `token_revoked`.
    TokenRevoked,
    /// `token_rejected`.
    TokenRejected,
    /// `handle_rejected`.
    HandleRejected,
    /// `upstream_action`.
    UpstreamAction,
    /// `git_hub_grant_stored`.
    GitHubGrantStored,
    /// `git_hub_grant_broken`.
    GitHubGrantBroken,
    /// `git_hub_grant_disconnected`.
    GitHubGrantDisconnected,
    /// `allowance_withdrawn`.
    AllowanceWithdrawn,
    /// `connect_link_created`.
    ConnectLinkCreated,
    /// `connect_link_refused`.
    ConnectLinkRefused,
    /// `connect_link_wrong_account`.
    ConnectLinkWrongAccount,
    /// `connect_link_completed`.
    ConnectLinkCompleted,
    /// `connect_link_declined`.
    ConnectLinkDeclined,
    /// `token_exchanged`.
    TokenExchanged,
    /// `token_exchange_refused`.
    TokenExchangeRefused,
    /// `client_access_revoked`.
    ClientAccessRevoked,
    /// `sign_in_refused`.
    SignInRefused,
    /// `access_lost`.
    AccessLost,
    /// `anonymous_refusals`.
    AnonymousRefusals,
    /// `alert_raised`.
    AlertRaised,
}

impl Kind {
    /// Every kind, in declaration order.
    pub const ALL: [Kind; 40] = [
        Kind::ClientRegistered,
        Kind::RegistrationRefused,
        Kind::ClientDeleted,
        Kind::ClientUnblocked,
        Kind::GrantRevokedByAdmin,
        Kind::ConsentShown,
        Kind::ConsentApproved,
        Kind::ConsentDenied,
        Kind::ConsentRecorded,
        Kind::CallbackRejected,
        Kind::SignedIn,
        Kind::CodeIssued,
        Kind::CodeReuse,
        Kind::TokenIssued,
        Kind::TokenRefreshed,
        Kind::RefreshReuse,
        Kind::RefreshBranched,
        Kind::RefreshBranchEnded,
        Kind::PolicyDecision,
        Kind::ApprovalAnswered,
        Kind::TokenRevoked,
        Kind::TokenRejected,
        Kind::HandleRejected,
        Kind::UpstreamAction,
        Kind::GitHubGrantStored,
        Kind::GitHubGrantBroken,
        Kind::GitHubGrantDisconnected,
        Kind::AllowanceWithdrawn,
        Kind::ConnectLinkCreated,
        Kind::ConnectLinkRefused,
        Kind::ConnectLinkWrongAccount,
        Kind::ConnectLinkCompleted,
        Kind::ConnectLinkDeclined,
        Kind::TokenExchanged,
        Kind::TokenExchangeRefused,
        Kind::ClientAccessRevoked,
        Kind::SignInRefused,
        Kind::AccessLost,
        Kind::AnonymousRefusals,
        Kind::AlertRaised,
    ];

    /// The `event` tag as serialized (and as configuration names it).
    pub const fn name(self) -> &'static str {
        match self {
            Kind::ClientRegistered => "client_registered",
            Kind::RegistrationRefused => "registration_refused",
            Kind::ClientDeleted => "client_deleted",
            Kind::ClientUnblocked => "client_unblocked",
            Kind::GrantRevokedByAdmin => "grant_revoked_by_admin",
            Kind::ConsentShown => "consent_shown",
            Kind::ConsentApproved => "consent_approved",
            Kind::ConsentDenied => "consent_denied",
            Kind::ConsentRecorded => "consent_recorded",
            Kind::CallbackRejected => "callback_rejected",
            Kind::SignedIn => "signed_in",
            Kind::CodeIssued => "code_issued",
            Kind::CodeReuse => "code_reuse",
            Kind::TokenIssued => "token_issued",
            Kind::TokenRefreshed => "token_refreshed",
            Kind::RefreshReuse => "refresh_reuse",
            Kind::RefreshBranched => "refresh_branched",
            Kind::RefreshBranchEnded => "refresh_branch_ended",
            Kind::PolicyDecision => "policy_decision",
            Kind::ApprovalAnswered => "approval_answered",
            Kind::TokenRevoked => "token_revoked",
            Kind::TokenRejected => "token_rejected",
            Kind::HandleRejected => "handle_rejected",
            Kind::UpstreamAction => "upstream_action",
            Kind::GitHubGrantStored => "git_hub_grant_stored",
            Kind::GitHubGrantBroken => "git_hub_grant_broken",
            Kind::GitHubGrantDisconnected => "git_hub_grant_disconnected",
            Kind::AllowanceWithdrawn => "allowance_withdrawn",
            Kind::ConnectLinkCreated => "connect_link_created",
            Kind::ConnectLinkRefused => "connect_link_refused",
            Kind::ConnectLinkWrongAccount => "connect_link_wrong_account",
            Kind::ConnectLinkCompleted => "connect_link_completed",
            Kind::ConnectLinkDeclined => "connect_link_declined",
            Kind::TokenExchanged => "token_exchanged",
            Kind::TokenExchangeRefused => "token_exchange_refused",
            Kind::ClientAccessRevoked => "client_access_revoked",
            Kind::SignInRefused => "sign_in_refused",
            Kind::AccessLost => "access_lost",
            Kind::AnonymousRefusals => "anonymous_refusals",
            Kind::AlertRaised => "alert_raised",
        }
    }

    /// The kind named `name`, if any.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl AuditEvent {
    /// Whether the background group commit makes this event durable (not security state:
    /// the request it records goes on without waiting for it).
    pub fn group_committed(&self) -> bool {
        match self {
            AuditEvent::UpstreamAction { .. } => true,
            AuditEvent::PolicyDecision { outcome, .. } => {
                matches!(*outcome, "allowed" | "approval_used" | "hidden")
            }
            _ => false,
        }
    }

    /// Which kind of event this is.
    pub fn kind(&self) -> Kind {
        match self {
            AuditEvent::ClientRegistered { .. } => Kind::ClientRegistered,
            AuditEvent::RegistrationRefused { .. } => Kind::RegistrationRefused,
            AuditEvent::ClientDeleted { .. } => Kind::ClientDeleted,
            AuditEvent::ClientUnblocked { .. } => Kind::ClientUnblocked,
            AuditEvent::GrantRevokedByAdmin { .. } => Kind::GrantRevokedByAdmin,
            AuditEvent::ConsentShown { .. } => Kind::ConsentShown,
            AuditEvent::ConsentApproved { .. } => Kind::ConsentApproved,
            AuditEvent::ConsentDenied { .. } => Kind::ConsentDenied,
            AuditEvent::ConsentRecorded { .. } => Kind::ConsentRecorded,
            AuditEvent::CallbackRejected { .. } => Kind::CallbackRejected,
            AuditEvent::SignedIn { .. } => Kind::SignedIn,
            AuditEvent::CodeIssued { .. } => Kind::CodeIssued,
            AuditEvent::CodeReuse { .. } => Kind::CodeReuse,
            AuditEvent::TokenIssued { .. } => Kind::TokenIssued,
            AuditEvent::TokenRefreshed { .. } => Kind::TokenRefreshed,
            AuditEvent::RefreshReuse { .. } => Kind::RefreshReuse,
            AuditEvent::RefreshBranched { .. } => Kind::RefreshBranched,
            AuditEvent::RefreshBranchEnded { .. } => Kind::RefreshBranchEnded,
            AuditEvent::PolicyDecision { .. } => Kind::PolicyDecision,
            AuditEvent::ApprovalAnswered { .. } => Kind::ApprovalAnswered,
            AuditEvent::TokenRevoked { .. } => Kind::TokenRevoked,
            AuditEvent::TokenRejected { .. } => Kind::TokenRejected,
            AuditEvent::HandleRejected { .. } => Kind::HandleRejected,
            AuditEvent::UpstreamAction { .. } => Kind::UpstreamAction,
            AuditEvent::GitHubGrantStored { .. } => Kind::GitHubGrantStored,
            AuditEvent::GitHubGrantBroken { .. } => Kind::GitHubGrantBroken,
            AuditEvent::GitHubGrantDisconnected { .. } => Kind::GitHubGrantDisconnected,
            AuditEvent::AllowanceWithdrawn { .. } => Kind::AllowanceWithdrawn,
            AuditEvent::ConnectLinkCreated { .. } => Kind::ConnectLinkCreated,
            AuditEvent::ConnectLinkRefused { .. } => Kind::ConnectLinkRefused,
            AuditEvent::ConnectLinkWrongAccount { .. } => Kind::ConnectLinkWrongAccount,
            AuditEvent::ConnectLinkCompleted { .. } => Kind::ConnectLinkCompleted,
            AuditEvent::ConnectLinkDeclined { .. } => Kind::ConnectLinkDeclined,
            AuditEvent::TokenExchanged { .. } => Kind::TokenExchanged,
            AuditEvent::TokenExchangeRefused { .. } => Kind::TokenExchangeRefused,
            AuditEvent::ClientAccessRevoked { .. } => Kind::ClientAccessRevoked,
            AuditEvent::SignInRefused { .. } => Kind::SignInRefused,
            AuditEvent::AccessLost { .. } => Kind::AccessLost,
            AuditEvent::AnonymousRefusals { .. } => Kind::AnonymousRefusals,
            AuditEvent::AlertRaised { .. } => Kind::AlertRaised,
        }
    }
}

/// Where the audit sink reports what it records, for counting: implemented by the metrics
/// registry (`metrics::Metrics`), which sits above audit and keys its counters on [`Kind`].
/// Audit itself names no metric.
pub trait Observer: Send + Sync + 'static {
    /// An event of `kind` was recorded; `event` is its JSON (already serialized for the trail).
    fn event(&self, kind: Kind, event: &serde_json::Value);
    /// An anonymous refusal was counted (`aggregate`): where, and why.
    fn anonymous_refusal(&self, at: &'static str, reason: &'static str);
    /// An anonymous refusal was counted without its source (the aggregate table was full).
    fn refusal_overflow(&self);
    /// A webhook delivery succeeded.
    fn webhook_delivered(&self);
    /// A webhook delivery attempt failed (it may be retried).
    fn webhook_failed(&self);
    /// An event was dropped before delivery (queue full or retries exhausted).
    fn webhook_dropped(&self);
    /// An upstream-action event was queued for the background group commit (`commit`).
    fn upstream_action_queued(&self);
    /// Queued upstream-action events no longer pending: durable, lost, or handed back.
    fn upstream_actions_settled(&self, events: usize);
    /// A group of `events` upstream-action events was made durable.
    fn upstream_actions_committed(&self, events: usize);
    /// A group commit of `events` failed; `lost` of them had failed before and are given up.
    fn upstream_actions_commit_failed(&self, events: usize, lost: usize);
}

/// The audit sink.
#[derive(Clone)]
pub struct Audit {
    store: SharedStore,
    clock: SharedClock,
    metrics: std::sync::Arc<dyn Observer>,
    detector: std::sync::Arc<detect::Detector>,
    webhook: Option<webhook::Webhook>,
    refusals: std::sync::Arc<aggregate::Table>,
    /// How upstream-action events are group-committed.
    group_policy: GroupCommit,
    /// Their committer, started on the first such event (it needs the runtime); `None` inside
    /// when there was no runtime to start it on: those events are then written one by one.
    group: std::sync::Arc<std::sync::OnceLock<Option<commit::Committer>>>,
}

/// Where [`Audit::page`] continues (opaque).
pub use crate::store::audit_log::Cursor as AuditCursor;

/// Stored rows per page when the whole trail is read (export, verify): a row is one event or
/// one group-commit row of at most about 4 KiB of events (`store::audit_log`).
pub const PAGE_SIZE: usize = 500;

/// A stored event.
pub use crate::store::records::AuditRecord;

impl Audit {
    /// New sink, with default alert thresholds and no webhook, reporting to `metrics`.
    pub fn new(store: SharedStore, clock: SharedClock, metrics: impl Observer) -> Audit {
        Audit {
            store,
            clock,
            metrics: std::sync::Arc::new(metrics),
            detector: std::sync::Arc::new(detect::Detector::new(&AlertPolicy::default())),
            webhook: None,
            refusals: std::sync::Arc::default(),
            group_policy: GroupCommit::default(),
            group: std::sync::Arc::default(),
        }
    }

    /// Group-commits upstream-action events with this window and bound (`[audit]`).
    pub fn with_group_commit(mut self, policy: GroupCommit) -> Audit {
        self.group_policy = policy;
        self.group = std::sync::Arc::default();
        self
    }

    /// Returns once every upstream-action event recorded before the call is durable (or its
    /// group's failure was logged and counted): at shutdown, after the listeners stop, and
    /// before the trail is read. At once when none is pending. Returns how many were pending.
    pub async fn drain_upstream_actions(&self) -> usize {
        match self.group.get() {
            Some(Some(c)) => c.drain().await,
            _ => 0,
        }
    }

    fn committer(&self) -> Option<&commit::Committer> {
        self.group
            .get_or_init(|| {
                commit::Committer::start(
                    self.store.clone(),
                    self.group_policy,
                    self.metrics.clone(),
                )
            })
            .as_ref()
    }

    /// Uses these alert thresholds.
    pub fn with_alerts(mut self, policy: &AlertPolicy) -> Audit {
        self.detector = std::sync::Arc::new(detect::Detector::new(policy));
        self
    }

    /// Also delivers events to a webhook.
    pub fn with_webhook(mut self, hook: webhook::Webhook) -> Audit {
        self.webhook = Some(hook);
        self
    }

    /// The webhook's delivery counts, if one is configured.
    pub fn webhook_stats(&self) -> Option<webhook::WebhookCounts> {
        self.webhook.as_ref().map(webhook::Webhook::stats)
    }

    /// Records an event durably and logs it, then any alert it raises.
    pub async fn record(&self, event: AuditEvent) -> Result<(), StoreError> {
        let alert = self.detector.observe(&event, self.clock.now());
        self.write(event).await?;
        if let Some(a) = alert {
            self.write(a).await?;
        }
        Ok(())
    }

    /// Counts an anonymous refusal (see `aggregate`): a metric now, and one cell of the
    /// per-minute table, written later by [`Audit::flush_refusals`]. Nothing is stored, so
    /// nothing waits for the disk. The source is the current request's client IP.
    pub fn refused(&self, refusal: aggregate::Refusal) {
        let ip = source::current();
        tracing::debug!(target: "audit", refused_at = refusal.at(), reason = refusal.reason(), ?ip, "anonymous refusal");
        self.metrics
            .anonymous_refusal(refusal.at(), refusal.reason());
        if !self
            .refusals
            .count(self.clock.now().0, aggregate::Source::of(ip), refusal)
        {
            self.metrics.refusal_overflow();
        }
    }

    /// Writes the counted refusals of every minute that has ended (all of them with
    /// `everything`, at shutdown) as one `anonymous_refusals` event per (minute, source,
    /// refusal), all under one flush. Returns how many events were written. Cells whose write
    /// failed are put back for the next round.
    pub async fn flush_refusals(&self, everything: bool) -> Result<usize, StoreError> {
        let due = self.refusals.take_finished(self.clock.now().0, everything);
        if due.is_empty() {
            return Ok(0);
        }
        // Not a request: each event is written where it is made, so a failed one puts its
        // cells back (`batched` would queue them for the final flush).
        let written = crate::store::batched_without_rows(&self.store, async {
            let mut due = due.into_iter();
            let mut n = 0;
            while let Some(c) = due.next() {
                let event = AuditEvent::AnonymousRefusals {
                    minute: c.minute,
                    source: c.source.to_string(),
                    refused_at: c.refusal.at(),
                    reason: c.refusal.reason(),
                    count: c.count,
                };
                if let Err(e) = self.write(event).await {
                    self.refusals
                        .restore(std::iter::once(c).chain(due).collect());
                    return Err(e);
                }
                n += 1;
            }
            Ok(n)
        })
        .await;
        // A failed final flush: what was written becomes durable with the next flush.
        written?
    }

    /// Records an event on behalf of the HTTP request `request_id` (for work that outlives the
    /// handler, such as a streamed response body).
    pub async fn record_in(
        &self,
        request_id: Option<String>,
        event: AuditEvent,
    ) -> Result<(), StoreError> {
        match request_id {
            Some(id) if request_id::current().is_none() => {
                request_id::scope(id, self.record(event)).await
            }
            _ => self.record(event).await,
        }
    }

    async fn write(&self, event: AuditEvent) -> Result<(), StoreError> {
        let at = self.clock.now();
        let id = crypto::b64url(
            &crypto::random_bytes::<12>().map_err(|e| StoreError::Backend(e.to_string()))?,
        );
        let request_id = request_id::current();
        let json = serde_json::to_value(&event).map_err(|e| StoreError::Backend(e.to_string()))?;
        let kind = event.kind().name().to_owned();
        let rid = request_id.as_deref().unwrap_or("-");
        if matches!(event, AuditEvent::AlertRaised { .. }) {
            tracing::warn!(target: "audit", id = %id, at = at.0, request_id = rid, kind = %kind, event = %json, "alert");
        } else {
            tracing::info!(target: "audit", id = %id, at = at.0, request_id = rid, kind = %kind, event = %json, "audit");
        }
        self.metrics.event(event.kind(), &json);
        let rec = AuditRecord {
            id: id.clone(),
            at,
            request_id,
            kind,
            event: json,
        };
        // Its place in the trail is taken now, wherever and whenever it is written.
        let mut entry = audit_log::Entry::new(rec, at.plus(RETENTION_SECS));
        // An upstream action (a `tools/call` and its outcome) is not security state: it is
        // made durable by the background group commit, within the configured window, and the
        // call does not wait for it (issue 17). So is a policy decision that lets a call go on
        // (`allowed`, `approval_used`: the approval itself was taken durably) or hides a tool
        // from a list: it changes nothing a later request reads. Every other kind (a denial,
        // an approval request, a step-up): durable before this returns.
        if event.group_committed()
            && let Some(committer) = self.committer()
        {
            let item = commit::Item::new(entry, self.webhook.clone());
            match committer.enqueue(item, self.metrics.as_ref()).await {
                Ok(()) => return Ok(()),
                // The committer is gone (its runtime ended): write it here instead.
                Err(item) => entry = item.entry,
            }
        }
        audit_log::append(self.store.as_ref(), &entry).await?;
        // Only once the write is durable (inside a batched request, after its final flush):
        // what the webhook sends is always in the trail.
        if let Some(hook) = &self.webhook {
            let hook = hook.clone();
            crate::store::after_durable(move || hook.offer(entry.record()));
        }
        Ok(())
    }

    /// The newest `limit` stored events, oldest first. Reads window by window from the newest,
    /// so a long trail is not loaded whole to show its end.
    pub async fn recent(&self, limit: usize) -> Result<Vec<AuditRecord>, StoreError> {
        self.drain_upstream_actions().await;
        let mut out: Vec<AuditRecord> = Vec::new();
        for w in self.windows().rev() {
            if out.len() >= limit {
                break;
            }
            let mut older = self.window(w).await?;
            older.append(&mut out);
            out = older;
        }
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }

    /// The newest `limit` stored events of these kinds that `keep` accepts, oldest first,
    /// reading window by window from the newest (at most one window in memory beyond them).
    pub async fn recent_of(
        &self,
        kinds: &[Kind],
        limit: usize,
        keep: impl Fn(&AuditRecord) -> bool,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        self.drain_upstream_actions().await;
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        let mut out: Vec<AuditRecord> = Vec::new();
        for w in self.windows().rev() {
            if out.len() >= limit {
                break;
            }
            let mut older: Vec<AuditRecord> = self
                .window(w)
                .await?
                .into_iter()
                .filter(|r| names.contains(&r.kind.as_str()) && keep(r))
                .collect();
            older.append(&mut out);
            out = older;
        }
        let skip = out.len().saturating_sub(limit);
        Ok(out.split_off(skip))
    }

    /// The windows (of [`WINDOW_SECS`]) that can hold retained events, oldest first.
    pub fn windows(&self) -> std::ops::RangeInclusive<u64> {
        let now = self.clock.now().0;
        // One window past now, for events stamped a moment ahead by another replica's clock.
        (now.saturating_sub(RETENTION_SECS) / WINDOW_SECS)..=(now / WINDOW_SECS + 1)
    }

    /// The stored events of window `w` (times `w * WINDOW_SECS ..` the next), oldest first.
    pub async fn window(&self, w: u64) -> Result<Vec<AuditRecord>, StoreError> {
        audit_log::window(self.store.as_ref(), w).await
    }

    /// The events of the next at most `limit` stored rows after `cursor` (from the oldest with
    /// `None`), oldest first, and the cursor to continue from (`None` once the trail is read):
    /// export and verify read the whole trail this way, one page in memory at a time.
    pub async fn page(
        &self,
        cursor: Option<&AuditCursor>,
        limit: usize,
    ) -> Result<(Vec<AuditRecord>, Option<AuditCursor>), StoreError> {
        if cursor.is_none() {
            self.drain_upstream_actions().await;
        }
        audit_log::page(self.store.as_ref(), cursor, limit).await
    }

    /// All stored events, oldest first.
    pub async fn all(&self) -> Result<Vec<AuditRecord>, StoreError> {
        self.drain_upstream_actions().await;
        audit_log::all(self.store.as_ref()).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::clock::UnixTime;

    /// Position of `e`'s variant. No wildcard arm: a new variant does not compile until it is
    /// listed here, and then the test below fails until it has a sample too.
    fn ordinal(e: &AuditEvent) -> usize {
        use AuditEvent as E;
        match e {
            E::ClientRegistered { .. } => 0,
            E::ClientDeleted { .. } => 1,
            E::GrantRevokedByAdmin { .. } => 2,
            E::ConsentShown { .. } => 3,
            E::ConsentApproved { .. } => 4,
            E::ConsentDenied { .. } => 5,
            E::ConsentRecorded { .. } => 6,
            E::CallbackRejected { .. } => 7,
            E::SignedIn { .. } => 8,
            E::CodeIssued { .. } => 9,
            E::CodeReuse { .. } => 10,
            E::TokenIssued { .. } => 11,
            E::TokenRefreshed { .. } => 12,
            E::RefreshReuse { .. } => 13,
            E::TokenRevoked { .. } => 14,
            E::TokenRejected { .. } => 15,
            E::HandleRejected { .. } => 16,
            E::UpstreamAction { .. } => 17,
            E::GitHubGrantStored { .. } => 18,
            E::GitHubGrantBroken { .. } => 19,
            E::GitHubGrantDisconnected { .. } => 20,
            E::AllowanceWithdrawn { .. } => 21,
            E::ConnectLinkCreated { .. } => 22,
            E::ConnectLinkRefused { .. } => 23,
            E::ConnectLinkWrongAccount { .. } => 24,
            E::ConnectLinkCompleted { .. } => 25,
            E::ConnectLinkDeclined { .. } => 26,
            E::TokenExchanged { .. } => 27,
            E::TokenExchangeRefused { .. } => 28,
            E::ClientAccessRevoked { .. } => 29,
            E::AlertRaised { .. } => 30,
            E::RegistrationRefused { .. } => 31,
            E::ClientUnblocked { .. } => 32,
            E::SignInRefused { .. } => 33,
            E::AccessLost { .. } => 34,
            E::AnonymousRefusals { .. } => 35,
            E::RefreshBranched { .. } => 36,
            E::PolicyDecision { .. } => 37,
            E::ApprovalAnswered { .. } => 38,
            E::RefreshBranchEnded { .. } => 39,
        }
    }
    const VARIANTS: usize = 40;

    /// What the sink reported, one line each (the metrics registry sits above audit).
    #[derive(Clone, Default)]
    pub(crate) struct Seen(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

    impl Seen {
        pub(crate) fn count(&self, line: &str) -> usize {
            self.0.lock().unwrap().iter().filter(|l| *l == line).count()
        }
        fn push(&self, line: String) {
            self.0.lock().unwrap().push(line);
        }
    }

    impl Observer for Seen {
        fn event(&self, kind: Kind, _: &serde_json::Value) {
            self.push(format!("event {}", kind.name()));
        }
        fn anonymous_refusal(&self, at: &'static str, reason: &'static str) {
            self.push(format!("refusal {at} {reason}"));
        }
        fn refusal_overflow(&self) {
            self.push("overflow".to_owned());
        }
        fn webhook_delivered(&self) {}
        fn webhook_failed(&self) {}
        fn webhook_dropped(&self) {}
        fn upstream_action_queued(&self) {
            self.push("queued".to_owned());
        }
        fn upstream_actions_settled(&self, events: usize) {
            self.push(format!("settled {events}"));
        }
        fn upstream_actions_committed(&self, events: usize) {
            self.push(format!("committed {events}"));
        }
        fn upstream_actions_commit_failed(&self, events: usize, lost: usize) {
            self.push(format!("failed {events} lost {lost}"));
        }
    }

    /// One value of every variant (the metrics tests count each).
    pub(crate) fn samples() -> Vec<AuditEvent> {
        let u = || UserId::new("github:1");
        let c = || ClientId::new("c");
        let f = || FamilyId::new("f");
        let s = String::new;
        vec![
            AuditEvent::ClientRegistered {
                client_id: c(),
                client_name: None,
                redirect_uris: vec![],
                source: "dynamic",
                ip: None,
            },
            AuditEvent::RegistrationRefused {
                reason: "wrong_token",
                ip: None,
            },
            AuditEvent::ClientDeleted {
                client_id: c(),
                consents: 0,
                families: 0,
                allowances: 0,
            },
            AuditEvent::ClientUnblocked { client_id: c() },
            AuditEvent::SignInRefused {
                user_id: u(),
                login: s(),
                reason: "outside",
            },
            AuditEvent::AccessLost {
                user_id: u(),
                families: 0,
            },
            AuditEvent::GrantRevokedByAdmin {
                user_id: u(),
                families: 0,
                github_revocation: "revoked",
                allowances: 0,
            },
            AuditEvent::ConsentShown {
                client_id: c(),
                redirect_host: s(),
                warnings: vec![],
            },
            AuditEvent::ConsentApproved {
                client_id: c(),
                scopes: s(),
                user_id: None,
                redirect_uri: s(),
                warnings: vec![],
            },
            AuditEvent::ConsentDenied {
                client_id: c(),
                user_id: None,
                redirect_uri: s(),
                warnings: vec![],
            },
            AuditEvent::ConsentRecorded {
                user_id: u(),
                client_id: c(),
                redirect_uri: s(),
                scopes: s(),
            },
            AuditEvent::CallbackRejected { reason: s() },
            AuditEvent::SignedIn {
                user_id: u(),
                login: s(),
                sign_in: SignInKind::AccountPicker,
            },
            AuditEvent::CodeIssued {
                user_id: u(),
                client_id: c(),
                consent_remembered: false,
                code_id: s(),
                family_id: f(),
                redirect_uri: s(),
            },
            AuditEvent::CodeReuse { family_id: f() },
            AuditEvent::TokenIssued {
                user_id: u(),
                client_id: c(),
                family_id: f(),
                code_id: s(),
            },
            AuditEvent::TokenRefreshed {
                user_id: u(),
                client_id: c(),
                family_id: f(),
                grace: false,
                branch: 0,
                ip: None,
                network: None,
                user_agent: None,
            },
            AuditEvent::RefreshReuse {
                user_id: u(),
                client_id: c(),
                family_id: f(),
                case: "stale_beyond_window",
            },
            AuditEvent::RefreshBranched {
                user_id: u(),
                client_id: c(),
                family_id: f(),
                branches: 2,
                live: 1,
                branch: 1,
                ip: None,
                network: None,
                user_agent: None,
            },
            AuditEvent::RefreshBranchEnded {
                user_id: u(),
                client_id: c(),
                family_id: f(),
                branch: 1,
                family_revoked: false,
            },
            AuditEvent::PolicyDecision {
                user_id: u(),
                client_id: c(),
                tool: s(),
                rule_id: s(),
                decision: "deny",
                outcome: "denied",
                arguments_digest: s(),
                matched: vec![s()],
            },
            AuditEvent::ApprovalAnswered {
                link_id: s(),
                user_id: u(),
                client_id: c(),
                tool: s(),
                rule_id: s(),
                answer: "approved",
            },
            AuditEvent::TokenRevoked {
                client_id: c(),
                kind: "access_token",
            },
            AuditEvent::TokenRejected { reason: "expired" },
            AuditEvent::HandleRejected {
                user_id: u(),
                client_id: c(),
                kind: "session",
            },
            AuditEvent::UpstreamAction {
                user_id: u(),
                client_id: c(),
                tool: s(),
                outcome: s(),
            },
            AuditEvent::GitHubGrantStored {
                user_id: u(),
                login: s(),
            },
            AuditEvent::GitHubGrantBroken {
                user_id: u(),
                reason: s(),
            },
            AuditEvent::GitHubGrantDisconnected {
                user_id: u(),
                github_revocation: "revoked",
                allowances: 0,
            },
            AuditEvent::AllowanceWithdrawn {
                user_id: u(),
                client_id: c(),
            },
            AuditEvent::ConnectLinkCreated {
                link_id: s(),
                user_id: u(),
                client_id: c(),
                kind: s(),
            },
            AuditEvent::ConnectLinkRefused {
                link_id: s(),
                owner: u(),
                opener: u(),
            },
            AuditEvent::ConnectLinkWrongAccount {
                link_id: s(),
                owner: u(),
                returned: u(),
            },
            AuditEvent::ConnectLinkCompleted {
                link_id: s(),
                user_id: u(),
                client_id: c(),
            },
            AuditEvent::ConnectLinkDeclined {
                link_id: s(),
                user_id: u(),
            },
            AuditEvent::TokenExchanged {
                user_id: u(),
                client_id: c(),
            },
            AuditEvent::TokenExchangeRefused { reason: s() },
            AuditEvent::ClientAccessRevoked {
                user_id: u(),
                client_id: c(),
                families: 0,
                allowance: false,
            },
            AuditEvent::AnonymousRefusals {
                minute: 0,
                source: s(),
                refused_at: "mcp_token",
                reason: "missing",
                count: 1,
            },
            AuditEvent::AlertRaised {
                alert: detect::AlertKind::WrongAudienceRate,
                user_id: None,
                client_id: None,
                detail: s(),
            },
        ]
    }

    #[tokio::test]
    async fn tail_and_windows_span_window_boundaries_in_order() {
        let clock = crate::clock::ManualClock::new(UnixTime(1_800_000_000 - 10));
        let store: SharedStore =
            std::sync::Arc::new(crate::store::SledStore::temporary(clock.clone()).unwrap());
        let audit = Audit::new(store, clock.clone(), Seen::default());
        let mut want = Vec::new();
        // Five events, the later ones each in a later window (one window is skipped entirely).
        for (i, step) in [0, 5, WINDOW_SECS, 3 * WINDOW_SECS, 1]
            .into_iter()
            .enumerate()
        {
            clock.advance(step);
            let reason = format!("r{i}");
            audit
                .record(AuditEvent::CallbackRejected {
                    reason: reason.clone(),
                })
                .await
                .unwrap();
            want.push(reason);
        }
        let reasons = |recs: Vec<AuditRecord>| -> Vec<String> {
            recs.into_iter()
                .map(|r| r.event["reason"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(reasons(audit.recent(3).await.unwrap()), want[2..]);
        assert_eq!(reasons(audit.recent(50).await.unwrap()), want);
        let mut windowed = Vec::new();
        for w in audit.windows() {
            windowed.extend(audit.window(w).await.unwrap());
        }
        assert_eq!(
            reasons(windowed),
            want,
            "export sees every event once, in order"
        );
    }

    #[tokio::test]
    async fn refusal_counts_whose_write_failed_are_kept_and_written_by_the_next_round() {
        let clock = crate::clock::ManualClock::new(UnixTime(1_800_000_000 + 10));
        let sled = std::sync::Arc::new(crate::store::SledStore::temporary(clock.clone()).unwrap());
        let failing = std::sync::Arc::new(crate::store::failing::Failing::new(sled));
        let store: SharedStore = failing.clone();
        let audit = Audit::new(store, clock.clone(), Seen::default());
        for _ in 0..3 {
            source::scope("192.0.2.7".parse().unwrap(), async {
                audit.refused(aggregate::Refusal::McpMissing);
            })
            .await;
        }
        clock.advance(60);
        failing
            .fail_audit_puts
            .store(true, std::sync::atomic::Ordering::Release);
        assert!(audit.flush_refusals(false).await.is_err());
        assert!(audit.all().await.unwrap().is_empty());
        failing
            .fail_audit_puts
            .store(false, std::sync::atomic::Ordering::Release);
        assert_eq!(audit.flush_refusals(false).await.unwrap(), 1);
        let trail = audit.all().await.unwrap();
        assert_eq!(trail.len(), 1);
        assert_eq!(trail[0].event["count"], 3, "the failed round's count kept");
    }

    #[tokio::test]
    async fn anonymous_refusals_store_nothing_until_their_minute_ends_then_one_event_each() {
        let clock = crate::clock::ManualClock::new(UnixTime(1_800_000_000 + 10));
        let sled = std::sync::Arc::new(crate::store::SledStore::temporary(clock.clone()).unwrap());
        let store: SharedStore = sled.clone();
        let seen = Seen::default();
        let audit = Audit::new(store.clone(), clock.clone(), seen.clone());
        let flushes = || crate::store::Store::disk_flushes(&*sled).unwrap_or_default();
        let before = flushes();
        for _ in 0..1000 {
            source::scope("192.0.2.7".parse().unwrap(), async {
                audit.refused(aggregate::Refusal::McpMissing);
            })
            .await;
        }
        source::scope("2001:db8::5".parse().unwrap(), async {
            audit.refused(aggregate::Refusal::CallbackStateUnknown);
        })
        .await;
        audit.refused(aggregate::Refusal::McpUnknown); // no request address known
        assert!(
            audit.all().await.unwrap().is_empty(),
            "nothing stored per request"
        );
        assert_eq!(flushes(), before, "nothing flushed per request");
        // The minute is not over: nothing is due.
        assert_eq!(audit.flush_refusals(false).await.unwrap(), 0);
        clock.advance(50);
        assert_eq!(audit.flush_refusals(false).await.unwrap(), 3);
        assert_eq!(flushes(), before + 1, "one flush for the minute's events");
        let trail = audit.all().await.unwrap();
        let got: Vec<(String, String, u64, u64)> = trail
            .iter()
            .map(|r| {
                (
                    r.event["source"].as_str().unwrap().to_owned(),
                    r.event["reason"].as_str().unwrap().to_owned(),
                    r.event["count"].as_u64().unwrap(),
                    r.event["minute"].as_u64().unwrap(),
                )
            })
            .collect();
        let m = 1_800_000_000;
        assert_eq!(
            got,
            [
                ("192.0.2.7".to_owned(), "missing".to_owned(), 1000, m),
                ("2001:db8::/64".to_owned(), "state_unknown".to_owned(), 1, m),
                ("unknown".to_owned(), "unknown".to_owned(), 1, m),
            ]
        );
        assert!(trail.iter().all(|r| r.kind == "anonymous_refusals"));
        // The metric moved per request (`rejections{source="mcp_token",reason="missing"}`).
        assert_eq!(seen.count("refusal mcp_token missing"), 1000);
        // Shutdown takes the current minute too.
        audit.refused(aggregate::Refusal::RegistrationWrongToken);
        assert_eq!(audit.flush_refusals(false).await.unwrap(), 0);
        assert_eq!(audit.flush_refusals(true).await.unwrap(), 1);
    }

    /// A `tools/call`'s event is not security state: recording it waits for no flush, and it
    /// reaches the trail with its group (here: when a reader drains); a security event is
    /// durable before `record` returns, and both sort where they happened.
    #[tokio::test(start_paused = true)]
    async fn an_upstream_action_waits_for_no_flush_while_security_events_stay_durable_on_return() {
        let clock = crate::clock::ManualClock::new(UnixTime(1_800_000_000));
        let sled = std::sync::Arc::new(crate::store::SledStore::temporary(clock.clone()).unwrap());
        let store: SharedStore = sled.clone();
        let seen = Seen::default();
        let audit =
            Audit::new(store.clone(), clock.clone(), seen.clone()).with_group_commit(GroupCommit {
                window_ms: 1000,
                max_events: 256,
            });
        let flushes = || crate::store::Store::disk_flushes(&*sled).unwrap_or_default();
        let before = flushes();
        let call = |tool: &str| AuditEvent::UpstreamAction {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("c"),
            tool: tool.to_owned(),
            outcome: "ok".to_owned(),
        };
        audit.record(call("first")).await.unwrap();
        audit.record(call("second")).await.unwrap();
        assert_eq!(flushes(), before, "no flush waited for");
        let stored =
            |recs: Vec<AuditRecord>| -> Vec<String> { recs.into_iter().map(|r| r.kind).collect() };
        assert!(
            audit_log::all(store.as_ref()).await.unwrap().is_empty(),
            "not written yet: pending in the group"
        );
        assert_eq!(seen.count("queued"), 2);
        assert_eq!(
            seen.count("event upstream_action"),
            2,
            "counted when recorded"
        );
        audit
            .record(AuditEvent::TokenRevoked {
                client_id: ClientId::new("c"),
                kind: "access_token",
            })
            .await
            .unwrap();
        // (Waiting for that flush lets paused time run on, so the group may be durable by
        // now too; what matters is that the revocation is.)
        assert!(
            stored(audit_log::all(store.as_ref()).await.unwrap())
                .contains(&"token_revoked".to_owned()),
            "security state: durable on return"
        );
        // A reader drains first, and sees the trail in the order things happened.
        let trail = audit.all().await.unwrap();
        assert_eq!(
            stored(trail),
            ["upstream_action", "upstream_action", "token_revoked"]
        );
        assert_eq!(seen.count("committed 2"), 1, "both calls in one group");
        assert!(flushes() <= before + 2);
    }

    #[tokio::test]
    async fn paging_reads_the_whole_trail_in_order_one_page_at_a_time() {
        let clock = crate::clock::ManualClock::new(UnixTime(1_800_000_000));
        let store: SharedStore =
            std::sync::Arc::new(crate::store::SledStore::temporary(clock.clone()).unwrap());
        let audit = Audit::new(store, clock.clone(), Seen::default());
        for i in 0..7 {
            clock.advance(WINDOW_SECS / 3);
            audit
                .record(AuditEvent::CallbackRejected {
                    reason: format!("r{i}"),
                })
                .await
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut cursor = None;
        let mut pages = 0;
        loop {
            let (page, next) = audit.page(cursor.as_ref(), 3).await.unwrap();
            assert!(page.len() <= 3);
            pages += 1;
            seen.extend(page.into_iter().map(|r| r.event["reason"].clone()));
            match next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        let want: Vec<serde_json::Value> = (0..7).map(|i| format!("r{i}").into()).collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn kinds_lists_the_serialized_name_of_every_variant() {
        let samples = samples();
        let mut seen: Vec<usize> = samples.iter().map(ordinal).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen,
            (0..VARIANTS).collect::<Vec<_>>(),
            "one sample of each variant"
        );
        let mut names = Vec::new();
        for e in &samples {
            let v = serde_json::to_value(e).unwrap_or_default();
            let kind = v["event"].as_str().unwrap_or_default().to_owned();
            assert_eq!(e.kind().name(), kind, "Kind::name is the serialized tag");
            assert_eq!(Kind::from_name(&kind), Some(e.kind()));
            names.push(kind);
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VARIANTS, "distinct kinds");
        assert_eq!(Kind::ALL.len(), VARIANTS, "Kind::ALL lists nothing else");
        let mut all = Kind::ALL.to_vec();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), VARIANTS, "Kind::ALL lists each kind once");
        assert_eq!(Kind::from_name("token_stolen"), None);
    }
}
