//! Upstream-action events (a `tools/call` and its outcome) are group-committed in the
//! background (issue 17): the call does not wait for them, and they still reach the trail —
//! by themselves within the window, at once when a reader or the shutdown drains them. Runs
//! on sled and, in the suite's PostgreSQL run, on PostgreSQL.

use std::time::Duration;

use mcp_oauth_proxy::store::audit_log;
use serde_json::json;
use tokio::time::{Instant, sleep};

use crate::support::mcp::Mcp;
use crate::support::{Options, TestProxy};

/// The `whoami` upstream actions in the stored trail, read from the store itself (not through
/// `Audit`, whose readers drain the group commit first).
async fn stored_calls(proxy: &TestProxy) -> usize {
    audit_log::all(proxy.app.store.as_ref())
        .await
        .unwrap()
        .iter()
        .filter(|r| r.kind == "upstream_action" && r.event["tool"] == "whoami")
        .count()
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test]
async fn a_tools_call_event_reaches_the_trail_by_itself_within_the_window() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let (status, _) = mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200);
    // Nobody drains: the background commit does it within its window (10 ms); the bound is
    // generous because the machine is shared. (The commit is counted just after the write
    // returns, so wait for both.)
    let committed = || {
        let text = proxy.app.metrics.render().unwrap();
        metric(&text, "mcp_proxy_upstream_action_events_committed_total")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored_calls(&proxy).await < 1 || committed() < 1 {
        assert!(
            Instant::now() < deadline,
            "the call's event never reached the trail"
        );
        sleep(Duration::from_millis(20)).await;
    }
    let text = proxy.app.metrics.render().unwrap();
    assert!(
        metric(
            &text,
            "mcp_proxy_upstream_action_group_commits_total{result=\"ok\"}"
        ) >= 1
    );
    assert_eq!(
        metric(&text, "mcp_proxy_upstream_action_events_lost_total"),
        0
    );
}

#[tokio::test]
async fn the_trail_readers_see_their_own_just_finished_calls_before_the_window_ends() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        // The longest window accepted: the calls are still pending when the trail is read.
        extra_toml:
            "[audit]\nupstream_action_commit_ms = 1000\nupstream_action_commit_events = 10000\n"
                .to_owned(),
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    for _ in 0..3 {
        let (status, _) = mcp.call_tool("whoami", json!({})).await;
        assert_eq!(status, 200);
    }
    // What the admin API's tail, verify and export use: they drain first.
    let recent = proxy.app.audit.recent(50).await.unwrap();
    let calls = recent
        .iter()
        .filter(|r| r.kind == "upstream_action" && r.event["tool"] == "whoami")
        .count();
    assert_eq!(
        calls, 3,
        "every finished call is in the trail the reader sees"
    );
    assert_eq!(stored_calls(&proxy).await, 3, "and durable in the store");
    let text = proxy.app.metrics.render().unwrap();
    assert_eq!(
        metric(&text, "mcp_proxy_upstream_action_events_pending"),
        0,
        "nothing pending after a drain"
    );
}
