//! `[audit]`, `[log]`, `[alerts]` and `[webhook]`: how upstream-action events are made
//! durable, how audit events are logged, when detection rules fire, and where operator events
//! are POSTed; each section's validation.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use url::Url;

use crate::ids::WebhookSecret;
use crate::secrets::{Env, resolve_secret};

/// `[audit]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAudit {
    upstream_action_commit_ms: u64,
    upstream_action_commit_events: usize,
}

impl Default for RawAudit {
    fn default() -> Self {
        let d = GroupCommit::default();
        RawAudit {
            upstream_action_commit_ms: d.window_ms,
            upstream_action_commit_events: d.max_events,
        }
    }
}

/// Longest commit window accepted, ms: what a crash may lose stays a moment's worth.
const MAX_COMMIT_MS: u64 = 1_000;
/// Most events in one group commit (and in the queue before writers wait).
const MAX_COMMIT_EVENTS: usize = 10_000;

/// `[audit]`, validated: how upstream-action events (`tools/call` outcomes, not security
/// state) are made durable in the background, together (`audit::commit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCommit {
    /// A group is made durable at most this long after its first event was recorded
    /// (`upstream_action_commit_ms`): the worst-case loss on a crash.
    pub window_ms: u64,
    /// ... or as soon as this many events are pending (`upstream_action_commit_events`); also
    /// the queue's bound, beyond which recording waits.
    pub max_events: usize,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            window_ms: 10,
            max_events: 256,
        }
    }
}

impl GroupCommit {
    /// Validates `[audit]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(raw: &RawAudit, errs: &mut Vec<String>) -> GroupCommit {
        if !(1..=MAX_COMMIT_MS).contains(&raw.upstream_action_commit_ms) {
            errs.push(format!(
                "audit.upstream_action_commit_ms: between 1 and {MAX_COMMIT_MS}"
            ));
        }
        if !(1..=MAX_COMMIT_EVENTS).contains(&raw.upstream_action_commit_events) {
            errs.push(format!(
                "audit.upstream_action_commit_events: between 1 and {MAX_COMMIT_EVENTS}"
            ));
        }
        GroupCommit {
            window_ms: raw.upstream_action_commit_ms.clamp(1, MAX_COMMIT_MS),
            max_events: raw
                .upstream_action_commit_events
                .clamp(1, MAX_COMMIT_EVENTS),
        }
    }

    /// The window as a duration.
    pub fn window(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.window_ms)
    }
}

/// `[log]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RawLog {
    format: Option<String>,
}

/// `[alerts]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawAlerts {
    wrong_audience_threshold: u32,
    wrong_audience_window_secs: u64,
    new_client_secs: u64,
    policy_denial_threshold: u32,
    policy_denial_window_secs: u64,
    branch_network_window_secs: u64,
}

impl Default for RawAlerts {
    fn default() -> Self {
        let d = AlertPolicy::default();
        RawAlerts {
            wrong_audience_threshold: d.wrong_audience_threshold,
            wrong_audience_window_secs: d.wrong_audience_window_secs,
            new_client_secs: d.new_client_secs,
            policy_denial_threshold: d.policy_denial_threshold,
            policy_denial_window_secs: d.policy_denial_window_secs,
            branch_network_window_secs: d.branch_network_window_secs,
        }
    }
}

/// `[webhook]`. No Debug: may hold the secret inline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebhook {
    url: String,
    secret: Option<String>,
    secret_file: Option<PathBuf>,
    secret_env: Option<String>,
    #[serde(default = "all_events")]
    events: Vec<String>,
    #[serde(default = "default_queue_size")]
    queue_size: usize,
    #[serde(default = "default_max_attempts")]
    max_attempts: u32,
    #[serde(default = "default_backoff_ms")]
    backoff_ms: u64,
    #[serde(default = "default_max_backoff_ms")]
    max_backoff_ms: u64,
    #[serde(default = "default_timeout_secs")]
    timeout_secs: u64,
    proxy: Option<String>,
}

fn all_events() -> Vec<String> {
    vec!["all".to_owned()]
}
fn default_queue_size() -> usize {
    1024
}
fn default_max_attempts() -> u32 {
    6
}
fn default_backoff_ms() -> u64 {
    500
}
fn default_max_backoff_ms() -> u64 {
    60_000
}
fn default_timeout_secs() -> u64 {
    5
}

/// How the binary logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[log]`, validated.
#[derive(Debug, Clone, Default)]
pub struct LogConfig {
    /// Line format.
    pub format: LogFormat,
}

/// `[alerts]`, validated: thresholds of the detection rules.
#[derive(Debug, Clone)]
pub struct AlertPolicy {
    /// Wrong-audience token rejections at `/mcp` within the window that raise an alert.
    pub wrong_audience_threshold: u32,
    /// The sliding window for that count (kept in memory, per process).
    pub wrong_audience_window_secs: u64,
    /// A client younger than this that receives a code for a never-seen redirect host raises
    /// an alert.
    pub new_client_secs: u64,
    /// `[[policy]]` denials of one client within the window that raise an alert.
    pub policy_denial_threshold: u32,
    /// The sliding window for that count (kept in memory, per process and client).
    pub policy_denial_window_secs: u64,
    /// Two branches of one refresh family used from two networks within this long raise an
    /// alert (`detect::branch_network_alert`, kept in the family record); 0 turns it off.
    pub branch_network_window_secs: u64,
}

impl Default for AlertPolicy {
    fn default() -> Self {
        AlertPolicy {
            wrong_audience_threshold: 10,
            wrong_audience_window_secs: 60,
            new_client_secs: 600,
            policy_denial_threshold: 10,
            policy_denial_window_secs: 60,
            branch_network_window_secs: 86_400,
        }
    }
}

/// `[webhook]`, validated. (`Debug` by hand: the URL's path or query is often the receiver's
/// own secret, so only its scheme and host are shown.)
#[derive(Clone)]
pub struct WebhookConfig {
    /// Where events are POSTed.
    pub url: Url,
    /// HMAC key for the signature header.
    pub secret: Arc<WebhookSecret>,
    /// Event kinds to send; `None`: all.
    pub events: Option<BTreeSet<String>>,
    /// Events waiting for delivery before new ones are dropped.
    pub queue_size: usize,
    /// Delivery attempts per event before it is dropped.
    pub max_attempts: u32,
    /// First retry delay; doubles per attempt, with jitter.
    pub backoff_ms: u64,
    /// Ceiling of the retry delay.
    pub max_backoff_ms: u64,
    /// Per-attempt timeout.
    pub timeout_secs: u64,
    /// HTTP(S) proxy for deliveries; `None`: connect directly (proxy environment variables
    /// are ignored).
    pub proxy: Option<Url>,
}

/// `scheme://host[:port]/[redacted]`: enough to tell which receiver, nothing that opens it.
fn redacted(u: &Url) -> String {
    format!(
        "{}://{}{}/[redacted]",
        u.scheme(),
        u.host_str().unwrap_or_default(),
        u.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

impl std::fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookConfig")
            .field("url", &redacted(&self.url))
            .field("secret", &self.secret)
            .field("events", &self.events)
            .field("queue_size", &self.queue_size)
            .field("max_attempts", &self.max_attempts)
            .field("backoff_ms", &self.backoff_ms)
            .field("max_backoff_ms", &self.max_backoff_ms)
            .field("timeout_secs", &self.timeout_secs)
            .field("proxy", &self.proxy.as_ref().map(redacted))
            .finish()
    }
}

impl LogConfig {
    /// Validates `[log]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(log: &RawLog, errs: &mut Vec<String>) -> LogConfig {
        let format = match log.format.as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => {
                errs.push(format!(
                    "log.format: {other:?} is not supported (use \"text\" or \"json\")"
                ));
                LogFormat::Text
            }
        };
        LogConfig { format }
    }
}

impl AlertPolicy {
    /// Validates `[alerts]`, pushing one readable line per problem into `errs`.
    pub fn from_raw(alerts: &RawAlerts, errs: &mut Vec<String>) -> AlertPolicy {
        if alerts.wrong_audience_threshold == 0 {
            errs.push("alerts.wrong_audience_threshold: at least 1".to_owned());
        }
        if !(1..=86_400).contains(&alerts.wrong_audience_window_secs) {
            errs.push("alerts.wrong_audience_window_secs: between 1 and 86400".to_owned());
        }
        if alerts.new_client_secs > 7 * 86_400 {
            errs.push("alerts.new_client_secs: at most 604800".to_owned());
        }
        if alerts.policy_denial_threshold == 0 {
            errs.push("alerts.policy_denial_threshold: at least 1".to_owned());
        }
        if !(1..=86_400).contains(&alerts.policy_denial_window_secs) {
            errs.push("alerts.policy_denial_window_secs: between 1 and 86400".to_owned());
        }
        if alerts.branch_network_window_secs > 7 * 86_400 {
            errs.push(
                "alerts.branch_network_window_secs: at most 604800 (0 turns the alert off)"
                    .to_owned(),
            );
        }
        AlertPolicy {
            wrong_audience_threshold: alerts.wrong_audience_threshold,
            wrong_audience_window_secs: alerts.wrong_audience_window_secs,
            new_client_secs: alerts.new_client_secs,
            policy_denial_threshold: alerts.policy_denial_threshold,
            policy_denial_window_secs: alerts.policy_denial_window_secs,
            branch_network_window_secs: alerts.branch_network_window_secs,
        }
    }
}

impl WebhookConfig {
    /// Validates `[webhook]`, pushing one readable line per problem into `errs`; `None` if it
    /// cannot be used. Plain http is accepted only where `is_loopback_host` says so: the
    /// redirect binding's one definition of loopback, passed in because audit sits below the
    /// bindings.
    pub fn from_raw(
        w: &RawWebhook,
        env: &dyn Env,
        is_loopback_host: fn(&str) -> bool,
        errs: &mut Vec<String>,
    ) -> Option<WebhookConfig> {
        validate_webhook(w, env, is_loopback_host, errs)
    }
}

fn validate_webhook(
    w: &RawWebhook,
    env: &dyn Env,
    is_loopback_host: fn(&str) -> bool,
    errs: &mut Vec<String>,
) -> Option<WebhookConfig> {
    let url = match Url::parse(&w.url) {
        // Credentials in the URL would be sent and logged as part of it: use the path or a
        // header-less secret the receiver checks (the signature already authenticates us).
        Ok(u) if !u.username().is_empty() || u.password().is_some() => {
            errs.push("webhook.url: must not contain user:password@".to_owned());
            None
        }
        Ok(u) if u.scheme() == "https" => Some(u),
        Ok(u) if u.scheme() == "http" && is_loopback_host(u.host_str().unwrap_or_default()) => {
            Some(u)
        }
        Ok(_) => {
            errs.push("webhook.url: must be https (http only on loopback)".to_owned());
            None
        }
        Err(e) => {
            errs.push(format!("webhook.url: {e}"));
            None
        }
    };
    let secret = resolve_secret(
        "webhook.secret",
        w.secret.as_ref(),
        w.secret_file.as_ref(),
        w.secret_env.as_ref(),
        env,
        errs,
    );
    if secret.as_ref().is_none_or(|s| s.len() < 16) {
        errs.push(
            "webhook.secret: required (or secret_file / secret_env), at least 16 characters"
                .to_owned(),
        );
    }
    let events = if w.events.iter().any(|e| e == "all") {
        if w.events.len() > 1 {
            errs.push("webhook.events: \"all\" cannot be combined with other kinds".to_owned());
        }
        None
    } else {
        if w.events.is_empty() {
            errs.push("webhook.events: name at least one event kind, or \"all\"".to_owned());
        }
        for e in &w.events {
            if super::Kind::from_name(e).is_none() {
                errs.push(format!(
                    "webhook.events: {e:?} is not an event kind (see docs/CONFIG.md)"
                ));
            }
        }
        Some(w.events.iter().cloned().collect())
    };
    if !(1..=1_000_000).contains(&w.queue_size) {
        errs.push("webhook.queue_size: between 1 and 1000000".to_owned());
    }
    if !(1..=100).contains(&w.max_attempts) {
        errs.push("webhook.max_attempts: between 1 and 100".to_owned());
    }
    if w.backoff_ms == 0 || w.backoff_ms > w.max_backoff_ms {
        errs.push("webhook.backoff_ms: at least 1 and at most max_backoff_ms".to_owned());
    }
    if !(1..=120).contains(&w.timeout_secs) {
        errs.push("webhook.timeout_secs: between 1 and 120".to_owned());
    }
    let proxy = match w.proxy.as_deref().map(Url::parse) {
        None => None,
        Some(Ok(u))
            if matches!(u.scheme(), "http" | "https")
                && u.username().is_empty()
                && u.password().is_none() =>
        {
            Some(u)
        }
        // Not echoed: a proxy URL may carry credentials.
        Some(_) => {
            errs.push(
                "webhook.proxy: an http(s) URL without credentials, e.g. \"http://proxy.internal:3128\""
                    .to_owned(),
            );
            None
        }
    };
    Some(WebhookConfig {
        url: url?,
        secret: Arc::new(WebhookSecret::new(secret?)),
        events,
        queue_size: w.queue_size,
        max_attempts: w.max_attempts,
        backoff_ms: w.backoff_ms,
        max_backoff_ms: w.max_backoff_ms,
        timeout_secs: w.timeout_secs,
        proxy,
    })
}
