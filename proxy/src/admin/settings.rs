//! `[admin]`: the admin listener (metrics, health, admin API). Loopback by default: it exposes
//! operational data and, with a token, the power to revoke anything.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;

use crate::ids::AdminToken;
use crate::secrets::{Env, resolve_secret};

/// Shortest admin token accepted.
pub const MIN_TOKEN_LEN: usize = 32;

// No Debug: may hold the token inline.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    listen: Option<String>,
    #[serde(default)]
    dangerous_allow_non_loopback: bool,
    token: Option<String>,
    token_file: Option<PathBuf>,
    token_env: Option<String>,
}

/// The validated `[admin]` section.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Where metrics, health and the admin API are served.
    pub listen: SocketAddr,
    /// Bearer token for `/admin/api/…`; `None` disables the admin API (metrics and health
    /// are still served).
    pub token: Option<Arc<AdminToken>>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            token: None,
        }
    }
}

/// Validates `[admin]`, pushing readable errors into `errs`; `main_listen` is
/// `[server] listen` (the two must differ).
pub fn validate(
    raw: &RawAdmin,
    main_listen: Option<SocketAddr>,
    env: &dyn Env,
    errs: &mut Vec<String>,
) -> AdminConfig {
    let mut cfg = AdminConfig::default();
    if let Some(l) = &raw.listen {
        match l.parse::<SocketAddr>() {
            Ok(a) => cfg.listen = a,
            Err(e) => errs.push(format!("admin.listen: {e}")),
        }
    }
    if !cfg.listen.ip().is_loopback() && !raw.dangerous_allow_non_loopback {
        errs.push(format!(
            "admin.listen: {} is not a loopback address; the admin listener exposes metrics and \
             the admin API, so keep it on 127.0.0.1/::1 (or set dangerous_allow_non_loopback = \
             true behind a firewall)",
            cfg.listen
        ));
    }
    if main_listen == Some(cfg.listen) && cfg.listen.port() != 0 {
        errs.push(format!(
            "admin.listen: {} is also server.listen; use another port",
            cfg.listen
        ));
    }
    let token = resolve_secret(
        "admin.token",
        raw.token.as_ref(),
        raw.token_file.as_ref(),
        raw.token_env.as_ref(),
        env,
        errs,
    );
    if let Some(t) = token {
        if t.chars().count() < MIN_TOKEN_LEN || t.trim() != t {
            errs.push(format!(
                "admin.token: at least {MIN_TOKEN_LEN} characters without surrounding spaces \
                 (e.g. `openssl rand -base64 32`)"
            ));
        } else {
            cfg.token = Some(Arc::new(AdminToken::new(t)));
        }
    }
    cfg
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn check(toml_text: &str, env: &HashMap<String, String>) -> (AdminConfig, Vec<String>) {
        let raw: RawAdmin = toml::from_str(toml_text).unwrap();
        let mut errs = Vec::new();
        let cfg = validate(
            &raw,
            Some("127.0.0.1:8080".parse().unwrap()),
            env,
            &mut errs,
        );
        (cfg, errs)
    }

    #[test]
    fn defaults_to_loopback_9090_without_a_token() {
        let (cfg, errs) = check("", &HashMap::new());
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(cfg.listen.to_string(), "127.0.0.1:9090");
        assert!(cfg.token.is_none());
    }

    #[test]
    fn non_loopback_listen_is_refused_unless_explicitly_allowed() {
        let (_, errs) = check("listen = \"0.0.0.0:9090\"", &HashMap::new());
        assert!(errs[0].contains("not a loopback address"), "{errs:?}");
        let (cfg, errs) = check(
            "listen = \"0.0.0.0:9090\"\ndangerous_allow_non_loopback = true",
            &HashMap::new(),
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(cfg.listen.to_string(), "0.0.0.0:9090");
    }

    #[test]
    fn short_token_is_refused_and_env_token_is_read() {
        let (cfg, errs) = check("token = \"short\"", &HashMap::new());
        assert!(cfg.token.is_none());
        assert!(errs[0].contains("at least 32"), "{errs:?}");
        let env = HashMap::from([("ADM".to_owned(), "x".repeat(40))]);
        let (cfg, errs) = check("token_env = \"ADM\"", &env);
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(cfg.token.unwrap().secret(), "x".repeat(40));
        let (_, errs) = check("token_env = \"MISSING\"", &env);
        assert!(errs[0].contains("MISSING"), "{errs:?}");
    }

    #[test]
    fn same_address_as_the_main_listener_is_refused() {
        let (_, errs) = check("listen = \"127.0.0.1:8080\"", &HashMap::new());
        assert!(errs[0].contains("also server.listen"), "{errs:?}");
    }

    #[test]
    fn token_is_never_printed() {
        let (cfg, _) = check(&format!("token = \"{}\"", "s".repeat(32)), &HashMap::new());
        assert!(!format!("{cfg:?}").contains("ssss"));
    }
}
