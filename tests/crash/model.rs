//! What the clients were told: the model every check compares against.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;

use crate::support::browser::CookieJar;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Consent {
    /// No consent was ever given (no callback was sent).
    Never,
    /// A redirect with a code confirmed it.
    Confirmed,
    /// The account page confirmed its revocation (303).
    Revoked,
    /// A callback was sent but its answer was lost.
    Unsure,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AgentState {
    Active,
    /// The account page's revoke was sent, its answer lost: retried next.
    RevokeLost,
    /// Revoked on the account page (confirmed); only checked from now on.
    Retired,
}

#[derive(Clone)]
pub(super) struct PendingCode {
    pub(super) code: String,
    pub(super) verifier: String,
    pub(super) issued: Instant,
    /// A redemption was sent and its answer lost.
    pub(super) lost: bool,
}

pub(super) struct ClientRec {
    pub(super) id: String,
    pub(super) redirect_uri: String,
    pub(super) checks: u32,
}

/// One person's agent: a registered client and the person's own browser.
pub(super) struct Agent {
    pub(super) worker: usize,
    pub(super) client: usize,
    pub(super) login: &'static str,
    pub(super) jar: Arc<CookieJar>,
    pub(super) consent: Consent,
    pub(super) state: AgentState,
    pub(super) pending_code: Option<PendingCode>,
    /// A code issued just before the consent was revoked; must be refused after.
    pub(super) code_before_revoke: Option<(String, String)>,
    pub(super) families: Vec<usize>,
    pub(super) checks: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fam {
    Live,
    /// Presenting the current refresh token was sent, the answer lost.
    RefreshLost,
    /// `/revoke` of the current refresh token was sent, the answer lost.
    RevokeLost,
    /// Presenting the rotated-away token at this index was sent, the answer lost.
    ReuseLost(usize),
    /// Confirmed revoked, and how.
    Revoked(&'static str),
    /// The model no longer knows (after a violation): not checked any more.
    Dead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tok {
    Live,
    Revoked,
    RevokeLost,
}

/// A refresh-token family: born from one confirmed code redemption.
pub(super) struct Family {
    pub(super) agent: usize,
    pub(super) client: usize,
    pub(super) code: String,
    pub(super) verifier: String,
    /// Confirmed refresh tokens, oldest first: each the confirmed successor of the one before.
    pub(super) chain: Vec<String>,
    pub(super) access: Vec<(String, Tok)>,
    pub(super) state: Fam,
    pub(super) checks: u32,
}

/// A `tools/call` the proxy answered (200): its `upstream_action` event, named by its unique
/// tool, must be in the trail after the first kill after it was sent, unless it was answered
/// within [`super::UPSTREAM_LOSS_BOUND`] of that kill.
pub(super) struct Call {
    pub(super) tool: String,
    /// Before the request was sent: a call sent before a kill was served by the process
    /// killed then (or by none), one sent after it by a later one.
    pub(super) sent: Instant,
    pub(super) answered: Instant,
}

#[derive(Default, Debug)]
pub(super) struct Stats {
    pub(super) registrations: u64,
    pub(super) consent_pages: u64,
    pub(super) consent_skips: u64,
    pub(super) codes_issued: u64,
    pub(super) codes_redeemed: u64,
    pub(super) refreshes: u64,
    pub(super) replays: u64,
    pub(super) revoked_refresh: u64,
    pub(super) revoked_access: u64,
    pub(super) revoked_account: u64,
    pub(super) reuse_detected: u64,
    pub(super) codes_replayed: u64,
    pub(super) mcp_calls: u64,
    /// Answered `tools/call`s whose event was looked for in the trail after a kill.
    pub(super) upstream_checked: u64,
    /// ... and those answered too close to a kill for their event to be owed.
    pub(super) upstream_exempt: u64,
    pub(super) checks: u64,
    pub(super) not_sent: u64,
    pub(super) lost: u64,
    pub(super) timeouts: u64,
    pub(super) kills: u64,
    pub(super) startup_kills: u64,
    pub(super) starts: u64,
    pub(super) ready_total_ms: u64,
    pub(super) ready_max_ms: u64,
}

#[derive(Default)]
pub(super) struct Model {
    pub(super) clients: Vec<ClientRec>,
    pub(super) agents: Vec<Agent>,
    pub(super) families: Vec<Family>,
    /// Every code ever confirmed redeemed.
    pub(super) redeemed: HashSet<String>,
    /// Refresh token → its confirmed successor.
    pub(super) rotations: HashMap<String, String>,
    pub(super) violations: Vec<String>,
    /// Why operations' answers were lost, and how often.
    pub(super) lost_reasons: BTreeMap<String, u64>,
    /// Answered `tools/call`s not yet judged against a kill.
    pub(super) calls: Vec<Call>,
    /// Calls judged owed at their kill whose event has not been looked for yet (the trail is
    /// read every few restarts: an event durable at a kill stays in the trail after later ones),
    /// with how long before that kill each was answered.
    pub(super) owed: Vec<(Call, std::time::Duration)>,

    pub(super) stats: Stats,
}

/// What an operation needs to know about a family.
#[derive(Clone)]
pub(super) struct FamView {
    pub(super) client_id: String,
    pub(super) redirect_uri: String,
    pub(super) code: String,
    pub(super) verifier: String,
    pub(super) chain: Vec<String>,
    pub(super) access: Vec<(String, Tok)>,
    pub(super) state: Fam,
    pub(super) agent_state: AgentState,
}

impl Model {
    pub(super) fn view(&self, f: usize) -> FamView {
        let fam = &self.families[f];
        let c = &self.clients[fam.client];
        FamView {
            client_id: c.id.clone(),
            redirect_uri: c.redirect_uri.clone(),
            code: fam.code.clone(),
            verifier: fam.verifier.clone(),
            chain: fam.chain.clone(),
            access: fam.access.clone(),
            state: fam.state,
            agent_state: self.agents[fam.agent].state,
        }
    }
}
