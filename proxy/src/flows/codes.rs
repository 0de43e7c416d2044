//! Issuing an authorization code. `issue_code` takes, by value, the proof of every binding
//! that must hold before a code may exist: the redirect URI matched the registration, the
//! person consented to this client, redirect and scopes and is present in this browser
//! (`ConsentGranted`, which carries the `RedirectMatched` and the `Presence` it was made
//! from), PKCE was validated (`CodeChallenge`) and the audience is this server's resource
//! (`Audience`). The redirect it returns carries `iss`.

use super::FlowError;
use crate::app::App;
use crate::audit::AuditEvent;
use crate::audit::detect;
use crate::bindings::approvals;
use crate::bindings::audience::Audience;
use crate::bindings::consent_registry::{self, ConsentGranted, Presence};
use crate::bindings::issuer::{self, Response};
use crate::oauth::grant;
use crate::oauth::pkce::CodeChallenge;
use crate::store::approvals as approval_store;
use crate::store::codes;
use crate::store::records::{ClientRecord, CodeRecord};

/// What detection needs to know about a code being issued, read back from the store rather
/// than trusted from the proof in hand (a regression that forged `ConsentGranted` would show).
async fn code_issue_facts(
    app: &App,
    consent: &ConsentGranted,
) -> Result<detect::CodeIssueFacts, FlowError> {
    let user = consent.user_id();
    let redirect = consent.redirect();
    // Every kind of client (configured, metadata document, registered), without fetching.
    let client: Option<ClientRecord> = app.clients.known(redirect.client_id()).await?;
    let fingerprint = client
        .as_ref()
        .map(crate::clients::fingerprint)
        .unwrap_or_default();
    let on_record = consent_registry::on_record(
        app.store.as_ref(),
        user,
        redirect,
        consent.scopes(),
        &fingerprint,
    )
    .await?;
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

/// Stores a single-use code and returns the redirect to the client. The person the code is
/// for is the consent's, and so is the proof they are present: there is no separate session
/// argument to pair with someone else's consent.
///
/// ```compile_fail
/// use mcp_oauth_proxy::app::App;
/// use mcp_oauth_proxy::bindings::audience::Audience;
/// use mcp_oauth_proxy::bindings::consent_registry::{ConsentGranted, Presence};
/// use mcp_oauth_proxy::flows::codes::issue_code;
/// use mcp_oauth_proxy::oauth::pkce::CodeChallenge;
/// use mcp_oauth_proxy::session::FreshSession;
/// // Alice's consent with Mallory's fresh session: no such call exists.
/// async fn pair(app: &App, alices: ConsentGranted, mallorys: FreshSession, c: CodeChallenge, a: Audience) {
///     let _ = issue_code(app, alices, Presence::Session(mallorys), c, a, None).await;
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::app::App;
/// use mcp_oauth_proxy::bindings::audience::Audience;
/// use mcp_oauth_proxy::bindings::consent_registry::ConsentGranted;
/// use mcp_oauth_proxy::flows::codes::issue_code;
/// use mcp_oauth_proxy::oauth::pkce::CodeChallenge;
/// // The call that exists: the consent brings its own presence.
/// async fn issue(app: &App, consent: ConsentGranted, c: CodeChallenge, a: Audience) {
///     let _ = issue_code(app, consent, c, a, None).await;
/// }
/// ```
pub async fn issue_code(
    app: &App,
    consent: ConsentGranted,
    challenge: CodeChallenge,
    audience: Audience,
    client_state: Option<&str>,
) -> Result<String, FlowError> {
    let now = app.clock.now();
    let redirect = consent.redirect();
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
    let alerts =
        detect::code_issue_alerts(&app.config.alerts, &code_issue_facts(app, &consent).await?);
    app.audit
        .record(AuditEvent::CodeIssued {
            user_id: consent.user_id().clone(),
            client_id: redirect.client_id().clone(),
            consent_remembered: matches!(consent.presence(), Presence::Session(_)),
            code_id,
            family_id: record.family_id.clone(),
            redirect_uri: redirect.registered().to_owned(),
        })
        .await?;
    for alert in alerts {
        app.audit.record(alert).await?;
    }
    Ok(issuer::client_redirect(
        redirect,
        app.issuer(),
        Response::Code(code.secret()),
        client_state,
    ))
}
