//! What one authenticated `tools/call` costs in store operations (issue 17): each read and
//! write on `/mcp` is there because the request's checks or a later request depend on it, and
//! each write that is security state is durable by itself (no `/mcp` request runs inside
//! `store::batched`, whose writes wait for one final flush).

use crate::support::mcp::Mcp;
use crate::support::ops::OpLog;
use crate::support::{Options, TestProxy};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::json;

/// The store operations of one request, without the audit module's own (its upstream-action
/// event is group committed by the audit module, on its own schedule).
fn without_audit(ops: Vec<String>) -> Vec<String> {
    ops.into_iter()
        .filter(|op| !op.contains(" audit") && op != "flush" && op != "sweep_expired")
        .collect()
}

async fn ops_of_one_call(mcp: &Mcp, log: &OpLog) -> Vec<String> {
    log.clear();
    let (status, msg) = mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    without_audit(log.take())
}

/// The checks of a `tools/call` in GitHub-token mode, in order: the token, then its family
/// (revocation), the person's standing (`[access]`), their grant and this agent's allowance.
/// The last four depend on nothing but the token's record, so they are read together
/// (`store::call_records`): one statement on PostgreSQL after the token's (issue 17). Both
/// reads go through the replica's record cache (`store::cache`), which is exact: only a cold
/// cache, or a write to one of these records since, reads the store.
const CALL_READS: [&str; 2] = [
    "get_many access_tokens",
    "get_many refresh_families standing grants allowances",
];

#[tokio::test]
async fn a_plain_tools_call_reads_only_its_checks_and_writes_nothing_but_its_audit_event() {
    let log = OpLog::default();
    let proxy = TestProxy::start_with(Options {
        backend: true,
        op_log: Some(log.clone()),
        ..Options::default()
    })
    .await;
    // 2026-07-28, stateless: the first call reads its checks, the next ones nothing.
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28";
    assert_eq!(ops_of_one_call(&mcp, &log).await, CALL_READS);
    for _ in 0..2 {
        assert_eq!(ops_of_one_call(&mcp, &log).await, Vec::<String>::new());
    }
    // A write to one of the records (here the person's standing, as a recheck writes it)
    // sends the next call back to the store for it.
    let user = proxy
        .app
        .store
        .scan_prefix(Keyspace::Standing, "")
        .await
        .unwrap();
    let (key, value) = user.first().expect("alice's standing");
    proxy
        .app
        .store
        .put(
            Keyspace::Standing,
            key,
            value.value.clone(),
            value.expires_at,
        )
        .await
        .unwrap();
    assert_eq!(ops_of_one_call(&mcp, &log).await, CALL_READS[1..]);
    assert_eq!(ops_of_one_call(&mcp, &log).await, Vec::<String>::new());

    // 2025-11-25: the session binding is read too (not cached), and written once, durably
    // by itself.
    let mut mcp = Mcp::for_user(&proxy, "bob").await;
    log.clear();
    mcp.initialize(false).await;
    let init = without_audit(log.take());
    assert!(
        init.iter().any(|op| op == "insert_new mcp_sessions"),
        "{init:?}"
    );
    assert!(
        !init.iter().any(|op| op.ends_with("(batched)")),
        "a /mcp write waited for a batch flush: {init:?}"
    );
    for _ in 0..2 {
        assert_eq!(ops_of_one_call(&mcp, &log).await, ["get mcp_sessions"]);
    }
}
