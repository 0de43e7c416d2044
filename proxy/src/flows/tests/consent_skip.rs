//! Every condition for skipping the consent page (`flows::authorize`, step 3): a session whose
//! sign-in is within `consent_skip_max_age_secs`, a navigation that is not cross-site, a
//! client that may remember consent, a usable GitHub grant, the person still admitted, and a
//! remembered consent (`bindings::consent_registry::lookup`) for this person, client,
//! registered redirect URI, scopes and client metadata. Each test changes one of them from a
//! skip and shows the page comes back.

use super::fixture::{Browser, Client, Fixture, Options, Pkce, query_param};
use crate::flows::authorize::AuthorizeOutcome;
use crate::ids::{ClientId, UserId};

fn alice() -> UserId {
    UserId::github(1001)
}

/// Whether `/authorize` skipped the page (a code for the client) or showed it.
fn skipped(out: AuthorizeOutcome) -> bool {
    match out {
        AuthorizeOutcome::Redirect(to) => {
            assert!(query_param(&to, "code").is_some(), "not a code: {to}");
            true
        }
        AuthorizeOutcome::Consent(..) => false,
    }
}

/// A direct navigation (`Sec-Fetch-Site: none`, as when an app opens the browser) to
/// `/authorize` for `client`, with `extra` parameters.
async fn again(f: &Fixture, b: &Browser, client: &Client, extra: &[(&str, &str)]) -> bool {
    skipped(
        f.authorize(b, client, &Pkce::new(), Some("none"), extra)
            .await,
    )
}

/// A browser in which `login` went through the consent page for `client`.
async fn consented(f: &Fixture, client: &Client, login: &str) -> Browser {
    let b = Browser::new();
    f.code_via_consent(&b, client, login, &Pkce::new(), &[])
        .await;
    b
}

#[tokio::test]
async fn remembered_consent_skips_the_page_for_the_same_person_client_redirect_and_scopes() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    assert!(again(&f, &b, &c, &[]).await);
    // A same-origin navigation, the whole configured set, or no scope at all: the same consent.
    assert!(skipped(
        f.authorize(&b, &c, &Pkce::new(), Some("same-origin"), &[])
            .await
    ));
    assert!(again(&f, &b, &c, &[("scope", "read:user repo")]).await);
    assert!(again(&f, &b, &c, &[("scope", "")]).await);
    // The code came from the remembered consent, and redeems.
    let pkce = Pkce::new();
    let out = f.authorize(&b, &c, &pkce, Some("none"), &[]).await;
    let AuthorizeOutcome::Redirect(to) = out else {
        panic!("no skip")
    };
    let code = query_param(&to, "code").unwrap();
    assert!(f.redeem(&c, &code, &pkce, &[]).await.is_ok());
    let issued: Vec<_> = f
        .audit()
        .await
        .into_iter()
        .filter(|e| e["event"] == "code_issued")
        .collect();
    assert_eq!(issued.first().unwrap()["consent_remembered"], false);
    assert_eq!(issued.last().unwrap()["consent_remembered"], true);
}

#[tokio::test]
async fn consent_for_one_client_does_not_skip_the_page_for_another() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let attacker = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    assert!(!again(&f, &b, &attacker, &[]).await);
    assert!(again(&f, &b, &c, &[]).await);
}

#[tokio::test]
async fn consent_for_one_redirect_uri_does_not_skip_the_page_for_another() {
    let f = Fixture::start().await;
    let c = f
        .register(
            "Repo Helper",
            &["https://app.example/cb", "https://elsewhere.example/cb"],
        )
        .await;
    let b = consented(&f, &c, "alice").await;
    assert!(
        !again(
            &f,
            &b,
            &c,
            &[("redirect_uri", "https://elsewhere.example/cb")]
        )
        .await
    );
    assert!(again(&f, &b, &c, &[]).await);
}

#[tokio::test]
async fn consent_of_one_person_does_not_skip_the_page_for_another() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let d = f
        .register("Other Tool", &["https://other.example/cb"])
        .await;
    let _alice = consented(&f, &c, "alice").await;
    // bob is freshly signed in (through his own consent for another client) in his browser.
    let bob = consented(&f, &d, "bob").await;
    assert!(again(&f, &bob, &d, &[]).await);
    assert!(!again(&f, &bob, &c, &[]).await);
}

/// Every consent is for the whole `[github] scopes`: an operator who adds a scope needs
/// everyone's consent again; the same configuration started again keeps it.
#[tokio::test]
async fn scope_added_to_the_configuration_shows_the_page_again() {
    let narrow = Options {
        github_scopes: Some(r#"["read:user"]"#),
        ..Options::default()
    };
    let f = Fixture::start_with(narrow.clone()).await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    assert!(again(&f.reconfigured(narrow), &b, &c, &[]).await);
    let wider = f.reconfigured(Options {
        github_scopes: Some(r#"["read:user", "repo"]"#),
        ..Options::default()
    });
    assert!(!again(&wider, &b, &c, &[]).await);
}

/// A consent covers the client's metadata as it was (fingerprint of redirect URIs, name and
/// authentication method): an operator's edit of a configured client needs it again.
#[tokio::test]
async fn changed_client_metadata_shows_the_page_again() {
    let client = |name: &str, uris: &str| Options {
        extra: format!(
            "[[clients]]\nclient_id = \"platform-cli\"\nclient_name = \"{name}\"\nredirect_uris = {uris}\n"
        ),
        ..Options::default()
    };
    let one = r#"["https://cli.example/cb"]"#;
    let two = r#"["https://cli.example/cb", "https://cli.example/cb2"]"#;
    let f = Fixture::start_with(client("Platform CLI", one)).await;
    let c = Fixture::configured("platform-cli", "https://cli.example/cb");
    let b = consented(&f, &c, "alice").await;
    assert!(again(&f, &b, &c, &[]).await);
    assert!(again(&f.reconfigured(client("Platform CLI", one)), &b, &c, &[]).await);
    assert!(!again(&f.reconfigured(client("Platform CLI v2", one)), &b, &c, &[]).await);
    assert!(!again(&f.reconfigured(client("Platform CLI", two)), &b, &c, &[]).await);
}

#[tokio::test]
async fn remember_consent_false_always_shows_the_page() {
    let f = Fixture::start_with(Options {
        extra: "[[clients]]\nclient_id = \"portal\"\nclient_name = \"Portal\"\nredirect_uris = [\"https://portal.example/cb\"]\nremember_consent = false\n".to_owned(),
        ..Options::default()
    })
    .await;
    let c = Fixture::configured("portal", "https://portal.example/cb");
    let b = consented(&f, &c, "alice").await;
    assert!(!again(&f, &b, &c, &[]).await);
}

#[tokio::test]
async fn revoked_consent_shows_the_page_again() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    assert!(again(&f, &b, &c, &[]).await);
    crate::flows::revoke::client_for(&f.app, &alice(), &ClientId::new(&c.id))
        .await
        .unwrap();
    assert!(!again(&f, &b, &c, &[]).await);
}

/// The sign-in must be at most `consent_skip_max_age_secs` old: at the limit the page is
/// skipped, one second later it is shown.
#[tokio::test]
async fn sign_in_older_than_consent_skip_max_age_shows_the_page_again() {
    let f = Fixture::start_with(Options {
        extra: "[session]\nconsent_skip_max_age_secs = 600\n".to_owned(),
        ..Options::default()
    })
    .await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    f.clock.advance(600);
    assert!(again(&f, &b, &c, &[]).await);
    f.clock.advance(1);
    assert!(!again(&f, &b, &c, &[]).await);
}

/// Only a direct or same-origin navigation skips: a link on another site, a same-site page,
/// or a browser that does not say (`Sec-Fetch-Site` missing) gets the page.
#[tokio::test]
async fn cross_site_or_unlabelled_navigation_shows_the_page() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    for site in [Some("cross-site"), Some("same-site"), None] {
        assert!(
            !skipped(f.authorize(&b, &c, &Pkce::new(), site, &[]).await),
            "{site:?}"
        );
    }
    assert!(again(&f, &b, &c, &[]).await);
}

#[tokio::test]
async fn no_session_shows_the_page() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let _b = consented(&f, &c, "alice").await;
    assert!(!again(&f, &Browser::new(), &c, &[]).await);
}

/// A GitHub grant that no longer works stops the skip: disconnected on the account page, or
/// revoked at GitHub (found at the next standing check, `recheck_secs` later).
#[tokio::test]
async fn unusable_github_grant_shows_the_page_again() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    crate::flows::revoke::github_grant_of(&f.app, &alice())
        .await
        .unwrap();
    assert!(!again(&f, &b, &c, &[]).await);

    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    f.github.revoke_tokens_of("alice");
    // Not asked again before `recheck_secs` (default 300).
    assert!(again(&f, &b, &c, &[]).await);
    f.clock.advance(300);
    assert!(!again(&f, &b, &c, &[]).await);
}

/// With `[access]`, the person's standing is asked of GitHub again when due before a skip:
/// removed from the org, the page is shown (and everything they held is revoked).
#[tokio::test]
async fn lost_admission_shows_the_page_again() {
    let f = Fixture::start_with(Options {
        github_scopes: Some(r#"["read:user", "read:org"]"#),
        extra: "[access]\ngithub_orgs = [\"acme\"]\nrecheck_secs = 60\n".to_owned(),
    })
    .await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let b = consented(&f, &c, "alice").await;
    f.clock.advance(60);
    assert!(again(&f, &b, &c, &[]).await, "asked again, still a member");
    assert!(f.github.remove_org_member("acme", "alice"));
    assert!(again(&f, &b, &c, &[]).await, "not due yet");
    f.clock.advance(60);
    assert!(!again(&f, &b, &c, &[]).await);
    assert_eq!(f.audited("access_lost").await, 1);
}
