//! Whether a person's GitHub access can serve an agent right now, and the allowances that say
//! which agents may use it. No GitHub call is needed to decide (an expiring GitHub App token
//! is refreshed single-flight by `github::grants` only when it is about to be used).

use std::sync::Arc;

use super::{FlowError, pages};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::consent_scope::{self, WithinConsent};
use crate::github::client::GitHubTokens;
use crate::github::grants::{GrantError, GrantStatus};
use crate::ids::{ClientId, GitHubToken, UserId};
use crate::oauth::scope::ScopeSet;
use crate::store::allowances;
use crate::store::records::{AllowanceRecord, GrantRecord, LinkKind};

/// The answer.
#[derive(Debug)]
pub enum Access {
    /// Usable: the person's GitHub token.
    Ready(GitHubToken),
    /// The person must act first.
    Needs(LinkKind),
}

/// Lets an agent use the person's GitHub account with `scopes` (added to what it had).
pub async fn allow(
    app: &App,
    user: &UserId,
    client: &ClientId,
    scopes: &ScopeSet,
) -> Result<(), FlowError> {
    let previous = allowances::get(app.store.as_ref(), user, client).await?;
    let union = match previous {
        Some(p) => ScopeSet::from_list(p.scopes.iter().chain(scopes.iter()).map(str::to_owned)),
        None => scopes.clone(),
    };
    let rec = AllowanceRecord {
        user_id: user.clone(),
        client_id: client.clone(),
        scopes: union,
        granted_at: app.clock.now(),
    };
    allowances::put(app.store.as_ref(), &rec).await?;
    Ok(())
}

/// Withdraws an agent's permission; returns whether it had one.
pub async fn withdraw(app: &App, user: &UserId, client: &ClientId) -> Result<bool, FlowError> {
    Ok(allowances::remove(app.store.as_ref(), user, client).await?)
}

/// Withdraws every agent's permission to use the person's GitHub account (the grant is being
/// forgotten); returns how many there were.
pub async fn withdraw_all_of(app: &App, user: &UserId) -> Result<usize, FlowError> {
    Ok(allowances::remove_of_user(app.store.as_ref(), user).await?)
}

/// Withdraws the permission of `client` from everyone (the client is being deleted); returns
/// how many people had given it.
pub async fn withdraw_everywhere(app: &App, client: &ClientId) -> Result<usize, FlowError> {
    Ok(allowances::remove_of_client(app.store.as_ref(), client).await?)
}

/// The agents a person allowed.
pub async fn allowances(app: &App, user: &UserId) -> Result<Vec<AllowanceRecord>, FlowError> {
    Ok(allowances::of_user(app.store.as_ref(), user).await?)
}

/// Decides, for `client` acting for `user` with `scopes`, whether GitHub access is ready.
pub async fn for_agent(
    app: &App,
    user: &UserId,
    client: &ClientId,
    scopes: &ScopeSet,
) -> Result<Access, FlowError> {
    // One read of the grant serves both the status and the token, and it is made together
    // with the allowance's (a `/mcp` call is hot: one round trip on PostgreSQL, not two).
    let (grant, allowance) = allowances::with_grant(app.store.as_ref(), user, client).await?;
    for_agent_from(
        app,
        user,
        scopes,
        grant.map(Arc::new),
        allowance.map(Arc::new),
    )
    .await
}

/// [`for_agent`] from the grant and allowance the caller read just now (an `/mcp` request
/// reads them with the other records it needs, `store::call_records`).
pub async fn for_agent_from(
    app: &App,
    user: &UserId,
    scopes: &ScopeSet,
    grant: Option<Arc<GrantRecord>>,
    allowance: Option<Arc<AllowanceRecord>>,
) -> Result<Access, FlowError> {
    let grant = match (app.grants.status_of(grant.as_deref()), grant) {
        (GrantStatus::Usable, Some(g)) => g,
        (GrantStatus::Broken, _) => return Ok(Access::Needs(LinkKind::Reconnect)),
        _ => return Ok(Access::Needs(LinkKind::Connect)),
    };
    if !allowance.is_some_and(|a| a.scopes.covers(scopes)) {
        return Ok(Access::Needs(LinkKind::Allow));
    }
    // Never hand out a token with more than this token's consent (a grant stored before the
    // operator narrowed `[github] scopes`, or before every consent was for the whole set):
    // the person reconnects, and the callback's check then holds.
    if let Err(e) = consent_scope::check_github_token(scopes, &grant.scopes) {
        tracing::warn!(user = %user.as_str(), error = %e, "stored GitHub grant exceeds the consent; not handed out");
        return Ok(Access::Needs(LinkKind::Reconnect));
    }
    // Only now, with the agent allowed, may an expiring token be refreshed.
    match app.grants.token_from(user, &grant).await {
        Ok(t) => Ok(Access::Ready(t)),
        Err(GrantError::Missing) => Ok(Access::Needs(LinkKind::Connect)),
        Err(GrantError::Broken) => Ok(Access::Needs(LinkKind::Reconnect)),
        Err(e) => Err(e.into()),
    }
}

/// The check before a GitHub token the person just obtained is stored (the authorization
/// callback, a connect link's callback): the scopes GitHub reported for it must be within
/// `consented` (`bindings::consent_scope`). Otherwise the token is revoked at GitHub, the
/// callback refusal is audited, nothing is stored, and the person sees a page saying why.
pub async fn within_consent(
    app: &App,
    user: &UserId,
    consented: &ScopeSet,
    tokens: &GitHubTokens,
) -> Result<WithinConsent, FlowError> {
    match consent_scope::check_github_token(consented, &tokens.scopes) {
        Ok(within) => Ok(within),
        Err(e) => {
            tracing::warn!(user = %user.as_str(), error = %e, "GitHub token refused: scopes beyond the consent");
            app.github.delete_token(&tokens.access_token).await;
            app.audit
                .record(AuditEvent::CallbackRejected {
                    reason: SCOPES_EXCEED_CONSENT.to_owned(),
                })
                .await?;
            Err(FlowError::Page(pages::GITHUB_SCOPES_EXCEED_CONSENT))
        }
    }
}

/// The audit reason of that refusal (a fixed word: it becomes a metric label).
pub const SCOPES_EXCEED_CONSENT: &str = "github_scopes_exceed_consent";

/// The sentence shown to the person (through the agent), naming the agent and the action.
pub fn message(kind: LinkKind, agent: &str) -> String {
    match kind {
        LinkKind::Connect => {
            format!("Open this link to connect your GitHub account and let {agent} use it.")
        }
        LinkKind::Allow => format!("Open this link to let {agent} use your GitHub account."),
        LinkKind::Reconnect => format!(
            "GitHub stopped accepting this server's access to your account. Open this link to reconnect it for {agent}."
        ),
    }
}
