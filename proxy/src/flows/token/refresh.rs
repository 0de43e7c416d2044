//! The refresh grant (OAuth 2.1 §4.3): rotation with a grace window for the token just
//! replaced, branches for stale copies of the family's own client (`[tokens] refresh_reuse`),
//! reuse detection, and the checks a refresh repeats (the family's client, audience and
//! scopes, the person's consent and standing). The decision is `oauth::grant::decide`; this
//! module reads the family, applies the decision with one compare-and-swap, and mints.
//!
//! The branch a rotation or fork used keeps who used it (client IP, bounded `User-Agent`),
//! for the account page and for the two-networks alert (`audit::detect::branch_network_alert`),
//! which is decided in the same compare-and-swap so that it fires once per family and window
//! whichever replica serves the refresh.

use super::{
    CAS_RETRIES, INVALID_GRANT, audit_best_effort, family_expiry, mint_access, revoke_family,
};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::audit::detect::{self, BranchNetworkFacts, BranchUse};
use crate::bindings::audience;
use crate::bindings::consent_registry;
use crate::bindings::consent_scope;
use crate::clock::UnixTime;
use crate::crypto;
use crate::flows::FlowError;
use crate::flows::admission::Verdict;
use crate::ids::{FamilyId, RefreshToken, UserId};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::{
    self, Branch, Minted, Presenter, RefreshDecision, ReuseCase, TokenResponse,
};
use crate::oauth::scope::ScopeSet;
use crate::store::records::{ClientRecord, ConsentRecord, FamilyRecord};
use crate::store::{Entry, Held, Step, families};

/// What the family's compare-and-swap settled, for the work after it.
enum Refreshed {
    /// An old token was presented: the family is revoked now.
    Reused(FamilyRecord, ReuseCase),
    /// The presented token stands: these tokens go out.
    Issued {
        /// The family as read.
        fam: FamilyRecord,
        /// The next-generation refresh token (the same one again for a replay).
        refresh: RefreshToken,
        /// The scopes of this refresh.
        scopes: ScopeSet,
        /// When it was decided.
        now: UnixTime,
        /// A replay of the previous token inside the grace window.
        grace: bool,
        /// The branch whose token goes out.
        branch: u32,
        /// A fork: the family's branches after it, and how many of them are live.
        branched: Option<(usize, usize)>,
        /// The two-networks alert this use raised (its quiet period is in the family now).
        alert: Option<Box<AuditEvent>>,
        /// The person's consents for the client, as the decision read them.
        consents: Vec<Held<ConsentRecord>>,
    },
}

/// The refresh grant for an authenticated client.
pub(super) async fn refresh(
    app: &App,
    client: &ClientRecord,
    refresh_token: &RefreshToken,
    scope: Option<&str>,
    resource: Option<&str>,
    who: &Presenter,
) -> Result<TokenResponse, FlowError> {
    if !client.grant_types.iter().any(|g| g == "refresh_token") {
        return Err(OAuthError::new(
            ErrorCode::UnauthorizedClient,
            "this client did not register the refresh_token grant",
        )
        .into());
    }
    let family_id = grant::refresh_family(refresh_token).ok_or(INVALID_GRANT)?;
    let presented = &refresh_token.hash();
    // The step below copies these references in (it runs once per attempt).
    let family_id = &family_id;
    // Every check runs again on a retry: the family may have changed in between (rotated by
    // the request we raced, which may make this one its replay).
    let settled = families::update(
        app.store.as_ref(),
        family_id,
        CAS_RETRIES,
        move |current| async move {
            let Some(Entry { value: fam, .. }) = current else {
                return Err(FlowError::from(INVALID_GRANT));
            };
            if fam.client_id != client.client_id {
                return Err(INVALID_GRANT.into());
            }
            audience::recheck(&fam.resource, resource)?;
            let scopes = consent_scope::at_refresh(scope, &fam.scopes)?;
            let now = app.clock.now();
            let rules = app.config.tokens.refresh_rules_for(&fam.client_id);
            let decision = grant::decide_for(&fam, presented, now, &rules, who);
            match decision {
                RefreshDecision::Revoked | RefreshDecision::Unknown => Err(INVALID_GRANT.into()),
                RefreshDecision::Reuse(case) => {
                    let dead = grant::apply(&fam, decision, presented, None, now, &rules);
                    Ok(Step::Put(dead, Refreshed::Reused(fam, case)))
                }
                RefreshDecision::Replay { .. }
                | RefreshDecision::Rotate { .. }
                | RefreshDecision::Fork => {
                    // The person may have revoked this client while the family lived. The
                    // consents read here are the ones noted as used once the tokens are out.
                    let consents = consent_registry::held_for_client(
                        app.store.as_ref(),
                        &fam.user_id,
                        &fam.client_id,
                    )
                    .await?;
                    if consents.is_empty() {
                        revoke_family(app, family_id).await?;
                        return Err(INVALID_GRANT.into());
                    }
                    // The person's standing (`[access]`), asked again when it is due.
                    refresh_standing(app, &fam.user_id).await?;
                    let Some(branch) = decision.branch_in(&fam) else {
                        return Err(INVALID_GRANT.into());
                    };
                    let grace = matches!(decision, RefreshDecision::Replay { .. });
                    if grace {
                        // The same token again (the rotation's next generation, or the fork's
                        // first token): nothing is minted twice.
                        let Some(sealed) = fam.replay_of(decision, presented) else {
                            return Err(INVALID_GRANT.into());
                        };
                        let refresh = open_replay(app, family_id, sealed)?;
                        return Ok(Step::Keep(Refreshed::Issued {
                            fam,
                            refresh,
                            scopes,
                            now,
                            grace,
                            branch,
                            branched: None,
                            alert: None,
                            consents,
                        }));
                    }
                    let refresh = grant::new_refresh_token(family_id)?;
                    let minted = Minted {
                        hash: refresh.hash(),
                        sealed: seal_replay(app, family_id, &refresh)?,
                    };
                    let mut next =
                        grant::apply(&fam, decision, presented, Some(minted), now, &rules);
                    next.note_use(branch, who, now);
                    let alert = network_alert(app, &next, branch, now, rules.branch_idle_secs)
                        .map(Box::new);
                    if alert.is_some() {
                        next.network_alert_at = Some(now);
                    }
                    let branched = (decision == RefreshDecision::Fork).then(|| {
                        (
                            next.branches.len(),
                            next.live_branches(now, rules.branch_idle_secs),
                        )
                    });
                    // Written only if the family is still as read; lost to another rotation
                    // or fork, `update` reads it again (this request may now be its replay).
                    let expires = family_expiry(app, fam.created_at, now);
                    Ok(Step::PutUntil(
                        next,
                        Some(expires),
                        Refreshed::Issued {
                            fam,
                            refresh,
                            scopes,
                            now,
                            grace,
                            branch,
                            branched,
                            alert,
                            consents,
                        },
                    ))
                }
            }
        },
    )
    .await?
    .ok_or_else(|| {
        OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "too many concurrent refreshes; retry",
        )
    })?;
    match settled {
        Refreshed::Reused(fam, case) => {
            app.audit
                .record(AuditEvent::RefreshReuse {
                    user_id: fam.user_id.clone(),
                    client_id: fam.client_id.clone(),
                    family_id: family_id.clone(),
                    case: case.name(),
                })
                .await?;
            Err(INVALID_GRANT.into())
        }
        Refreshed::Issued {
            fam,
            refresh,
            scopes,
            now,
            grace,
            branch,
            branched,
            alert,
            consents,
        } => {
            let network = who.network().map(|n| n.to_string());
            if let Some((branches, live)) = branched {
                // The trail of forks is what bounds a thief with a recent copy (SECURITY.md,
                // "Refresh rotation"): a fork is answered only once its event is stored (if
                // that write fails, the branch exists unrecorded, as after a crash here).
                app.audit
                    .record(AuditEvent::RefreshBranched {
                        user_id: fam.user_id.clone(),
                        client_id: fam.client_id.clone(),
                        family_id: family_id.clone(),
                        branches,
                        live,
                        branch,
                        ip: who.ip,
                        network: network.clone(),
                        user_agent: who.user_agent.clone(),
                    })
                    .await?;
            }
            // Likewise the alert: its quiet period is already in the family.
            if let Some(alert) = alert {
                app.audit.record(*alert).await?;
            }
            let (access, expires_in) = mint_access(app, &fam, branch, &scopes).await?;
            // The consents the decision read, noted as used: one revoked since is not
            // written back (each swap expects it as read).
            consent_registry::touch_held(app.store.as_ref(), now, consents).await?;
            audit_best_effort(
                app,
                AuditEvent::TokenRefreshed {
                    user_id: fam.user_id.clone(),
                    client_id: client.client_id.clone(),
                    family_id: family_id.clone(),
                    grace,
                    branch,
                    ip: who.ip,
                    network,
                    user_agent: who.user_agent.clone(),
                },
            )
            .await;
            Ok(TokenResponse {
                access_token: access,
                token_type: "Bearer",
                expires_in,
                refresh_token: Some(refresh.secret().to_owned()),
                scope: scopes.to_wire(),
            })
        }
    }
}

/// A branch's last use, if its address is known.
fn branch_use(b: &Branch) -> Option<BranchUse> {
    let seen = b.seen.as_ref()?;
    let ip = seen.ip?;
    Some(BranchUse {
        branch: b.id,
        at: b.rotated_at,
        ip,
        network: grant::network_of(ip),
        network_since: seen.network_since,
        user_agent: seen.user_agent.clone(),
    })
}

/// The two-networks alert for a use of `branch` of `fam` (as it will be written), if the rule
/// fires: the other branches it compares with are the live ones (used within `live_secs`).
fn network_alert(
    app: &App,
    fam: &FamilyRecord,
    branch: u32,
    now: UnixTime,
    live_secs: u64,
) -> Option<AuditEvent> {
    let used = fam
        .branches
        .iter()
        .find(|b| b.id == branch)
        .and_then(branch_use)?;
    let others = fam
        .branches
        .iter()
        .filter(|b| b.id != branch && now.since(b.rotated_at) <= live_secs)
        .filter_map(branch_use)
        .collect();
    detect::branch_network_alert(
        &app.config.alerts,
        &BranchNetworkFacts {
            user_id: fam.user_id.clone(),
            client_id: fam.client_id.clone(),
            family_id: fam.family_id.clone(),
            used,
            others,
            last_alert: fam.network_alert_at,
        },
        now,
    )
}

fn replay_aad(family: &FamilyId) -> Vec<u8> {
    format!("mcp-oauth-proxy/refresh-replay/{}", family.as_str()).into_bytes()
}

/// Seals the next-generation refresh token for replays inside the grace window.
fn seal_replay(app: &App, family: &FamilyId, token: &RefreshToken) -> Result<String, FlowError> {
    Ok(crypto::b64url(
        &app.keys
            .token_encryption
            .seal(token.secret().as_bytes(), &replay_aad(family))?,
    ))
}

fn open_replay(app: &App, family: &FamilyId, sealed: &str) -> Result<RefreshToken, FlowError> {
    let bytes = crypto::b64url_decode(sealed).ok_or(INVALID_GRANT)?;
    let plain = app
        .keys
        .token_encryption
        .open(&bytes, &replay_aad(family))
        .map_err(|_| INVALID_GRANT)?;
    Ok(RefreshToken::new(
        String::from_utf8(plain).map_err(|_| INVALID_GRANT)?,
    ))
}

/// Refuses a refresh for a person who no longer belongs (their tokens were just revoked) or
/// whose standing GitHub has not confirmed for longer than `[access]` allows.
async fn refresh_standing(app: &App, user: &UserId) -> Result<(), FlowError> {
    match crate::flows::admission::standing(app, user).await?.0 {
        Verdict::Admitted | Verdict::TokenBroken => Ok(()),
        Verdict::Lost => Err(INVALID_GRANT.into()),
        Verdict::Unavailable => Err(OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "GitHub cannot confirm the person's access right now; try again later",
        )
        .into()),
    }
}
