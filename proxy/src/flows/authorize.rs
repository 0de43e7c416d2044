//! `/authorize`: validate the client and redirect URI first (errors before that are pages,
//! never redirects), then the rest of the request (errors go back to the client with `iss`),
//! store the transaction server-side, and either issue a code at once (remembered consent,
//! fresh sign-in, not cross-site, working GitHub grant) or show the consent page.

use consent_ui::{ConsentPage, ScopeView, WarningView};

use super::codes;
use super::{FlowError, pages};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::approvals;
use crate::bindings::browser_state;
use crate::bindings::consent_registry::NotCovered;
use crate::bindings::issuer::{self, Response};
use crate::bindings::redirect::{self, Destination, RedirectMatched};
use crate::bindings::{audience, consent_registry, consent_scope};
use crate::clients::{ClientKind, ClientsError, ResolvedClient};
use crate::clock::ago;
use crate::crypto;
use crate::csrf;
use crate::github::grants::GrantStatus;
use crate::ids::{ClientId, TxnId};
use crate::oauth::error::ErrorCode;
use crate::oauth::pkce::CodeChallenge;
use crate::oauth::request::AuthorizeQuery;
use crate::session;
use crate::store::approvals as approval_store;
use crate::store::records::TxnRecord;
use crate::store::transactions;

/// The warning for an authorization that goes to a program on the person's own machine.
const LOCAL_PROGRAM: &str = "A program on this computer will receive access";
/// A client registered less recently than this gets a warning.
const NEW_CLIENT_SECS: u64 = 600;

/// What the browser sees next.
#[derive(Debug)]
pub enum AuthorizeOutcome {
    /// The consent page, and the browser's CSRF cookie if it needs a new one.
    Consent(Box<ConsentPage>, Option<String>),
    /// A redirect back to the client (code or error).
    Redirect(String),
}

/// The parts of the request the flow needs. (No `Debug`: it holds cookie values.)
pub struct AuthorizeInput<'a> {
    /// Raw query string.
    pub raw_query: &'a str,
    /// Session cookie value.
    pub session_cookie: Option<String>,
    /// The browser's CSRF cookie value.
    pub csrf_cookie: Option<String>,
    /// `Sec-Fetch-Site`.
    pub sec_fetch_site: Option<String>,
    /// The client IP (`http::client_ip`), for the metadata-document fetch budget.
    pub client_ip: Option<std::net::IpAddr>,
}

/// Runs `/authorize`.
pub async fn authorize(
    app: &App,
    input: AuthorizeInput<'_>,
) -> Result<AuthorizeOutcome, FlowError> {
    let q =
        AuthorizeQuery::parse(input.raw_query).map_err(|_| FlowError::Page(pages::BAD_REQUEST))?;

    // 1. Client and redirect URI. Until both are verified nothing redirects.
    let client_id = ClientId::new(
        q.client_id
            .clone()
            .ok_or(FlowError::Page(pages::UNKNOWN_CLIENT))?,
    );
    let resolved = match app.clients.resolve(&client_id, input.client_ip).await {
        Ok(Some(c)) => c,
        Ok(None) => return Err(FlowError::Page(pages::UNKNOWN_CLIENT)),
        Err(ClientsError::Store(e)) => return Err(e.into()),
        Err(e) if e.is_temporary() => {
            return Err(FlowError::Page(pages::client_unreachable(e.description())));
        }
        Err(e) => return Err(FlowError::Page(pages::client_unverifiable(e.description()))),
    };
    let client = resolved.record();
    let redirect = redirect::match_redirect(
        &client.client_id,
        &client.redirect_uris,
        q.redirect_uri.as_deref(),
    )
    .map_err(|_| FlowError::Page(pages::BAD_REDIRECT))?;
    // A known client (an unknown id is request text, so it is not recorded).
    crate::telemetry::span::record_client_id(&client.client_id);

    // 2. Everything else; errors now go back to the verified redirect URI.
    let state = q.state.as_deref();
    let fail = |code: ErrorCode, description: &'static str| {
        FlowError::ClientRedirect(issuer::client_redirect(
            &redirect,
            app.issuer(),
            Response::Error(code, description),
            state,
        ))
    };
    match q.response_type.as_deref() {
        Some("code") => {}
        Some(_) => {
            return Err(fail(
                ErrorCode::UnsupportedResponseType,
                "only response_type=code is supported",
            ));
        }
        None => return Err(fail(ErrorCode::InvalidRequest, "response_type is required")),
    }
    let challenge = CodeChallenge::parse(
        q.code_challenge.as_deref(),
        q.code_challenge_method.as_deref(),
    )
    .map_err(|e| fail(e.code, e.description))?;
    let resource = app.resource();
    let audience = audience::check_resource(q.resource.as_deref(), &resource)
        .map_err(|e| fail(e.code, e.description))?;
    // Every consent is for the whole `[github] scopes` (what the backend acts with), plus the
    // tool permissions it names; any other scope is `invalid_scope`.
    let permissions = app.tool_permissions();
    let scopes =
        consent_scope::for_authorization(q.scope.as_deref(), &app.offered_scopes, &permissions)
            .map_err(|e| fail(e.code, e.description))?;

    let now = app.clock.now();

    // 3. Skip the page only with a fresh sign-in, a covering consent, a navigation that is not
    //    cross-site, a GitHub grant that still works, and the person still admitted.
    let session = session::current(app.store.as_ref(), input.session_cookie.as_deref()).await?;
    let mut redirect = redirect;
    if let Some(s) = &session
        && resolved.remember_consent()
        && let Some(fresh) =
            s.fresh_for_consent_skip(now, &app.config.session, input.sec_fetch_site.as_deref())
    {
        let usable = app.grants.status(fresh.user_id()).await? == GrantStatus::Usable
            // Asked again of GitHub when due; anything but admitted goes through the page and
            // a sign-in, where admission is decided afresh.
            && super::admission::standing(app, fresh.user_id()).await?.0
                == super::admission::Verdict::Admitted;
        if usable {
            // The consent is looked up for the session's own person and carries that session.
            redirect = match consent_registry::lookup(
                app.store.as_ref(),
                fresh,
                redirect,
                &scopes,
                resolved.fingerprint(),
            )
            .await?
            {
                Ok(consent) => {
                    let url = codes::issue_code(app, consent, challenge, audience, state).await?;
                    return Ok(AuthorizeOutcome::Redirect(url));
                }
                Err(NotCovered(redirect)) => redirect,
            };
        }
    }

    // 4. Remember the request server-side and show the consent page, bound to this browser.
    let (browser, set_cookie) = csrf::browser_binding(input.csrf_cookie.as_deref())?;
    let browser = crypto::hash_secret(&browser);
    let txn_id = TxnId::new(crypto::random_token()?);
    let warnings = warnings(app, &resolved, &redirect).await?;
    let txn = TxnRecord {
        client_fingerprint: resolved.fingerprint().to_owned(),
        warnings: warnings.iter().map(|w| w.title.clone()).collect(),
        client_id: client.client_id.clone(),
        redirect_uri: redirect.uri().to_owned(),
        registered_redirect: redirect.registered().to_owned(),
        redirect_uri_explicit: redirect.explicit(),
        code_challenge: challenge,
        resource: audience.as_str().to_owned(),
        scopes: scopes.clone(),
        client_state: q.state.clone(),
        browser: browser.clone(),
        created_at: now,
        confirm_shown_at_ms: None,
    };
    transactions::put(
        app.store.as_ref(),
        &txn_id,
        &txn,
        now.plus(browser_state::TXN_TTL_SECS),
    )
    .await?;

    app.audit
        .record(AuditEvent::ConsentShown {
            client_id: client.client_id.clone(),
            redirect_host: redirect.destination_key(),
            warnings: warnings.iter().map(|w| w.title.clone()).collect(),
        })
        .await?;
    let page = ConsentPage {
        client_name: client.display_name(),
        client_verified: resolved.verified(),
        client_id: client.client_id.as_str().to_owned(),
        client_id_host: match resolved.kind() {
            ClientKind::MetadataDocument { host } => Some(host.clone()),
            _ => None,
        },
        redirect_uri: redirect.uri().to_owned(),
        redirect_host: redirect.destination_key(),
        redirect_app_scheme: redirect.destination().app_scheme().map(str::to_owned),
        registered_ago: match resolved.kind() {
            ClientKind::Preregistered => "configured by this server's operators".to_owned(),
            ClientKind::MetadataDocument { .. } => {
                // `registered_at` of a document is its last change of redirects, name or method.
                format!(
                    "first seen or last changed {}",
                    ago(now, client.registered_at)
                )
            }
            ClientKind::Registered => format!("registered {}", ago(now, client.registered_at)),
        },
        scopes: scopes
            .iter()
            .map(|s| scope_view(s, app.offered_scopes.contains(s)))
            .collect(),
        warnings,
        signed_in_as: session.map(|s| format!("@{}", s.record().login)),
        github_host: app.github.display_host(),
        form_action: "/consent".to_owned(),
        csrf: csrf::token(
            &app.keys.csrf,
            "consent",
            &consent_binding(&txn_id, &browser),
        ),
        txn: txn_id.as_str().to_owned(),
    };
    Ok(AuthorizeOutcome::Consent(Box::new(page), set_cookie))
}

/// What a consent form's CSRF token is bound to: the transaction and the browser's CSRF
/// cookie (hashed), so a form read in one browser cannot be submitted from another.
pub fn consent_binding(txn: &TxnId, browser_hash: &str) -> String {
    format!("{}|{browser_hash}", txn.as_str())
}

/// The consent page's warnings: quiet for a long-known client sending access to a familiar
/// host, loud for a new client, a new host, a local program, or a metadata document whose
/// redirect goes somewhere other than its own host.
async fn warnings(
    app: &App,
    resolved: &ResolvedClient,
    redirect: &RedirectMatched,
) -> Result<Vec<WarningView>, FlowError> {
    let now = app.clock.now();
    let client = resolved.record();
    let mut out = Vec::new();
    let rules = app.approval_rules();
    let wall_age = now.since(client.registered_at);
    // The person is not known yet on the consent page (they sign in at GitHub after it).
    let client_approvals = approval_store::of_client(app.store.as_ref(), &client.client_id).await?;
    let established =
        approvals::established_secs(rules, wall_age, client_approvals.as_ref(), None, now);
    if *resolved.kind() != ClientKind::Preregistered && established < NEW_CLIENT_SECS {
        let when = if matches!(resolved.kind(), ClientKind::MetadataDocument { .. }) {
            "This server first saw it, or saw its redirect addresses or name change,"
        } else {
            "It was registered"
        };
        out.push(if wall_age < NEW_CLIENT_SECS {
            WarningView {
                title: "This application was registered moments ago".to_owned(),
                detail: format!(
                    "{when} {}. If you did not just add it to your own tool, someone may have sent you this link to obtain access as you.",
                    ago(now, client.registered_at)
                ),
            }
        } else {
            WarningView {
                title: "No one here has used this application yet".to_owned(),
                detail: format!(
                    "{when} {}, but no one else this server admits has approved it{}. If you did not just add it to your own tool, someone may have sent you this link to obtain access as you.",
                    ago(now, client.registered_at),
                    if established == 0 { "" } else { " until moments ago" }
                ),
            }
        });
    }
    let destination = redirect.destination();
    let key = destination.key();
    match &destination {
        Destination::Loopback(host) => out.push(WarningView {
            title: LOCAL_PROGRAM.to_owned(),
            detail: format!(
                "Your authorization goes to {host} on this computer. Approve only if you just started this application yourself."
            ),
        }),
        Destination::App(scheme) => out.push(WarningView {
            title: LOCAL_PROGRAM.to_owned(),
            detail: format!(
                "Your authorization goes to whichever app on this device handles links starting with {scheme}: (any program installed here can claim that). Approve only if you just started this application yourself."
            ),
        }),
        Destination::Site(host) => {
            if let ClientKind::MetadataDocument { host: published } = resolved.kind()
                && !published.eq_ignore_ascii_case(host)
            {
                out.push(WarningView {
                    title: "Access goes to a different site than where this application is published".to_owned(),
                    detail: format!(
                        "This application is published at {published}, but your authorization would be sent to {host}. Approve only if you trust both."
                    ),
                });
            }
        }
    }
    // A loopback program is no server of anyone else's; a site and an app scheme are new until
    // people here approved them, each under its own key (an app's scheme never borrows the
    // approvals of the web host of the same name).
    if !matches!(destination, Destination::Loopback(_)) {
        let seen = approval_store::seen_host(app.store.as_ref(), &key).await?;
        if !approvals::host_known(rules, &key, seen.as_ref(), None) {
            let what = match &destination {
                Destination::App(scheme) => format!("the app scheme {scheme}:"),
                _ => key.clone(),
            };
            out.push(WarningView {
                title: "This destination is new to this server".to_owned(),
                detail: format!(
                    "No one has approved an application that sends access to {what} before. Check that you recognise it."
                ),
            });
        }
    }
    Ok(out)
}

/// Records, when approvals can count (`[access]` closed), that `user` approved `client` sending
/// access to `host`.
pub async fn note_approver(
    app: &App,
    host: &str,
    client: &crate::ids::ClientId,
    user: &crate::ids::UserId,
) -> Result<(), FlowError> {
    if !app.approval_rules().records_approvals() {
        return Ok(());
    }
    let who = crypto::hash_secret(user.as_str());
    approval_store::note(app.store.as_ref(), host, client, &who, app.clock.now()).await?;
    Ok(())
}

fn scope_view(scope: &str, github: bool) -> ScopeView {
    if !github {
        // A `[[policy]]` step-up scope: a permission of this server, no GitHub access.
        return ScopeView {
            name: scope.to_owned(),
            description: "Tool permission of this server (adds no GitHub access): lets the agent run the tools a policy rule holds back for it".to_owned(),
        };
    }
    let description = match scope {
        "read:user" => "Read your GitHub profile",
        "user:email" => "Read your email addresses",
        "user" => "Read and update your GitHub profile",
        "repo" => "Full control of your repositories, including private ones",
        "public_repo" => "Read and write your public repositories",
        "read:org" => "Read your organization and team membership",
        "workflow" => "Update GitHub Actions workflows",
        "gist" => "Create gists",
        "notifications" => "Read your notifications",
        _ => "GitHub permission",
    };
    ScopeView {
        name: scope.to_owned(),
        description: description.to_owned(),
    }
}
