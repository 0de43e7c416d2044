//! Binding: a token ↔ the one resource it is for (RFC 8707). `resource` is required or
//! defaulted to this proxy's single MCP resource at /authorize and /token, and codes, access
//! tokens and refresh families carry it. Any other value is `invalid_target`. (The gateway's
//! check of tokens presented at /mcp uses the same canonical value.)

use std::sync::Arc;

use crate::oauth::error::{ErrorCode, OAuthError};

/// The canonical MCP resource a code or token is bound to. Only this module makes one
/// ([`check_resource`], [`recheck`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::audience::Audience;
/// // Private field: a resource is not an audience until it was checked.
/// let forged = Audience("https://elsewhere.example/mcp".to_owned());
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::audience::{Audience, check_resource};
/// let a: Audience = check_resource(None, "https://mcp.example.com/mcp").unwrap();
/// assert_eq!(a.as_str(), "https://mcp.example.com/mcp");
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Audience(String);

impl Audience {
    /// The canonical URI.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const INVALID_TARGET: OAuthError = OAuthError::new(
    ErrorCode::InvalidTarget,
    "resource is not this server's MCP endpoint",
);

/// Checks a `resource` parameter against the canonical MCP URI. Scheme and host compare
/// case-insensitively (MCP: "SHOULD accept uppercase scheme and host"); the rest, including
/// any trailing slash, query or fragment, must be identical. A missing `resource` defaults to
/// the only resource this proxy serves (older clients omit it).
pub fn check_resource(requested: Option<&str>, canonical: &str) -> Result<Audience, OAuthError> {
    let Some(r) = requested else {
        return Ok(Audience(canonical.to_owned()));
    };
    if r == canonical {
        return Ok(Audience(canonical.to_owned()));
    }
    // Only the case of scheme and host may differ. Compare text, not a parsed URL: a parser
    // normalises ports, percent-escapes, backslashes and whitespace into "the same" origin.
    let split = |s: &str| -> Option<(String, String)> {
        let (scheme, rest) = s.split_once("://")?;
        let end = rest.find('/').unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let plain = authority
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
        plain.then(|| {
            (
                format!(
                    "{}://{}",
                    scheme.to_ascii_lowercase(),
                    authority.to_ascii_lowercase()
                ),
                path.to_owned(),
            )
        })
    };
    match (split(r), split(canonical)) {
        (Some(a), Some(b)) if a == b => Ok(Audience(canonical.to_owned())),
        _ => Err(INVALID_TARGET),
    }
}

/// A token record proven to be for this server's resource. Only this module makes one
/// ([`audienced`]); the gateway forwards only requests that carry one.
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::audience::Audienced;
/// use mcp_oauth_proxy::store::records::AccessTokenRecord;
/// // Private field: a token for another resource cannot be passed off as checked.
/// fn forge(record: AccessTokenRecord) -> Audienced<AccessTokenRecord> {
///     Audienced(record)
/// }
/// ```
///
/// ```
/// use mcp_oauth_proxy::bindings::audience::{AudienceRejection, Audienced, audienced};
/// use mcp_oauth_proxy::store::records::AccessTokenRecord;
/// fn check(record: AccessTokenRecord) -> Result<Audienced<AccessTokenRecord>, AudienceRejection> {
///     audienced(record, "https://mcp.example.com/mcp")
/// }
/// ```
#[derive(Debug)]
pub struct Audienced<T>(Arc<T>);

impl<T> Audienced<T> {
    /// The checked value.
    pub fn get(&self) -> &T {
        &self.0
    }
}

/// A token for another resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AudienceRejection;

/// Accepts an access token record only if its audience is exactly `canonical`.
/// The record may be shared (`/mcp` checks share it with the replica's record cache).
pub fn audienced(
    record: impl Into<Arc<crate::store::records::AccessTokenRecord>>,
    canonical: &str,
) -> Result<Audienced<crate::store::records::AccessTokenRecord>, AudienceRejection> {
    let record = record.into();
    if record.resource == canonical {
        Ok(Audienced(record))
    } else {
        Err(AudienceRejection)
    }
}

/// Checks that a stored code's or family's audience is still the one requested at /token
/// (a `resource` at /token may only repeat what was granted).
pub fn recheck(stored: &str, requested: Option<&str>) -> Result<Audience, OAuthError> {
    match requested {
        None => Ok(Audience(stored.to_owned())),
        Some(_) => {
            let a = check_resource(requested, stored)?;
            Ok(a)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "https://mcp.example.com/mcp";

    #[test]
    fn canonical_and_missing_accepted() {
        assert_eq!(check_resource(Some(C), C).unwrap().as_str(), C);
        assert_eq!(check_resource(None, C).unwrap().as_str(), C);
        assert_eq!(
            check_resource(Some("HTTPS://MCP.Example.com/mcp"), C)
                .unwrap()
                .as_str(),
            C
        );
    }

    #[test]
    fn token_for_other_resource_rejected() {
        for bad in [
            "https://other.example.com/mcp",
            "https://mcp.example.com/mcp/",
            "https://mcp.example.com/MCP",
            "https://mcp.example.com/mcp?utm_source=x",
            "https://mcp.example.com/mcp#x",
            "https://mcp.example.com",
            "https://mcp.example.com:8443/mcp",
            "http://mcp.example.com/mcp",
            "https://api.github.com",
            "https://attacker@mcp.example.com/mcp",
            "https://attacker:pw@mcp.example.com/mcp",
            "not a url",
        ] {
            let e = check_resource(Some(bad), C).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidTarget, "{bad}");
        }
    }

    #[test]
    fn recheck_keeps_the_granted_audience() {
        assert_eq!(recheck(C, None).unwrap().as_str(), C);
        assert_eq!(
            recheck(C, Some("https://other.example/mcp"))
                .unwrap_err()
                .code,
            ErrorCode::InvalidTarget
        );
    }
}
