//! The outbound metadata-document fetch budget cannot be turned against legitimate clients:
//! one client IP spends only its own share, ids refused by the address policy spend nothing
//! of everyone's, a known client is served its last valid document while fetching is not
//! possible, and `/token` answers `temporarily_unavailable` (503, retry) rather than the
//! fatal `invalid_client` when a document cannot be had for reasons that are not the client's.

use super::cimd::DEV;
use super::doc_server::{Answer, DocServer, PATH};
use crate::support::client::JsonResp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;

const REDIRECT: &str = "https://app.example/callback";

/// Development fetching, small budgets, and client IPs from `X-Forwarded-For`.
async fn proxy() -> TestProxy {
    TestProxy::start_with(Options {
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        extra_toml: format!("{DEV}fetches_per_minute = 6\nfetches_per_minute_per_ip = 2\n"),
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

/// GET /authorize for `client_id` as client IP `from`; the status.
async fn authorize_as(proxy: &TestProxy, from: &str, client_id: &str) -> u16 {
    let c = Client {
        id: client_id.to_owned(),
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    };
    http()
        .get(c.authorize_url(proxy, &Pkce::new(), "s", &[]))
        .header("x-forwarded-for", from)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

fn random_hits(server: &DocServer) -> usize {
    server.hits().iter().filter(|p| p.as_str() != PATH).count()
}

#[tokio::test]
async fn flood_of_random_url_client_ids_does_not_lock_out_a_known_metadata_document_client() {
    let proxy = proxy().await;
    let server = DocServer::start().await;
    // `no-store`: every resolution needs a fetch, the worst case for a known client.
    server.serve_json(
        &server.document("Known Tool", &[REDIRECT]),
        &[("cache-control", "no-store")],
    );
    let known = client(&server);
    let browser = Browser::new();
    let tokens = known.tokens(&proxy, &browser, "alice").await;
    let known_fetches = server.hits().len() - random_hits(&server);
    assert!(known_fetches >= 1);

    // A fresh minute, then the flood: random metadata URLs from several addresses.
    proxy.clock.advance(61);
    let flooders = [
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "198.51.100.4",
    ];
    for (i, ip) in flooders.iter().enumerate() {
        for j in 0..5 {
            let id = format!("{}/random-{i}-{j}.json", server.base);
            // A fetched random URL is a 404, the client's problem (400); once the address's
            // own share (2) or everyone's (6) is spent, the person is told to retry (503).
            let expected = if i < 3 && j < 2 { 400 } else { 503 };
            assert_eq!(authorize_as(&proxy, ip, &id).await, expected, "{ip} {j}");
        }
    }
    // Each address got at most its own share (2), and all of them together at most the
    // global budget (6): the flood stopped at the budget, not at the target's capacity.
    assert_eq!(random_hits(&server), 6, "{:?}", server.hits());
    // A client never seen cannot be served while the budget is spent: retry, not fatal.
    let new_server = DocServer::start().await;
    new_server.serve_json(&new_server.document("New Tool", &[REDIRECT]), &[]);
    let t = client(&new_server)
        .redeem(&proxy, "mcpac_not-a-code", &Pkce::new(), &[])
        .await;
    assert_eq!((t.status, t.error()), (503, "temporarily_unavailable"));
    assert!(new_server.hits().is_empty());

    // The known client still completes /authorize and refresh, from its last valid document.
    let page = browser
        .navigate(
            &known.authorize_url(&proxy, &Pkce::new(), "again", &[]),
            "none",
        )
        .await;
    assert!(
        page.status == 303 || page.status == 200,
        "{}: {}",
        page.status,
        page.body
    );
    let r = known
        .refresh(&proxy, tokens.json["refresh_token"].as_str().unwrap(), &[])
        .await;
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(r.json["access_token"].as_str().is_some());
    // The general budget was spent: the known client's /authorize was fetched from the
    // reserve for known URLs (one fetch per URL a minute), its refresh served from the
    // stored record.
    assert_eq!(
        server.hits().len() - random_hits(&server),
        known_fetches + 1,
        "one fetch from the reserve, then the stored record"
    );
    // The flood stored nothing.
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 1);

    // The stale copy has a limit: a day after its last successful fetch it is not served.
    proxy.clock.advance(86_400 + 60);
    server.answer(Answer {
        status: 503,
        body: String::new(),
        headers: vec![],
    });
    let r = known
        .refresh(&proxy, r.json["refresh_token"].as_str().unwrap(), &[])
        .await;
    assert_eq!((r.status, r.error()), (503, "temporarily_unavailable"));
}

#[tokio::test]
async fn token_answers_503_temporarily_unavailable_when_the_document_cannot_be_fetched_and_nothing_is_cached()
 {
    let proxy = proxy().await;
    let server = DocServer::start().await;
    let c = client(&server);
    for status in [500, 502, 503] {
        // A fresh minute each, so the answer and not the per-IP budget decides.
        proxy.clock.advance(60);
        server.answer(Answer {
            status,
            body: server.document("Tool", &[REDIRECT]).to_string(),
            headers: vec![],
        });
        let t: JsonResp = c
            .redeem(&proxy, "mcpac_not-a-code", &Pkce::new(), &[])
            .await;
        assert_eq!(
            (t.status, t.error()),
            (503, "temporarily_unavailable"),
            "{status}"
        );
        assert_eq!(t.headers["retry-after"], "60", "{status}");
        assert!(t.headers.get("www-authenticate").is_none());
    }
    // A document that is not there is the client's problem: still `invalid_client`.
    proxy.clock.advance(60);
    server.answer(Answer {
        status: 404,
        body: String::new(),
        headers: vec![],
    });
    let t = c
        .redeem(&proxy, "mcpac_not-a-code", &Pkce::new(), &[])
        .await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"));
    assert_eq!(server.hits().len(), 4, "each answer came from a real fetch");
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
    assert_eq!(proxy.count(Keyspace::RefreshFamilies).await, 0);
}
