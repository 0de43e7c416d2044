//! Consent warnings: each appears for its case, is recorded in the audit events of the page
//! and of the decision, and a long-known client sending access to a familiar host gets none.

use std::net::SocketAddr;

use super::cimd::DEV;
use super::doc_server::DocServer;
use super::ssrf::MapResolver;
use crate::support::browser::Resp;
use crate::support::client::decide;
use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_oauth_proxy::clock::Clock;
use mcp_oauth_proxy::store::Keyspace;
use serde_json::Value;

const RECENT: &str = "This application was registered moments ago";
const NEW_HOST: &str = "This destination is new to this server";
const LOOPBACK: &str = "A program on this computer will receive access";
const MISMATCH: &str = "Access goes to a different site than where this application is published";
const ALL: [&str; 4] = [RECENT, NEW_HOST, LOOPBACK, MISMATCH];

fn shown(page: &Resp) -> Vec<&'static str> {
    ALL.into_iter().filter(|w| page.body.contains(w)).collect()
}

async fn events(proxy: &TestProxy, name: &str) -> Vec<Value> {
    proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .filter(|e| e["event"] == name)
        .collect()
}

fn warnings_of(e: &Value) -> Vec<String> {
    e["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect()
}

async fn page(proxy: &TestProxy, c: &Client, browser: &Browser) -> Resp {
    let p = browser
        .navigate(&c.authorize_url(proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(p.status, 200, "{}", p.body);
    p
}

#[tokio::test]
async fn new_client_and_new_host_warnings_are_shown_and_audited_with_the_decision() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Fresh", "https://fresh.example/cb").await;
    let browser = Browser::new();
    let p = page(&proxy, &c, &browser).await;
    assert_eq!(shown(&p), vec![RECENT, NEW_HOST]);
    let r = decide(&proxy, &browser, &p, "deny").await;
    assert_eq!(r.status, 303);
    let expected = vec![RECENT.to_owned(), NEW_HOST.to_owned()];
    assert_eq!(
        warnings_of(&events(&proxy, "consent_shown").await[0]),
        expected
    );
    assert_eq!(
        warnings_of(&events(&proxy, "consent_denied").await[0]),
        expected
    );

    let p = page(&proxy, &c, &browser).await;
    crate::support::client::approve(&proxy, &browser, &p).await;
    assert_eq!(
        warnings_of(&events(&proxy, "consent_approved").await[0]),
        expected
    );
}

#[tokio::test]
async fn loopback_redirect_warns_that_a_local_program_receives_the_code() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Local", "http://127.0.0.1/callback").await;
    proxy.clock.advance(601);
    let p = page(&proxy, &c, &Browser::new()).await;
    assert_eq!(shown(&p), vec![LOOPBACK]);
}

#[tokio::test]
async fn long_known_client_to_a_familiar_host_gets_no_warning() {
    // Approvals count only when admission is closed (everyone who approved was admitted).
    let proxy = TestProxy::start_with(Options {
        access: r#"github_users = ["alice", "bob"]"#.to_owned(),
        ..Options::default()
    })
    .await;
    let c = Client::register(&proxy, "Known", "https://known.example/cb").await;
    for who in ["alice", "bob"] {
        c.tokens(&proxy, &Browser::new(), who).await;
    }
    proxy.clock.advance(601);
    let p = page(&proxy, &c, &Browser::new()).await;
    assert_eq!(shown(&p), Vec::<&str>::new(), "{}", p.body);
    assert!(!p.body.contains(r#"class="warning""#));
    let last = events(&proxy, "consent_shown").await;
    assert!(warnings_of(last.last().unwrap()).is_empty());
}

#[tokio::test]
async fn metadata_document_whose_redirect_host_differs_from_its_own_host_is_flagged() {
    let server = DocServer::start().await;
    let port: u16 = server.base.rsplit(':').next().unwrap().parse().unwrap();
    let at: [SocketAddr; 1] = [format!("127.0.0.1:{port}").parse().unwrap()];
    let resolver = MapResolver::new(&[("tool.example", &at)]);
    let proxy = TestProxy::start_with(Options {
        extra_toml: DEV.to_owned(),
        client_resolver: Some(resolver),
        ..Options::default()
    })
    .await;
    let id = format!("http://tool.example:{port}/oauth/client.json");
    let doc = |redirects: &[&str]| {
        serde_json::json!({
            "client_id": id,
            "client_name": "Tool",
            "redirect_uris": redirects,
        })
    };
    // Same host as the client_id: no mismatch warning (only "new destination").
    server.serve_json(
        &doc(&["https://tool.example/cb"]),
        &[("cache-control", "no-store")],
    );
    proxy.clock.advance(601);
    let same = Client {
        id: id.clone(),
        secret: None,
        redirect_uri: "https://tool.example/cb".to_owned(),
    };
    let p = page(&proxy, &same, &Browser::new()).await;
    assert!(p.body.contains("tool.example"));
    assert!(!shown(&p).contains(&MISMATCH), "{:?}", shown(&p));

    // Elsewhere: flagged, and recorded with the page.
    server.serve_json(
        &doc(&["https://collector.example/cb"]),
        &[("cache-control", "no-store")],
    );
    let other = Client {
        redirect_uri: "https://collector.example/cb".to_owned(),
        ..same
    };
    let p = page(&proxy, &other, &Browser::new()).await;
    assert!(shown(&p).contains(&MISMATCH), "{}", p.body);
    let shown_events = events(&proxy, "consent_shown").await;
    assert!(warnings_of(shown_events.last().unwrap()).contains(&MISMATCH.to_owned()));
}

#[tokio::test]
async fn document_that_swaps_its_redirect_uris_after_a_long_time_shows_the_new_client_warning_again()
 {
    // An attacker publishes a harmless document, lets it age, then swaps in their own
    // redirect URI: the age of the old document must not silence the warning.
    let proxy = TestProxy::start_with(Options {
        extra_toml: DEV.to_owned(),
        ..Options::default()
    })
    .await;
    let server = DocServer::start().await;
    let id = server.client_id();
    server.serve_json(
        &server.document("Tool", &["https://tool.example/cb"]),
        &[("cache-control", "no-store")],
    );
    let c = Client {
        id: id.clone(),
        secret: None,
        redirect_uri: "https://tool.example/cb".to_owned(),
    };
    assert!(shown(&page(&proxy, &c, &Browser::new()).await).contains(&RECENT));
    c.tokens(&proxy, &Browser::new(), "alice").await;

    proxy.clock.advance(30 * 86_400);
    assert!(!shown(&page(&proxy, &c, &Browser::new()).await).contains(&RECENT));

    server.serve_json(
        &server.document("Tool", &["https://collector.example/cb"]),
        &[("cache-control", "no-store")],
    );
    let swapped = Client {
        redirect_uri: "https://collector.example/cb".to_owned(),
        ..c
    };
    let p = page(&proxy, &swapped, &Browser::new()).await;
    assert!(shown(&p).contains(&RECENT), "{}", p.body);
    assert!(p.body.contains("first seen or last changed"), "{}", p.body);
    // Detection reads the same date (the record's `registered_at` is the change).
    let known = proxy
        .app
        .clients
        .known(&mcp_oauth_proxy::ids::ClientId::new(id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(known.registered_at, proxy.clock.now());
}

#[tokio::test]
async fn metadata_document_record_of_a_client_that_never_got_a_code_expires() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: DEV.to_owned(),
        ..Options::default()
    })
    .await;
    let unused = DocServer::start().await;
    unused.serve_json(&unused.document("Unused", &["https://u.example/cb"]), &[]);
    let used = DocServer::start().await;
    used.serve_json(&used.document("Used", &["https://v.example/cb"]), &[]);
    let client_of = |s: &DocServer, r: &str| Client {
        id: s.client_id(),
        secret: None,
        redirect_uri: r.to_owned(),
    };
    page(
        &proxy,
        &client_of(&unused, "https://u.example/cb"),
        &Browser::new(),
    )
    .await;
    client_of(&used, "https://v.example/cb")
        .tokens(&proxy, &Browser::new(), "alice")
        .await;
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 2);
    // The default unused-registration lifetime (a day): only the client with a code stays.
    proxy.clock.advance(86_400 + 1);
    let left: Vec<String> = proxy
        .app
        .store
        .scan_prefix(Keyspace::CimdClients, "")
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(left, vec![used.client_id()]);
}
