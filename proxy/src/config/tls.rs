//! `[server] tls_cert`, `tls_key` and `shutdown_grace_secs`, assembled from `tls` (the files,
//! loaded and checked at configuration time, so a bad pair is a config error (exit 64) and not
//! a failure after start) and `shutdown` (the grace period). Serving TLS requires an
//! `https://` public URL (the issuer must name the scheme clients actually use).

use std::path::PathBuf;

use super::PublicUrl;
pub use crate::shutdown::DEFAULT_SHUTDOWN_GRACE_SECS;
pub use crate::tls::TlsFiles;

pub(super) fn default_shutdown_grace() -> u64 {
    DEFAULT_SHUTDOWN_GRACE_SECS
}

/// Validates `tls_cert` / `tls_key` (`tls::TlsFiles`: both or neither, both loadable as a
/// matching pair) and, across sections, that serving TLS goes with an https public URL.
pub(super) fn validate_tls(
    cert: Option<&PathBuf>,
    key: Option<&PathBuf>,
    public_url: Option<&PublicUrl>,
    errs: &mut Vec<String>,
) -> Option<TlsFiles> {
    let files = TlsFiles::from_raw(cert, key, errs)?;
    if let Some(u) = public_url
        && u.is_http()
    {
        errs.push(format!(
            "server.public_url: must be https:// when the proxy serves TLS itself, not {:?}",
            u.issuer()
        ));
    }
    files.loadable(errs)
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
