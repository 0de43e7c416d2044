//! The dependencies every flow needs, built once at start: configuration, keys, store, clock,
//! the GitHub client, the grant store and the audit sink.

use std::sync::Arc;

use crate::audit::Audit;
use crate::clients::Directory;
use crate::clients::fetch::{Resolver, SystemResolver};
use crate::clock::SharedClock;
use crate::config::{Config, Keys};
use crate::github::client::{GitHubClient, GitHubError};
use crate::github::grants::Grants;
use crate::limits::Limits;
use crate::metrics::Metrics;
use crate::oauth::scope::ScopeSet;
use crate::store::SharedStore;

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
    /// Configuration.
    pub config: Config,
    /// Keys.
    pub keys: Keys,
    /// Store.
    pub store: SharedStore,
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
    pub backend_http: Option<reqwest::Client>,
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

    /// Wires the application together.
    pub fn new(
        config: Config,
        keys: Keys,
        store: SharedStore,
        clock: SharedClock,
    ) -> Result<App, AppError> {
        App::new_with_resolver(config, keys, store, clock, Arc::new(SystemResolver))
    }

    /// [`App::new`] with the resolver client metadata documents are fetched through (tests
    /// inject one to map names to addresses).
    pub fn new_with_resolver(
        config: Config,
        keys: Keys,
        store: SharedStore,
        clock: SharedClock,
        resolver: Arc<dyn Resolver>,
    ) -> Result<App, AppError> {
        // Every store call is timed, whichever backend was opened.
        let metrics = Metrics::new();
        let store: SharedStore = Arc::new(crate::store::MeteredStore::new(store, metrics.clone()));
        let github = GitHubClient::new(config.github.clone(), &config.github_callback_url())?;
        let mut audit =
            Audit::new(store.clone(), clock.clone(), metrics.clone()).with_alerts(&config.alerts);
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
                crate::outbound::backend(std::time::Duration::from_secs(b.connect_timeout_secs))
                    .map_err(|e| AppError::Backend(e.without_url().to_string()))?,
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
            clock,
            github,
            grants,
            audit,
            metrics,
            offered_scopes,
            drain: crate::shutdown::Drain::new(),
        })))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::SledStore;

    fn config(extra: &str) -> Config {
        let toml = format!(
            "[server]\npublic_url = \"https://mcp.example.com\"\n[github]\nclient_id = \"x\"\nclient_secret = \"y\"\n[store]\npath = \"/tmp/x\"\n{extra}"
        );
        Config::from_toml(&toml, &std::collections::HashMap::new())
            .unwrap_or_else(|e| panic!("{:?}", e.0))
    }

    /// A webhook that cannot start (here: no runtime to deliver on) stops the start instead of
    /// leaving the proxy running without the alerts it was configured to send.
    #[test]
    fn configured_webhook_that_cannot_start_fails_the_start_instead_of_silencing_alerts() {
        let clock: SharedClock = ManualClock::new(crate::clock::UnixTime(1_700_000_000));
        let store: SharedStore = Arc::new(SledStore::temporary(clock.clone()).unwrap());
        let with_hook = config(
            "[webhook]\nurl = \"https://hooks.example.com/mcp\"\nsecret = \"0123456789abcdef0123\"\n",
        );
        let keys = Keys::generate().unwrap();
        match App::new(with_hook, keys.clone(), store.clone(), clock.clone()) {
            Err(AppError::Webhook(why)) => assert!(why.contains("runtime"), "{why}"),
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("started without its webhook"),
        }
        // The same without a webhook starts.
        assert!(App::new(config(""), keys, store, clock).is_ok());
    }
}
