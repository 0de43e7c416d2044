//! Token formats and the refresh-rotation rule, without I/O.
//!
//! Tokens are opaque random strings with a type prefix (so secret scanners and our own
//! log checks recognise them) and are stored only as SHA-256 hashes. A refresh token names its
//! family: `mcprt_<family>.<secret>`. Rotation: a branch's head yields a new one and becomes
//! that branch's "previous", honoured only inside a short grace window (a client that retried,
//! or refreshed from two egress IPs). A token replaced earlier is, in `branch` mode, a stale
//! copy of another process of the same client if it was replaced recently and the family has
//! room: it starts a branch of its own; otherwise (and always in `strict` mode) it is reuse and
//! revokes the whole family (OAuth 2.1 §4.3.1, RFC 9700 §4.14.2). SECURITY.md, "Refresh
//! rotation", gives the reasoning.
//!
//! Each branch also keeps who last used it, as the edge saw the request (client IP, its
//! network, a bounded `User-Agent`), so the account page can show a person every branch and
//! end one ([`FamilyRecord::end_branch`]), and detection can see two branches used from two
//! networks at once (`audit::detect::branch_network_alert`).

use std::net::IpAddr;

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};

use crate::clock::UnixTime;
use crate::crypto::{self, CryptoError};
use crate::ids::{AccessToken, AuthCode, ClientId, ClientSecret, FamilyId, RefreshToken, UserId};
use crate::oauth::scope::ScopeSet;

/// Prefix of access tokens.
pub const ACCESS_PREFIX: &str = "mcpat_";
/// Prefix of refresh tokens.
pub const REFRESH_PREFIX: &str = "mcprt_";
/// Prefix of tokens given to exchange-mode backends.
pub const BACKEND_PREFIX: &str = "mcpbt_";
/// Prefix of authorization codes.
pub const CODE_PREFIX: &str = "mcpac_";
/// Prefix of generated client ids (never `https://`, which would read as a metadata URL).
pub const CLIENT_PREFIX: &str = "mcpc_";
/// Prefix of client secrets.
pub const CLIENT_SECRET_PREFIX: &str = "mcpc_secret_";

/// A new access token.
pub fn new_access_token() -> Result<AccessToken, CryptoError> {
    Ok(AccessToken::new(format!(
        "{ACCESS_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new backend token.
pub fn new_backend_token() -> Result<crate::ids::BackendToken, CryptoError> {
    Ok(crate::ids::BackendToken::new(format!(
        "{BACKEND_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new authorization code.
pub fn new_code() -> Result<AuthCode, CryptoError> {
    Ok(AuthCode::new(format!(
        "{CODE_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// A new family id.
pub fn new_family_id() -> Result<FamilyId, CryptoError> {
    Ok(FamilyId::new(
        crypto::b64url(&crypto::random_bytes::<16>()?),
    ))
}

/// A new refresh token in `family`.
pub fn new_refresh_token(family: &FamilyId) -> Result<RefreshToken, CryptoError> {
    Ok(RefreshToken::new(format!(
        "{REFRESH_PREFIX}{}.{}",
        family.as_str(),
        crypto::random_token()?
    )))
}

/// The family a refresh token names, if it is well-formed.
pub fn refresh_family(token: &RefreshToken) -> Option<FamilyId> {
    let rest = token.secret().strip_prefix(REFRESH_PREFIX)?;
    let (family, secret) = rest.split_once('.')?;
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    (ok(family, 22) && ok(secret, 43)).then(|| FamilyId::new(family))
}

/// A new client id.
pub fn new_client_id() -> Result<ClientId, CryptoError> {
    Ok(ClientId::new(format!(
        "{CLIENT_PREFIX}{}",
        crypto::b64url(&crypto::random_bytes::<16>()?)
    )))
}

/// A new client secret.
pub fn new_client_secret() -> Result<ClientSecret, CryptoError> {
    Ok(ClientSecret::new(format!(
        "{CLIENT_SECRET_PREFIX}{}",
        crypto::random_token()?
    )))
}

/// `[tokens] refresh_reuse`: what a superseded refresh token of the family's own client means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReuseMode {
    /// A copy superseded recently, while the family has room, starts a branch of its own (a
    /// second process of the same client that refreshed from a stale copy); anything else is
    /// reuse. The default, for clients that run several processes on one stored credential.
    Branch,
    /// Any superseded token outside the grace window is reuse (one process per credential).
    Strict,
}

impl ReuseMode {
    /// The configuration name.
    pub const fn name(self) -> &'static str {
        match self {
            ReuseMode::Branch => "branch",
            ReuseMode::Strict => "strict",
        }
    }
}

/// The refresh rules `decide` and `apply` follow (from `[tokens]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshRules {
    /// `refresh_reuse`.
    pub mode: ReuseMode,
    /// `refresh_grace_secs`: a duplicate of the request that rotated (or forked) gets its answer
    /// again this long.
    pub grace_secs: u64,
    /// `refresh_stale_secs`: a token superseded at most this long ago may start a branch.
    pub stale_secs: u64,
    /// `refresh_branch_idle_secs`: a branch whose head was issued longer ago than this no
    /// longer counts against `max_branches` (its head still rotates).
    pub branch_idle_secs: u64,
    /// `refresh_max_branches`: live branches a family may have.
    pub max_branches: usize,
}

/// Longest `User-Agent` kept on a branch, in characters; longer ones are cut.
pub const MAX_USER_AGENT: usize = 200;

/// The network an address belongs to, for telling parties apart: IPv4 /24, IPv6 /48 (a site's
/// prefix: a host's temporary addresses, its interfaces and a home or office LAN stay inside
/// it). IPv4-mapped IPv6 addresses count as IPv4.
pub fn network_of(ip: IpAddr) -> IpNet {
    match ip.to_canonical() {
        IpAddr::V4(v4) => IpNet::V4(Ipv4Net::new_assert(v4, 24).trunc()),
        IpAddr::V6(v6) => IpNet::V6(Ipv6Net::new_assert(v6, 48).trunc()),
    }
}

/// A `User-Agent` as a branch keeps it: printable ASCII only (anything else becomes `?`),
/// trimmed, at most [`MAX_USER_AGENT`] characters; `None` when nothing is left.
pub fn bounded_user_agent(raw: &str) -> Option<String> {
    let kept: String = raw
        .trim()
        .chars()
        .take(MAX_USER_AGENT)
        .map(|c| {
            if c == ' ' || c.is_ascii_graphic() {
                c
            } else {
                '?'
            }
        })
        .collect();
    let kept = kept.trim_end();
    (!kept.is_empty()).then(|| kept.to_owned())
}

/// Who presented a token, as the edge saw the request: the client IP it decided
/// (`http::client_ip`, forwarded headers believed only from trusted proxies) and the bounded
/// `User-Agent`. Neither is a secret, and neither is proof of anything: the address says where
/// the request came from, the user agent only what the caller chose to say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presenter {
    /// The client IP, if known.
    pub ip: Option<IpAddr>,
    /// The `User-Agent`, bounded ([`bounded_user_agent`]).
    pub user_agent: Option<String>,
}

impl Presenter {
    /// From the request's client IP and raw `User-Agent` header.
    pub fn new(ip: Option<IpAddr>, user_agent: Option<&str>) -> Presenter {
        Presenter {
            ip: ip.map(|i| i.to_canonical()),
            user_agent: user_agent.and_then(bounded_user_agent),
        }
    }

    /// The network of its address.
    pub fn network(&self) -> Option<IpNet> {
        self.ip.map(network_of)
    }
}

/// Who last used a branch (rotated it, or started it), for the account page and detection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BranchSeen {
    /// The client IP, if it was known.
    pub ip: Option<IpAddr>,
    /// The bounded `User-Agent`, if one was sent.
    pub user_agent: Option<String>,
    /// Since when this branch has been used from `ip`'s network without a use from another
    /// (its first use there; the time of this use when the address is unknown).
    pub network_since: UnixTime,
}

impl BranchSeen {
    /// The network of its address.
    pub fn network(&self) -> Option<IpNet> {
        self.ip.map(network_of)
    }
}

/// One line of rotation within a family: what one process of the client holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    /// Its number within the family (0 is the one the code started).
    pub id: u32,
    /// Hash of the token that is currently valid on this branch.
    pub head: String,
    /// Hash of the token `head` replaced, replayed until `rotated_at + grace`.
    pub previous: Option<String>,
    /// `head`, sealed (AES-256-GCM, token-encryption key, family id as associated data), kept
    /// for replays of `previous` inside the grace window.
    pub replay: Option<String>,
    /// When `head` was issued (the last time this branch was used).
    pub rotated_at: UnixTime,
    /// Who last used it (absent on records from before addresses were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<BranchSeen>,
    /// For a fork: the hash of the replaced token it was started from (ending the branch
    /// forgets that token too, so it cannot fork again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<String>,
}

/// A token the family issued and then replaced: presenting it is a fork or reuse.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Superseded {
    /// Its hash.
    pub hash: String,
    /// When it was replaced.
    pub at: UnixTime,
    /// The branch on which it was replaced.
    pub branch: u32,
}

/// A fork, remembered for the grace window against the token that caused it, so a retry of
/// that request gets the same first token instead of a second branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkMemo {
    /// Hash of the presented (superseded) token.
    pub from: String,
    /// The branch it started.
    pub branch: u32,
    /// When.
    pub at: UnixTime,
    /// The branch's first token, sealed like [`Branch::replay`].
    pub sealed: String,
}

/// One authorization's refresh-token family, as stored (`store::records` re-exports it).
/// Records written before branches existed (`current`, `previous`, `retired`, `replay`,
/// `rotated_at`) are read as one branch (`StoredFamily`, migrated on read); records written
/// now carry those fields too, mirrored from the branches, so a replica still running the
/// previous release during a rolling upgrade reads them (as one line, strictly).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredFamily", into = "StoredFamily")]
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
    /// The live lines of rotation (one unless the client's processes forked it).
    pub branches: Vec<Branch>,
    /// Tokens of this family that were replaced (bounded, oldest dropped first). A token that
    /// was never issued is merely unknown and changes nothing.
    pub superseded: Vec<Superseded>,
    /// Forks made inside the last grace window.
    pub forks: Vec<ForkMemo>,
    /// The id the next branch gets.
    pub next_branch: u32,
    /// When the family started.
    pub created_at: UnixTime,
    /// Revoked families stay as tombstones until they expire, so reuse is still recognised.
    pub revoked: bool,
    /// Branches the person ended on the account page ([`FamilyRecord::end_branch`]): their
    /// access tokens are refused (`flows::access`); their refresh tokens are forgotten.
    pub ended_branches: Vec<u32>,
    /// When the two-networks alert last fired for this family (it stays quiet for its
    /// window after).
    pub network_alert_at: Option<UnixTime>,
}

/// A family record as it may be stored: today's fields, and the ones records had before
/// branches (still on users' disks), from which [`FamilyRecord`] makes one branch.
#[derive(Serialize, Deserialize)]
struct StoredFamily {
    family_id: FamilyId,
    user_id: UserId,
    client_id: ClientId,
    scopes: ScopeSet,
    resource: String,
    #[serde(default)]
    branches: Vec<Branch>,
    #[serde(default)]
    superseded: Vec<Superseded>,
    #[serde(default)]
    forks: Vec<ForkMemo>,
    #[serde(default)]
    next_branch: u32,
    created_at: UnixTime,
    revoked: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ended_branches: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    network_alert_at: Option<UnixTime>,
    // Before branches (written as a mirror: every head current, the last rotated branch's
    // previous and replay; `retired` is not mirrored, so the previous release treats a
    // superseded token as unknown: refused, not revoked):
    #[serde(default)]
    current: Vec<String>,
    #[serde(default)]
    previous: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    retired: Vec<String>,
    #[serde(default)]
    replay: Option<String>,
    #[serde(default)]
    rotated_at: Option<UnixTime>,
}

impl From<FamilyRecord> for StoredFamily {
    fn from(f: FamilyRecord) -> StoredFamily {
        let last = f.branches.iter().max_by_key(|b| b.rotated_at);
        StoredFamily {
            current: f.branches.iter().map(|b| b.head.clone()).collect(),
            previous: last.and_then(|b| b.previous.clone()),
            retired: Vec::new(),
            replay: last.and_then(|b| b.replay.clone()),
            rotated_at: Some(last.map_or(f.created_at, |b| b.rotated_at)),
            family_id: f.family_id,
            user_id: f.user_id,
            client_id: f.client_id,
            scopes: f.scopes,
            resource: f.resource,
            branches: f.branches,
            superseded: f.superseded,
            forks: f.forks,
            next_branch: f.next_branch,
            created_at: f.created_at,
            revoked: f.revoked,
            ended_branches: f.ended_branches,
            network_alert_at: f.network_alert_at,
        }
    }
}

impl From<StoredFamily> for FamilyRecord {
    fn from(s: StoredFamily) -> FamilyRecord {
        let mut rec = FamilyRecord {
            family_id: s.family_id,
            user_id: s.user_id,
            client_id: s.client_id,
            scopes: s.scopes,
            resource: s.resource,
            branches: s.branches,
            superseded: s.superseded,
            forks: s.forks,
            next_branch: s.next_branch,
            created_at: s.created_at,
            revoked: s.revoked,
            ended_branches: s.ended_branches,
            network_alert_at: s.network_alert_at,
        };
        if rec.branches.is_empty() && !s.current.is_empty() {
            let rotated_at = s.rotated_at.unwrap_or(s.created_at);
            let (mut previous, mut replay) = (s.previous, s.replay);
            // The oldest records listed several current tokens; each keeps rotating.
            rec.branches = (0u32..)
                .zip(s.current)
                .map(|(id, head)| Branch {
                    id,
                    head,
                    previous: previous.take(),
                    replay: replay.take(),
                    rotated_at,
                    seen: None,
                    forked_from: None,
                })
                .collect();
            rec.next_branch = u32::try_from(rec.branches.len()).unwrap_or(u32::MAX);
            // When these were replaced was not recorded: no earlier than the family began, so
            // that is assumed (the oldest they could be; a stale copy of a young family may
            // still branch, an old family's retired tokens stay reuse).
            rec.superseded = s
                .retired
                .into_iter()
                .map(|hash| Superseded {
                    hash,
                    at: s.created_at,
                    branch: 0,
                })
                .collect();
        }
        rec
    }
}

impl FamilyRecord {
    /// Revokes the family and drops every sealed token it kept (replays, forks): a tombstone
    /// keeps only hashes, for reuse to be recognised. The one way a family is revoked.
    pub fn revoke(&mut self) {
        self.revoked = true;
        for b in &mut self.branches {
            b.replay = None;
        }
        self.forks.clear();
    }

    /// A new family whose one branch starts with the token hashed `first`.
    pub fn new(
        family_id: FamilyId,
        user_id: UserId,
        client_id: ClientId,
        scopes: ScopeSet,
        resource: String,
        first: String,
        now: UnixTime,
    ) -> FamilyRecord {
        FamilyRecord {
            family_id,
            user_id,
            client_id,
            scopes,
            resource,
            branches: vec![Branch {
                id: 0,
                head: first,
                previous: None,
                replay: None,
                rotated_at: now,
                seen: None,
                forked_from: None,
            }],
            superseded: Vec::new(),
            forks: Vec::new(),
            next_branch: 1,
            created_at: now,
            revoked: false,
            ended_branches: Vec::new(),
            network_alert_at: None,
        }
    }

    /// Notes that `who` just used branch `id` (issued its head): the account page shows it,
    /// and the two-networks rule reads how long the branch has stayed on its network.
    pub fn note_use(&mut self, id: u32, who: &Presenter, now: UnixTime) {
        let Some(b) = self.branches.iter_mut().find(|b| b.id == id) else {
            return;
        };
        let network_since = match (&b.seen, who.network()) {
            (Some(seen), Some(net)) if seen.network() == Some(net) => seen.network_since,
            _ => now,
        };
        b.seen = Some(BranchSeen {
            ip: who.ip,
            user_agent: who.user_agent.clone(),
            network_since,
        });
    }

    /// Whether branch `id` was ended by the person (its access tokens are refused).
    pub fn branch_ended(&self, id: u32) -> bool {
        self.ended_branches.contains(&id)
    }

    /// Ends one branch, as a person does on the account page for a session they do not
    /// recognise: the branch goes, and with it every token it issued or replaced and the
    /// replaced token it was forked from (each is then a token the family never issued:
    /// refused, without forking again and without revoking the family); its access tokens are
    /// refused through [`FamilyRecord::ended_branches`]. The other branches keep working,
    /// except that a copy of a forgotten token an honest process still held is refused too
    /// (it cannot be told from the thief's). Ending the last branch, or more than
    /// [`MAX_ENDED_BRANCHES`] of them, revokes the family instead.
    pub fn end_branch(&mut self, id: u32) -> BranchEnd {
        if self.revoked {
            return BranchEnd::NotFound;
        }
        let Some(pos) = self.branches.iter().position(|b| b.id == id) else {
            return BranchEnd::NotFound;
        };
        if self.branches.len() == 1 || self.ended_branches.len() >= MAX_ENDED_BRANCHES {
            self.revoke();
            return BranchEnd::FamilyRevoked;
        }
        let b = self.branches.remove(pos);
        let mut forgotten: Vec<String> = self
            .superseded
            .iter()
            .filter(|s| s.branch == id)
            .map(|s| s.hash.clone())
            .collect();
        forgotten.extend(b.forked_from);
        forgotten.extend(b.previous);
        forgotten.push(b.head);
        self.superseded
            .retain(|s| s.branch != id && !forgotten.contains(&s.hash));
        for other in &mut self.branches {
            if other
                .previous
                .as_ref()
                .is_some_and(|p| forgotten.contains(p))
            {
                other.previous = None;
                other.replay = None;
            }
        }
        self.forks
            .retain(|m| m.branch != id && !forgotten.contains(&m.from));
        self.ended_branches.push(id);
        BranchEnd::Ended
    }

    /// Branches whose head was issued within `idle_secs` of `now`.
    pub fn live_branches(&self, now: UnixTime, idle_secs: u64) -> usize {
        self.branches
            .iter()
            .filter(|b| now.since(b.rotated_at) <= idle_secs)
            .count()
    }

    /// The sealed token a `Replay` decision hands out again.
    pub fn replay_of(&self, decision: RefreshDecision, presented_hash: &str) -> Option<&str> {
        let RefreshDecision::Replay { branch, forked } = decision else {
            return None;
        };
        if forked {
            self.forks
                .iter()
                .find(|m| m.branch == branch && same(&m.from, presented_hash))
                .map(|m| m.sealed.as_str())
        } else {
            self.branches
                .iter()
                .find(|b| b.id == branch)
                .and_then(|b| b.replay.as_deref())
        }
    }
}

/// How many ended branches a family remembers (their access tokens are refused by it); ending
/// one more revokes the whole family.
pub const MAX_ENDED_BRANCHES: usize = 64;

/// What [`FamilyRecord::end_branch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BranchEnd {
    /// The branch is gone; the family's other branches go on.
    Ended,
    /// It was the family's last branch (or one too many were ended): the family is revoked.
    FamilyRevoked,
    /// No such live branch (or the family is revoked): nothing changed.
    NotFound,
}

/// Which kind of reuse a refusal believes it saw (named in the `refresh_reuse` event and
/// its alert).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReuseCase {
    /// `strict`: the token just replaced, after the grace window.
    PreviousOutsideGrace,
    /// `strict`: a token replaced longer ago.
    Retired,
    /// `branch`: a token replaced longer than `refresh_stale_secs` ago.
    StaleBeyondWindow,
    /// `branch`: a recent copy, but the family already has `refresh_max_branches` live
    /// branches (more parties than the client plausibly runs).
    BranchLimit,
}

impl ReuseCase {
    /// The name in events and alerts.
    pub const fn name(self) -> &'static str {
        match self {
            ReuseCase::PreviousOutsideGrace => "previous_outside_grace",
            ReuseCase::Retired => "retired",
            ReuseCase::StaleBeyondWindow => "stale_beyond_window",
            ReuseCase::BranchLimit => "branch_limit",
        }
    }
}

/// What presenting a refresh token means for its family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshDecision {
    /// A branch's head: rotate that branch (mint its next generation).
    Rotate {
        /// The branch.
        branch: u32,
    },
    /// A duplicate, inside the grace window, of the request that rotated this branch (a
    /// retry, or the same client refreshing from two places) or that forked it from this
    /// token (`forked`). It gets the same token again, so a generation is minted once.
    Replay {
        /// The branch whose token is handed out again.
        branch: u32,
        /// The token is a fork's first one (`FamilyRecord::forks`), not a rotation's.
        forked: bool,
    },
    /// `branch` mode: a copy superseded recently by the family's own client while the family
    /// has room: a new branch whose first token is fresh.
    Fork,
    /// A token this family issued and replaced, outside what the mode honours: revoke the
    /// family.
    Reuse(ReuseCase),
    /// A well-formed token this family never issued (a guess or a forgery): refuse, change
    /// nothing, so knowing a family id is not enough to log its owner out.
    Unknown,
    /// The family is already revoked.
    Revoked,
}

impl RefreshDecision {
    /// Whether the token is honoured (it yields tokens; `/revoke` may end its family).
    pub fn honoured(self) -> bool {
        matches!(
            self,
            RefreshDecision::Rotate { .. } | RefreshDecision::Replay { .. } | RefreshDecision::Fork
        )
    }

    /// The branch whose token an honoured decision hands out; `before` is the family as
    /// decided on (a fork's branch is the one [`apply`] starts there).
    pub fn branch_in(self, before: &FamilyRecord) -> Option<u32> {
        match self {
            RefreshDecision::Rotate { branch } | RefreshDecision::Replay { branch, .. } => {
                Some(branch)
            }
            RefreshDecision::Fork => Some(before.next_branch),
            RefreshDecision::Reuse(_) | RefreshDecision::Unknown | RefreshDecision::Revoked => None,
        }
    }
}

fn same(a: &str, b: &str) -> bool {
    crypto::ct_eq(a.as_bytes(), b.as_bytes())
}

/// Decides what a presented refresh token (by hash) does to its family. The caller has
/// already checked that the presenting client is the family's.
pub fn decide(
    family: &FamilyRecord,
    presented_hash: &str,
    now: UnixTime,
    rules: &RefreshRules,
) -> RefreshDecision {
    decide_with(family, presented_hash, now, rules, |_| true)
}

/// [`decide`] for a request from `who`: a replay inside the grace window is honoured only from
/// the network of whoever used the branch last (or when either address is unknown). A retry
/// comes from where its first try came from; a copy presented from another network within
/// seconds of the rotation is a second holder of the token, and is decided as a presentation
/// outside the window: in `branch` mode a branch of its own (listed on the account page, and
/// the two-networks alert can fire), in `strict` mode reuse.
pub fn decide_for(
    family: &FamilyRecord,
    presented_hash: &str,
    now: UnixTime,
    rules: &RefreshRules,
    who: &Presenter,
) -> RefreshDecision {
    decide_with(family, presented_hash, now, rules, |b: &Branch| {
        match (b.seen.as_ref().and_then(BranchSeen::network), who.network()) {
            (Some(last), Some(here)) => last == here,
            _ => true,
        }
    })
}

fn decide_with(
    family: &FamilyRecord,
    presented_hash: &str,
    now: UnixTime,
    rules: &RefreshRules,
    replay_from: impl Fn(&Branch) -> bool,
) -> RefreshDecision {
    if family.revoked {
        return RefreshDecision::Revoked;
    }
    let is = |h: &str| same(h, presented_hash);
    if let Some(b) = family.branches.iter().find(|b| is(&b.head)) {
        return RefreshDecision::Rotate { branch: b.id };
    }
    let in_grace = |at: UnixTime| now.since(at) <= rules.grace_secs;
    if let Some(b) = family.branches.iter().find(|b| {
        b.previous.as_deref().is_some_and(is)
            && in_grace(b.rotated_at)
            && b.replay.is_some()
            && replay_from(b)
    }) {
        return RefreshDecision::Replay {
            branch: b.id,
            forked: false,
        };
    }
    if rules.mode == ReuseMode::Branch
        && let Some(m) = family.forks.iter().find(|m| {
            is(&m.from)
                && in_grace(m.at)
                && family
                    .branches
                    .iter()
                    .any(|b| b.id == m.branch && replay_from(b))
        })
    {
        return RefreshDecision::Replay {
            branch: m.branch,
            forked: true,
        };
    }
    // When the presented token was (first) replaced, if the family issued it.
    let as_previous = family
        .branches
        .iter()
        .filter(|b| b.previous.as_deref().is_some_and(is))
        .map(|b| b.rotated_at)
        .min();
    let as_retired = family
        .superseded
        .iter()
        .filter(|s| is(&s.hash))
        .map(|s| s.at)
        .min();
    let Some(replaced_at) = as_previous.into_iter().chain(as_retired).min() else {
        return RefreshDecision::Unknown;
    };
    match rules.mode {
        ReuseMode::Strict if as_previous.is_some() => {
            RefreshDecision::Reuse(ReuseCase::PreviousOutsideGrace)
        }
        ReuseMode::Strict => RefreshDecision::Reuse(ReuseCase::Retired),
        ReuseMode::Branch if now.since(replaced_at) > rules.stale_secs => {
            RefreshDecision::Reuse(ReuseCase::StaleBeyondWindow)
        }
        ReuseMode::Branch
            if family.live_branches(now, rules.branch_idle_secs) >= rules.max_branches =>
        {
            RefreshDecision::Reuse(ReuseCase::BranchLimit)
        }
        ReuseMode::Branch => RefreshDecision::Fork,
    }
}

/// How many replaced token hashes a family remembers for reuse detection.
const MAX_SUPERSEDED: usize = 64;
/// How many branches a family stores, live or not (the live ones are bounded by
/// `refresh_max_branches`, at most 64): beyond it the longest-unused branch is dropped and its
/// head counts as replaced when it was last issued.
const MAX_STORED_BRANCHES: usize = 64;
/// How many fork memos a family keeps (each lives one grace window).
const MAX_FORK_MEMOS: usize = 64;

/// A token minted for `Rotate` or `Fork`: its hash, and the token sealed for replays.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The new token's hash.
    pub hash: String,
    /// The new token, sealed.
    pub sealed: String,
}

/// The family after a decision. `Rotate` and `Fork` need `minted` (the next token); without
/// it they change nothing.
pub fn apply(
    family: &FamilyRecord,
    decision: RefreshDecision,
    presented_hash: &str,
    minted: Option<Minted>,
    now: UnixTime,
    rules: &RefreshRules,
) -> FamilyRecord {
    let mut next = family.clone();
    // Fork memos are only for retries inside the grace window.
    next.forks.retain(|m| now.since(m.at) <= rules.grace_secs);
    match (decision, minted) {
        (RefreshDecision::Rotate { branch }, Some(m)) => {
            if rules.mode == ReuseMode::Strict {
                // One line only: every other branch (only records from before branches may
                // have several heads) is replaced by this rotation.
                let others: Vec<Branch> = next
                    .branches
                    .iter()
                    .filter(|b| b.id != branch)
                    .cloned()
                    .collect();
                next.branches.retain(|b| b.id == branch);
                for b in others {
                    retire_branch(&mut next, b, now);
                }
            }
            if let Some(b) = next.branches.iter_mut().find(|b| b.id == branch) {
                let seen = b.seen.take();
                let forked_from = b.forked_from.take();
                let old = std::mem::replace(
                    b,
                    Branch {
                        id: branch,
                        head: m.hash,
                        previous: Some(presented_hash.to_owned()),
                        replay: Some(m.sealed),
                        rotated_at: now,
                        seen,
                        forked_from,
                    },
                );
                // The old previous retires: presenting it later is a fork or reuse.
                if let Some(prev) = old.previous {
                    next.superseded.push(Superseded {
                        hash: prev,
                        at: old.rotated_at,
                        branch,
                    });
                }
            }
        }
        (RefreshDecision::Fork, Some(m)) => {
            let id = next.next_branch;
            next.next_branch = next.next_branch.saturating_add(1);
            next.branches.push(Branch {
                id,
                head: m.hash,
                previous: None,
                replay: None,
                rotated_at: now,
                seen: None,
                forked_from: Some(presented_hash.to_owned()),
            });
            next.forks.push(ForkMemo {
                from: presented_hash.to_owned(),
                branch: id,
                at: now,
                sealed: m.sealed,
            });
            let excess = next.forks.len().saturating_sub(MAX_FORK_MEMOS);
            next.forks.drain(..excess);
            while next.branches.len() > MAX_STORED_BRANCHES {
                let Some(oldest) = next
                    .branches
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, b)| b.rotated_at)
                    .map(|(i, _)| i)
                else {
                    break;
                };
                let b = next.branches.remove(oldest);
                let at = b.rotated_at;
                retire_branch(&mut next, b, at);
            }
        }
        (RefreshDecision::Reuse(_), _) => next.revoke(),
        _ => return family.clone(),
    }
    let excess = next.superseded.len().saturating_sub(MAX_SUPERSEDED);
    next.superseded.drain(..excess);
    next
}

/// Moves a removed branch's tokens to `superseded`: its previous when it was replaced, its
/// head at `head_at`.
fn retire_branch(family: &mut FamilyRecord, b: Branch, head_at: UnixTime) {
    if let Some(prev) = b.previous {
        family.superseded.push(Superseded {
            hash: prev,
            at: b.rotated_at,
            branch: b.id,
        });
    }
    family.superseded.push(Superseded {
        hash: b.head,
        at: head_at,
        branch: b.id,
    });
}

/// RFC 6749 §5.1 token response. Its `Debug` shows no token.
#[derive(Serialize)]
pub struct TokenResponse {
    /// The access token.
    pub access_token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds.
    pub expires_in: u64,
    /// The refresh token (absent for clients without the refresh grant).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Granted scopes.
    pub scope: String,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse")
            .field("access_token", &"[redacted]")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "[redacted]"),
            )
            .field("expires_in", &self.expires_in)
            .field("scope", &self.scope)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: RefreshRules = RefreshRules {
        mode: ReuseMode::Strict,
        grace_secs: 30,
        stale_secs: 1_000,
        branch_idle_secs: 500,
        max_branches: 3,
    };
    const BRANCH: RefreshRules = RefreshRules {
        mode: ReuseMode::Branch,
        ..STRICT
    };

    fn family() -> FamilyRecord {
        FamilyRecord::new(
            FamilyId::new("f"),
            UserId::github(1),
            ClientId::new("c"),
            ScopeSet::default(),
            "r".into(),
            "h1".into(),
            UnixTime(100),
        )
    }

    fn minted(to: &str) -> Option<Minted> {
        Some(Minted {
            hash: to.into(),
            sealed: format!("sealed-{to}"),
        })
    }

    /// `decide` then `apply` with `to` as the token minted, as the flow does.
    fn present(
        f: &FamilyRecord,
        from: &str,
        to: &str,
        at: u64,
        rules: &RefreshRules,
    ) -> (RefreshDecision, FamilyRecord) {
        let d = decide(f, from, UnixTime(at), rules);
        (d, apply(f, d, from, minted(to), UnixTime(at), rules))
    }

    fn rotate(f: &FamilyRecord, from: &str, to: &str, at: u64) -> FamilyRecord {
        let (d, next) = present(f, from, to, at, &BRANCH);
        assert!(matches!(d, RefreshDecision::Rotate { .. }), "{from}: {d:?}");
        next
    }

    fn heads(f: &FamilyRecord) -> Vec<&str> {
        f.branches.iter().map(|b| b.head.as_str()).collect()
    }

    #[test]
    fn a_revoked_family_keeps_no_sealed_token() {
        // As `/revoke` and the admin paths revoke: a rotated family (a replay kept) and a
        // stale copy's fork (a fork memo kept) leave only hashes behind.
        let f1 = rotate(&family(), "h1", "h2", 200);
        let (d, mut f) = present(&rotate(&f1, "h2", "h3", 300), "h1", "b1", 400, &BRANCH);
        assert_eq!(d, RefreshDecision::Fork, "{d:?}");
        assert!(!f.forks.is_empty() && f.branches.iter().any(|b| b.replay.is_some()));
        f.revoke();
        assert!(f.revoked && f.forks.is_empty());
        assert!(f.branches.iter().all(|b| b.replay.is_none()));
        assert_eq!(
            decide(&f, "h3", UnixTime(401), &BRANCH),
            RefreshDecision::Revoked
        );
    }

    #[test]
    fn strict_current_rotates_previous_in_grace_replays_older_is_reuse() {
        let f0 = family();
        let rot0 = RefreshDecision::Rotate { branch: 0 };
        let replay0 = RefreshDecision::Replay {
            branch: 0,
            forked: false,
        };
        assert_eq!(decide(&f0, "h1", UnixTime(200), &STRICT), rot0);
        let (_, f1) = present(&f0, "h1", "h2", 200, &STRICT);
        assert_eq!(decide(&f1, "h2", UnixTime(201), &STRICT), rot0);
        assert_eq!(decide(&f1, "h1", UnixTime(230), &STRICT), replay0);
        assert_eq!(f1.replay_of(replay0, "h1"), Some("sealed-h2"));
        assert_eq!(
            apply(&f1, replay0, "h1", None, UnixTime(230), &STRICT),
            f1,
            "a replay mints nothing"
        );
        assert_eq!(
            decide(&f1, "h1", UnixTime(231), &STRICT),
            RefreshDecision::Reuse(ReuseCase::PreviousOutsideGrace)
        );
        let (_, f2) = present(&f1, "h2", "h3", 240, &STRICT);
        // h1 is now two generations old: reuse even inside any window.
        assert_eq!(
            decide(&f2, "h1", UnixTime(241), &STRICT),
            RefreshDecision::Reuse(ReuseCase::Retired)
        );
        let (_, dead) = present(&f2, "h1", "x", 241, &STRICT);
        assert!(dead.revoked && dead.branches.iter().all(|b| b.replay.is_none()));
        assert_eq!(
            decide(&dead, "h3", UnixTime(242), &STRICT),
            RefreshDecision::Revoked
        );
    }

    /// Three processes start from one copy and refresh minutes apart: the first rotates,
    /// each later one branches, and every branch keeps rotating on its own.
    #[test]
    fn stale_copies_of_the_same_client_branch_and_keep_rotating() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        let (d, f2) = present(&f1, "h1", "b1", 500, &BRANCH);
        assert_eq!(d, RefreshDecision::Fork);
        assert_eq!(heads(&f2), ["a1", "b1"]);
        assert_eq!(f2.forks.len(), 1);
        // A third process with the same first copy, later still: another branch.
        let (d, f3) = present(&f2, "h1", "c1", 800, &BRANCH);
        assert_eq!(d, RefreshDecision::Fork);
        assert_eq!(heads(&f3), ["a1", "b1", "c1"]);
        assert_eq!(
            f3.forks.len(),
            1,
            "the first fork's memo outlived its grace"
        );
        // Each branch rotates independently; nobody's head replaces another's.
        let f4 = rotate(&f3, "b1", "b2", 900);
        let f5 = rotate(&f4, "a1", "a2", 901);
        let f6 = rotate(&f5, "c1", "c2", 902);
        assert_eq!(heads(&f6), ["a2", "b2", "c2"]);
        assert!(!f6.revoked);
    }

    #[test]
    fn a_retried_fork_gets_the_same_token_and_a_later_one_forks_again() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        let (_, f2) = present(&f1, "h1", "b1", 1_000, &BRANCH);
        let replay = RefreshDecision::Replay {
            branch: 1,
            forked: true,
        };
        assert_eq!(decide(&f2, "h1", UnixTime(1_030), &BRANCH), replay);
        assert_eq!(f2.replay_of(replay, "h1"), Some("sealed-b1"));
        assert_eq!(
            apply(&f2, replay, "h1", minted("zz"), UnixTime(1_030), &BRANCH),
            f2,
            "a fork's retry mints nothing"
        );
        // After the window, the same stale copy is another process: a branch of its own.
        assert_eq!(
            decide(&f2, "h1", UnixTime(1_031), &BRANCH),
            RefreshDecision::Fork
        );
    }

    #[test]
    fn a_copy_superseded_beyond_the_stale_window_is_reuse() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        // Superseded at 200; refresh_stale_secs = 1000.
        assert_eq!(
            decide(&f1, "h1", UnixTime(1_200), &BRANCH),
            RefreshDecision::Fork
        );
        let (d, dead) = present(&f1, "h1", "x", 1_201, &BRANCH);
        assert_eq!(d, RefreshDecision::Reuse(ReuseCase::StaleBeyondWindow));
        assert!(dead.revoked && dead.forks.is_empty());
        assert_eq!(heads(&dead), ["a1"], "nothing minted");
    }

    #[test]
    fn a_fork_beyond_the_live_branch_limit_is_reuse_and_idle_branches_do_not_count() {
        let mut f = rotate(&family(), "h1", "a1", 200);
        for (i, at) in [300, 400].into_iter().enumerate() {
            let d;
            (d, f) = present(&f, "h1", &format!("b{i}"), at, &BRANCH);
            assert_eq!(d, RefreshDecision::Fork);
        }
        assert_eq!(f.live_branches(UnixTime(450), 500), 3);
        assert_eq!(
            decide(&f, "h1", UnixTime(450), &BRANCH),
            RefreshDecision::Reuse(ReuseCase::BranchLimit)
        );
        // Branch 0 (head issued at 200) is idle after 700: room again. Its head still rotates.
        assert_eq!(
            decide(&f, "h1", UnixTime(701), &BRANCH),
            RefreshDecision::Fork
        );
        assert_eq!(
            decide(&f, "a1", UnixTime(701), &BRANCH),
            RefreshDecision::Rotate { branch: 0 }
        );
    }

    /// Rotating a fork's branch retires its first token when it was replaced, not the stale
    /// copy's original time: forking again from a copy does not refresh its age.
    #[test]
    fn a_stale_copy_keeps_its_age_across_forks() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        let (_, f2) = present(&f1, "h1", "b1", 1_100, &BRANCH);
        let f3 = rotate(&f2, "b1", "b2", 1_150);
        let f4 = rotate(&f3, "b2", "b3", 1_160);
        assert_eq!(
            decide(&f4, "h1", UnixTime(1_201), &BRANCH),
            RefreshDecision::Reuse(ReuseCase::StaleBeyondWindow)
        );
        // b1, replaced at 1150 on branch 1, is a recent copy.
        assert_eq!(
            decide(&f4, "b1", UnixTime(1_201), &BRANCH),
            RefreshDecision::Fork
        );
    }

    #[test]
    fn forged_token_for_a_known_family_changes_nothing() {
        let f = rotate(&family(), "h1", "h2", 200);
        for rules in [&STRICT, &BRANCH] {
            let (d, after) = present(&f, "never-issued", "x", 201, rules);
            assert_eq!(d, RefreshDecision::Unknown);
            assert_eq!(after, f);
        }
    }

    #[test]
    fn retired_list_and_branches_are_bounded() {
        let mut f = family();
        for i in 0..100 {
            let cur = f.branches[0].head.clone();
            f = rotate(&f, &cur, &format!("t{i}"), 200 + i);
        }
        assert!(f.superseded.len() <= MAX_SUPERSEDED);
        assert_eq!(
            decide(&f, "t50", UnixTime(400), &STRICT),
            RefreshDecision::Reuse(ReuseCase::Retired)
        );
        let many = RefreshRules {
            max_branches: 64,
            branch_idle_secs: 30,
            stale_secs: 100_000,
            ..BRANCH
        };
        // 70 forks, each after the last one went idle: the oldest branches are dropped.
        for i in 0..70 {
            let (d, next) = present(&f, "t50", &format!("fork{i}"), 400 + 31 * i, &many);
            assert_eq!(d, RefreshDecision::Fork, "{i}");
            f = next;
        }
        assert_eq!(f.branches.len(), MAX_STORED_BRANCHES);
        assert!(f.forks.len() <= 1 && f.superseded.len() <= MAX_SUPERSEDED);
    }

    /// A record written before branches (still on users' disks) reads as one branch and
    /// behaves as it did.
    #[test]
    fn a_record_from_before_branches_reads_as_one_branch() {
        let old = r#"{"family_id":"f","user_id":"github:1","client_id":"c","scopes":[],
            "resource":"r","current":["h2"],"previous":"h1","retired":["h0"],
            "replay":"sealed-h2","rotated_at":200,"created_at":100,"revoked":false}"#;
        let f: FamilyRecord = serde_json::from_str(old).unwrap();
        assert_eq!(heads(&f), ["h2"]);
        assert_eq!(f.branches[0].previous.as_deref(), Some("h1"));
        assert_eq!(f.next_branch, 1);
        assert_eq!(
            decide(&f, "h2", UnixTime(210), &STRICT),
            RefreshDecision::Rotate { branch: 0 }
        );
        let replay = decide(&f, "h1", UnixTime(230), &STRICT);
        assert_eq!(f.replay_of(replay, "h1"), Some("sealed-h2"));
        assert_eq!(
            decide(&f, "h0", UnixTime(230), &STRICT),
            RefreshDecision::Reuse(ReuseCase::Retired)
        );
        // Branch mode: the retired token is taken as replaced when the family began.
        assert_eq!(
            decide(&f, "h0", UnixTime(1_100), &BRANCH),
            RefreshDecision::Fork
        );
        assert_eq!(
            decide(&f, "h0", UnixTime(1_101), &BRANCH),
            RefreshDecision::Reuse(ReuseCase::StaleBeyondWindow)
        );
        // Written back, it is today's shape (with the old fields mirrored for a replica of the
        // previous release), and reads back the same.
        let json: serde_json::Value = serde_json::to_value(&f).unwrap();
        assert_eq!(json["current"], serde_json::json!(["h2"]));
        assert_eq!(json["branches"][0]["head"], "h2");
        assert_eq!(serde_json::from_value::<FamilyRecord>(json).unwrap(), f);
        // The oldest shape listed several current tokens: each still rotates.
        let older = r#"{"family_id":"f","user_id":"github:1","client_id":"c","scopes":[],
            "resource":"r","current":["x","y"],"previous":null,"rotated_at":100,
            "created_at":100,"revoked":false}"#;
        let f: FamilyRecord = serde_json::from_str(older).unwrap();
        assert_eq!(heads(&f), ["x", "y"]);
        let (_, f) = present(&f, "y", "y2", 150, &STRICT);
        assert_eq!(heads(&f), ["y2"], "strict: one line, as before");
        assert_eq!(
            decide(&f, "x", UnixTime(151), &STRICT),
            RefreshDecision::Reuse(ReuseCase::Retired)
        );
    }

    /// The family record of the previous release, as it was declared: a replica still running
    /// it during a rolling upgrade must read what this one writes.
    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct PreviousRelease {
        family_id: FamilyId,
        user_id: UserId,
        client_id: ClientId,
        scopes: ScopeSet,
        resource: String,
        current: Vec<String>,
        previous: Option<String>,
        #[serde(default)]
        retired: Vec<String>,
        #[serde(default)]
        replay: Option<String>,
        rotated_at: UnixTime,
        created_at: UnixTime,
        revoked: bool,
    }

    #[test]
    fn a_record_written_now_reads_in_the_previous_release() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        let (_, f2) = present(&f1, "h1", "b1", 500, &BRANCH);
        let f3 = rotate(&f2, "b1", "b2", 600);
        let old: PreviousRelease =
            serde_json::from_value(serde_json::to_value(&f3).unwrap()).unwrap();
        assert_eq!(old.current, ["a1", "b2"]);
        assert_eq!(
            (
                old.previous.as_deref(),
                old.replay.as_deref(),
                old.rotated_at
            ),
            (Some("b1"), Some("sealed-b2"), UnixTime(600))
        );
    }

    fn at(ip: &str, ua: &str) -> Presenter {
        Presenter::new(Some(ip.parse().unwrap()), Some(ua))
    }

    #[test]
    fn networks_are_ipv4_slash_24_and_ipv6_slash_48() {
        let net = |ip: &str| network_of(ip.parse().unwrap()).to_string();
        assert_eq!(net("203.0.113.77"), "203.0.113.0/24");
        assert_eq!(net("2001:db8:aa:bb::1"), "2001:db8:aa::/48");
        assert_eq!(
            net("::ffff:198.51.100.9"),
            "198.51.100.0/24",
            "mapped is IPv4"
        );
        assert_eq!(net("2001:db8:aa:ffff::9"), net("2001:db8:aa:1::1"));
        assert_ne!(net("203.0.113.1"), net("203.0.114.1"));
    }

    #[test]
    fn user_agents_are_bounded_printable_ascii() {
        assert_eq!(
            bounded_user_agent("  claude-cli/2.0.1 (external, cli)  ").as_deref(),
            Some("claude-cli/2.0.1 (external, cli)")
        );
        assert_eq!(
            bounded_user_agent("a\u{7}b\r\nc\u{e9}").as_deref(),
            Some("a?b??c?")
        );
        assert_eq!(bounded_user_agent(" \t "), None);
        let long = "x".repeat(10 * MAX_USER_AGENT);
        assert_eq!(
            bounded_user_agent(&long).map(|s| s.len()),
            Some(MAX_USER_AGENT)
        );
        let p = Presenter::new(None, Some(&long));
        assert_eq!(
            p.user_agent.map(|s| s.chars().count()),
            Some(MAX_USER_AGENT)
        );
    }

    /// The review of 2026-12-04: a thief rotates a stolen current token, and the victim
    /// presents the same token from its own network seconds later. Inside the grace window
    /// that was a replay (the victim got the thief's token, no branch, no alert). From another
    /// network it is now a branch of its own (`branch` mode) or reuse (`strict`); a retry from
    /// the rotating network is still a replay, and an unknown address keeps the old rule.
    #[test]
    fn replay_inside_the_grace_window_from_another_network_is_a_second_holder() {
        let mut f = family();
        f.note_use(0, &at("198.51.100.7", "thief/1"), UnixTime(100));
        let (d, mut f) = present(&f, "h1", "h2", 200, &BRANCH);
        assert_eq!(d, RefreshDecision::Rotate { branch: 0 });
        f.note_use(0, &at("198.51.100.7", "thief/1"), UnixTime(200));
        let victim = at("203.0.113.9", "claude-cli/2.0");
        let retry = at("198.51.100.8", "thief/1");
        assert_eq!(
            decide_for(&f, "h1", UnixTime(210), &BRANCH, &victim),
            RefreshDecision::Fork,
            "another network within the window: a branch of its own"
        );
        assert_eq!(
            decide_for(&f, "h1", UnixTime(210), &STRICT, &victim),
            RefreshDecision::Reuse(ReuseCase::PreviousOutsideGrace)
        );
        let replay = RefreshDecision::Replay {
            branch: 0,
            forked: false,
        };
        assert_eq!(decide_for(&f, "h1", UnixTime(210), &BRANCH, &retry), replay);
        assert_eq!(
            decide_for(&f, "h1", UnixTime(210), &STRICT, &Presenter::default()),
            replay,
            "no address: the window as before"
        );
        assert_eq!(decide(&f, "h1", UnixTime(210), &STRICT), replay);
    }

    /// A branch remembers who last used it, and since when from that network: a move to
    /// another network starts the count again, another address in the same network does not.
    #[test]
    fn a_branch_keeps_its_last_user_and_how_long_it_stayed_on_its_network() {
        let mut f = family();
        f.note_use(0, &at("198.51.100.7", "claude-cli/2.0"), UnixTime(100));
        let (_, mut f) = present(&f, "h1", "h2", 200, &BRANCH);
        f.note_use(0, &at("198.51.100.8", "claude-cli/2.0"), UnixTime(200));
        let seen = f.branches[0].seen.clone().unwrap();
        assert_eq!(seen.ip, Some("198.51.100.8".parse().unwrap()));
        assert_eq!(
            seen.network_since,
            UnixTime(100),
            "same /24: still since 100"
        );
        f.note_use(0, &at("203.0.113.9", "python/3"), UnixTime(300));
        let seen = f.branches[0].seen.clone().unwrap();
        assert_eq!(
            (seen.network_since, seen.user_agent.as_deref()),
            (UnixTime(300), Some("python/3"))
        );
        // Rotation keeps it; a fork starts with none, and remembers what it forked from.
        let (d, g) = present(&f, "h1", "b1", 400, &BRANCH);
        assert_eq!(d, RefreshDecision::Fork);
        assert_eq!(d.branch_in(&f), Some(1));
        assert!(g.branches[0].seen.is_some());
        assert_eq!(g.branches[1].seen, None);
        assert_eq!(g.branches[1].forked_from.as_deref(), Some("h1"));
    }

    /// The review's M3: a thief rotated the victim's current token first (branch 0 is now the
    /// thief's), the victim's stale copy forked branch 1. Ending branch 0 forgets every token
    /// it issued or replaced (the stolen one included): each is then unknown, not a fork and
    /// not reuse; branch 1 goes on, and the family remembers branch 0 ended.
    #[test]
    fn ending_a_branch_forgets_its_tokens_and_keeps_the_other_branch() {
        let f1 = rotate(&family(), "h1", "v1", 200); // the victim's own rotation
        let f2 = rotate(&f1, "v1", "t1", 300); // the thief, with the stolen current v1
        let f3 = rotate(&f2, "t1", "t2", 310);
        let (d, mut f) = present(&f3, "v1", "w1", 1_000, &BRANCH); // the victim forks
        assert_eq!(d, RefreshDecision::Fork);
        assert_eq!(f.end_branch(7), BranchEnd::NotFound);
        let before = f.clone();
        assert_eq!(f.end_branch(0), BranchEnd::Ended);
        assert_eq!(heads(&f), ["w1"]);
        assert!(f.branch_ended(0) && !f.branch_ended(1));
        for token in ["t2", "t1", "v1", "h1"] {
            assert_eq!(
                decide(&f, token, UnixTime(1_010), &BRANCH),
                RefreshDecision::Unknown,
                "{token}"
            );
        }
        assert_eq!(
            decide(&f, "w1", UnixTime(1_010), &BRANCH),
            RefreshDecision::Rotate { branch: 1 }
        );
        assert!(
            f.forks.is_empty(),
            "the fork from a forgotten token is not replayed"
        );
        assert!(!f.revoked && before.ended_branches.is_empty());
        // Ending the last branch revokes the family.
        assert_eq!(f.end_branch(1), BranchEnd::FamilyRevoked);
        assert!(f.revoked);
        assert_eq!(f.end_branch(1), BranchEnd::NotFound);
    }

    /// Ending a fork forgets the token it was forked from, even where that token is another
    /// branch's previous one, so the thief's stolen copy cannot fork again.
    #[test]
    fn ending_a_fork_forgets_the_copy_it_was_forked_from() {
        let f1 = rotate(&family(), "h1", "a1", 200);
        let (_, f2) = present(&f1, "h1", "b1", 500, &BRANCH);
        let (_, mut f) = present(&f2, "h1", "c1", 900, &BRANCH);
        assert_eq!(f.end_branch(2), BranchEnd::Ended);
        assert_eq!(f.end_branch(1), BranchEnd::Ended);
        assert_eq!(
            decide(&f, "h1", UnixTime(950), &BRANCH),
            RefreshDecision::Unknown
        );
        assert_eq!(
            decide(&f, "b1", UnixTime(950), &BRANCH),
            RefreshDecision::Unknown
        );
        assert_eq!(
            decide(&f, "a1", UnixTime(950), &BRANCH),
            RefreshDecision::Rotate { branch: 0 }
        );
        assert_eq!(f.ended_branches, [2, 1]);
        // Two branches again (a rotation, then a fork from its previous token); with as many
        // ended branches remembered as the family keeps, ending one more revokes it.
        let g = rotate(&f, "a1", "x1", 1_000);
        let (d, mut g) = present(&g, "a1", "y1", 1_100, &BRANCH);
        assert_eq!((d, g.branches.len()), (RefreshDecision::Fork, 2));
        g.ended_branches = (100..).take(MAX_ENDED_BRANCHES).collect();
        assert_eq!(g.end_branch(0), BranchEnd::FamilyRevoked);
        assert!(g.revoked);
    }

    /// Records written before addresses and ended branches were kept decode with none, and
    /// a record with them reads back the same.
    #[test]
    fn a_record_from_before_addresses_reads_with_none_and_the_new_fields_round_trip() {
        let old = r#"{"family_id":"f","user_id":"github:1","client_id":"c","scopes":[],
            "resource":"r","branches":[{"id":0,"head":"h2","previous":"h1","replay":"s",
            "rotated_at":200}],"superseded":[],"forks":[],"next_branch":1,
            "created_at":100,"revoked":false}"#;
        let f: FamilyRecord = serde_json::from_str(old).unwrap();
        assert_eq!(
            (&f.branches[0].seen, &f.branches[0].forked_from),
            (&None, &None)
        );
        assert!(f.ended_branches.is_empty() && f.network_alert_at.is_none());
        let mut g = f.clone();
        g.note_use(0, &at("2001:db8::1", "ua"), UnixTime(300));
        g.network_alert_at = Some(UnixTime(300));
        g.ended_branches.push(3);
        let json = serde_json::to_value(&g).unwrap();
        assert_eq!(json["branches"][0]["seen"]["ip"], "2001:db8::1");
        assert_eq!(serde_json::from_value::<FamilyRecord>(json).unwrap(), g);
        // Without them, nothing new is written.
        let json = serde_json::to_string(&f).unwrap();
        assert!(
            !json.contains("seen") && !json.contains("ended_branches"),
            "{json}"
        );
    }

    #[test]
    fn token_response_debug_is_redacted() {
        let r = TokenResponse {
            access_token: "mcpat_secret".into(),
            token_type: "Bearer",
            expires_in: 1,
            refresh_token: Some("mcprt_secret".into()),
            scope: String::new(),
        };
        let d = format!("{r:?}");
        assert!(!d.contains("secret"), "{d}");
    }

    #[test]
    fn refresh_token_names_its_family() {
        let fam = new_family_id().unwrap();
        let t = new_refresh_token(&fam).unwrap();
        assert_eq!(refresh_family(&t), Some(fam));
        assert_eq!(refresh_family(&RefreshToken::new("mcprt_x.y")), None);
        assert_eq!(refresh_family(&RefreshToken::new("gho_abc")), None);
    }
}
