//! `POST /token` (authorization code, refresh) and `POST /revoke` (RFC 7009), one file per
//! grant: [`client_auth`] (who is calling), [`authorization_code`], [`refresh`], and
//! [`revoke`] (family revocation and `/revoke`). This module dispatches `/token` and holds
//! what the grants share: minting access tokens and the family lifetime.
//!
//! A code is checked against its record (client, redirect URI, resource, PKCE) and only then
//! taken atomically, so a wrong client or verifier changes nothing and two concurrent
//! redemptions cannot both win. A redeemed code leaves a tombstone: presenting it again
//! revokes what it produced. Refresh rotation is a compare-and-swap on the family record.

mod authorization_code;
mod client_auth;
mod refresh;
mod revocation;

use std::net::IpAddr;

use super::FlowError;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::clock::UnixTime;
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::{self, Presenter, TokenResponse};
use crate::oauth::request::{Params, TokenRequest};
use crate::oauth::scope::ScopeSet;
use crate::store::access_tokens;
use crate::store::records::{AccessTokenRecord, FamilyRecord};

use super::CAS_RETRIES;
use super::revoke::revoke_family;
pub use client_auth::authenticate_client;
pub use revocation::revoke;

const INVALID_GRANT: OAuthError = OAuthError::new(
    ErrorCode::InvalidGrant,
    "the code or refresh token is invalid, expired, revoked, or was issued to another client",
);

/// Handles `/token`. `ip` and `user_agent` are the request's client IP and raw
/// `User-Agent` header: the branch a refresh uses keeps them (the account page lists them).
pub async fn token(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    user_agent: Option<&str>,
    body: &str,
) -> Result<TokenOutcome, FlowError> {
    let p = Params::parse(body)?;
    if p.get("grant_type") == Some(super::exchange::GRANT_TYPE) {
        return Ok(TokenOutcome::Exchanged(
            super::exchange::exchange(app, authorization, &p).await?,
        ));
    }
    grants(app, authorization, Presenter::new(ip, user_agent), p)
        .await
        .map(TokenOutcome::Tokens)
}

/// What `/token` answers.
#[derive(Debug)]
pub enum TokenOutcome {
    /// Tokens from a code or a refresh.
    Tokens(TokenResponse),
    /// A token exchange's answer (RFC 8693 §2.2.1).
    Exchanged(serde_json::Value),
}

async fn grants(
    app: &App,
    authorization: Option<&str>,
    who: Presenter,
    p: Params,
) -> Result<TokenResponse, FlowError> {
    let client = authenticate_client(app, authorization, who.ip, &p).await?;
    match TokenRequest::parse(&p)? {
        TokenRequest::AuthorizationCode {
            code,
            redirect_uri,
            code_verifier,
            resource,
        } => {
            authorization_code::redeem_code(
                app,
                &client,
                &code,
                redirect_uri.as_deref(),
                code_verifier.as_ref(),
                resource.as_deref(),
                &who,
            )
            .await
        }
        TokenRequest::RefreshToken {
            refresh_token,
            scope,
            resource,
        } => {
            refresh::refresh(
                app,
                &client,
                &refresh_token,
                scope.as_deref(),
                resource.as_deref(),
                &who,
            )
            .await
        }
    }
}

/// The state change already happened; a failed audit write must not turn the response into
/// an error the client would retry. (Inside a batched request the event is written by the
/// final flush, which fails only with the request's other writes.)
async fn audit_best_effort(app: &App, event: AuditEvent) {
    if let Err(e) = app.audit.record(event).await {
        tracing::error!(error = %e, "audit write failed");
    }
}

fn family_expiry(app: &App, created: UnixTime, now: UnixTime) -> UnixTime {
    let t = &app.config.tokens;
    now.plus(t.refresh_idle_ttl_secs)
        .min(created.plus(t.refresh_max_lifetime_secs))
}

/// Mints an access token on `branch` of `fam` (ending that branch revokes it).
async fn mint_access(
    app: &App,
    fam: &FamilyRecord,
    branch: u32,
    scopes: &ScopeSet,
) -> Result<(String, u64), FlowError> {
    let now = app.clock.now();
    let ttl = app.config.tokens.access_token_ttl_secs;
    let token = grant::new_access_token()?;
    let rec = AccessTokenRecord {
        family_id: fam.family_id.clone(),
        user_id: fam.user_id.clone(),
        client_id: fam.client_id.clone(),
        scopes: scopes.clone(),
        resource: fam.resource.clone(),
        issued_at: now,
        expires_at: now.plus(ttl),
        branch: Some(branch),
    };
    // Kept a while past expiry so a late presentation is audited as "expired", not
    // "unknown"; `access::authenticate` refuses it by its own `expires_at`.
    access_tokens::put(
        app.store.as_ref(),
        &token,
        &rec,
        now.plus(ttl.saturating_add(crate::flows::access::EXPIRED_KEPT_SECS)),
    )
    .await?;
    Ok((token.secret().to_owned(), ttl))
}
