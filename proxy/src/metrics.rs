//! Prometheus metrics, served on the admin listener. Domain counters are driven by audit
//! events (one place decides what happened), request counters by an HTTP middleware, store
//! latency by a wrapper around the store.
//!
//! The methods below are the interface the rest of the proxy calls; their bodies belong to the
//! metrics work (issue 6).

use std::time::Duration;

use crate::audit::AuditEvent;

/// The metrics registry. Cheap to clone.
#[derive(Clone, Default)]
pub struct Metrics {}

impl Metrics {
    /// A new, empty registry.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// An audit event was recorded.
    pub fn audit_event(&self, _event: &AuditEvent) {}

    /// A webhook delivery succeeded.
    pub fn webhook_delivered(&self) {}

    /// A webhook delivery attempt failed (it may be retried).
    pub fn webhook_failed(&self) {}

    /// An event was dropped before delivery (queue full or retries exhausted).
    pub fn webhook_dropped(&self) {}

    /// A store operation took `took`.
    pub fn store_op(&self, _op: &'static str, _took: Duration) {}
}
