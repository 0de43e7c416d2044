//! Validation of a dynamic client registration (RFC 7591): an
//! [`oauth::registration::RegistrationRequest`](RegistrationRequest) becomes
//! [`ClientMetadata`]. Here, above the bindings, because every redirect URI goes through the
//! redirect binding (`bindings::redirect`); the request and metadata types stay in `oauth`.

use crate::bindings::redirect;
use crate::oauth::error::{ErrorCode, OAuthError};
use crate::oauth::registration::{
    ApplicationType, ClientMetadata, RegistrationRequest, TokenAuthMethod,
};
use crate::oauth::scope::ScopeSet;

const MAX_REDIRECTS: usize = 10;
const MAX_NAME_CHARS: usize = 100;

fn meta_err(d: &'static str) -> OAuthError {
    OAuthError::new(ErrorCode::InvalidClientMetadata, d)
}

/// Validates a client name: printable, no control or bidirectional-override characters
/// (which can make a name display differently from what it is), bounded length.
fn validate_name(name: &str) -> Result<Option<String>, OAuthError> {
    let name = name.trim();
    if name.is_empty() {
        return Ok(None);
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(meta_err("client_name is too long (at most 100 characters)"));
    }
    let bad = |c: char| {
        c.is_control()
            || matches!(c, '\u{061C}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2069}' | '\u{FEFF}')
    };
    if name.chars().any(bad) {
        return Err(meta_err(
            "client_name contains control or bidirectional formatting characters",
        ));
    }
    Ok(Some(name.to_owned()))
}

impl RegistrationRequest {
    /// Validates against the scopes this server offers.
    pub fn validate(self, offered: &ScopeSet) -> Result<ClientMetadata, OAuthError> {
        let declared = match self.application_type.as_deref() {
            None => None,
            Some("web") => Some(ApplicationType::Web),
            Some("native") => Some(ApplicationType::Native),
            Some(_) => return Err(meta_err("application_type must be native or web")),
        };
        let uris = self.redirect_uris.unwrap_or_default();
        if uris.is_empty() {
            return Err(OAuthError::new(
                ErrorCode::InvalidRedirectUri,
                "at least one redirect_uri is required",
            ));
        }
        if uris.len() > MAX_REDIRECTS {
            return Err(OAuthError::new(
                ErrorCode::InvalidRedirectUri,
                "too many redirect_uris (at most 10)",
            ));
        }
        let mut redirect_uris = Vec::with_capacity(uris.len());
        let mut dropped = None;
        for u in uris {
            match redirect::validate_for_registration(&u) {
                Ok(()) => {}
                // A private-use scheme that is not a reverse domain name (`cursor://…`) is
                // left out of a set that has other usable URIs, as RFC 7591 §3.2.1 lets a
                // server replace requested metadata (the response shows what was registered):
                // Cursor registers `cursor://…` next to an https and a loopback URI, and
                // refusing the whole set would refuse Cursor.
                Err(e @ redirect::RedirectError::NotReverseDomainScheme) => {
                    dropped = Some(e);
                    continue;
                }
                Err(e) => {
                    return Err(OAuthError::new(
                        ErrorCode::InvalidRedirectUri,
                        e.description(),
                    ));
                }
            }
            if !redirect_uris.contains(&u) {
                redirect_uris.push(u);
            }
        }
        if let (true, Some(e)) = (redirect_uris.is_empty(), dropped) {
            return Err(OAuthError::new(
                ErrorCode::InvalidRedirectUri,
                e.description(),
            ));
        }
        // OIDC Registration §2 / RFC 8252: a web client redirects only to https; loopback and
        // private-use schemes are for native apps. Clients written before MCP 2026-07-28 do
        // not send application_type, and OIDC's implied "web" would refuse every CLI, so an
        // omitted type is inferred from the redirect URIs instead.
        let native_only = redirect_uris.iter().any(|u| redirect::is_native_only(u));
        let application_type = match declared {
            Some(ApplicationType::Web) if native_only => {
                return Err(OAuthError::new(
                    ErrorCode::InvalidRedirectUri,
                    "application_type web allows only https redirect URIs; register loopback or custom-scheme redirect URIs with application_type native",
                ));
            }
            Some(t) => t,
            None if native_only => ApplicationType::Native,
            None => ApplicationType::Web,
        };
        let auth_method = match self.token_endpoint_auth_method.as_deref() {
            // RFC 7591 §2: the default is client_secret_basic.
            None | Some("client_secret_basic") => TokenAuthMethod::ClientSecretBasic,
            Some("none") => TokenAuthMethod::None,
            Some("client_secret_post") => TokenAuthMethod::ClientSecretPost,
            Some(_) => {
                return Err(meta_err(
                    "token_endpoint_auth_method must be none, client_secret_basic or client_secret_post",
                ));
            }
        };
        let grant_types = self
            .grant_types
            .unwrap_or_else(|| vec!["authorization_code".to_owned()]);
        if !grant_types.iter().any(|g| g == "authorization_code")
            || grant_types
                .iter()
                .any(|g| g != "authorization_code" && g != "refresh_token")
        {
            return Err(meta_err(
                "grant_types must include authorization_code and may add refresh_token",
            ));
        }
        if let Some(rt) = &self.response_types
            && rt.iter().any(|r| r != "code")
        {
            return Err(meta_err("response_types may only contain code"));
        }
        let scope = match self.scope.as_deref() {
            None => None,
            Some(s) => {
                let set = ScopeSet::parse(s).map_err(|_| meta_err("scope is malformed"))?;
                if !offered.covers(&set) {
                    return Err(meta_err("scope names a scope this server does not offer"));
                }
                Some(set)
            }
        };
        Ok(ClientMetadata {
            client_name: match self.client_name {
                Some(n) => validate_name(&n)?,
                None => None,
            },
            redirect_uris,
            auth_method,
            grant_types,
            scope,
            application_type,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> Result<ClientMetadata, OAuthError> {
        let r: RegistrationRequest = serde_json::from_str(json).unwrap();
        r.validate(&ScopeSet::parse("read:user repo").unwrap())
    }

    #[test]
    fn minimal_public_client() {
        let m = req(r#"{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none","client_name":"Claude"}"#).unwrap();
        assert_eq!(m.auth_method, TokenAuthMethod::None);
        assert_eq!(m.client_name.as_deref(), Some("Claude"));
    }

    #[test]
    fn registration_rejects_dangerous_redirect_schemes() {
        for u in [
            "javascript:alert(1)",
            "data:text/html,x",
            "file:///etc/passwd",
            "vbscript:x",
            "http://evil.example/cb",
        ] {
            let e = req(&format!(r#"{{"redirect_uris":["{u}"]}}"#)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRedirectUri, "{u}");
        }
        assert_eq!(
            req(r#"{"redirect_uris":[]}"#).unwrap_err().code,
            ErrorCode::InvalidRedirectUri
        );
        assert_eq!(
            req(r#"{}"#).unwrap_err().code,
            ErrorCode::InvalidRedirectUri
        );
    }

    #[test]
    fn web_client_may_not_register_loopback_or_custom_scheme_redirects() {
        for u in [
            "http://127.0.0.1/cb",
            "http://localhost/cb",
            "com.example.app:/cb",
        ] {
            let e = req(&format!(
                r#"{{"redirect_uris":["https://a.example/cb","{u}"],"application_type":"web"}}"#
            ))
            .unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRedirectUri, "{u}");
            let m = req(&format!(
                r#"{{"redirect_uris":["{u}"],"application_type":"native"}}"#
            ))
            .unwrap();
            assert_eq!(m.application_type, ApplicationType::Native);
        }
        let m =
            req(r#"{"redirect_uris":["https://a.example/cb"],"application_type":"web"}"#).unwrap();
        assert_eq!(m.application_type, ApplicationType::Web);
        // A native app may also use a claimed https redirect (RFC 8252 §7.2).
        let m = req(r#"{"redirect_uris":["https://a.example/cb"],"application_type":"native"}"#)
            .unwrap();
        assert_eq!(m.application_type, ApplicationType::Native);
    }

    #[test]
    fn omitted_application_type_is_inferred_from_redirects() {
        let m = req(r#"{"redirect_uris":["http://127.0.0.1/cb"]}"#).unwrap();
        assert_eq!(m.application_type, ApplicationType::Native);
        let m = req(r#"{"redirect_uris":["https://a.example/cb"]}"#).unwrap();
        assert_eq!(m.application_type, ApplicationType::Web);
        assert_eq!(
            req(r#"{"redirect_uris":["https://a.example/cb"],"application_type":"desktop"}"#)
                .unwrap_err()
                .code,
            ErrorCode::InvalidClientMetadata
        );
    }

    #[test]
    fn registration_rejects_bidi_names_and_unknown_scopes() {
        let e = req(
            "{\"redirect_uris\":[\"https://a.example/cb\"],\"client_name\":\"Good\u{202E}lim\"}",
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidClientMetadata);
        let e =
            req(r#"{"redirect_uris":["https://a.example/cb"],"scope":"admin:org"}"#).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidClientMetadata);
        let e = req(
            r#"{"redirect_uris":["https://a.example/cb"],"grant_types":["client_credentials"]}"#,
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidClientMetadata);
    }

    #[test]
    fn a_non_reverse_domain_scheme_is_left_out_of_a_set_with_usable_uris_and_refused_alone() {
        // Cursor's real registration: three URIs, one of them `cursor://` (no dot).
        let m = req(r#"{"redirect_uris":["cursor://anysphere.cursor-mcp/oauth/callback","https://www.cursor.com/agents/mcp/oauth/callback","http://localhost:8787/callback"],"token_endpoint_auth_method":"none"}"#).unwrap();
        assert_eq!(
            m.redirect_uris,
            [
                "https://www.cursor.com/agents/mcp/oauth/callback",
                "http://localhost:8787/callback"
            ]
        );
        for only in ["cursor://anysphere.cursor-mcp/oauth/callback", "myapp:/cb"] {
            let e = req(&format!(r#"{{"redirect_uris":["{only}"]}}"#)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRedirectUri, "{only}");
            assert!(e.description.contains("reverse domain"), "{only}");
        }
        // Any other fault still refuses the whole set.
        let e = req(r#"{"redirect_uris":["myapp:/cb","https://a.example/cb","http://127.1/cb"]}"#)
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRedirectUri);
        let m = req(r#"{"redirect_uris":["com.example.app:/cb"]}"#).unwrap();
        assert_eq!(m.application_type, ApplicationType::Native);
    }
}
