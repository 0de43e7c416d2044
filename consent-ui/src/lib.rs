//! Server-rendered pages of mcp-oauth-proxy: the per-client consent page, error and message
//! pages, and the account page. Enforces the *content* half of the "Consent page content"
//! binding (docs/DESIGN.md §3): every value is autoescaped by askama, and pages need no inline
//! style, so they run under `default-src 'none'; style-src 'self'`. The consent page's script
//! [`CONSENT_SCRIPT`] (static text, allowed by its hash [`CONSENT_SCRIPT_CSP_SOURCE`] and
//! nothing else): its buttons act only once the page has been visible and focused for a
//! moment, so a double-click begun on another site cannot land on Approve (double-clickjacking),
//! and Approve keeps a value in the origin's session storage for the return from GitHub.
//! Without JavaScript, approval takes a confirmation page ([`ConsentConfirmPage`]) that the
//! server times. The pages behind links ([`ConnectPage`], [`ApprovePage`]) hold their buttons
//! with the same script and the same confirmation step. The finish page's script
//! [`FINISH_SCRIPT`] hands the stored value back; a browser without it confirms on the
//! [`FinishPage`], timed by the server too.
//!
//! This crate does no I/O, crypto, cookies or time. View structs carry display-safe,
//! pre-formatted strings; the proxy decides what they say ("registered 3 minutes ago") and sets
//! the security headers (CSP, `frame-ancestors 'none'`, `X-Frame-Options: DENY`).
//!
//! Render a page with [`Template::render`]:
//!
//! ```
//! use consent_ui::{MessagePage, Template};
//!
//! let page = MessagePage {
//!     title: "Signed out".to_owned(),
//!     message: "You can close this tab.".to_owned(),
//! };
//! let html = page.render()?;
//! assert!(html.contains("Signed out"));
//! # Ok::<(), consent_ui::RenderError>(())
//! ```

use std::fmt;

pub use askama::Error as RenderError;
pub use askama::Template;

/// The only stylesheet of every page; the proxy serves it at `/assets/style.css`
/// (as `text/css`), which is what `style-src 'self'` permits.
pub const STYLESHEET: &str = include_str!("../templates/style.css");

/// The path every template links its stylesheet from.
pub const STYLESHEET_PATH: &str = "/assets/style.css";

/// The consent page's only script, inlined verbatim: the Approve and Deny buttons start hidden and
/// disabled and act only after the page has been visible (`document.visibilityState`) and
/// focused (`document.hasFocus()`) without a break for one second; blur or hiding starts the
/// wait again. A page of another site can swap itself for ours between the two clicks of a
/// double-click (double-clickjacking); the second click then finds a disabled button.
pub const CONSENT_SCRIPT: &str = include_str!("../templates/consent.js");

/// The CSP source that allows [`CONSENT_SCRIPT`] and no other script:
/// `'sha256-<base64 of SHA-256 of the script text>'`. A unit test recomputes it, and the
/// proxy's consent-page CSP is checked to carry it.
pub const CONSENT_SCRIPT_CSP_SOURCE: &str = "'sha256-4f2H8Sa39iekckyzTQmYJ6tQYiQmpDX8Q6xz4upxxgE='";

/// The finish page's only script: back from GitHub, it hands back the value the consent page's
/// script kept in this origin's session storage (once, as `flow_proof`), so the browser that
/// approved goes on without a second question; without one the page stays and asks.
pub const FINISH_SCRIPT: &str = include_str!("../templates/finish.js");

/// The CSP source that allows [`FINISH_SCRIPT`] and no other script.
pub const FINISH_SCRIPT_CSP_SOURCE: &str = "'sha256-VyZzhffwaUKvT9qBwQcz1VPc8VSuv/67XqyTbkL1nr8='";

/// How long the consent page must have been visible and focused before its buttons act, in
/// milliseconds (the value of `DELAY_MS` in [`CONSENT_SCRIPT`]).
pub const CONSENT_ARM_DELAY_MS: u64 = 1000;

/// Shown in place of CSRF tokens and transaction ids by the `Debug` impls.
const REDACTED: &str = "[redacted]";

/// One GitHub scope requested by a client, as shown on the consent page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeView {
    /// The scope as GitHub names it, e.g. `repo`.
    pub name: String,
    /// What it allows, in plain words.
    pub description: String,
}

/// One warning on the consent page, rendered in its own loud box above the buttons.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WarningView {
    /// Short headline, e.g. "This client was registered minutes ago".
    pub title: String,
    /// One or two sentences on why it matters.
    pub detail: String,
}

/// The proxy's own per-client consent page, shown before anything is sent to GitHub.
///
/// `Debug` redacts `txn` and `csrf`.
#[derive(Clone, Template)]
#[template(path = "consent.html")]
pub struct ConsentPage {
    /// The client name as registered. May be attacker-chosen text; it is autoescaped.
    pub client_name: String,
    /// `false` for dynamically registered clients: the name gets an "Unverified" badge and a
    /// sentence saying nobody checked it.
    pub client_verified: bool,
    /// Shown small, monospace.
    pub client_id: String,
    /// For metadata-document clients: the host that published the client identity.
    pub client_id_host: Option<String>,
    /// The exact redirect URI, shown in full.
    pub redirect_uri: String,
    /// The host of `redirect_uri`, shown prominently (unless `redirect_app_scheme` is set).
    pub redirect_host: String,
    /// For a private-use-scheme redirect (`claude.ai:/cb`): the scheme, `claude.ai`. The page
    /// then says "an app on this device (scheme `claude.ai:`)", never a host.
    pub redirect_app_scheme: Option<String>,
    /// Pre-formatted, e.g. "registered 3 minutes ago".
    pub registered_ago: String,
    /// The GitHub access requested.
    pub scopes: Vec<ScopeView>,
    /// Each is rendered in its own box above the buttons; empty means no box at all.
    pub warnings: Vec<WarningView>,
    /// The GitHub login, if the browser has a proxy session ("Signed in as @alice").
    pub signed_in_as: Option<String>,
    /// Where the person confirms their GitHub account next, e.g. `github.com`.
    pub github_host: String,
    /// The form's `action`, e.g. `/consent`.
    pub form_action: String,
    /// Hidden input `txn`: the authorization transaction.
    pub txn: String,
    /// Hidden input `csrf`.
    pub csrf: String,
}

impl ConsentPage {
    /// [`CONSENT_SCRIPT`], for the template (emitted unescaped: it is a constant).
    fn script(&self) -> &'static str {
        CONSENT_SCRIPT
    }
}

/// The second step of approving without JavaScript (the consent page's `<noscript>` Continue),
/// and the page shown again when an approval from it came too soon after it appeared. It is
/// reached only by a POST of the consent form, so no other site can load it in advance; the
/// server refuses its Approve within a short moment of showing it.
///
/// `Debug` redacts `txn` and `csrf`.
#[derive(Clone, Template)]
#[template(path = "consent_confirm.html")]
pub struct ConsentConfirmPage {
    /// The client name as registered; autoescaped.
    pub client_name: String,
    /// Shown small, monospace.
    pub client_id: String,
    /// The exact redirect URI, shown in full.
    pub redirect_uri: String,
    /// Where the person confirms their GitHub account next, e.g. `github.com`.
    pub github_host: String,
    /// `true`: the previous Approve came too soon; a warning says so.
    pub too_soon: bool,
    /// The form's `action`, e.g. `/consent`.
    pub form_action: String,
    /// Hidden input `txn`.
    pub txn: String,
    /// Hidden input `csrf`.
    pub csrf: String,
}

impl fmt::Debug for ConsentConfirmPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsentConfirmPage")
            .field("client_name", &self.client_name)
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .field("too_soon", &self.too_soon)
            .field("txn", &REDACTED)
            .field("csrf", &REDACTED)
            .finish_non_exhaustive()
    }
}

/// The finish page: GitHub sent a browser back to complete an authorization, but the browser
/// did not show the value the approving consent page kept (no JavaScript, or not the browser
/// that approved: someone may have put their own flow cookie into it). The person confirms here,
/// in this browser, what is being completed; the server refuses an Approve within a short
/// moment of showing it.
///
/// `Debug` redacts `state`, `code` and `csrf`.
#[derive(Clone, Template)]
#[template(path = "finish.html")]
pub struct FinishPage {
    /// The client name as registered; autoescaped.
    pub client_name: String,
    /// Shown small, monospace.
    pub client_id: String,
    /// The exact redirect URI, shown in full.
    pub redirect_uri: String,
    /// `true`: the previous Approve came too soon; a warning says so.
    pub too_soon: bool,
    /// The form's `action`, `/callback/github`.
    pub form_action: String,
    /// Hidden input `state`: the upstream state GitHub sent back.
    pub state: String,
    /// Hidden input `code`: GitHub's code.
    pub code: String,
    /// Hidden input `csrf`.
    pub csrf: String,
}

impl FinishPage {
    /// [`FINISH_SCRIPT`], for the template (emitted unescaped: it is a constant).
    fn script(&self) -> &'static str {
        FINISH_SCRIPT
    }
}

impl fmt::Debug for FinishPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FinishPage")
            .field("client_name", &self.client_name)
            .field("client_id", &self.client_id)
            .field("redirect_uri", &self.redirect_uri)
            .field("too_soon", &self.too_soon)
            .field("state", &REDACTED)
            .field("code", &REDACTED)
            .field("csrf", &REDACTED)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for ConsentPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsentPage")
            .field("client_name", &self.client_name)
            .field("client_verified", &self.client_verified)
            .field("client_id", &self.client_id)
            .field("client_id_host", &self.client_id_host)
            .field("redirect_uri", &self.redirect_uri)
            .field("redirect_host", &self.redirect_host)
            .field("redirect_app_scheme", &self.redirect_app_scheme)
            .field("registered_ago", &self.registered_ago)
            .field("scopes", &self.scopes)
            .field("warnings", &self.warnings)
            .field("signed_in_as", &self.signed_in_as)
            .field("github_host", &self.github_host)
            .field("form_action", &self.form_action)
            .field("txn", &REDACTED)
            .field("csrf", &REDACTED)
            .finish()
    }
}

/// An error a person sees in the browser (never a redirect). Shows a title, a plain message
/// and the request id for support; never the internal cause.
#[derive(Clone, Debug, PartialEq, Eq, Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// Headline and `<title>`.
    pub title: String,
    /// A plain message for the person; no internal detail.
    pub message: String,
    /// The request id to quote to support.
    pub request_id: String,
}

/// A GitHub account this server does not admit (`[access]`): who the server is for, or the
/// link to authorize the app for an organisation's SAML single sign-on. Status 403.
#[derive(Clone, Debug, PartialEq, Eq, Template)]
#[template(path = "not_admitted.html")]
pub struct NotAdmittedPage {
    /// Headline and `<title>`.
    pub title: String,
    /// Why, in words ("This server is for members of acme.").
    pub message: String,
    /// The GitHub login that signed in.
    pub login: String,
    /// The organisation whose SSO must authorize the app (with `sso_url`).
    pub org: String,
    /// GitHub's SSO authorization link, already checked to point at GitHub.
    pub sso_url: Option<String>,
}

/// A neutral information page, e.g. "Signed out" or "You can close this tab and go back to your
/// agent".
#[derive(Clone, Debug, PartialEq, Eq, Template)]
#[template(path = "message.html")]
pub struct MessagePage {
    /// Headline and `<title>`.
    pub title: String,
    /// The message body.
    pub message: String,
}

/// One approved client on the account page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsentRow {
    /// The client name as registered; autoescaped.
    pub client_name: String,
    /// `false` shows the "Unverified" badge.
    pub client_verified: bool,
    /// Also sent back by the row's revoke form.
    pub client_id: String,
    /// Shown prominently (unless `redirect_app_scheme` is set).
    pub redirect_host: String,
    /// For a private-use-scheme redirect: the scheme, shown as an app on this device.
    pub redirect_app_scheme: Option<String>,
    /// The exact redirect URI, shown in full.
    pub redirect_uri: String,
    /// Pre-formatted, e.g. "read:user, repo".
    pub scopes: String,
    /// Pre-formatted, e.g. "approved 2 days ago".
    pub approved: String,
    /// Pre-formatted, e.g. "last used 5 minutes ago" or "never used".
    pub last_used: String,
    /// Whether this agent may currently use the connected GitHub account.
    pub github_allowed: bool,
    /// The client's sessions: every branch of the person's refresh families for it, most
    /// recently used first (each with an end button); empty when it holds none.
    pub sessions: Vec<SessionRow>,
}

/// One session of a client on the account page: a branch of a refresh family, i.e. one line
/// of refresh tokens (one process of the client, or a copy of its credential held elsewhere).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    /// A short name for it, e.g. "4fQx2a·1" (family and branch).
    pub label: String,
    /// Sent back by its end form as `family`.
    pub family_id: String,
    /// Sent back by its end form as `branch`.
    pub branch: String,
    /// Pre-formatted, e.g. "last used 5 minutes ago".
    pub last_used: String,
    /// Pre-formatted, e.g. "203.0.113.9 (network 203.0.113.0/24)" or "address not recorded".
    pub address: String,
    /// The `User-Agent` it sent (the caller's own claim), or "not sent"; autoescaped.
    pub client_software: String,
    /// Unused for longer than the proxy counts a branch live (it still works if its process
    /// comes back).
    pub idle: bool,
}

/// The account page: which clients this person approved, with a revoke button per client.
///
/// `Debug` redacts `csrf`.
#[derive(Clone, Template)]
#[template(path = "account.html")]
pub struct AccountPage {
    /// The GitHub login.
    pub login: String,
    /// Empty shows "You have not approved any clients."
    pub consents: Vec<ConsentRow>,
    /// Hidden input `csrf` of every form on the page.
    pub csrf: String,
    /// Each row posts hidden `client_id` and `csrf` here, e.g. `/account/revoke`.
    pub revoke_action: String,
    /// The sign-out form posts hidden `csrf` here, e.g. `/account/sign-out`.
    pub sign_out_action: String,
    /// e.g. "Access for Repo Helper was revoked.", shown in a calm info box.
    pub notice: Option<String>,
    /// The connected GitHub account's login, if one is connected.
    pub github_login: Option<String>,
    /// The scopes GitHub reported for the connected account's token, comma-separated (what
    /// every approved client's backend acts with); empty for none (GitHub App tokens).
    pub github_scopes: String,
    /// The disconnect form posts hidden `csrf` here, e.g. `/account/disconnect`.
    pub disconnect_action: String,
    /// Each allowed row posts hidden `client_id` and `csrf` here, e.g. `/account/withdraw`.
    pub withdraw_action: String,
    /// Each session posts hidden `family`, `branch` and `csrf` here, e.g.
    /// `/account/end-session`.
    pub end_session_action: String,
    /// Tool calls waiting for the person's approval (`[[policy]] decision = "ask"`).
    pub pending_approvals: Vec<ApprovalRow>,
    /// The person's recent answers to approval links, newest first.
    pub recent_approvals: Vec<ApprovalRow>,
}

/// One held tool call on the account page: waiting (with its link) or answered.
#[derive(Debug, Clone)]
pub struct ApprovalRow {
    /// The agent's name; autoescaped.
    pub agent_name: String,
    /// The tool.
    pub tool: String,
    /// The rule that held it.
    pub rule_id: String,
    /// e.g. "asked 2 minutes ago" or "approved 1 hour ago".
    pub when: String,
    /// A waiting call's approval page, e.g. `/approve/<code>`.
    pub link: Option<String>,
    /// An answered call's answer: "Approved" or "Denied".
    pub answer: Option<String>,
}

impl fmt::Debug for AccountPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccountPage")
            .field("login", &self.login)
            .field("consents", &self.consents)
            .field("csrf", &REDACTED)
            .field("revoke_action", &self.revoke_action)
            .field("sign_out_action", &self.sign_out_action)
            .field("notice", &self.notice)
            .field("github_login", &self.github_login)
            .field("github_scopes", &self.github_scopes)
            .finish_non_exhaustive()
    }
}

/// A connect link's page (allow, connect or reconnect), shown only to the person it was made
/// for: what the agent needs and one button to do it (or decline). Its buttons are held like
/// the consent page's ([`CONSENT_SCRIPT`], same element ids, same CSP); `confirm` is the
/// no-JavaScript second step the server times.
///
/// `Debug` redacts `csrf`.
#[derive(Clone, Template)]
#[template(path = "connect.html")]
pub struct ConnectPage {
    /// The agent (MCP client) name; autoescaped.
    pub agent_name: String,
    /// `false` shows the "Unverified" badge.
    pub agent_verified: bool,
    /// The signed-in person's login, e.g. "alice".
    pub login: String,
    /// Headline, e.g. "Let Repo Helper use your GitHub account".
    pub title: String,
    /// One plain sentence on what happens.
    pub detail: String,
    /// Scopes the agent will use, pre-formatted.
    pub scopes: String,
    /// Primary button label, e.g. "Connect GitHub" or "Allow".
    pub action_label: String,
    /// Where the form posts (the link's own path).
    pub form_action: String,
    /// Hidden input `csrf`.
    pub csrf: String,
    /// The confirmation step (no JavaScript): plain buttons, no script.
    pub confirm: bool,
    /// The previous action came too soon after the confirmation page appeared.
    pub too_soon: bool,
}

impl ConnectPage {
    /// [`CONSENT_SCRIPT`], for the template (emitted unescaped: it is a constant).
    fn script(&self) -> &'static str {
        CONSENT_SCRIPT
    }
}

impl fmt::Debug for ConnectPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectPage")
            .field("agent_name", &self.agent_name)
            .field("title", &self.title)
            .field("confirm", &self.confirm)
            .field("too_soon", &self.too_soon)
            .field("csrf", &REDACTED)
            .finish_non_exhaustive()
    }
}

/// One argument of a held tool call, as the approval page shows it.
#[derive(Debug, Clone)]
pub struct ArgumentView {
    /// The top-level argument name; autoescaped.
    pub name: String,
    /// The value, pretty-printed JSON; autoescaped, shown preformatted.
    pub value: String,
    /// For a long value: the short head shown folded (the full value opens on demand).
    pub folded: Option<String>,
}

/// The page behind an approval link (`[[policy]] decision = "ask"`), shown only to the person
/// the held call was made for: the agent, the tool, the rule and every argument, with Approve
/// once and Deny. Its buttons are held like the consent page's ([`CONSENT_SCRIPT`], same
/// element ids); `confirm` is the no-JavaScript second step the server times.
///
/// `Debug` redacts `csrf`.
#[derive(Clone, Template)]
#[template(path = "approve.html")]
pub struct ApprovePage {
    /// The signed-in person's login.
    pub login: String,
    /// The agent (MCP client) name; autoescaped.
    pub agent_name: String,
    /// `false` shows the "Unverified" badge.
    pub agent_verified: bool,
    /// Shown small, monospace.
    pub client_id: String,
    /// The tool name.
    pub tool: String,
    /// The rule's id.
    pub rule_id: String,
    /// The arguments, in name order.
    pub arguments: Vec<ArgumentView>,
    /// One sentence on when the request lapses, e.g. "This request lapses in 9 minutes."
    pub expires: String,
    /// Where the form posts (the link's own path).
    pub form_action: String,
    /// Hidden input `csrf`.
    pub csrf: String,
    /// The confirmation step (no JavaScript): plain buttons, no script.
    pub confirm: bool,
    /// The previous Approve came too soon after the confirmation page appeared.
    pub too_soon: bool,
}

impl ApprovePage {
    /// [`CONSENT_SCRIPT`], for the template (emitted unescaped: it is a constant).
    fn script(&self) -> &'static str {
        CONSENT_SCRIPT
    }
}

impl fmt::Debug for ApprovePage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovePage")
            .field("agent_name", &self.agent_name)
            .field("tool", &self.tool)
            .field("csrf", &REDACTED)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNVERIFIED_BADGE: &str = r#"<span class="badge badge-unverified">Unverified</span>"#;
    const UNVERIFIED_SENTENCE: &str =
        "This name was chosen by whoever registered the client; it is not verified.";
    const WARNING_BOX: &str = r#"class="warning""#;

    fn consent_page() -> ConsentPage {
        ConsentPage {
            client_name: "Repo Helper".to_owned(),
            client_verified: true,
            client_id: "c_8f3a2b".to_owned(),
            client_id_host: None,
            redirect_uri: "http://127.0.0.1:33418/callback".to_owned(),
            redirect_host: "127.0.0.1".to_owned(),
            redirect_app_scheme: None,
            registered_ago: "registered 3 minutes ago".to_owned(),
            scopes: vec![
                ScopeView {
                    name: "read:user".to_owned(),
                    description: "Read your profile".to_owned(),
                },
                ScopeView {
                    name: "repo".to_owned(),
                    description: "Full control of your repositories".to_owned(),
                },
            ],
            warnings: Vec::new(),
            signed_in_as: Some("alice".to_owned()),
            github_host: "github.com".to_owned(),
            form_action: "/consent".to_owned(),
            txn: "txn-value-123".to_owned(),
            csrf: "csrf-value-456".to_owned(),
        }
    }

    fn confirm_page() -> ConsentConfirmPage {
        ConsentConfirmPage {
            client_name: "Repo Helper".to_owned(),
            client_id: "c_8f3a2b".to_owned(),
            redirect_uri: "http://127.0.0.1:33418/callback".to_owned(),
            github_host: "github.com".to_owned(),
            too_soon: false,
            form_action: "/consent".to_owned(),
            txn: "txn-value-123".to_owned(),
            csrf: "csrf-value-456".to_owned(),
        }
    }

    /// The consent page's script element, exactly as the CSP hash covers it.
    fn script_element() -> String {
        format!("<script>{CONSENT_SCRIPT}</script>")
    }

    fn row(name: &str, id: &str) -> ConsentRow {
        ConsentRow {
            client_name: name.to_owned(),
            client_verified: false,
            client_id: id.to_owned(),
            redirect_host: "app.example".to_owned(),
            redirect_app_scheme: None,
            redirect_uri: "https://app.example/oauth/callback".to_owned(),
            scopes: "read:user, repo".to_owned(),
            approved: "approved 2 days ago".to_owned(),
            last_used: "never used".to_owned(),
            github_allowed: true,
            sessions: Vec::new(),
        }
    }

    fn session(label: &str, ip: &str, ua: &str) -> SessionRow {
        SessionRow {
            label: label.to_owned(),
            family_id: "fam123".to_owned(),
            branch: label.rsplit('·').next().unwrap_or("0").to_owned(),
            last_used: "last used 5 minutes ago".to_owned(),
            address: format!("{ip} (network {ip}/24)"),
            client_software: ua.to_owned(),
            idle: false,
        }
    }

    fn account_page(consents: Vec<ConsentRow>) -> AccountPage {
        AccountPage {
            login: "alice".to_owned(),
            consents,
            csrf: "csrf-acct-789".to_owned(),
            revoke_action: "/account/revoke".to_owned(),
            sign_out_action: "/account/sign-out".to_owned(),
            notice: None,
            github_login: Some("alice".to_owned()),
            github_scopes: "read:user, repo".to_owned(),
            disconnect_action: "/account/disconnect".to_owned(),
            withdraw_action: "/account/withdraw".to_owned(),
            end_session_action: "/account/end-session".to_owned(),
            pending_approvals: vec![ApprovalRow {
                agent_name: "<b>Agent</b>".to_owned(),
                tool: "create_issue".to_owned(),
                rule_id: "writes".to_owned(),
                when: "asked 1 minute ago".to_owned(),
                link: Some("/approve/abc".to_owned()),
                answer: None,
            }],
            recent_approvals: Vec::new(),
        }
    }

    /// Every page type, rendered with a representative, fully populated value.
    fn all_pages() -> Vec<(&'static str, String)> {
        let mut consent = consent_page();
        consent.client_verified = false;
        consent.client_id_host = Some("app.example".to_owned());
        consent.warnings = vec![WarningView {
            title: "New client".to_owned(),
            detail: "Registered minutes ago.".to_owned(),
        }];
        let mut with_sessions = row("A", "c_a");
        with_sessions.sessions = vec![
            session("fam123·0", "203.0.113.9", "python-requests/2.32"),
            session("fam123·1", "198.51.100.7", "claude-cli/2.0"),
        ];
        with_sessions.sessions[1].idle = true;
        let mut account = account_page(vec![with_sessions, row("B", "c_b")]);
        account.notice = Some("Access for A was revoked.".to_owned());
        let mut confirm = confirm_page();
        confirm.too_soon = true;
        vec![
            ("consent", consent.render().unwrap()),
            ("consent-confirm", confirm.render().unwrap()),
            ("consent-confirm-minimal", confirm_page().render().unwrap()),
            ("consent-minimal", consent_page().render().unwrap()),
            (
                "error",
                ErrorPage {
                    title: "Something went wrong".to_owned(),
                    message: "Try again.".to_owned(),
                    request_id: "req-1".to_owned(),
                }
                .render()
                .unwrap(),
            ),
            (
                "message",
                MessagePage {
                    title: "Signed out".to_owned(),
                    message: "You can close this tab.".to_owned(),
                }
                .render()
                .unwrap(),
            ),
            (
                "not-admitted",
                NotAdmittedPage {
                    title: "This server is for acme".to_owned(),
                    message: "This server is for members of acme.".to_owned(),
                    login: "mallory".to_owned(),
                    org: "acme".to_owned(),
                    sso_url: Some("https://github.com/orgs/acme/sso?x=1".to_owned()),
                }
                .render()
                .unwrap(),
            ),
            ("account-empty", account_page(Vec::new()).render().unwrap()),
            ("account", account.render().unwrap()),
            ("held-connect", connect_page(false).render().unwrap()),
            ("connect-confirm", connect_page(true).render().unwrap()),
            ("finish", finish_page().render().unwrap()),
        ]
    }

    fn finish_page() -> FinishPage {
        FinishPage {
            client_name: "<b>Evil</b> & Co".to_owned(),
            client_id: "c1".to_owned(),
            redirect_uri: "https://app.example/cb?a=1&b=\"2\"".to_owned(),
            too_soon: true,
            form_action: "/callback/github".to_owned(),
            state: "state-value-1".to_owned(),
            code: "code-value-2\"><x".to_owned(),
            csrf: "csrf-value-3".to_owned(),
        }
    }

    #[test]
    fn finish_page_escapes_everything_and_carries_its_script_by_hash() {
        use base64::Engine as _;
        use sha2::Digest as _;
        let digest = sha2::Sha256::digest(FINISH_SCRIPT.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        assert_eq!(FINISH_SCRIPT_CSP_SOURCE, format!("'sha256-{b64}'"));
        let html = finish_page().render().unwrap();
        assert_eq!(
            html.matches(&format!("<script>{FINISH_SCRIPT}</script>"))
                .count(),
            1
        );
        assert!(
            html.contains("&#60;b&#62;Evil&#60;/b&#62; &#38; Co"),
            "{html}"
        );
        assert!(
            html.contains(r#"name="code" value="code-value-2&#34;&#62;&#60;x""#),
            "{html}"
        );
        assert!(html.contains("That click came too soon"));
        assert!(html.contains(r#"name="decision" value="approve""#));
        let dbg = format!("{:?}", finish_page());
        for secret in ["state-value-1", "code-value-2", "csrf-value-3"] {
            assert!(!dbg.contains(secret), "{dbg}");
        }
        // The script hands the stored value back once and never loops.
        for needle in [
            "params.has(FIELD)",
            "window.sessionStorage.removeItem(KEY)",
            "window.location.replace(",
            r#"var KEY = "mcp-oauth-proxy.flow-proof";"#,
        ] {
            assert!(FINISH_SCRIPT.contains(needle), "{needle}");
        }
        assert!(CONSENT_SCRIPT.contains(r#""mcp-oauth-proxy.flow-proof""#));
    }

    fn approve_page(confirm: bool) -> ApprovePage {
        ApprovePage {
            login: "alice".into(),
            agent_name: "<b>Evil</b>".into(),
            agent_verified: false,
            client_id: "c1".into(),
            tool: "create_<i>issue</i>".into(),
            rule_id: "writes".into(),
            arguments: vec![
                ArgumentView {
                    name: "owner".into(),
                    value: "\"acme\"".into(),
                    folded: None,
                },
                ArgumentView {
                    name: "body".into(),
                    value: "\"</pre><script>alert(1)</script>\"".into(),
                    folded: Some("\"</pre><script>…".into()),
                },
            ],
            expires: "This request lapses in 10 minutes.".into(),
            form_action: "/approve/abc".into(),
            csrf: "tok".into(),
            confirm,
            too_soon: false,
        }
    }

    #[test]
    fn approve_page_escapes_arguments_and_holds_its_buttons_like_the_consent_page() {
        let html = approve_page(false).render().unwrap();
        let without_script = html.replace(&script_element(), "");
        assert!(!without_script.contains("<script"), "{html}");
        assert!(!html.contains("<b>Evil</b>") && !html.contains("<i>issue</i>"));
        assert!(html.contains("&#60;/pre&#62;&#60;script&#62;"));
        assert!(html.contains("<details>"), "long values are folded");
        assert!(html.contains("id=\"consent-actions\" hidden"));
        assert!(html.contains("value=\"review\""), "no-JavaScript path");
        assert!(html.contains("name=\"csrf\" value=\"tok\""));
        assert!(html.contains("Unverified"));
        let confirm = approve_page(true).render().unwrap();
        assert!(!confirm.contains("<script") && !confirm.contains("value=\"review\""));
        assert!(confirm.contains("value=\"approve\"") && confirm.contains("value=\"deny\""));
    }

    fn connect_page(confirm: bool) -> ConnectPage {
        ConnectPage {
            agent_name: "<b>Evil</b>".into(),
            agent_verified: false,
            login: "alice".into(),
            title: "Let it use GitHub".into(),
            detail: "d".into(),
            scopes: "read:user".into(),
            action_label: "Allow".into(),
            form_action: "/connect/abc".into(),
            csrf: "tok".into(),
            confirm,
            too_soon: false,
        }
    }

    #[test]
    fn connect_page_escapes_and_holds_its_buttons_like_the_consent_page() {
        let html = connect_page(false).render().unwrap();
        assert!(!html.contains("<b>Evil</b>"));
        assert!(html.contains("name=\"csrf\" value=\"tok\""));
        // The consent page's script, exactly once (its CSP hash covers these bytes), with the
        // element ids it looks for; the buttons start hidden and disabled.
        assert_eq!(html.matches(&script_element()).count(), 1);
        assert!(html.contains(
            r#"<form method="post" action="/connect/abc" class="decision" id="consent-decision">"#
        ));
        assert!(html.contains(r#"<div class="actions" id="consent-actions" hidden>"#));
        assert!(html.contains(r#"id="consent-hold" hidden"#));
        assert!(html.contains(
            r#"<button type="submit" name="decision" value="approve" class="button button-primary" disabled>Allow</button>"#
        ));
        assert!(html.contains(
            r#"<button type="submit" name="decision" value="decline" class="button button-secondary" disabled>Decline</button>"#
        ));
        // Without JavaScript: Decline and Continue (to the timed confirmation), never a
        // direct approve.
        let noscript = &html[html.find("<noscript>").unwrap()..html.find("</noscript>").unwrap()];
        assert!(noscript.contains(r#"name="decision" value="review""#));
        assert!(noscript.contains(r#"name="decision" value="decline""#));
        assert!(!noscript.contains(r#"value="approve""#));
        assert!(html.find("<script>").unwrap() > html.find("</form>").unwrap());
        assert!(!html.contains("That click came too soon"));

        let mut confirm = connect_page(true);
        let html = confirm.render().unwrap();
        assert!(!html.contains("<script") && !html.contains(r#"value="review""#));
        assert!(html.contains(r#"<button type="submit" name="decision" value="approve" class="button button-primary">Allow</button>"#));
        assert!(html.contains(r#"name="decision" value="decline""#));
        assert!(html.contains("<h1>Confirm: Let it use GitHub</h1>"));
        confirm.too_soon = true;
        let html = confirm.render().unwrap();
        assert_eq!(html.matches(WARNING_BOX).count(), 1);
        assert!(html.contains("That click came too soon"));
        let dbg = format!("{confirm:?}");
        assert!(!dbg.contains("tok"), "{dbg}");
    }

    #[test]
    fn consent_page_escapes_attacker_chosen_client_name_and_redirect_uri() {
        let mut page = consent_page();
        page.client_name = "<script>alert(1)</script>".to_owned();
        page.client_verified = false;
        page.redirect_uri = r#"https://evil.example/cb"><img src=x>"#.to_owned();
        page.redirect_host = r#"evil.example"><b>"#.to_owned();
        page.client_id_host = Some("<i>host</i>".to_owned());
        page.warnings = vec![WarningView {
            title: "<u>t</u>".to_owned(),
            detail: "<u>d</u>".to_owned(),
        }];
        page.csrf = r#""><input name="x">"#.to_owned();
        // The page's own script (allowed by its hash) is the only one.
        let html = page.render().unwrap().replace(&script_element(), "");

        assert!(!html.contains("<script"));
        assert!(!html.contains("alert(1)</script>"));
        assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));

        assert!(!html.contains("<img"));
        assert!(!html.contains(r#""><img"#));
        assert!(html.contains("https://evil.example/cb&#34;&#62;&#60;img src=x&#62;"));

        assert!(!html.contains("<b>"));
        assert!(!html.contains("<i>"));
        assert!(!html.contains("<u>"));
        assert!(!html.contains(r#"<input name="x">"#));
        assert!(html.contains("&#34;&#62;&#60;input name=&#34;x&#34;&#62;"));
    }

    #[test]
    fn account_page_escapes_attacker_chosen_fields() {
        let mut evil = row("<script>alert(1)</script>", r#"c"><img src=x>"#);
        evil.redirect_uri = r#"https://evil.example/cb"><img src=x>"#.to_owned();
        // A session's user agent is whatever the caller sent.
        evil.sessions = vec![session(
            "f·0",
            "192.0.2.1",
            "<script>ua</script><img src=x>",
        )];
        let mut page = account_page(vec![evil]);
        page.notice = Some("<script>n</script>".to_owned());
        let html = page.render().unwrap();
        assert!(!html.contains("<script"));
        assert!(!html.contains("<img"));
        assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
        assert!(html.contains("https://evil.example/cb&#34;&#62;&#60;img src=x&#62;"));
    }

    #[test]
    fn unverified_badge_shown_only_for_unverified_clients() {
        let mut page = consent_page();
        page.client_verified = true;
        let html = page.render().unwrap();
        assert!(!html.contains(UNVERIFIED_BADGE));
        assert!(!html.contains(UNVERIFIED_SENTENCE));

        page.client_verified = false;
        let html = page.render().unwrap();
        assert_eq!(html.matches(UNVERIFIED_BADGE).count(), 1);
        assert_eq!(html.matches(UNVERIFIED_SENTENCE).count(), 1);
    }

    #[test]
    fn warning_boxes_shown_only_when_there_are_warnings() {
        let mut page = consent_page();
        page.warnings = Vec::new();
        let html = page.render().unwrap();
        assert!(!html.contains(WARNING_BOX));
        assert!(!html.contains('⚠'));

        page.warnings = vec![
            WarningView {
                title: "This client was registered minutes ago".to_owned(),
                detail: "Approve only if you registered it yourself.".to_owned(),
            },
            WarningView {
                title: "Never-seen redirect host".to_owned(),
                detail: "No one has approved a client sending to this host before.".to_owned(),
            },
        ];
        let html = page.render().unwrap();
        assert_eq!(html.matches(WARNING_BOX).count(), 2);
        assert!(html.contains("This client was registered minutes ago"));
        assert!(html.contains("Never-seen redirect host"));
        // The warnings sit above the buttons.
        let last_warning = html.rfind(WARNING_BOX).unwrap();
        let first_button = html.find("<button").unwrap();
        assert!(last_warning < first_button);
    }

    #[test]
    fn consent_form_posts_txn_csrf_and_decision() {
        let html = consent_page().render().unwrap();
        assert!(html.contains(r#"<form method="post" action="/consent""#));
        assert_eq!(html.matches("<form").count(), 1);
        assert!(html.contains(r#"<input type="hidden" name="txn" value="txn-value-123">"#));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="csrf-value-456">"#));
        assert!(html.contains(r#"<button type="submit" name="decision" value="approve""#));
        assert!(html.contains(r#"<button type="submit" name="decision" value="deny""#));
        assert!(html.contains(">Approve</button>"));
        assert!(html.contains(">Deny</button>"));
    }

    #[test]
    fn consent_page_shows_what_will_happen() {
        let mut page = consent_page();
        page.client_id_host = Some("client.example".to_owned());
        let html = page.render().unwrap();
        assert!(html.contains("Repo Helper"));
        assert!(html.contains(
            r#"After you approve, your authorization will be sent to <strong class="host">127.0.0.1</strong>"#
        ));
        assert!(html.contains(r#"<code class="mono uri">http://127.0.0.1:33418/callback</code>"#));
        assert!(html.contains(r#"<code class="mono">c_8f3a2b</code>"#));
        assert!(html.contains(
            r#"Client identity published by <strong class="host">client.example</strong>"#
        ));
        assert!(html.contains("registered 3 minutes ago"));
        assert!(html.contains("read:user"));
        assert!(html.contains("Full control of your repositories"));
        assert!(html.contains("Signed in as <strong>@alice</strong>"));
        assert!(html.contains(
            "You will then be sent to <strong>github.com</strong> to confirm your GitHub account."
        ));

        page.client_id_host = None;
        page.signed_in_as = None;
        let html = page.render().unwrap();
        assert!(!html.contains("Client identity published by"));
        assert!(!html.contains("Signed in as"));
    }

    /// Whether `html` contains something shaped like ` onclick=`.
    fn has_event_handler(html: &str) -> bool {
        html.match_indices(" on").any(|(at, _)| {
            let rest = &html[at + 3..];
            let letters = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
            letters > 0 && rest[letters..].starts_with('=')
        })
    }

    #[test]
    fn no_inline_style_or_script_on_any_page() {
        for (name, html) in all_pages() {
            // The consent page's one script is allowed by its hash (see the tests below); on
            // the consent page and the held link pages (`held-…`) it must be there exactly
            // once, and nothing else may be.
            let held = (name.starts_with("consent") && !name.starts_with("consent-confirm"))
                || name.starts_with("held-");
            let html = if held {
                assert_eq!(html.matches(&script_element()).count(), 1, "{name}");
                html.replace(&script_element(), "")
            } else if name == "finish" {
                let finish = format!("<script>{FINISH_SCRIPT}</script>");
                assert_eq!(html.matches(&finish).count(), 1, "{name}");
                html.replace(&finish, "")
            } else {
                html
            };
            let lower = html.to_ascii_lowercase();
            assert!(!lower.contains("style="), "{name}: style attribute");
            assert!(!lower.contains("<style"), "{name}: inline <style>");
            assert!(!lower.contains("<script"), "{name}: <script>");
            assert!(!lower.contains("javascript:"), "{name}: javascript: URL");
            assert!(
                !has_event_handler(&lower),
                "{name}: event handler attribute"
            );
        }
    }

    #[test]
    fn consent_script_hash_is_the_csp_source() {
        use base64::Engine as _;
        use sha2::Digest as _;
        // The hash a browser computes over the text between <script> and </script>.
        let digest = sha2::Sha256::digest(CONSENT_SCRIPT.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD.encode(digest);
        assert_eq!(CONSENT_SCRIPT_CSP_SOURCE, format!("'sha256-{b64}'"));
        // The rendered page carries exactly those bytes (no escaping, no whitespace change).
        let html = consent_page().render().unwrap();
        assert!(html.contains(&script_element()));
    }

    #[test]
    fn consent_script_waits_the_documented_delay_for_visibility_and_focus() {
        assert!(CONSENT_SCRIPT.contains(&format!("var DELAY_MS = {CONSENT_ARM_DELAY_MS};")));
        for needle in [
            r#"document.visibilityState === "visible""#,
            "document.hasFocus()",
            r#"addEventListener("blur""#,
            r#"addEventListener("visibilitychange""#,
            "event.preventDefault()",
        ] {
            assert!(CONSENT_SCRIPT.contains(needle), "{needle}");
        }
        assert!(!CONSENT_SCRIPT.contains("</script"));
        assert!(!CONSENT_SCRIPT.contains("{{") && !CONSENT_SCRIPT.contains("{%"));
    }

    #[test]
    fn consent_buttons_start_hidden_and_disabled_with_a_noscript_path() {
        let html = consent_page().render().unwrap();
        assert!(html.contains(r#"<div class="actions" id="consent-actions" hidden>"#));
        assert!(html.contains(
            r#"<button type="submit" name="decision" value="approve" class="button button-primary" disabled>Approve</button>"#
        ));
        assert!(html.contains(
            r#"<button type="submit" name="decision" value="deny" class="button button-secondary" disabled>Deny</button>"#
        ));
        // Without JavaScript the form offers Deny and Continue (to the confirmation page),
        // never a direct Approve.
        let noscript = &html[html.find("<noscript>").unwrap()..html.find("</noscript>").unwrap()];
        assert!(noscript.contains(r#"name="decision" value="review""#));
        assert!(noscript.contains(r#"name="decision" value="deny""#));
        assert!(!noscript.contains(r#"value="approve""#));
        assert!(!noscript.contains("disabled"));
        // The noscript path and the script live in the one form / after it.
        let form_end = html.find("</form>").unwrap();
        assert!(html.find("</noscript>").unwrap() < form_end);
        assert!(html.find("<script>").unwrap() > form_end);
    }

    #[test]
    fn confirm_page_escapes_and_warns_only_when_too_soon() {
        let mut page = confirm_page();
        page.client_name = "<b>Evil</b>".to_owned();
        page.redirect_uri = r#"https://evil.example/cb"><img src=x>"#.to_owned();
        let html = page.render().unwrap();
        assert!(!html.contains("<b>Evil</b>") && !html.contains("<img"));
        assert!(html.contains("&#60;b&#62;Evil&#60;/b&#62;"));
        assert!(!html.contains(WARNING_BOX));
        assert!(html.contains(r#"<form method="post" action="/consent""#));
        assert!(html.contains(r#"<input type="hidden" name="txn" value="txn-value-123">"#));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="csrf-value-456">"#));
        assert!(html.contains(r#"<button type="submit" name="decision" value="approve" class="button button-primary">Approve</button>"#));
        assert!(html.contains(r#"name="decision" value="deny""#));

        page.too_soon = true;
        let html = page.render().unwrap();
        assert_eq!(html.matches(WARNING_BOX).count(), 1);
        assert!(html.contains("That click came too soon"));
        let dbg = format!("{page:?}");
        assert!(!dbg.contains("txn-value-123") && !dbg.contains("csrf-value-456"));
    }

    #[test]
    fn every_page_has_the_common_head() {
        for (name, html) in all_pages() {
            assert!(html.starts_with("<!DOCTYPE html>"), "{name}: doctype");
            assert!(html.contains(r#"<meta charset="utf-8">"#), "{name}");
            assert!(
                html.contains(
                    r#"<meta name="viewport" content="width=device-width, initial-scale=1">"#
                ),
                "{name}: viewport"
            );
            assert!(
                html.contains(r#"<meta name="referrer" content="same-origin">"#),
                "{name}: referrer"
            );
            assert_eq!(html.matches("<title>").count(), 1, "{name}: title");
            assert!(
                html.contains(r#"<link rel="stylesheet" href="/assets/style.css">"#),
                "{name}: stylesheet"
            );
            assert!(html.contains(STYLESHEET_PATH), "{name}");
        }
    }

    #[test]
    fn error_page_shows_request_id() {
        let html = ErrorPage {
            title: "This link is not valid".to_owned(),
            message: "Ask your agent for a new one.".to_owned(),
            request_id: "req-7f3e".to_owned(),
        }
        .render()
        .unwrap();
        assert!(html.contains("<title>This link is not valid · MCP OAuth Proxy</title>"));
        assert!(html.contains("<h1>This link is not valid</h1>"));
        assert!(html.contains("Ask your agent for a new one."));
        assert!(html.contains(r#"<code class="mono">req-7f3e</code>"#));
    }

    #[test]
    fn message_page_shows_title_and_message() {
        let html = MessagePage {
            title: "You're connected".to_owned(),
            message: "You can close this tab and go back to your agent.".to_owned(),
        }
        .render()
        .unwrap();
        assert!(html.contains("<h1>You&#39;re connected</h1>"));
        assert!(html.contains("You can close this tab and go back to your agent."));
        assert!(!html.contains("<form"));
    }

    #[test]
    fn account_page_without_consents() {
        let html = account_page(Vec::new()).render().unwrap();
        assert!(html.contains("You have not approved any clients."));
        assert!(html.contains("Signed in as <strong>@alice</strong>"));
        assert!(!html.contains("Revoke access"));
        assert!(!html.contains(r#"class="notice""#));
        // The sign-out form and the GitHub disconnect form.
        assert_eq!(html.matches("<form").count(), 2);
        assert!(html.contains(r#"<form method="post" action="/account/disconnect""#));
        assert!(html.contains("GitHub account connected: <strong>@alice</strong>"));
        assert!(html.contains(r#"<form method="post" action="/account/sign-out""#));
        assert!(html.contains(r#"<input type="hidden" name="csrf" value="csrf-acct-789">"#));
        assert!(html.contains(">Sign out</button>"));
    }

    #[test]
    fn account_page_with_two_consents() {
        let mut verified = row("Repo Helper", "c_one");
        verified.client_verified = true;
        verified.last_used = "last used 5 minutes ago".to_owned();
        let mut page = account_page(vec![verified, row("Triage Helper", "c_two")]);
        page.notice = Some("Access for Old Tool was revoked.".to_owned());
        let html = page.render().unwrap();

        assert!(!html.contains("You have not approved any clients."));
        assert!(html.contains("Repo Helper"));
        assert!(html.contains("Triage Helper"));
        assert_eq!(html.matches(UNVERIFIED_BADGE).count(), 1);
        assert!(html.contains("last used 5 minutes ago"));
        assert!(html.contains("never used"));
        assert!(html.contains("approved 2 days ago"));
        assert!(html.contains("read:user, repo"));
        assert!(html.contains(r#"<strong class="host">app.example</strong>"#));
        assert!(html.contains(r#"class="notice" role="status""#));
        assert!(html.contains("Access for Old Tool was revoked."));

        // Per row a revoke and a stop-using-GitHub form, plus sign-out and disconnect.
        assert_eq!(html.matches("<form").count(), 6);
        assert_eq!(
            html.matches(r#"<form method="post" action="/account/withdraw""#)
                .count(),
            2
        );
        assert_eq!(
            html.matches(r#"<form method="post" action="/account/revoke""#)
                .count(),
            2
        );
        assert!(html.contains(r#"<input type="hidden" name="client_id" value="c_one">"#));
        assert!(html.contains(r#"<input type="hidden" name="client_id" value="c_two">"#));
        assert_eq!(
            html.matches(r#"<input type="hidden" name="csrf" value="csrf-acct-789">"#)
                .count(),
            6
        );
        assert_eq!(html.matches(">Revoke access</button>").count(), 2);
        // Each row's forms carry that row's client id: c_one's come before the second row.
        let first_revoke = html.find("/account/revoke").unwrap();
        let c_one_last = html.rfind(r#"value="c_one""#).unwrap();
        let c_two_first = html.find(r#"value="c_two""#).unwrap();
        assert!(first_revoke < c_one_last && c_one_last < c_two_first);
    }

    /// Each session shows where it was last used from and what software it said it was, with
    /// its own end form (family, branch, CSRF); a client without sessions shows none.
    #[test]
    fn account_page_lists_each_clients_sessions_with_an_end_form_each() {
        let mut r = row("Claude Code", "c_one");
        r.sessions = vec![
            session("fam123·0", "203.0.113.9", "python-requests/2.32"),
            session("fam123·1", "198.51.100.7", "claude-cli/2.0"),
        ];
        r.sessions[1].idle = true;
        let html = account_page(vec![r, row("Docs Bot", "c_two")])
            .render()
            .unwrap();
        for s in [
            "203.0.113.9 (network 203.0.113.9/24)",
            "198.51.100.7 (network 198.51.100.7/24)",
            "python-requests/2.32",
            "claude-cli/2.0",
            "last used 5 minutes ago",
            "fam123·0",
            "idle",
        ] {
            assert!(html.contains(s), "{s} missing");
        }
        assert_eq!(
            html.matches(r#"<form method="post" action="/account/end-session""#)
                .count(),
            2
        );
        assert!(html.contains(r#"<input type="hidden" name="family" value="fam123">"#));
        assert!(html.contains(r#"<input type="hidden" name="branch" value="0">"#));
        assert!(html.contains(r#"<input type="hidden" name="branch" value="1">"#));
        assert_eq!(html.matches(">End this session</button>").count(), 2);
        // Sign-out, disconnect, two per client, two sessions: each form carries the CSRF token.
        assert_eq!(html.matches("<form").count(), 8);
        assert_eq!(
            html.matches(r#"<input type="hidden" name="csrf" value="csrf-acct-789">"#)
                .count(),
            8
        );
    }

    #[test]
    fn debug_redacts_csrf_and_txn() {
        let consent = format!("{:?}", consent_page());
        assert!(!consent.contains("csrf-value-456"));
        assert!(!consent.contains("txn-value-123"));
        assert!(consent.contains("Repo Helper"));
        let account = format!("{:?}", account_page(vec![row("A", "c_a")]));
        assert!(!account.contains("csrf-acct-789"));
        assert!(account.contains("c_a"));
    }

    #[test]
    fn stylesheet_is_the_template_file() {
        assert!(STYLESHEET.contains(".card"));
        assert!(STYLESHEET.contains("max-width: 36rem"));
        assert!(STYLESHEET.contains(".warning"));
        assert!(!STYLESHEET.contains("@import"));
        assert!(!STYLESHEET.contains("url("));
    }

    #[test]
    fn private_use_scheme_destination_is_an_app_on_this_device_never_a_host() {
        let mut page = consent_page();
        page.redirect_uri = "claude.ai:/cb".to_owned();
        page.redirect_host = "scheme:claude.ai".to_owned();
        page.redirect_app_scheme = Some("claude.ai".to_owned());
        let html = page.render().unwrap();
        assert!(html.contains(
            r#"sent to <strong class="host">an app on this device</strong> (scheme <code class="mono">claude.ai:</code>)"#
        ));
        assert!(!html.contains(r#"<strong class="host">claude.ai</strong>"#));
        assert!(!html.contains("scheme:claude.ai"));
        assert!(
            html.contains("claude.ai:/cb"),
            "the full address is still shown"
        );

        let mut r = row("Desk App", "c1");
        r.redirect_uri = "com.example.desk:/cb".to_owned();
        r.redirect_host = "scheme:com.example.desk".to_owned();
        r.redirect_app_scheme = Some("com.example.desk".to_owned());
        let html = account_page(vec![r]).render().unwrap();
        assert!(html.contains(
            r#"Sends authorizations to <strong class="host">an app on this device</strong> (scheme <code class="mono">com.example.desk:</code>)"#
        ));
    }
}
