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

use super::{CAS_RETRIES, FlowError, github_access};
use crate::app::App;
use crate::bindings::consent_registry;
use crate::github::grants::GitHubRevocation;
use crate::ids::{ClientId, FamilyId, UserId};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant;
use crate::store::{Entry, Step, families};

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
    let families = revoke_user_client(app, user, client).await?;
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
    for family in families_of(app, user).await? {
        if revoke_family(app, &family).await? {
            families += 1;
        }
    }
    // Held calls and approvals not yet used: none may outlive the person's access.
    crate::store::tool_approvals::remove_of_user(app.store.as_ref(), user).await?;
    Ok(PersonRevoked { grant, families })
}

/// Every refresh family a person holds, for all clients.
pub async fn families_of(app: &App, user: &UserId) -> Result<Vec<FamilyId>, FlowError> {
    Ok(families::of_user(app.store.as_ref(), user).await?)
}

/// Marks a family revoked (its refresh and access tokens stop working at once). Returns
/// whether this call revoked it.
pub async fn revoke_family(app: &App, family_id: &FamilyId) -> Result<bool, FlowError> {
    families::update(
        app.store.as_ref(),
        family_id,
        CAS_RETRIES,
        |current| async move {
            Ok::<_, FlowError>(match current {
                Some(Entry { mut value, .. }) if !value.revoked => {
                    value.revoke();
                    Step::Put(value, true)
                }
                // Gone, or revoked already.
                _ => Step::Keep(false),
            })
        },
    )
    .await?
    .ok_or_else(|| {
        OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "revocation contended; retry",
        )
        .into()
    })
}

/// What ending a branch did, for the account page's audit event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BranchEnded {
    /// The branch of this client's family ended (`true`: it was the last one, or one too many,
    /// and the whole family was revoked).
    Ended(ClientId, bool),
    /// The family is not the person's, is revoked or gone, or has no such branch: nothing
    /// changed (the three look alike to the caller).
    NotFound,
}

/// Ends one branch of a family `user` holds (`FamilyRecord::end_branch`): its refresh tokens
/// are forgotten and its access tokens refused at once; the family's other branches go on.
/// A family that is not `user`'s is left alone, as if it did not exist.
pub async fn end_branch(
    app: &App,
    user: &UserId,
    family_id: &FamilyId,
    branch: u32,
) -> Result<BranchEnded, FlowError> {
    families::update(
        app.store.as_ref(),
        family_id,
        CAS_RETRIES,
        |current| async move {
            Ok::<_, FlowError>(match current {
                Some(Entry { mut value, .. }) if &value.user_id == user => {
                    match value.end_branch(branch) {
                        grant::BranchEnd::NotFound => Step::Keep(BranchEnded::NotFound),
                        end => {
                            let client = value.client_id.clone();
                            let family_revoked = end == grant::BranchEnd::FamilyRevoked;
                            Step::Put(value, BranchEnded::Ended(client, family_revoked))
                        }
                    }
                }
                _ => Step::Keep(BranchEnded::NotFound),
            })
        },
    )
    .await?
    .ok_or_else(|| {
        OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "revocation contended; retry",
        )
        .into()
    })
}

/// Revokes every family a person holds for a client; returns how many.
pub async fn revoke_user_client(
    app: &App,
    user: &UserId,
    client: &ClientId,
) -> Result<usize, FlowError> {
    let mut n = 0;
    for fam in families::of_user_client(app.store.as_ref(), user, client).await? {
        if revoke_family(app, &fam).await? {
            n += 1;
        }
    }
    Ok(n)
}
