//! The admin API on the admin listener: refused without the admin token (nothing changes),
//! and each action takes effect — the client's next `/mcp` call or refresh fails.

use crate::clients::doc_server::DocServer;
use crate::support::admin::admin_toml;
use crate::support::admin::{ADMIN_TOKEN, Admin, proxy_with_admin};
use crate::support::client::JsonResp;
use crate::support::mcp::Mcp;
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http};
use mcp_oauth_proxy::clock::UnixTime;
use mcp_oauth_proxy::store::{Keyspace, Store, StoreError, Versioned};
use serde_json::{Value, json};

const ALICE: &str = "github:1001";

fn ping() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
}

/// A registered client with tokens for alice, its /mcp answering.
async fn authorized(proxy: &TestProxy) -> (Client, JsonResp) {
    let client = Client::register(proxy, "Admin Target", "https://app.example/cb").await;
    let t = client.tokens(proxy, &Browser::new(), "alice").await;
    let (status, _) = mcp_of(proxy, &t).request(ping()).await;
    assert_eq!(status, 200);
    (client, t)
}

fn mcp_of(proxy: &TestProxy, t: &JsonResp) -> Mcp {
    let mut m = Mcp::with_token(proxy, t.json["access_token"].as_str().unwrap());
    m.version = "2026-07-28"; // stateless: a ping needs no session
    m
}

/// The client can neither call /mcp nor refresh any more.
async fn assert_cut_off(proxy: &TestProxy, client: &Client, t: &JsonResp) {
    let (status, _) = mcp_of(proxy, t).request(ping()).await;
    assert_eq!(status, 401, "/mcp must refuse the revoked token");
    let r = client
        .refresh(proxy, t.json["refresh_token"].as_str().unwrap(), &[])
        .await;
    // A client that is gone cannot authenticate; one that stays finds its family revoked.
    assert!(
        matches!(
            (r.status, r.error()),
            (401, "invalid_client") | (400, "invalid_grant")
        ),
        "refresh must be refused: {} {:?}",
        r.status,
        r.json
    );
    assert!(r.json["access_token"].is_null());
}

/// The state an admin action could change.
async fn snapshot(proxy: &TestProxy) -> [usize; 6] {
    [
        proxy.count(Keyspace::Clients).await,
        proxy.count(Keyspace::CimdClients).await,
        proxy.count(Keyspace::Consents).await,
        proxy.count(Keyspace::Grants).await,
        proxy.count(Keyspace::RefreshFamilies).await,
        proxy.audit_events().await.len(),
    ]
}

#[tokio::test]
async fn admin_api_without_or_with_a_wrong_token_is_refused_with_401_and_changes_nothing() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, t) = authorized(&proxy).await;
    let before = snapshot(&proxy).await;
    let calls: Vec<(reqwest::Method, String, Option<Value>)> = vec![
        (reqwest::Method::GET, "/admin/api/clients".into(), None),
        (
            reqwest::Method::GET,
            format!("/admin/api/clients/{}", client.id),
            None,
        ),
        (
            reqwest::Method::DELETE,
            format!("/admin/api/clients/{}", client.id),
            None,
        ),
        (
            reqwest::Method::POST,
            format!(
                "{}/unblock",
                path_of("https://blocked.example/oauth/client.json")
            ),
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/admin/api/consents?user={ALICE}"),
            None,
        ),
        (
            reqwest::Method::POST,
            "/admin/api/consents/revoke".into(),
            Some(json!({"user": ALICE, "client": client.id})),
        ),
        (
            reqwest::Method::POST,
            "/admin/api/grants/revoke".into(),
            Some(json!({"user": ALICE})),
        ),
        (reqwest::Method::GET, "/admin/api/audit/tail".into(), None),
        (reqwest::Method::GET, "/admin/api/audit/verify".into(), None),
        (reqwest::Method::GET, "/admin/api/audit/export".into(), None),
        (reqwest::Method::GET, "/admin/api/policy".into(), None),
    ];
    let wrong = [
        None,
        Some("Bearer wrong-token-but-long-enough-0123456789".to_owned()),
        Some(format!("Bearer {ADMIN_TOKEN}x")),
        Some(format!("Basic {ADMIN_TOKEN}")),
        Some(ADMIN_TOKEN.to_owned()),
    ];
    for (method, path, body) in &calls {
        for auth in &wrong {
            let mut req = http().request(method.clone(), admin.url(path));
            if let Some(a) = auth {
                req = req.header("authorization", a);
            }
            if let Some(b) = body {
                req = req.json(b);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), 401, "{method} {path} with {auth:?}");
            assert!(
                r.headers()["www-authenticate"]
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer")
            );
            let j: Value = r.json().await.unwrap();
            assert_eq!(j["error"], "unauthorized");
        }
    }
    assert_eq!(
        snapshot(&proxy).await,
        before,
        "a refused call changed state"
    );
    let (status, _) = mcp_of(&proxy, &t).request(ping()).await;
    assert_eq!(status, 200, "the client still works");
}

#[tokio::test]
async fn without_an_admin_token_the_api_is_disabled_but_metrics_and_health_are_served() {
    let proxy = TestProxy::start().await;
    let admin = Admin::start(&proxy).await;
    let (status, body) = admin.get("/admin/api/clients").await;
    assert_eq!(status, 403);
    assert_eq!(body["error"], "admin_api_disabled");
    for path in ["/metrics", "/healthz", "/readyz"] {
        let r = http().get(admin.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    let (status, body) = admin.get("/readyz").await;
    assert_eq!(status, 200);
    assert_eq!(body["ready"], true);
    assert_eq!(body["checks"]["store"], true);
    assert_eq!(body["checks"]["durable"], true);
}

/// A delete that failed after taking the client away (store error, crash) left its consents
/// and tokens working; the operator repeats it and the repeat finishes the job instead of
/// answering "not found".
#[tokio::test]
async fn client_delete_interrupted_after_its_first_step_is_finished_by_repeating_it() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, t) = authorized(&proxy).await;
    // What the interrupted delete did: only its first step.
    proxy
        .app
        .store
        .remove(Keyspace::Clients, client.id.as_str())
        .await
        .unwrap();
    let (status, _) = mcp_of(&proxy, &t).request(ping()).await;
    assert_eq!(status, 200, "the leftover token still works");

    let (status, gone) = admin
        .delete(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!(status, 200, "{gone}");
    assert_eq!(
        (gone["consents"].as_u64(), gone["families"].as_u64()),
        (Some(1), Some(1))
    );
    assert_cut_off(&proxy, &client, &t).await;
    assert_eq!(proxy.count(Keyspace::Consents).await, 0);
    // Nothing is left now: a further repeat is a 404 and changes nothing.
    let before = snapshot(&proxy).await;
    let (status, r) = admin
        .delete(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!((status, r["error"].as_str()), (404, Some("not_found")));
    assert_eq!(snapshot(&proxy).await, before);
}

#[tokio::test]
async fn clients_list_show_delete_and_the_deleted_clients_tokens_stop_working() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, t) = authorized(&proxy).await;
    let other = Client::register(&proxy, "Bystander", "https://other.example/cb").await;

    let (status, list) = admin.get("/admin/api/clients").await;
    assert_eq!(status, 200);
    let ids: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["client_id"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&client.id.as_str()) && ids.contains(&other.id.as_str()));
    assert!(!list.to_string().contains("secret_hash"));

    let (status, shown) = admin
        .get(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!(status, 200);
    assert_eq!(shown["client"]["client_name"], "Admin Target");
    assert_eq!(shown["consents"], 1);
    assert_eq!(shown["token_families"], 1);

    let (status, gone) = admin
        .delete(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!(status, 200, "{gone}");
    assert_eq!(gone["consents"], 1);
    assert_eq!(gone["families"], 1);
    assert_cut_off(&proxy, &client, &t).await;
    assert_eq!(
        proxy.count(Keyspace::Clients).await,
        1,
        "only the bystander is left"
    );
    assert_eq!(proxy.count(Keyspace::Consents).await, 0);
    let (status, _) = admin
        .get(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!(status, 404);
    let (status, _) = admin
        .delete(&format!("/admin/api/clients/{}", client.id))
        .await;
    assert_eq!(status, 404);
    assert!(
        proxy
            .audit_events()
            .await
            .contains(&"client_deleted".to_owned())
    );
}

#[tokio::test]
async fn consents_list_and_revoke_cut_the_client_off() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, t) = authorized(&proxy).await;
    let (status, list) = admin
        .get(&format!("/admin/api/consents?user={ALICE}"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["client_id"], client.id.as_str());

    let (status, r) = admin
        .post(
            "/admin/api/consents/revoke",
            &json!({"user": ALICE, "client": client.id}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["consents"], 1);
    assert_eq!(r["families"], 1);
    assert_cut_off(&proxy, &client, &t).await;
    let (_, list) = admin
        .get(&format!("/admin/api/consents?user={ALICE}"))
        .await;
    assert_eq!(list, json!([]));
    // Nothing left to revoke, and malformed requests are refused without effect.
    let (status, _) = admin
        .post(
            "/admin/api/consents/revoke",
            &json!({"user": ALICE, "client": client.id}),
        )
        .await;
    assert_eq!(status, 404);
    let (status, body) = admin
        .post("/admin/api/consents/revoke", &json!({"user": ALICE}))
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "invalid_request");
    let (status, _) = admin.get("/admin/api/consents").await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn grants_revoke_forgets_the_github_grant_and_every_token_of_the_person() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, t) = authorized(&proxy).await;
    let (client2, t2) = authorized(&proxy).await;
    assert_eq!(proxy.count(Keyspace::Grants).await, 1);
    let (status, r) = admin
        .post("/admin/api/grants/revoke", &json!({"user": ALICE}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["grant_removed"], true);
    assert_eq!(r["families"], 2);
    assert_eq!(proxy.count(Keyspace::Grants).await, 0);
    assert_cut_off(&proxy, &client, &t).await;
    assert_cut_off(&proxy, &client2, &t2).await;
    let (status, _) = admin
        .post(
            "/admin/api/grants/revoke",
            &json!({"user": "github:424242"}),
        )
        .await;
    assert_eq!(status, 404);
    assert!(
        proxy
            .audit_events()
            .await
            .contains(&"grant_revoked_by_admin".to_owned())
    );
}

#[tokio::test]
async fn audit_tail_verify_and_export_return_the_stored_trail() {
    let (proxy, admin) = proxy_with_admin().await;
    authorized(&proxy).await;
    let events = proxy.audit_events().await;
    assert!(events.len() > 3);

    let (status, tail) = admin.get("/admin/api/audit/tail?limit=2").await;
    assert_eq!(status, 200);
    let tail = tail.as_array().unwrap();
    assert_eq!(tail.len(), 2);
    assert_eq!(tail[1]["event"]["event"], events[events.len() - 1].as_str());

    let (status, report) = admin.get("/admin/api/audit/verify").await;
    assert_eq!(status, 200);
    assert_eq!(report["events"], events.len());
    assert_eq!(report["problems"], json!([]));

    let r = http()
        .get(admin.url("/admin/api/audit/export"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), events.len());
    assert_eq!(lines[0]["event"]["event"], events[0].as_str());
    let (status, _) = admin.get("/admin/api/audit/tail?limit=x").await;
    assert_eq!(status, 400);
}

/// A store whose every operation fails, as a lost database connection would; with
/// `reads_answer`, reads still answer (from a cache) while nothing can be made durable, as on
/// a full disk or with a stopped flusher.
struct UnreachableStore {
    reads_answer: bool,
}

fn down() -> StoreError {
    StoreError::Backend("connection refused".to_owned())
}

#[async_trait::async_trait]
impl Store for UnreachableStore {
    async fn get(&self, _: Keyspace, _: &str) -> Result<Option<Versioned>, StoreError> {
        if self.reads_answer {
            return Ok(None);
        }
        Err(down())
    }
    async fn insert_new(
        &self,
        _: Keyspace,
        _: &str,
        _: Vec<u8>,
        _: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        Err(down())
    }
    async fn put(
        &self,
        _: Keyspace,
        _: &str,
        _: Vec<u8>,
        _: Option<UnixTime>,
    ) -> Result<(), StoreError> {
        Err(down())
    }
    async fn take(&self, _: Keyspace, _: &str) -> Result<Option<Versioned>, StoreError> {
        Err(down())
    }
    async fn compare_and_swap(
        &self,
        _: Keyspace,
        _: &str,
        _: &Versioned,
        _: Option<Versioned>,
    ) -> Result<bool, StoreError> {
        Err(down())
    }
    async fn remove(&self, _: Keyspace, _: &str) -> Result<(), StoreError> {
        Err(down())
    }
    async fn scan_prefix(
        &self,
        _: Keyspace,
        _: &str,
    ) -> Result<Vec<(String, Versioned)>, StoreError> {
        Err(down())
    }
    async fn sweep_expired(&self) -> Result<u64, StoreError> {
        Err(down())
    }
    async fn flush(&self) -> Result<(), StoreError> {
        Err(down())
    }
    fn peers(
        &self,
        _cache: std::sync::Arc<mcp_oauth_proxy::store::RecordCache>,
    ) -> std::sync::Arc<dyn mcp_oauth_proxy::store::Peers> {
        std::sync::Arc::new(mcp_oauth_proxy::store::NoPeers)
    }
}

/// An admin listener for `proxy`'s configuration over `store`; its base URL.
async fn admin_over(proxy: &TestProxy, store: UnreachableStore) -> String {
    // The same configuration and keys, over a store that has gone away.
    let app = mcp_oauth_proxy::app::App::new(
        proxy.app.config.clone(),
        proxy.app.keys.clone(),
        std::sync::Arc::new(store),
        proxy.clock.clone(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        mcp_oauth_proxy::admin::serve(listener, app, std::future::pending::<()>())
            .await
            .unwrap();
    });
    base
}

#[tokio::test]
async fn readyz_is_503_while_the_store_does_not_answer_and_healthz_stays_200() {
    let proxy = TestProxy::start().await;
    let base = admin_over(
        &proxy,
        UnreachableStore {
            reads_answer: false,
        },
    )
    .await;
    let r = http().get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503, "a load balancer must stop sending traffic");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"]["store"], false);
    assert_eq!(body["checks"]["config"], true);
    // Liveness is about the process, not its dependencies: no restart loop over a DB outage.
    let r = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn readyz_is_503_while_reads_answer_but_writes_cannot_be_made_durable() {
    // A full disk or a stopped flusher: every response that creates state would be a 500,
    // so a load balancer must stop sending traffic although reads still answer.
    let proxy = TestProxy::start().await;
    let base = admin_over(&proxy, UnreachableStore { reads_answer: true }).await;
    let r = http().get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"]["store"], true);
    assert_eq!(body["checks"]["durable"], false);
    let r = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

const DOC_REDIRECT: &str = "https://app.example/callback";

/// A proxy with the admin API, a configured client, and development document fetching.
async fn proxy_with_admin_and_every_kind() -> (TestProxy, Admin) {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: format!(
            "{}[cimd]\ndangerously_allow_loopback_for_development = true\n\n[[clients]]\nclient_id = \"platform-cli\"\nclient_name = \"Platform CLI\"\nredirect_uris = [\"http://127.0.0.1/callback\"]\n",
            admin_toml()
        ),
        ..Options::default()
    })
    .await;
    let admin = Admin::start(&proxy).await;
    (proxy, admin)
}

fn path_of(id: &str) -> String {
    format!(
        "/admin/api/clients/{}",
        url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>()
    )
}

#[tokio::test]
async fn configured_client_is_listed_but_deleting_it_is_refused_with_409_and_changes_nothing() {
    let (proxy, admin) = proxy_with_admin_and_every_kind().await;
    let (client, t) = authorized(&proxy).await;
    let (status, list) = admin.get("/admin/api/clients").await;
    assert_eq!(status, 200);
    let kinds: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["client_id"].as_str().unwrap(),
                c["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(kinds.contains(&("platform-cli", "configured")), "{list}");
    assert!(
        kinds.contains(&(client.id.as_str(), "registered")),
        "{list}"
    );
    let (status, shown) = admin.get("/admin/api/clients/platform-cli").await;
    assert_eq!(status, 200);
    assert_eq!(shown["client"]["kind"], "configured");
    // Inferred from its loopback redirect, as registration would.
    let configured = proxy
        .app
        .clients
        .known(&mcp_oauth_proxy::ids::ClientId::new("platform-cli"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        configured.application_type,
        mcp_oauth_proxy::oauth::registration::ApplicationType::Native
    );

    let before = snapshot(&proxy).await;
    let (status, body) = admin.delete("/admin/api/clients/platform-cli").await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"], "conflict");
    assert!(
        body["error_description"]
            .as_str()
            .unwrap()
            .contains("remove it from the config"),
        "{body}"
    );
    assert_eq!(
        snapshot(&proxy).await,
        before,
        "a refused delete changed state"
    );
    let (status, _) = mcp_of(&proxy, &t).request(ping()).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn deleting_a_malicious_metadata_document_client_revokes_its_tokens_and_blocks_its_url() {
    let (proxy, admin) = proxy_with_admin_and_every_kind().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Evil Tool", &[DOC_REDIRECT]), &[]);
    let client = Client {
        id: server.client_id(),
        secret: None,
        redirect_uri: DOC_REDIRECT.to_owned(),
    };
    let t = client.tokens(&proxy, &Browser::new(), "alice").await;
    let (status, _) = mcp_of(&proxy, &t).request(ping()).await;
    assert_eq!(status, 200);

    let (status, list) = admin.get("/admin/api/clients").await;
    assert_eq!(status, 200);
    let doc = list
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["client_id"] == client.id.as_str())
        .unwrap_or_else(|| panic!("metadata-document client listed: {list}"))
        .clone();
    assert_eq!(doc["kind"], "metadata_document");
    assert_eq!(doc["blocked"], false);
    let (status, shown) = admin.get(&path_of(&client.id)).await;
    assert_eq!(status, 200, "{shown}");
    assert_eq!(shown["token_families"], 1);

    let (status, gone) = admin.delete(&path_of(&client.id)).await;
    assert_eq!(status, 200, "{gone}");
    assert_eq!(gone["consents"], 1);
    assert_eq!(gone["families"], 1);
    assert_cut_off(&proxy, &client, &t).await;
    assert_eq!(proxy.count(Keyspace::Consents).await, 0);

    // Blocked: refused before any fetch, at /authorize and /token, however the cache stood.
    let hits = server.hits().len();
    proxy.clock.advance(3_600);
    let page = Browser::new()
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 400);
    assert!(page.body.contains("blocked"), "{}", page.body);
    let r = client.redeem(&proxy, "mcpac_x", &Pkce::new(), &[]).await;
    assert_eq!((r.status, r.error()), (401, "invalid_client"));
    assert_eq!(
        server.hits().len(),
        hits,
        "a blocked document is not fetched"
    );
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
    let (_, shown) = admin.get(&path_of(&client.id)).await;
    assert_eq!(shown["client"]["blocked"], true);
    let (status, _) = admin.delete(&path_of(&client.id)).await;
    assert_eq!(status, 404, "already deleted");
    assert!(
        proxy
            .audit_events()
            .await
            .contains(&"client_deleted".to_owned())
    );
}

#[tokio::test]
async fn a_metadata_document_url_never_seen_can_be_blocked_ahead_of_time() {
    let (proxy, admin) = proxy_with_admin_and_every_kind().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Evil Tool", &[DOC_REDIRECT]), &[]);
    let (status, r) = admin.delete(&path_of(&server.client_id())).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        (r["consents"].as_u64(), r["families"].as_u64()),
        (Some(0), Some(0))
    );
    let client = Client {
        id: server.client_id(),
        secret: None,
        redirect_uri: DOC_REDIRECT.to_owned(),
    };
    let page = Browser::new()
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 400);
    assert!(server.hits().is_empty());
    // Not a URL that could ever be fetched: nothing to block.
    let (status, _) = admin.delete(&path_of("https://evil.example/x|y")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn mistaken_block_of_a_metadata_document_client_can_be_lifted_and_it_starts_over_as_new() {
    let (proxy, admin) = proxy_with_admin_and_every_kind().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Good Tool", &[DOC_REDIRECT]), &[]);
    let client = Client {
        id: server.client_id(),
        secret: None,
        redirect_uri: DOC_REDIRECT.to_owned(),
    };
    let t = client.tokens(&proxy, &Browser::new(), "alice").await;
    // Long known by the time of the mistake: its consent page no longer says it is new.
    proxy.clock.advance(30 * 86_400);
    let (status, _) = admin.delete(&path_of(&client.id)).await;
    assert_eq!(status, 200);
    let unblock = format!("{}/unblock", path_of(&client.id));

    // Only the admin token lifts it; a refused call leaves the block in place.
    let r = http().post(admin.url(&unblock)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let (_, shown) = admin.get(&path_of(&client.id)).await;
    assert_eq!(shown["client"]["blocked"], true);

    let (status, r) = admin.post(&unblock, &json!({})).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["unblocked"], true);
    assert_eq!(r["client_id"], client.id.as_str());
    let (status, _) = admin.get(&path_of(&client.id)).await;
    assert_eq!(status, 404, "as never seen: no record until its next use");
    let hits = server.hits().len();
    // What the delete revoked stays revoked (its refresh token is refused, although the
    // client itself is served again).
    assert_cut_off(&proxy, &client, &t).await;

    // Its next use fetches the document again and the person approves it anew, warned that
    // the application is new (its history went with the block).
    let page = Browser::new()
        .navigate(
            &client.authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains("This application was registered moments ago"),
        "{}",
        page.body
    );
    let again = client.tokens(&proxy, &Browser::new(), "alice").await;
    assert!(server.hits().len() > hits, "the document was fetched again");
    let (status, _) = mcp_of(&proxy, &again).request(ping()).await;
    assert_eq!(status, 200);
    assert!(
        proxy
            .audit_events()
            .await
            .contains(&"client_unblocked".to_owned())
    );

    // Lifting a block that is not there: 404, nothing changes.
    let before = snapshot(&proxy).await;
    for id in [
        client.id.as_str(),
        "https://never-blocked.example/oauth/client.json",
        "not-a-url-client",
    ] {
        let (status, r) = admin
            .post(&format!("{}/unblock", path_of(id)), &json!({}))
            .await;
        assert_eq!(status, 404, "{id}: {r}");
        assert_eq!(r["error"], "not_found");
    }
    assert_eq!(snapshot(&proxy).await, before);
}

#[tokio::test]
async fn admin_api_errors_axum_answers_itself_come_as_json_and_change_nothing() {
    let (proxy, admin) = proxy_with_admin().await;
    let (client, _) = authorized(&proxy).await;
    let before = snapshot(&proxy).await;
    let send = |req: reqwest::RequestBuilder| async move {
        let r = req.bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        let status = r.status().as_u16();
        let ct = r.headers()["content-type"].to_str().unwrap().to_owned();
        let allow = r
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        let body: Value = r.json().await.unwrap();
        (status, ct, body, allow)
    };
    // A method the route does not take: the answer still says which ones it does.
    let (status, ct, body, allow) = send(http().put(admin.url("/admin/api/clients"))).await;
    assert_eq!((status, ct.as_str()), (405, "application/json"));
    assert_eq!(body["error"], "method_not_allowed");
    assert!(
        allow.as_deref().is_some_and(|a| a.contains("GET")),
        "{allow:?}"
    );
    // A body over the limit, on a route that would revoke.
    let huge = json!({"user": "github:1001", "client": client.id, "pad": "x".repeat(20_000)});
    let (status, _, body, _) = send(
        http()
            .post(admin.url("/admin/api/consents/revoke"))
            .json(&huge),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(body["error"], "request_too_large");
    // A path segment that does not decode to UTF-8.
    let (status, _, body, _) = send(http().get(admin.url("/admin/api/clients/%FF%FE"))).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"], "invalid_request");
    assert_eq!(
        snapshot(&proxy).await,
        before,
        "a refused call changed state"
    );
}

#[tokio::test]
async fn dns_rebinding_page_cannot_read_metrics_or_reach_the_admin_api() {
    let (_proxy, admin) = proxy_with_admin().await;
    let port = admin.base.rsplit(':').next().unwrap().to_owned();
    for path in ["/metrics", "/readyz", "/admin/api/clients"] {
        let r = http()
            .get(admin.url(path))
            .header("host", format!("rebind.evil.example:{port}"))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 421, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"], "misdirected_request");
    }
    let r = http()
        .get(admin.url("/metrics"))
        .header("host", format!("localhost:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "localhost still works");
}

#[tokio::test]
async fn bearer_scheme_is_case_insensitive_but_the_token_is_not() {
    let (_proxy, admin) = proxy_with_admin().await;
    let get = |auth: String| {
        let url = admin.url("/admin/api/clients");
        async move {
            http()
                .get(url)
                .header("authorization", auth)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    for scheme in ["Bearer", "bearer", "BEARER"] {
        assert_eq!(
            get(format!("{scheme} {ADMIN_TOKEN}")).await,
            200,
            "{scheme}"
        );
    }
    assert_eq!(
        get(format!("Bearer {}", ADMIN_TOKEN.to_uppercase())).await,
        401
    );
    assert_eq!(get(format!("Basic {ADMIN_TOKEN}")).await, 401);
}

/// `GET /admin/api/policy`: the tool-call policy in force, as it changes (a SIGHUP reload
/// replaces it the same way, `ops::policy_reload`).
#[tokio::test]
async fn policy_shows_the_rules_in_force() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: format!(
            "{}\n[[policy]]\nid = \"no-deletes\"\ntools = [\"delete_*\"]\ndecision = \"deny\"\n\
             [[policy]]\nid = \"branches\"\ntools = [\"create_branch\"]\nclients = [\"mcpc_x\"]\n\
             decision = \"step_up\"\nscopes = [\"repo\"]\n",
            admin_toml()
        ),
        ..Options::default()
    })
    .await;
    let admin = Admin::start(&proxy).await;
    let (status, p) = admin.get("/admin/api/policy").await;
    assert_eq!(status, 200, "{p}");
    assert_eq!(
        p,
        json!({
            "rules": [
                {"id": "no-deletes", "decision": "deny", "tools": ["delete_*"],
                 "arguments": [], "people": [], "clients": []},
                {"id": "branches", "decision": "step_up", "tools": ["create_branch"],
                 "arguments": [], "people": [], "clients": ["mcpc_x"], "scopes": ["repo"]},
            ],
            "default": "allow",
            "description": "2 rules, default allow",
        })
    );
    proxy
        .app
        .replace_policy(mcp_oauth_proxy::tool_policy::Policy::default());
    let (_, p) = admin.get("/admin/api/policy").await;
    assert_eq!(p["rules"], json!([]));
    assert_eq!(p["description"], "0 rules, default allow");
}
