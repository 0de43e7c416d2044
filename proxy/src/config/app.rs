//! What the application and the HTTP listener get of a [`Config`]: `App` holds only the
//! subsystem-owned settings request paths read ([`crate::app::Settings`]); the HTTP layer gets
//! its own ([`crate::http::Settings`]) when the listener is built. The conversion lives here,
//! at the entry point, so `app` and `http` never import `config`.

use super::Config;
use crate::app::Settings;

impl From<Config> for Settings {
    fn from(c: Config) -> Settings {
        Settings {
            public_url: c.public_url,
            resource_name: c.resource_name,
            allowed_origins: c.allowed_origins,
            github: c.github,
            tokens: c.tokens,
            session: c.session,
            backend: c.backend,
            connect: c.connect,
            alerts: c.alerts,
            webhook: c.webhook,
            group_commit: c.group_commit,
            store_cache_entries: c.record_cache_entries,
            clients: c.clients,
            cimd: c.cimd,
            registration: c.registration,
            rate_limits: c.rate_limits,
            access: c.access,
            admin_token: c.admin.token,
            policy: std::sync::Arc::new(crate::tool_policy::LivePolicy::new(c.policy)),
        }
    }
}

impl Config {
    /// What the HTTP listener reads itself: the edge limits and the trusted proxies.
    pub fn http(&self) -> crate::http::Settings {
        crate::http::Settings {
            edge: self.edge,
            trusted_proxies: self.trusted_proxies.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Keys};
    use crate::app::{App, AppError};
    use crate::clock::{ManualClock, SharedClock};
    use crate::store::{SharedStore, SledStore};
    use std::sync::Arc;

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
