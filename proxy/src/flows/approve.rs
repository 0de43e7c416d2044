//! `/approve/<code>`: the page behind an approval link (`[[policy]] decision = "ask"`). The
//! opener checks run first (in `bindings::connect_link::approval`, the connect-link checks),
//! then the person sees the agent, the tool, the rule and every argument, and approves the call
//! once or denies it. The form must come from our own page (same origin, CSRF bound to the
//! session and the link); the buttons are held like the consent page's, and without JavaScript
//! approving takes a confirmation step the server times (`consent::CONFIRM_MIN_MS`). The page
//! tells the person to go back to their agent; it never redirects anywhere but to sign in.

use consent_ui::{ApprovePage, ArgumentView};
use serde_json::Value;

use super::account::AccountForm;
use super::connect::{LinkOutcome, owner_or};
use super::consent::CONFIRM_MIN_MS;
use super::{FlowError, pages};
use crate::app::App;
use crate::audit::AuditEvent;
use crate::bindings::connect_link::approval::{self, ApprovalOpenedBy};
use crate::csrf;
use crate::oauth::request::Params;
use crate::session::{self, Session};
use crate::store::records::{ApprovalAnswer, ClientRecord, ReturnTo};

/// A value longer than this (characters of its pretty-printed JSON), or of more lines than
/// [`FOLD_LINES`], is shown folded: its head, with the whole value one click away.
const FOLD_CHARS: usize = 160;
const FOLD_LINES: usize = 6;
/// Characters of a folded value's head.
const HEAD_CHARS: usize = 60;

/// What an approval link's page leads to.
pub type ApproveOutcome = LinkOutcome<ApprovePage>;

/// Runs the opener checks (the connect-link ones); every outcome other than the owner ends
/// here. A wrong person is audited as for a connect link (and raises the same alert).
async fn checked(
    app: &App,
    code: &str,
    session: Option<&Session>,
) -> Result<Result<ApprovalOpenedBy, ApproveOutcome>, FlowError> {
    let opened = approval::open(
        app.store.as_ref(),
        code,
        session,
        app.clock.now(),
        app.config.connect.max_sign_in_age_secs,
    )
    .await?;
    owner_or(app, opened, |link_id| ReturnTo::Approve { link_id }).await
}

fn csrf_binding(s: &Session, link_id: &str) -> String {
    format!("{}|{link_id}", s.token_hash())
}

/// The arguments as the page lists them: top-level names in order, values pretty-printed,
/// long ones folded. Anything but an object is shown whole under one row.
pub fn argument_views(arguments: &str) -> Vec<ArgumentView> {
    let view = |name: String, v: &Value| {
        // Keys JSON-escaped like values, so a key holding `\u{200B}` as text cannot pass
        // for one holding the character.
        let name = visible(&serde_json::to_string(&name).unwrap_or_default());
        let value = visible(&serde_json::to_string_pretty(v).unwrap_or_default());
        let long = value.chars().count() > FOLD_CHARS || value.lines().count() > FOLD_LINES;
        let folded = long.then(|| {
            let head: String = value
                .chars()
                .take(HEAD_CHARS)
                .map(|c| if c == '\n' { ' ' } else { c })
                .collect();
            format!("{head}… ({} characters)", value.chars().count())
        });
        ArgumentView {
            name,
            value,
            folded,
        }
    };
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => map.iter().map(|(k, v)| view(k.clone(), v)).collect(),
        Ok(Value::Null) | Err(_) => Vec::new(),
        Ok(other) => vec![view("(arguments)".to_owned(), &other)],
    }
}

/// Text with every character that would not show as itself written as `\u{…}`: controls
/// (other than the newline of pretty-printed JSON), bidirectional overrides and isolates, and
/// zero-width characters, so an argument cannot look like another on the page.
fn visible(text: &str) -> String {
    let hidden = |c: char| {
        (c.is_control() && c != '\n')
            || matches!(c, '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF0}'..='\u{FFFB}' | '\u{E0000}'..='\u{E0FFF}')
    };
    text.chars()
        .map(|c| {
            if hidden(c) {
                format!("\\u{{{:04X}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

async fn page(
    app: &App,
    code: &str,
    s: &Session,
    opened: &ApprovalOpenedBy,
    confirm: bool,
    too_soon: bool,
) -> Result<ApproveOutcome, FlowError> {
    let link = opened.link();
    let client: Option<ClientRecord> = app.clients.known(&link.client_id).await?;
    let minutes = link.expires_at.since(app.clock.now()).div_ceil(60).max(1);
    Ok(LinkOutcome::Page(Box::new(ApprovePage {
        login: s.record().login.as_str().to_owned(),
        agent_name: client.map_or_else(|| "An agent".to_owned(), |c| c.display_name()),
        agent_verified: app.clients.is_configured(&link.client_id),
        client_id: link.client_id.as_str().to_owned(),
        tool: link.tool.clone(),
        rule_id: link.rule_id.clone(),
        arguments: argument_views(&link.arguments),
        expires: format!(
            "This request lapses in {minutes} minute{}.",
            if minutes == 1 { "" } else { "s" }
        ),
        form_action: format!("/approve/{code}"),
        csrf: csrf::token(&app.keys.csrf, "approve", &csrf_binding(s, &link.link_id)),
        confirm,
        too_soon,
    })))
}

/// `GET /approve/<code>`.
pub async fn show(
    app: &App,
    code: &str,
    session_cookie: Option<&str>,
) -> Result<ApproveOutcome, FlowError> {
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

/// `POST /approve/<code>`.
pub async fn act(
    app: &App,
    code: &str,
    form: AccountForm<'_>,
) -> Result<ApproveOutcome, FlowError> {
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
        "approve",
        &csrf_binding(&s, &opened.link().link_id),
        p.get("csrf"),
    ) {
        return Err(FlowError::Page(pages::FORBIDDEN_FORM));
    }
    let answer = match p.get("decision") {
        Some("approve") => ApprovalAnswer::Approved,
        Some("deny") => ApprovalAnswer::Denied,
        Some("review") => {
            // Write class: not security state (when the confirmation step was shown; lost, the
            // next Approve is only held again). Durable like any write of a page request.
            if !opened
                .confirm_shown(app.store.as_ref(), app.clock.now_millis())
                .await?
            {
                return Err(FlowError::Page(pages::LINK_NOT_FOUND));
            }
            return page(app, code, &s, &opened, true, false).await;
        }
        _ => return Err(FlowError::Page(pages::BAD_REQUEST)),
    };
    let now_ms = app.clock.now_millis();
    if answer == ApprovalAnswer::Approved
        && opened
            .link()
            .confirm_shown_at_ms
            .is_some_and(|shown| now_ms.saturating_sub(shown) < CONFIRM_MIN_MS)
    {
        if !opened.confirm_shown(app.store.as_ref(), now_ms).await? {
            return Err(FlowError::Page(pages::LINK_NOT_FOUND));
        }
        return page(app, code, &s, &opened, true, true).await;
    }
    // Write class: security state (the approval, the closed link). Durable (this request's
    // final flush or commit) before the page that says it is done.
    let Some(link) = approval::answer(app.store.as_ref(), opened, answer, app.clock.now()).await?
    else {
        // Another answer (a second tab, a double submit) took the link first: this one counts
        // for nothing, like any answered link.
        return Err(FlowError::Page(pages::LINK_NOT_FOUND));
    };
    app.audit
        .record(AuditEvent::ApprovalAnswered {
            link_id: link.link_id.clone(),
            user_id: link.user_id.clone(),
            client_id: link.client_id.clone(),
            tool: link.tool.clone(),
            rule_id: link.rule_id.clone(),
            answer: answer.as_str(),
        })
        .await?;
    Ok(match answer {
        ApprovalAnswer::Approved => LinkOutcome::Message(
            "Approved",
            format!(
                "The call to {} is approved, once. Go back to your agent: its next try of this exact call will run. You can close this tab.",
                link.tool
            ),
        ),
        ApprovalAnswer::Denied => LinkOutcome::Message(
            "Denied",
            format!(
                "The call to {} was not run and will not be. Go back to your agent. You can close this tab.",
                link.tool
            ),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_multi_line_values_are_folded_short_ones_are_not() {
        let long = "x".repeat(500);
        let args = serde_json::json!({"owner": "acme", "body": long, "nested": {"a": [1, 2, 3, 4, 5, 6, 7]}});
        let v = argument_views(&args.to_string());
        let by = |n: &str| v.iter().find(|a| a.name == format!("\"{n}\"")).unwrap();
        assert!(by("owner").folded.is_none());
        assert_eq!(by("owner").value, "\"acme\"");
        assert!(
            by("body")
                .folded
                .as_ref()
                .unwrap()
                .contains("502 characters")
        );
        assert!(by("nested").folded.is_some(), "many lines");
        assert!(argument_views("null").is_empty());
        // A right-to-left override or a zero-width space cannot disguise a value.
        let tricky = serde_json::json!({"path": "safe\u{202E}txt.exe", "b\u{200B}ody": "x"});
        let v = argument_views(&tricky.to_string());
        assert!(v.iter().any(|a| a.value.contains("\\u{202E}")), "{v:?}");
        assert!(v.iter().any(|a| a.name == "\"b\\u{200B}ody\""), "{v:?}");
        assert_eq!(argument_views("[1]").len(), 1);
    }
}
