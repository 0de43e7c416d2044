//! RFC 8693 token exchange for backends (docs/DESIGN.md §7). An exchange-mode backend receives a
//! short-lived token of this server instead of the client's; when a tool needs GitHub it
//! exchanges that token here, authenticating as the confidential client the operator
//! configured (registered MCP clients can never use this grant), for the person's GitHub
//! token. If the person's GitHub access cannot serve the agent, the refusal carries a connect
//! link the backend relays to its client.

use serde_json::{Value, json};

use super::FlowError;
use super::admission::Verdict;
use super::github_access::{self, Access};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::connect_link;
use crate::config::BackendAuth;
use crate::crypto;
use crate::ids::{BackendToken, ClientSecret};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::BACKEND_PREFIX;
use crate::oauth::request::{ClientAuth, Params, parse_basic};
use crate::store::records::{BackendTokenRecord, ClientRecord};
use crate::store::{Keyspace, StoreExt};

/// `grant_type` of a token exchange.
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// Token type URI of an access token.
pub const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The `audience` naming GitHub.
pub const GITHUB_AUDIENCE: &str = "github";

const INVALID_CLIENT: OAuthError =
    OAuthError::new(ErrorCode::InvalidClient, "client authentication failed");

async fn authenticate_backend(
    app: &App,
    authorization: Option<&str>,
    p: &Params,
) -> Result<(), FlowError> {
    let basic = authorization.map(parse_basic).transpose()?;
    let auth = ClientAuth::from_request(basic, p)?;
    if let Some(BackendAuth::Exchange {
        client_id,
        client_secret,
        ..
    }) = app.config.backend.as_ref().map(|b| &b.auth)
        && auth.client_id.as_str() == client_id
    {
        let given = auth
            .secret
            .as_ref()
            .map(ClientSecret::hash)
            .unwrap_or_default();
        return if crypto::ct_eq(given.as_bytes(), client_secret.hash().as_bytes()) {
            Ok(())
        } else {
            Err(INVALID_CLIENT.into())
        };
    }
    let registered: Option<ClientRecord> = app.clients.known(&auth.client_id).await?;
    if registered.is_some() {
        return Err(OAuthError::new(
            ErrorCode::UnauthorizedClient,
            "registered clients may not use token exchange",
        )
        .into());
    }
    Err(INVALID_CLIENT.into())
}

/// Handles a token-exchange request; returns the RFC 8693 §2.2.1 response.
pub async fn exchange(
    app: &App,
    authorization: Option<&str>,
    p: &Params,
) -> Result<Value, FlowError> {
    authenticate_backend(app, authorization, p).await?;
    if p.get("subject_token_type") != Some(ACCESS_TOKEN_TYPE) {
        return Err(OAuthError::new(
            ErrorCode::InvalidRequest,
            "subject_token_type must be urn:ietf:params:oauth:token-type:access_token",
        )
        .into());
    }
    if p.get("requested_token_type")
        .is_some_and(|t| t != ACCESS_TOKEN_TYPE)
    {
        return Err(OAuthError::new(
            ErrorCode::InvalidRequest,
            "only access tokens can be issued",
        )
        .into());
    }
    if p.get("audience") != Some(GITHUB_AUDIENCE) || p.get("resource").is_some() {
        return Err(
            OAuthError::new(ErrorCode::InvalidTarget, "audience must be \"github\"").into(),
        );
    }
    let subject = p.require("subject_token", "subject_token is required")?;
    // Only a backend token of this server: never a client's own access token, never a
    // GitHub token (RFC 8693 §2.2.2: an unacceptable subject token is invalid_request).
    let not_ours = OAuthError::new(
        ErrorCode::InvalidRequest,
        "subject_token is not a backend token issued by this server",
    );
    if !subject.starts_with(BACKEND_PREFIX) {
        return Err(not_ours.into());
    }
    let rec: BackendTokenRecord = app
        .store
        .get_json(Keyspace::BackendTokens, &BackendToken::new(subject).hash())
        .await?
        .ok_or(not_ours)?;
    // The person's standing (`[access]`), asked again when it is due.
    match super::admission::standing(app, &rec.user_id).await? {
        Verdict::Admitted | Verdict::TokenBroken => {}
        Verdict::Lost => {
            app.audit
                .record(AuditEvent::TokenExchangeRefused {
                    reason: "access_lost".to_owned(),
                })
                .await?;
            return Err(OAuthError::new(
                ErrorCode::InvalidGrant,
                "the person is no longer admitted to this server",
            )
            .into());
        }
        Verdict::Unavailable => {
            return Err(OAuthError::new(
                ErrorCode::TemporarilyUnavailable,
                "GitHub cannot confirm the person's access right now; try again later",
            )
            .into());
        }
    }
    match github_access::for_agent(app, &rec.user_id, &rec.client_id, &rec.scopes).await? {
        Access::Ready(gh) => {
            app.audit
                .record(AuditEvent::TokenExchanged {
                    user_id: rec.user_id.clone(),
                    client_id: rec.client_id.clone(),
                })
                .await?;
            let expires_in = app
                .grants
                .get(&rec.user_id)
                .await?
                .and_then(|g| g.token_expires_at)
                .map(|e| e.since(app.clock.now()));
            let mut out = json!({"access_token": gh.secret(), "issued_token_type": ACCESS_TOKEN_TYPE, "token_type": "Bearer"});
            if let (Some(e), Some(o)) = (expires_in, out.as_object_mut()) {
                o.insert("expires_in".into(), json!(e));
            }
            Ok(out)
        }
        Access::Needs(kind) => {
            let now = app.clock.now();
            let who = connect_link::For {
                user: &rec.user_id,
                client: &rec.client_id,
            };
            let link = connect_link::request(
                app.store.as_ref(),
                &app.keys.connect_link,
                now,
                app.config.connect.link_ttl_secs,
                who,
                kind,
                &rec.scopes,
            )
            .await?;
            if link.created {
                app.audit
                    .record(AuditEvent::ConnectLinkCreated {
                        link_id: link.link_id.clone(),
                        user_id: rec.user_id.clone(),
                        client_id: rec.client_id.clone(),
                        kind: kind.reason().trim_end_matches("_required").to_owned(),
                    })
                    .await?;
            }
            app.audit
                .record(AuditEvent::TokenExchangeRefused {
                    reason: kind.reason().to_owned(),
                })
                .await?;
            let client: Option<ClientRecord> = app.clients.known(&rec.client_id).await?;
            let agent = client.map_or_else(|| "this agent".to_owned(), |c| c.display_name());
            Err(FlowError::ExchangeRefused(json!({
                "error": "invalid_grant",
                "error_description": "the person's GitHub access cannot serve this agent yet",
                "reason": kind.reason(),
                "connect_uri": app.config.public_url.join(&link.path),
                "connect_id": link.link_id,
                "connect_expires_in": link.expires_in,
                "connect_message": github_access::message(kind, &agent),
            })))
        }
    }
}
