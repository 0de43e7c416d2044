//! `[log]`, `[alerts]` and `[webhook]`: how audit events are logged, when detection rules
//! fire, and where operator events are POSTed.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use url::Url;

use super::{Env, resolve_secret};
use crate::ids::WebhookSecret;

/// `[log]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLog {
    format: Option<String>,
}

/// `[alerts]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAlerts {
    wrong_audience_threshold: u32,
    wrong_audience_window_secs: u64,
    new_client_secs: u64,
}

impl Default for RawAlerts {
    fn default() -> Self {
        let d = AlertPolicy::default();
        RawAlerts {
            wrong_audience_threshold: d.wrong_audience_threshold,
            wrong_audience_window_secs: d.wrong_audience_window_secs,
            new_client_secs: d.new_client_secs,
        }
    }
}

/// `[webhook]`. No Debug: may hold the secret inline.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
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
}

impl Default for AlertPolicy {
    fn default() -> Self {
        AlertPolicy {
            wrong_audience_threshold: 10,
            wrong_audience_window_secs: 60,
            new_client_secs: 600,
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

/// The three sections, validated.
pub(super) struct AuditSections {
    pub log: LogConfig,
    pub alerts: AlertPolicy,
    pub webhook: Option<WebhookConfig>,
}

/// Validates `[log]`, `[alerts]` and `[webhook]`, pushing one readable line per problem.
pub(super) fn validate(
    log: &RawLog,
    alerts: &RawAlerts,
    webhook: Option<&RawWebhook>,
    env: &dyn Env,
    errs: &mut Vec<String>,
) -> AuditSections {
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
    if alerts.wrong_audience_threshold == 0 {
        errs.push("alerts.wrong_audience_threshold: at least 1".to_owned());
    }
    if !(1..=86_400).contains(&alerts.wrong_audience_window_secs) {
        errs.push("alerts.wrong_audience_window_secs: between 1 and 86400".to_owned());
    }
    if alerts.new_client_secs > 7 * 86_400 {
        errs.push("alerts.new_client_secs: at most 604800".to_owned());
    }
    AuditSections {
        log: LogConfig { format },
        alerts: AlertPolicy {
            wrong_audience_threshold: alerts.wrong_audience_threshold,
            wrong_audience_window_secs: alerts.wrong_audience_window_secs,
            new_client_secs: alerts.new_client_secs,
        },
        webhook: webhook.and_then(|w| validate_webhook(w, env, errs)),
    }
}

fn validate_webhook(
    w: &RawWebhook,
    env: &dyn Env,
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
        Ok(u)
            if u.scheme() == "http"
                && super::is_loopback_host(u.host_str().unwrap_or_default()) =>
        {
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
            if !crate::audit::KINDS.contains(&e.as_str()) {
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

#[cfg(test)]
mod tests {
    use super::super::Config;
    use super::*;

    fn base(extra: &str) -> String {
        format!(
            "[server]\npublic_url = \"https://mcp.example.com\"\n[github]\nclient_id = \"x\"\nclient_secret = \"y\"\n[store]\npath = \"/tmp/x\"\n{extra}"
        )
    }

    fn load(extra: &str) -> Result<Config, Vec<String>> {
        Config::from_toml(&base(extra), &std::collections::HashMap::new()).map_err(|e| e.0)
    }

    #[test]
    fn defaults_are_text_logs_default_thresholds_and_no_webhook() {
        let c = load("").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.log.format, LogFormat::Text);
        assert_eq!(c.alerts.wrong_audience_threshold, 10);
        assert!(c.webhook.is_none());
    }

    #[test]
    fn a_full_webhook_section_is_accepted() {
        let c = load(
            "[log]\nformat = \"json\"\n[alerts]\nwrong_audience_threshold = 3\nwrong_audience_window_secs = 30\n[webhook]\nurl = \"https://hooks.example.com/mcp\"\nsecret = \"0123456789abcdef0123\"\nevents = [\"alert_raised\", \"token_rejected\"]\nqueue_size = 8\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.log.format, LogFormat::Json);
        assert_eq!(c.alerts.wrong_audience_window_secs, 30);
        let w = c.webhook.unwrap_or_else(|| panic!("webhook"));
        assert_eq!(w.queue_size, 8);
        assert_eq!(w.events.map(|e| e.len()), Some(2));
        assert!(!format!("{:?}", w.secret).contains("0123456789"));
        assert!(w.proxy.is_none(), "no proxy unless configured");
    }

    #[test]
    fn webhook_url_secrets_never_print_and_credentials_are_refused() {
        let c = load(
            "[webhook]\nurl = \"https://hooks.example.com:8443/services/T0/B0/hook-path-secret?token=query-secret\"\nsecret = \"0123456789abcdef0123\"\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let shown = format!("{:?}", c.webhook.unwrap_or_else(|| panic!("webhook")));
        assert!(
            shown.contains("https://hooks.example.com:8443/[redacted]"),
            "{shown}"
        );
        for secret in ["hook-path-secret", "query-secret", "0123456789"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        let errs = load(
            "[webhook]\nurl = \"https://user:pw-secret@hooks.example.com/x\"\nsecret = \"0123456789abcdef0123\"\n",
        )
        .err()
        .unwrap_or_default();
        assert!(
            errs.iter()
                .any(|e| e.contains("webhook.url: must not contain")),
            "{errs:?}"
        );
        assert!(!errs.iter().any(|e| e.contains("pw-secret")), "{errs:?}");
    }

    #[test]
    fn a_webhook_proxy_is_an_http_url_without_credentials() {
        let with = |proxy: &str| {
            load(&format!(
                "[webhook]\nurl = \"https://hooks.example.com/mcp\"\nsecret = \"0123456789abcdef0123\"\nproxy = \"{proxy}\"\n"
            ))
        };
        let c = with("http://proxy.internal:3128").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            c.webhook.and_then(|w| w.proxy).map(|u| u.to_string()),
            Some("http://proxy.internal:3128/".to_owned())
        );
        for bad in [
            "http://user:pw@proxy.internal:3128",
            "socks5://p:1080",
            "nope",
        ] {
            let errs = with(bad).err().unwrap_or_default();
            assert!(
                errs.iter().any(|e| e.contains("webhook.proxy")),
                "{bad}: {errs:?}"
            );
            assert!(!errs.iter().any(|e| e.contains("pw@")), "{errs:?}");
        }
    }

    #[test]
    fn admin_event_kinds_can_be_selected() {
        let c = load(
            "[webhook]\nurl = \"https://hooks.example.com/mcp\"\nsecret = \"0123456789abcdef0123\"\nevents = [\"grant_revoked_by_admin\", \"client_deleted\"]\n",
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.webhook.and_then(|w| w.events).map(|e| e.len()), Some(2));
    }

    #[test]
    fn bad_sections_report_every_problem() {
        let errs = load(
            "[log]\nformat = \"xml\"\n[alerts]\nwrong_audience_threshold = 0\n[webhook]\nurl = \"http://hooks.example.com\"\nsecret = \"short\"\nevents = [\"token_stolen\"]\nmax_attempts = 0\n",
        )
        .err()
        .unwrap_or_default();
        for needle in [
            "log.format",
            "alerts.wrong_audience_threshold",
            "webhook.url",
            "webhook.secret",
            "\"token_stolen\" is not an event kind",
            "webhook.max_attempts",
        ] {
            assert!(
                errs.iter().any(|e| e.contains(needle)),
                "{needle}: {errs:?}"
            );
        }
    }
}
