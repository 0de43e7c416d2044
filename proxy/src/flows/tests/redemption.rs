//! The order of checks in code redemption (`flows::token`, `grant_type=authorization_code`):
//! client authentication, then the code's record (absent: a replay of a redeemed code revokes
//! what it produced), then client, redirect URI, resource and PKCE verifier, then the consent
//! behind it. Every refusal before the atomic take leaves the code where it was, so a thief's
//! or a broken client's attempt cannot spend the real client's code; only a successful
//! redemption consumes it.

use super::fixture::{Browser, Client, Fixture, Pkce, error_code, family_of, oauth_error};
use crate::flows::access::{self, TokenRejection};
use crate::ids::{ClientId, UserId};
use crate::oauth::error::ErrorCode;
use crate::store::Keyspace;

/// alice in the fake GitHub.
fn alice() -> UserId {
    UserId::github(1001)
}

/// A registered client, a code for it from alice and the code's PKCE pair.
async fn code(f: &Fixture) -> (Client, String, Pkce) {
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let pkce = Pkce::new();
    let code = f
        .code_via_consent(&Browser::new(), &c, "alice", &pkce, &[])
        .await;
    (c, code, pkce)
}

/// Nothing was consumed or minted: the code is stored, no tombstone, no family, no token.
async fn untouched(f: &Fixture, code: &str) {
    assert!(f.code_stored(code).await, "the code must stay redeemable");
    assert_eq!(f.count(Keyspace::UsedCodes).await, 0);
    assert_eq!(f.count(Keyspace::RefreshFamilies).await, 0);
    assert_eq!(f.count(Keyspace::AccessTokens).await, 0);
}

#[tokio::test]
async fn code_presented_by_another_client_is_refused_and_stays_redeemable_by_its_client() {
    let f = Fixture::start().await;
    let (c, code, pkce) = code(&f).await;
    // The thief registered the same redirect URI and holds the verifier too.
    let thief = f.register("Thief", &["https://app.example/cb"]).await;
    assert_eq!(
        error_code(f.redeem(&thief, &code, &pkce, &[]).await),
        ErrorCode::InvalidGrant
    );
    untouched(&f, &code).await;
    assert!(f.redeem(&c, &code, &pkce, &[]).await.is_ok());
    assert!(!f.code_stored(&code).await);
}

/// Each check refuses with its own error, in a fixed order, and none of them consumes the
/// code: presenting several faults at once shows which check runs first.
#[tokio::test]
async fn redemption_checks_client_then_redirect_then_resource_then_verifier_and_refusals_consume_nothing()
 {
    let f = Fixture::start().await;
    let (c, code, pkce) = code(&f).await;
    let thief = f.register("Thief", &["https://app.example/cb"]).await;
    let wrong = Pkce::new();
    let other_redirect = ("redirect_uri", "https://app.example/other");
    let other_resource = ("resource", "https://other.example/mcp");
    let other_verifier = ("code_verifier", wrong.verifier.as_str());

    // Another client, with every other fault too: the generic invalid_grant of the client check.
    let e = oauth_error(
        f.redeem(
            &thief,
            &code,
            &pkce,
            &[other_redirect, other_resource, other_verifier],
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::InvalidGrant);
    assert!(e.description.contains("issued to another client"), "{e}");
    untouched(&f, &code).await;

    // The client itself, with a wrong redirect URI, resource and verifier: the redirect URI.
    let e = oauth_error(
        f.redeem(
            &c,
            &code,
            &pkce,
            &[other_redirect, other_resource, other_verifier],
        )
        .await,
    );
    assert_eq!(e.code, ErrorCode::InvalidGrant);
    assert!(e.description.contains("redirect_uri"), "{e}");
    untouched(&f, &code).await;

    // Without the redirect URI that /authorize named: invalid_request, before the resource.
    let e = oauth_error(
        f.redeem(&c, &code, &pkce, &[("redirect_uri", ""), other_resource])
            .await,
    );
    assert_eq!(e.code, ErrorCode::InvalidRequest);
    assert!(e.description.contains("redirect_uri is required"), "{e}");
    untouched(&f, &code).await;

    // Another resource with a wrong verifier: the audience, before PKCE.
    assert_eq!(
        error_code(
            f.redeem(&c, &code, &pkce, &[other_resource, other_verifier])
                .await
        ),
        ErrorCode::InvalidTarget
    );
    untouched(&f, &code).await;

    // Only the verifier is wrong, missing, or the challenge itself (a `plain` downgrade).
    for verifier in [wrong.verifier.as_str(), "", pkce.challenge.as_str()] {
        let e = oauth_error(
            f.redeem(&c, &code, &pkce, &[("code_verifier", verifier)])
                .await,
        );
        assert_eq!(e.code, ErrorCode::InvalidGrant, "verifier {verifier:?}");
        assert!(e.description.contains("code_verifier"), "{e}");
        untouched(&f, &code).await;
    }

    // All right: redeemed once, and consumed.
    let t = f.redeem(&c, &code, &pkce, &[]).await.unwrap();
    assert!(t.refresh_token.is_some());
    assert!(!f.code_stored(&code).await);
    assert_eq!(f.count(Keyspace::UsedCodes).await, 1);
    assert_eq!(f.count(Keyspace::RefreshFamilies).await, 1);
}

/// A client whose authentication fails is refused before its code is even looked at.
#[tokio::test]
async fn client_failing_authentication_is_refused_and_its_code_stays_redeemable() {
    let f = Fixture::start().await;
    let c = f
        .register_confidential("Portal", "https://portal.example/cb")
        .await;
    let pkce = Pkce::new();
    let code = f
        .code_via_consent(&Browser::new(), &c, "alice", &pkce, &[])
        .await;
    let wrong_secret = Client {
        secret: Some("mcpc_secret_not-the-right-one".to_owned()),
        ..c.clone()
    };
    assert_eq!(
        error_code(f.redeem(&wrong_secret, &code, &pkce, &[]).await),
        ErrorCode::InvalidClient
    );
    let no_secret = Client {
        secret: None,
        ..c.clone()
    };
    assert_eq!(
        error_code(f.redeem(&no_secret, &code, &pkce, &[]).await),
        ErrorCode::InvalidClient
    );
    untouched(&f, &code).await;
    assert!(f.redeem(&c, &code, &pkce, &[]).await.is_ok());
}

/// `redirect_uri` at /token is required exactly when /authorize carried one (RFC 6749
/// §4.1.3); a code from an authorization that left it out redeems without it.
#[tokio::test]
async fn redirect_uri_is_required_at_token_only_when_the_authorization_named_it() {
    let f = Fixture::start().await;
    let c = f.register("Repo Helper", &["https://app.example/cb"]).await;
    let pkce = Pkce::new();
    let code = f
        .code_via_consent(&Browser::new(), &c, "alice", &pkce, &[("redirect_uri", "")])
        .await;
    assert!(
        f.redeem(&c, &code, &pkce, &[("redirect_uri", "")])
            .await
            .is_ok()
    );
}

/// A code lives `code_ttl_secs`: stored one second before, gone at the limit, and an expired
/// code's presentation revokes nothing (no redemption ever completed).
#[tokio::test]
async fn expired_code_is_refused_and_leaves_nothing_behind() {
    let f = Fixture::start().await;
    let (c, code, pkce) = code(&f).await;
    f.clock.advance(59);
    assert!(f.code_stored(&code).await);
    f.clock.advance(1);
    assert!(!f.code_stored(&code).await);
    assert_eq!(
        error_code(f.redeem(&c, &code, &pkce, &[]).await),
        ErrorCode::InvalidGrant
    );
    assert_eq!(f.count(Keyspace::UsedCodes).await, 0);
    assert_eq!(f.count(Keyspace::RefreshFamilies).await, 0);
    assert_eq!(f.audited("code_reuse").await, 0);
}

/// A code presented again after its redemption completed leaked: whoever presents it (the
/// record is gone, so the client check has nothing to compare), the family it produced is
/// revoked, once, with its refresh and access tokens.
#[tokio::test]
async fn replayed_code_revokes_the_family_it_produced_whoever_presents_it() {
    let f = Fixture::start().await;
    let (c, code, pkce) = code(&f).await;
    let thief = f.register("Thief", &["https://app.example/cb"]).await;
    let t = f.redeem(&c, &code, &pkce, &[]).await.unwrap();
    let refresh = t.refresh_token.clone().unwrap();
    assert_eq!(
        error_code(f.redeem(&thief, &code, &pkce, &[]).await),
        ErrorCode::InvalidGrant
    );
    assert!(f.family(&family_of(&refresh)).await.unwrap().revoked);
    assert_eq!(
        access::authenticate(&f.app, &t.access_token)
            .await
            .unwrap()
            .err(),
        Some(TokenRejection::Revoked)
    );
    assert_eq!(
        error_code(f.refresh(&c, &refresh).await),
        ErrorCode::InvalidGrant
    );
    // Again by the client itself: still refused, nothing left to revoke, audited once.
    assert_eq!(
        error_code(f.redeem(&c, &code, &pkce, &[]).await),
        ErrorCode::InvalidGrant
    );
    assert_eq!(f.audited("code_reuse").await, 1);
}

/// A code whose consent was revoked after it was issued is refused, mints nothing, and raises
/// the confused-deputy alert. It is the last check before the take, so the code is not
/// consumed (and stays useless while no consent exists).
#[tokio::test]
async fn code_whose_consent_was_revoked_is_refused_mints_nothing_and_raises_the_alert() {
    let f = Fixture::start().await;
    let (c, code, pkce) = code(&f).await;
    let revoked = crate::flows::revoke::client_for(&f.app, &alice(), &ClientId::new(&c.id))
        .await
        .unwrap();
    assert_eq!(revoked.consents, 1);
    assert_eq!(
        error_code(f.redeem(&c, &code, &pkce, &[]).await),
        ErrorCode::InvalidGrant
    );
    untouched(&f, &code).await;
    let alerts: Vec<_> = f
        .audit()
        .await
        .into_iter()
        .filter(|e| e["event"] == "alert_raised" && e["alert"] == "code_without_consent")
        .collect();
    assert_eq!(alerts.len(), 1);
}
