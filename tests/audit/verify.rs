//! `audit verify` over the stored trail: clean after normal flows, and it names a planted
//! inconsistency.

use crate::support::{Browser, Client, TestProxy};
use mcp_oauth_proxy::audit::AuditRecord;
use mcp_oauth_proxy::audit::verify::verify;
use mcp_oauth_proxy::clock::Clock;
use mcp_oauth_proxy::store::{Keyspace, StoreExt};

async fn normal_flows(proxy: &TestProxy) {
    let a = Client::register(proxy, "First", "http://127.0.0.1:9/cb").await;
    let browser = Browser::new();
    let t = a.tokens(proxy, &browser, "alice").await;
    let r = a
        .refresh(proxy, t.json["refresh_token"].as_str().unwrap(), &[])
        .await;
    assert_eq!(r.status, 200);
    // Again in the same browser: the remembered consent issues the code.
    super::support::remembered_tokens(proxy, &browser, &a).await;
    let b = Client::register(proxy, "Second", "https://verify-b.example/cb").await;
    let t = b.tokens(proxy, &Browser::new(), "bob").await;
    b.revoke(proxy, t.json["refresh_token"].as_str().unwrap())
        .await;
}

#[tokio::test]
async fn verify_is_clean_after_normal_flows() {
    let proxy = TestProxy::start().await;
    normal_flows(&proxy).await;
    let report = verify(&proxy.app.audit.all().await.unwrap());
    assert!(report.is_clean(), "{:#?}", report.problems);
    assert_eq!(report.checked_codes, 3);
    assert_eq!(report.checked_tokens, 4);
}

#[tokio::test]
async fn verify_reports_a_planted_code_without_consent_and_an_orphan_refresh() {
    let proxy = TestProxy::start().await;
    normal_flows(&proxy).await;
    let now = proxy.clock.now();
    for (n, event) in [
        serde_json::json!({"event": "code_issued", "user_id": "github:1002", "client_id": "mcpc_planted", "consent_remembered": true, "code_id": "plantedcode", "family_id": "plantedfam", "redirect_uri": "https://evil.example/cb"}),
        serde_json::json!({"event": "token_refreshed", "user_id": "github:1001", "client_id": "mcpc_x", "family_id": "neverissued", "grace": false}),
    ]
    .into_iter()
    .enumerate()
    {
        let rec = AuditRecord {
            id: format!("planted{n}"),
            at: now,
            request_id: None,
            kind: event["event"].as_str().unwrap().to_owned(),
            event,
        };
        proxy
            .app
            .store
            .put_json(Keyspace::Audit, &format!("{:020}-zz{n}", now.0 + 1), &rec, None)
            .await
            .unwrap();
    }
    let report = verify(&proxy.app.audit.all().await.unwrap());
    assert_eq!(report.problems.len(), 2, "{:#?}", report.problems);
    assert!(report.problems[0].contains("code plantedcode"));
    assert!(report.problems[0].contains("github:1002"));
    assert!(report.problems[0].contains("without a consent"));
    assert!(report.problems[1].contains("family neverissued"));
}
