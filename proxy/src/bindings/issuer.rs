//! Binding: an authorization response ↔ the server that sent it (RFC 9207). This is the only
//! place that builds a redirect back to an MCP client, it takes the `RedirectMatched` proof,
//! and it always appends `iss`, byte-identical to the metadata `issuer`, on success and error
//! responses alike.

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
