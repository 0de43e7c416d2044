//! Typed requests parsed at the edge. Repeated parameters are refused (RFC 6749 §3.1: "MUST
//! NOT be included more than once"), so no handler ever sees an ambiguous map.

use std::collections::BTreeMap;

use super::error::{ErrorCode, OAuthError};
use crate::ids::{AuthCode, ClientId, ClientSecret, CodeVerifier, RefreshToken};

/// Parsed `application/x-www-form-urlencoded` parameters with each name at most once.
#[derive(Debug, Default)]
pub struct Params(BTreeMap<String, String>);

impl Params {
    /// Parses a query string or form body; a repeated name or an empty name is an error.
    pub fn parse(raw: &str) -> Result<Params, OAuthError> {
        let mut map = BTreeMap::new();
        for (k, v) in url::form_urlencoded::parse(raw.as_bytes()) {
            if k.is_empty() {
                continue;
            }
            if map.insert(k.into_owned(), v.into_owned()).is_some() {
                return Err(OAuthError::new(
                    ErrorCode::InvalidRequest,
                    "a parameter was repeated",
                ));
            }
        }
        Ok(Params(map))
    }
    /// A parameter; an empty value counts as absent (RFC 6749 §3.1).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
    /// A required parameter.
    pub fn require(&self, name: &str, err: &'static str) -> Result<&str, OAuthError> {
        self.get(name)
            .ok_or(OAuthError::new(ErrorCode::InvalidRequest, err))
    }
}

/// `/authorize` query, before any check.
#[derive(Debug)]
pub struct AuthorizeQuery {
    /// client_id
    pub client_id: Option<String>,
    /// redirect_uri
    pub redirect_uri: Option<String>,
    /// response_type
    pub response_type: Option<String>,
    /// the client's state, echoed back
    pub state: Option<String>,
    /// scope
    pub scope: Option<String>,
    /// code_challenge
    pub code_challenge: Option<String>,
    /// code_challenge_method
    pub code_challenge_method: Option<String>,
    /// RFC 8707 resource
    pub resource: Option<String>,
}

impl AuthorizeQuery {
    /// Parses the raw query string.
    pub fn parse(raw: &str) -> Result<AuthorizeQuery, OAuthError> {
        let p = Params::parse(raw)?;
        let s = |n: &str| p.get(n).map(str::to_owned);
        Ok(AuthorizeQuery {
            client_id: s("client_id"),
            redirect_uri: s("redirect_uri"),
            response_type: s("response_type"),
            state: s("state"),
            scope: s("scope"),
            code_challenge: s("code_challenge"),
            code_challenge_method: s("code_challenge_method"),
            resource: s("resource"),
        })
    }
}

/// How a client authenticated at the token or revocation endpoint.
#[derive(Debug)]
pub struct ClientAuth {
    /// The client.
    pub client_id: ClientId,
    /// Its secret, if it sent one.
    pub secret: Option<ClientSecret>,
}

impl ClientAuth {
    /// From an optional `Authorization: Basic` value and the form. Using both methods at once
    /// is refused (RFC 6749 §2.3).
    pub fn from_request(
        basic: Option<(String, String)>,
        p: &Params,
    ) -> Result<ClientAuth, OAuthError> {
        let form_id = p.get("client_id");
        let form_secret = p.get("client_secret");
        match basic {
            Some((id, secret)) => {
                if form_secret.is_some() {
                    return Err(OAuthError::new(
                        ErrorCode::InvalidRequest,
                        "use one client authentication method",
                    ));
                }
                if form_id.is_some_and(|f| f != id) {
                    return Err(OAuthError::new(
                        ErrorCode::InvalidClient,
                        "client authentication failed",
                    ));
                }
                Ok(ClientAuth {
                    client_id: ClientId::new(id),
                    secret: Some(ClientSecret::new(secret)),
                })
            }
            None => {
                let Some(id) = form_id else {
                    return Err(OAuthError::new(
                        ErrorCode::InvalidClient,
                        "client_id is required",
                    ));
                };
                Ok(ClientAuth {
                    client_id: ClientId::new(id),
                    secret: form_secret.map(ClientSecret::new),
                })
            }
        }
    }
}

/// A `/token` request.
#[derive(Debug)]
pub enum TokenRequest {
    /// authorization_code grant.
    AuthorizationCode {
        /// the code
        code: AuthCode,
        /// must equal the one used at /authorize when sent
        redirect_uri: Option<String>,
        /// PKCE verifier
        code_verifier: Option<CodeVerifier>,
        /// RFC 8707
        resource: Option<String>,
    },
    /// refresh_token grant.
    RefreshToken {
        /// the refresh token
        refresh_token: RefreshToken,
        /// optional narrowing
        scope: Option<String>,
        /// RFC 8707
        resource: Option<String>,
    },
}

impl TokenRequest {
    /// Parses the form (client authentication is parsed separately).
    pub fn parse(p: &Params) -> Result<TokenRequest, OAuthError> {
        let grant = p.require("grant_type", "grant_type is required")?;
        let s = |n: &str| p.get(n).map(str::to_owned);
        match grant {
            "authorization_code" => Ok(TokenRequest::AuthorizationCode {
                code: AuthCode::new(p.require("code", "code is required")?),
                redirect_uri: s("redirect_uri"),
                code_verifier: p.get("code_verifier").map(CodeVerifier::new),
                resource: s("resource"),
            }),
            "refresh_token" => Ok(TokenRequest::RefreshToken {
                refresh_token: RefreshToken::new(
                    p.require("refresh_token", "refresh_token is required")?,
                ),
                scope: s("scope"),
                resource: s("resource"),
            }),
            _ => Err(OAuthError::new(
                ErrorCode::UnsupportedGrantType,
                "grant_type not supported",
            )),
        }
    }
}

/// Decodes an `Authorization: Basic` header value into (client_id, secret), each
/// form-urlencoded per RFC 6749 §2.3.1.
pub fn parse_basic(value: &str) -> Result<(String, String), OAuthError> {
    let bad = OAuthError::new(ErrorCode::InvalidClient, "client authentication failed");
    let (scheme, b64) = value.split_once(' ').ok_or(bad.clone())?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(bad);
    }
    let raw = crate::crypto::b64_decode(b64).ok_or(bad.clone())?;
    let text = String::from_utf8(raw).map_err(|_| bad.clone())?;
    let (id, secret) = text.split_once(':').ok_or(bad.clone())?;
    // RFC 6749 §2.3.1: each half is form-urlencoded. Escape a raw `&` first so the form
    // decoder cannot split the value there.
    let dec = |s: &str| {
        url::form_urlencoded::parse(format!("x={}", s.replace('&', "%26")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
    };
    match (dec(id), dec(secret)) {
        (Some(i), Some(s)) if !i.is_empty() => Ok((i, s)),
        _ => Err(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_parameter_is_refused() {
        let e = Params::parse("client_id=a&client_id=b").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        let e = AuthorizeQuery::parse("redirect_uri=x&redirect_uri=y").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn empty_value_counts_as_absent() {
        let p = Params::parse("scope=&state=x").unwrap();
        assert_eq!(p.get("scope"), None);
        assert_eq!(p.get("state"), Some("x"));
    }

    #[test]
    fn unknown_grant_type_is_unsupported() {
        let p = Params::parse("grant_type=password&username=a").unwrap();
        assert_eq!(
            TokenRequest::parse(&p).unwrap_err().code,
            ErrorCode::UnsupportedGrantType
        );
    }

    #[test]
    fn two_client_auth_methods_refused() {
        let p = Params::parse("client_id=c&client_secret=s").unwrap();
        let e = ClientAuth::from_request(Some(("c".into(), "s".into())), &p).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
    }

    #[test]
    fn basic_auth_is_form_decoded() {
        let v = format!("Basic {}", crate::crypto::b64(b"my%20client:p%3Ass"));
        assert_eq!(
            parse_basic(&v).unwrap(),
            ("my client".to_owned(), "p:ss".to_owned())
        );
        assert!(parse_basic("Bearer x").is_err());
    }
}
