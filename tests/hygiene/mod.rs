//! Registration hygiene (issue 5): the registration policy, rate limits on /register and
//! /token with client IPs from trusted proxies only, reaping and dedupe of unused
//! registrations, and `application_type` rules.

mod application_type;
mod policy;
mod rate_limits;
mod reaping;
mod unused_budget;

use serde_json::{Value, json};

use crate::support::client::JsonResp;
use crate::support::{Options, TestProxy, http};

/// A proxy that believes `X-Forwarded-For` from 127.0.0.1 (where the tests connect from), so
/// each test can speak as any client IP; `extra` is appended to the config.
async fn behind_trusted_proxy(extra: &str) -> TestProxy {
    TestProxy::start_with(Options {
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        extra_toml: extra.to_owned(),
        ..Options::default()
    })
    .await
}

/// A public client's registration body.
fn body(name: &str, redirect: &str) -> Value {
    json!({
        "client_name": name,
        "redirect_uris": [redirect],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
    })
}

async fn to_json(r: reqwest::Response) -> JsonResp {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r.text().await.unwrap();
    JsonResp {
        status,
        headers,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// POST /register, optionally as client IP `from` (via X-Forwarded-For) and with an
/// `Authorization` header.
async fn register_as(
    proxy: &TestProxy,
    from: Option<&str>,
    authorization: Option<&str>,
    body: &Value,
) -> JsonResp {
    let mut req = http().post(proxy.url("/register")).json(body);
    if let Some(ip) = from {
        req = req.header("x-forwarded-for", ip);
    }
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    to_json(req.send().await.unwrap()).await
}

/// POST /token with a form, as client IP `from`.
async fn token_as(proxy: &TestProxy, from: &str, form: &[(&str, &str)]) -> JsonResp {
    to_json(
        http()
            .post(proxy.url("/token"))
            .header("x-forwarded-for", from)
            .form(form)
            .send()
            .await
            .unwrap(),
    )
    .await
}
