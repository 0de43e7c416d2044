//! Who is calling `/token` and `/revoke`: client authentication (RFC 6749 §2.3), including
//! `private_key_jwt` client assertions (RFC 7523 §2.2, RFC 7521 §4.2).

use std::net::IpAddr;

use crate::app::App;
use crate::bindings::client_assertion::{self, AssertionError, ConsumeError, Expected};
use crate::clients::{ClientsError, KeyFreshness, ResolvedClient};
use crate::crypto;
use crate::flows::FlowError;
use crate::ids::ClientId;
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::registration::TokenAuthMethod;
use crate::oauth::request::{ClientAuth, Params, parse_basic};
use crate::store::records::ClientRecord;

const INVALID_CLIENT: OAuthError =
    OAuthError::new(ErrorCode::InvalidClient, "client authentication failed");

/// Authenticates the calling client (RFC 6749 §2.3; public clients send only `client_id`).
/// `ip` is the request's client IP (its metadata-document fetch budget).
pub async fn authenticate_client(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    p: &Params,
) -> Result<ClientRecord, FlowError> {
    if p.get("client_assertion").is_some() || p.get("client_assertion_type").is_some() {
        return by_assertion(app, authorization, ip, p).await;
    }
    let basic = authorization.map(parse_basic).transpose()?;
    let basic_used = basic.is_some();
    let auth = ClientAuth::from_request(basic, p)?;
    let client = resolve(app, &auth.client_id, ip).await?.into_record();
    // The registered method must be the one used (RFC 7591 §2): a secret registered for HTTP
    // Basic is not accepted in the form, and the other way round; a private_key_jwt client
    // without its assertion is refused.
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

async fn resolve(
    app: &App,
    id: &ClientId,
    ip: Option<IpAddr>,
) -> Result<ResolvedClient, FlowError> {
    match app.clients.resolve(id, ip).await {
        Ok(c) => c.ok_or_else(|| INVALID_CLIENT.into()),
        Err(ClientsError::Store(e)) => Err(e.into()),
        // The document could not be had just now: `invalid_client` would make the client
        // give up on a registration that is fine.
        Err(e) if e.is_temporary() => {
            Err(OAuthError::new(ErrorCode::TemporarilyUnavailable, e.description()).into())
        }
        Err(e) => Err(OAuthError::new(ErrorCode::InvalidClient, e.description()).into()),
    }
}

/// The same answer for every refusal; which check failed is only logged.
fn refused(client_id: &str, why: &dyn std::fmt::Display) -> FlowError {
    tracing::warn!(client_id, reason = %why, "client assertion refused");
    INVALID_CLIENT.into()
}

async fn keys(
    app: &App,
    client: &ResolvedClient,
    id: &str,
    ip: Option<IpAddr>,
    freshness: KeyFreshness,
) -> Result<Option<std::sync::Arc<jsonwebtoken::jwk::JwkSet>>, FlowError> {
    match app.clients.keys(client, ip, freshness).await {
        Ok(k) => Ok(k),
        Err(ClientsError::Store(e)) => Err(e.into()),
        Err(e) if e.is_temporary() => Err(OAuthError::new(
            ErrorCode::TemporarilyUnavailable,
            "the client's keys could not be fetched just now; try again",
        )
        .into()),
        Err(e) => Err(refused(id, &e)),
    }
}

/// `private_key_jwt`: the assertion must verify against the client's keys (refetched once
/// on an unknown `kid`) and its `jti` must be new, recorded durably before anything is
/// issued.
async fn by_assertion(
    app: &App,
    authorization: Option<&str>,
    ip: Option<IpAddr>,
    p: &Params,
) -> Result<ClientRecord, FlowError> {
    if authorization.is_some() || p.get("client_secret").is_some() {
        return Err(OAuthError::new(
            ErrorCode::InvalidRequest,
            "use one client authentication method",
        )
        .into());
    }
    let claimed = p.get("client_id");
    if p.get("client_assertion_type") != Some(client_assertion::JWT_BEARER) {
        return Err(refused(
            claimed.unwrap_or("-"),
            &"unsupported client_assertion_type",
        ));
    }
    let Some(assertion) = p.get("client_assertion") else {
        return Err(refused(claimed.unwrap_or("-"), &"no client_assertion"));
    };
    // Size, header and `alg` before anything is fetched: `none`, `HS*` or garbage costs no
    // outbound request for the client's document or keys.
    client_assertion::precheck(assertion).map_err(|e| refused(claimed.unwrap_or("-"), &e))?;
    // `client_id` is optional with an assertion (RFC 7521 §4.2): then its `sub` names the
    // client whose keys must have signed it.
    let id = match claimed {
        Some(id) => id.to_owned(),
        None => client_assertion::claimed_client(assertion)
            .ok_or_else(|| refused("-", &AssertionError::Malformed))?,
    };
    let client = resolve(app, &ClientId::new(id.as_str()), ip).await?;
    if client.record().auth_method != TokenAuthMethod::PrivateKeyJwt {
        return Err(refused(&id, &"client does not use private_key_jwt"));
    }
    // Checked before the `jti` is spent, so a mismatch never uses one up.
    if client.record().client_id.as_str() != id {
        return Err(refused(&id, &"assertion for another client"));
    }
    let token_endpoint = app.config.public_url.join("/token");
    let now = app.clock.now();
    let expected = Expected {
        client_id: &id,
        issuer: app.issuer(),
        token_endpoint: &token_endpoint,
        now,
    };
    let Some(current) = keys(app, &client, &id, ip, KeyFreshness::Cached).await? else {
        return Err(refused(&id, &"no keys"));
    };
    let verified = match client_assertion::verify(assertion, &current, &expected) {
        // The client may have rotated its keys since we fetched them: once more, if the
        // refetch limit allows.
        Err(AssertionError::UnknownKey) => {
            match keys(app, &client, &id, ip, KeyFreshness::AfterUnknownKid).await? {
                Some(newer) => client_assertion::verify(assertion, &newer, &expected),
                None => Err(AssertionError::UnknownKey),
            }
        }
        other => other,
    }
    .map_err(|e| refused(&id, &e))?;
    let asserted = match client_assertion::consume(app.store.as_ref(), verified, now).await {
        Ok(a) => a,
        Err(ConsumeError::Replayed) => return Err(refused(&id, &AssertionError::Replayed)),
        Err(ConsumeError::Store(e)) => return Err(e.into()),
    };
    let record = client.into_record();
    // `Asserted` names the client its assertion was checked for, which is `id` (above).
    if asserted.client_id() != record.client_id.as_str() {
        return Err(refused(&id, &"assertion for another client"));
    }
    crate::telemetry::span::record_client_id(&record.client_id);
    Ok(record)
}
