//! The fake's browser pages: small, plain HTML titled like GitHub's. Tests (and attack
//! simulations) parse the forms, so the form actions, hidden inputs and button names are part
//! of the fake's contract.

use std::collections::BTreeSet;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

use crate::FakeUser;

/// Minimal HTML escaping for text and attribute values.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

pub(crate) fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title></head>\n<body>\n{body}\n</body></html>\n",
        esc(title)
    );
    (status, Html(html)).into_response()
}

pub(crate) fn not_found() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Page not found · GitHub",
        "<h1>404</h1><p>This is not the web page you are looking for.</p>",
    )
}

pub(crate) fn bad_request(message: &str) -> Response {
    page(
        StatusCode::BAD_REQUEST,
        "Bad request · GitHub",
        &format!("<h1>Bad request</h1><p>{}</p>", esc(message)),
    )
}

fn hidden_inputs(params: &[(String, String)]) -> String {
    params
        .iter()
        .map(|(k, v)| {
            format!(
                "<input type=\"hidden\" name=\"{}\" value=\"{}\">\n",
                esc(k),
                esc(v)
            )
        })
        .collect()
}

/// "Sign in to GitHub": one submit button per known account.
pub(crate) fn account_picker(users: &[FakeUser], params: &[(String, String)]) -> Response {
    let buttons: String = users
        .iter()
        .map(|u| {
            format!(
                "<button type=\"submit\" name=\"login\" value=\"{}\">{} ({})</button>\n",
                esc(&u.login),
                esc(&u.login),
                esc(&u.name)
            )
        })
        .collect();
    let body = format!(
        "<h1>Sign in to GitHub</h1>\n<p>Pick an account to continue.</p>\n\
         <form method=\"post\" action=\"/login\">\n{}{buttons}</form>",
        hidden_inputs(params)
    );
    page(StatusCode::OK, "Sign in to GitHub · GitHub", &body)
}

/// GitHub's own "Authorize application" page.
pub(crate) fn consent(
    user: &FakeUser,
    client_id: &str,
    redirect_uri: &str,
    scopes: &BTreeSet<String>,
    params: &[(String, String)],
) -> Response {
    let scope_list: String = if scopes.is_empty() {
        "<li>Public information (read-only)</li>\n".to_owned()
    } else {
        scopes
            .iter()
            .map(|s| format!("<li><code>{}</code></li>\n", esc(s)))
            .collect()
    };
    let body = format!(
        "<h1>Authorize {app}</h1>\n<p>Signed in as <strong>{login}</strong> ({name}).</p>\n\
         <p>The application <code>{app}</code> wants access to:</p>\n<ul>\n{scope_list}</ul>\n\
         <p>Authorizing will redirect to <code>{redirect}</code></p>\n\
         <form method=\"post\" action=\"/login/oauth/authorize/decision\">\n{hidden}\
         <button type=\"submit\" name=\"decision\" value=\"deny\">Cancel</button>\n\
         <button type=\"submit\" name=\"decision\" value=\"approve\">Authorize {app}</button>\n</form>",
        app = esc(client_id),
        login = esc(&user.login),
        name = esc(&user.name),
        redirect = esc(redirect_uri),
        hidden = hidden_inputs(params),
    );
    page(StatusCode::OK, "Authorize application", &body)
}
