//! `[server] tls_cert`, `tls_key` and `shutdown_grace_secs`. The certificate and key are loaded
//! and checked here, at configuration time, so a bad pair is a config error (exit 64) and not a
//! failure after start. Serving TLS requires an `https://` public URL (the issuer must name the
//! scheme clients actually use).

use std::path::PathBuf;

use super::PublicUrl;

/// Default grace period for in-flight requests and streams on SIGTERM.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 30;
/// Longest grace period accepted.
const MAX_SHUTDOWN_GRACE_SECS: u64 = 3600;

pub(super) fn default_shutdown_grace() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_SECS
}

/// The PEM files the proxy serves HTTPS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Certificate chain, leaf first.
    pub cert: PathBuf,
    /// Private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// Validates `tls_cert` / `tls_key`: both or neither, both loadable as a matching pair, and an
/// https public URL when set.
pub(super) fn validate_tls(
    cert: Option<&PathBuf>,
    key: Option<&PathBuf>,
    public_url: Option<&PublicUrl>,
    errs: &mut Vec<String>,
) -> Option<TlsFiles> {
    let files = match (cert, key) {
        (None, None) => return None,
        (Some(cert), Some(key)) => TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
        },
        _ => {
            errs.push("server.tls_cert and server.tls_key: give both (HTTPS) or neither (plain HTTP behind a TLS-terminating proxy)".to_owned());
            return None;
        }
    };
    if let Some(u) = public_url
        && u.is_http()
    {
        errs.push(format!(
            "server.public_url: must be https:// when the proxy serves TLS itself, not {:?}",
            u.issuer()
        ));
    }
    match crate::tls::load_certified_key(&files) {
        Ok(_) => Some(files),
        Err(e) => {
            errs.push(format!("server.tls_cert / tls_key: {e}"));
            None
        }
    }
}

/// Validates `shutdown_grace_secs`.
pub(super) fn validate_grace(secs: u64, errs: &mut Vec<String>) {
    if secs > MAX_SHUTDOWN_GRACE_SECS {
        errs.push(format!(
            "server.shutdown_grace_secs: at most {MAX_SHUTDOWN_GRACE_SECS}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;
    use std::collections::HashMap;

    const BASE: &str = r#"
[github]
client_id = "Iv1.abc"
client_secret = "s3cret"
[store]
path = "/tmp/x"
"#;

    fn server(public_url: &str, extra: &str) -> String {
        format!("[server]\npublic_url = \"{public_url}\"\n{extra}\n{BASE}")
    }

    #[test]
    fn tls_needs_both_files() {
        let e = Config::from_toml(
            &server("https://mcp.example.com", "tls_cert = \"/x/cert.pem\""),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("give both"), "{e}");
    }

    #[test]
    fn unreadable_tls_files_are_config_errors_naming_the_file() {
        let e = Config::from_toml(
            &server(
                "https://mcp.example.com",
                "tls_cert = \"/nonexistent/cert.pem\"\ntls_key = \"/nonexistent/key.pem\"",
            ),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
    }

    #[test]
    fn tls_with_an_http_public_url_is_refused() {
        let e = Config::from_toml(
            &server(
                "http://127.0.0.1:8443",
                "tls_cert = \"/nonexistent/cert.pem\"\ntls_key = \"/nonexistent/key.pem\"",
            ),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("must be https://"), "{e}");
    }

    #[test]
    fn grace_defaults_and_is_bounded() {
        let c = Config::from_toml(&server("https://mcp.example.com", ""), &HashMap::new()).unwrap();
        assert_eq!(c.shutdown_grace_secs, super::DEFAULT_SHUTDOWN_GRACE_SECS);
        assert!(c.tls.is_none());
        let e = Config::from_toml(
            &server("https://mcp.example.com", "shutdown_grace_secs = 100000"),
            &HashMap::new(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("shutdown_grace_secs"), "{e}");
    }
}
