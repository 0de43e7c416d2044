//! The webhook sink: audit events POSTed as JSON to an operator's endpoint, signed, retried
//! with backoff (receivers de-duplicate by event id). Best effort: what the queue cannot hold,
//! or what fails every attempt, is dropped and counted; the stored trail is the record.
//!
//! The request path only ever does a non-blocking `try_send` into a bounded queue. Alerts
//! have a queue and delivery slots of their own: anonymous traffic produces ordinary events
//! at line rate, and during exactly such an attack those must not crowd alerts out. Each
//! queue is drained by a few deliveries at once, so one slow event does not hold up the rest.
//! A receiver that is down or slow fills the queues, and what does not fit is dropped and
//! counted, never waited for.
//!
//! Signature: `X-Mcp-Proxy-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>`,
//! with `<timestamp>` the value of `X-Mcp-Proxy-Timestamp` (Unix seconds, set per attempt).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};

use super::AuditRecord;
use super::WebhookConfig;
use crate::clock::SharedClock;
use crate::crypto;
use crate::outbound;

/// Ordinary events being delivered at once.
const EVENT_SLOTS: usize = 4;
/// Alerts being delivered at once (slots of their own, never taken by ordinary events).
const ALERT_SLOTS: usize = 2;
/// The event kind that goes through the alert queue.
const ALERT_KIND: &str = "alert_raised";

/// Header carrying the event id (de-duplication).
pub const EVENT_ID_HEADER: &str = "x-mcp-proxy-event-id";
/// Header carrying the signing timestamp (Unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-mcp-proxy-timestamp";
/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "x-mcp-proxy-signature";

/// The signature header value for `body` signed at `timestamp`.
pub fn signature(secret: &[u8], timestamp: u64, body: &[u8]) -> String {
    let mut signed = format!("{timestamp}.").into_bytes();
    signed.extend_from_slice(body);
    format!("v1={}", crypto::hmac_sha256_hex(secret, &signed))
}

/// Delay before retry number `attempt` (1-based): exponential from `base_ms`, capped at
/// `max_ms`, plus up to half of it again as jitter so a fleet does not retry in lockstep.
pub fn backoff(attempt: u32, base_ms: u64, max_ms: u64, jitter: impl Fn(u64) -> u64) -> Duration {
    let exp = base_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(32));
    let d = exp.min(max_ms);
    Duration::from_millis(d.saturating_add(jitter(d / 2)))
}

/// Counts of what became of events, readable in tests and by operators.
#[derive(Debug, Default)]
pub struct WebhookStats {
    delivered: AtomicU64,
    failed_attempts: AtomicU64,
    dropped: AtomicU64,
    alerts_dropped: AtomicU64,
}

/// A snapshot of [`WebhookStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WebhookCounts {
    /// Events delivered.
    pub delivered: u64,
    /// Attempts that failed (each may be retried).
    pub failed_attempts: u64,
    /// Events given up on: queue full, or every attempt failed (alerts included).
    pub dropped: u64,
    /// Of those, alerts.
    pub alerts_dropped: u64,
}

impl WebhookStats {
    /// The current counts.
    pub fn counts(&self) -> WebhookCounts {
        WebhookCounts {
            delivered: self.delivered.load(Ordering::Relaxed),
            failed_attempts: self.failed_attempts.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            alerts_dropped: self.alerts_dropped.load(Ordering::Relaxed),
        }
    }
}

/// The body of one delivery.
#[derive(Serialize)]
struct Payload<'a> {
    id: &'a str,
    at: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_id: Option<&'a str>,
    event: &'a serde_json::Value,
}

struct Delivery {
    id: String,
    body: Vec<u8>,
    alert: bool,
}

/// The sink handle (cheap to clone). When the last one is dropped the queues close and the
/// delivery tasks end.
#[derive(Clone)]
pub struct Webhook {
    events: mpsc::Sender<Delivery>,
    alerts: mpsc::Sender<Delivery>,
    shared: Arc<Shared>,
}

/// What the handle and the delivery tasks share (not the queue senders, so that the tasks do
/// not keep their own queues open).
struct Shared {
    config: WebhookConfig,
    stats: WebhookStats,
    metrics: Box<dyn super::Observer>,
}

impl Webhook {
    /// Starts the delivery tasks on the current Tokio runtime. An error without a runtime
    /// (the caller logs that webhooks are off).
    pub fn start(
        config: WebhookConfig,
        clock: SharedClock,
        metrics: impl super::Observer,
    ) -> Result<Webhook, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "no async runtime to run webhook deliveries on".to_owned())?;
        // Only the proxy configured here, never one from the environment (HTTP(S)_PROXY set
        // for other traffic): deliveries carry the webhook URL, often with a secret in it.
        let http = outbound::webhook(
            Duration::from_secs(config.timeout_secs),
            config.proxy.as_ref(),
        )
        .map_err(|e| e.without_url().to_string())?;
        let (events, events_rx) = mpsc::channel(config.queue_size);
        let (alerts, alerts_rx) = mpsc::channel(config.queue_size);
        let shared = Arc::new(Shared {
            config,
            stats: WebhookStats::default(),
            metrics: Box::new(metrics),
        });
        let sender = Sender { http, clock };
        runtime.spawn(dispatch(
            shared.clone(),
            events_rx,
            sender.clone(),
            EVENT_SLOTS,
        ));
        runtime.spawn(dispatch(shared.clone(), alerts_rx, sender, ALERT_SLOTS));
        Ok(Webhook {
            events,
            alerts,
            shared,
        })
    }

    /// What became of events so far.
    pub fn stats(&self) -> WebhookCounts {
        self.shared.stats.counts()
    }

    /// Queues a stored event for delivery if its kind is selected. Never waits.
    pub fn offer(&self, rec: &AuditRecord) {
        if let Some(kinds) = &self.shared.config.events
            && !kinds.contains(rec.kind.as_str())
        {
            return;
        }
        let payload = Payload {
            id: &rec.id,
            at: rec.at.0,
            request_id: rec.request_id.as_deref(),
            event: &rec.event,
        };
        let alert = rec.kind == ALERT_KIND;
        let Ok(body) = serde_json::to_vec(&payload) else {
            self.shared
                .drop_one(&rec.id, alert, "event did not serialize");
            return;
        };
        let d = Delivery {
            id: rec.id.clone(),
            body,
            alert,
        };
        let queue = if alert { &self.alerts } else { &self.events };
        match queue.try_send(d) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.shared.drop_one(&rec.id, alert, "queue full")
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.shared.drop_one(&rec.id, alert, "delivery stopped")
            }
        }
    }
}

impl Shared {
    fn drop_one(&self, id: &str, alert: bool, why: &str) {
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        if alert {
            self.stats.alerts_dropped.fetch_add(1, Ordering::Relaxed);
        }
        self.metrics.webhook_dropped();
        // Ordinary drops come at the attacker's request rate during a flood: counted and in
        // the metrics, logged only at debug. A lost alert is worth a line.
        if alert {
            tracing::warn!(event_id = %id, reason = why, "webhook alert dropped");
        } else {
            tracing::debug!(event_id = %id, reason = why, "webhook event dropped");
        }
    }
}

/// What one delivery needs besides the hook.
#[derive(Clone)]
struct Sender {
    http: reqwest::Client,
    clock: SharedClock,
}

/// Takes events off one queue and delivers up to `slots` of them at once. A slot is taken
/// before an event is, so what waits stays in the bounded queue (and overflow is counted).
async fn dispatch(
    hook: Arc<Shared>,
    mut rx: mpsc::Receiver<Delivery>,
    sender: Sender,
    slots: usize,
) {
    let slots = Arc::new(Semaphore::new(slots));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let Some(d) = rx.recv().await else {
            return;
        };
        let (hook, sender) = (hook.clone(), sender.clone());
        tokio::spawn(async move {
            deliver(&hook, &sender, d).await;
            drop(slot);
        });
    }
}

/// Every attempt for one event, with backoff in between; dropped and counted after the last.
async fn deliver(hook: &Shared, sender: &Sender, d: Delivery) {
    let secret = &hook.config.secret;
    for attempt in 1..=hook.config.max_attempts {
        let ts = sender.clock.now().0;
        let sig = signature(secret.secret().as_bytes(), ts, &d.body);
        let sent = sender
            .http
            .post(hook.config.url.clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(EVENT_ID_HEADER, &d.id)
            .header(TIMESTAMP_HEADER, ts.to_string())
            .header(SIGNATURE_HEADER, sig)
            .body(d.body.clone())
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => {
                hook.stats.delivered.fetch_add(1, Ordering::Relaxed);
                hook.metrics.webhook_delivered();
                return;
            }
            other => {
                hook.stats.failed_attempts.fetch_add(1, Ordering::Relaxed);
                hook.metrics.webhook_failed();
                let why = match other {
                    Ok(r) => format!("status {}", r.status().as_u16()),
                    // Without the URL: it often carries a secret, and logs travel far.
                    Err(e) => error_chain(&e.without_url()),
                };
                tracing::debug!(event_id = %d.id, attempt, error = %why, "webhook attempt failed");
            }
        }
        if attempt < hook.config.max_attempts {
            tokio::time::sleep(backoff(
                attempt,
                hook.config.backoff_ms,
                hook.config.max_backoff_ms,
                crypto::random_below,
            ))
            .await;
        }
    }
    hook.drop_one(&d.id, d.alert, "every attempt failed");
}

/// An error and its causes, `: `-separated (reqwest's own text says only "error sending
/// request"; the cause says why).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_hmac_over_timestamp_dot_body() {
        // RFC 4231 style check: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
        let s = crypto::hmac_sha256_hex(b"key", b"The quick brown fox jumps over the lazy dog");
        assert_eq!(
            s,
            "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8"
        );
        assert_eq!(
            signature(b"key", 12, b"{}"),
            format!("v1={}", crypto::hmac_sha256_hex(b"key", b"12.{}"))
        );
        assert_ne!(signature(b"key", 12, b"{}"), signature(b"key", 13, b"{}"));
    }

    #[test]
    fn backoff_doubles_up_to_the_ceiling_plus_jitter() {
        let none = |_| 0;
        assert_eq!(backoff(1, 100, 1000, none), Duration::from_millis(100));
        assert_eq!(backoff(2, 100, 1000, none), Duration::from_millis(200));
        assert_eq!(backoff(3, 100, 1000, none), Duration::from_millis(400));
        assert_eq!(backoff(10, 100, 1000, none), Duration::from_millis(1000));
        assert_eq!(backoff(60, 100, 1000, none), Duration::from_millis(1000));
        let most = |max| max;
        assert_eq!(backoff(1, 100, 1000, most), Duration::from_millis(150));
    }
}
