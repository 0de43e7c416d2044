//! `GET /callback/github`: take the upstream state atomically and check it belongs to this
//! browser, exchange GitHub's code (with our PKCE verifier), learn who the person is from
//! `/user`, store their GitHub grant sealed, start a proxy session, and then either record
//! the consent and issue a code to the MCP client, or finish a plain sign-in.
//!
//! An authorization's return is also checked against the value the approving page kept in
//! its own storage (`bindings::browser_state`): the first arrival from GitHub answers with the
//! finish page, whose script sends that value back at once (`flow_proof`); a browser without it
//! stays on the page and answers it (`POST /callback/github`: Approve or Deny, from our own
//! origin, CSRF-bound to this browser and the state, and timed by the server).

use consent_ui::FinishPage;

use super::codes;
use super::github_access;
use super::{FlowError, pages};
use crate::app::App;
use crate::audit::{AuditEvent, aggregate};
use crate::bindings::admission::Admitted;
use crate::bindings::browser_state::{self, Return, Returned, StateError};
use crate::bindings::issuer::{self, Response};
use crate::bindings::redirect;
use crate::bindings::{audience, connect_link, consent_registry};
use crate::cookies;
use crate::crypto;
use crate::csrf;
use crate::github::client::{GitHubError, GitHubTokens, GitHubUser};
use crate::oauth::error::ErrorCode;
use crate::oauth::request::Params;
use crate::session::{self, SignInKind};
use crate::store::records::{FlowPurpose, ReturnTo, TxnRecord, UpstreamStateRecord};

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
    /// The finish page (see the module docs).
    Finish(Box<FinishPage>),
}

/// How the browser came back.
#[derive(Debug, Clone, Copy)]
pub enum CallbackRequest<'a> {
    /// `GET`: GitHub's redirect (with `flow_proof` once our page added it).
    FromGitHub {
        /// The raw query string.
        raw_query: &'a str,
    },
    /// `POST`: the person's answer on the finish page.
    Finish {
        /// Form body.
        body: &'a str,
        /// `Sec-Fetch-Site`.
        sec_fetch_site: Option<&'a str>,
        /// `Origin`.
        origin: Option<&'a str>,
    },
}

/// Request details the callback needs. (No `Debug`: it holds cookie values.)
pub struct CallbackInput<'a> {
    /// GET or POST.
    pub request: CallbackRequest<'a>,
    /// The flow cookie.
    pub flow_cookie: Option<&'a str>,
    /// The proxy session cookie.
    pub session_cookie: Option<&'a str>,
    /// The browser's CSRF cookie (the finish page's form is bound to it).
    pub csrf_cookie: Option<&'a str>,
}

/// The CSRF purpose of the finish page's form.
const FINISH_CSRF: &str = "finish";

/// What the finish form's CSRF token is bound to: the state and this browser's CSRF cookie.
fn finish_binding(state: &str, browser: &str) -> String {
    format!(
        "{}.{}",
        crypto::hash_secret(state),
        crypto::hash_secret(browser)
    )
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

/// Handles GitHub's redirect back to us, and the finish page's answer.
pub async fn github_callback(
    app: &App,
    input: CallbackInput<'_>,
) -> Result<CallbackOutcome, FlowError> {
    let finish = matches!(input.request, CallbackRequest::Finish { .. });
    let p = match input.request {
        CallbackRequest::FromGitHub { raw_query } => {
            Params::parse(raw_query).map_err(|_| FlowError::Page(pages::STATE_REJECTED))?
        }
        CallbackRequest::Finish {
            body,
            sec_fetch_site,
            origin,
        } => {
            if !csrf::same_origin(sec_fetch_site, origin, &app.config.public_url.origin()) {
                return Err(FlowError::Page(pages::FORBIDDEN_FORM));
            }
            let p = Params::parse(body).map_err(|_| FlowError::Page(pages::BAD_REQUEST))?;
            let browser = input
                .csrf_cookie
                .ok_or(FlowError::Page(pages::FORBIDDEN_FORM))?;
            let bound_to = finish_binding(p.get("state").unwrap_or_default(), browser);
            if !csrf::verify(&app.keys.csrf, FINISH_CSRF, &bound_to, p.get("csrf")) {
                return Err(FlowError::Page(pages::FORBIDDEN_FORM));
            }
            p
        }
    };
    let returned = if finish {
        match p.get("decision") {
            Some("approve") => Returned::Confirmed,
            Some("deny") => Returned::Cancelled,
            _ => return Err(FlowError::Page(pages::BAD_REQUEST)),
        }
    } else if p.get("error").is_some() {
        Returned::Cancelled
    } else {
        Returned::FromGitHub {
            page_proof: p.get(browser_state::PROOF_FIELD),
        }
    };
    let now = app.clock.now();
    let bound = match browser_state::take(
        app.store.as_ref(),
        &app.keys.consent_cookie,
        now,
        app.clock.now_millis(),
        p.get("state"),
        input.flow_cookie,
        returned,
    )
    .await
    {
        Ok(Return::Bound(b)) => b,
        Ok(Return::Confirm { record, too_soon }) => {
            return finish_page(app, &p, &record, too_soon, input.csrf_cookie).await;
        }
        Ok(Return::Cancelled(record)) => {
            return Err(cancelled(app, record, finish, input.session_cookie).await?);
        }
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
    let session_cookie = input.session_cookie;
    let purpose = bound.get().purpose.clone();
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

/// A return that grants nothing: GitHub reported an error (the person cancelled there), or
/// the person chose Deny on the finish page. The client hears `access_denied`.
async fn cancelled(
    app: &App,
    record: UpstreamStateRecord,
    denied_here: bool,
    session_cookie: Option<&str>,
) -> Result<FlowError, FlowError> {
    Ok(match &record.purpose {
        FlowPurpose::Authorize { txn, .. } if denied_here => {
            let person = session::current(app.store.as_ref(), session_cookie)
                .await?
                .map(|s| s.record().user_id.clone());
            app.audit
                .record(AuditEvent::ConsentDenied {
                    client_id: txn.client_id.clone(),
                    user_id: person,
                    redirect_uri: txn.registered_redirect.clone(),
                    warnings: txn.warnings.clone(),
                })
                .await?;
            client_error(
                app,
                txn,
                ErrorCode::AccessDenied,
                "the person denied the request",
            )
        }
        FlowPurpose::Authorize { txn, .. } => client_error(
            app,
            txn,
            ErrorCode::AccessDenied,
            "the sign-in at GitHub was cancelled",
        ),
        FlowPurpose::SignIn { .. } | FlowPurpose::Connect { .. } => {
            FlowError::Page(pages::SIGN_IN_CANCELLED)
        }
    })
}

/// The finish page for an authorization whose returning browser did not show the approving
/// page's value (its showing is recorded: `browser_state::take`).
async fn finish_page(
    app: &App,
    p: &Params,
    record: &UpstreamStateRecord,
    too_soon: bool,
    csrf_cookie: Option<&str>,
) -> Result<CallbackOutcome, FlowError> {
    let FlowPurpose::Authorize { txn, .. } = &record.purpose else {
        // Only authorizations have a return check.
        return Err(FlowError::Page(pages::STATE_REJECTED));
    };
    let state = p.get("state").unwrap_or_default();
    let (browser, set_cookie) = csrf::browser_binding(csrf_cookie)?;
    let client_name = app
        .clients
        .known(&txn.client_id)
        .await?
        .map_or_else(|| "Unnamed client".to_owned(), |c| c.display_name());
    Ok(CallbackOutcome {
        next: Next::Finish(Box::new(FinishPage {
            client_name,
            client_id: txn.client_id.as_str().to_owned(),
            redirect_uri: txn.redirect_uri.clone(),
            too_soon,
            form_action: "/callback/github".to_owned(),
            state: state.to_owned(),
            code: p.get("code").unwrap_or_default().to_owned(),
            csrf: csrf::token(
                &app.keys.csrf,
                FINISH_CSRF,
                &finish_binding(state, &browser),
            ),
        })),
        set_cookies: set_cookie.into_iter().collect(),
    })
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
