//! Detection: rules that turn what the audit trail sees into alerts (`AlertRaised` events of
//! their own), so an attack is visible while it happens. The rules here are pure; the flows
//! gather the facts (store reads) and the sink feeds events through [`Detector::observe`].
//!
//! The wrong-audience window is kept in memory, per process: with several replicas each
//! counts its own share of the traffic. The two-networks rule for refresh branches reads the
//! family record instead (shared by every replica), and the refresh flow keeps its quiet
//! period there.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Mutex;

use ipnet::IpNet;
use serde::Serialize;

use super::AlertPolicy;
use super::AuditEvent;
use crate::clock::UnixTime;
use crate::ids::{ClientId, FamilyId, UserId};

/// Which rule fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A code was issued (or presented) with no consent on record for that person and client:
    /// the signature of a confused-deputy attack.
    CodeWithoutConsent,
    /// A client received a code minutes after registering, for a redirect host no one else
    /// has approved before.
    FreshClientNewHost,
    /// Many tokens for another audience were presented at `/mcp` in a short time.
    WrongAudienceRate,
    /// A rotated refresh token was presented again (likely stolen).
    RefreshTokenReuse,
    /// A connect link was opened by someone other than its person.
    ConnectLinkWrongPerson,
    /// One client's tool calls were denied by `[[policy]]` many times in a short time (an
    /// agent probing what it may do, or one gone astray).
    PolicyDenialBurst,
    /// Two branches of one refresh family were used from two networks within the window, each
    /// while the other stayed on its own: two parties hold the family (a stolen refresh token
    /// the policy honoured as a branch, or a credential copied to another machine).
    RefreshBranchesOnTwoNetworks,
}

impl AlertKind {
    /// The name used in events and configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::CodeWithoutConsent => "code_without_consent",
            AlertKind::FreshClientNewHost => "fresh_client_new_host",
            AlertKind::WrongAudienceRate => "wrong_audience_rate",
            AlertKind::RefreshTokenReuse => "refresh_token_reuse",
            AlertKind::ConnectLinkWrongPerson => "connect_link_wrong_person",
            AlertKind::PolicyDenialBurst => "policy_denial_burst",
            AlertKind::RefreshBranchesOnTwoNetworks => "refresh_branches_on_two_networks",
        }
    }
}

fn alert(
    kind: AlertKind,
    user_id: Option<UserId>,
    client_id: Option<ClientId>,
    detail: String,
) -> AuditEvent {
    AuditEvent::AlertRaised {
        alert: kind,
        user_id,
        client_id,
        detail,
    }
}

/// What the code-issuing flow knows when a code is about to be handed out.
#[derive(Debug, Clone)]
pub struct CodeIssueFacts {
    /// Person.
    pub user_id: UserId,
    /// Client.
    pub client_id: ClientId,
    /// A stored consent covers this person, client, registered redirect and scopes (read
    /// back from the store, independently of the proof the flow carried).
    pub consent_on_record: bool,
    /// Seconds since the client registered (`None`: client record not found).
    pub client_age_secs: Option<u64>,
    /// The redirect host.
    pub redirect_host: String,
    /// The redirect is a loopback address (native clients register fresh on every install;
    /// a loopback host cannot be an attacker's server).
    pub loopback: bool,
    /// Someone other than this person approved a client for this host before.
    pub host_seen_before: bool,
}

/// Alerts for a code being issued.
pub fn code_issue_alerts(policy: &AlertPolicy, f: &CodeIssueFacts) -> Vec<AuditEvent> {
    let mut out = Vec::new();
    if !f.consent_on_record {
        out.push(alert(
            AlertKind::CodeWithoutConsent,
            Some(f.user_id.clone()),
            Some(f.client_id.clone()),
            "code issued with no stored consent for this person, client and redirect URI"
                .to_owned(),
        ));
    }
    let fresh = f
        .client_age_secs
        .is_none_or(|age| age < policy.new_client_secs);
    if fresh && !f.loopback && !f.host_seen_before {
        out.push(alert(
            AlertKind::FreshClientNewHost,
            Some(f.user_id.clone()),
            Some(f.client_id.clone()),
            format!(
                "client registered {} s ago received a code for {}, a redirect host never approved before",
                f.client_age_secs.unwrap_or(0),
                f.redirect_host
            ),
        ));
    }
    out
}

/// A code was presented at `/token` for a person and client with no consent on record.
pub fn code_presented_without_consent(user_id: &UserId, client_id: &ClientId) -> AuditEvent {
    alert(
        AlertKind::CodeWithoutConsent,
        Some(user_id.clone()),
        Some(client_id.clone()),
        "a code was presented at /token for a person and client with no consent on record"
            .to_owned(),
    )
}

/// One branch's last use, for [`branch_network_alert`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchUse {
    /// The branch.
    pub branch: u32,
    /// When it was last used.
    pub at: UnixTime,
    /// The client IP of that use.
    pub ip: IpAddr,
    /// Its network (`oauth::grant::network_of`: IPv4 /24, IPv6 /48).
    pub network: IpNet,
    /// Since when the branch has been used from that network without a use from another.
    pub network_since: UnixTime,
    /// The bounded `User-Agent` of that use.
    pub user_agent: Option<String>,
}

/// What the refresh flow knows once a branch was used (rotated or forked).
#[derive(Debug, Clone)]
pub struct BranchNetworkFacts {
    /// Person.
    pub user_id: UserId,
    /// Client.
    pub client_id: ClientId,
    /// Family.
    pub family_id: FamilyId,
    /// The branch just used, and from where.
    pub used: BranchUse,
    /// The family's other live branches whose last use came from a known address.
    pub others: Vec<BranchUse>,
    /// When this rule last fired for the family.
    pub last_alert: Option<UnixTime>,
}

/// Two parties holding one refresh family: a branch is used from network A while another
/// branch of the family was used from network B, within `branch_network_window_secs`, *after*
/// the first had settled on A (its uses since then all came from A). Each party keeps using
/// its own branch from its own place, so their uses interleave. A laptop carrying several
/// processes to another network does not: each branch's first use from the new network
/// starts its count again, and the branches left behind are never used from the old network
/// after that. Quiet for a window after it fired for the family. SECURITY.md, "Refresh
/// rotation", says what it catches and what it cannot.
pub fn branch_network_alert(
    policy: &AlertPolicy,
    f: &BranchNetworkFacts,
    now: UnixTime,
) -> Option<AuditEvent> {
    let window = policy.branch_network_window_secs;
    if window == 0 || f.last_alert.is_some_and(|t| now.since(t) < window) {
        return None;
    }
    let other = f
        .others
        .iter()
        .filter(|o| {
            o.branch != f.used.branch
                && o.network != f.used.network
                && now.since(o.at) <= window
                && o.at > f.used.network_since
        })
        .max_by_key(|o| o.at)?;
    let ua = |u: &BranchUse| u.user_agent.clone().unwrap_or_else(|| "none".to_owned());
    Some(alert(
        AlertKind::RefreshBranchesOnTwoNetworks,
        Some(f.user_id.clone()),
        Some(f.client_id.clone()),
        format!(
            "refresh family {}: branch {} was used from {} (network {}, user agent {:?}) while \
             branch {} was used from {} (network {}, user agent {:?}) {} s earlier; two parties \
             hold this family: the person can end the branch they do not recognise on the \
             account page",
            f.family_id.as_str(),
            f.used.branch,
            f.used.ip,
            f.used.network,
            ua(&f.used),
            other.branch,
            other.ip,
            other.network,
            ua(other),
            now.since(other.at),
        ),
    ))
}

/// Counts events in a sliding window; reports once when the count reaches the threshold,
/// then stays quiet until a full window has passed (one alert per burst, not per request).
#[derive(Debug)]
pub struct RateWindow {
    window_secs: u64,
    threshold: usize,
    hits: VecDeque<u64>,
    quiet_until: u64,
}

impl RateWindow {
    /// A window of `window_secs` that fires at `threshold` hits.
    pub fn new(window_secs: u64, threshold: u32) -> RateWindow {
        RateWindow {
            window_secs,
            threshold: usize::try_from(threshold).unwrap_or(usize::MAX).max(1),
            hits: VecDeque::new(),
            quiet_until: 0,
        }
    }

    /// When the last hit was recorded, if any is still held.
    pub fn last_hit(&self) -> Option<u64> {
        self.hits.back().copied()
    }

    /// Records a hit at `now`; returns the count in the window when an alert is due.
    pub fn hit(&mut self, now: u64) -> Option<usize> {
        while self
            .hits
            .front()
            .is_some_and(|t| now.saturating_sub(*t) >= self.window_secs)
        {
            self.hits.pop_front();
        }
        // Only the threshold matters: never hold more than that many timestamps.
        if self.hits.len() >= self.threshold {
            self.hits.pop_front();
        }
        self.hits.push_back(now);
        if self.hits.len() >= self.threshold && now >= self.quiet_until {
            self.quiet_until = now.saturating_add(self.window_secs);
            return Some(self.hits.len());
        }
        None
    }
}

/// The per-process detector the audit sink feeds every event through.
pub struct Detector {
    window_secs: u64,
    wrong_audience: Mutex<RateWindow>,
    denial_threshold: u32,
    denial_window_secs: u64,
    /// Per client; bounded by [`MAX_DENIAL_WINDOWS`] (the oldest-quiet windows go first).
    denials: Mutex<std::collections::HashMap<ClientId, RateWindow>>,
}

/// Clients whose denials are counted at once: a bound on the detector's memory, whatever
/// the number of clients.
pub const MAX_DENIAL_WINDOWS: usize = 4096;

/// What a `refresh_reuse` case means, for the alert's text.
fn reuse_case_text(case: &str) -> String {
    let what = match case {
        "previous_outside_grace" => "the token just replaced, after the grace window",
        "retired" => "a token replaced more than one rotation ago",
        "stale_beyond_window" => "a copy replaced longer ago than refresh_stale_secs",
        "branch_limit" => {
            "a recent copy, but the family already has refresh_max_branches live branches"
        }
        _ => "unknown case",
    };
    format!("case {case}: {what}")
}

impl Detector {
    /// A detector with these thresholds.
    pub fn new(policy: &AlertPolicy) -> Detector {
        Detector {
            window_secs: policy.wrong_audience_window_secs,
            wrong_audience: Mutex::new(RateWindow::new(
                policy.wrong_audience_window_secs,
                policy.wrong_audience_threshold,
            )),
            denial_threshold: policy.policy_denial_threshold,
            denial_window_secs: policy.policy_denial_window_secs,
            denials: Mutex::new(std::collections::HashMap::new()),
        }
    }

    fn denied(&self, client_id: &ClientId, user_id: &UserId, now: UnixTime) -> Option<AuditEvent> {
        let mut all = self
            .denials
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !all.contains_key(client_id) && all.len() >= MAX_DENIAL_WINDOWS {
            // Forget the windows with no denial in their last window's time.
            let cutoff = now.0.saturating_sub(self.denial_window_secs);
            all.retain(|_, w| w.last_hit().is_some_and(|t| t > cutoff));
            if all.len() >= MAX_DENIAL_WINDOWS {
                return None;
            }
        }
        let w = all
            .entry(client_id.clone())
            .or_insert_with(|| RateWindow::new(self.denial_window_secs, self.denial_threshold));
        w.hit(now.0).map(|n| {
            alert(
                AlertKind::PolicyDenialBurst,
                Some(user_id.clone()),
                Some(client_id.clone()),
                format!(
                    "{n} tool calls of client {} denied or refused by policy within {} s",
                    client_id.as_str(),
                    self.denial_window_secs
                ),
            )
        })
    }

    /// Alerts that `event`, seen at `now`, raises.
    pub fn observe(&self, event: &AuditEvent, now: UnixTime) -> Option<AuditEvent> {
        match event {
            AuditEvent::RefreshReuse {
                user_id,
                client_id,
                family_id,
                case,
            } => Some(alert(
                AlertKind::RefreshTokenReuse,
                Some(user_id.clone()),
                Some(client_id.clone()),
                format!(
                    "an old refresh token of family {} was presented ({}); the family is revoked",
                    family_id.as_str(),
                    reuse_case_text(case)
                ),
            )),
            AuditEvent::ConnectLinkRefused {
                link_id,
                owner,
                opener,
            } => Some(alert(
                AlertKind::ConnectLinkWrongPerson,
                Some(owner.clone()),
                None,
                format!(
                    "connect link {link_id} of {} was opened by {}",
                    owner.as_str(),
                    opener.as_str()
                ),
            )),
            // Denials and every refusal before the rules (an agent probing with odd bodies,
            // look-alike names, mismatched headers) count alike.
            AuditEvent::PolicyDecision {
                user_id,
                client_id,
                outcome,
                ..
            } if outcome == &"denied" || outcome.starts_with("refused_") => {
                self.denied(client_id, user_id, now)
            }
            AuditEvent::TokenRejected {
                reason: "wrong_audience",
            } => {
                // A poisoned lock only means another thread panicked mid-update; the counts
                // are still usable.
                let mut w = self
                    .wrong_audience
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                w.hit(now.0).map(|n| {
                    alert(
                        AlertKind::WrongAudienceRate,
                        None,
                        None,
                        format!(
                            "{n} tokens for another audience presented at /mcp within {} s",
                            self.window_secs
                        ),
                    )
                })
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::FamilyId;

    fn facts() -> CodeIssueFacts {
        CodeIssueFacts {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("mcpc_a"),
            consent_on_record: true,
            client_age_secs: Some(3600),
            redirect_host: "app.example".into(),
            loopback: false,
            host_seen_before: false,
        }
    }

    fn kinds(v: &[AuditEvent]) -> Vec<AlertKind> {
        v.iter()
            .filter_map(|e| match e {
                AuditEvent::AlertRaised { alert, .. } => Some(*alert),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_burst_of_policy_denials_from_one_client_raises_one_alert() {
        let policy = AlertPolicy {
            policy_denial_threshold: 3,
            policy_denial_window_secs: 60,
            ..AlertPolicy::default()
        };
        let d = Detector::new(&policy);
        let denied = |client: &str| AuditEvent::PolicyDecision {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new(client),
            tool: "delete_repo".into(),
            rule_id: "no-deletes".into(),
            decision: "deny",
            outcome: "denied",
            arguments_digest: "d".into(),
            matched: vec![],
        };
        // Two clients' denials are counted apart.
        assert!(d.observe(&denied("a"), UnixTime(100)).is_none());
        assert!(d.observe(&denied("b"), UnixTime(101)).is_none());
        assert!(d.observe(&denied("a"), UnixTime(102)).is_none());
        let fired = d.observe(&denied("a"), UnixTime(103));
        assert_eq!(
            kinds(&fired.into_iter().collect::<Vec<_>>()),
            vec![AlertKind::PolicyDenialBurst]
        );
        // One alert per burst.
        assert!(d.observe(&denied("a"), UnixTime(104)).is_none());
        // A forwarded call is no denial.
        let allowed = AuditEvent::PolicyDecision {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("c"),
            tool: "create_issue".into(),
            rule_id: "policy_defaults".into(),
            decision: "allow",
            outcome: "allowed",
            arguments_digest: "d".into(),
            matched: vec![],
        };
        for t in 0..10 {
            assert!(d.observe(&allowed, UnixTime(200 + t)).is_none());
        }
    }

    fn branch_use(branch: u32, at: u64, ip: &str, since: u64) -> BranchUse {
        let ip: IpAddr = ip.parse().unwrap();
        BranchUse {
            branch,
            at: UnixTime(at),
            ip,
            network: crate::oauth::grant::network_of(ip),
            network_since: UnixTime(since),
            user_agent: Some(format!("agent-{branch}")),
        }
    }

    fn branch_facts(used: BranchUse, others: Vec<BranchUse>) -> BranchNetworkFacts {
        BranchNetworkFacts {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("mcpc_a"),
            family_id: FamilyId::new("fam"),
            used,
            others,
            last_alert: None,
        }
    }

    const VICTIM: &str = "198.51.100.7";
    const THIEF: &str = "203.0.113.9";

    /// The review's M3: the thief rotated the victim's current token first (branch 0, from the
    /// thief's network since 100), the victim's stale copy forked branch 1 at 200. The victim's
    /// next use does not fire (the thief has not used branch 0 since the victim's branch
    /// began); the thief's next use does, and so does the victim's after any use of the
    /// thief's, from whichever network.
    #[test]
    fn branches_used_alternately_from_two_networks_raise_one_alert() {
        let p = AlertPolicy::default();
        let thief0 = branch_use(0, 100, THIEF, 100);
        let victim1 = branch_use(1, 300, VICTIM, 200);
        let f = branch_facts(victim1.clone(), vec![thief0.clone()]);
        assert!(branch_network_alert(&p, &f, UnixTime(300)).is_none());
        // The thief comes back on the same network.
        let f = branch_facts(branch_use(0, 400, THIEF, 100), vec![victim1.clone()]);
        let fired = branch_network_alert(&p, &f, UnixTime(400)).unwrap();
        assert_eq!(
            kinds(std::slice::from_ref(&fired)),
            [AlertKind::RefreshBranchesOnTwoNetworks]
        );
        let AuditEvent::AlertRaised {
            detail, user_id, ..
        } = fired
        else {
            unreachable!()
        };
        assert_eq!(user_id, Some(UserId::new("github:1")));
        for s in [
            "fam",
            THIEF,
            "203.0.113.0/24",
            VICTIM,
            "198.51.100.0/24",
            "agent-1",
        ] {
            assert!(detail.contains(s), "{s} in {detail}");
        }
        // A thief on a new network each time: the victim's next use sees it.
        let hopping = branch_use(0, 450, "192.0.2.1", 450);
        let f = branch_facts(branch_use(1, 500, VICTIM, 200), vec![hopping]);
        assert!(branch_network_alert(&p, &f, UnixTime(500)).is_some());
        // Quiet for the window after it fired for the family; then again.
        let p = AlertPolicy {
            branch_network_window_secs: 3_600,
            ..p
        };
        let mut f = branch_facts(
            branch_use(0, 10_000, THIEF, 100),
            vec![branch_use(1, 9_000, VICTIM, 200)],
        );
        f.last_alert = Some(UnixTime(10_000 - 3_600 + 1));
        assert!(branch_network_alert(&p, &f, UnixTime(10_000)).is_none());
        f.last_alert = Some(UnixTime(10_000 - 3_600));
        assert!(branch_network_alert(&p, &f, UnixTime(10_000)).is_some());
    }

    /// What the rule leaves alone: a laptop carrying its processes to another network (and
    /// back), processes on one network, a branch last used longer ago than the window, and a
    /// window of 0.
    #[test]
    fn a_laptop_moving_its_processes_and_one_network_raise_nothing() {
        let p = AlertPolicy {
            branch_network_window_secs: 3_600,
            ..AlertPolicy::default()
        };
        let home = "198.51.100.7";
        let office = "192.0.2.44";
        // Both branches at home until 1000; at 1500 branch 0 is used from the office, at
        // 1600 again, at 1700 branch 1 follows.
        let b1_home = branch_use(1, 1_000, home, 0);
        for (used, others) in [
            (branch_use(0, 1_500, office, 1_500), vec![b1_home.clone()]),
            (branch_use(0, 1_600, office, 1_500), vec![b1_home.clone()]),
            (
                branch_use(1, 1_700, office, 1_700),
                vec![branch_use(0, 1_600, office, 1_500)],
            ),
            // Back home in the evening: branch 0 first, branch 1 later.
            (
                branch_use(0, 3_000, home, 3_000),
                vec![branch_use(1, 1_700, office, 1_700)],
            ),
            (
                branch_use(1, 3_100, home, 3_100),
                vec![branch_use(0, 3_000, home, 3_000)],
            ),
            // Same /24, other address.
            (
                branch_use(1, 3_200, "198.51.100.200", 3_100),
                vec![branch_use(0, 3_150, home, 3_000)],
            ),
        ] {
            let f = branch_facts(used.clone(), others);
            assert!(branch_network_alert(&p, &f, used.at).is_none(), "{used:?}");
        }
        // Interleaved, but the other branch's use is older than the window.
        let f = branch_facts(
            branch_use(1, 10_000, VICTIM, 100),
            vec![branch_use(0, 10_000 - 3_601, THIEF, 100)],
        );
        assert!(branch_network_alert(&p, &f, UnixTime(10_000)).is_none());
        let off = AlertPolicy {
            branch_network_window_secs: 0,
            ..AlertPolicy::default()
        };
        let f = branch_facts(
            branch_use(0, 400, THIEF, 100),
            vec![branch_use(1, 300, VICTIM, 200)],
        );
        assert!(branch_network_alert(&off, &f, UnixTime(400)).is_none());
        assert!(branch_network_alert(&AlertPolicy::default(), &f, UnixTime(400)).is_some());
    }

    #[test]
    fn a_normal_code_raises_nothing() {
        assert!(code_issue_alerts(&AlertPolicy::default(), &facts()).is_empty());
    }

    #[test]
    fn a_code_without_consent_raises_the_confused_deputy_alert() {
        let f = CodeIssueFacts {
            consent_on_record: false,
            ..facts()
        };
        assert_eq!(
            kinds(&code_issue_alerts(&AlertPolicy::default(), &f)),
            vec![AlertKind::CodeWithoutConsent]
        );
    }

    #[test]
    fn a_fresh_client_on_a_new_host_raises_an_alert_but_not_on_loopback_or_a_known_host() {
        let p = AlertPolicy::default();
        let fresh = CodeIssueFacts {
            client_age_secs: Some(30),
            ..facts()
        };
        assert_eq!(
            kinds(&code_issue_alerts(&p, &fresh)),
            vec![AlertKind::FreshClientNewHost]
        );
        let known = CodeIssueFacts {
            host_seen_before: true,
            ..fresh.clone()
        };
        assert!(code_issue_alerts(&p, &known).is_empty());
        let loopback = CodeIssueFacts {
            loopback: true,
            ..fresh
        };
        assert!(code_issue_alerts(&p, &loopback).is_empty());
    }

    #[test]
    fn rate_window_fires_once_per_burst_at_the_threshold() {
        let mut w = RateWindow::new(60, 3);
        assert_eq!(w.hit(100), None);
        assert_eq!(w.hit(110), None);
        assert_eq!(w.hit(120), Some(3));
        assert_eq!(w.hit(121), None, "quiet for a window after firing");
        // Old hits leave the window: two spread-out hits never reach the threshold.
        let mut w = RateWindow::new(60, 3);
        assert_eq!(w.hit(0), None);
        assert_eq!(w.hit(61), None);
        assert_eq!(w.hit(200), None);
        // After the quiet period a new burst fires again.
        let mut w = RateWindow::new(10, 2);
        assert_eq!(w.hit(0), None);
        assert_eq!(w.hit(1), Some(2));
        assert_eq!(w.hit(5), None);
        assert_eq!(w.hit(12), Some(2));
    }

    #[test]
    fn detector_turns_reuse_and_wrong_person_into_alerts_and_ignores_the_rest() {
        let d = Detector::new(&AlertPolicy::default());
        let reuse = AuditEvent::RefreshReuse {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("mcpc_a"),
            family_id: FamilyId::new("f"),
            case: "stale_beyond_window",
        };
        let wrong = AuditEvent::ConnectLinkRefused {
            link_id: "l".into(),
            owner: UserId::new("github:1"),
            opener: UserId::new("github:2"),
        };
        let ok = AuditEvent::TokenRejected { reason: "unknown" };
        let got: Vec<_> = [reuse, wrong, ok]
            .iter()
            .filter_map(|e| d.observe(e, UnixTime(0)))
            .collect();
        assert_eq!(
            kinds(&got),
            vec![
                AlertKind::RefreshTokenReuse,
                AlertKind::ConnectLinkWrongPerson
            ]
        );
    }

    #[test]
    fn detector_counts_wrong_audience_rejections_against_the_threshold() {
        let policy = AlertPolicy {
            wrong_audience_threshold: 3,
            wrong_audience_window_secs: 60,
            ..AlertPolicy::default()
        };
        let d = Detector::new(&policy);
        let e = AuditEvent::TokenRejected {
            reason: "wrong_audience",
        };
        assert!(d.observe(&e, UnixTime(10)).is_none());
        assert!(d.observe(&e, UnixTime(11)).is_none());
        assert_eq!(
            kinds(&d.observe(&e, UnixTime(12)).into_iter().collect::<Vec<_>>()),
            vec![AlertKind::WrongAudienceRate]
        );
    }
}
