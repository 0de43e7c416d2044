//! `POST /consent`: the person's decision on the consent page. The form must come from our own
//! page (same-origin check and a CSRF token bound to the transaction) before the transaction
//! is taken (single use). Approval creates the browser-bound upstream state and its cookie,
//! right before the redirect to GitHub; denial returns `access_denied` with `iss`.
//!
//! Double-clickjacking: the consent page's script keeps its buttons disabled until the page has
//! been visible and focused for a second (`consent_ui::CONSENT_SCRIPT`). Without JavaScript the
//! page offers Continue instead of Approve (`decision=review`), which shows a confirmation page;
//! an Approve that comes within [`CONFIRM_MIN_MS`] of that page appearing is refused by showing
//! it again. The confirmation page exists only as the answer to our own form's POST, so no other
//! site can load it ahead of time and reveal it under a double-click; the first page's render
//! time proves nothing (another site can load it in a background window long before), which is
//! why the server times only the confirmation step.

use consent_ui::ConsentConfirmPage;

use super::{FlowError, pages};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::browser_state;
use crate::bindings::issuer::{self, Response};
use crate::bindings::redirect;
use crate::crypto;
use crate::csrf;
use crate::ids::TxnId;
use crate::oauth::error::ErrorCode;
use crate::oauth::request::Params;
use crate::store::records::{FlowPurpose, TxnRecord};
use crate::store::{Held, transactions};

/// An Approve from the confirmation page counts only once the page has been shown this long
/// (milliseconds): longer than the second click of any double-click (operating systems' double-click
/// interval is at most 500 ms by default), shorter than a person needs to read the page.
pub const CONFIRM_MIN_MS: u64 = 750;

/// Where the browser goes next.
#[derive(Debug)]
pub enum ConsentOutcome {
    /// The confirmation page (no-JavaScript path, or an Approve that came too soon).
    Confirm(Box<ConsentConfirmPage>),
    /// To GitHub, with the flow cookie.
    ToGitHub {
        /// GitHub authorize URL.
        url: String,
        /// `Set-Cookie` binding this browser to the flow.
        set_cookie: String,
    },
    /// Back to the client (denied).
    ToClient(String),
}

/// Request details the decision needs. (No `Debug`: it holds the form and cookie values.)
pub struct ConsentInput<'a> {
    /// Form body.
    pub body: &'a str,
    /// The browser's CSRF cookie value.
    pub csrf_cookie: Option<&'a str>,
    /// `Sec-Fetch-Site`.
    pub sec_fetch_site: Option<&'a str>,
    /// `Origin`.
    pub origin: Option<&'a str>,
    /// The proxy session cookie, if any (names the person in the audit trail only).
    pub session_cookie: Option<&'a str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Approve,
    Deny,
    /// The `<noscript>` Continue: show the confirmation page.
    Review,
}

/// Handles the decision.
pub async fn decide(app: &App, input: ConsentInput<'_>) -> Result<ConsentOutcome, FlowError> {
    if !csrf::same_origin(
        input.sec_fetch_site,
        input.origin,
        &app.config.public_url.origin(),
    ) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let p = Params::parse(input.body).map_err(|_| FlowError::Page(pages::BAD_REQUEST))?;
    let txn_id = TxnId::new(p.get("txn").ok_or(FlowError::Page(pages::TXN_GONE))?);
    let browser = crypto::hash_secret(
        input
            .csrf_cookie
            .ok_or(FlowError::Page(pages::FORBIDDEN_FORM))?,
    );
    let binding = super::authorize::consent_binding(&txn_id, &browser);
    if !csrf::verify(&app.keys.csrf, "consent", &binding, p.get("csrf")) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let decision = match p.get("decision") {
        Some("approve") => Decision::Approve,
        Some("deny") => Decision::Deny,
        Some("review") => Decision::Review,
        _ => return Err(FlowError::Page(pages::BAD_REQUEST)),
    };
    if decision != Decision::Deny {
        let Some(txn) = transactions::hold(app.store.as_ref(), &txn_id).await? else {
            return Err(FlowError::Page(pages::TXN_GONE));
        };
        if !crypto::ct_eq(txn.value().browser.as_bytes(), browser.as_bytes()) {
            return Err(FlowError::Page(pages::FORBIDDEN_FORM));
        }
        let now_ms = app.clock.now_millis();
        let too_soon = decision == Decision::Approve
            && txn
                .value()
                .confirm_shown_at_ms
                .is_some_and(|shown| now_ms.saturating_sub(shown) < CONFIRM_MIN_MS);
        if decision == Decision::Review || too_soon {
            let csrf = p.get("csrf").unwrap_or_default().to_owned();
            return confirm(app, &txn_id, txn, now_ms, too_soon, csrf).await;
        }
    }
    let txn = transactions::take(app.store.as_ref(), &txn_id)
        .await?
        .ok_or(FlowError::Page(pages::TXN_GONE))?;
    // The MAC already covers it; checking the record too keeps the rule visible here.
    if !crypto::ct_eq(txn.browser.as_bytes(), browser.as_bytes()) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    // Who decided, as far as this browser's session says; GitHub confirms it at the callback.
    let person = crate::session::current(app.store.as_ref(), input.session_cookie)
        .await?
        .map(|s| s.record().user_id.clone());
    match decision {
        Decision::Review => Err(FlowError::Page(pages::BAD_REQUEST)),
        Decision::Deny => {
            app.audit
                .record(AuditEvent::ConsentDenied {
                    client_id: txn.client_id.clone(),
                    user_id: person,
                    redirect_uri: txn.registered_redirect.clone(),
                    warnings: txn.warnings.clone(),
                })
                .await?;
            Ok(ConsentOutcome::ToClient(issuer::client_redirect(
                &redirect::of_transaction(&txn),
                app.issuer(),
                Response::Error(ErrorCode::AccessDenied, "the person denied the request"),
                txn.client_state.as_deref(),
            )))
        }
        Decision::Approve => {
            let scopes = txn.scopes.to_wire();
            let client_id = txn.client_id.clone();
            let redirect_uri = txn.registered_redirect.clone();
            let warnings = txn.warnings.clone();
            let now = app.clock.now();
            // The value the consent page's script keeps in this browser's own storage: the
            // browser coming back from GitHub must show it, or confirm (`browser_state`).
            let started = browser_state::begin_authorization(
                app.store.as_ref(),
                &app.keys.consent_cookie,
                now,
                txn_id.as_str().to_owned(),
                FlowPurpose::Authorize {
                    txn_id: txn_id.clone(),
                    txn: Box::new(txn),
                },
                p.get(browser_state::PROOF_FIELD),
            )
            .await?;
            app.audit
                .record(AuditEvent::ConsentApproved {
                    client_id,
                    scopes,
                    user_id: person,
                    redirect_uri,
                    warnings,
                })
                .await?;
            Ok(ConsentOutcome::ToGitHub {
                url: app
                    .github
                    .authorize_url(&started.state, &started.code_challenge, None),
                set_cookie: started.set_cookie,
            })
        }
    }
}

/// Shows the confirmation page and records when, unless the transaction was taken or changed
/// meanwhile (compare-and-swap: a decided transaction is never brought back).
async fn confirm(
    app: &App,
    txn_id: &TxnId,
    held: Held<TxnRecord>,
    now_ms: u64,
    too_soon: bool,
    csrf: String,
) -> Result<ConsentOutcome, FlowError> {
    let mut txn = held.value().clone();
    txn.confirm_shown_at_ms = Some(now_ms);
    if !held
        .swap(app.store.as_ref(), &txn, held.expires_at())
        .await?
    {
        return Err(FlowError::Page(pages::TXN_GONE));
    }
    let client_name = app
        .clients
        .known(&txn.client_id)
        .await?
        .map_or_else(|| "Unnamed client".to_owned(), |c| c.display_name());
    Ok(ConsentOutcome::Confirm(Box::new(ConsentConfirmPage {
        client_name,
        client_id: txn.client_id.as_str().to_owned(),
        redirect_uri: txn.redirect_uri,
        github_host: app.github.display_host(),
        too_soon,
        form_action: "/consent".to_owned(),
        txn: txn_id.as_str().to_owned(),
        csrf,
    })))
}
