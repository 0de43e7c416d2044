//! Dynamic client registration (RFC 7591), with the registration policy and housekeeping.
//!
//! - Policy: open, initial access token (RFC 7591 §3, `Authorization: Bearer`), or closed.
//! - Reaping: a new registration is stored with an expiry of `unused_client_ttl_secs`; the
//!   first authorization code issued to it ([`mark_used`]) makes it permanent. The store's
//!   expiry sweep removes the rest, so an abandoned registration costs nothing after a day
//!   while a client that ever completed an authorization keeps its id for good (clients cache
//!   ids; deleting a used one strands them with "unknown client").
//! - Dedupe: clients that re-register on every reconnect send identical metadata from one IP.
//!   `store::client_dedupe` lists, per (client IP, canonical metadata), the registrations
//!   that are still unused. But a platform's users all send identical metadata from a few
//!   egress IPs, so a registration in that list may be someone's sign-up in progress: one
//!   younger than [`AUTHORIZATION_WINDOW_SECS`] is never removed. When another arrives, unused
//!   ones older than that are removed, oldest first, until fewer than `max_identical_per_ip`
//!   remain; if there is then room, the new one gets the usual `unused_client_ttl_secs`,
//!   otherwise (that many young identical ones exist) it is kept only for the authorization
//!   window. So at most `max_identical_per_ip` unused identical registrations per IP outlive
//!   the window, nobody's registration disappears while they sign in, and nothing is
//!   refused. Returning an existing registration instead was rejected: a confidential
//!   client's secret cannot be handed out again, and a client id would be shared between
//!   people. Used registrations never count and are never removed.
//! - A code is only issued to a registration that still exists ([`mark_used`] fails
//!   otherwise), so a registration reaped or deleted mid-authorization gets no code.
//! - Budget: with `policy = "open"`, a registration is first charged to the budgets of
//!   never-used registrations (its source's, its /48's, everyone's: `clients::budget`); one
//!   that does not fit is refused with 429 `slow_down` and stores nothing. Its first use, or
//!   its removal by dedupe, refunds the charge.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::{FlowError, pages};
use crate::app::App;
use crate::audit::{AuditEvent, aggregate};
use crate::bindings::consent_scope;
use crate::clients::RegistrationMode;
use crate::clients::budget::{self, BudgetError, SpentBudget};
use crate::ids::ClientId;
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant;
use crate::oauth::registration::{
    ApplicationType, ClientMetadata, RegistrationRequest, TokenAuthMethod,
};
use crate::store::client_dedupe;
use crate::store::clients::{self, MarkedUsed};
use crate::store::records::{ClientRecord, DedupeRecord};
use crate::store::{Step, encode};

/// Why the registration policy refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Registration is closed.
    Closed,
    /// An initial access token is required and none was sent.
    MissingToken,
    /// The initial access token sent is not the configured one.
    WrongToken,
}

impl Refusal {
    /// The reason as recorded in the audit trail.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Closed => "closed",
            Refusal::MissingToken => "missing_token",
            Refusal::WrongToken => "wrong_token",
        }
    }
}

/// How long a new registration is protected from dedupe: the consent transaction and the
/// GitHub state may each take ten minutes, plus ten for the client to open the browser after
/// registering.
pub const AUTHORIZATION_WINDOW_SECS: u64 = crate::bindings::browser_state::TXN_TTL_SECS
    + crate::bindings::browser_state::STATE_TTL_SECS
    + 600;

/// Whether the request carries the configured initial access token (the operator vouched for
/// the caller, so the per-IP rate limit does not apply).
pub fn vouched(mode: &RegistrationMode, authorization: Option<&str>) -> bool {
    matches!(mode, RegistrationMode::InitialAccessToken(_))
        && check_policy(mode, authorization).is_ok()
}

/// Applies the registration policy to the request's `Authorization` header.
pub fn check_policy(mode: &RegistrationMode, authorization: Option<&str>) -> Result<(), Refusal> {
    match mode {
        RegistrationMode::Open => Ok(()),
        RegistrationMode::Closed => Err(Refusal::Closed),
        RegistrationMode::InitialAccessToken(_) => {
            let Some(h) = authorization else {
                return Err(Refusal::MissingToken);
            };
            // RFC 6750 §2.1: the scheme is case-insensitive.
            let token = match h.split_once(' ') {
                Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim(),
                _ => return Err(Refusal::MissingToken),
            };
            if mode.token_matches(token) {
                Ok(())
            } else {
                Err(Refusal::WrongToken)
            }
        }
    }
}

/// The client IP (IPv6 by /64, as for rate limits) and the metadata in a canonical order, so
/// the same client re-registering lands on the same dedupe list (stored under its hash).
fn dedupe_identity(ip: Option<IpAddr>, meta: &ClientMetadata) -> String {
    let mut uris = meta.redirect_uris.clone();
    uris.sort();
    let mut grants = meta.grant_types.clone();
    grants.sort();
    let canonical = json!([
        ip.map(|i| crate::limits::bucket_key(i).to_string()),
        meta.client_name,
        uris,
        meta.auth_method.as_str(),
        grants,
        meta.scope.as_ref().map(|s| s.to_wire()),
        app_type(meta.application_type),
    ]);
    canonical.to_string()
}

fn app_type(t: ApplicationType) -> &'static str {
    match t {
        ApplicationType::Native => "native",
        ApplicationType::Web => "web",
    }
}

/// Most attempts at updating a contended dedupe index before giving up on it (the
/// registration itself is already stored, kept only for the authorization window).
const INDEX_ATTEMPTS: usize = 5;

/// Adds `new` to the dedupe list of `identity`, first removing unused registrations older than the
/// authorization window, oldest first, while `max` or more are listed (each only if still
/// unused at the moment of removal). True if fewer than `max` others remain, i.e. `new` may
/// be kept for the full unused-client lifetime.
async fn index_and_evict(
    app: &App,
    identity: &str,
    new: &ClientId,
    max: usize,
) -> Result<bool, FlowError> {
    let now = app.clock.now();
    let expires = Some(now.plus(app.config.registration.unused_client_ttl_secs));
    let store = app.store.as_ref();
    let room = client_dedupe::update(store, identity, INDEX_ATTEMPTS, move |current| async move {
        let mut live = Vec::new();
        for id in current
            .as_ref()
            .map(|c| c.value.clients.as_slice())
            .unwrap_or_default()
        {
            if let Some(reg) = clients::unused(store, id).await? {
                // A record that does not decode is not protected: removing it loses nothing.
                let young = reg
                    .registered_at()
                    .is_some_and(|at| now.since(at) < AUTHORIZATION_WINDOW_SECS);
                live.push((id.clone(), reg, young));
            }
        }
        while live.len() >= max {
            // Oldest first; the young are someone's sign-up in progress and stay.
            let Some(i) = live.iter().position(|(_, _, young)| !young) else {
                break;
            };
            let (old, reg, _) = live.remove(i);
            // Removed only if still exactly as read: an authorization that just used it wins.
            if reg.evict(store).await? {
                tracing::info!(client_id = %old, "removed an unused identical registration");
                // It no longer holds any of the never-used budgets (once: a repeat finds no
                // charge).
                budget::refund(store, &old, now).await?;
            }
        }
        let room = live.len() < max;
        let mut clients: Vec<ClientId> = live.into_iter().map(|(id, _, _)| id).collect();
        // Without room, `new` lives only for the authorization window unless it gets a code
        // (and a used registration is never evicted), so it need not be listed. That keeps
        // the list, and the reads each registration makes, at `max`: listing every young one
        // made a flood from one egress IP re-read thousands per registration.
        if room {
            clients.push(new.clone());
        }
        Ok::<_, FlowError>(Step::PutUntil(DedupeRecord { clients }, expires, room))
    })
    .await?;
    Ok(room.unwrap_or_else(|| {
        tracing::warn!("registration dedupe index contended; left as is");
        false
    }))
}

/// Marks a dynamic registration as used (its first authorization code is about to be
/// issued), so it is never reaped or evicted. Fails with the unknown-client page if the
/// registration is gone (reaped, evicted or deleted since the authorization began): no code
/// may be issued to a client that no longer exists. Other kinds of clients are left alone.
pub async fn mark_used(app: &App, client_id: &ClientId) -> Result<(), FlowError> {
    if !client_id.as_str().starts_with(grant::CLIENT_PREFIX) {
        return Ok(());
    }
    match clients::mark_used(app.store.as_ref(), client_id, INDEX_ATTEMPTS).await? {
        Some(MarkedUsed::Made) => {
            // Used: it leaves the budgets of never-used registrations. A failure here only
            // leaves the charge until it ends (the safe side), so it does not stop the code.
            if let Err(e) = budget::refund(app.store.as_ref(), client_id, app.clock.now()).await {
                tracing::warn!(%client_id, error = %e, "could not refund a used registration's budget charge");
            }
            Ok(())
        }
        Some(MarkedUsed::Kept) => Ok(()),
        Some(MarkedUsed::Gone) => {
            tracing::info!(%client_id, "authorization finished for a registration that is gone; no code issued");
            Err(FlowError::Page(pages::UNKNOWN_CLIENT))
        }
        None => Err(OAuthError::new(ErrorCode::ServerError, "client record contended").into()),
    }
}

/// Registers a client from a JSON body; returns the RFC 7591 §3.2.1 response. `ip` is the
/// client IP from `http::client_ip`, if known.
pub async fn register(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    body: &[u8],
) -> Result<Value, FlowError> {
    let policy = &app.config.registration;
    if let Err(refusal) = check_policy(&policy.mode, authorization) {
        // Anonymous: counted per source and minute (`audit::aggregate`), not stored one by one.
        app.audit.refused(match refusal {
            Refusal::Closed => aggregate::Refusal::RegistrationClosed,
            Refusal::MissingToken => aggregate::Refusal::RegistrationMissingToken,
            Refusal::WrongToken => aggregate::Refusal::RegistrationWrongToken,
        });
        return Err(FlowError::RegistrationRefused(refusal));
    }
    let req: RegistrationRequest = serde_json::from_slice(body).map_err(|_| {
        OAuthError::new(
            ErrorCode::InvalidClientMetadata,
            "the body must be a JSON object of client metadata",
        )
    })?;
    let mut meta = req.validate(&app.supported_scopes())?;
    // A scope outside `[github] scopes` was refused above; any other is recorded (and
    // answered) as the whole set, which is what every consent is for.
    meta.scope = consent_scope::registered(meta.scope.as_ref(), &app.offered_scopes);
    let now = app.clock.now();
    let client_id = grant::new_client_id()?;
    let secret = match meta.auth_method {
        TokenAuthMethod::None => None,
        _ => Some(grant::new_client_secret()?),
    };
    let record = ClientRecord {
        client_id: client_id.clone(),
        client_name: meta.client_name.clone(),
        redirect_uris: meta.redirect_uris.clone(),
        auth_method: meta.auth_method,
        secret_hash: secret.as_ref().map(|s| s.hash()),
        grant_types: meta.grant_types.clone(),
        scope: meta.scope.clone(),
        application_type: meta.application_type,
        registered_at: now,
    };
    // Not vouched for by an initial access token: charged to the budgets of never-used
    // registrations before anything is stored (durable with the rest before the 201).
    let event = AuditEvent::ClientRegistered {
        client_id: client_id.clone(),
        client_name: meta.client_name.clone(),
        redirect_uris: meta.redirect_uris.clone(),
        source: "dynamic",
        ip,
    };
    if matches!(policy.mode, RegistrationMode::Open) {
        let size = |bytes: Vec<u8>| u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        let bytes = budget::charged_bytes(size(encode(&record)?), size(encode(&event)?), ip)?;
        let charged = budget::charge(
            app.store.as_ref(),
            &policy.unused,
            now,
            ip,
            &client_id,
            bytes,
            now.plus(policy.unused_client_ttl_secs),
        )
        .await;
        match charged {
            Ok(()) => {}
            Err(BudgetError::Spent(spent)) => {
                // Anonymous: counted per source and minute, like the policy's refusals.
                app.audit.refused(match spent.budget {
                    SpentBudget::Source | SpentBudget::Net => {
                        aggregate::Refusal::RegistrationBudgetSource
                    }
                    SpentBudget::Everyone => aggregate::Refusal::RegistrationBudgetEveryone,
                });
                return Err(FlowError::RegistrationBudget(spent));
            }
            Err(BudgetError::Contended) => {
                return Err(OAuthError::new(
                    ErrorCode::TemporarilyUnavailable,
                    "too many registrations at once; retry",
                )
                .into());
            }
            Err(BudgetError::Store(e)) => return Err(e.into()),
        }
    }
    // Stored first for the authorization window only; extended below if dedupe has room.
    let Some(stored) = clients::insert_unused(
        app.store.as_ref(),
        record,
        now.plus(AUTHORIZATION_WINDOW_SECS.min(policy.unused_client_ttl_secs)),
    )
    .await?
    else {
        return Err(OAuthError::new(ErrorCode::ServerError, "client id collision").into());
    };
    let room = index_and_evict(
        app,
        &dedupe_identity(ip, &meta),
        &client_id,
        usize::try_from(policy.max_identical_per_ip).unwrap_or(usize::MAX),
    )
    .await?;
    if room {
        // Unchanged unless a code was issued to it meanwhile, which made it permanent.
        stored
            .set_expiry(
                app.store.as_ref(),
                Some(now.plus(policy.unused_client_ttl_secs)),
            )
            .await?;
    }
    app.audit.record(event).await?;
    let mut body = json!({
        "client_id": client_id.as_str(),
        "client_id_issued_at": now.0,
        "redirect_uris": meta.redirect_uris,
        "token_endpoint_auth_method": meta.auth_method.as_str(),
        "grant_types": meta.grant_types,
        "response_types": ["code"],
        "application_type": app_type(meta.application_type),
    });
    if let Some(obj) = body.as_object_mut() {
        if let Some(name) = &meta.client_name {
            obj.insert("client_name".into(), json!(name));
        }
        if let Some(scope) = &meta.scope {
            obj.insert("scope".into(), json!(scope.to_wire()));
        }
        if let Some(s) = &secret {
            obj.insert("client_secret".into(), json!(s.secret()));
            obj.insert("client_secret_expires_at".into(), json!(0));
        }
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::InitialAccessToken;
    use std::sync::Arc;

    #[test]
    fn policy_decisions() {
        assert_eq!(check_policy(&RegistrationMode::Open, None), Ok(()));
        assert_eq!(
            check_policy(&RegistrationMode::Closed, Some("Bearer x")),
            Err(Refusal::Closed)
        );
        let t = "t".repeat(40);
        let m = RegistrationMode::InitialAccessToken(Arc::new(InitialAccessToken::new(t.clone())));
        assert_eq!(check_policy(&m, None), Err(Refusal::MissingToken));
        assert_eq!(
            check_policy(&m, Some(&format!("Basic {t}"))),
            Err(Refusal::MissingToken)
        );
        assert_eq!(
            check_policy(&m, Some("Bearer wrong")),
            Err(Refusal::WrongToken)
        );
        assert_eq!(check_policy(&m, Some(&format!("bearer {t}"))), Ok(()));
    }
}
