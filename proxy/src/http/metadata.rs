//! Discovery documents: authorization server metadata (RFC 8414) and protected resource
//! metadata (RFC 9728, served at the root and the path-inserted location). `issuer` and
//! `resource` are byte-identical to what the rest of the server uses.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::app::App;

/// `/.well-known/oauth-authorization-server`.
pub async fn authorization_server(State(app): State<App>) -> Json<Value> {
    let u = &app.config.public_url;
    let mut grants = vec!["authorization_code", "refresh_token"];
    if app.config.backend.as_ref().is_some_and(|b| {
        matches!(
            b.auth,
            crate::bindings::backend::BackendAuth::Exchange { .. }
        )
    }) {
        grants.push(crate::flows::exchange::GRANT_TYPE);
    }
    let mut body = json!({
        "issuer": u.issuer(),
        "authorization_endpoint": u.join("/authorize"),
        "token_endpoint": u.join("/token"),
        "revocation_endpoint": u.join("/revoke"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": grants,
        "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post", "private_key_jwt"],
        "token_endpoint_auth_signing_alg_values_supported": crate::bindings::client_assertion::ALLOWED_ALGS,
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post", "private_key_jwt"],
        "revocation_endpoint_auth_signing_alg_values_supported": crate::bindings::client_assertion::ALLOWED_ALGS,
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": app.supported_scopes().iter().collect::<Vec<_>>(),
        "authorization_response_iss_parameter_supported": true,
    });
    if let Some(obj) = body.as_object_mut() {
        // RFC 8414 §2: OPTIONAL, so a closed registration is not advertised at all (clients
        // would otherwise try it and fail).
        if !matches!(
            app.config.registration.mode,
            crate::clients::RegistrationMode::Closed
        ) {
            obj.insert(
                "registration_endpoint".into(),
                Value::String(u.join("/register")),
            );
        }
        // CIMD -01 §4: servers that accept URL client ids say so here.
        if app.clients.cimd_enabled() {
            obj.insert(
                "client_id_metadata_document_supported".into(),
                Value::Bool(true),
            );
        }
    }
    Json(body)
}

/// `/.well-known/oauth-protected-resource[/mcp]`.
pub async fn protected_resource(State(app): State<App>) -> Json<Value> {
    Json(json!({
        "resource": app.resource(),
        "authorization_servers": [app.issuer()],
        "scopes_supported": app.supported_scopes().iter().collect::<Vec<_>>(),
        "bearer_methods_supported": ["header"],
        "resource_name": app.config.resource_name,
    }))
}
