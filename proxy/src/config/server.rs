//! `[server]`: the issuer, the listen address, TLS and the grace period, the edge limits
//! (`http::edge`), the browser origins allowed on `/mcp` and the trusted proxies
//! (`http::client_ip`). Each piece is validated by the subsystem that reads it; the section is
//! split into three steps so errors keep the order they have always been listed in.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use url::Url;

use super::tls;
use crate::bindings::issuer::PublicUrl;
use crate::http::client_ip::TrustedProxies;
use crate::http::edge::{EdgeLimits, RawEdgeLimits};
use crate::shutdown::DEFAULT_SHUTDOWN_GRACE_SECS;
use crate::tls::TlsFiles;

/// `[server]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    public_url: String,
    #[serde(default = "default_listen")]
    listen: String,
    resource_name: Option<String>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    #[serde(default = "super::tls::default_shutdown_grace")]
    shutdown_grace_secs: u64,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    forwarded_header: Option<String>,
    // What a connection may cost: validated by `http::edge` (defaults and reasons there).
    header_read_timeout_secs: Option<u64>,
    body_read_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    max_connections: Option<u64>,
    max_connections_per_source: Option<u64>,
    max_header_bytes: Option<u64>,
    http2_max_concurrent_streams: Option<u64>,
    http2_max_pending_reset_streams: Option<u64>,
    http2_max_local_error_resets: Option<u64>,
    response_stall_timeout_secs: Option<u64>,
    response_write_timeout_secs: Option<u64>,
    form_body_read_timeout_secs: Option<u64>,
    max_body_bytes: Option<u64>,
    max_body_bytes_per_source: Option<u64>,
    mcp_max_body_bytes_per_token: Option<u64>,
    mcp_max_requests_per_token: Option<u64>,
}

fn default_listen() -> String {
    "127.0.0.1:8080".to_owned()
}

/// The first step of `[server]`, validated.
pub(super) struct Server {
    /// `None`: missing or invalid (reported).
    pub public_url: Option<PublicUrl>,
    /// `None`: missing or invalid (reported).
    pub listen: Option<SocketAddr>,
    pub resource_name: String,
    pub tls: Option<TlsFiles>,
    pub shutdown_grace_secs: u64,
    pub edge: EdgeLimits,
}

impl Server {
    /// The issuer, TLS, grace period, edge limits and listen address.
    pub(super) fn from_raw(server: Option<&RawServer>, errs: &mut Vec<String>) -> Server {
        if server.is_none() {
            errs.push("[server] is missing (public_url is required)".to_owned());
        }
        let public_url = server.and_then(|s| match PublicUrl::parse(&s.public_url) {
            Ok(u) => Some(u),
            Err(e) => {
                errs.push(e);
                None
            }
        });
        let tls = server.and_then(|s| {
            tls::validate_tls(
                s.tls_cert.as_ref(),
                s.tls_key.as_ref(),
                public_url.as_ref(),
                errs,
            )
        });
        let shutdown_grace_secs = server.map_or(DEFAULT_SHUTDOWN_GRACE_SECS, |s| {
            crate::shutdown::validate_grace(s.shutdown_grace_secs, errs);
            s.shutdown_grace_secs
        });
        let edge = EdgeLimits::from_raw(
            &server.map_or_else(Default::default, |s| RawEdgeLimits {
                header_read_timeout_secs: s.header_read_timeout_secs,
                body_read_timeout_secs: s.body_read_timeout_secs,
                idle_timeout_secs: s.idle_timeout_secs,
                max_connections: s.max_connections,
                max_connections_per_source: s.max_connections_per_source,
                max_header_bytes: s.max_header_bytes,
                http2_max_concurrent_streams: s.http2_max_concurrent_streams,
                http2_max_pending_reset_streams: s.http2_max_pending_reset_streams,
                http2_max_local_error_resets: s.http2_max_local_error_resets,
                response_stall_timeout_secs: s.response_stall_timeout_secs,
                response_write_timeout_secs: s.response_write_timeout_secs,
                form_body_read_timeout_secs: s.form_body_read_timeout_secs,
                max_body_bytes: s.max_body_bytes,
                max_body_bytes_per_source: s.max_body_bytes_per_source,
                mcp_max_body_bytes_per_token: s.mcp_max_body_bytes_per_token,
                mcp_max_requests_per_token: s.mcp_max_requests_per_token,
            }),
            errs,
        );
        let listen = server.and_then(|s| match s.listen.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(e) => {
                errs.push(format!("server.listen: {e}"));
                None
            }
        });
        Server {
            public_url,
            listen,
            resource_name: server
                .and_then(|s| s.resource_name.clone())
                .unwrap_or_else(|| "GitHub tools via mcp-oauth-proxy".to_owned()),
            tls,
            shutdown_grace_secs,
            edge,
        }
    }
}

/// `[server] allowed_origins`: origins (scheme, host, port) besides the proxy's own that may
/// call `/mcp` from a browser (the gateway checks `Origin`, the HTTP layer answers CORS).
pub(super) fn allowed_origins(server: Option<&RawServer>, errs: &mut Vec<String>) -> Vec<String> {
    let mut allowed_origins = Vec::new();
    for o in server
        .map(|s| s.allowed_origins.as_slice())
        .unwrap_or_default()
    {
        match Url::parse(o) {
            Ok(u)
                if matches!(u.scheme(), "https" | "http")
                    && u.path() == "/"
                    && u.query().is_none() =>
            {
                allowed_origins.push(u.origin().ascii_serialization());
            }
            _ => errs.push(format!(
                "server.allowed_origins: {o:?} is not an origin like https://app.example.com"
            )),
        }
    }
    allowed_origins
}

/// `[server] trusted_proxies` and `forwarded_header` (validated by `http::client_ip`).
pub(super) fn trusted_proxies(
    server: Option<&RawServer>,
    errs: &mut Vec<String>,
) -> TrustedProxies {
    crate::http::client_ip::trusted_proxies(
        server
            .map(|s| s.trusted_proxies.as_slice())
            .unwrap_or_default(),
        server.and_then(|s| s.forwarded_header.as_deref()),
        errs,
    )
}
