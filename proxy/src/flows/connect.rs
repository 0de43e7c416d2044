//! `/connect/<code>`: the page behind a connect link. The opener checks run first (in
//! `bindings::connect_link`; a sign-in they ask for goes through GitHub's account picker, and
//! only such a sign-in counts as fresh), then the person may allow the agent, (re)connect
//! GitHub, or decline. The buttons are held like the consent page's (double-clickjacking), and
//! without JavaScript acting takes a confirmation step the server times
//! (`consent::CONFIRM_MIN_MS`). A (re)connection goes through GitHub with
//! `prompt=select_account`, and its callback accepts only the GitHub account of the signed-in
//! person the link was made for. Afterwards the page says to go back to the agent; it never
//! redirects anywhere else.

use consent_ui::ConnectPage;

use super::account::{self, AccountForm, AccountOutcome};
use super::consent::CONFIRM_MIN_MS;
use super::{FlowError, github_access, pages};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::admission::Admitted;
use crate::bindings::browser_state;
use crate::bindings::connect_link::{self, Opened, OpenedBy};
use crate::crypto;
use crate::csrf;
use crate::github::client::{GitHubTokens, GitHubUser};
use crate::oauth::request::Params;
use crate::session::{self, Session, SignInKind};
use crate::store::records::{ClientRecord, FlowPurpose, LinkKind, ReturnTo};

/// What the browser gets from a link's page (`P`: the page of its kind).
#[derive(Debug)]
pub enum LinkOutcome<P> {
    /// The link's page.
    Page(Box<P>),
    /// Go to GitHub (to sign in, or to connect), with the flow cookie.
    GitHub {
        /// URL.
        url: String,
        /// `Set-Cookie`.
        set_cookie: String,
    },
    /// Done or declined: a message page.
    Message(&'static str, String),
}

/// What a connect link's page leads to.
pub type ConnectOutcome = LinkOutcome<ConnectPage>;

/// The outcome of the opener checks for any kind of link (`bindings::connect_link`): its
/// owner's witness, or what the browser gets instead — a sign-in through GitHub's account
/// picker that returns to the link (`return_to`; the session it starts is the only kind a
/// link's freshness check accepts), the uniform 404, or the wrong-person page (audited, and
/// alerted on).
pub(super) async fn owner_or<T, P>(
    app: &App,
    opened: Opened<T>,
    return_to: impl FnOnce(String) -> ReturnTo,
) -> Result<Result<T, LinkOutcome<P>>, FlowError> {
    match opened {
        Opened::NotFound => Err(FlowError::Page(pages::LINK_NOT_FOUND)),
        Opened::SignIn { link_id } | Opened::Stale { link_id } => {
            match account::start_sign_in_with(app, return_to(link_id), SignInKind::AccountPicker)
                .await?
            {
                AccountOutcome::SignIn { url, set_cookie } => {
                    Ok(Err(LinkOutcome::GitHub { url, set_cookie }))
                }
                AccountOutcome::Page(_) => Err(FlowError::Page(pages::LINK_NOT_FOUND)),
            }
        }
        Opened::WrongPerson {
            link_id,
            owner,
            opener,
        } => {
            app.audit
                .record(AuditEvent::ConnectLinkRefused {
                    link_id,
                    owner,
                    opener,
                })
                .await?;
            Err(FlowError::Page(pages::LINK_WRONG_PERSON))
        }
        Opened::Owner(o) => Ok(Ok(o)),
    }
}

async fn agent_name(app: &App, client: &crate::ids::ClientId) -> Result<String, FlowError> {
    let c: Option<ClientRecord> = app.clients.known(client).await?;
    Ok(c.map_or_else(|| "An agent".to_owned(), |c| c.display_name()))
}

/// Runs the opener checks; every outcome other than the owner ends here.
async fn checked(
    app: &App,
    code: &str,
    session: Option<&Session>,
) -> Result<Result<OpenedBy, ConnectOutcome>, FlowError> {
    let opened = connect_link::open(
        app.store.as_ref(),
        code,
        session,
        app.clock.now(),
        app.config.connect.max_sign_in_age_secs,
    )
    .await?;
    owner_or(app, opened, |link_id| ReturnTo::Connect { link_id }).await
}

fn csrf_binding(s: &Session, link_id: &str) -> String {
    format!("{}|{link_id}", s.token_hash())
}

/// The link's page: the held buttons, or (`confirm`) the no-JavaScript confirmation step.
async fn page(
    app: &App,
    code: &str,
    s: &Session,
    opened: &OpenedBy,
    confirm: bool,
    too_soon: bool,
) -> Result<ConnectOutcome, FlowError> {
    let link = opened.link();
    let agent = agent_name(app, &link.client_id).await?;
    let (title, detail, action) = match link.kind {
        LinkKind::Allow => (
            format!("Let {agent} use your GitHub account"),
            format!(
                "{agent} asked to act with your connected GitHub account (@{}).",
                s.record().login
            ),
            "Allow",
        ),
        LinkKind::Connect => (
            format!("Connect GitHub for {agent}"),
            format!(
                "No GitHub account is connected. You will be sent to {} to connect your own account (@{}); {agent} may then use it.",
                app.github.display_host(),
                s.record().login
            ),
            "Connect GitHub",
        ),
        LinkKind::Reconnect => (
            format!("Reconnect GitHub for {agent}"),
            format!(
                "GitHub stopped accepting this server's access. You will be sent to {} to reconnect your own account (@{}).",
                app.github.display_host(),
                s.record().login
            ),
            "Reconnect GitHub",
        ),
    };
    Ok(ConnectOutcome::Page(Box::new(ConnectPage {
        agent_name: agent,
        agent_verified: app.clients.is_configured(&link.client_id),
        login: s.record().login.as_str().to_owned(),
        title,
        detail,
        scopes: link.scopes.iter().collect::<Vec<_>>().join(", "),
        action_label: action.to_owned(),
        form_action: format!("/connect/{code}"),
        csrf: csrf::token(&app.keys.csrf, "connect", &csrf_binding(s, &link.link_id)),
        confirm,
        too_soon,
    })))
}

/// `GET /connect/<code>`.
pub async fn show(
    app: &App,
    code: &str,
    session_cookie: Option<&str>,
) -> Result<ConnectOutcome, FlowError> {
    let session = session::current(app.store.as_ref(), session_cookie).await?;
    let opened = match checked(app, code, session.as_ref()).await? {
        Ok(o) => o,
        Err(outcome) => return Ok(outcome),
    };
    let Some(s) = session else {
        return Err(FlowError::Page(pages::LINK_NOT_FOUND));
    };
    page(app, code, &s, &opened, false, false).await
}

/// `POST /connect/<code>`.
pub async fn act(
    app: &App,
    code: &str,
    form: AccountForm<'_>,
) -> Result<ConnectOutcome, FlowError> {
    if !csrf::same_origin(
        form.sec_fetch_site,
        form.origin,
        &app.config.public_url.origin(),
    ) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let session = session::current(app.store.as_ref(), form.session_cookie).await?;
    let mut opened = match checked(app, code, session.as_ref()).await? {
        Ok(o) => o,
        Err(outcome) => return Ok(outcome),
    };
    let Some(s) = session else {
        return Err(FlowError::Page(pages::LINK_NOT_FOUND));
    };
    let p = Params::parse(form.body).map_err(|_| FlowError::Page(pages::BAD_REQUEST))?;
    if !csrf::verify(
        &app.keys.csrf,
        "connect",
        &csrf_binding(&s, &opened.link().link_id),
        p.get("csrf"),
    ) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let now_ms = app.clock.now_millis();
    match p.get("decision") {
        // The `<noscript>` Continue. Write class: not security state (when the confirmation
        // step was shown; lost, the next action is only held again). Durable like any write
        // of a page request.
        Some("review") => {
            if !opened.confirm_shown(app.store.as_ref(), now_ms).await? {
                return Err(FlowError::Page(pages::LINK_NOT_FOUND));
            }
            return page(app, code, &s, &opened, true, false).await;
        }
        // An action within CONFIRM_MIN_MS of the confirmation step appearing is the second
        // click of a double-click: the step is shown again, and nothing happens.
        Some("approve")
            if opened
                .link()
                .confirm_shown_at_ms
                .is_some_and(|shown| now_ms.saturating_sub(shown) < CONFIRM_MIN_MS) =>
        {
            if !opened.confirm_shown(app.store.as_ref(), now_ms).await? {
                return Err(FlowError::Page(pages::LINK_NOT_FOUND));
            }
            return page(app, code, &s, &opened, true, true).await;
        }
        _ => {}
    }
    let agent = agent_name(app, &opened.link().client_id).await?;
    match (p.get("decision"), opened.link().kind) {
        (Some("decline"), _) => {
            let link = connect_link::close(app.store.as_ref(), opened).await?;
            app.audit
                .record(AuditEvent::ConnectLinkDeclined {
                    link_id: link.link_id,
                    user_id: link.user_id,
                })
                .await?;
            Ok(ConnectOutcome::Message(
                "Declined",
                format!(
                    "Nothing was changed. {agent} will not use your GitHub account. You can close this tab."
                ),
            ))
        }
        (Some("approve"), LinkKind::Allow) => {
            let link = opened.link().clone();
            github_access::allow(app, &link.user_id, &link.client_id, &link.scopes).await?;
            let link = connect_link::close(app.store.as_ref(), opened).await?;
            app.audit
                .record(AuditEvent::ConnectLinkCompleted {
                    link_id: link.link_id,
                    user_id: link.user_id,
                    client_id: link.client_id,
                })
                .await?;
            Ok(ConnectOutcome::Message(
                "Done",
                format!(
                    "{agent} may now use your GitHub account. Go back to your agent and try again."
                ),
            ))
        }
        (Some("approve"), LinkKind::Connect | LinkKind::Reconnect) => {
            let started = browser_state::begin(
                app.store.as_ref(),
                &app.keys.consent_cookie,
                app.clock.now(),
                opened.link().link_id.clone(),
                FlowPurpose::Connect {
                    link_id: opened.link().link_id.clone(),
                },
            )
            .await?;
            Ok(ConnectOutcome::GitHub {
                url: app.github.authorize_url(
                    &started.state,
                    &started.code_challenge,
                    Some("select_account"),
                ),
                set_cookie: started.set_cookie,
            })
        }
        _ => Err(FlowError::Page(pages::BAD_REQUEST)),
    }
}

/// The GitHub callback of a connect flow: the link must still be open, the browser must be
/// signed in as the link's person, and the GitHub account that came back must be that
/// person's own. Anything else is refused and nothing is stored.
pub async fn finish_connect(
    app: &App,
    link_id: &str,
    session_cookie: Option<&str>,
    admitted: &Admitted,
    gh: &GitHubUser,
    tokens: &GitHubTokens,
) -> Result<(&'static str, String), FlowError> {
    let Some(opened) =
        connect_link::reopen_by_id(app.store.as_ref(), &app.keys.connect_link, link_id).await?
    else {
        return Err(FlowError::Page(pages::LINK_NOT_FOUND));
    };
    let session = session::current(app.store.as_ref(), session_cookie).await?;
    let owner = opened.link().user_id.clone();
    if session.as_ref().is_none_or(|s| s.record().user_id != owner) {
        return Err(FlowError::Page(pages::LINK_WRONG_PERSON));
    }
    let github_user = admitted.user_id();
    if !crypto::ct_eq(github_user.as_str().as_bytes(), owner.as_str().as_bytes()) {
        app.audit
            .record(AuditEvent::ConnectLinkWrongAccount {
                link_id: link_id.to_owned(),
                owner,
                returned: github_user.clone(),
            })
            .await?;
        return Err(FlowError::Page(pages::WRONG_GITHUB_ACCOUNT));
    }
    let link = opened.link().clone();
    let within = github_access::within_consent(app, &owner, &link.scopes, tokens).await?;
    app.grants.save(admitted, gh, tokens, within).await?;
    app.audit
        .record(AuditEvent::GitHubGrantStored {
            user_id: owner.clone(),
            login: gh.login.clone(),
        })
        .await?;
    github_access::allow(app, &owner, &link.client_id, &link.scopes).await?;
    connect_link::close(app.store.as_ref(), opened).await?;
    app.audit
        .record(AuditEvent::ConnectLinkCompleted {
            link_id: link.link_id,
            user_id: owner,
            client_id: link.client_id.clone(),
        })
        .await?;
    let agent = agent_name(app, &link.client_id).await?;
    Ok((
        "GitHub connected",
        format!(
            "Your GitHub account @{} is connected and {agent} may use it. Go back to your agent and try again.",
            gh.login
        ),
    ))
}
