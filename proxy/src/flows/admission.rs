//! Admission in practice: ask GitHub what `bindings::admission` needs to know, and act on its
//! decision. At sign-in ([`at_sign_in`]): refused → the token just minted is revoked at
//! GitHub, `sign_in_refused` is audited, and the person sees who the server is for; nothing
//! else is stored. While tokens live ([`standing`], lazily on `/mcp`, at refresh and at token
//! exchange, at most every `recheck_secs` per person): whether GitHub still honours the
//! person's token (GitHub's check-a-token API with the app's credentials, not the person's rate
//! limit), then their org/team membership. Membership lost → every token of theirs and their
//! GitHub grant are revoked (`access_lost`); token no longer honoured → the grant is marked
//! broken, so the next tool call gets a reconnect link; GitHub unreachable → the last answer
//! stands for `unreachable_grace_secs`, then requests are refused as temporarily unavailable.
//!
//! The same answers carry what the tool-call policy (`[[policy]]` `people`) needs to know of
//! the person ([`PersonFacts`]): their login, and their active memberships among the orgs and
//! teams the policy names — asked at sign-in and at each recheck even when `[access]` is open,
//! stored with the standing, so a `tools/call` never waits for GitHub. A membership change
//! is therefore seen at the next recheck; a reloaded policy that names an org or team not yet
//! asked about makes the person's next request recheck.

use std::sync::Arc;

use super::{FlowError, NotAdmitted};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::admission::{
    self, Admitted, Decision, Identity, Question, Recheck, Refusal, Standing, StandingCheck, Team,
};
use crate::github::client::{GitHubError, GitHubUser};
use crate::github::grants::{GitHubRevocation, GrantError};
use crate::ids::{GitHubToken, UserId};
use crate::store::records::GrantRecord;
use crate::store::standing;
use crate::tool_policy::MembershipQuestion;

/// A person's standing right now, as the callers of [`standing`] act on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted; GitHub honours their token (or they have none to ask about).
    Admitted,
    /// Admitted, but GitHub no longer honours their token: they must reconnect.
    TokenBroken,
    /// No longer admitted: every token of theirs has been revoked.
    Lost,
    /// GitHub could not be asked for longer than the configured grace: refuse for now.
    Unavailable,
}

/// What the tool-call policy knows of a person, as of their last standing check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersonFacts {
    /// GitHub login (`None`: not known yet, e.g. a record from before the policy).
    pub login: Option<String>,
    /// Active memberships among those the policy asks about: `acme`, `acme/platform`.
    pub memberships: Vec<String>,
    /// The questions GitHub answered for `memberships` (same form): an org or team outside
    /// them is unknown to the policy, which then never lets a call through on it.
    pub answered: Vec<String>,
}

impl PersonFacts {
    fn of(check: Option<&StandingCheck>) -> PersonFacts {
        check.map_or_else(PersonFacts::default, |c| PersonFacts {
            login: c.login.clone(),
            memberships: c.memberships.clone(),
            answered: c.asked.clone(),
        })
    }
}

/// What the tool-call policy asks of a person: its membership questions, and whether it
/// needs their login.
struct Needs {
    questions: Vec<MembershipQuestion>,
    /// The questions in the stored form (`acme`, `acme/platform`).
    asked: Vec<String>,
    login: bool,
}

impl Needs {
    fn of(app: &App) -> Needs {
        let policy = app.policy();
        let questions = policy.questions();
        Needs {
            asked: questions.iter().map(MembershipQuestion::key).collect(),
            questions,
            login: policy.names_logins(),
        }
    }

    /// Whether the last check, answered and from an earlier second, predates what the policy
    /// now needs (a question it never asked, a login it does not hold). Then the standing is
    /// asked again now rather than at the next `recheck_secs`: at most once a second, and
    /// never after a failed attempt, so an outage is not answered with a storm of calls.
    fn outdated(&self, last: &StandingCheck, now: crate::clock::UnixTime) -> bool {
        last.verified_at >= last.checked_at
            && now.since(last.checked_at) >= 1
            && ((self.login && last.login.is_none())
                || self.asked.iter().any(|q| !last.asked.contains(q)))
    }
}

/// Asks GitHub the tool-call policy's membership questions with `token`, reusing what the
/// admission questions already answered; the active ones. An org's SSO wall counts as not a
/// member (the person sees the SSO link only where admission needs it).
async fn policy_memberships(
    app: &App,
    token: &GitHubToken,
    login: &str,
    questions: &[MembershipQuestion],
    answered: &[(Question, admission::Membership)],
) -> Result<Vec<String>, GitHubError> {
    let mut active = Vec::new();
    for q in questions {
        let asked = match q {
            MembershipQuestion::Org(org) => Question::Org(org.clone()),
            MembershipQuestion::Team { org, slug } => Question::Team(Team {
                org: org.clone(),
                slug: slug.clone(),
            }),
        };
        let admits = match answered.iter().find(|(a, _)| *a == asked) {
            Some((_, m)) => m.admits(),
            None => app.github.membership(token, &asked, login).await?.admits(),
        };
        if admits {
            active.push(q.key());
        }
    }
    Ok(active)
}

/// Asks GitHub the policy's questions with `token`, stopping at the first that admits.
async fn ask(
    app: &App,
    token: &GitHubToken,
    who: Identity<'_>,
) -> Result<Vec<(Question, admission::Membership)>, GitHubError> {
    let mut answers = Vec::new();
    for q in admission::questions(&app.config.access, who) {
        let m = app.github.membership(token, &q, who.login).await?;
        let admits = m.admits();
        answers.push((q, m));
        if admits {
            break;
        }
    }
    Ok(answers)
}

/// An SSO link is shown only when it points at the configured GitHub (scheme, host, port), so
/// a page of ours never sends the person anywhere else.
fn github_link(app: &App, url: Option<String>) -> Option<String> {
    let github = &app.config.github.authorize_url;
    let u = url::Url::parse(url.as_deref()?).ok()?;
    (u.scheme() == github.scheme()
        && u.host_str() == github.host_str()
        && u.port_or_known_default() == github.port_or_known_default())
    .then(|| u.to_string())
}

/// The sign-in check: before any session, grant, consent or code. On refusal the token GitHub
/// just minted is revoked there, the refusal is audited, and anything the person still held
/// from an earlier admission is revoked too.
pub async fn at_sign_in(
    app: &App,
    token: &GitHubToken,
    gh: &GitHubUser,
) -> Result<Admitted, FlowError> {
    let who = Identity {
        id: gh.id,
        login: &gh.login,
    };
    let answers = match ask(app, token, who).await {
        Ok(a) => a,
        Err(e) => {
            // Nothing is kept from a sign-in that could not be decided.
            app.github.delete_token(token).await;
            return Err(FlowError::GitHub(e));
        }
    };
    let user = UserId::github(gh.id);
    match admission::decide(&app.config.access, who, &answers) {
        Decision::Admitted(a) => {
            let needs = Needs::of(app);
            let memberships =
                match policy_memberships(app, token, &gh.login, &needs.questions, &answers).await {
                    Ok(m) => m,
                    Err(e) => {
                        // As for admission: a sign-in whose facts could not be had keeps
                        // nothing.
                        app.github.delete_token(token).await;
                        return Err(FlowError::GitHub(e));
                    }
                };
            let now = app.clock.now();
            let check = StandingCheck {
                standing: Standing::Admitted,
                checked_at: now,
                verified_at: now,
                login: Some(gh.login.clone()),
                memberships,
                asked: needs.asked,
            };
            standing::put(app.store.as_ref(), &user, &check).await?;
            Ok(a)
        }
        Decision::Refused(refusal) => {
            app.github.delete_token(token).await;
            let reason = match refusal {
                Refusal::Outside { .. } => "outside",
                Refusal::SsoRequired { .. } => "sso_required",
            };
            app.audit
                .record(AuditEvent::SignInRefused {
                    user_id: user.clone(),
                    login: gh.login.clone(),
                    reason,
                })
                .await?;
            if let Refusal::Outside { .. } = refusal {
                // Admitted once under an older policy: nothing of that may outlive this answer.
                lose_access(app, &user).await?;
            }
            Err(FlowError::NotAdmitted(Box::new(match refusal {
                Refusal::Outside { rule } => NotAdmitted {
                    login: gh.login.clone(),
                    message: format!(
                        "This server is for {rule}. The GitHub account {} is not one of them, so \
                         it cannot be used here. If you think it should be, ask the people who \
                         run this server.",
                        gh.login
                    ),
                    org: String::new(),
                    sso_url: None,
                },
                Refusal::SsoRequired { org, url } => NotAdmitted {
                    login: gh.login.clone(),
                    message: format!(
                        "The organisation {org} uses SAML single sign-on, and GitHub has not yet \
                         authorized this app for it, so it cannot confirm your membership."
                    ),
                    sso_url: github_link(app, url),
                    org,
                },
            })))
        }
    }
}

/// The person's standing now, asking GitHub again when it is due; acts on what it learns.
/// With it, what the tool-call policy knows of them as of the answer it stands on.
pub async fn standing(app: &App, user: &UserId) -> Result<(Verdict, PersonFacts), FlowError> {
    let last = standing::get(app.store.as_ref(), user).await?;
    standing_from(app, user, last.map(Arc::new)).await
}

/// [`standing`] from a standing record the caller read just now (an `/mcp` request reads it
/// with the other records it needs, `store::call_records`).
pub async fn standing_from(
    app: &App,
    user: &UserId,
    last: Option<Arc<StandingCheck>>,
) -> Result<(Verdict, PersonFacts), FlowError> {
    let now = app.clock.now();
    let policy = &app.config.access;
    let needs = Needs::of(app);
    match admission::recheck(policy, last.as_deref(), now) {
        Recheck::Current(s) if !last.as_deref().is_some_and(|c| needs.outdated(c, now)) => {
            return Ok((verdict(s), PersonFacts::of(last.as_deref())));
        }
        Recheck::Unverifiable => {
            return Ok((Verdict::Unavailable, PersonFacts::of(last.as_deref())));
        }
        Recheck::Current(_) | Recheck::Due => {}
    }
    // Due: GitHub is asked, and the record rewritten from a copy of the shared one.
    let last = last.map(Arc::unwrap_or_clone);
    let grant = app.grants.get(user).await?;
    let Some(grant) = grant.filter(|g| !g.broken) else {
        // No token to ask with (or a broken one, already answered with a reconnect link):
        // nothing reaches GitHub for them until they connect again, which is a sign-in, and
        // every sign-in is checked. Note the attempt so this is not re-read on every call.
        // Write class (here and for each `standing::put` below, on `/mcp` through
        // `gateway::authenticate`): a record of GitHub's last answer, durable by its own flush
        // or commit before the request goes on. Later requests read it to skip asking GitHub
        // until `recheck_secs`; lost, they would only ask again (and the unreachable grace
        // would count from an older answer), so it never admits more than GitHub said.
        // The policy's facts stay as last known, and so do the questions they answer: one
        // never asked stays unknown (and a restricting rule on it matches, see
        // `tool_policy::Caller::answered`). The attempt is not repeated on every request:
        // `Needs::outdated` waits for an answered check, and the next one is `recheck_secs`
        // away.
        let standing = last.as_ref().map_or(Standing::Admitted, |c| c.standing);
        let check = StandingCheck {
            standing,
            checked_at: now,
            verified_at: last
                .as_ref()
                .map_or(now, |c| c.verified_at.max(c.checked_at)),
            ..last
                .clone()
                .unwrap_or_else(|| StandingCheck::new(standing, now, now))
        };
        standing::put(app.store.as_ref(), user, &check).await?;
        return Ok((verdict(standing), PersonFacts::of(Some(&check))));
    };
    match ask_github(app, user, &grant, &needs.questions).await {
        Ok(answer) => {
            let check = StandingCheck {
                standing: match answer {
                    Answer::Admitted(_) => Standing::Admitted,
                    Answer::TokenBroken | Answer::Lost => Standing::TokenBroken,
                },
                checked_at: now,
                verified_at: now,
                login: Some(grant.login.as_str().to_owned()),
                memberships: match &answer {
                    Answer::Admitted(m) => m.clone(),
                    // No token to ask with: the memberships last known.
                    Answer::TokenBroken | Answer::Lost => {
                        PersonFacts::of(last.as_ref()).memberships
                    }
                },
                asked: match &answer {
                    Answer::Admitted(_) => needs.asked,
                    _ => last.as_ref().map(|c| c.asked.clone()).unwrap_or_default(),
                },
            };
            match answer {
                Answer::Admitted(_) => {
                    standing::put(app.store.as_ref(), user, &check).await?;
                    Ok((Verdict::Admitted, PersonFacts::of(Some(&check))))
                }
                Answer::TokenBroken => {
                    // Security state (grant marked broken): the next `tools/call` gets a
                    // reconnect link instead of the token; durable before this returns.
                    app.grants
                        .mark_broken(user, "GitHub no longer honours the token (standing check)")
                        .await?;
                    standing::put(app.store.as_ref(), user, &check).await?;
                    Ok((Verdict::TokenBroken, PersonFacts::of(Some(&check))))
                }
                Answer::Lost => {
                    // Security state (revocations): every token of the person is refused by
                    // the next request on any replica; each write durable before this returns.
                    lose_access(app, user).await?;
                    Ok((Verdict::Lost, PersonFacts::default()))
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "GitHub could not confirm a person's standing");
            let check = StandingCheck {
                standing: last.as_ref().map_or(Standing::Admitted, |c| c.standing),
                checked_at: now,
                // `verified_at` 0 when there never was an answer: nothing to stand on.
                verified_at: last
                    .as_ref()
                    .map_or(crate::clock::UnixTime(0), |c| c.verified_at),
                // The facts of the last answer stand with it.
                ..last.clone().unwrap_or_else(|| {
                    StandingCheck::new(Standing::Admitted, now, crate::clock::UnixTime(0))
                })
            };
            standing::put(app.store.as_ref(), user, &check).await?;
            let verdict = admission::stands_while_unreachable(policy, Some(&check), now)
                .map_or(Verdict::Unavailable, verdict);
            Ok((verdict, PersonFacts::of(Some(&check))))
        }
    }
}

fn verdict(s: Standing) -> Verdict {
    match s {
        Standing::Admitted => Verdict::Admitted,
        Standing::TokenBroken => Verdict::TokenBroken,
    }
}

/// What GitHub said about a person with a stored grant.
enum Answer {
    /// With their active memberships among the tool-call policy's questions.
    Admitted(Vec<String>),
    TokenBroken,
    Lost,
}

async fn ask_github(
    app: &App,
    user: &UserId,
    grant: &GrantRecord,
    questions: &[MembershipQuestion],
) -> Result<Answer, GitHubError> {
    let token = match app.grants.token_from(user, grant).await {
        Ok(t) => t,
        Err(GrantError::Broken | GrantError::Missing) => return Ok(Answer::TokenBroken),
        Err(GrantError::GitHub(e)) => return Err(e),
        Err(e) => return Err(GitHubError::Protocol(e.to_string())),
    };
    if !app.github.check_token(&token).await? {
        return Ok(Answer::TokenBroken);
    }
    let who = Identity {
        id: grant.github_id,
        login: grant.login.as_str(),
    };
    let answers = match ask(app, &token, who).await {
        Ok(a) => a,
        Err(GitHubError::Unauthorized) => return Ok(Answer::TokenBroken),
        Err(e) => return Err(e),
    };
    Ok(match admission::decide(&app.config.access, who, &answers) {
        Decision::Admitted(_) => {
            match policy_memberships(app, &token, who.login, questions, &answers).await {
                Ok(m) => Answer::Admitted(m),
                Err(GitHubError::Unauthorized) => Answer::TokenBroken,
                Err(e) => return Err(e),
            }
        }
        // The org now hides the membership behind SSO: reconnecting shows the SSO link.
        Decision::Refused(Refusal::SsoRequired { .. }) => Answer::TokenBroken,
        Decision::Refused(Refusal::Outside { .. }) => Answer::Lost,
    })
}

/// Revokes everything the person holds (`flows::revoke::everything_of`: every refresh family
/// with its access and backend tokens, their GitHub grant here and at GitHub, every agent
/// allowance) and forgets their standing. Audited as `access_lost` when anything was there.
async fn lose_access(app: &App, user: &UserId) -> Result<(), FlowError> {
    let revoked = super::revoke::everything_of(app, user).await?;
    standing::remove(app.store.as_ref(), user).await?;
    let had_grant = revoked.grant.github != GitHubRevocation::NoGrant;
    if revoked.families > 0 || had_grant || revoked.grant.allowances > 0 {
        app.audit
            .record(AuditEvent::AccessLost {
                user_id: user.clone(),
                families: revoked.families,
            })
            .await?;
    }
    Ok(())
}
