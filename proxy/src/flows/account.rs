//! The account page: a signed-in person sees which clients they approved and revokes any of
//! them (consents forgotten, that client's tokens dead at once). Per client it lists every
//! session (branch of a refresh family: last used, from where, which client software) and
//! ends one at the person's word. Without a session, the page starts a sign-in through GitHub
//! that returns here.

use consent_ui::{AccountPage, ApprovalRow, ConsentRow, SessionRow};

use super::{FlowError, pages, revoke};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::connect_link::approval;
use crate::bindings::{browser_state, consent_registry};
use crate::clock::ago;
use crate::crypto;
use crate::csrf;
use crate::ids::{ClientId, FamilyId, UserId};
use crate::oauth::grant;
use crate::oauth::request::Params;
use crate::session::{self, Session, SignInKind};
use crate::store::families;
use crate::store::records::{ApprovalAnswer, ClientRecord, FlowPurpose, ReturnTo};
use crate::store::tool_approvals;

/// What `/account` answers.
#[derive(Debug)]
pub enum AccountOutcome {
    /// The page.
    Page(Box<AccountPage>),
    /// Go sign in at GitHub first.
    SignIn {
        /// GitHub authorize URL.
        url: String,
        /// Flow cookie.
        set_cookie: String,
    },
}

/// Notices the page can show (chosen by a fixed key, never text from input).
fn notice_text(key: Option<&str>) -> Option<String> {
    match key {
        Some("disconnected") => Some("GitHub is disconnected. Agents that need it will ask you, with a link, to connect it again.".to_owned()),
        Some("disconnected_unconfirmed") => Some("GitHub is disconnected here, but GitHub did not confirm that it revoked this server's access. To be sure, revoke it yourself in your GitHub settings, under Applications.".to_owned()),
        Some("withdrawn") => Some("That agent may no longer use your GitHub account.".to_owned()),
        Some("revoked") => Some("Access was revoked. That application's tokens no longer work, it may no longer use your GitHub account, and it will have to ask for your consent again.".to_owned()),
        Some("session_ended") => Some("That session was ended: its tokens no longer work. The application's other sessions go on. If it was one of your own, that program will ask you to sign in again.".to_owned()),
        _ => None,
    }
}

/// Starts a plain sign-in that returns to `return_to`: silent (no `prompt`), so GitHub sends a
/// person signed in there straight back, and the session it starts never satisfies a link's
/// freshness check (`Session::fresh_for_link`).
pub async fn start_sign_in(app: &App, return_to: ReturnTo) -> Result<AccountOutcome, FlowError> {
    start_sign_in_with(app, return_to, SignInKind::Silent).await
}

/// Starts a plain sign-in run as `sign_in` says (a link's opener checks ask for GitHub's
/// account picker); the flow, and the session it starts, remember which.
pub async fn start_sign_in_with(
    app: &App,
    return_to: ReturnTo,
    sign_in: SignInKind,
) -> Result<AccountOutcome, FlowError> {
    let flow_id = crypto::random_token()?;
    let started = browser_state::begin(
        app.store.as_ref(),
        &app.keys.consent_cookie,
        app.clock.now(),
        flow_id,
        FlowPurpose::SignIn { return_to, sign_in },
    )
    .await?;
    Ok(AccountOutcome::SignIn {
        url: app.github.authorize_url(
            &started.state,
            &started.code_challenge,
            sign_in.github_prompt(),
        ),
        set_cookie: started.set_cookie,
    })
}

/// `GET /account`.
pub async fn show(
    app: &App,
    session_cookie: Option<&str>,
    notice: Option<&str>,
) -> Result<AccountOutcome, FlowError> {
    let Some(s) = session::current(app.store.as_ref(), session_cookie).await? else {
        return start_sign_in(app, ReturnTo::Account).await;
    };
    let now = app.clock.now();
    let allowed = super::github_access::allowances(app, &s.record().user_id).await?;
    let mut rows = Vec::new();
    let mut listed = std::collections::HashSet::new();
    for c in consent_registry::list(app.store.as_ref(), &s.record().user_id).await? {
        // A client with consents for several redirect URIs lists its sessions once.
        let sessions = if listed.insert(c.client_id.clone()) {
            session_rows(app, &s.record().user_id, &c.client_id, now).await?
        } else {
            Vec::new()
        };
        let client: Option<ClientRecord> = app.clients.known(&c.client_id).await?;
        let destination = crate::bindings::redirect::destination(&c.redirect_uri);
        rows.push(ConsentRow {
            client_name: client
                .as_ref()
                .map_or_else(|| "Deleted client".to_owned(), ClientRecord::display_name),
            client_verified: app.clients.is_configured(&c.client_id),
            client_id: c.client_id.as_str().to_owned(),
            redirect_host: destination.key(),
            redirect_app_scheme: destination.app_scheme().map(str::to_owned),
            redirect_uri: c.redirect_uri.clone(),
            scopes: c.scopes.iter().collect::<Vec<_>>().join(", "),
            approved: format!("approved {}", ago(now, c.granted_at)),
            last_used: c.last_used_at.map_or_else(
                || "never used".to_owned(),
                |t| format!("last used {}", ago(now, t)),
            ),
            github_allowed: allowed.iter().any(|a| a.client_id == c.client_id),
            sessions,
        });
    }
    // The scopes GitHub reported for the stored token (checked against the consent when it
    // was stored): what every approved client's backend acts with.
    let grant = app.grants.get(&s.record().user_id).await?;
    let (pending_approvals, recent_approvals) = approval_rows(app, &s, now).await?;
    Ok(AccountOutcome::Page(Box::new(AccountPage {
        login: s.record().login.as_str().to_owned(),
        consents: rows,
        csrf: csrf::token(&app.keys.csrf, "account", s.token_hash()),
        revoke_action: "/account/revoke".to_owned(),
        sign_out_action: "/account/sign-out".to_owned(),
        notice: notice_text(notice),
        github_login: grant.as_ref().map(|g| g.login.as_str().to_owned()),
        github_scopes: grant.map(|g| g.scopes.join(", ")).unwrap_or_default(),
        disconnect_action: "/account/disconnect".to_owned(),
        withdraw_action: "/account/withdraw".to_owned(),
        end_session_action: "/account/end-session".to_owned(),
        pending_approvals,
        recent_approvals,
    })))
}

/// Every branch of the person's live refresh families for `client`, most recently used
/// first: what the person needs to tell their own processes from someone else's (when and
/// from where each was last used, and which software it said it was).
async fn session_rows(
    app: &App,
    user: &UserId,
    client: &ClientId,
    now: crate::clock::UnixTime,
) -> Result<Vec<SessionRow>, FlowError> {
    let idle_secs = app.config.tokens.refresh_branch_idle_secs;
    let mut found = Vec::new();
    for id in families::of_user_client(app.store.as_ref(), user, client).await? {
        let Some(fam) = families::get(app.store.as_ref(), &id).await? else {
            continue;
        };
        if fam.revoked || &fam.user_id != user {
            continue;
        }
        for b in &fam.branches {
            found.push((b.rotated_at, session_row(&fam.family_id, b, now, idle_secs)));
        }
    }
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found.into_iter().map(|(_, row)| row).collect())
}

fn session_row(
    family: &FamilyId,
    b: &grant::Branch,
    now: crate::clock::UnixTime,
    idle_secs: u64,
) -> SessionRow {
    let seen = b.seen.as_ref();
    let short: String = family.as_str().chars().take(6).collect();
    SessionRow {
        label: format!("{short}·{}", b.id),
        family_id: family.as_str().to_owned(),
        branch: b.id.to_string(),
        last_used: format!("last used {}", ago(now, b.rotated_at)),
        address: seen.and_then(|s| s.ip).map_or_else(
            || "address not recorded".to_owned(),
            |ip| format!("{ip} (network {})", grant::network_of(ip)),
        ),
        client_software: seen
            .and_then(|s| s.user_agent.clone())
            .unwrap_or_else(|| "not sent".to_owned()),
        idle: now.since(b.rotated_at) > idle_secs,
    }
}

/// `POST /account/end-session`: ends one session (branch) of one of the person's refresh
/// families (`flows::revoke::end_branch`): its refresh and access tokens stop at once, the
/// client's other sessions go on. A session that is not the person's, is gone, or never was
/// gets one 404 page and changes nothing.
pub async fn end_session(app: &App, form: AccountForm<'_>) -> Result<&'static str, FlowError> {
    let (s, p) = checked_session(app, &form).await?;
    let family = p
        .get("family")
        .filter(|f| !f.is_empty() && f.len() <= 64 && !f.contains('|'))
        .ok_or(FlowError::Page(pages::BAD_REQUEST))?;
    let branch: u32 = p
        .get("branch")
        .and_then(|b| b.parse().ok())
        .ok_or(FlowError::Page(pages::BAD_REQUEST))?;
    let user = &s.record().user_id;
    let family_id = FamilyId::new(family);
    match super::revoke::end_branch(app, user, &family_id, branch).await? {
        super::revoke::BranchEnded::NotFound => Err(FlowError::Page(pages::SESSION_NOT_FOUND)),
        super::revoke::BranchEnded::Ended(client_id, family_revoked) => {
            app.audit
                .record(AuditEvent::RefreshBranchEnded {
                    user_id: user.clone(),
                    client_id,
                    family_id,
                    branch,
                    family_revoked,
                })
                .await?;
            Ok("/account?notice=session_ended")
        }
    }
}

/// The person's held tool calls (with their approval pages) and recent answers.
async fn approval_rows(
    app: &App,
    s: &Session,
    now: crate::clock::UnixTime,
) -> Result<(Vec<ApprovalRow>, Vec<ApprovalRow>), FlowError> {
    let user = &s.record().user_id;
    let mut names = std::collections::HashMap::new();
    let mut name_of = async |client: &ClientId| -> Result<String, FlowError> {
        if let Some(n) = names.get(client) {
            return Ok(String::clone(n));
        }
        let c: Option<ClientRecord> = app.clients.known(client).await?;
        let n = c.map_or_else(|| "Deleted client".to_owned(), |c| c.display_name());
        names.insert(client.clone(), n.clone());
        Ok(n)
    };
    let mut pending = Vec::new();
    for open in tool_approvals::open_of_user(app.store.as_ref(), user).await? {
        pending.push(ApprovalRow {
            agent_name: name_of(&open.client_id).await?,
            tool: open.tool,
            rule_id: open.rule_id,
            when: format!("asked {}", ago(now, open.created_at)),
            link: Some(approval::path_of(&app.keys.connect_link, &open.link_id)),
            answer: None,
        });
    }
    let mut recent = Vec::new();
    for h in tool_approvals::history(app.store.as_ref(), user).await? {
        recent.push(ApprovalRow {
            agent_name: name_of(&h.client_id).await?,
            tool: h.tool,
            rule_id: h.rule_id,
            when: ago(now, h.at),
            link: None,
            answer: Some(match h.answer {
                ApprovalAnswer::Approved => "Approved".to_owned(),
                ApprovalAnswer::Denied => "Denied".to_owned(),
            }),
        });
    }
    Ok((pending, recent))
}

/// `POST /account/disconnect`: forgets the person's GitHub grant here, revokes it at GitHub
/// and withdraws every agent's allowance. Agents then get a connect link when they need
/// GitHub. If GitHub did not confirm the revocation, the page says so.
pub async fn disconnect(app: &App, form: AccountForm<'_>) -> Result<&'static str, FlowError> {
    let (s, _) = checked_session(app, &form).await?;
    let user = &s.record().user_id;
    let forgotten = revoke::github_grant_of(app, user).await?;
    app.audit
        .record(AuditEvent::GitHubGrantDisconnected {
            user_id: user.clone(),
            github_revocation: forgotten.github.as_str(),
            allowances: forgotten.allowances,
        })
        .await?;
    Ok(if forgotten.github.failed() {
        "/account?notice=disconnected_unconfirmed"
    } else {
        "/account?notice=disconnected"
    })
}

/// `POST /account/withdraw`: one agent may no longer use the person's GitHub account (it keeps
/// its proxy tokens; the next time it needs GitHub it gets an "allow" link).
pub async fn withdraw(app: &App, form: AccountForm<'_>) -> Result<&'static str, FlowError> {
    let (s, p) = checked_session(app, &form).await?;
    let client_id = ClientId::new(
        p.get("client_id")
            .ok_or(FlowError::Page(pages::BAD_REQUEST))?,
    );
    super::github_access::withdraw(app, &s.record().user_id, &client_id).await?;
    app.audit
        .record(AuditEvent::AllowanceWithdrawn {
            user_id: s.record().user_id.clone(),
            client_id,
        })
        .await?;
    Ok("/account?notice=withdrawn")
}

/// A form POST from the account page. (No `Debug`: it holds the cookie and form values.)
pub struct AccountForm<'a> {
    /// Session cookie.
    pub session_cookie: Option<&'a str>,
    /// Form body.
    pub body: &'a str,
    /// `Sec-Fetch-Site`.
    pub sec_fetch_site: Option<&'a str>,
    /// `Origin`.
    pub origin: Option<&'a str>,
}

async fn checked_session(
    app: &App,
    form: &AccountForm<'_>,
) -> Result<(Session, Params), FlowError> {
    if !csrf::same_origin(
        form.sec_fetch_site,
        form.origin,
        &app.config.public_url.origin(),
    ) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let s = session::current(app.store.as_ref(), form.session_cookie)
        .await?
        .ok_or(FlowError::Page(pages::FORBIDDEN_FORM))?;
    let p = Params::parse(form.body).map_err(|_| FlowError::Page(pages::BAD_REQUEST))?;
    if !csrf::verify(&app.keys.csrf, "account", s.token_hash(), p.get("csrf")) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    Ok((s, p))
}

/// `POST /account/revoke`: forget the consents, kill the tokens (backend tokens included) and
/// withdraw the GitHub allowance of one client (`flows::revoke`). Returns the path to redirect
/// to (303).
pub async fn revoke(app: &App, form: AccountForm<'_>) -> Result<&'static str, FlowError> {
    let (s, p) = checked_session(app, &form).await?;
    let client_id = ClientId::new(
        p.get("client_id")
            .ok_or(FlowError::Page(pages::BAD_REQUEST))?,
    );
    let user = &s.record().user_id;
    let revoked = revoke::client_for(app, user, &client_id).await?;
    app.audit
        .record(AuditEvent::ClientAccessRevoked {
            user_id: user.clone(),
            client_id,
            families: revoked.families,
            allowance: revoked.allowance,
        })
        .await?;
    Ok("/account?notice=revoked")
}

/// `POST /account/sign-out`: ends the session; returns the clearing cookie.
pub async fn sign_out(app: &App, form: AccountForm<'_>) -> Result<String, FlowError> {
    let (s, _) = checked_session(app, &form).await?;
    Ok(session::end(app.store.as_ref(), &s).await?)
}
