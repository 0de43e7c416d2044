//! RFC 8693 token exchange for backends that need the person's GitHub token themselves.

use crate::support::client::JsonResp;
use crate::support::people::Person;
use crate::support::{BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, Options, TestProxy, http};
use mcp_oauth_proxy::ids::UserId;
use serde_json::{Value, json};

fn opts() -> Options {
    Options {
        exchange: true,
        ..Options::default()
    }
}

pub(crate) async fn exchange(proxy: &TestProxy, id: &str, secret: &str, subject: &str) -> JsonResp {
    let r = http()
        .post(proxy.url("/token"))
        .basic_auth(id, Some(secret))
        .form(&[
            (
                "grant_type",
                "urn:ietf:params:oauth:grant-type:token-exchange",
            ),
            ("subject_token", subject),
            (
                "subject_token_type",
                "urn:ietf:params:oauth:token-type:access_token",
            ),
            ("audience", "github"),
        ])
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let json: Value = r.json().await.unwrap_or(Value::Null);
    JsonResp {
        status,
        headers,
        json,
    }
}

/// The backend token the proxy attached to the last forwarded request.
pub(crate) fn last_backend_token(proxy: &TestProxy) -> String {
    let r = proxy.backend().requests().pop().unwrap();
    r.header("authorization")
        .unwrap()
        .strip_prefix("Bearer ")
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn backend_exchanges_its_token_for_the_github_token() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let (status, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200);
    assert!(msg.to_string().contains("You are alice"), "{msg}");
    let bt = last_backend_token(&proxy);
    assert!(
        bt.starts_with("mcpbt_"),
        "the backend gets a backend token, never the client's or GitHub's"
    );
    assert_ne!(bt, alice.mcp.token);
    assert_eq!(proxy.backend().exchanges().last().unwrap().status, 200);

    let r = exchange(&proxy, BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, &bt).await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.headers["cache-control"], "no-store");
    assert_eq!(
        r.json["issued_token_type"],
        "urn:ietf:params:oauth:token-type:access_token"
    );
    assert_eq!(r.json["token_type"], "Bearer");
    let gh = r.json["access_token"].as_str().unwrap();
    assert!(
        proxy
            .github
            .issued_access_tokens("alice")
            .iter()
            .any(|t| t == gh)
    );
    assert!(proxy.github.violations().is_empty());
}

async fn refusal(proxy: &TestProxy, bt: &str, reason: &str) {
    let r = exchange(proxy, BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, bt).await;
    assert_eq!(r.status, 400, "{:?}", r.json);
    assert_eq!(r.headers["cache-control"], "no-store");
    let j = &r.json;
    assert_eq!(j["error"], "invalid_grant");
    assert_eq!(j["reason"], reason);
    assert!(
        j["connect_uri"]
            .as_str()
            .unwrap()
            .starts_with(&proxy.url("/connect/"))
    );
    assert!(j["connect_id"].as_str().is_some_and(|s| !s.is_empty()));
    let expires = j["connect_expires_in"].as_u64().unwrap();
    assert!(expires > 0 && expires <= 1800);
    assert!(
        j["connect_message"]
            .as_str()
            .unwrap()
            .contains("Repo Helper")
    );
    assert!(j["error_description"].is_string());
    assert!(j.get("access_token").is_none());
}

#[tokio::test]
async fn each_refusal_reason_has_the_exact_shape() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.mcp.call_tool("whoami", json!({})).await;
    let bt = last_backend_token(&proxy);

    alice.withdraw_agent(&proxy).await;
    refusal(&proxy, &bt, "allow_required").await;
    proxy
        .app
        .grants
        .mark_broken(&UserId::github(1001), "test")
        .await
        .unwrap();
    refusal(&proxy, &bt, "reconnect_required").await;
    alice.disconnect_github(&proxy).await;
    refusal(&proxy, &bt, "connect_required").await;

    // The backend relays the refusal to a 2026-07-28 client that did not declare URL
    // elicitation as a tool error carrying the link.
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(msg["result"]["isError"], true, "{msg}");
    assert!(msg.to_string().contains("/connect/"));
}

#[tokio::test]
async fn an_mcp_client_cannot_use_the_exchange_grant() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.mcp.call_tool("whoami", json!({})).await;
    let bt = last_backend_token(&proxy);
    let r = alice
        .client
        .token(
            &proxy,
            &[
                (
                    "grant_type",
                    "urn:ietf:params:oauth:grant-type:token-exchange",
                ),
                ("subject_token", &bt),
                (
                    "subject_token_type",
                    "urn:ietf:params:oauth:token-type:access_token",
                ),
                ("audience", "github"),
            ],
        )
        .await;
    assert_eq!((r.status, r.error()), (400, "unauthorized_client"));
    assert!(r.json.get("access_token").is_none());
    // Wrong backend secret.
    let r = exchange(&proxy, BACKEND_CLIENT_ID, "wrong-secret-0123456789", &bt).await;
    assert_eq!((r.status, r.error()), (401, "invalid_client"));
    // A registered client's own id and secret do not make it a backend either.
    let reg = crate::support::client::register_raw(
        &proxy,
        json!({"client_name": "Confidential", "redirect_uris": ["https://c.example/cb"], "token_endpoint_auth_method": "client_secret_basic"}),
    )
    .await;
    let (id, secret) = (
        reg.json["client_id"].as_str().unwrap(),
        reg.json["client_secret"].as_str().unwrap(),
    );
    let r = exchange(&proxy, id, secret, &bt).await;
    assert_eq!((r.status, r.error()), (400, "unauthorized_client"));
}

#[tokio::test]
async fn a_clients_own_token_is_not_a_subject_token() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    for subject in [
        alice.mcp.token.clone(),
        proxy.github.issued_access_tokens("alice").pop().unwrap(),
        "mcpbt_madeup".to_owned(),
    ] {
        let r = exchange(&proxy, BACKEND_CLIENT_ID, BACKEND_CLIENT_SECRET, &subject).await;
        assert_eq!((r.status, r.error()), (400, "invalid_request"), "{subject}");
        assert!(r.json.get("access_token").is_none());
    }
}
