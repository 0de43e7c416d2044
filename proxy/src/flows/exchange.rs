//! RFC 8693 token exchange for backends (docs/DESIGN.md §7). An exchange-mode backend receives a
//! short-lived token of this server instead of the client's; when a tool needs GitHub it
//! exchanges that token here, authenticating as the confidential client the operator
//! configured (registered MCP clients can never use this grant), for the person's GitHub
//! token. If the person's GitHub access cannot serve the agent, the refusal carries a connect
//! link the backend relays to its client.
//!
//! A backend token is only as good as the authorization it was minted under: it names the
//! refresh family of the client's access token, and every exchange first checks that family
//! still stands ([`subject_standing`]). Revoking a client (account page, admin API, a replayed
//! code, a person's tokens revoked) revokes its families, so its backend tokens stop
//! exchanging at once without any revocation path having to find them; a new consent for the
//! same client starts a new family and never revives them.

use serde_json::{Value, json};

use super::FlowError;
use super::admission::Verdict;
use super::github_access::{self, Access};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::backend::BackendAuth;
use crate::bindings::connect_link;
use crate::clock::UnixTime;
use crate::crypto;
use crate::ids::{BackendToken, ClientSecret};
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::grant::BACKEND_PREFIX;
use crate::oauth::request::{ClientAuth, Params, parse_basic};
use crate::store::records::{BackendTokenRecord, ClientRecord, FamilyRecord};
use crate::store::{backend_tokens, families};

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

/// Why a backend token no longer speaks for its person and client, whatever their GitHub
/// access is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectEnded {
    /// Past its own expiry (normally the store already reads it as absent).
    Expired,
    /// It names no family (minted before backend tokens did): never honoured.
    Unbound,
    /// Its family was revoked, or is gone altogether (expired and swept).
    Revoked,
    /// The family it names belongs to another person or client (a corrupt or planted record).
    Mismatch,
}

/// Whether the authorization a backend token was minted under still stands at `now`: the
/// token is unexpired, names a family, and that family exists, is the same person's and
/// client's, and is not revoked. Anything missing counts against the token.
pub fn subject_standing(
    rec: &BackendTokenRecord,
    family: Option<&FamilyRecord>,
    now: UnixTime,
) -> Result<(), SubjectEnded> {
    if rec.expires_at <= now {
        return Err(SubjectEnded::Expired);
    }
    let Some(id) = &rec.family_id else {
        return Err(SubjectEnded::Unbound);
    };
    let Some(f) = family else {
        return Err(SubjectEnded::Revoked);
    };
    if &f.family_id != id || f.user_id != rec.user_id || f.client_id != rec.client_id {
        return Err(SubjectEnded::Mismatch);
    }
    if f.revoked {
        return Err(SubjectEnded::Revoked);
    }
    Ok(())
}

/// Refuses a subject token whose authorization ended: 400 `invalid_grant` (the grant it
/// stands for is revoked), audited, no connect link (the client must be approved again, which
/// no link offers) and nothing else changed.
async fn refuse_ended(app: &App, ended: SubjectEnded) -> Result<Value, FlowError> {
    app.audit
        .record(AuditEvent::TokenExchangeRefused {
            reason: "subject_revoked".to_owned(),
        })
        .await?;
    tracing::info!(why = ?ended, "token exchange refused: the backend token's authorization ended");
    Err(OAuthError::new(
        ErrorCode::InvalidGrant,
        "the authorization this backend token was issued under has been revoked",
    )
    .into())
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
    let rec = backend_tokens::get(app.store.as_ref(), &BackendToken::new(subject))
        .await?
        .ok_or(not_ours.clone())?;
    // Before anything about the person's GitHub access (which may refresh a GitHub token or
    // create a connect link): the authorization itself must still stand.
    let family = match &rec.family_id {
        Some(id) => families::get(app.store.as_ref(), id).await?,
        None => None,
    };
    match subject_standing(&rec, family.as_ref(), app.clock.now()) {
        Ok(()) => {}
        Err(SubjectEnded::Expired) => return Err(not_ours.into()),
        Err(ended) => return refuse_ended(app, ended).await,
    }
    // The person's standing (`[access]`), asked again when it is due.
    match super::admission::standing(app, &rec.user_id).await?.0 {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::ids::{ClientId, FamilyId, UserId};
    use crate::oauth::scope::ScopeSet;

    const TTL: u64 = 300;

    fn family(id: &str, user: &str, client: &str, revoked: bool, at: UnixTime) -> FamilyRecord {
        FamilyRecord {
            revoked,
            ..FamilyRecord::new(
                FamilyId::new(id),
                UserId::new(user),
                ClientId::new(client),
                ScopeSet::from_list(["read:user".to_owned()]),
                "https://mcp.example.com/mcp".to_owned(),
                String::new(),
                at,
            )
        }
    }

    /// What the gateway mints for an access token of `fam` at `now`.
    fn minted(fam: &FamilyRecord, now: UnixTime) -> BackendTokenRecord {
        BackendTokenRecord {
            user_id: fam.user_id.clone(),
            client_id: fam.client_id.clone(),
            scopes: fam.scopes.clone(),
            expires_at: now.plus(TTL),
            family_id: Some(fam.family_id.clone()),
        }
    }

    fn clock() -> std::sync::Arc<ManualClock> {
        ManualClock::new(UnixTime(1_800_000_000))
    }

    #[test]
    fn backend_token_of_a_live_family_stands_until_its_expiry() {
        let clock = clock();
        let fam = family("f1", "github:1", "mcpc_a", false, clock.now());
        let rec = minted(&fam, clock.now());
        assert_eq!(subject_standing(&rec, Some(&fam), clock.now()), Ok(()));
        clock.advance(TTL - 1);
        assert_eq!(subject_standing(&rec, Some(&fam), clock.now()), Ok(()));
        clock.advance(1);
        assert_eq!(
            subject_standing(&rec, Some(&fam), clock.now()),
            Err(SubjectEnded::Expired)
        );
    }

    #[test]
    fn revoked_clients_backend_token_is_refused_at_once() {
        let clock = clock();
        let mut fam = family("f1", "github:1", "mcpc_a", false, clock.now());
        let rec = minted(&fam, clock.now());
        clock.advance(1);
        fam.revoked = true;
        assert_eq!(
            subject_standing(&rec, Some(&fam), clock.now()),
            Err(SubjectEnded::Revoked)
        );
    }

    #[test]
    fn backend_token_whose_family_is_gone_is_refused() {
        let clock = clock();
        let fam = family("f1", "github:1", "mcpc_a", false, clock.now());
        let rec = minted(&fam, clock.now());
        assert_eq!(
            subject_standing(&rec, None, clock.now()),
            Err(SubjectEnded::Revoked)
        );
    }

    #[test]
    fn re_approval_does_not_revive_backend_tokens_of_the_revoked_family() {
        let clock = clock();
        let old = family("f1", "github:1", "mcpc_a", true, clock.now());
        let old_token = minted(&old, clock.now());
        clock.advance(10);
        // The person approves the same client again: a new family, live.
        let new = family("f2", "github:1", "mcpc_a", false, clock.now());
        // The old token is judged by its own family, which stays revoked...
        assert_eq!(
            subject_standing(&old_token, Some(&old), clock.now()),
            Err(SubjectEnded::Revoked)
        );
        // ...and the new family, even if handed in its place, is not its family.
        assert_eq!(
            subject_standing(&old_token, Some(&new), clock.now()),
            Err(SubjectEnded::Mismatch)
        );
        assert_eq!(
            subject_standing(&minted(&new, clock.now()), Some(&new), clock.now()),
            Ok(())
        );
    }

    #[test]
    fn backend_token_naming_another_persons_or_clients_family_is_refused() {
        let clock = clock();
        let fam = family("f1", "github:1", "mcpc_a", false, clock.now());
        for (user, client) in [("github:2", "mcpc_a"), ("github:1", "mcpc_b")] {
            let mut rec = minted(&fam, clock.now());
            rec.user_id = UserId::new(user);
            rec.client_id = ClientId::new(client);
            assert_eq!(
                subject_standing(&rec, Some(&fam), clock.now()),
                Err(SubjectEnded::Mismatch),
                "{user} {client}"
            );
        }
    }

    #[test]
    fn backend_token_from_before_family_binding_never_exchanges() {
        let clock = clock();
        let fam = family("f1", "github:1", "mcpc_a", false, clock.now());
        let mut rec = minted(&fam, clock.now());
        rec.family_id = None;
        assert_eq!(
            subject_standing(&rec, Some(&fam), clock.now()),
            Err(SubjectEnded::Unbound)
        );
        // And such a stored record still reads (the field defaults to absent).
        let old_json = r#"{"user_id":"github:1","client_id":"mcpc_a","scopes":["read:user"],"expires_at":1800000300}"#;
        let parsed: Result<BackendTokenRecord, _> = serde_json::from_str(old_json);
        assert!(parsed.is_ok_and(|r| r.family_id.is_none()));
    }
}
