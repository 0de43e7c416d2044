//! Checking an access token presented to this server's resource: a local lookup (no GitHub
//! call), then expiry, revocation (through its family, and the family's branch it was minted
//! on) and audience.

use std::sync::Arc;

use crate::app::App;
use crate::bindings::audience::{self, AudienceRejection, Audienced};
use crate::ids::AccessToken;
use crate::oauth::grant;
use crate::store::call_records::{self, CallRecords};
use crate::store::records::{AccessTokenRecord, FamilyRecord};
use crate::store::{StoreError, access_tokens, families};

/// How long an access token's record outlives its expiry, so that presenting it late is
/// reported as expired rather than unknown.
pub const EXPIRED_KEPT_SECS: u64 = 3600;

/// Why a token was refused (all map to 401 `invalid_token`; the reason goes to audit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRejection {
    /// Not a token this server issued (or expired long ago and swept).
    Unknown,
    /// Past its expiry.
    Expired,
    /// Its family was revoked.
    Revoked,
    /// Issued for another resource.
    WrongAudience,
}

/// The token's own record, unless it is not one of ours or has expired; `cached`: the
/// replica's cache may answer (`/mcp` only).
async fn token_record(
    app: &App,
    bearer: &str,
    cached: bool,
) -> Result<Result<Arc<AccessTokenRecord>, TokenRejection>, StoreError> {
    if !bearer.starts_with(grant::ACCESS_PREFIX) {
        return Ok(Err(TokenRejection::Unknown));
    }
    let token = AccessToken::new(bearer);
    let found = if cached {
        access_tokens::get_cached(app.store.as_ref(), &token).await?
    } else {
        access_tokens::get(app.store.as_ref(), &token)
            .await?
            .map(Arc::new)
    };
    let Some(rec) = found else {
        return Ok(Err(TokenRejection::Unknown));
    };
    if rec.expires_at <= app.clock.now() {
        return Ok(Err(TokenRejection::Expired));
    }
    Ok(Ok(rec))
}

/// Whether the token's family is revoked, or the branch it was minted on was ended.
fn revoked(family: &FamilyRecord, rec: &AccessTokenRecord) -> bool {
    family.revoked || rec.branch.is_some_and(|b| family.branch_ended(b))
}

/// [`authenticate`] for an `/mcp` request: the family is read together with the other records
/// the request needs (`store::call_records`: one statement after the token's on PostgreSQL),
/// which come back with the token. Both reads may be answered by the replica's cache, which
/// is exact (`store::cache`).
pub async fn authenticate_call(
    app: &App,
    bearer: &str,
) -> Result<Result<(Audienced<AccessTokenRecord>, CallRecords), TokenRejection>, StoreError> {
    let rec = match token_record(app, bearer, true).await? {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let records = call_records::read(
        app.store.as_ref(),
        &rec.family_id,
        &rec.user_id,
        &rec.client_id,
    )
    .await?;
    if records.family.as_ref().is_none_or(|f| revoked(f, &rec)) {
        return Ok(Err(TokenRejection::Revoked));
    }
    Ok(audience::audienced(rec, &app.resource())
        .map(|t| (t, records))
        .map_err(|AudienceRejection| TokenRejection::WrongAudience))
}

/// Validates a bearer token for this server's MCP resource.
pub async fn authenticate(
    app: &App,
    bearer: &str,
) -> Result<Result<Audienced<AccessTokenRecord>, TokenRejection>, StoreError> {
    let rec = match token_record(app, bearer, false).await? {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    let fam = families::get(app.store.as_ref(), &rec.family_id).await?;
    if fam.is_none_or(|f| revoked(&f, &rec)) {
        return Ok(Err(TokenRejection::Revoked));
    }
    Ok(audience::audienced(rec, &app.resource())
        .map_err(|AudienceRejection| TokenRejection::WrongAudience))
}
