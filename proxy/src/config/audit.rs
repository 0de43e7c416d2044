//! `[audit]`, `[log]`, `[alerts]` and `[webhook]`, assembled from the audit subsystem's
//! settings (`audit::settings`, which validates each section).

use crate::audit::{
    AlertPolicy, GroupCommit, LogConfig, RawAlerts, RawAudit, RawLog, RawWebhook, WebhookConfig,
};
use crate::bindings::redirect::is_loopback_host;
use crate::secrets::Env;

/// The four sections, validated.
pub(super) struct AuditSections {
    pub group_commit: GroupCommit,
    pub log: LogConfig,
    pub alerts: AlertPolicy,
    pub webhook: Option<WebhookConfig>,
}

/// Validates `[audit]`, `[log]`, `[alerts]` and `[webhook]`, pushing one readable line per
/// problem.
pub(super) fn validate(
    audit: &RawAudit,
    log: &RawLog,
    alerts: &RawAlerts,
    webhook: Option<&RawWebhook>,
    env: &dyn Env,
    errs: &mut Vec<String>,
) -> AuditSections {
    AuditSections {
        group_commit: GroupCommit::from_raw(audit, errs),
        log: LogConfig::from_raw(log, errs),
        alerts: AlertPolicy::from_raw(alerts, errs),
        webhook: webhook.and_then(|w| WebhookConfig::from_raw(w, env, is_loopback_host, errs)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use crate::audit::LogFormat;

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
    fn the_upstream_action_commit_window_defaults_to_10_ms_and_256_events_and_is_bounded() {
        let c = load("").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.group_commit.window_ms, 10);
        assert_eq!(c.group_commit.max_events, 256);
        let c =
            load("[audit]\nupstream_action_commit_ms = 250\nupstream_action_commit_events = 1\n")
                .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(c.group_commit.window_ms, 250);
        assert_eq!(c.group_commit.max_events, 1);
        let errs =
            load("[audit]\nupstream_action_commit_ms = 0\nupstream_action_commit_events = 10001\n")
                .err()
                .unwrap_or_default();
        for needle in [
            "audit.upstream_action_commit_ms: between 1 and 1000",
            "audit.upstream_action_commit_events: between 1 and 10000",
        ] {
            assert!(
                errs.iter().any(|e| e.contains(needle)),
                "{needle}: {errs:?}"
            );
        }
        let errs = load("[audit]\nupstream_action_commit_ms = 1001\n")
            .err()
            .unwrap_or_default();
        assert!(
            errs.iter()
                .any(|e| e.contains("audit.upstream_action_commit_ms")),
            "{errs:?}"
        );
        let errs = load("[audit]\ncommit_ms = 5\n").err().unwrap_or_default();
        assert!(
            errs.iter().any(|e| e.contains("unknown field `commit_ms`")),
            "{errs:?}"
        );
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
