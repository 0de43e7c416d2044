//! Reading the audit trail in tests.

use crate::support::{Browser, Client, Pkce, TestProxy, query_param};
use mcp_oauth_proxy::audit::AuditRecord;

/// Every stored record, oldest first.
pub async fn records(proxy: &TestProxy) -> Vec<AuditRecord> {
    proxy.app.audit.all().await.unwrap()
}

/// The kinds of the alerts raised so far, in order.
pub async fn alerts(proxy: &TestProxy) -> Vec<String> {
    records(proxy)
        .await
        .into_iter()
        .filter(|r| r.kind == "alert_raised")
        .map(|r| r.event["alert"].as_str().unwrap().to_owned())
        .collect()
}

/// Waits (real time, up to 10 s) until `f` holds.
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// A second authorization in a browser that is signed in and consented before: no consent
/// page, the code comes straight back. Returns the token response.
pub async fn remembered_tokens(
    proxy: &TestProxy,
    browser: &Browser,
    client: &Client,
) -> crate::support::client::JsonResp {
    let pkce = Pkce::new();
    let r = browser
        .navigate(&client.authorize_url(proxy, &pkce, "again", &[]), "none")
        .await;
    assert_eq!(r.status, 303, "remembered consent redirects straight back");
    let code = query_param(&r.location().unwrap(), "code").unwrap();
    let t = client.redeem(proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200);
    t
}
