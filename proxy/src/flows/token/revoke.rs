//! Revocation: a refresh family (and with it its access tokens), one branch of a family (the
//! account page), a person's families for one client, and `POST /revoke` (RFC 7009).

use std::net::IpAddr;

use super::{CAS_RETRIES, authenticate_client};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::flows::FlowError;
use crate::ids::{AccessToken, ClientId, FamilyId, RefreshToken, UserId};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant;
use crate::oauth::request::Params;
use crate::store::{Entry, Step, access_tokens, families};

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

/// Handles `/revoke` (RFC 7009): 200 whether or not the token was valid.
pub async fn revoke(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    body: &str,
) -> Result<(), FlowError> {
    let p = Params::parse(body)?;
    let client = authenticate_client(app, authorization, ip, &p).await?;
    let token = p.require("token", "token is required")?;
    if let Some(rt) = token
        .strip_prefix(grant::REFRESH_PREFIX)
        .map(|_| RefreshToken::new(token))
    {
        let Some(family_id) = grant::refresh_family(&rt) else {
            return Ok(());
        };
        let Some(fam) = families::get(app.store.as_ref(), &family_id).await? else {
            return Ok(());
        };
        // A token that would still be honoured (a head, a replay, a stale copy that would
        // branch) is the holder's to revoke; its whole family ends.
        let valid = grant::decide(
            &fam,
            &rt.hash(),
            app.clock.now(),
            &app.config.tokens.refresh_rules_for(&fam.client_id),
        )
        .honoured();
        if fam.client_id == client.client_id && valid && revoke_family(app, &family_id).await? {
            app.audit
                .record(AuditEvent::TokenRevoked {
                    client_id: client.client_id,
                    kind: "refresh_token",
                })
                .await?;
        }
    } else if token.starts_with(grant::ACCESS_PREFIX) {
        let at = AccessToken::new(token);
        if let Some(rec) = access_tokens::get(app.store.as_ref(), &at).await?
            && rec.client_id == client.client_id
        {
            access_tokens::remove(app.store.as_ref(), &at).await?;
            app.audit
                .record(AuditEvent::TokenRevoked {
                    client_id: client.client_id,
                    kind: "access_token",
                })
                .await?;
        }
    }
    Ok(())
}
