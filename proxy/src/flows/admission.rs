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

use super::{FlowError, NotAdmitted};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::admission::{
    self, Admitted, Decision, Identity, Question, Recheck, Refusal, Standing, StandingCheck,
};
use crate::github::client::{GitHubError, GitHubUser};
use crate::github::grants::{GitHubRevocation, GrantError};
use crate::ids::{GitHubToken, UserId};
use crate::store::records::GrantRecord;
use crate::store::standing;

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
            let now = app.clock.now();
            let check = StandingCheck {
                standing: Standing::Admitted,
                checked_at: now,
                verified_at: now,
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
pub async fn standing(app: &App, user: &UserId) -> Result<Verdict, FlowError> {
    let now = app.clock.now();
    let policy = &app.config.access;
    let last = standing::get(app.store.as_ref(), user).await?;
    match admission::recheck(policy, last.as_ref(), now) {
        Recheck::Current(s) => return Ok(verdict(s)),
        Recheck::Unverifiable => return Ok(Verdict::Unavailable),
        Recheck::Due => {}
    }
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
        let standing = last.map_or(Standing::Admitted, |c| c.standing);
        let check = StandingCheck {
            standing,
            checked_at: now,
            verified_at: last.map_or(now, |c| c.verified_at.max(c.checked_at)),
        };
        standing::put(app.store.as_ref(), user, &check).await?;
        return Ok(verdict(standing));
    };
    match ask_github(app, user, &grant).await {
        Ok(answer) => {
            let check = StandingCheck {
                standing: match answer {
                    Answer::Admitted => Standing::Admitted,
                    Answer::TokenBroken | Answer::Lost => Standing::TokenBroken,
                },
                checked_at: now,
                verified_at: now,
            };
            match answer {
                Answer::Admitted => {
                    standing::put(app.store.as_ref(), user, &check).await?;
                    Ok(Verdict::Admitted)
                }
                Answer::TokenBroken => {
                    // Security state (grant marked broken): the next `tools/call` gets a
                    // reconnect link instead of the token; durable before this returns.
                    app.grants
                        .mark_broken(user, "GitHub no longer honours the token (standing check)")
                        .await?;
                    standing::put(app.store.as_ref(), user, &check).await?;
                    Ok(Verdict::TokenBroken)
                }
                Answer::Lost => {
                    // Security state (revocations): every token of the person is refused by
                    // the next request on any replica; each write durable before this returns.
                    lose_access(app, user).await?;
                    Ok(Verdict::Lost)
                }
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "GitHub could not confirm a person's standing");
            let check = StandingCheck {
                standing: last.map_or(Standing::Admitted, |c| c.standing),
                checked_at: now,
                // `verified_at` 0 when there never was an answer: nothing to stand on.
                verified_at: last.map_or(crate::clock::UnixTime(0), |c| c.verified_at),
            };
            standing::put(app.store.as_ref(), user, &check).await?;
            Ok(
                admission::stands_while_unreachable(policy, Some(&check), now)
                    .map_or(Verdict::Unavailable, verdict),
            )
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
    Admitted,
    TokenBroken,
    Lost,
}

async fn ask_github(app: &App, user: &UserId, grant: &GrantRecord) -> Result<Answer, GitHubError> {
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
        Decision::Admitted(_) => Answer::Admitted,
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
