//! Binding: a GitHub identity ↔ the platform team's people (`[access]`). Checked at every
//! sign-in before any session, grant, consent or code exists (the callback needs an
//! [`Admitted`] to store any of them), and re-checked while the person's tokens live, at most
//! every `recheck_secs`. This module decides; `flows::admission` asks GitHub and acts.
//!
//! Rules, any of which admits: a listed person (login, case-insensitive, or `id:<n>`, the
//! stable numeric id); an **active** member of a listed org (a pending invitation is not
//! membership); an active member of a listed team (`org/slug`). No rules: everyone with a
//! GitHub account is admitted, and the configuration says so loudly.
//!
//! ```compile_fail
//! // The witness cannot be made outside this module: it has private fields and no constructor.
//! use mcp_oauth_proxy::bindings::admission::Admitted;
//! let forged = Admitted { user_id: mcp_oauth_proxy::ids::UserId::github(1) };
//! ```
//!
//! ```
//! use mcp_oauth_proxy::bindings::admission::Admitted;
//! use mcp_oauth_proxy::ids::UserId;
//! fn who(a: &Admitted) -> &UserId {
//!     a.user_id()
//! }
//! ```

use serde::Deserialize;

use crate::clock::UnixTime;
use crate::ids::UserId;

/// Default for `recheck_secs`.
pub const DEFAULT_RECHECK_SECS: u64 = 300;
/// Default for `unreachable_grace_secs`: how long the last decision stands while GitHub
/// cannot be asked.
pub const DEFAULT_UNREACHABLE_GRACE_SECS: u64 = 900;
/// Scopes that let a token read private org and team memberships (`read:org` or a scope that
/// implies it).
pub const ORG_READING_SCOPES: [&str; 3] = ["read:org", "write:org", "admin:org"];

/// `[access]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    #[serde(default)]
    github_orgs: Vec<String>,
    #[serde(default)]
    github_teams: Vec<String>,
    #[serde(default)]
    github_users: Vec<String>,
    recheck_secs: Option<u64>,
    unreachable_grace_secs: Option<u64>,
}

/// A team rule, `org/slug`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Team {
    /// Organisation login.
    pub org: String,
    /// Team slug.
    pub slug: String,
}

impl std::fmt::Display for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.slug)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum PersonRule {
    /// Lower-cased login (GitHub logins are case-insensitive).
    Login(String),
    /// Stable numeric id.
    Id(u64),
}

/// The validated `[access]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessPolicy {
    orgs: Vec<String>,
    teams: Vec<Team>,
    people: Vec<PersonRule>,
    recheck_secs: u64,
    unreachable_grace_secs: u64,
}

impl Default for AccessPolicy {
    fn default() -> Self {
        AccessPolicy {
            orgs: Vec::new(),
            teams: Vec::new(),
            people: Vec::new(),
            recheck_secs: DEFAULT_RECHECK_SECS,
            unreachable_grace_secs: DEFAULT_UNREACHABLE_GRACE_SECS,
        }
    }
}

/// GitHub's rule for org logins and team slugs: ASCII letters, digits, `-` (and `_`, `.` in
/// slugs); never a `/`, so a name can only ever be one URL path segment.
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl AccessPolicy {
    /// Validates `[access]`, pushing readable errors into `errs`. `github_scopes` is
    /// `[github] scopes`: org and team rules need a token that can read private memberships.
    pub fn from_raw(raw: &RawAccess, github_scopes: &[String], errs: &mut Vec<String>) -> Self {
        let mut p = AccessPolicy::default();
        for org in &raw.github_orgs {
            if valid_name(org) {
                p.orgs.push(org.to_ascii_lowercase());
            } else {
                errs.push(format!(
                    "access.github_orgs: {org:?} is not an organisation login"
                ));
            }
        }
        for team in &raw.github_teams {
            match team.split_once('/') {
                Some((org, slug)) if valid_name(org) && valid_name(slug) => p.teams.push(Team {
                    org: org.to_ascii_lowercase(),
                    slug: slug.to_ascii_lowercase(),
                }),
                _ => errs.push(format!(
                    "access.github_teams: {team:?} is not \"org/team-slug\""
                )),
            }
        }
        for person in &raw.github_users {
            if let Some(id) = person.strip_prefix("id:") {
                match id.parse::<u64>() {
                    Ok(n) if n > 0 => p.people.push(PersonRule::Id(n)),
                    _ => errs.push(format!(
                        "access.github_users: {person:?}: \"id:\" takes GitHub's numeric user id"
                    )),
                }
            } else if valid_name(person) && !person.contains(['_', '.']) {
                p.people
                    .push(PersonRule::Login(person.to_ascii_lowercase()));
            } else {
                errs.push(format!(
                    "access.github_users: {person:?} is neither a GitHub login nor \"id:<number>\""
                ));
            }
        }
        match raw.recheck_secs {
            Some(s) if !(1..=86_400).contains(&s) => {
                errs.push("access.recheck_secs: must be 1..=86400".to_owned())
            }
            Some(s) => p.recheck_secs = s,
            None => {}
        }
        match raw.unreachable_grace_secs {
            Some(s) if s > 604_800 => {
                errs.push("access.unreachable_grace_secs: at most 604800 (a week)".to_owned())
            }
            Some(s) => p.unreachable_grace_secs = s,
            None => {}
        }
        if p.needs_memberships()
            && !github_scopes
                .iter()
                .any(|s| ORG_READING_SCOPES.contains(&s.as_str()))
        {
            errs.push(
                "access: github_orgs and github_teams need \"read:org\" in [github] scopes \
                 (GitHub hides private memberships from a token without it, so members would \
                 be refused)"
                    .to_owned(),
            );
        }
        p
    }

    /// No rules: every GitHub account is admitted.
    pub fn is_open(&self) -> bool {
        self.orgs.is_empty() && self.teams.is_empty() && self.people.is_empty()
    }

    /// Whether deciding needs GitHub's membership answers (org or team rules).
    pub fn needs_memberships(&self) -> bool {
        !self.orgs.is_empty() || !self.teams.is_empty()
    }

    /// The listed orgs, in order.
    pub fn orgs(&self) -> &[String] {
        &self.orgs
    }

    /// The listed teams, in order.
    pub fn teams(&self) -> &[Team] {
        &self.teams
    }

    /// How often a person's standing is asked of GitHub again, at most.
    pub fn recheck_secs(&self) -> u64 {
        self.recheck_secs
    }

    /// How long the last decision stands while GitHub cannot be asked.
    pub fn unreachable_grace_secs(&self) -> u64 {
        self.unreachable_grace_secs
    }

    /// Who this server is for, in words for the refusal page ("members of acme, members of
    /// the team acme/platform, or the people listed by name").
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.orgs.is_empty() {
            parts.push(format!("members of {}", self.orgs.join(", ")));
        }
        if !self.teams.is_empty() {
            let teams: Vec<String> = self.teams.iter().map(Team::to_string).collect();
            parts.push(format!("members of the team {}", teams.join(", ")));
        }
        if !self.people.is_empty() {
            parts.push("the people the operators listed by name".to_owned());
        }
        match parts.len() {
            0 => "everyone with a GitHub account".to_owned(),
            1 => parts.remove(0),
            _ => {
                let last = parts.pop().unwrap_or_default();
                format!("{}, or {last}", parts.join(", "))
            }
        }
    }

    /// What `serve` and `check-config` must say about this policy.
    pub fn warnings(&self) -> Vec<String> {
        if self.is_open() {
            vec![
                "[access] is empty: this server admits EVERY GitHub account; set github_orgs, \
                 github_teams or github_users to admit only your people"
                    .to_owned(),
            ]
        } else {
            Vec::new()
        }
    }

    fn lists_person(&self, id: u64, login: &str) -> bool {
        self.people.iter().any(|r| match r {
            PersonRule::Id(n) => *n == id,
            PersonRule::Login(l) => l.eq_ignore_ascii_case(login),
        })
    }
}

/// What GitHub answered about one org or team membership.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Membership {
    /// An active member.
    Active,
    /// Invited, not yet accepted: not a member.
    Pending,
    /// Not a member (GitHub's 404).
    NotMember,
    /// The org enforces SAML SSO and this token is not authorized for it; GitHub's link to
    /// authorize it, when it gave one.
    SsoRequired {
        /// `X-GitHub-SSO: required; url=…`.
        url: Option<String>,
    },
}

impl Membership {
    /// Whether this answer alone admits.
    pub fn admits(&self) -> bool {
        matches!(self, Membership::Active)
    }
}

/// One question the policy asks GitHub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    /// Membership of an org.
    Org(String),
    /// Membership of a team.
    Team(Team),
}

/// The person as GitHub identified them.
#[derive(Debug, Clone, Copy)]
pub struct Identity<'a> {
    /// Stable numeric id.
    pub id: u64,
    /// Login.
    pub login: &'a str,
}

/// Proof that the person is admitted. Only [`decide`] makes one; storing a session or a
/// GitHub grant takes it.
#[derive(Debug)]
pub struct Admitted {
    user_id: UserId,
}

impl Admitted {
    /// Who was admitted.
    pub fn user_id(&self) -> &UserId {
        &self.user_id
    }
}

/// Why someone is not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// None of the rules admits them; who the server is for, in words.
    Outside {
        /// [`AccessPolicy::describe`].
        rule: String,
    },
    /// They may be a member, but the org's SAML SSO hides it until they authorize this app.
    SsoRequired {
        /// The org.
        org: String,
        /// GitHub's authorization link, if it gave one.
        url: Option<String>,
    },
}

/// The decision.
#[derive(Debug)]
pub enum Decision {
    /// In.
    Admitted(Admitted),
    /// Out.
    Refused(Refusal),
}

/// The questions to ask GitHub, in order, for a person the identity rules do not admit.
/// Empty when the identity alone decides (open policy, or a listed person).
pub fn questions(policy: &AccessPolicy, who: Identity<'_>) -> Vec<Question> {
    if policy.is_open() || policy.lists_person(who.id, who.login) {
        return Vec::new();
    }
    policy
        .orgs
        .iter()
        .cloned()
        .map(Question::Org)
        .chain(policy.teams.iter().cloned().map(Question::Team))
        .collect()
}

/// Decides from the identity and GitHub's answers to [`questions`] (asking may stop at the
/// first answer that [admits](Membership::admits)).
pub fn decide(
    policy: &AccessPolicy,
    who: Identity<'_>,
    answers: &[(Question, Membership)],
) -> Decision {
    let admitted = || {
        Decision::Admitted(Admitted {
            user_id: UserId::github(who.id),
        })
    };
    if policy.is_open() || policy.lists_person(who.id, who.login) {
        return admitted();
    }
    // Only an answer to a question this policy asks counts.
    let asked = questions(policy, who);
    let counted = answers.iter().filter(|(q, _)| asked.contains(q));
    let mut sso = None;
    for (q, m) in counted {
        match m {
            Membership::Active => return admitted(),
            Membership::SsoRequired { url } if sso.is_none() => {
                let org = match q {
                    Question::Org(o) => o.clone(),
                    Question::Team(t) => t.org.clone(),
                };
                sso = Some(Refusal::SsoRequired {
                    org,
                    url: url.clone(),
                });
            }
            _ => {}
        }
    }
    Decision::Refused(sso.unwrap_or(Refusal::Outside {
        rule: policy.describe(),
    }))
}

/// A person's standing, and when it was last asked and answered: stored per person, so the
/// types live with the other records.
pub use crate::store::records::{Standing, StandingCheck};

/// What to do about a person's standing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recheck {
    /// The stored standing is recent enough: use it.
    Current(Standing),
    /// Ask GitHub now (never asked, or asked `recheck_secs` ago or more).
    Due,
    /// GitHub could not be asked at the last attempt and the last answer is older than
    /// `unreachable_grace_secs`: refuse until the next attempt (at most one per
    /// `recheck_secs`, so an outage is not answered with a storm of calls).
    Unverifiable,
}

/// Whether the standing must be asked of GitHub again.
pub fn recheck(policy: &AccessPolicy, last: Option<&StandingCheck>, now: UnixTime) -> Recheck {
    let Some(c) = last else {
        return Recheck::Due;
    };
    if now.since(c.checked_at) >= policy.recheck_secs {
        return Recheck::Due;
    }
    match stands_while_unreachable(policy, Some(c), now) {
        _ if c.verified_at >= c.checked_at => Recheck::Current(c.standing),
        Some(s) => Recheck::Current(s),
        None => Recheck::Unverifiable,
    }
}

/// GitHub could not be asked: whether the last answer still stands. It does for
/// `unreachable_grace_secs` after GitHub last answered, never longer, and never without one.
pub fn stands_while_unreachable(
    policy: &AccessPolicy,
    last: Option<&StandingCheck>,
    now: UnixTime,
) -> Option<Standing> {
    let c = last?;
    (now.since(c.verified_at) <= policy.unreachable_grace_secs).then_some(c.standing)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml: &str, scopes: &[&str]) -> (AccessPolicy, Vec<String>) {
        let raw: RawAccess = toml::from_str(toml).unwrap();
        let scopes: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
        let mut errs = Vec::new();
        let p = AccessPolicy::from_raw(&raw, &scopes, &mut errs);
        (p, errs)
    }

    fn acme() -> AccessPolicy {
        let (p, errs) = policy(
            "github_orgs = [\"Acme\"]\ngithub_teams = [\"other/platform\"]\ngithub_users = [\"OctoCat\", \"id:4242\"]",
            &["read:user", "read:org"],
        );
        assert!(errs.is_empty(), "{errs:?}");
        p
    }

    const ALICE: Identity<'static> = Identity {
        id: 1001,
        login: "alice",
    };

    fn org(o: &str) -> Question {
        Question::Org(o.to_owned())
    }

    fn team(o: &str, s: &str) -> Question {
        Question::Team(Team {
            org: o.to_owned(),
            slug: s.to_owned(),
        })
    }

    #[test]
    fn empty_access_admits_everyone_and_says_so_loudly() {
        let (p, errs) = policy("", &["read:user"]);
        assert!(errs.is_empty());
        assert!(p.is_open());
        assert!(questions(&p, ALICE).is_empty());
        assert!(matches!(decide(&p, ALICE, &[]), Decision::Admitted(_)));
        assert!(p.warnings()[0].contains("EVERY GitHub account"));
        assert!(acme().warnings().is_empty());
    }

    #[test]
    fn org_and_team_rules_require_a_scope_that_reads_private_memberships() {
        let (_, errs) = policy("github_orgs = [\"acme\"]", &["read:user", "repo"]);
        assert!(errs.iter().any(|e| e.contains("read:org")), "{errs:?}");
        let (_, errs) = policy("github_teams = [\"acme/platform\"]", &["read:user"]);
        assert!(errs.iter().any(|e| e.contains("read:org")), "{errs:?}");
        let (_, errs) = policy("github_orgs = [\"acme\"]", &["admin:org"]);
        assert!(errs.is_empty(), "admin:org implies read:org: {errs:?}");
        // People listed by name need no membership scope.
        let (_, errs) = policy("github_users = [\"octocat\"]", &["read:user"]);
        assert!(errs.is_empty(), "{errs:?}");
    }

    #[test]
    fn malformed_rules_are_config_errors() {
        let (_, errs) = policy(
            "github_orgs = [\"ac/me\", \"\"]\ngithub_teams = [\"platform\", \"a/b/c\"]\ngithub_users = [\"id:x\", \"id:0\", \"bad login\"]\nrecheck_secs = 0\nunreachable_grace_secs = 9999999",
            &["read:org"],
        );
        assert_eq!(errs.len(), 9, "{errs:?}");
        let raw: Result<RawAccess, _> = toml::from_str("github_org = [\"acme\"]");
        assert!(raw.is_err(), "unknown keys are refused");
    }

    #[test]
    fn listed_people_are_admitted_by_login_or_id_without_asking_github() {
        let p = acme();
        for who in [
            Identity {
                id: 7,
                login: "octocat",
            },
            Identity {
                id: 4242,
                login: "renamed-later",
            },
        ] {
            assert!(questions(&p, who).is_empty());
            assert!(
                matches!(decide(&p, who, &[]), Decision::Admitted(a) if a.user_id() == &UserId::github(who.id))
            );
        }
    }

    #[test]
    fn an_active_org_or_team_membership_admits() {
        let p = acme();
        assert_eq!(
            questions(&p, ALICE),
            vec![org("acme"), team("other", "platform")]
        );
        let d = decide(&p, ALICE, &[(org("acme"), Membership::Active)]);
        assert!(matches!(d, Decision::Admitted(_)));
        let d = decide(
            &p,
            ALICE,
            &[
                (org("acme"), Membership::NotMember),
                (team("other", "platform"), Membership::Active),
            ],
        );
        assert!(matches!(d, Decision::Admitted(_)));
    }

    #[test]
    fn pending_invitation_is_not_membership() {
        let p = acme();
        let d = decide(
            &p,
            ALICE,
            &[
                (org("acme"), Membership::Pending),
                (team("other", "platform"), Membership::Pending),
            ],
        );
        let Decision::Refused(Refusal::Outside { rule }) = d else {
            panic!("refused")
        };
        assert!(rule.contains("members of acme"), "{rule}");
    }

    #[test]
    fn membership_of_an_unlisted_org_or_team_does_not_count() {
        let p = acme();
        let d = decide(
            &p,
            ALICE,
            &[
                (org("evil"), Membership::Active),
                (team("acme", "other-team"), Membership::Active),
            ],
        );
        assert!(matches!(d, Decision::Refused(Refusal::Outside { .. })));
    }

    #[test]
    fn sso_hidden_membership_is_refused_with_the_authorization_link() {
        let p = acme();
        let url = Some("https://github.com/orgs/acme/sso?authorization_request=x".to_owned());
        let d = decide(
            &p,
            ALICE,
            &[
                (org("acme"), Membership::SsoRequired { url: url.clone() }),
                (team("other", "platform"), Membership::NotMember),
            ],
        );
        let Decision::Refused(Refusal::SsoRequired { org, url: got }) = d else {
            panic!("sso")
        };
        assert_eq!((org.as_str(), got), ("acme", url));
    }

    #[test]
    fn standing_is_asked_again_only_after_recheck_secs() {
        let (p, _) = policy(
            "github_orgs = [\"acme\"]\nrecheck_secs = 300",
            &["read:org"],
        );
        assert_eq!(recheck(&p, None, UnixTime(1000)), Recheck::Due);
        let c = StandingCheck::new(Standing::Admitted, UnixTime(1000), UnixTime(1000));
        assert_eq!(
            recheck(&p, Some(&c), UnixTime(1299)),
            Recheck::Current(Standing::Admitted)
        );
        assert_eq!(recheck(&p, Some(&c), UnixTime(1300)), Recheck::Due);
    }

    #[test]
    fn github_unreachable_keeps_the_last_decision_only_for_the_configured_time() {
        let (p, _) = policy(
            "github_orgs = [\"acme\"]\nunreachable_grace_secs = 600",
            &["read:org"],
        );
        let c = StandingCheck::new(Standing::Admitted, UnixTime(1500), UnixTime(1000));
        assert_eq!(
            stands_while_unreachable(&p, Some(&c), UnixTime(1600)),
            Some(Standing::Admitted)
        );
        assert_eq!(stands_while_unreachable(&p, Some(&c), UnixTime(1601)), None);
        assert_eq!(stands_while_unreachable(&p, None, UnixTime(1000)), None);
        // Between attempts (recheck_secs 300): the failed attempt at 1500 is not repeated
        // before 1800; until 1600 the old answer stands, then requests are refused.
        assert_eq!(
            recheck(&p, Some(&c), UnixTime(1600)),
            Recheck::Current(Standing::Admitted)
        );
        assert_eq!(recheck(&p, Some(&c), UnixTime(1601)), Recheck::Unverifiable);
        assert_eq!(recheck(&p, Some(&c), UnixTime(1800)), Recheck::Due);
        // Grace 0: refused from the first failed attempt on.
        let (strict, _) = policy(
            "github_orgs = [\"acme\"]\nunreachable_grace_secs = 0",
            &["read:org"],
        );
        assert_eq!(
            recheck(&strict, Some(&c), UnixTime(1501)),
            Recheck::Unverifiable
        );
        // An answered check stands for recheck_secs whatever the grace.
        let answered = StandingCheck {
            verified_at: UnixTime(1500),
            ..c
        };
        assert_eq!(
            recheck(&strict, Some(&answered), UnixTime(1799)),
            Recheck::Current(Standing::Admitted)
        );
    }

    #[test]
    fn describe_names_the_rules() {
        assert_eq!(
            acme().describe(),
            "members of acme, members of the team other/platform, or the people the operators listed by name"
        );
    }
}
