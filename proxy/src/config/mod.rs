//! Configuration: parsed from TOML, secrets from the file itself, a file, or an environment
//! variable, and validated as a whole so every error is reported before any port is bound.
//! The environment is read through [`Env`], so tests inject it instead of mutating the process.
//!
//! This module only assembles. Each section's raw shape, validated type and validation belong
//! to the subsystem that reads it (`session::SessionPolicy::from_raw`, `github::GitHubConfig`,
//! `audit::WebhookConfig`, …); `from_toml` calls them one step per section and checks the rules
//! that span sections. Only the entry points import this module (`.ci/import-graph --check`);
//! the re-exports below keep the old `config::…` paths working for them and for tests.

use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

use crate::bindings::admission::AccessPolicy;
pub use crate::bindings::backend::{BackendAuth, BackendConfig};
pub use crate::bindings::connect_link::ConnectPolicy;
pub use crate::bindings::issuer::PublicUrl;
pub use crate::clients::{CimdPolicy, PreregisteredClient, RegistrationMode, RegistrationPolicy};
pub use crate::github::GitHubConfig;
pub use crate::http::client_ip::{ForwardedHeader, TrustedProxies};
pub use crate::limits::{RateLimit, RateLimits};
pub use crate::oauth::policy::TokenPolicy;
pub use crate::secrets::{Env, KEY_NAMES, Keys, ProcessEnv, RawKeys};
pub use crate::session::SessionPolicy;
pub use crate::store::StoreConfig;

mod app;
mod audit;
mod server;
pub use crate::audit::{AlertPolicy, GroupCommit, LogConfig, LogFormat, WebhookConfig};
mod tls;
pub use tls::{DEFAULT_SHUTDOWN_GRACE_SECS, TlsFiles};

/// Everything wrong with a configuration, each line one problem.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
pub struct ConfigError(pub Vec<String>);

// ---- raw TOML shape -------------------------------------------------------------------------

// No Debug: holds inline secrets.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    server: Option<server::RawServer>,
    github: Option<crate::github::RawGitHub>,
    #[serde(default)]
    store: crate::store::RawStore,
    keys: Option<RawKeys>,
    #[serde(default)]
    tokens: crate::oauth::policy::RawTokens,
    #[serde(default)]
    session: crate::session::RawSession,
    backend: Option<crate::bindings::backend::RawBackend>,
    #[serde(default)]
    connect: crate::bindings::connect_link::RawConnect,
    #[serde(default)]
    audit: crate::audit::RawAudit,
    #[serde(default)]
    log: crate::audit::RawLog,
    #[serde(default)]
    alerts: crate::audit::RawAlerts,
    webhook: Option<crate::audit::RawWebhook>,
    #[serde(default)]
    clients: Vec<crate::clients::RawClient>,
    #[serde(default)]
    cimd: crate::clients::RawCimd,
    #[serde(default)]
    registration: crate::clients::RawRegistration,
    #[serde(default)]
    rate_limits: crate::limits::RawRateLimits,
    #[serde(default)]
    admin: crate::admin::RawAdmin,
    /// Owned and validated by the admission binding.
    #[serde(default)]
    access: crate::bindings::admission::RawAccess,
    /// Owned by `telemetry`, which checks its keys.
    telemetry: Option<toml::Table>,
    /// `[[policy]]`: owned and validated by `tool_policy`.
    #[serde(default)]
    policy: Vec<crate::tool_policy::RawRule>,
    #[serde(default)]
    policy_defaults: crate::tool_policy::RawDefaults,
}

// ---- validated shape ------------------------------------------------------------------------

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Issuer and public base URL, without a trailing slash, e.g. `https://mcp.example.com`.
    pub public_url: PublicUrl,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// `resource_name` in protected resource metadata.
    pub resource_name: String,
    /// Upstream GitHub OAuth client.
    pub github: GitHubConfig,
    /// Storage location.
    pub store: StoreConfig,
    /// `store.record_cache_entries`: entries of the `/mcp` checks' record cache (0: off).
    pub record_cache_entries: usize,
    /// Keys from configuration, or `None` to generate and keep them in the store directory.
    pub keys: Option<Keys>,
    /// Client-facing token lifetimes.
    pub tokens: TokenPolicy,
    /// Browser session policy.
    pub session: SessionPolicy,
    /// Origins (besides the proxy's own) allowed to call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// The backend MCP server behind `/mcp`, if configured.
    pub backend: Option<BackendConfig>,
    /// Connect links.
    pub connect: ConnectPolicy,
    /// `[audit]`: the background group commit of upstream-action events.
    pub group_commit: GroupCommit,
    /// `[log]`.
    pub log: LogConfig,
    /// `[alerts]`: detection thresholds.
    pub alerts: AlertPolicy,
    /// `[webhook]`: operator event sink, if configured.
    pub webhook: Option<WebhookConfig>,
    /// PEM files to serve HTTPS with; `None`: plain HTTP (behind a TLS-terminating proxy).
    pub tls: Option<TlsFiles>,
    /// On SIGTERM, how long in-flight requests and streams may take before they are closed.
    pub shutdown_grace_secs: u64,
    /// Clients configured ahead of time (`[[clients]]`).
    pub clients: Vec<PreregisteredClient>,
    /// Client ID Metadata Documents (`[cimd]`).
    pub cimd: CimdPolicy,
    /// Who may register clients dynamically, and registration housekeeping.
    pub registration: RegistrationPolicy,
    /// Rate limits on `/register` and `/token`.
    pub rate_limits: RateLimits,
    /// Load balancers whose forwarded headers name the client IP.
    pub trusted_proxies: TrustedProxies,
    /// What one connection may cost: timeouts, connection caps, HTTP/2 limits.
    pub edge: crate::http::edge::EdgeLimits,
    /// The admin listener (metrics, health, admin API).
    pub admin: crate::admin::AdminConfig,
    /// `[access]`: who may sign in (GitHub orgs, teams, people), and how often it is re-checked.
    pub access: crate::bindings::admission::AccessPolicy,
    /// `[telemetry]`: where traces are exported; `None`: off.
    pub telemetry: Option<crate::telemetry::TelemetryConfig>,
    /// `[[policy]]` and `[policy_defaults]`: what each tool call may do. The only part a
    /// SIGHUP reloads (`run::reload_config`).
    pub policy: crate::tool_policy::Policy,
}

/// Default size of sled's page cache, MiB (the store's; re-exported for the bench).
pub use crate::store::DEFAULT_SLED_CACHE_MB;

impl Config {
    /// Parses and validates a TOML document. Each section is validated by the subsystem that
    /// owns its settings; this only assembles them, one step per section, plus the rules that
    /// span sections. Every problem is reported, in the order the steps run.
    pub fn from_toml(text: &str, env: &dyn Env) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError(vec![e.to_string()]))?;
        let mut errs = Vec::new();
        let e = &mut errs;
        let server = server::Server::from_raw(raw.server.as_ref(), e);
        let github = github(raw.github.as_ref(), env, e);
        let store = store(&raw, env, e);
        let record_cache_entries = raw.store.record_cache_entries(e);
        let keys = raw.keys.as_ref().and_then(|k| Keys::from_raw(k, env, e));
        let tokens = TokenPolicy::from_raw(&raw.tokens, e);
        let session = SessionPolicy::from_raw(&raw.session, e);
        let connect = ConnectPolicy::from_raw(&raw.connect, e);
        let allowed_origins = server::allowed_origins(raw.server.as_ref(), e);
        let backend = backend(&raw, env, e);
        let audit = audit::validate(
            &raw.audit,
            &raw.log,
            &raw.alerts,
            raw.webhook.as_ref(),
            env,
            e,
        );
        let clients = crate::clients::validate_clients(&raw.clients, e);
        let cimd = crate::clients::validate_cimd(&raw.cimd, e);
        let registration = crate::clients::validate_registration(&raw.registration, env, e);
        let rate_limits = crate::limits::rate_limits(&raw.rate_limits, e);
        let trusted_proxies = server::trusted_proxies(raw.server.as_ref(), e);
        let admin = crate::admin::validate(&raw.admin, server.listen, env, e);
        let access = AccessPolicy::from_raw(
            &raw.access,
            github
                .as_ref()
                .map(|g| g.scopes.as_slice())
                .unwrap_or_default(),
            e,
        );
        let policy = policy(&raw, e);
        let telemetry = crate::telemetry::TelemetryConfig::from_section(raw.telemetry, e);

        match (server.public_url, server.listen, github, store) {
            (Some(public_url), Some(listen), Some(github), Some(store)) if errs.is_empty() => {
                Ok(Config {
                    group_commit: audit.group_commit,
                    log: audit.log,
                    alerts: audit.alerts,
                    webhook: audit.webhook,
                    clients,
                    cimd,
                    registration,
                    rate_limits,
                    trusted_proxies,
                    edge: server.edge,
                    admin,
                    access,
                    telemetry,
                    policy,
                    connect,
                    allowed_origins,
                    backend,
                    resource_name: server.resource_name,
                    public_url,
                    listen,
                    github,
                    store,
                    record_cache_entries,
                    keys,
                    tokens,
                    session,
                    tls: server.tls,
                    shutdown_grace_secs: server.shutdown_grace_secs,
                })
            }
            _ => Err(ConfigError(errs)),
        }
    }

    /// Reads and validates a config file.
    pub fn load(path: &Path, env: &dyn Env) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(vec![format!("{}: {e}", path.display())]))?;
        Config::from_toml(&text, env)
    }

    /// What an operator must hear about a valid configuration (`check-config` prints these,
    /// `serve` logs them at start), e.g. that every GitHub account is admitted.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = self.access.warnings();
        w.extend(self.policy.warnings());
        w
    }

    /// The GitHub callback URL registered at GitHub.
    pub fn github_callback_url(&self) -> String {
        self.public_url.join("/callback/github")
    }
}

/// `[github]`, which is required.
fn github(
    raw: Option<&crate::github::RawGitHub>,
    env: &dyn Env,
    errs: &mut Vec<String>,
) -> Option<GitHubConfig> {
    match raw {
        None => {
            errs.push("[github] is missing (client_id and client_secret are required)".to_owned());
            None
        }
        Some(g) => GitHubConfig::from_raw(g, env, errs),
    }
}

/// `[store]`, and across sections: replicas sharing a database must share keys.
fn store(raw: &RawConfig, env: &dyn Env, errs: &mut Vec<String>) -> Option<StoreConfig> {
    let store = StoreConfig::from_raw(&raw.store, env, errs);
    if matches!(store, Some(StoreConfig::Postgres { .. })) && raw.keys.is_none() {
        errs.push(
            "[keys]: required with store.url (every replica must use the same keys)".to_owned(),
        );
    }
    store
}

/// `[backend]`, and across sections: the scopes it requires must be ones GitHub is asked for
/// (checked against `[github]` as written, even when that section has errors of its own).
fn backend(raw: &RawConfig, env: &dyn Env, errs: &mut Vec<String>) -> Option<BackendConfig> {
    let backend = raw
        .backend
        .as_ref()
        .and_then(|b| BackendConfig::from_raw(b, env, errs));
    if let (Some(b), Some(g)) = (&backend, &raw.github)
        && let Some(s) = b.required_scopes.iter().find(|s| !g.scopes().contains(s))
    {
        errs.push(format!(
            "backend.required_scopes: {s:?} is not one of github.scopes"
        ));
    }
    backend
}

/// `[[policy]]` and `[policy_defaults]`, and across sections: a `step_up` scope is either one
/// of `[github] scopes` (every new token carries it: the rule refuses only tokens from before
/// it was configured) or a tool permission of this server, which must not be named like a
/// GitHub scope (the consent page would show it as GitHub access it is not); and `people`
/// rules on orgs or teams need a GitHub token that can read private memberships — without one
/// GitHub refuses the membership question and no sign-in could be decided, as for `[access]`.
fn policy(raw: &RawConfig, errs: &mut Vec<String>) -> crate::tool_policy::Policy {
    let policy = crate::tool_policy::Policy::from_raw(&raw.policy, &raw.policy_defaults, errs);
    let Some(g) = &raw.github else {
        return policy;
    };
    let offered = g.scopes();
    for (i, rule) in policy.summary().rules.iter().enumerate() {
        for s in rule.scopes.iter().flatten() {
            if !offered.contains(s) && crate::bindings::consent_scope::is_github_scope(s) {
                errs.push(format!(
                    "policy[{i}] (id {:?}): scopes: {s:?} is a GitHub scope but not one of \
                     github.scopes: add it there (every new token then carries it), or name a \
                     tool permission of this server instead (e.g. \"tools:write\")",
                    rule.id
                ));
            }
        }
    }
    if !policy.questions().is_empty()
        && !offered
            .iter()
            .any(|s| crate::bindings::admission::ORG_READING_SCOPES.contains(&s.as_str()))
    {
        errs.push(
            "policy: people rules on org: or team: need \"read:org\" in [github] scopes \
             (GitHub refuses membership questions from a token without it, so no sign-in \
             could be decided)"
                .to_owned(),
        );
    }
    policy
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto;
    use std::collections::HashMap;

    const MINIMAL: &str = r#"
[server]
public_url = "https://mcp.example.com/"
[github]
client_id = "Iv1.abc"
client_secret = "s3cret"
[store]
path = "/tmp/x"
"#;

    #[test]
    fn minimal_config_gets_defaults_and_one_issuer_spelling() {
        let c = Config::from_toml(MINIMAL, &HashMap::new()).unwrap();
        assert_eq!(c.public_url.issuer(), "https://mcp.example.com");
        assert_eq!(c.public_url.mcp_resource(), "https://mcp.example.com/mcp");
        assert_eq!(c.github.scopes, vec!["read:user"]);
        assert_eq!(
            c.github.token_url.as_str(),
            "https://github.com/login/oauth/access_token"
        );
        assert!(c.keys.is_none());
    }

    #[test]
    fn http_public_url_is_refused_unless_loopback() {
        let bad = MINIMAL.replace("https://mcp.example.com/", "http://mcp.example.com");
        let e = Config::from_toml(&bad, &HashMap::new()).unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
        let ok = MINIMAL.replace("https://mcp.example.com/", "http://127.0.0.1:8080");
        Config::from_toml(&ok, &HashMap::new()).unwrap();
    }

    /// Plain http is for loopback development only, and "loopback" is the redirect binding's
    /// one definition (the consent page's): 127.0.0.2 is not, for any URL in the file.
    #[test]
    fn plain_http_urls_use_the_redirect_bindings_loopback_definition() {
        for (host, loopback) in [
            ("127.0.0.1", true),
            ("[::1]", true),
            ("localhost", true),
            ("127.0.0.2", false),
            ("[::2]", false),
            ("localhost.example", false),
        ] {
            let url = format!("http://{host}:8080");
            let parsed = url::Url::parse(&url).unwrap();
            assert_eq!(
                crate::bindings::redirect::is_loopback_host(parsed.host_str().unwrap()),
                loopback,
                "{host}"
            );
            let public = MINIMAL.replace("https://mcp.example.com/", &url);
            let github = MINIMAL.replace(
                "client_secret = \"s3cret\"",
                &format!("client_secret = \"s3cret\"\napi_url = \"{url}\""),
            );
            let webhook = format!(
                "{MINIMAL}[webhook]\nurl = \"{url}/hook\"\nsecret = \"0123456789abcdef0123\"\n"
            );
            for text in [&public, &github, &webhook] {
                assert_eq!(
                    Config::from_toml(text, &HashMap::new()).is_ok(),
                    loopback,
                    "{host}: {text}"
                );
            }
        }
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let text = r#"
[server]
public_url = "ftp://x"
listen = "nonsense"
[github]
client_id = ""
client_secret_env = "MISSING_VAR"
[tokens]
code_ttl_secs = 5
"#;
        let e = Config::from_toml(text, &HashMap::new()).unwrap_err();
        let all = e.0.join("\n");
        for needle in [
            "public_url",
            "listen",
            "client_id",
            "MISSING_VAR",
            "store.path",
            "code_ttl_secs",
        ] {
            assert!(all.contains(needle), "missing {needle} in {all}");
        }
    }

    #[test]
    fn secrets_come_from_env_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("secret");
        std::fs::write(&f, "from-file\n").unwrap();
        let text = MINIMAL.replace(
            "client_secret = \"s3cret\"",
            &format!("client_secret_file = \"{}\"", f.display()),
        );
        let c = Config::from_toml(&text, &HashMap::new()).unwrap();
        assert_eq!(c.github.client_secret.secret(), "from-file");

        let k = |b: u8| crypto::b64(&[b; 32]);
        let env: HashMap<String, String> = [("CK".to_owned(), k(1))].into_iter().collect();
        let text = format!(
            "{MINIMAL}\n[keys]\nconsent_cookie_env = \"CK\"\ncsrf = \"{}\"\ntoken_encryption = \"{}\"\nconnect_link = \"{}\"\nrequest_state = \"{}\"\n",
            k(2),
            k(3),
            k(4),
            k(5)
        );
        let c = Config::from_toml(&text, &env).unwrap();
        assert_eq!(c.keys.unwrap().consent_cookie.secret(), &[1u8; 32]);
    }

    #[test]
    fn one_key_for_two_purposes_is_refused() {
        let k = crypto::b64(&[7u8; 32]);
        let text = format!(
            "{MINIMAL}\n[keys]\nconsent_cookie = \"{k}\"\ncsrf = \"{k}\"\ntoken_encryption = \"{k}\"\nconnect_link = \"{k}\"\nrequest_state = \"{k}\"\n"
        );
        let e = Config::from_toml(&text, &HashMap::new()).unwrap_err();
        assert!(e.to_string().contains("one key, one purpose"), "{e}");
    }

    #[test]
    fn record_cache_defaults_may_be_turned_off_and_is_bounded() {
        let c = Config::from_toml(MINIMAL, &HashMap::new()).unwrap();
        assert_eq!(c.record_cache_entries, crate::store::cache::DEFAULT_ENTRIES);
        for (set, want) in [("0", 0), ("1000000", 1_000_000)] {
            let text = MINIMAL.replace(
                "path = \"/tmp/x\"",
                &format!("path = \"/tmp/x\"\nrecord_cache_entries = {set}"),
            );
            let c = Config::from_toml(&text, &HashMap::new()).unwrap();
            assert_eq!(c.record_cache_entries, want);
        }
        let text = MINIMAL.replace(
            "path = \"/tmp/x\"",
            "path = \"/tmp/x\"\nrecord_cache_entries = 1000001",
        );
        let e = Config::from_toml(&text, &HashMap::new()).unwrap_err();
        assert!(e.to_string().contains("store.record_cache_entries"), "{e}");
    }

    #[test]
    fn sled_cache_defaults_is_bounded_and_is_sled_only() {
        let c = Config::from_toml(MINIMAL, &HashMap::new()).unwrap();
        assert!(matches!(
            c.store,
            StoreConfig::Sled { cache_bytes, .. } if cache_bytes == DEFAULT_SLED_CACHE_MB << 20
        ));
        let set = MINIMAL.replace("path = \"/tmp/x\"", "path = \"/tmp/x\"\ncache_mb = 32");
        let c = Config::from_toml(&set, &HashMap::new()).unwrap();
        assert!(
            matches!(c.store, StoreConfig::Sled { cache_bytes, .. } if cache_bytes == 32 << 20)
        );
        for bad in ["0", "3", "65537"] {
            let text = MINIMAL.replace(
                "path = \"/tmp/x\"",
                &format!("path = \"/tmp/x\"\ncache_mb = {bad}"),
            );
            let e = Config::from_toml(&text, &HashMap::new()).unwrap_err();
            assert!(e.to_string().contains("store.cache_mb"), "{e}");
        }
        let pg = MINIMAL.replace(
            "path = \"/tmp/x\"",
            "url = \"postgres://u@db.example/mcp\"\ncache_mb = 64",
        );
        let e = Config::from_toml(&pg, &HashMap::new()).unwrap_err();
        assert!(e.to_string().contains("only for the sled store"), "{e}");
    }

    #[test]
    fn postgres_store_needs_shared_keys_and_excludes_sled() {
        let pg = MINIMAL.replace("path = \"/tmp/x\"", "url = \"postgres://u@db.example/mcp\"");
        let e = Config::from_toml(&pg, &HashMap::new()).unwrap_err();
        assert!(
            e.to_string()
                .contains("every replica must use the same keys"),
            "{e}"
        );
        let both = MINIMAL.replace(
            "path = \"/tmp/x\"",
            "path = \"/tmp/x\"\nurl = \"postgres://u@db/x\"",
        );
        assert!(
            Config::from_toml(&both, &HashMap::new())
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        let k = |b: u8| crypto::b64(&[b; 32]);
        let with_keys = format!(
            "{pg}\n[keys]\nconsent_cookie = \"{}\"\ncsrf = \"{}\"\ntoken_encryption = \"{}\"\nconnect_link = \"{}\"\nrequest_state = \"{}\"\n",
            k(1),
            k(2),
            k(3),
            k(4),
            k(5)
        );
        let c = Config::from_toml(&with_keys, &HashMap::new()).unwrap();
        assert!(matches!(c.store, StoreConfig::Postgres { .. }));
        assert!(
            !format!("{c:?}").contains("db.example"),
            "the URL (it may hold a password) is not printed"
        );
    }

    #[test]
    fn policy_is_validated_with_the_rest_and_checked_against_github_scopes() {
        let ok = format!(
            "{MINIMAL}\n[[policy]]\nid = \"all\"\ntools = [\"*\"]\ndecision = \"allow\"\n\
             [[policy]]\nid = \"never\"\ntools = [\"delete_*\"]\ndecision = \"deny\"\n"
        );
        let c = Config::from_toml(&ok, &HashMap::new()).unwrap();
        assert_eq!(c.policy.describe(), "2 rules, default allow");
        assert!(
            c.warnings()
                .iter()
                .any(|w| w.contains("policy[1] (id \"never\"): unreachable behind policy[0]")),
            "{:?}",
            c.warnings()
        );
        for (policy, want) in [
            (
                "[[policy]]\nid = \"x\"\ntools = [\"a\"]\ndecision = \"step_up\"\nscopes = [\"repo\"]",
                "policy[0] (id \"x\"): scopes: \"repo\" is a GitHub scope but not one of github.scopes",
            ),
            (
                "[[policy]]\nid = \"x\"\ntools = [\"a\"]\npeople = [\"team:acme/ops\"]\ndecision = \"deny\"",
                "people rules on org: or team: need \"read:org\"",
            ),
            (
                "[[policy]]\nid = \"x\"\ntools = [\"[\"]\ndecision = \"deny\"",
                "bad glob",
            ),
            (
                "[policy_defaults]\ndecision = \"ask\"",
                "policy_defaults.decision",
            ),
            (
                "[[policy]]\nid = \"x\"\ntools = [\"a\"]\ndecision = \"deny\"\nextra = 1",
                "unknown field",
            ),
        ] {
            let e = Config::from_toml(&format!("{MINIMAL}\n{policy}\n"), &HashMap::new())
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{policy}\n→ {e}");
        }
        // With the scopes the rules need, the same rules pass.
        let scoped = MINIMAL.replace(
            "client_secret = \"s3cret\"",
            "client_secret = \"s3cret\"\nscopes = [\"read:user\", \"repo\", \"read:org\"]",
        );
        let text = format!(
            "{scoped}\n[[policy]]\nid = \"x\"\ntools = [\"a\"]\ndecision = \"step_up\"\nscopes = [\"repo\"]\n\
             [[policy]]\nid = \"y\"\ntools = [\"b\"]\npeople = [\"team:acme/ops\"]\ndecision = \"deny\"\n"
        );
        Config::from_toml(&text, &HashMap::new()).unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let text = format!("{MINIMAL}\n[session]\nmax_age = 5\n");
        assert!(Config::from_toml(&text, &HashMap::new()).is_err());
    }

    #[test]
    fn generated_keys_are_owner_only_and_reloaded() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let a = Keys::load_or_generate(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join("keys.toml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let b = Keys::load_or_generate(dir.path()).unwrap();
        assert_eq!(a.csrf.secret(), b.csrf.secret());
    }
}
