//! `POST /token` (authorization code, refresh) and `POST /revoke` (RFC 7009).
//!
//! A code is checked against its record (client, redirect URI, resource, PKCE) and only then
//! taken atomically, so a wrong client or verifier changes nothing and two concurrent
//! redemptions cannot both win. A redeemed code leaves a tombstone: presenting it again
//! revokes what it produced. Refresh rotation is a compare-and-swap on the family record.

use std::net::IpAddr;

use super::FlowError;
use super::admission::Verdict;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::audience;
use crate::bindings::consent_registry;
use crate::bindings::consent_scope;
use crate::clients::ClientsError;
use crate::clock::UnixTime;
use crate::crypto;
use crate::ids::{ClientId, FamilyId, UserId};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::{self, RefreshDecision, TokenResponse};
use crate::oauth::registration::TokenAuthMethod;
use crate::oauth::request::{ClientAuth, Params, TokenRequest, parse_basic};
use crate::oauth::scope::ScopeSet;
use crate::store::records::{
    AccessTokenRecord, ClientRecord, CodeRecord, FamilyRecord, UsedCodeRecord,
};
use crate::store::{Keyspace, StoreExt, Versioned, encode};

const INVALID_CLIENT: OAuthError =
    OAuthError::new(ErrorCode::InvalidClient, "client authentication failed");
const INVALID_GRANT: OAuthError = OAuthError::new(
    ErrorCode::InvalidGrant,
    "the code or refresh token is invalid, expired, revoked, or was issued to another client",
);
/// How long a redeemed code's tombstone is kept for reuse detection.
const USED_CODE_TTL_SECS: u64 = 600;
/// Compare-and-swap retries before giving up under contention.
const CAS_RETRIES: usize = 16;

/// Authenticates the calling client (RFC 6749 §2.3; public clients send only `client_id`).
/// `ip` is the request's client IP (its metadata-document fetch budget).
pub async fn authenticate_client(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    p: &Params,
) -> Result<ClientRecord, FlowError> {
    let basic = authorization.map(parse_basic).transpose()?;
    let basic_used = basic.is_some();
    let auth = ClientAuth::from_request(basic, p)?;
    let client: ClientRecord = match app.clients.get(&auth.client_id, ip).await {
        Ok(c) => c.ok_or(INVALID_CLIENT)?,
        Err(ClientsError::Store(e)) => return Err(e.into()),
        // The document could not be had just now: `invalid_client` would make the client
        // give up on a registration that is fine.
        Err(e) if e.is_temporary() => {
            return Err(OAuthError::new(ErrorCode::TemporarilyUnavailable, e.description()).into());
        }
        Err(e) => return Err(OAuthError::new(ErrorCode::InvalidClient, e.description()).into()),
    };
    // The registered method must be the one used (RFC 7591 §2): a secret registered for HTTP
    // Basic is not accepted in the form, and the other way round.
    let ok = match (client.auth_method, &auth.secret, &client.secret_hash) {
        (TokenAuthMethod::None, None, _) => true,
        (TokenAuthMethod::ClientSecretBasic, Some(secret), Some(hash)) if basic_used => {
            crypto::ct_eq(secret.hash().as_bytes(), hash.as_bytes())
        }
        (TokenAuthMethod::ClientSecretPost, Some(secret), Some(hash)) if !basic_used => {
            crypto::ct_eq(secret.hash().as_bytes(), hash.as_bytes())
        }
        _ => false,
    };
    if ok {
        crate::telemetry::span::record_client_id(&client.client_id);
        Ok(client)
    } else {
        Err(INVALID_CLIENT.into())
    }
}

/// Handles `/token`.
pub async fn token(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    body: &str,
) -> Result<TokenOutcome, FlowError> {
    let p = Params::parse(body)?;
    if p.get("grant_type") == Some(super::exchange::GRANT_TYPE) {
        return Ok(TokenOutcome::Exchanged(
            super::exchange::exchange(app, authorization, &p).await?,
        ));
    }
    grants(app, authorization, ip, p)
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
    ip: Option<IpAddr>,
    p: Params,
) -> Result<TokenResponse, FlowError> {
    let client = authenticate_client(app, authorization, ip, &p).await?;
    match TokenRequest::parse(&p)? {
        TokenRequest::AuthorizationCode {
            code,
            redirect_uri,
            code_verifier,
            resource,
        } => {
            redeem_code(
                app,
                &client,
                &code,
                redirect_uri.as_deref(),
                code_verifier.as_ref(),
                resource.as_deref(),
            )
            .await
        }
        TokenRequest::RefreshToken {
            refresh_token,
            scope,
            resource,
        } => {
            if !client.grant_types.iter().any(|g| g == "refresh_token") {
                return Err(OAuthError::new(
                    ErrorCode::UnauthorizedClient,
                    "this client did not register the refresh_token grant",
                )
                .into());
            }
            let family_id = grant::refresh_family(&refresh_token).ok_or(INVALID_GRANT)?;
            let presented = refresh_token.hash();
            for _ in 0..CAS_RETRIES {
                let Some((fam, version)) = app
                    .store
                    .get_versioned::<FamilyRecord>(Keyspace::RefreshFamilies, family_id.as_str())
                    .await?
                else {
                    return Err(INVALID_GRANT.into());
                };
                if fam.client_id != client.client_id {
                    return Err(INVALID_GRANT.into());
                }
                audience::recheck(&fam.resource, resource.as_deref())?;
                let scopes = consent_scope::at_refresh(scope.as_deref(), &fam.scopes)?;
                let now = app.clock.now();
                let decision =
                    grant::decide(&fam, &presented, now, app.config.tokens.refresh_grace_secs);
                match decision {
                    RefreshDecision::Revoked | RefreshDecision::Unknown => {
                        return Err(INVALID_GRANT.into());
                    }
                    RefreshDecision::Reuse => {
                        let dead =
                            grant::apply(&fam, decision, &presented, String::new(), None, now);
                        let v = Versioned {
                            value: encode(&dead)?,
                            expires_at: version.expires_at,
                        };
                        if !app
                            .store
                            .compare_and_swap(
                                Keyspace::RefreshFamilies,
                                family_id.as_str(),
                                &version,
                                Some(v),
                            )
                            .await?
                        {
                            continue;
                        }
                        app.audit
                            .record(AuditEvent::RefreshReuse {
                                user_id: fam.user_id.clone(),
                                client_id: fam.client_id.clone(),
                                family_id: family_id.clone(),
                            })
                            .await?;
                        return Err(INVALID_GRANT.into());
                    }
                    RefreshDecision::Replay | RefreshDecision::Rotate => {
                        // The person may have revoked this client while the family lived.
                        if !consent_registry::exists_for_client(
                            app.store.as_ref(),
                            &fam.user_id,
                            &fam.client_id,
                        )
                        .await?
                        {
                            revoke_family(app, &family_id).await?;
                            return Err(INVALID_GRANT.into());
                        }
                        // The person's standing (`[access]`), asked again when it is due.
                        refresh_standing(app, &fam.user_id).await?;
                        let refresh = if decision == RefreshDecision::Replay {
                            // The same next-generation token again: nothing is minted twice.
                            let Some(sealed) = fam.replay.as_deref() else {
                                return Err(INVALID_GRANT.into());
                            };
                            open_replay(app, &family_id, sealed)?
                        } else {
                            let new_refresh = grant::new_refresh_token(&family_id)?;
                            let sealed = seal_replay(app, &family_id, &new_refresh)?;
                            let next = grant::apply(
                                &fam,
                                decision,
                                &presented,
                                new_refresh.hash(),
                                Some(sealed),
                                now,
                            );
                            let v = Versioned {
                                value: encode(&next)?,
                                expires_at: Some(family_expiry(app, fam.created_at, now)),
                            };
                            if !app
                                .store
                                .compare_and_swap(
                                    Keyspace::RefreshFamilies,
                                    family_id.as_str(),
                                    &version,
                                    Some(v),
                                )
                                .await?
                            {
                                continue; // someone else rotated: read again (it may be our replay)
                            }
                            new_refresh
                        };
                        let (access, expires_in) = mint_access(app, &fam, &scopes).await?;
                        consent_registry::touch(
                            app.store.as_ref(),
                            now,
                            &fam.user_id,
                            &fam.client_id,
                        )
                        .await?;
                        audit_best_effort(
                            app,
                            AuditEvent::TokenRefreshed {
                                user_id: fam.user_id.clone(),
                                client_id: client.client_id.clone(),
                                family_id: family_id.clone(),
                                grace: decision == RefreshDecision::Replay,
                            },
                        )
                        .await;
                        return Ok(TokenResponse {
                            access_token: access,
                            token_type: "Bearer",
                            expires_in,
                            refresh_token: Some(refresh.secret().to_owned()),
                            scope: scopes.to_wire(),
                        });
                    }
                }
            }
            Err(OAuthError::new(
                ErrorCode::TemporarilyUnavailable,
                "too many concurrent refreshes; retry",
            )
            .into())
        }
    }
}

fn replay_aad(family: &FamilyId) -> Vec<u8> {
    format!("mcp-oauth-proxy/refresh-replay/{}", family.as_str()).into_bytes()
}

/// Seals the next-generation refresh token for replays inside the grace window.
fn seal_replay(
    app: &App,
    family: &FamilyId,
    token: &crate::ids::RefreshToken,
) -> Result<String, FlowError> {
    Ok(crypto::b64url(
        &app.keys
            .token_encryption
            .seal(token.secret().as_bytes(), &replay_aad(family))?,
    ))
}

fn open_replay(
    app: &App,
    family: &FamilyId,
    sealed: &str,
) -> Result<crate::ids::RefreshToken, FlowError> {
    let bytes = crypto::b64url_decode(sealed).ok_or(INVALID_GRANT)?;
    let plain = app
        .keys
        .token_encryption
        .open(&bytes, &replay_aad(family))
        .map_err(|_| INVALID_GRANT)?;
    Ok(crate::ids::RefreshToken::new(
        String::from_utf8(plain).map_err(|_| INVALID_GRANT)?,
    ))
}

/// The authorization code grant. Every check runs before anything changes; then the first
/// redeemer leaves a tombstone and takes the code. Of concurrent redemptions exactly one
/// succeeds and the others change nothing; a redemption after the first has completed is a
/// replay of a leaked code and revokes what the first got (OAuth 2.1 §4.1.3). A revocation by
/// the person that lands while tokens are being minted is caught by the re-check at the end.
async fn redeem_code(
    app: &App,
    client: &ClientRecord,
    code: &crate::ids::AuthCode,
    redirect_uri: Option<&str>,
    code_verifier: Option<&crate::ids::CodeVerifier>,
    resource: Option<&str>,
) -> Result<TokenResponse, FlowError> {
    let hash = code.hash();
    let Some(rec) = app
        .store
        .get_json::<CodeRecord>(Keyspace::Codes, &hash)
        .await?
    else {
        code_reused(app, &hash).await?;
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
    if !consent_registry::exists_for_client(app.store.as_ref(), &rec.user_id, &rec.client_id)
        .await?
    {
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
    if !app
        .store
        .insert_json(
            Keyspace::UsedCodes,
            &hash,
            &tomb,
            Some(now.plus(USED_CODE_TTL_SECS)),
        )
        .await?
    {
        code_reused(app, &hash).await?;
        return Err(INVALID_GRANT.into());
    }
    if app.store.take(Keyspace::Codes, &hash).await?.is_none() {
        return Err(INVALID_GRANT.into()); // expired between the read and the take
    }
    let resp = start_family(app, &rec, client).await?;
    mark_completed(app, &hash).await?;
    let consent_gone =
        !consent_registry::exists_for_client(app.store.as_ref(), &rec.user_id, &rec.client_id)
            .await?;
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

/// The state change already happened and is durable; a failed audit write must not turn the
/// response into an error the client would retry.
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

fn user_family_key(user: &UserId, client: &ClientId, family: &FamilyId) -> String {
    format!("{}|{}|{}", user.as_str(), client.as_str(), family.as_str())
}

async fn start_family(
    app: &App,
    code: &CodeRecord,
    client: &ClientRecord,
) -> Result<TokenResponse, FlowError> {
    let now = app.clock.now();
    let refresh = grant::new_refresh_token(&code.family_id)?;
    let fam = FamilyRecord {
        family_id: code.family_id.clone(),
        user_id: code.user_id.clone(),
        client_id: code.client_id.clone(),
        scopes: code.scopes.clone(),
        resource: code.resource.clone(),
        current: vec![refresh.hash()],
        previous: None,
        retired: Vec::new(),
        replay: None,
        rotated_at: now,
        created_at: now,
        revoked: false,
    };
    let max = now.plus(app.config.tokens.refresh_max_lifetime_secs);
    // Index first: a crash between the two writes leaves a harmless index entry, never a
    // family the account page cannot find and revoke.
    app.store
        .put(
            Keyspace::UserFamilies,
            &user_family_key(&fam.user_id, &fam.client_id, &fam.family_id),
            Vec::new(),
            Some(max),
        )
        .await?;
    if !app
        .store
        .insert_json(
            Keyspace::RefreshFamilies,
            fam.family_id.as_str(),
            &fam,
            Some(family_expiry(app, now, now)),
        )
        .await?
    {
        // The family exists already: this code was redeemed before (its tombstone expired).
        return Err(INVALID_GRANT.into());
    }
    let (access, expires_in) = mint_access(app, &fam, &code.scopes).await?;
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

async fn mint_access(
    app: &App,
    fam: &FamilyRecord,
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
    };
    // Kept a while past expiry so a late presentation is audited as "expired", not
    // "unknown"; `access::authenticate` refuses it by its own `expires_at`.
    app.store
        .put_json(
            Keyspace::AccessTokens,
            &token.hash(),
            &rec,
            Some(now.plus(ttl.saturating_add(crate::flows::access::EXPIRED_KEPT_SECS))),
        )
        .await?;
    Ok((token.secret().to_owned(), ttl))
}

/// A code was presented again. Once the first redemption has completed, that is a replay:
/// revoke what it produced. While it is still in flight, the loser of the race just fails.
async fn code_reused(app: &App, hash: &str) -> Result<(), FlowError> {
    let Some(used) = app
        .store
        .get_json::<UsedCodeRecord>(Keyspace::UsedCodes, hash)
        .await?
    else {
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

async fn mark_completed(app: &App, hash: &str) -> Result<(), FlowError> {
    for _ in 0..CAS_RETRIES {
        let Some((mut used, version)) = app
            .store
            .get_versioned::<UsedCodeRecord>(Keyspace::UsedCodes, hash)
            .await?
        else {
            return Ok(());
        };
        used.completed = true;
        let v = Versioned {
            value: encode(&used)?,
            expires_at: version.expires_at,
        };
        if app
            .store
            .compare_and_swap(Keyspace::UsedCodes, hash, &version, Some(v))
            .await?
        {
            return Ok(());
        }
    }
    Ok(())
}

/// Refuses a refresh for a person who no longer belongs (their tokens were just revoked) or
/// whose standing GitHub has not confirmed for longer than `[access]` allows.
async fn refresh_standing(app: &App, user: &UserId) -> Result<(), FlowError> {
    match super::admission::standing(app, user).await? {
        Verdict::Admitted | Verdict::TokenBroken => Ok(()),
        Verdict::Lost => Err(INVALID_GRANT.into()),
        Verdict::Unavailable => Err(OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "GitHub cannot confirm the person's access right now; try again later",
        )
        .into()),
    }
}

/// Every refresh family a person holds, for all clients.
pub async fn families_of(app: &App, user: &UserId) -> Result<Vec<FamilyId>, FlowError> {
    Ok(app
        .store
        .scan_prefix(Keyspace::UserFamilies, &format!("{}|", user.as_str()))
        .await?
        .into_iter()
        // `user|client|family`: family ids (base64url) never contain `|`.
        .filter_map(|(k, _)| k.rsplit_once('|').map(|(_, f)| FamilyId::new(f)))
        .collect())
}

/// Marks a family revoked (its refresh and access tokens stop working at once). Returns
/// whether this call revoked it.
pub async fn revoke_family(app: &App, family_id: &FamilyId) -> Result<bool, FlowError> {
    for _ in 0..CAS_RETRIES {
        let Some((fam, version)) = app
            .store
            .get_versioned::<FamilyRecord>(Keyspace::RefreshFamilies, family_id.as_str())
            .await?
        else {
            return Ok(false);
        };
        if fam.revoked {
            return Ok(false);
        }
        let mut dead = fam;
        dead.revoked = true;
        let v = Versioned {
            value: encode(&dead)?,
            expires_at: version.expires_at,
        };
        if app
            .store
            .compare_and_swap(
                Keyspace::RefreshFamilies,
                family_id.as_str(),
                &version,
                Some(v),
            )
            .await?
        {
            return Ok(true);
        }
    }
    Err(OAuthError::new(
        ErrorCode::TemporarilyUnavailable,
        "revocation contended; retry",
    )
    .into())
}

/// Revokes every family a person holds for a client; returns how many.
pub async fn revoke_user_client(
    app: &App,
    user: &UserId,
    client: &ClientId,
) -> Result<usize, FlowError> {
    let prefix = format!("{}|{}|", user.as_str(), client.as_str());
    let mut n = 0;
    for (key, _) in app
        .store
        .scan_prefix(Keyspace::UserFamilies, &prefix)
        .await?
    {
        // Exactly this client's keys: after the prefix comes the family id alone (a legacy
        // client id containing `|` could otherwise share the prefix).
        if let Some(fam) = key.strip_prefix(&prefix).filter(|f| !f.contains('|'))
            && revoke_family(app, &FamilyId::new(fam)).await?
        {
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
        .map(|_| crate::ids::RefreshToken::new(token))
    {
        let Some(family_id) = grant::refresh_family(&rt) else {
            return Ok(());
        };
        let Some(fam) = app
            .store
            .get_json::<FamilyRecord>(Keyspace::RefreshFamilies, family_id.as_str())
            .await?
        else {
            return Ok(());
        };
        let valid = matches!(
            grant::decide(
                &fam,
                &rt.hash(),
                app.clock.now(),
                app.config.tokens.refresh_grace_secs
            ),
            RefreshDecision::Rotate | RefreshDecision::Replay
        );
        if fam.client_id == client.client_id && valid && revoke_family(app, &family_id).await? {
            app.audit
                .record(AuditEvent::TokenRevoked {
                    client_id: client.client_id,
                    kind: "refresh_token",
                })
                .await?;
        }
    } else if token.starts_with(grant::ACCESS_PREFIX) {
        let hash = crypto::hash_secret(token);
        if let Some(rec) = app
            .store
            .get_json::<AccessTokenRecord>(Keyspace::AccessTokens, &hash)
            .await?
            && rec.client_id == client.client_id
        {
            app.store.remove(Keyspace::AccessTokens, &hash).await?;
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
