//! Who is calling `/token` and `/revoke`: client authentication (RFC 6749 §2.3).

use std::net::IpAddr;

use crate::app::App;
use crate::clients::ClientsError;
use crate::crypto;
use crate::flows::FlowError;
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
