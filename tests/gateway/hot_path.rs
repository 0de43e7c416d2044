//! What one authenticated `tools/call` costs in store operations (issue 17): each read and
//! write on `/mcp` is there because the request's checks or a later request depend on it, and
//! each write that is security state is durable by itself (no `/mcp` request runs inside
//! `store::batched`, whose writes wait for one final flush).

use crate::support::mcp::Mcp;
use crate::support::ops::OpLog;
use crate::support::{Options, TestProxy};
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
/// None is cached: each is what a revocation on any replica changes, and the next request
/// must see it (see SECURITY.md). The last four depend on nothing but the token's record, so
/// they are read together (`store::call_records`): one statement on PostgreSQL after the
/// token's instead of four (issue 17).
const CALL_READS: [&str; 2] = [
    "get access_tokens",
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
    // 2026-07-28, stateless.
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.version = "2026-07-28";
    for _ in 0..2 {
        assert_eq!(ops_of_one_call(&mcp, &log).await, CALL_READS);
    }

    // 2025-11-25: the session binding is read too, and written once, durably by itself.
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
    let with_session: Vec<&str> = CALL_READS
        .iter()
        .copied()
        .chain(["get mcp_sessions"])
        .collect();
    for _ in 0..2 {
        assert_eq!(ops_of_one_call(&mcp, &log).await, with_session);
    }
}
