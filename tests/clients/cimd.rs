//! Client ID Metadata Documents end to end: a client identified by the URL of its own
//! document, served by a test server on loopback (allowed only by the development setting).

use super::doc_server::{Answer, DocServer, PATH};
use crate::support::client::JsonResp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::Value;

const REDIRECT: &str = "https://app.example/callback";
pub const DEV: &str = "[cimd]\ndangerously_allow_loopback_for_development = true\n";

async fn dev_proxy() -> TestProxy {
    TestProxy::start_with(Options {
        extra_toml: DEV.to_owned(),
        ..Options::default()
    })
    .await
}

fn client(server: &DocServer) -> Client {
    Client {
        id: server.client_id(),
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    }
}

async fn token_with_unknown_code(proxy: &TestProxy, c: &Client) -> JsonResp {
    c.redeem(proxy, "mcpac_not-a-code", &Pkce::new(), &[]).await
}

#[tokio::test]
async fn metadata_document_client_completes_the_flow_with_the_development_setting() {
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Doc Client", &[REDIRECT]), &[]);
    let meta: Value = http()
        .get(proxy.url("/.well-known/oauth-authorization-server"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(meta["client_id_metadata_document_supported"], true);

    let c = client(&server);
    let browser = Browser::new();
    let page = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Doc Client"));
    // The client_id host is on the page (CIMD §6: display the client_id hostname).
    assert!(page.body.contains("127.0.0.1"), "{}", page.body);

    let tokens = c.tokens(&proxy, &browser, "alice").await;
    assert!(tokens.json["access_token"].as_str().is_some());
    // One fetch served /authorize twice and /token: the valid document was cached.
    assert_eq!(server.hits(), vec![PATH.to_owned()]);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 1);
    // No registration was stored for it.
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
}

#[tokio::test]
async fn loopback_document_without_the_development_setting_is_refused_without_fetching() {
    let proxy = TestProxy::start().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Doc Client", &[REDIRECT]), &[]);
    let c = client(&server);
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 400);
    assert!(
        page.location().is_none(),
        "never a redirect before the client is verified"
    );
    assert!(page.body.contains("must use https"), "{}", page.body);
    let t = token_with_unknown_code(&proxy, &c).await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"));

    // The https spelling of the same loopback address is refused by the address policy.
    let https = Client {
        id: server.client_id().replacen("http://", "https://", 1),
        ..c
    };
    let page = Browser::new()
        .navigate(&https.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 400);
    assert!(
        page.body.contains("special-use network address"),
        "{}",
        page.body
    );

    assert!(
        server.hits().is_empty(),
        "nothing may be fetched: {:?}",
        server.hits()
    );
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
}

#[tokio::test]
async fn documents_that_break_the_rules_are_refused_and_never_cached() {
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    let c = client(&server);
    let good = server.document("Doc Client", &[REDIRECT]);
    let mut other_id = good.clone();
    other_id["client_id"] = Value::from(format!("{}/other.json", server.base));
    let mut padded = good.clone();
    padded["padding"] = Value::from("x".repeat(6 * 1024));
    let cases: Vec<(&str, Answer, &str)> = vec![
        (
            "client_id differs",
            Answer {
                status: 200,
                body: other_id.to_string(),
                headers: vec![],
            },
            "client_id does not equal its URL",
        ),
        (
            "over 5 KB",
            Answer {
                status: 200,
                body: padded.to_string(),
                headers: vec![],
            },
            "larger than 5 KB",
        ),
        (
            "redirect",
            Answer {
                status: 302,
                body: String::new(),
                headers: vec![("location".to_owned(), format!("{}/moved.json", server.base))],
            },
            "redirect, which is not followed",
        ),
        (
            "server error",
            Answer {
                status: 500,
                body: good.to_string(),
                headers: vec![],
            },
            "did not answer 200 OK",
        ),
        (
            "not JSON",
            Answer {
                status: 200,
                body: "<html>client</html>".to_owned(),
                headers: vec![],
            },
            "is not a JSON object",
        ),
    ];
    for (name, answer, reason) in cases {
        let answer_status = answer.status;
        server.answer(answer);
        // A fresh minute per case: the per-client-IP fetch budget is not what is tested here.
        proxy.clock.advance(60);
        let before = server.hits().len();
        for _ in 0..2 {
            let page = Browser::new()
                .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
                .await;
            // A server error is the publisher's passing trouble, not a bad client: the
            // person is told to retry (503, Retry-After), the client gets the same at /token.
            let (page_status, expected) = if answer_status >= 500 {
                (503, (503, "temporarily_unavailable"))
            } else {
                (400, (401, "invalid_client"))
            };
            assert_eq!(page.status, page_status, "{name}");
            assert_eq!(
                page.headers
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok()),
                (page_status == 503).then_some("60"),
                "{name}"
            );
            assert!(page.location().is_none(), "{name}");
            assert!(page.body.contains(reason), "{name}: {}", page.body);
            let t = token_with_unknown_code(&proxy, &c).await;
            assert_eq!((t.status, t.error()), expected, "{name}");
            assert!(
                t.json["error_description"]
                    .as_str()
                    .unwrap()
                    .contains(reason),
                "{name}: {:?}",
                t.json
            );
        }
        // Every attempt fetched again: nothing about a failure is cached.
        assert_eq!(server.hits().len(), before + 4, "{name}");
    }
    // The redirect was never followed.
    assert!(!server.hits().iter().any(|p| p == "/moved.json"));
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);

    // Fixed, it works at once (no cached failure in the way).
    server.serve_json(&good, &[]);
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
}

#[tokio::test]
async fn a_changed_document_requires_consent_again() {
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    server.serve_json(
        &server.document("Doc Client", &[REDIRECT]),
        &[("cache-control", "max-age=120")],
    );
    let c = client(&server);
    let browser = Browser::new();
    c.tokens(&proxy, &browser, "alice").await;

    // Unchanged (and still cached): the remembered consent covers it.
    let again = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s2", &[]), "none")
        .await;
    assert_eq!(again.status, 303, "{}", again.body);
    assert_eq!(server.hits().len(), 1);

    // The publisher adds a redirect URI; once the cached copy expires the change is seen and
    // the earlier consent no longer covers the client.
    server.serve_json(
        &server.document("Doc Client", &[REDIRECT, "https://elsewhere.example/cb"]),
        &[("cache-control", "max-age=120")],
    );
    proxy.clock.advance(121);
    let changed = browser
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s3", &[]), "none")
        .await;
    assert_eq!(
        changed.status, 200,
        "the consent page again: {}",
        changed.body
    );
    assert!(changed.location().is_none());
    assert_eq!(server.hits().len(), 2);
}

#[tokio::test]
async fn no_store_documents_are_fetched_every_time() {
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    server.serve_json(
        &server.document("Doc Client", &[REDIRECT]),
        &[("cache-control", "no-store")],
    );
    let c = client(&server);
    for _ in 0..2 {
        let page = Browser::new()
            .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
            .await;
        assert_eq!(page.status, 200);
    }
    assert_eq!(server.hits().len(), 2);
}

#[tokio::test]
async fn url_client_id_with_a_bar_cannot_pose_as_another_clients_store_keys() {
    // `|` separates store key parts (`user|client|family`): such an id is refused before any
    // fetch, so its keys can never be confused with another client's.
    let proxy = dev_proxy().await;
    let server = DocServer::start().await;
    let id = format!("{}/oauth/x|y", server.base);
    let mut doc = server.document("Bar Client", &[REDIRECT]);
    doc["client_id"] = Value::from(id.clone());
    server.serve_json(&doc, &[]);
    let c = Client {
        id,
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    };
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.location().is_none());
    assert!(page.body.contains("malformed"), "{}", page.body);
    let t = token_with_unknown_code(&proxy, &c).await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"));
    assert!(
        server.hits().is_empty(),
        "nothing fetched: {:?}",
        server.hits()
    );
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
}
