//! Dynamic client registration (RFC 7591).

use serde_json::{Value, json};

use super::FlowError;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant;
use crate::oauth::registration::{RegistrationRequest, TokenAuthMethod};
use crate::store::records::ClientRecord;
use crate::store::{Keyspace, StoreExt};

/// Registers a client from a JSON body; returns the RFC 7591 §3.2.1 response.
pub async fn register(app: &App, body: &[u8]) -> Result<Value, FlowError> {
    let req: RegistrationRequest = serde_json::from_slice(body).map_err(|_| {
        OAuthError::new(
            ErrorCode::InvalidClientMetadata,
            "the body must be a JSON object of client metadata",
        )
    })?;
    let meta = req.validate(&app.offered_scopes)?;
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
    if !app
        .store
        .insert_json(Keyspace::Clients, client_id.as_str(), &record, None)
        .await?
    {
        return Err(OAuthError::new(ErrorCode::ServerError, "client id collision").into());
    }
    app.audit
        .record(AuditEvent::ClientRegistered {
            client_id: client_id.clone(),
            client_name: meta.client_name.clone(),
            redirect_uris: meta.redirect_uris.clone(),
        })
        .await?;
    let mut body = json!({
        "client_id": client_id.as_str(),
        "client_id_issued_at": now.0,
        "redirect_uris": meta.redirect_uris,
        "token_endpoint_auth_method": meta.auth_method.as_str(),
        "grant_types": meta.grant_types,
        "response_types": ["code"],
        "application_type": match meta.application_type {
            crate::oauth::registration::ApplicationType::Native => "native",
            crate::oauth::registration::ApplicationType::Web => "web",
        },
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
