//! The stranger as a client: a redirect that pretends to be a host, loopback spellings that
//! are not the three canonical ones, a code redeemed without the `redirect_uri` it was issued
//! for, a flood of new metadata-document URLs, and a metadata document that is too big or
//! that an environment proxy could intercept. Every refusal is asserted with its status and
//! OAuth error, and with nothing stored.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::clients::cimd::DEV;
use crate::clients::doc_server::{Answer, DocServer, PATH, Tarpit};
use crate::clients::ssrf::MapResolver;
use crate::support::binary::{Process, free_port};
use crate::support::client::{approve, register_raw};
use crate::support::{Browser, Client, Options, Pkce, TestProxy, http, query_param};
use mcp_oauth_proxy::store::records::SeenHostRecord;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};

const LOCAL_PROGRAM: &str = "A program on this computer will receive access";
const NEW_DESTINATION: &str = "This destination is new to this server";

async fn seen(proxy: &TestProxy, key: &str) -> Option<SeenHostRecord> {
    proxy
        .app
        .store
        .get_json(Keyspace::SeenRedirectHosts, key)
        .await
        .unwrap()
}

#[tokio::test]
async fn private_use_scheme_redirect_is_shown_as_a_local_app_with_its_warning() {
    // Approvals count only with admission closed.
    let proxy = TestProxy::start_with(Options {
        access: r#"github_users = ["alice", "bob", "mallory"]"#.to_owned(),
        ..Options::default()
    })
    .await;
    // The web host claude.ai becomes familiar: two admitted people approve a client there.
    let web = Client::register(&proxy, "Claude on the web", "https://claude.ai/cb").await;
    for who in ["alice", "bob"] {
        web.tokens(&proxy, &Browser::new(), who).await;
    }
    let web_approvers = seen(&proxy, "claude.ai").await.unwrap().admitted_approvers;
    assert_eq!(web_approvers.len(), 2);

    // An app registers the private-use scheme of the same name.
    let app = Client::register(&proxy, "Claude", "claude.ai:/cb").await;
    proxy.clock.advance(601);
    let page = Browser::new()
        .navigate(&app.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains(
            r#"sent to <strong class="host">an app on this device</strong> (scheme <code class="mono">claude.ai:</code>)"#
        ),
        "{}",
        page.body
    );
    assert!(
        !page
            .body
            .contains(r#"<strong class="host">claude.ai</strong>"#),
        "never shown as the host claude.ai"
    );
    assert!(page.body.contains("claude.ai:/cb"), "the full address");
    // The local-program warning, and the destination is new: the host's approvals do not
    // carry over to the scheme.
    assert!(page.body.contains(LOCAL_PROGRAM), "{}", page.body);
    assert!(page.body.contains(NEW_DESTINATION), "{}", page.body);
    assert!(page.body.contains("the app scheme claude.ai:"));
    let shown = proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .rev()
        .find(|e| e["event"] == "consent_shown")
        .unwrap();
    assert_eq!(shown["redirect_host"], "scheme:claude.ai");

    // Approving it records the approval under the scheme's key; the host's stays as it was.
    let code = app
        .get_code(&proxy, &Browser::new(), "mallory", &Pkce::new())
        .await;
    assert!(!code.is_empty());
    assert_eq!(
        seen(&proxy, "scheme:claude.ai")
            .await
            .unwrap()
            .admitted_approvers
            .len(),
        1
    );
    assert_eq!(
        seen(&proxy, "claude.ai").await.unwrap().admitted_approvers,
        web_approvers
    );

    // A private-use scheme that is not a reverse domain name is refused, and nothing is stored.
    let clients = proxy.count(Keyspace::Clients).await;
    for uri in ["myapp:/cb", "cursor://anysphere.cursor-mcp/oauth/callback"] {
        let r = register_raw(
            &proxy,
            json!({"redirect_uris": [uri], "token_endpoint_auth_method": "none"}),
        )
        .await;
        assert_eq!(
            (r.status, r.error()),
            (400, "invalid_redirect_uri"),
            "{uri}"
        );
    }
    assert_eq!(proxy.count(Keyspace::Clients).await, clients);
    // Next to usable URIs it is left out, and the response says what was registered.
    let r = register_raw(
        &proxy,
        json!({
            "redirect_uris": [
                "cursor://anysphere.cursor-mcp/oauth/callback",
                "https://www.cursor.com/agents/mcp/oauth/callback",
                "http://localhost:8787/callback",
            ],
            "token_endpoint_auth_method": "none",
        }),
    )
    .await;
    assert_eq!(r.status, 201, "{:?}", r.json);
    assert_eq!(
        r.json["redirect_uris"],
        json!([
            "https://www.cursor.com/agents/mcp/oauth/callback",
            "http://localhost:8787/callback"
        ])
    );
}

#[tokio::test]
async fn non_canonical_loopback_spellings_and_bad_ports_are_refused() {
    let proxy = TestProxy::start().await;
    for uri in [
        "http://127.1/callback",
        "http://0x7f000001/callback",
        "http://2130706433/callback",
        "http://127.0.0.2/callback",
        "http://[0:0:0:0:0:0:0:1]/callback",
        "http://LOCALHOST/callback",
        "http://127.0.0.1:0/callback",
        "http://127.0.0.1:99999/callback",
        "http://localhost:08080/callback",
    ] {
        let r = register_raw(
            &proxy,
            json!({"redirect_uris": [uri], "token_endpoint_auth_method": "none"}),
        )
        .await;
        assert_eq!(
            (r.status, r.error()),
            (400, "invalid_redirect_uri"),
            "{uri}"
        );
    }
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);

    // At /authorize the port exception holds only for a canonical host and a port 1–65535;
    // anything else is a mismatch, shown as a page and never redirected.
    let c = Client::register(&proxy, "Local", "http://127.0.0.1/callback").await;
    for requested in [
        "http://127.0.0.1:0/callback",
        "http://127.0.0.1:99999/callback",
        "http://127.0.0.1:65536/callback",
        "http://127.0.0.1:08080/callback",
        "http://127.1:5000/callback",
        "http://0x7f000001:5000/callback",
        "http://[::1]:5000/callback",
        "http://localhost:5000/callback",
    ] {
        let page = Browser::new()
            .navigate(
                &c.authorize_url(&proxy, &Pkce::new(), "s", &[("redirect_uri", requested)]),
                "none",
            )
            .await;
        assert_eq!(page.status, 400, "{requested}: {}", page.body);
        assert!(page.location().is_none(), "{requested}");
    }
    assert_eq!(proxy.count(Keyspace::Transactions).await, 0);
    for port in ["1", "5000", "65535"] {
        let ok = format!("http://127.0.0.1:{port}/callback");
        let page = Browser::new()
            .navigate(
                &c.authorize_url(&proxy, &Pkce::new(), "s", &[("redirect_uri", &ok)]),
                "none",
            )
            .await;
        assert_eq!(page.status, 200, "{ok}: {}", page.body);
    }
}

#[tokio::test]
async fn token_without_redirect_uri_after_authorize_with_one_is_refused() {
    let proxy = TestProxy::start().await;
    let c = Client::register(&proxy, "Tool", "https://tool.example/cb").await;
    let pkce = Pkce::new();
    // The authorization request names redirect_uri.
    let code = c.get_code(&proxy, &Browser::new(), "alice", &pkce).await;
    let t = c
        .redeem(&proxy, &code, &pkce, &[("redirect_uri", "")])
        .await;
    assert_eq!(
        (t.status, t.error()),
        (400, "invalid_request"),
        "{:?}",
        t.json
    );
    assert!(
        t.json["error_description"]
            .as_str()
            .unwrap()
            .contains("redirect_uri is required")
    );
    // Nothing changed: the code is still there, unredeemed, and no token exists.
    assert_eq!(proxy.count(Keyspace::Codes).await, 1);
    assert_eq!(proxy.count(Keyspace::UsedCodes).await, 0);
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    assert_eq!(proxy.count(Keyspace::RefreshFamilies).await, 0);
    // With it, the same code redeems.
    let t = c.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200, "{:?}", t.json);

    // An authorization that left redirect_uri out (one registered) may leave it out here too.
    let pkce = Pkce::new();
    let browser = Browser::new();
    let page = browser
        .navigate(
            &c.authorize_url(&proxy, &pkce, "s2", &[("redirect_uri", "")]),
            "none",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let gh = approve(&proxy, &browser, &page).await;
    let back = browser.through_github(&gh, "alice").await;
    let cb = browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 303, "{}", cb.body);
    let code = query_param(&cb.location().unwrap(), "code").unwrap();
    let t = c
        .redeem(&proxy, &code, &pkce, &[("redirect_uri", "")])
        .await;
    assert_eq!(t.status, 200, "{:?}", t.json);
}

const REDIRECT: &str = "https://app.example/callback";

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

#[tokio::test]
async fn flood_of_new_metadata_urls_from_one_slash_48_leaves_known_clients_served() {
    let proxy = TestProxy::start_with(Options {
        server_toml: "trusted_proxies = [\"127.0.0.1\"]".to_owned(),
        extra_toml: format!(
            "{DEV}fetches_per_minute = 6\nfetches_per_minute_per_ip = 2\nknown_fetches_per_minute = 2\n"
        ),
        ..Options::default()
    })
    .await;
    let known_server = DocServer::start().await;
    // `no-store`: every resolution needs a fetch, the worst case for a known client.
    known_server.serve_json(
        &known_server.document("Known Tool", &[REDIRECT]),
        &[("cache-control", "no-store")],
    );
    let known = Client {
        id: known_server.client_id(),
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    };
    known.tokens(&proxy, &Browser::new(), "alice").await;
    let flood = DocServer::start().await;
    let flood_hits = || flood.hits().len();

    // A fresh minute. One /48, a different /64 for every request, a new URL each time.
    proxy.clock.advance(61);
    for i in 0..20 {
        let from = format!("2001:db8:77:{i:x}::1");
        let id = format!("{}/random-{i}.json", flood.base);
        // Two fetches for the whole /48 (a 404: the client's problem, 400), then "retry" (503).
        let want = if i < 2 { 400 } else { 503 };
        assert_eq!(authorize_as(&proxy, &from, &id).await, want, "{from}");
    }
    assert_eq!(flood_hits(), 2, "the /48 is one source");
    // Everyone else's budget is intact: a client never seen, from elsewhere, is served.
    let fresh = DocServer::start().await;
    fresh.serve_json(&fresh.document("Fresh Tool", &[REDIRECT]), &[]);
    assert_eq!(
        authorize_as(&proxy, "198.51.100.200", &fresh.client_id()).await,
        200
    );

    // Many IPv4 sources then spend the general budget (6 a minute: 3 are left).
    for (n, ip) in ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
        .iter()
        .enumerate()
    {
        for j in 0..2 {
            let id = format!("{}/v4-{n}-{j}.json", flood.base);
            authorize_as(&proxy, ip, &id).await;
        }
    }
    assert_eq!(flood_hits(), 2 + 3, "stopped at the general budget");
    let newer = DocServer::start().await;
    newer.serve_json(&newer.document("Newer Tool", &[REDIRECT]), &[]);
    assert_eq!(
        authorize_as(&proxy, "198.51.100.201", &newer.client_id()).await,
        503,
        "a new client waits for the next minute"
    );
    assert!(newer.hits().is_empty());
    let cimd_records = proxy.count(Keyspace::CimdClients).await;

    // The known client is fetched afresh from the reserve, even from a source whose own share
    // the flood spent, and is shown its consent page.
    let before = known_server.hits().len();
    assert_eq!(authorize_as(&proxy, "198.51.100.1", &known.id).await, 200);
    assert_eq!(known_server.hits().len(), before + 1, "a real fetch");
    // The reserve gives a URL one fetch a minute; after that its last valid copy serves.
    assert_eq!(authorize_as(&proxy, "198.51.100.202", &known.id).await, 200);
    assert_eq!(known_server.hits().len(), before + 1, "the stored copy");
    // The flood stored nothing.
    assert_eq!(proxy.count(Keyspace::CimdClients).await, cimd_records);
    assert_eq!(cimd_records, 2, "the known and the fresh client only");
}

/// A server that answers one metadata document as chunks with no length: `chunks` of 1 KB,
/// then holds the connection open without ending the body.
async fn chunked_server(chunks: usize) -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if conn.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = format!("400\r\n{}\r\n", " ".repeat(1024));
                for _ in 0..chunks {
                    if conn.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // Never the final chunk: only a reader that stops at the cap answers early.
                tokio::time::sleep(Duration::from_secs(60)).await;
            });
        }
    });
    (port, task)
}

#[tokio::test]
async fn metadata_document_over_the_size_cap_is_refused_mid_stream() {
    let proxy = TestProxy::start_with(Options {
        extra_toml: format!("{DEV}fetch_timeout_secs = 20\n"),
        ..Options::default()
    })
    .await;
    let (port, server) = chunked_server(8).await;
    let id = format!("http://127.0.0.1:{port}{PATH}");
    let c = Client {
        id: id.clone(),
        secret: None,
        redirect_uri: REDIRECT.to_owned(),
    };
    let started = Instant::now();
    let page = Browser::new()
        .navigate(&c.authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    // Refused as the client's problem (400, not the 503 of a timeout), long before the fetch
    // timeout: the reader stopped at 5 KB of a body that never ended.
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("larger than 5 KB"), "{}", page.body);
    assert!(page.location().is_none());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let t = c.redeem(&proxy, "mcpac_x", &Pkce::new(), &[]).await;
    assert_eq!((t.status, t.error()), (401, "invalid_client"));
    server.abort();

    // A length announced over the cap is refused before the body is read.
    let big = DocServer::start().await;
    let mut doc = big.document("Big", &[REDIRECT]);
    doc["padding"] = json!(" ".repeat(6 * 1024));
    big.serve_json(&doc, &[]);
    let page = Browser::new()
        .navigate(
            &Client {
                id: big.client_id(),
                secret: None,
                redirect_uri: REDIRECT.to_owned(),
            }
            .authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("larger than 5 KB"));
    // Just under the cap is fine.
    doc["padding"] = json!(" ".repeat(4 * 1024));
    big.answer(Answer {
        status: 200,
        body: doc.to_string(),
        headers: vec![],
    });
    let page = Browser::new()
        .navigate(
            &Client {
                id: big.client_id(),
                secret: None,
                redirect_uri: REDIRECT.to_owned(),
            }
            .authorize_url(&proxy, &Pkce::new(), "s", &[]),
            "none",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 1);
}

/// A metadata-document fetch over plain http goes only to loopback, even with the development
/// setting: a name that also resolves to a public address is refused before any connection.
#[tokio::test]
async fn plain_http_metadata_fetch_goes_only_to_loopback() {
    let tarpit = Tarpit::start().await;
    let loopback: SocketAddr = format!("127.0.0.1:{}", tarpit.port).parse().unwrap();
    let public: SocketAddr = format!("93.184.215.14:{}", tarpit.port).parse().unwrap();
    let resolver = MapResolver::new(&[
        ("mixed.example", &[loopback, public]),
        ("local.example", &[loopback]),
    ]);
    let proxy = TestProxy::start_with(Options {
        extra_toml: format!("{DEV}fetch_timeout_secs = 1\n"),
        client_resolver: Some(resolver.clone()),
        ..Options::default()
    })
    .await;
    let open = |host: &str| {
        let c = Client {
            id: format!("http://{host}:{}/oauth/client.json", tarpit.port),
            secret: None,
            redirect_uri: REDIRECT.to_owned(),
        };
        c.authorize_url(&proxy, &Pkce::new(), "s", &[])
    };
    let page = Browser::new()
        .navigate(&open("mixed.example"), "none")
        .await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.location().is_none());
    assert_eq!(
        resolver.lookups.load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert_eq!(tarpit.connections(), 0, "refused before connecting");
    // Only loopback: plain http is allowed there (the development setting), and connected to.
    let page = Browser::new()
        .navigate(&open("local.example"), "none")
        .await;
    assert_eq!(page.status, 503, "the tarpit never answers: {}", page.body);
    assert_eq!(tarpit.connections(), 1);
    assert_eq!(proxy.count(Keyspace::CimdClients).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_proxy_is_never_used_for_metadata_fetches() {
    // The environment names a proxy that only counts connections; the fetch must go to the
    // document's own address anyway (`no_proxy()`), for http and https alike.
    let tarpit = Tarpit::start().await;
    let server = DocServer::start().await;
    server.serve_json(&server.document("Direct Tool", &[REDIRECT]), &[]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"[server]
public_url = "{base}"
listen = "127.0.0.1:{port}"
[github]
client_id = "gh-client-id"
client_secret = "gh-client-secret"
scopes = ["read:user"]
authorize_url = "http://127.0.0.1:9/login/oauth/authorize"
token_url = "http://127.0.0.1:9/login/oauth/access_token"
api_url = "http://127.0.0.1:9/api"
[admin]
listen = "127.0.0.1:0"
[store]
path = {store:?}
[backend]
url = "http://127.0.0.1:9/mcp"
auth = "github_token"
[cimd]
dangerously_allow_loopback_for_development = true
"#,
            store = dir.path().join("store").display().to_string(),
        ),
    )
    .unwrap();
    let proxy_url = format!("http://127.0.0.1:{}", tarpit.port);
    let mut proxy = Process::start_with(&config, |cmd| {
        cmd.env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .env_remove("REQUEST_METHOD");
        for var in [
            "HTTP_PROXY",
            "http_proxy",
            "HTTPS_PROXY",
            "https_proxy",
            "ALL_PROXY",
            "all_proxy",
        ] {
            cmd.env(var, &proxy_url);
        }
    });
    proxy
        .wait_ready(
            &http(),
            &format!("{base}/.well-known/oauth-authorization-server"),
        )
        .await;
    let resource = format!("{base}/mcp");
    let pkce = Pkce::new();
    let q = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("response_type", "code"),
            ("client_id", server.client_id().as_str()),
            ("redirect_uri", REDIRECT),
            ("code_challenge", pkce.challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("state", "s"),
            ("resource", resource.as_str()),
        ])
        .finish();
    let r = tokio::time::timeout(
        Duration::from_secs(15),
        http()
            .get(format!("{base}/authorize?{q}"))
            .header("sec-fetch-site", "none")
            .send(),
    )
    .await
    .expect("answered before the fetch timeout")
    .unwrap();
    let status = r.status().as_u16();
    let body = r.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", proxy.log_text());
    assert!(body.contains("Direct Tool"));
    assert_eq!(server.hits(), vec![PATH.to_owned()], "fetched directly");
    assert_eq!(
        tarpit.connections(),
        0,
        "the environment's proxy got nothing"
    );
}
