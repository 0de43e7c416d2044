//! The authorization code grant (RFC 6749 §4.1.3, OAuth 2.1 §4.1.3): check the code, leave a
//! tombstone, take the code, start a refresh family.

use super::{
    CAS_RETRIES, INVALID_GRANT, audit_best_effort, family_expiry, mint_access, revoke_family,
};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::audience;
use crate::bindings::consent_registry;
use crate::flows::FlowError;
use crate::ids::{AuthCode, CodeVerifier};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::{self, Presenter, TokenResponse};
use crate::store::records::{ClientRecord, CodeRecord, FamilyRecord, UsedCodeRecord};
use crate::store::{Entry, Step, codes, families};

/// How long a redeemed code's tombstone is kept for reuse detection.
const USED_CODE_TTL_SECS: u64 = 600;

/// The authorization code grant. Every check runs before anything changes; then the first
/// redeemer leaves a tombstone and takes the code. Of concurrent redemptions exactly one
/// succeeds and the others change nothing; a redemption after the first has completed is a
/// replay of a leaked code and revokes what the first got (OAuth 2.1 §4.1.3). A revocation by
/// the person that lands while tokens are being minted is caught by the re-check at the end.
pub(super) async fn redeem_code(
    app: &App,
    client: &ClientRecord,
    code: &AuthCode,
    redirect_uri: Option<&str>,
    code_verifier: Option<&CodeVerifier>,
    resource: Option<&str>,
    who: &Presenter,
) -> Result<TokenResponse, FlowError> {
    let store = app.store.as_ref();
    let Some(rec) = codes::get(store, code).await? else {
        code_reused(app, code).await?;
        return Err(INVALID_GRANT.into());
    };
    if rec.client_id != client.client_id {
        return Err(INVALID_GRANT.into());
    }
    // RFC 6749 §4.1.3 (kept by OAuth 2.1 for OAuth 2.0 clients): when `/authorize` carried
    // `redirect_uri`, `/token` must carry the same one. Refused before anything changes: the
    // code stays where it was.
    match redirect_uri {
        Some(r) if r != rec.redirect_uri => {
            return Err(OAuthError::new(
                ErrorCode::InvalidGrant,
                "redirect_uri does not match the authorization request",
            )
            .into());
        }
        // A required parameter is missing (RFC 6749 §5.2 `invalid_request`).
        None if rec.redirect_uri_explicit => {
            return Err(OAuthError::new(
                ErrorCode::InvalidRequest,
                "redirect_uri is required: the authorization request included one",
            )
            .into());
        }
        _ => {}
    }
    audience::recheck(&rec.resource, resource)?;
    rec.code_challenge
        .verify(code_verifier.map(|v| v.secret()))?;
    if !consent_registry::exists_for_client(store, &rec.user_id, &rec.client_id).await? {
        // A valid code with no consent behind it: either the person revoked the client in
        // the last minute, or a code was minted without consent (confused deputy).
        audit_best_effort(
            app,
            crate::audit::detect::code_presented_without_consent(&rec.user_id, &rec.client_id),
        )
        .await;
        return Err(INVALID_GRANT.into());
    }
    let now = app.clock.now();
    let tomb = UsedCodeRecord {
        family_id: rec.family_id.clone(),
        completed: false,
    };
    if !codes::insert_used(store, code, &tomb, now.plus(USED_CODE_TTL_SECS)).await? {
        code_reused(app, code).await?;
        return Err(INVALID_GRANT.into());
    }
    if !codes::take(store, code).await? {
        return Err(INVALID_GRANT.into()); // expired between the read and the take
    }
    let resp = start_family(app, &rec, client, who).await?;
    mark_completed(app, code).await?;
    let consent_gone =
        !consent_registry::exists_for_client(store, &rec.user_id, &rec.client_id).await?;
    if consent_gone {
        revoke_family(app, &rec.family_id).await?;
        return Err(INVALID_GRANT.into());
    }
    audit_best_effort(
        app,
        AuditEvent::TokenIssued {
            user_id: rec.user_id.clone(),
            client_id: client.client_id.clone(),
            family_id: rec.family_id.clone(),
            code_id: rec.code_id.clone(),
        },
    )
    .await;
    Ok(resp)
}

async fn start_family(
    app: &App,
    code: &CodeRecord,
    client: &ClientRecord,
    who: &Presenter,
) -> Result<TokenResponse, FlowError> {
    let now = app.clock.now();
    let refresh = grant::new_refresh_token(&code.family_id)?;
    let mut fam = FamilyRecord::new(
        code.family_id.clone(),
        code.user_id.clone(),
        code.client_id.clone(),
        code.scopes.clone(),
        code.resource.clone(),
        refresh.hash(),
        now,
    );
    // Its first branch was started from here (the account page shows where).
    fam.note_use(0, who, now);
    let max = now.plus(app.config.tokens.refresh_max_lifetime_secs);
    // Index first: a crash between the two writes leaves a harmless index entry, never a
    // family the account page cannot find and revoke.
    let store = app.store.as_ref();
    families::index(store, &fam.user_id, &fam.client_id, &fam.family_id, max).await?;
    if !families::insert_new(store, &fam, family_expiry(app, now, now)).await? {
        // The family exists already: this code was redeemed before (its tombstone expired).
        return Err(INVALID_GRANT.into());
    }
    let (access, expires_in) = mint_access(app, &fam, 0, &code.scopes).await?;
    let wants_refresh = client.grant_types.iter().any(|g| g == "refresh_token");
    Ok(TokenResponse {
        access_token: access,
        token_type: "Bearer",
        expires_in,
        // Only clients that registered the refresh grant get a refresh token.
        refresh_token: wants_refresh.then(|| refresh.secret().to_owned()),
        scope: code.scopes.to_wire(),
    })
}

/// A code was presented again. Once the first redemption has completed, that is a replay:
/// revoke what it produced. While it is still in flight, the loser of the race just fails.
async fn code_reused(app: &App, code: &AuthCode) -> Result<(), FlowError> {
    let Some(used) = codes::used(app.store.as_ref(), code).await? else {
        return Ok(());
    };
    if used.completed && revoke_family(app, &used.family_id).await? {
        audit_best_effort(
            app,
            AuditEvent::CodeReuse {
                family_id: used.family_id,
            },
        )
        .await;
    }
    Ok(())
}

/// Notes on the tombstone that the first redemption issued its tokens (a later presentation
/// is then a replay). Left as is if it stays contended: the code is consumed either way.
async fn mark_completed(app: &App, code: &AuthCode) -> Result<(), FlowError> {
    codes::update_used(
        app.store.as_ref(),
        code,
        CAS_RETRIES,
        |current| async move {
            Ok::<_, FlowError>(match current {
                Some(Entry { mut value, .. }) => {
                    value.completed = true;
                    Step::Put(value, ())
                }
                None => Step::Keep(()),
            })
        },
    )
    .await?;
    Ok(())
}
