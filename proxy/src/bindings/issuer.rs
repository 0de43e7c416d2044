//! Binding: an authorization response ↔ the server that sent it (RFC 9207). This is the only
//! place that builds a redirect back to an MCP client, it takes the `RedirectMatched` proof,
//! and it always appends `iss`, byte-identical to the metadata `issuer`, on success and error
//! responses alike.

use url::Url;

use super::redirect::RedirectMatched;
use crate::oauth::error::ErrorCode;

/// What goes back to the client.
#[derive(Debug)]
pub enum Response<'a> {
    /// Success: the code.
    Code(&'a str),
    /// Error with a safe description.
    Error(ErrorCode, &'a str),
}

/// Builds the redirect URL: the registered URI with `code` (or `error` and
/// `error_description`), the client's `state` and `iss` appended to any query it already has.
pub fn client_redirect(
    redirect: &RedirectMatched,
    issuer: &str,
    response: Response<'_>,
    state: Option<&str>,
) -> String {
    let mut ser = url::form_urlencoded::Serializer::new(String::new());
    match response {
        Response::Code(code) => {
            ser.append_pair("code", code);
        }
        Response::Error(code, description) => {
            ser.append_pair("error", code.as_str());
            ser.append_pair("error_description", description);
        }
    }
    if let Some(s) = state {
        ser.append_pair("state", s);
    }
    ser.append_pair("iss", issuer);
    let params = ser.finish();
    let uri = redirect.uri();
    let sep = if uri.contains('?') { '&' } else { '?' };
    format!("{uri}{sep}{params}")
}

/// The proxy's public URL (`[server] public_url`): the OAuth issuer; the MCP resource is this
/// plus `/mcp`. Here, beside the `iss` it is appended as, so every subsystem that names the
/// issuer reads the one spelling validated once; plain http only on a host the redirect
/// binding calls loopback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// Validates a public URL: https (or http on a loopback host), no query, fragment or
    /// userinfo. A trailing slash is removed so the issuer has one spelling.
    pub fn parse(s: &str) -> Result<PublicUrl, String> {
        let url = Url::parse(s).map_err(|e| format!("server.public_url: {e}"))?;
        let host = url.host_str().unwrap_or_default();
        match url.scheme() {
            "https" => {}
            "http" if super::redirect::is_loopback_host(host) => {}
            "http" => {
                return Err(format!(
                    "server.public_url: http:// is accepted only for loopback hosts, not {host:?}; use https:// (TLS in front of the proxy is fine)"
                ));
            }
            other => return Err(format!("server.public_url: unsupported scheme {other:?}")),
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err("server.public_url: must not have a query or fragment".to_owned());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("server.public_url: must not contain user info".to_owned());
        }
        if url.path() != "/" {
            return Err("server.public_url: must be an origin without a path (the proxy serves /authorize, /mcp, … at its root)".to_owned());
        }
        let s = url.as_str().trim_end_matches('/').to_owned();
        Ok(PublicUrl(s))
    }
    /// The issuer identifier, byte-identical everywhere it appears.
    pub fn issuer(&self) -> &str {
        &self.0
    }
    /// The canonical MCP resource URI.
    pub fn mcp_resource(&self) -> String {
        format!("{}/mcp", self.0)
    }
    /// `public_url + path` (path starts with `/`).
    pub fn join(&self, path: &str) -> String {
        format!("{}{}", self.0, path)
    }
    /// Scheme, host and port, for `Origin` checks.
    pub fn origin(&self) -> String {
        Url::parse(&self.0)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default()
    }
    /// Whether the public URL is plain http (loopback development only).
    pub fn is_http(&self) -> bool {
        self.0.starts_with("http://")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::redirect::match_redirect;
    use crate::ids::ClientId;

    fn r(uri: &str) -> RedirectMatched {
        match_redirect(&ClientId::new("c"), &[uri.to_owned()], Some(uri)).unwrap()
    }

    #[test]
    fn iss_on_success_and_error() {
        let ok = client_redirect(
            &r("https://a.example/cb"),
            "https://mcp.example.com",
            Response::Code("xyz"),
            Some("s t"),
        );
        assert_eq!(
            ok,
            "https://a.example/cb?code=xyz&state=s+t&iss=https%3A%2F%2Fmcp.example.com"
        );
        let err = client_redirect(
            &r("https://a.example/cb?x=1"),
            "https://mcp.example.com",
            Response::Error(ErrorCode::AccessDenied, "denied"),
            None,
        );
        assert_eq!(
            err,
            "https://a.example/cb?x=1&error=access_denied&error_description=denied&iss=https%3A%2F%2Fmcp.example.com"
        );
    }
}
