//! Revoking access, shared by the account page and the admin API so both do exactly the same
//! thing. What a revocation ends, in this order:
//!
//! 1. the consent, so nothing new can be authorized;
//! 2. every refresh family of the client for the person, which ends at once its access tokens
//!    at `/mcp` (`flows::access`) and every backend token minted from them at token exchange
//!    (`flows::exchange::subject_standing`: a backend token names its family);
//! 3. the agent allowance, so the client may not use the person's GitHub account even through
//!    a token issued later.
//!
//! Each write is durable before the response is sent (the browser routes flush once per
//! request, `http::durable`; the admin API's writes flush each). A new consent for the same
//! client starts a new family, so it never revives the old family's backend tokens.

use super::{FlowError, github_access, token};
use crate::app::App;
use crate::bindings::consent_registry;
use crate::github::grants::GitHubRevocation;
use crate::ids::{ClientId, UserId};

/// What revoking one client for one person ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRevoked {
    /// Consents forgotten.
    pub consents: usize,
    /// Refresh families revoked (with their access and backend tokens).
    pub families: usize,
    /// Whether the agent's GitHub allowance was withdrawn.
    pub allowance: bool,
}

impl ClientRevoked {
    /// Whether there was anything to revoke.
    pub fn anything(&self) -> bool {
        self.consents > 0 || self.families > 0 || self.allowance
    }
}

/// Revokes `client` for `user`: consent, families (tokens and backend tokens), allowance.
pub async fn client_for(
    app: &App,
    user: &UserId,
    client: &ClientId,
) -> Result<ClientRevoked, FlowError> {
    let consents = consent_registry::revoke_client(app.store.as_ref(), user, client).await?;
    let families = token::revoke_user_client(app, user, client).await?;
    let allowance = github_access::withdraw(app, user, client).await?;
    // Held calls and unused approvals of this agent: none may outlive its revocation (a
    // re-authorized client starts with nothing approved).
    crate::store::tool_approvals::remove_of_agent(app.store.as_ref(), user, client).await?;
    Ok(ClientRevoked {
        consents,
        families,
        allowance,
    })
}

/// What forgetting a person's GitHub grant did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantForgotten {
    /// What happened at GitHub.
    pub github: GitHubRevocation,
    /// Agent allowances withdrawn (a later connection starts with no agent allowed).
    pub allowances: usize,
}

/// Forgets the person's GitHub grant here and revokes it at GitHub, and withdraws every agent
/// allowance. Backend tokens stop exchanging at once: with no grant, exchange refuses with a
/// connect link; after a new connection, only agents allowed again may exchange.
pub async fn github_grant_of(app: &App, user: &UserId) -> Result<GrantForgotten, FlowError> {
    let github = app.grants.forget(user).await?;
    let allowances = github_access::withdraw_all_of(app, user).await?;
    Ok(GrantForgotten { github, allowances })
}

/// What revoking everything of one person ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonRevoked {
    /// Their GitHub grant and allowances.
    pub grant: GrantForgotten,
    /// Refresh families revoked (every client's access and backend tokens).
    pub families: usize,
}

/// Revokes everything a person holds: their GitHub grant (here and at GitHub), every agent
/// allowance and every refresh family of every client. The admin API's grant revoke and a
/// person who lost their standing (`flows::admission`) both take this one path.
pub async fn everything_of(app: &App, user: &UserId) -> Result<PersonRevoked, FlowError> {
    let grant = github_grant_of(app, user).await?;
    let mut families = 0;
    for family in token::families_of(app, user).await? {
        if token::revoke_family(app, &family).await? {
            families += 1;
        }
    }
    // Held calls and approvals not yet used: none may outlive the person's access.
    crate::store::tool_approvals::remove_of_user(app.store.as_ref(), user).await?;
    Ok(PersonRevoked { grant, families })
}
