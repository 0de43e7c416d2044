//! Browser endpoints: /authorize, the consent form, the GitHub callback, the account page.

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::response::{Html, IntoResponse, Redirect, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};

use super::client_ip::ClientIp;
use super::error::{PageError, page};
use super::headers::{FormTargets, PageScript, page_csp};
use crate::app::App;
use crate::cookies;
use crate::flows::account::{self, AccountForm, AccountOutcome};
use crate::flows::approve;
use crate::flows::authorize::{self, AuthorizeInput, AuthorizeOutcome};
use crate::flows::connect::{self, LinkOutcome};
use crate::flows::consent::{self, ConsentInput, ConsentOutcome};
use crate::flows::{FlowError, callback, pages};

fn header_str<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

fn with_cookies(mut resp: Response, cookies: &[String]) -> Response {
    for c in cookies {
        if let Ok(v) = HeaderValue::from_str(c) {
            resp.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    resp
}

fn render(page: impl std::fmt::Display) -> Html<String> {
    Html(page.to_string())
}

fn form(body: &Bytes) -> Result<&str, PageError> {
    std::str::from_utf8(body).map_err(|_| PageError(FlowError::Page(pages::BAD_REQUEST)))
}

/// `GET /authorize`.
pub async fn authorize(
    State(app): State<App>,
    RawQuery(q): RawQuery,
    ip: Option<Extension<ClientIp>>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let input = AuthorizeInput {
        client_ip: ip.map(|Extension(c)| c.ip()),
        raw_query: q.as_deref().unwrap_or_default(),
        session_cookie: cookies::read(&headers, cookies::SESSION_COOKIE),
        csrf_cookie: cookies::read(&headers, cookies::CSRF_COOKIE),
        sec_fetch_site: header_str(&headers, "sec-fetch-site").map(str::to_owned),
    };
    match authorize::authorize(&app, input).await? {
        AuthorizeOutcome::Redirect(url) => Ok(Redirect::to(&url).into_response()),
        AuthorizeOutcome::Consent(p, set_cookie) => {
            let csp = consent_csp(&app, &p.redirect_uri);
            let mut resp = with_cookies(render(*p).into_response(), set_cookie.as_slice());
            resp.headers_mut()
                .insert(header::CONTENT_SECURITY_POLICY, csp);
            Ok(resp)
        }
    }
}

/// The consent and confirmation pages' CSP: their form is answered with a redirect to GitHub
/// (Approve) or to the client's redirect URI (Deny), and GitHub may send the browser straight
/// back through our callback to that URI in the same chain of redirects (`headers`).
fn consent_csp(app: &App, redirect_uri: &str) -> HeaderValue {
    page_csp(
        PageScript::Consent,
        &FormTargets::own_origin()
            .redirecting_to(app.config.github.authorize_url.as_str())
            .redirecting_to(redirect_uri),
    )
}

/// `POST /consent`.
pub async fn consent(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let csrf_cookie = cookies::read(&headers, cookies::CSRF_COOKIE);
    let session_cookie = cookies::read(&headers, cookies::SESSION_COOKIE);
    let input = ConsentInput {
        body: form(&body)?,
        csrf_cookie: csrf_cookie.as_deref(),
        sec_fetch_site: header_str(&headers, "sec-fetch-site"),
        origin: header_str(&headers, "origin"),
        session_cookie: session_cookie.as_deref(),
    };
    // 303: the browser must GET the next URL, never re-POST the form (RFC 9700 §4.12).
    Ok(match consent::decide(&app, input).await? {
        ConsentOutcome::ToGitHub { url, set_cookie } => {
            with_cookies(Redirect::to(&url).into_response(), &[set_cookie])
        }
        ConsentOutcome::ToClient(url) => Redirect::to(&url).into_response(),
        ConsentOutcome::Confirm(p) => {
            let csp = consent_csp(&app, &p.redirect_uri);
            let mut resp = render(*p).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_SECURITY_POLICY, csp);
            resp
        }
    })
}

/// `GET /callback/github`.
pub async fn callback(
    State(app): State<App>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let request = callback::CallbackRequest::FromGitHub {
        raw_query: q.as_deref().unwrap_or_default(),
    };
    callback_response(&app, &headers, request).await
}

/// `POST /callback/github`: the finish page's answer.
pub async fn callback_finish(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let request = callback::CallbackRequest::Finish {
        body: form(&body)?,
        sec_fetch_site: header_str(&headers, "sec-fetch-site"),
        origin: header_str(&headers, "origin"),
    };
    callback_response(&app, &headers, request).await
}

async fn callback_response(
    app: &App,
    headers: &HeaderMap,
    request: callback::CallbackRequest<'_>,
) -> Result<Response, PageError> {
    let flow_cookie = cookies::read(headers, cookies::FLOW_COOKIE);
    let session = cookies::read(headers, cookies::SESSION_COOKIE);
    let csrf_cookie = cookies::read(headers, cookies::CSRF_COOKIE);
    let out = callback::github_callback(
        app,
        callback::CallbackInput {
            request,
            flow_cookie: flow_cookie.as_deref(),
            session_cookie: session.as_deref(),
            csrf_cookie: csrf_cookie.as_deref(),
        },
    )
    .await?;
    let resp = match out.next {
        // 303: never re-POST the finish form (RFC 9700 §4.12).
        callback::Next::Redirect(to) => Redirect::to(&to).into_response(),
        callback::Next::Page(title, message) => render(consent_ui::MessagePage {
            title: title.to_owned(),
            message,
        })
        .into_response(),
        callback::Next::Finish(p) => {
            // Its form is answered with a redirect to the client (`headers`).
            let csp = page_csp(
                PageScript::Finish,
                &FormTargets::own_origin().redirecting_to(&p.redirect_uri),
            );
            let mut resp = render(*p).into_response();
            resp.headers_mut()
                .insert(header::CONTENT_SECURITY_POLICY, csp);
            resp
        }
    };
    Ok(with_cookies(resp, &out.set_cookies))
}

/// `GET /connect/{code}`.
pub async fn connect_show(
    State(app): State<App>,
    Path(code): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    Ok(link_response(
        &app,
        connect::show(&app, &code, session.as_deref()).await?,
    ))
}

/// `POST /connect/{code}`.
pub async fn connect_act(
    State(app): State<App>,
    Path(code): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let out = connect::act(
        &app,
        &code,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(link_response(&app, out))
}

/// A link's page (connect or approval) and what follows it.
fn link_response<P: std::fmt::Display>(app: &App, out: LinkOutcome<P>) -> Response {
    match out {
        LinkOutcome::Page(p) => {
            let mut resp = render(*p).into_response();
            // The form is answered with a redirect to GitHub (`headers`).
            resp.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                page_csp(
                    PageScript::Consent,
                    &FormTargets::own_origin()
                        .redirecting_to(app.config.github.authorize_url.as_str()),
                ),
            );
            resp
        }
        LinkOutcome::GitHub { url, set_cookie } => {
            with_cookies(Redirect::to(&url).into_response(), &[set_cookie])
        }
        LinkOutcome::Message(title, message) => render(consent_ui::MessagePage {
            title: title.to_owned(),
            message,
        })
        .into_response(),
    }
}

/// `GET /approve/{code}`.
pub async fn approve_show(
    State(app): State<App>,
    Path(code): Path<String>,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    Ok(link_response(
        &app,
        approve::show(&app, &code, session.as_deref()).await?,
    ))
}

/// `POST /approve/{code}`.
pub async fn approve_act(
    State(app): State<App>,
    Path(code): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let out = approve::act(
        &app,
        &code,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(link_response(&app, out))
}

/// `POST /account/disconnect`.
pub async fn account_disconnect(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let to = account::disconnect(
        &app,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(Redirect::to(to).into_response())
}

/// `POST /account/withdraw`.
pub async fn account_withdraw(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let to = account::withdraw(
        &app,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(Redirect::to(to).into_response())
}

/// `GET /account`.
pub async fn account(
    State(app): State<App>,
    RawQuery(q): RawQuery,
    headers: HeaderMap,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let notice = q.as_deref().and_then(|q| {
        url::form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "notice")
            .map(|(_, v)| v.into_owned())
    });
    Ok(
        match account::show(&app, session.as_deref(), notice.as_deref()).await? {
            AccountOutcome::Page(p) => render(*p).into_response(),
            AccountOutcome::SignIn { url, set_cookie } => {
                with_cookies(Redirect::to(&url).into_response(), &[set_cookie])
            }
        },
    )
}

fn account_form<'a>(
    headers: &'a HeaderMap,
    session: Option<&'a str>,
    body: &'a str,
) -> AccountForm<'a> {
    AccountForm {
        session_cookie: session,
        body,
        sec_fetch_site: header_str(headers, "sec-fetch-site"),
        origin: header_str(headers, "origin"),
    }
}

/// `POST /account/revoke`.
pub async fn account_revoke(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let to = account::revoke(
        &app,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(Redirect::to(to).into_response())
}

/// `POST /account/end-session`.
pub async fn account_end_session(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let to = account::end_session(
        &app,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    Ok(Redirect::to(to).into_response())
}

/// `POST /account/sign-out`.
pub async fn account_sign_out(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, PageError> {
    let session = cookies::read(&headers, cookies::SESSION_COOKIE);
    let clear = account::sign_out(
        &app,
        account_form(&headers, session.as_deref(), form(&body)?),
    )
    .await?;
    let page = consent_ui::MessagePage { title: "Signed out".to_owned(), message: "You are signed out of this server. Applications you approved keep working until you revoke them.".to_owned() };
    Ok(with_cookies(render(page).into_response(), &[clear]))
}

/// `GET /assets/style.css`.
pub async fn stylesheet() -> Response {
    let mut resp = (StatusCode::OK, consent_ui::STYLESHEET).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    resp
}

/// Anything else.
pub async fn not_found() -> Response {
    page(pages::NOT_FOUND, String::new())
}
