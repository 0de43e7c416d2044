//! The dependencies every flow needs, built once at start: the settings request paths read,
//! keys, store, clock, the GitHub client, the grant store and the audit sink.
//!
//! `App` never holds the whole configuration: [`Settings`] is made of the types each subsystem
//! owns (`config/app.rs` builds it from a `Config`), so nothing below the entry points
//! depends on `config/`. What only a listener reads (bind addresses, TLS files, the HTTP edge
//! limits and trusted proxies, the grace period) is handed to that listener by `run`.

use std::sync::Arc;

use crate::audit::{AlertPolicy, Audit, GroupCommit, WebhookConfig};
use crate::bindings::admission::AccessPolicy;
use crate::bindings::backend::BackendConfig;
use crate::bindings::connect_link::ConnectPolicy;
use crate::bindings::issuer::PublicUrl;
use crate::clients::fetch::{Resolver, SystemResolver};
use crate::clients::{CimdPolicy, Directory, PreregisteredClient, RegistrationPolicy};
use crate::clock::SharedClock;
use crate::github::GitHubConfig;
use crate::github::client::{GitHubClient, GitHubError};
use crate::github::grants::Grants;
use crate::ids::AdminToken;
use crate::limits::{Limits, RateLimits};
use crate::metrics::Metrics;
use crate::oauth::policy::TokenPolicy;
use crate::oauth::scope::ScopeSet;
use crate::secrets::Keys;
use crate::session::SessionPolicy;
use crate::store::SharedStore;
use crate::tool_policy::{LivePolicy, Policy};

/// What the application reads of the configuration, each part a type its subsystem owns and
/// validated there (field names as in `Config`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// Issuer and public base URL.
    pub public_url: PublicUrl,
    /// `resource_name` in protected resource metadata.
    pub resource_name: String,
    /// Origins (besides the proxy's own) allowed to call `/mcp` from a browser.
    pub allowed_origins: Vec<String>,
    /// Upstream GitHub OAuth client.
    pub github: GitHubConfig,
    /// Client-facing token lifetimes.
    pub tokens: TokenPolicy,
    /// Browser session policy.
    pub session: SessionPolicy,
    /// The backend MCP server behind `/mcp`, if configured.
    pub backend: Option<BackendConfig>,
    /// Connect links.
    pub connect: ConnectPolicy,
    /// Detection thresholds.
    pub alerts: AlertPolicy,
    /// Operator event sink, if configured.
    pub webhook: Option<WebhookConfig>,
    /// How upstream-action events are made durable in the background.
    pub group_commit: GroupCommit,
    /// Entries of the `/mcp` checks' record cache (`store::cache`; 0: off).
    pub store_cache_entries: usize,
    /// Clients configured ahead of time.
    pub clients: Vec<PreregisteredClient>,
    /// Client ID Metadata Documents.
    pub cimd: CimdPolicy,
    /// Who may register clients dynamically, and registration housekeeping.
    pub registration: RegistrationPolicy,
    /// Rate limits on the public endpoints.
    pub rate_limits: RateLimits,
    /// Who may sign in.
    pub access: AccessPolicy,
    /// The admin API's bearer token; `None`: the admin API is off.
    pub admin_token: Option<Arc<AdminToken>>,
    /// `[[policy]]` and `[policy_defaults]`, live: a SIGHUP may replace it (read it through
    /// [`App::policy`] per call, never keep it).
    pub policy: Arc<LivePolicy>,
}

impl Settings {
    /// The GitHub callback URL registered at GitHub.
    pub fn github_callback_url(&self) -> String {
        self.public_url.join("/callback/github")
    }
}

/// Why the application could not be wired together; reported at start, before any port is
/// bound, like a configuration error.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The GitHub client could not be built.
    #[error("GitHub client: {0}")]
    GitHub(#[from] GitHubError),
    /// The HTTP client toward the backend could not be built.
    #[error("backend client: {0}")]
    Backend(String),
    /// A configured webhook could not start: the proxy does not run without the alerts it
    /// was configured to send.
    #[error("webhook: {0}")]
    Webhook(String),
}

/// Shared application state.
#[derive(Clone)]
pub struct App(Arc<Inner>);

/// The fields behind [`App`].
pub struct Inner {
    /// What request paths read of the configuration.
    pub config: Settings,
    /// Keys.
    pub keys: Keys,
    /// Store.
    pub store: SharedStore,
    /// The `/mcp` checks' record cache inside `store` (for metrics).
    pub record_cache: Arc<crate::store::CachingStore>,
    /// Clock.
    pub clock: SharedClock,
    /// GitHub client.
    pub github: GitHubClient,
    /// GitHub grants.
    pub grants: Grants,
    /// Audit sink.
    pub audit: Audit,
    /// Metrics registry.
    pub metrics: Metrics,
    /// Scopes MCP clients may ask for (the GitHub scopes configured).
    pub offered_scopes: ScopeSet,
    /// HTTP client toward the backend MCP server, if one is configured.
    pub backend_http: Option<crate::outbound::Backend>,
    /// The shutdown grace deadline that ends streaming responses.
    pub drain: crate::shutdown::Drain,
    /// Client lookup: configured, metadata-document and registered clients.
    pub clients: Directory,
    /// Rate limiters for `/register` and `/token`.
    pub limits: Limits,
}

impl std::ops::Deref for App {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl App {
    /// Which earlier approvals may quiet consent warnings and alerts (`bindings::approvals`).
    pub fn approval_rules(&self) -> crate::bindings::approvals::ApprovalRules<'_> {
        crate::bindings::approvals::ApprovalRules {
            admission_open: self.config.access.is_open(),
            trusted_hosts: &self.config.registration.trusted_redirect_hosts,
        }
    }

    /// Wires the application together from its settings (a `Config` converts: `config/app.rs`).
    pub fn new(
        config: impl Into<Settings>,
        keys: Keys,
        store: SharedStore,
        clock: SharedClock,
    ) -> Result<App, AppError> {
        App::new_with_resolver(config, keys, store, clock, Arc::new(SystemResolver))
    }

    /// [`App::new`] with the resolver client metadata documents are fetched through (tests
    /// inject one to map names to addresses).
    pub fn new_with_resolver(
        config: impl Into<Settings>,
        keys: Keys,
        store: SharedStore,
        clock: SharedClock,
        resolver: Arc<dyn Resolver>,
    ) -> Result<App, AppError> {
        let config: Settings = config.into();
        // The `/mcp` checks' records are cached, exactly (`store::cache`); every store call
        // is timed, whichever backend was opened.
        let metrics = Metrics::new();
        let cached = Arc::new(crate::store::CachingStore::new(
            store,
            config.store_cache_entries,
            clock.clone(),
        ));
        let record_cache = cached.clone();
        let store: SharedStore = Arc::new(crate::store::MeteredStore::new(cached, metrics.clone()));
        let github = GitHubClient::new(config.github.clone(), &config.github_callback_url())?;
        let mut audit = Audit::new(store.clone(), clock.clone(), metrics.clone())
            .with_alerts(&config.alerts)
            .with_group_commit(config.group_commit);
        if let Some(hook) = &config.webhook {
            match crate::audit::webhook::Webhook::start(
                hook.clone(),
                clock.clone(),
                metrics.clone(),
            ) {
                Ok(w) => audit = audit.with_webhook(w),
                Err(e) => return Err(AppError::Webhook(e)),
            }
        }
        let grants = Grants::new(
            store.clone(),
            keys.token_encryption.clone(),
            github.clone(),
            clock.clone(),
            audit.clone(),
        );
        let offered_scopes = ScopeSet::from_list(config.github.scopes.iter().cloned());
        let backend_http = match &config.backend {
            Some(b) => Some(
                crate::outbound::backend(
                    &b.url,
                    std::time::Duration::from_secs(b.connect_timeout_secs),
                )
                .map_err(AppError::Backend)?,
            ),
            None => None,
        };
        let clients = Directory::new(
            &config.clients,
            config.cimd,
            config.registration.unused_client_ttl_secs,
            store.clone(),
            clock.clone(),
            offered_scopes.clone(),
            resolver,
        );
        let limits = Limits::new(&config.rate_limits, clock.clone());
        Ok(App(Arc::new(Inner {
            clients,
            limits,
            backend_http,
            config,
            keys,
            store,
            record_cache,
            clock,
            github,
            grants,
            audit,
            metrics,
            offered_scopes,
            drain: crate::shutdown::Drain::new(),
        })))
    }

    /// The tool-call policy in force now (one read lock and an `Arc` clone): what a
    /// `tools/call` or `tools/list` is decided with, start to end.
    pub fn policy(&self) -> Arc<Policy> {
        self.config.policy.current()
    }

    /// The tool permissions clients may ask for besides `[github] scopes`: the `step_up`
    /// scopes of the policy in force that are not GitHub scopes (they add no GitHub access).
    pub fn tool_permissions(&self) -> ScopeSet {
        ScopeSet::from_list(
            self.policy()
                .step_up_scopes()
                .into_iter()
                // Never a GitHub scope, even one a reloaded file adds to `[github] scopes`
                // before a restart makes it one: only a restart changes what GitHub is asked.
                .filter(|s| {
                    !self.offered_scopes.contains(s)
                        && !crate::bindings::consent_scope::is_github_scope(s)
                }),
        )
    }

    /// Every scope a client may ask for: `[github] scopes` and the tool permissions.
    pub fn supported_scopes(&self) -> ScopeSet {
        self.offered_scopes.union(&self.tool_permissions())
    }

    /// Puts a new tool-call policy in force (a SIGHUP with a valid configuration).
    pub fn replace_policy(&self, policy: Policy) {
        self.config.policy.replace(policy);
    }

    /// The canonical MCP resource URI.
    pub fn resource(&self) -> String {
        self.config.public_url.mcp_resource()
    }

    /// The issuer.
    pub fn issuer(&self) -> &str {
        self.config.public_url.issuer()
    }
}
