//! `GET /callback/github`: take the upstream state atomically and check it belongs to this
//! browser, exchange GitHub's code (with our PKCE verifier), learn who the person is from
//! `/user`, store their GitHub grant sealed, start a proxy session, and then either record
//! the consent and issue a code to the MCP client, or finish a plain sign-in.

use super::codes;
use super::github_access;
use super::{FlowError, pages};
use crate::app::App;
use crate::audit::{AuditEvent, aggregate};
use crate::bindings::admission::Admitted;
use crate::bindings::browser_state::{self, StateError};
use crate::bindings::issuer::{self, Response};
use crate::bindings::redirect;
use crate::bindings::{audience, connect_link, consent_registry};
use crate::cookies;
use crate::github::client::{GitHubError, GitHubTokens, GitHubUser};
use crate::oauth::error::ErrorCode;
use crate::oauth::request::Params;
use crate::session::{self, SignInKind};
use crate::store::records::{FlowPurpose, ReturnTo, TxnRecord};

/// What the browser gets, with cookies.
#[derive(Debug)]
pub struct CallbackOutcome {
    /// Where to go, or a page to show (a finished connect link: no redirect anywhere).
    pub next: Next,
    /// `Set-Cookie` values.
    pub set_cookies: Vec<String>,
}

/// Redirect or page.
#[derive(Debug)]
pub enum Next {
    /// 303 to this location.
    Redirect(String),
    /// A page: title and message.
    Page(&'static str, String),
}

fn client_error(
    app: &App,
    txn: &TxnRecord,
    code: ErrorCode,
    description: &'static str,
) -> FlowError {
    FlowError::ClientRedirect(issuer::client_redirect(
        &redirect::of_transaction(txn),
        app.issuer(),
        Response::Error(code, description),
        txn.client_state.as_deref(),
    ))
}

fn github_failure(app: &App, purpose: &FlowPurpose, e: &GitHubError) -> FlowError {
    tracing::warn!(error = %e, "GitHub sign-in failed");
    match purpose {
        FlowPurpose::Authorize { txn, .. } => match e {
            GitHubError::Unavailable(_) => client_error(
                app,
                txn,
                ErrorCode::TemporarilyUnavailable,
                "GitHub is unavailable; try again",
            ),
            _ => client_error(
                app,
                txn,
                ErrorCode::AccessDenied,
                "GitHub did not complete the sign-in",
            ),
        },
        FlowPurpose::SignIn { .. } | FlowPurpose::Connect { .. } => {
            FlowError::Page(pages::GITHUB_FAILED)
        }
    }
}

/// Handles GitHub's redirect back to us.
pub async fn github_callback(
    app: &App,
    raw_query: &str,
    flow_cookie: Option<&str>,
    session_cookie: Option<&str>,
) -> Result<CallbackOutcome, FlowError> {
    let p = Params::parse(raw_query).map_err(|_| FlowError::Page(pages::STATE_REJECTED))?;
    let now = app.clock.now();
    let bound = match browser_state::take(
        app.store.as_ref(),
        &app.keys.consent_cookie,
        now,
        p.get("state"),
        flow_cookie,
    )
    .await
    {
        Ok(b) => b,
        Err(e @ (StateError::Missing | StateError::Unknown | StateError::Cookie(_))) => {
            // Anonymous: anyone can send a bad state. Counted per source and minute
            // (`audit::aggregate`), never one stored event per request.
            app.audit.refused(match e {
                StateError::Missing => aggregate::Refusal::CallbackStateMissing,
                StateError::Unknown => aggregate::Refusal::CallbackStateUnknown,
                _ => aggregate::Refusal::CallbackStateNotThisBrowser,
            });
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    };
    let purpose = bound.get().purpose.clone();

    if p.get("error").is_some() {
        return Err(match &purpose {
            FlowPurpose::Authorize { txn, .. } => client_error(
                app,
                txn,
                ErrorCode::AccessDenied,
                "the sign-in at GitHub was cancelled",
            ),
            FlowPurpose::SignIn { .. } | FlowPurpose::Connect { .. } => {
                FlowError::Page(pages::SIGN_IN_CANCELLED)
            }
        });
    }
    let code = p
        .get("code")
        .ok_or_else(|| github_failure(app, &purpose, &GitHubError::Protocol("no code".into())))?;
    let tokens: GitHubTokens = app
        .github
        .exchange_code(code, &bound.get().pkce_verifier, now)
        .await
        .map_err(|e| github_failure(app, &purpose, &e))?;
    let gh: GitHubUser = app
        .github
        .user(&tokens.access_token)
        .await
        .map_err(|e| github_failure(app, &purpose, &e))?;
    // Admission before anything is stored: no session, grant, consent or code for someone
    // `[access]` does not admit (the witness is what storing them takes).
    let admitted = super::admission::at_sign_in(app, &tokens.access_token, &gh)
        .await
        .map_err(|e| match e {
            FlowError::GitHub(g) => github_failure(app, &purpose, &g),
            other => other,
        })?;
    let user_id = admitted.user_id().clone();

    match purpose {
        FlowPurpose::SignIn { return_to, sign_in } => {
            // Identity only: the token minted to learn who this is must not quietly reconnect
            // an account the person disconnected, nor pile up at GitHub (10 per user and app).
            app.github.delete_token(&tokens.access_token).await;
            let set_cookies = start_session(app, now, &admitted, &gh, sign_in).await?;
            let location = match return_to {
                ReturnTo::Account => "/account".to_owned(),
                ReturnTo::Connect { link_id } => format!(
                    "/connect/{}",
                    connect_link::code_for(&app.keys.connect_link, &link_id)
                ),
                ReturnTo::Approve { link_id } => {
                    connect_link::approval::path_of(&app.keys.connect_link, &link_id)
                }
            };
            Ok(CallbackOutcome {
                next: Next::Redirect(location),
                set_cookies,
            })
        }
        FlowPurpose::Connect { link_id } => {
            let done = super::connect::finish_connect(
                app,
                &link_id,
                session_cookie,
                &admitted,
                &gh,
                &tokens,
            )
            .await;
            if done.is_err() {
                app.github.delete_token(&tokens.access_token).await;
            }
            let (title, message) = done?;
            Ok(CallbackOutcome {
                next: Next::Page(title, message),
                set_cookies: vec![cookies::clear(cookies::FLOW_COOKIE)],
            })
        }
        FlowPurpose::Authorize { txn, .. } => {
            let within = github_access::within_consent(app, &user_id, &txn.scopes, &tokens).await?;
            app.grants.save(&admitted, &gh, &tokens, within).await?;
            app.audit
                .record(AuditEvent::GitHubGrantStored {
                    user_id: user_id.clone(),
                    login: gh.login.clone(),
                })
                .await?;
            // Sent to GitHub without `prompt`: a session that never satisfies a link's
            // freshness check.
            let set_cookies = start_session(app, now, &admitted, &gh, SignInKind::Silent).await?;
            let redirect = redirect::of_transaction(&txn);
            let host = redirect.destination_key();
            // The consent is the admitted person's and carries this browser's state: the code
            // is issued to the person GitHub just confirmed, in the browser that approved.
            let consent = consent_registry::record(
                app.store.as_ref(),
                now,
                &admitted,
                redirect,
                txn.scopes.clone(),
                &txn.client_fingerprint,
                bound,
            )
            .await?;
            // Approving a client on the consent page lets it use GitHub with those scopes.
            github_access::allow(app, &user_id, &txn.client_id, &txn.scopes).await?;
            super::authorize::note_approver(app, &host, &txn.client_id, &user_id).await?;
            app.audit
                .record(AuditEvent::ConsentRecorded {
                    user_id: user_id.clone(),
                    client_id: txn.client_id.clone(),
                    redirect_uri: txn.registered_redirect.clone(),
                    scopes: txn.scopes.to_wire(),
                })
                .await?;
            let audience = audience::check_resource(Some(&txn.resource), &app.resource())?;
            let location = codes::issue_code(
                app,
                consent,
                txn.code_challenge.clone(),
                audience,
                txn.client_state.as_deref(),
            )
            .await?;
            Ok(CallbackOutcome {
                next: Next::Redirect(location),
                set_cookies,
            })
        }
    }
}

/// Starts a proxy session for the person GitHub confirmed and `[access]` admitted, remembering
/// how GitHub was asked to run the sign-in; returns the cookies to set.
async fn start_session(
    app: &App,
    now: crate::clock::UnixTime,
    admitted: &Admitted,
    gh: &GitHubUser,
    sign_in: SignInKind,
) -> Result<Vec<String>, FlowError> {
    let user_id = admitted.user_id();
    let session_cookie = session::start(
        app.store.as_ref(),
        now,
        &app.config.session,
        user_id.clone(),
        gh.login(),
        sign_in,
    )
    .await?;
    app.audit
        .record(AuditEvent::SignedIn {
            user_id: user_id.clone(),
            login: gh.login.clone(),
            sign_in,
        })
        .await?;
    Ok(vec![session_cookie, cookies::clear(cookies::FLOW_COOKIE)])
}
