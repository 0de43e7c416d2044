//! Streaming: SSE is relayed event by event as the backend emits it, and a client that goes
//! away cancels the backend request.

use std::time::Duration;

use crate::support::mcp::{Mcp, sse_messages};
use crate::support::{Options, TestProxy};
use serde_json::json;

#[tokio::test]
async fn sse_events_reach_the_client_one_by_one() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let started = tokio::time::Instant::now();
    let mut resp = mcp
        .post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "slow_count", "arguments": {"count": 5, "delay_ms": 300}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    assert!(resp.headers().get("content-encoding").is_none());
    let mut arrivals = Vec::new();
    let mut text = String::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        let s = String::from_utf8_lossy(&chunk).into_owned();
        for _ in 0..s.matches("\n\n").count() {
            arrivals.push(started.elapsed());
        }
        text.push_str(&s);
    }
    let msgs = sse_messages(&text);
    assert_eq!(
        msgs.len(),
        6,
        "5 progress notifications and the result: {text}"
    );
    assert_eq!(msgs[5]["result"]["content"][0]["text"], "counted to 5");
    // Each event arrived when it was emitted, not all at the end.
    let total = *arrivals.last().unwrap();
    assert!(total >= Duration::from_millis(1400), "{arrivals:?}");
    assert!(
        arrivals[0] < total - Duration::from_millis(900),
        "first event held back: {arrivals:?}"
    );
    for w in arrivals.windows(2).take(4) {
        assert!(
            w[1] - w[0] >= Duration::from_millis(150),
            "events bunched together: {arrivals:?}"
        );
    }
}

#[tokio::test]
async fn closing_the_client_stream_cancels_the_backend_request() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let mut resp = mcp
        .post(&json!({"jsonrpc": "2.0", "id": 10, "method": "tools/call", "params": {"name": "slow_count", "arguments": {"count": 50, "delay_ms": 200}}}))
        .send()
        .await
        .unwrap();
    let first = resp.chunk().await.unwrap().unwrap();
    assert!(!first.is_empty());
    drop(resp);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while proxy.backend().cancelled_streams() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backend never saw the cancellation"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(proxy.backend().completed_streams(), 0);
    // The audit trail says it was cancelled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let events = proxy.app.audit.all().await.unwrap();
        if events
            .iter()
            .any(|e| e.event["event"] == "upstream_action" && e.event["outcome"] == "cancelled")
        {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no cancelled upstream_action event"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn get_stream_resumes_with_last_event_id() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    let mut mcp = Mcp::for_user(&proxy, "alice").await;
    mcp.initialize(false).await;
    let session = mcp.session.clone().unwrap();
    let get = |last: Option<String>| {
        let mut r = crate::support::http()
            .get(&mcp.url)
            .bearer_auth(&mcp.token)
            .header("accept", "text/event-stream")
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", mcp.version);
        if let Some(l) = last {
            r = r.header("last-event-id", l);
        }
        r.send()
    };
    let mut stream = get(None).await.unwrap();
    assert_eq!(stream.status(), 200);
    assert!(proxy.backend().push_notification(
        &session,
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "one"}})
    ));
    let mut seen = String::new();
    while !seen.contains("one") {
        seen.push_str(&String::from_utf8_lossy(
            &tokio::time::timeout(Duration::from_secs(5), stream.chunk())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        ));
    }
    let first_id = seen
        .lines()
        .find_map(|l| l.strip_prefix("id:"))
        .map(|s| s.trim().to_owned())
        .unwrap();
    drop(stream);
    assert!(proxy.backend().push_notification(
        &session,
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "two"}})
    ));
    let mut resumed = get(Some(first_id)).await.unwrap();
    let mut seen = String::new();
    while !seen.contains("two") {
        seen.push_str(&String::from_utf8_lossy(
            &tokio::time::timeout(Duration::from_secs(5), resumed.chunk())
                .await
                .unwrap()
                .unwrap()
                .unwrap(),
        ));
    }
    assert!(
        !seen.contains("\"one\""),
        "already-seen events must not be replayed: {seen}"
    );
}
