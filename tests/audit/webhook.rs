//! The webhook sink: signed deliveries a receiver can verify, retries against a receiver
//! that is down while the proxy keeps answering fast, and counted drops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::support::eventually;
use crate::support::{Browser, Client, Options, TestProxy};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use hmac::{KeyInit, Mac};

const SECRET: &str = "webhook-test-secret-0123456789";

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(HeaderMap, Bytes)>>>);

impl Received {
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn all(&self) -> Vec<(HeaderMap, Bytes)> {
        self.0.lock().unwrap().clone()
    }
}

/// A receiver on 127.0.0.1:0 that records each request and answers `status` after `delay`.
async fn receiver(status: StatusCode, delay: Duration) -> (String, Received) {
    let got = Received::default();
    let seen = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let seen = seen.clone();
            async move {
                seen.0.lock().unwrap().push((headers, body));
                tokio::time::sleep(delay).await;
                status
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got)
}

/// A receiver that answers 503 (recording nothing) until the returned switch is set, then
/// records each request and answers 200.
async fn switchable_receiver() -> (String, Received, Arc<AtomicBool>) {
    let got = Received::default();
    let up = Arc::new(AtomicBool::new(false));
    let (seen, is_up) = (got.clone(), up.clone());
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: Bytes| {
            let (seen, is_up) = (seen.clone(), is_up.clone());
            async move {
                if !is_up.load(Ordering::SeqCst) {
                    return StatusCode::SERVICE_UNAVAILABLE;
                }
                seen.0.lock().unwrap().push((headers, body));
                StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, got, up)
}

fn webhook_toml(url: &str, extra: &str) -> Options {
    Options {
        extra_toml: format!("[webhook]\nurl = \"{url}\"\nsecret = \"{SECRET}\"\n{extra}\n"),
        ..Options::default()
    }
}

/// What a receiver does with the documented headers (docs/WEBHOOKS.md), independently of the
/// proxy's own code: HMAC-SHA256 over "<timestamp>.<body>" with the shared secret.
fn verify(headers: &HeaderMap, body: &[u8], secret: &str) -> bool {
    let ts = headers["x-mcp-proxy-timestamp"].to_str().unwrap();
    let sig = headers["x-mcp-proxy-signature"].to_str().unwrap();
    let Some(hex) = sig.strip_prefix("v1=") else {
        return false;
    };
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    want == hex
}

fn stats(proxy: &TestProxy) -> mcp_oauth_proxy::audit::webhook::WebhookCounts {
    proxy.app.audit.webhook_stats().unwrap()
}

#[tokio::test]
async fn deliveries_are_signed_and_verify_at_the_receiver() {
    let (url, got) = receiver(StatusCode::OK, Duration::ZERO).await;
    let proxy = TestProxy::start_with(webhook_toml(
        &url,
        "events = [\"client_registered\", \"token_issued\"]",
    ))
    .await;
    let c = Client::register(&proxy, "Hooked", "http://127.0.0.1:9/cb").await;
    c.tokens(&proxy, &Browser::new(), "alice").await;
    eventually("two deliveries", || got.len() >= 2).await;
    let trail = proxy.app.audit.all().await.unwrap();
    let mut kinds = Vec::new();
    for (headers, body) in got.all() {
        assert!(verify(&headers, &body, SECRET), "signature verifies");
        assert!(!verify(&headers, &body, "another-secret-0123456789"));
        let mut tampered = body.to_vec();
        tampered.push(b' ');
        assert!(!verify(&headers, &tampered, SECRET));
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let id = json["id"].as_str().unwrap();
        assert_eq!(headers["x-mcp-proxy-event-id"], id);
        assert_eq!(headers["content-type"], "application/json");
        // The same event as the stored trail, with its time and request id.
        let stored = trail.iter().find(|r| r.id == id).unwrap();
        assert_eq!(json["event"], stored.event);
        assert_eq!(json["at"], stored.at.0);
        assert_eq!(json["request_id"].as_str(), stored.request_id.as_deref());
        kinds.push(json["event"]["event"].as_str().unwrap().to_owned());
    }
    kinds.sort();
    assert_eq!(
        kinds,
        ["client_registered", "token_issued"],
        "only chosen kinds"
    );
    eventually("both counted as delivered", || stats(&proxy).delivered == 2).await;
    assert_eq!(stats(&proxy).dropped, 0);
}

/// The receiver is down (nothing listens): each event is tried `max_attempts` times with
/// backoff, then dropped and counted; meanwhile discovery and /token answer as usual.
#[tokio::test]
async fn down_receiver_gets_retries_and_the_proxy_keeps_answering_fast() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", dead.local_addr().unwrap());
    drop(dead);
    let proxy = TestProxy::start_with(webhook_toml(
        &url,
        "max_attempts = 3\nbackoff_ms = 20\nmax_backoff_ms = 100",
    ))
    .await;
    Client::register(&proxy, "Down", "http://127.0.0.1:9/cb").await;
    eventually("three attempts, then a drop", || {
        let s = stats(&proxy);
        s.failed_attempts >= 3 && s.dropped >= 1
    })
    .await;
    let s = stats(&proxy);
    assert_eq!(s.delivered, 0);
    assert_eq!(
        s.failed_attempts,
        3 * s.dropped,
        "every dropped event was tried 3 times"
    );
}

/// The receiver hangs: every delivery slot is stuck for the 4 s timeout per attempt, yet no
/// request waits for a delivery (one that did would take at least that timeout; the bound
/// leaves a loaded machine room); what does not fit in the tiny queue is dropped and counted.
#[tokio::test]
async fn slow_receiver_never_blocks_requests_and_overflow_is_counted() {
    let (url, got) = receiver(StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(8)).await;
    let proxy = TestProxy::start_with(webhook_toml(
        &url,
        "queue_size = 1\nmax_attempts = 2\nbackoff_ms = 10\ntimeout_secs = 4",
    ))
    .await;
    let http = crate::support::http();
    let mut slowest = Duration::ZERO;
    for i in 0..10 {
        // Wall-clock latency is what is under test here, not the proxy's clock.
        #[allow(clippy::disallowed_methods)]
        let t = Instant::now();
        let c = Client::register(&proxy, &format!("Slow {i}"), "http://127.0.0.1:9/cb").await;
        let r = c
            .token(
                &proxy,
                &[("grant_type", "authorization_code"), ("code", "mcpac_nope")],
            )
            .await;
        assert_eq!(r.status, 400);
        let d = http
            .get(proxy.url("/.well-known/oauth-authorization-server"))
            .send()
            .await
            .unwrap();
        assert_eq!(d.status(), 200);
        slowest = slowest.max(t.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(3500),
        "requests waited for the webhook: {slowest:?}"
    );
    // Four events are being delivered (the slots), one waits in the queue: every other
    // event is dropped and counted.
    let events = proxy.app.audit.all().await.unwrap().len() as u64;
    assert!(events > 5, "{events}");
    eventually("drops counted", || stats(&proxy).dropped >= events - 5).await;
    // A retry carries the same event id.
    let retried = || {
        let ids: Vec<_> = got
            .all()
            .iter()
            .map(|(h, _)| h["x-mcp-proxy-event-id"].clone())
            .collect();
        ids.iter()
            .any(|id| ids.iter().filter(|other| *other == id).count() >= 2)
    };
    eventually("an event was retried under its id", retried).await;
}

/// Anonymous requests produce ordinary events at line rate (here `consent_shown` for each
/// `/authorize` of a registered client; refusals such as a tokenless `/mcp` are only counted)
/// while the receiver is down, filling the queue: an alert raised afterwards has a queue and
/// delivery slots of its own, so it is not dropped and arrives once the receiver is back.
/// The ordinary events that did not fit are dropped and counted.
#[tokio::test]
async fn event_flood_while_the_receiver_is_down_does_not_crowd_out_a_later_alert() {
    let (url, got, up) = switchable_receiver().await;
    let mut options = webhook_toml(
        &url,
        "queue_size = 4\nmax_attempts = 100\nbackoff_ms = 20\nmax_backoff_ms = 100",
    );
    options
        .extra_toml
        .push_str("[tokens]\nrefresh_reuse = \"strict\"\nrefresh_grace_secs = 30\n");
    let proxy = TestProxy::start_with(options).await;
    let c = Client::register(&proxy, "Flooded", "http://127.0.0.1:9/cb").await;
    let t0 = c.tokens(&proxy, &Browser::new(), "alice").await;
    let old = t0.json["refresh_token"].as_str().unwrap();
    assert_eq!(c.refresh(&proxy, old, &[]).await.status, 200);

    let http = crate::support::http();
    for _ in 0..40 {
        let url = c.authorize_url(&proxy, &crate::support::client::Pkce::new(), "s", &[]);
        let r = http.get(url).send().await.unwrap();
        assert_eq!(r.status(), 200);
    }
    eventually("the flood overflowed the queue", || {
        stats(&proxy).dropped >= 20
    })
    .await;

    // Refresh token reuse: an alert, raised while the queue is full and the receiver down.
    proxy.clock.advance(31);
    assert_eq!(c.refresh(&proxy, old, &[]).await.error(), "invalid_grant");
    let trail = proxy.app.audit.all().await.unwrap();
    let alert = trail
        .iter()
        .find(|r| r.kind == "alert_raised")
        .expect("the alert is in the trail");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(got.all().is_empty(), "nothing delivered while down");

    up.store(true, Ordering::SeqCst);
    eventually("the alert is delivered", || {
        got.all()
            .iter()
            .any(|(h, _)| h["x-mcp-proxy-event-id"] == alert.id.as_str())
    })
    .await;
    let (headers, body) = got
        .all()
        .into_iter()
        .find(|(h, _)| h["x-mcp-proxy-event-id"] == alert.id.as_str())
        .unwrap();
    assert!(verify(&headers, &body, SECRET));
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["event"]["alert"], "refresh_token_reuse");
    let s = stats(&proxy);
    assert_eq!(s.alerts_dropped, 0, "{s:?}");
    assert!(s.dropped >= 20, "ordinary overflow still counted: {s:?}");
}

/// An unreachable receiver: the logged attempt error names no URL (webhook URLs often carry a
/// secret).
#[tokio::test]
async fn delivery_errors_do_not_log_the_webhook_url() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/hook/secret-path-token-123",
        dead.local_addr().unwrap()
    );
    drop(dead);
    crate::support::logs::init();
    let proxy = TestProxy::start_with(webhook_toml(&url, "max_attempts = 1")).await;
    Client::register(&proxy, "Logged", "http://127.0.0.1:9/cb").await;
    eventually("one failed attempt", || stats(&proxy).failed_attempts >= 1).await;
    let text = crate::support::logs::all();
    assert!(text.contains("webhook attempt failed"), "{text}");
    assert!(
        text.contains("error sending request"),
        "the cause is logged: {text}"
    );
    assert!(!text.contains("secret-path-token-123"), "{text}");
}

/// Deliveries use a proxy only when `[webhook] proxy` names one (the environment's
/// HTTP(S)_PROXY is ignored): with one configured, the event reaches the receiver through it.
#[tokio::test]
async fn a_configured_proxy_carries_the_deliveries() {
    // The "proxy" is a receiver: an HTTP proxy gets `POST http://<target>/hook`.
    let (proxy_url, through_proxy) = receiver(StatusCode::OK, Duration::ZERO).await;
    let proxy_base = proxy_url.trim_end_matches("/hook");
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = format!("http://{}/hook", dead.local_addr().unwrap());
    drop(dead);
    let proxy = TestProxy::start_with(webhook_toml(
        &target,
        &format!("events = [\"client_registered\"]\nproxy = \"{proxy_base}\""),
    ))
    .await;
    Client::register(&proxy, "Proxied", "http://127.0.0.1:9/cb").await;
    eventually("delivered through the proxy", || through_proxy.len() == 1).await;
    let (headers, body) = through_proxy.all().remove(0);
    assert!(verify(&headers, &body, SECRET));
    eventually("counted", || stats(&proxy).delivered == 1).await;
}
