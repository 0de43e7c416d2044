//! Issuing an authorization code. `issue_code` takes, by value, the proof of every binding
//! that must hold before a code may exist: the redirect URI matched the registration and the
//! person consented to this client, redirect and scopes (`ConsentGranted`), the person is
//! present in this browser (`Presence`), PKCE was validated (`CodeChallenge`) and the
//! audience is this server's resource (`Audience`). The redirect it returns carries `iss`.

use super::FlowError;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::audit::detect;
use crate::bindings::approvals;
use crate::bindings::audience::Audience;
use crate::bindings::browser_state::BrowserBound;
use crate::bindings::consent_registry::{self, ConsentGranted};
use crate::bindings::issuer::{self, Response};
use crate::bindings::redirect::RedirectMatched;
use crate::oauth::grant;
use crate::oauth::pkce::CodeChallenge;
use crate::session::FreshSession;
use crate::store::approvals as approval_store;
use crate::store::codes;
use crate::store::records::{ClientRecord, CodeRecord, UpstreamStateRecord};

/// How we know the person is at this browser now.
#[derive(Debug)]
pub enum Presence {
    /// They just came back from GitHub to the browser that approved the consent page.
    Callback(Box<BrowserBound<UpstreamStateRecord>>),
    /// A fresh sign-in in this browser, a same-origin or direct navigation, and a remembered
    /// consent.
    Session(FreshSession),
}

/// What detection needs to know about a code being issued, read back from the store rather
/// than trusted from the proof in hand (a regression that forged `ConsentGranted` would show).
async fn code_issue_facts(
    app: &App,
    consent: &ConsentGranted,
    redirect: &RedirectMatched,
) -> Result<detect::CodeIssueFacts, FlowError> {
    let user = consent.user_id();
    // Every kind of client (configured, metadata document, registered), without fetching.
    let client: Option<ClientRecord> = app.clients.known(redirect.client_id()).await?;
    let fingerprint = client
        .as_ref()
        .map(crate::clients::fingerprint)
        .unwrap_or_default();
    let on_record = consent_registry::lookup(
        app.store.as_ref(),
        user,
        redirect,
        consent.scopes(),
        &fingerprint,
    )
    .await?
    .is_some();
    let host = redirect.destination_key();
    let rules = app.approval_rules();
    let seen = approval_store::seen_host(app.store.as_ref(), &host).await?;
    let client_approvals =
        approval_store::of_client(app.store.as_ref(), redirect.client_id()).await?;
    // The callback noted this person as an approver already: count only the others.
    let me = crate::crypto::hash_secret(user.as_str());
    let now = app.clock.now();
    Ok(detect::CodeIssueFacts {
        user_id: user.clone(),
        client_id: redirect.client_id().clone(),
        consent_on_record: on_record,
        client_age_secs: client.map(|c| {
            approvals::established_secs(
                rules,
                now.since(c.registered_at),
                client_approvals.as_ref(),
                Some(&me),
                now,
            )
        }),
        loopback: redirect.is_loopback(),
        host_seen_before: approvals::host_known(rules, &host, seen.as_ref(), Some(&me)),
        redirect_host: host,
    })
}

/// Stores a single-use code and returns the redirect to the client.
pub async fn issue_code(
    app: &App,
    consent: ConsentGranted,
    presence: Presence,
    challenge: CodeChallenge,
    audience: Audience,
    client_state: Option<&str>,
) -> Result<String, FlowError> {
    let now = app.clock.now();
    let redirect = consent.redirect().clone();
    // The client completed an authorization: its registration is kept for good. Before the
    // code exists, so a registration that is gone gets none.
    super::register::mark_used(app, redirect.client_id()).await?;
    app.clients.mark_used(redirect.client_id()).await?;
    let code = grant::new_code()?;
    let code_id = crate::crypto::b64url(&crate::crypto::random_bytes::<12>()?);
    let record = CodeRecord {
        code_id: code_id.clone(),
        client_id: redirect.client_id().clone(),
        redirect_uri: redirect.uri().to_owned(),
        redirect_uri_explicit: redirect.explicit(),
        code_challenge: challenge,
        resource: audience.as_str().to_owned(),
        scopes: consent.scopes().clone(),
        user_id: consent.user_id().clone(),
        family_id: grant::new_family_id()?,
        issued_at: now,
    };
    codes::put(
        app.store.as_ref(),
        &code,
        &record,
        now.plus(app.config.tokens.code_ttl_secs),
    )
    .await?;
    consent_registry::touch(
        app.store.as_ref(),
        now,
        consent.user_id(),
        redirect.client_id(),
    )
    .await?;
    let alerts = detect::code_issue_alerts(
        &app.config.alerts,
        &code_issue_facts(app, &consent, &redirect).await?,
    );
    app.audit
        .record(AuditEvent::CodeIssued {
            user_id: consent.user_id().clone(),
            client_id: redirect.client_id().clone(),
            consent_remembered: matches!(presence, Presence::Session(_)),
            code_id,
            family_id: record.family_id.clone(),
            redirect_uri: redirect.registered().to_owned(),
        })
        .await?;
    for alert in alerts {
        app.audit.record(alert).await?;
    }
    Ok(issuer::client_redirect(
        &redirect,
        app.issuer(),
        Response::Code(code.secret()),
        client_state,
    ))
}
