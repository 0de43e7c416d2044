//! Clients configured in `[[clients]]`: no registration, shown as verified, confidential ones
//! authenticate with a secret whose hash is in the config, and `remember_consent = false`
//! always shows the page.

use crate::support::{Browser, Client, Options, Pkce, TestProxy};
use mcp_oauth_proxy::crypto;
use mcp_oauth_proxy::store::Keyspace;

const SECRET: &str = "portal-secret-0123456789abcdef";

async fn proxy() -> TestProxy {
    TestProxy::start_with(Options {
        extra_toml: format!(
            r#"
[[clients]]
client_id = "platform-cli"
client_name = "Platform CLI"
redirect_uris = ["https://cli.platform.example/cb"]

[[clients]]
client_id = "portal"
client_name = "Internal Portal"
redirect_uris = ["https://portal.platform.example/cb"]
client_secret_sha256 = "{}"
token_endpoint_auth_method = "client_secret_post"
remember_consent = false
"#,
            crypto::hash_secret(SECRET)
        ),
        ..Options::default()
    })
    .await
}

fn cli() -> Client {
    Client {
        id: "platform-cli".to_owned(),
        secret: None,
        redirect_uri: "https://cli.platform.example/cb".to_owned(),
    }
}

fn portal(secret: &str) -> Client {
    Client {
        id: "portal".to_owned(),
        secret: Some(secret.to_owned()),
        redirect_uri: "https://portal.platform.example/cb".to_owned(),
    }
}

#[tokio::test]
async fn preregistered_public_client_is_shown_as_verified_and_completes_the_flow() {
    let proxy = proxy().await;
    let browser = Browser::new();
    let page = browser
        .navigate(&cli().authorize_url(&proxy, &Pkce::new(), "s", &[]), "none")
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Platform CLI"));
    assert!(!page.body.contains("Unverified"), "{}", page.body);
    assert!(!page.body.contains("registered moments ago"));
    let t = cli().tokens(&proxy, &browser, "alice").await;
    assert!(t.json["access_token"].as_str().is_some());
    assert_eq!(proxy.count(Keyspace::Clients).await, 0);
    // The account page vouches for the configured name too.
    let account = browser.navigate(&proxy.url("/account"), "none").await;
    assert_eq!(account.status, 200, "{}", account.body);
    assert!(account.body.contains("Platform CLI"), "{}", account.body);
    assert!(!account.body.contains("Unverified"), "{}", account.body);
}

#[tokio::test]
async fn stolen_code_without_the_configured_secret_is_refused() {
    let proxy = proxy().await;
    let browser = Browser::new();
    let pkce = Pkce::new();
    let code = portal(SECRET)
        .get_code(&proxy, &browser, "alice", &pkce)
        .await;
    let wrong = portal("not-the-secret")
        .redeem(&proxy, &code, &pkce, &[])
        .await;
    assert_eq!((wrong.status, wrong.error()), (401, "invalid_client"));
    assert_eq!(proxy.count(Keyspace::AccessTokens).await, 0);
    let right = portal(SECRET).redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(right.status, 200, "{:?}", right.json);
}

#[tokio::test]
async fn remember_consent_false_always_shows_the_page() {
    let proxy = proxy().await;
    let browser = Browser::new();
    portal(SECRET).tokens(&proxy, &browser, "alice").await;
    let again = browser
        .navigate(
            &portal(SECRET).authorize_url(&proxy, &Pkce::new(), "s2", &[]),
            "none",
        )
        .await;
    assert_eq!(again.status, 200, "the page, not a silent code");
    assert!(again.location().is_none());

    // The public client with remembered consent skips it under the same conditions.
    cli().tokens(&proxy, &browser, "alice").await;
    let skip = browser
        .navigate(
            &cli().authorize_url(&proxy, &Pkce::new(), "s3", &[]),
            "none",
        )
        .await;
    assert_eq!(skip.status, 303, "{}", skip.body);
}
