//! Prometheus metrics, served on the admin listener. Domain counters are driven by audit
//! events (one place decides what happened; keyed on the typed `audit::Kind`), request counters by an HTTP middleware, store
//! latency by a wrapper around the store.
//!
//! Labels only ever hold values from fixed sets (route templates, event kinds, short reason
//! words), never a path, id, token or free text, so cardinality stays bounded and nothing
//! secret reaches a scrape.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::audit::{AuditEvent, Kind};

/// The content type of [`Metrics::render`] (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: String,
    method: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabels {
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    source: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PolicyLabels {
    decision: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// Request latencies: 1 ms to about 33 s.
fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Store latencies: 50 µs to about 1.6 s.
fn store_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

struct Inner {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Histograms<EndpointLabels>,
    audit_events: Family<KindLabels, Counter>,
    registrations: Counter,
    consents: Family<DecisionLabels, Counter>,
    codes: Counter,
    tokens: Counter,
    refreshes: Counter,
    refresh_branches: Counter,
    policy_decisions: Family<PolicyLabels, Counter>,
    approvals: Family<OutcomeLabels, Counter>,
    reuse: Family<KindLabels, Counter>,
    rejections: Family<RejectionLabels, Counter>,
    connect_links: Family<OutcomeLabels, Counter>,
    alerts: Family<KindLabels, Counter>,
    webhooks: Family<ResultLabels, Counter>,
    webhook_drops: Counter,
    store_seconds: Histograms<OpLabels>,
    refusal_overflow: Counter,
    rate_limited: Family<EndpointBucketLabels, Counter>,
    store_disk_flushes: Counter,
    upstream_pending: Gauge,
    upstream_commits: Family<ResultLabels, Counter>,
    upstream_committed: Counter,
    upstream_lost: Counter,
    record_cache_lookups: Family<ResultLabels, Counter>,
    record_cache_entries: Gauge,
    record_cache_answering: Gauge,
    /// Serializes [`Metrics::record_cache`] updates (two scrapes at once would both add the
    /// same difference).
    record_cache_seen: std::sync::Mutex<()>,
    /// Serializes [`Metrics::store_disk_flushes`] updates (a counter only moves forward).
    disk_flushes_seen: std::sync::Mutex<u64>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointBucketLabels {
    endpoint: String,
    bucket: String,
}

/// The metrics registry. Cheap to clone.
#[derive(Clone)]
pub struct Metrics(Arc<Inner>);

/// The audit sink reports here (`audit::Observer`): audit sits below metrics and names no
/// metric; the counters are keyed on its typed [`Kind`].
impl crate::audit::Observer for Metrics {
    fn event(&self, kind: Kind, event: &serde_json::Value) {
        self.audit_event_json(kind, event);
    }
    fn anonymous_refusal(&self, at: &'static str, reason: &'static str) {
        Metrics::anonymous_refusal(self, at, reason);
    }
    fn refusal_overflow(&self) {
        Metrics::refusal_overflow(self);
    }
    fn webhook_delivered(&self) {
        Metrics::webhook_delivered(self);
    }
    fn webhook_failed(&self) {
        Metrics::webhook_failed(self);
    }
    fn webhook_dropped(&self) {
        Metrics::webhook_dropped(self);
    }
    fn upstream_action_queued(&self) {
        self.0.upstream_pending.inc();
    }
    fn upstream_actions_settled(&self, events: usize) {
        self.0
            .upstream_pending
            .dec_by(i64::try_from(events).unwrap_or(i64::MAX));
    }
    fn upstream_actions_committed(&self, events: usize) {
        self.upstream_commit("ok");
        self.0.upstream_committed.inc_by(events as u64);
    }
    fn upstream_actions_commit_failed(&self, _events: usize, lost: usize) {
        self.upstream_commit("failed");
        self.0.upstream_lost.inc_by(lost as u64);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Measures how long something takes. Monotonic time for durations only; wall-clock time
/// still comes from the injected clock.
pub struct Timer(std::time::Instant);

impl Timer {
    /// Starts timing.
    #[allow(clippy::disallowed_methods)] // a latency, not a timestamp: nothing depends on it
    pub fn start() -> Timer {
        Timer(std::time::Instant::now())
    }
    /// Time since start.
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A label value from untrusted or open-ended text: kept if it is one short lowercase word
/// (`a-z`, `0-9`, `_`), else `other`, so a free-text reason cannot explode cardinality.
fn word(s: &str) -> String {
    if !s.is_empty()
        && s.len() <= 40
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        s.to_owned()
    } else {
        "other".to_owned()
    }
}

impl Metrics {
    /// A new registry with every metric registered (at zero).
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("mcp_proxy");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP requests on the main listener by route template, method and status",
            requests.clone(),
        );
        let request_seconds: Histograms<EndpointLabels> =
            Family::new_with_constructor(request_histogram);
        registry.register(
            "http_request_duration_seconds",
            "HTTP request latency by route template",
            request_seconds.clone(),
        );
        let audit_events = Family::<KindLabels, Counter>::default();
        registry.register(
            "audit_events",
            "Audit events recorded, by kind",
            audit_events.clone(),
        );
        let registrations = Counter::default();
        registry.register(
            "registrations",
            "Clients registered (RFC 7591)",
            registrations.clone(),
        );
        let consents = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "consents",
            "Consent decisions: approved, denied, recorded, or remembered (page skipped)",
            consents.clone(),
        );
        let codes = Counter::default();
        registry.register("codes_issued", "Authorization codes issued", codes.clone());
        let tokens = Counter::default();
        registry.register(
            "tokens_issued",
            "Token sets issued from a code",
            tokens.clone(),
        );
        let refreshes = Counter::default();
        registry.register("refreshes", "Refresh tokens rotated", refreshes.clone());
        let refresh_branches = Counter::default();
        registry.register(
            "refresh_branches",
            "Refresh families branched by a recently superseded token of their own client",
            refresh_branches.clone(),
        );
        let policy_decisions = Family::<PolicyLabels, Counter>::default();
        registry.register(
            "policy_decisions",
            "Tool-policy decisions on tools/call and tools/list, by decision and outcome",
            policy_decisions.clone(),
        );
        let approvals = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "tool_approvals",
            "Approval links of held tool calls answered, by answer",
            approvals.clone(),
        );
        let reuse = Family::<KindLabels, Counter>::default();
        registry.register(
            "reuse_detections",
            "Replayed codes or refresh tokens (their family was revoked)",
            reuse.clone(),
        );
        let rejections = Family::<RejectionLabels, Counter>::default();
        registry.register(
            "rejections",
            "Requests refused, by where and why",
            rejections.clone(),
        );
        let connect_links = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "connect_links",
            "Connect links by outcome",
            connect_links.clone(),
        );
        let alerts = Family::<KindLabels, Counter>::default();
        registry.register("alerts", "Alerts raised, by kind", alerts.clone());
        let webhooks = Family::<ResultLabels, Counter>::default();
        registry.register(
            "webhook_deliveries",
            "Webhook delivery attempts: delivered or failed",
            webhooks.clone(),
        );
        let webhook_drops = Counter::default();
        registry.register(
            "webhook_dropped",
            "Events dropped before delivery (queue full or retries exhausted)",
            webhook_drops.clone(),
        );
        let store_seconds: Histograms<OpLabels> = Family::new_with_constructor(store_histogram);
        registry.register(
            "store_operation_duration_seconds",
            "Store operation latency, by operation",
            store_seconds.clone(),
        );
        let refusal_overflow = Counter::default();
        registry.register(
            "audit_refusal_overflow",
            "Anonymous refusals counted without their source (the per-minute table was full)",
            refusal_overflow.clone(),
        );
        let rate_limited = Family::<EndpointBucketLabels, Counter>::default();
        registry.register(
            "rate_limited",
            "Requests refused by a rate limit, by endpoint and bucket (per_ip or global)",
            rate_limited.clone(),
        );
        let store_disk_flushes = Counter::default();
        registry.register(
            "store_disk_flushes",
            "Flushes of the embedded store to disk (sled: fsyncs of its log); 0 on PostgreSQL",
            store_disk_flushes.clone(),
        );
        let upstream_pending = Gauge::default();
        registry.register(
            "upstream_action_events_pending",
            "Upstream-action audit events (tools/call outcomes) recorded but not yet durable: what a crash now could lose",
            upstream_pending.clone(),
        );
        let upstream_commits = Family::<ResultLabels, Counter>::default();
        registry.register(
            "upstream_action_group_commits",
            "Background group commits of upstream-action audit events: ok or failed (a failed group is tried once more with the next)",
            upstream_commits.clone(),
        );
        let upstream_committed = Counter::default();
        registry.register(
            "upstream_action_events_committed",
            "Upstream-action audit events made durable by the background group commit",
            upstream_committed.clone(),
        );
        let upstream_lost = Counter::default();
        registry.register(
            "upstream_action_events_lost",
            "Upstream-action audit events given up after their group commit failed twice (logged as errors)",
            upstream_lost.clone(),
        );
        let record_cache_lookups = Family::<ResultLabels, Counter>::default();
        registry.register(
            "record_cache_lookups",
            "Lookups of the /mcp checks' records in the replica's cache: hit (no store read) or miss",
            record_cache_lookups.clone(),
        );
        let record_cache_entries = Gauge::default();
        registry.register(
            "record_cache_entries",
            "Records held in the replica's cache of the /mcp checks",
            record_cache_entries.clone(),
        );
        let record_cache_answering = Gauge::default();
        registry.register(
            "record_cache_answering",
            "1 while the record cache may answer; 0 while a PostgreSQL replica cannot be sure it has heard every other replica's writes (listener down or behind)",
            record_cache_answering.clone(),
        );
        Metrics(Arc::new(Inner {
            record_cache_lookups,
            record_cache_entries,
            record_cache_answering,
            record_cache_seen: std::sync::Mutex::new(()),
            registry,
            requests,
            request_seconds,
            audit_events,
            registrations,
            consents,
            codes,
            tokens,
            refreshes,
            refresh_branches,
            policy_decisions,
            approvals,
            reuse,
            rejections,
            connect_links,
            alerts,
            webhooks,
            webhook_drops,
            store_seconds,
            refusal_overflow,
            rate_limited,
            store_disk_flushes,
            upstream_pending,
            upstream_commits,
            upstream_committed,
            upstream_lost,
            disk_flushes_seen: std::sync::Mutex::new(0),
        }))
    }

    /// An audit event was recorded: counted under `audit_events{kind}` and, by its [`Kind`],
    /// under its domain counter.
    pub fn audit_event(&self, event: &AuditEvent) {
        if let Ok(json) = serde_json::to_value(event) {
            self.audit_event_json(event.kind(), &json);
        }
    }

    /// [`Metrics::audit_event`] for an event already serialized (the audit sink has the JSON
    /// at hand; serializing every event twice was a measurable part of a `/mcp` call). The
    /// kind is typed and matched exhaustively: a new kind does not compile until it is given
    /// a counter here or explicitly none; labels read from fields are reduced to one word.
    pub fn audit_event_json(&self, kind: Kind, json: &serde_json::Value) {
        let field = |name: &str| json[name].as_str().map(word);
        let m = &self.0;
        m.audit_events
            .get_or_create(&KindLabels {
                kind: kind.name().to_owned(),
            })
            .inc();
        let consent = |d: &str| {
            m.consents
                .get_or_create(&DecisionLabels {
                    decision: d.to_owned(),
                })
                .inc();
        };
        let reject = |source: &str, reason: Option<String>| {
            m.rejections
                .get_or_create(&RejectionLabels {
                    source: source.to_owned(),
                    reason: reason.unwrap_or_else(|| "other".to_owned()),
                })
                .inc();
        };
        let link = |outcome: &str| {
            m.connect_links
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.to_owned(),
                })
                .inc();
        };
        match kind {
            Kind::ClientRegistered => {
                m.registrations.inc();
            }
            Kind::ConsentApproved => consent("approved"),
            Kind::ConsentDenied => consent("denied"),
            Kind::ConsentRecorded => consent("recorded"),
            Kind::CodeIssued => {
                m.codes.inc();
                if json["consent_remembered"].as_bool() == Some(true) {
                    consent("remembered");
                }
            }
            Kind::TokenIssued => {
                m.tokens.inc();
            }
            Kind::TokenRefreshed => {
                m.refreshes.inc();
            }
            Kind::RefreshBranched => {
                m.refresh_branches.inc();
            }
            Kind::PolicyDecision => {
                m.policy_decisions
                    .get_or_create(&PolicyLabels {
                        decision: field("decision").unwrap_or_else(|| "other".to_owned()),
                        outcome: field("outcome").unwrap_or_else(|| "other".to_owned()),
                    })
                    .inc();
            }
            Kind::ApprovalAnswered => {
                m.approvals
                    .get_or_create(&OutcomeLabels {
                        outcome: field("answer").unwrap_or_else(|| "other".to_owned()),
                    })
                    .inc();
            }
            Kind::CodeReuse => {
                m.reuse
                    .get_or_create(&KindLabels {
                        kind: "code".to_owned(),
                    })
                    .inc();
            }
            Kind::RefreshReuse => {
                m.reuse
                    .get_or_create(&KindLabels {
                        kind: "refresh_token".to_owned(),
                    })
                    .inc();
            }
            Kind::TokenRejected => reject("mcp_token", field("reason")),
            Kind::CallbackRejected => reject("callback", field("reason")),
            Kind::HandleRejected => reject("mcp_handle", field("kind")),
            Kind::TokenExchangeRefused => reject("token_exchange", field("reason")),
            Kind::RegistrationRefused => reject("registration", field("reason")),
            Kind::ConnectLinkCreated => link("created"),
            Kind::ConnectLinkRefused => link("refused_wrong_person"),
            Kind::ConnectLinkWrongAccount => link("wrong_account"),
            Kind::ConnectLinkCompleted => link("completed"),
            Kind::ConnectLinkDeclined => link("declined"),
            Kind::AlertRaised => {
                // An alert's own kind if it names one, else the event's.
                let alert = field("kind")
                    .or_else(|| field("alert"))
                    .unwrap_or_else(|| word(kind.name()));
                m.alerts.get_or_create(&KindLabels { kind: alert }).inc();
            }
            // Counted under `audit_events` only. (Anonymous refusals were counted under
            // `rejections` one by one, as they happened: `anonymous_refusal`.)
            Kind::ClientDeleted
            | Kind::ClientUnblocked
            | Kind::GrantRevokedByAdmin
            | Kind::ConsentShown
            | Kind::SignedIn
            | Kind::TokenRevoked
            | Kind::UpstreamAction
            | Kind::GitHubGrantStored
            | Kind::GitHubGrantBroken
            | Kind::GitHubGrantDisconnected
            | Kind::AllowanceWithdrawn
            | Kind::TokenExchanged
            | Kind::ClientAccessRevoked
            | Kind::RefreshBranchEnded
            | Kind::SignInRefused
            | Kind::AccessLost
            | Kind::AnonymousRefusals => {}
        }
    }

    /// A request was refused by a rate limit (not an audit event: a flood would fill the
    /// trail). Counted in `rate_limited{endpoint, bucket}`, and for `/register` and `/token`
    /// also under `rejections{source="rate_limit"}` as before.
    pub fn rate_limited(&self, endpoint: crate::limits::Endpoint, bucket: crate::limits::Bucket) {
        use crate::limits::{Bucket, Endpoint};
        let b = match bucket {
            Bucket::PerIp => "per_ip",
            Bucket::Global => "global",
        };
        self.0
            .rate_limited
            .get_or_create(&EndpointBucketLabels {
                endpoint: endpoint.name().to_owned(),
                bucket: b.to_owned(),
            })
            .inc();
        let reason = match (endpoint, bucket) {
            (Endpoint::Register, Bucket::PerIp) => "register_per_ip",
            (Endpoint::Register, Bucket::Global) => "register_global",
            (Endpoint::Token, Bucket::PerIp) => "token_per_ip",
            (Endpoint::Token, Bucket::Global) => "token_global",
            _ => return,
        };
        self.0
            .rejections
            .get_or_create(&RejectionLabels {
                source: "rate_limit".to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// An anonymous refusal (`audit::aggregate`): counted here at once, under the same labels
    /// the individual events used.
    pub fn anonymous_refusal(&self, source: &'static str, reason: &'static str) {
        self.0
            .rejections
            .get_or_create(&RejectionLabels {
                source: source.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// An anonymous refusal was counted without its source (the aggregate table was full).
    pub fn refusal_overflow(&self) {
        self.0.refusal_overflow.inc();
    }

    /// The store's disk flushes so far ([`crate::store::Store::disk_flushes`]), read when the
    /// metrics are scraped.
    pub fn store_disk_flushes(&self, total: Option<u64>) {
        let Some(total) = total else { return };
        let mut seen = self
            .0
            .disk_flushes_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if total > *seen {
            self.0.store_disk_flushes.inc_by(total - *seen);
            *seen = total;
        }
    }

    /// The record cache's counts, read when the metrics are scraped.
    pub fn record_cache(&self, cache: &crate::store::CachingStore) {
        let _one_at_a_time = self
            .0
            .record_cache_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (hits, misses) = cache.cache().hits_and_misses();
        for (result, total) in [("hit", hits), ("miss", misses)] {
            let c = self.0.record_cache_lookups.get_or_create(&ResultLabels {
                result: result.to_owned(),
            });
            // Counters only move forward; the cache's own counts are the truth.
            let seen = c.get();
            if total > seen {
                c.inc_by(total - seen);
            }
        }
        self.0
            .record_cache_entries
            .set(i64::try_from(cache.cache().len()).unwrap_or(i64::MAX));
        self.0
            .record_cache_answering
            .set(i64::from(cache.answering()));
    }

    /// A webhook delivery succeeded.
    pub fn webhook_delivered(&self) {
        self.webhook("delivered");
    }

    /// A webhook delivery attempt failed (it may be retried).
    pub fn webhook_failed(&self) {
        self.webhook("failed");
    }

    fn webhook(&self, result: &str) {
        self.0
            .webhooks
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    fn upstream_commit(&self, result: &str) {
        self.0
            .upstream_commits
            .get_or_create(&ResultLabels {
                result: result.to_owned(),
            })
            .inc();
    }

    /// An event was dropped before delivery (queue full or retries exhausted).
    pub fn webhook_dropped(&self) {
        self.0.webhook_drops.inc();
    }

    /// A store operation took `took`.
    pub fn store_op(&self, op: &'static str, took: Duration) {
        self.0
            .store_seconds
            .get_or_create(&OpLabels { op: op.to_owned() })
            .observe(took.as_secs_f64());
    }

    /// An HTTP request on the main listener finished. `endpoint` is the matched route
    /// template (`/connect/{code}`), never the raw path.
    pub fn http_request(&self, endpoint: &str, method: &str, status: u16, took: Duration) {
        self.0
            .requests
            .get_or_create(&RequestLabels {
                endpoint: endpoint.to_owned(),
                method: method.to_owned(),
                status,
            })
            .inc();
        self.0
            .request_seconds
            .get_or_create(&EndpointLabels {
                endpoint: endpoint.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// The exposition (OpenMetrics text, see [`CONTENT_TYPE`]).
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.0.registry)?;
        Ok(out)
    }
}

/// The store's timing wrapper (`store::MeteredStore`) reports here.
impl crate::store::OpObserver for Metrics {
    fn store_op(&self, op: &'static str, took: Duration) {
        Metrics::store_op(self, op, took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{ClientId, FamilyId, UserId};

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn audit_events_move_the_domain_counters() {
        let m = Metrics::new();
        m.audit_event(&AuditEvent::CodeIssued {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("c"),
            consent_remembered: true,
            code_id: "k".to_owned(),
            family_id: FamilyId::new("f"),
            redirect_uri: "https://app.example/cb".to_owned(),
        });
        m.audit_event(&AuditEvent::RefreshReuse {
            user_id: UserId::new("github:1"),
            client_id: ClientId::new("c"),
            family_id: FamilyId::new("f"),
            case: "branch_limit",
        });
        m.audit_event(&AuditEvent::TokenRejected { reason: "revoked" });
        m.audit_event(&AuditEvent::TokenExchangeRefused {
            reason: "Bad Request: free text".to_owned(),
        });
        let text = m.render().unwrap();
        assert_eq!(
            line(&text, "mcp_proxy_codes_issued_total "),
            Some("mcp_proxy_codes_issued_total 1")
        );
        assert!(text.contains("mcp_proxy_consents_total{decision=\"remembered\"} 1"));
        assert!(text.contains("mcp_proxy_reuse_detections_total{kind=\"refresh_token\"} 1"));
        assert!(
            text.contains("mcp_proxy_rejections_total{source=\"mcp_token\",reason=\"revoked\"} 1")
        );
        // Free text never becomes a label value.
        assert!(
            text.contains(
                "mcp_proxy_rejections_total{source=\"token_exchange\",reason=\"other\"} 1"
            )
        );
        assert!(!text.contains("free text"));
        assert!(text.ends_with("# EOF\n"));
    }

    /// Every audit event kind moves `audit_events{kind}`, and exactly the kinds with a domain
    /// counter move one: renaming a kind, or adding one, shows up here.
    #[test]
    fn every_audit_event_kind_moves_its_counters() {
        // Kinds counted under `audit_events` only.
        const ONLY_AUDIT_EVENTS: &[Kind] = &[
            Kind::ClientDeleted,
            Kind::ClientUnblocked,
            Kind::GrantRevokedByAdmin,
            Kind::ConsentShown,
            Kind::SignedIn,
            Kind::TokenRevoked,
            Kind::UpstreamAction,
            Kind::GitHubGrantStored,
            Kind::GitHubGrantBroken,
            Kind::GitHubGrantDisconnected,
            Kind::AllowanceWithdrawn,
            Kind::TokenExchanged,
            Kind::ClientAccessRevoked,
            Kind::RefreshBranchEnded,
            Kind::SignInRefused,
            Kind::AccessLost,
            Kind::AnonymousRefusals,
        ];
        let samples = crate::audit::tests::samples();
        let lines = |text: &str| -> std::collections::BTreeSet<String> {
            text.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("mcp_proxy_audit_events"))
                .map(str::to_owned)
                .collect()
        };
        for kind in Kind::ALL {
            let event = samples
                .iter()
                .find(|e| e.kind() == kind)
                .unwrap_or_else(|| panic!("no sample of {kind:?}"));
            let m = Metrics::new();
            let before = m.render().unwrap();
            m.audit_event(event);
            let after = m.render().unwrap();
            assert!(
                after.contains(&format!(
                    "mcp_proxy_audit_events_total{{kind=\"{}\"}} 1",
                    kind.name()
                )),
                "{kind:?}: audit_events did not move"
            );
            let domain_moved = lines(&before) != lines(&after);
            assert_eq!(
                domain_moved,
                !ONLY_AUDIT_EVENTS.contains(&kind),
                "{kind:?}: domain counter moved = {domain_moved}"
            );
        }
    }

    #[test]
    fn word_keeps_short_lowercase_words_only() {
        assert_eq!(word("wrong_audience"), "wrong_audience");
        assert_eq!(word("Wrong"), "other");
        assert_eq!(word(""), "other");
        assert_eq!(word(&"a".repeat(41)), "other");
        assert_eq!(word("a\"b"), "other");
    }

    #[test]
    fn webhook_and_store_metrics_are_exposed() {
        let m = Metrics::new();
        m.webhook_delivered();
        m.webhook_failed();
        m.webhook_dropped();
        m.store_op("get", Duration::from_millis(2));
        let text = m.render().unwrap();
        assert!(text.contains("mcp_proxy_webhook_deliveries_total{result=\"delivered\"} 1"));
        assert!(text.contains("mcp_proxy_webhook_deliveries_total{result=\"failed\"} 1"));
        assert!(text.contains("mcp_proxy_webhook_dropped_total 1"));
        assert!(text.contains("mcp_proxy_store_operation_duration_seconds_count{op=\"get\"} 1"));
    }

    #[tokio::test]
    async fn metered_store_operations_are_exposed() {
        use crate::clock::{ManualClock, UnixTime};
        use crate::store::{MeteredStore, SharedStore, SledStore, Store};
        let m = Metrics::new();
        let inner: SharedStore =
            Arc::new(SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap());
        let store = MeteredStore::new(inner, m.clone());
        store.sweep_expired().await.unwrap();
        store.flush().await.unwrap();
        let text = m.render().unwrap();
        for op in ["sweep_expired", "flush"] {
            assert!(
                text.contains(&format!(
                    "mcp_proxy_store_operation_duration_seconds_count{{op=\"{op}\"}} 1"
                )),
                "{op}"
            );
        }
    }
}
