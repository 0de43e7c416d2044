//! Dynamic client registration (RFC 7591): the request body and the client metadata it becomes
//! once `clients::registration` has validated it. Display fields are untrusted and flagged as
//! such on the consent page; redirect URIs are validated by `bindings::redirect` and then
//! stored verbatim.

use serde::{Deserialize, Serialize};

use super::scope::ScopeSet;

/// How a client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAuthMethod {
    /// Public client.
    None,
    /// Secret in the form.
    ClientSecretPost,
    /// Secret in HTTP Basic.
    ClientSecretBasic,
    /// A JWT signed with one of the client's keys (RFC 7523 §2.2): metadata-document and
    /// configured clients with keys only (not dynamic registration).
    PrivateKeyJwt,
}

impl TokenAuthMethod {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenAuthMethod::None => "none",
            TokenAuthMethod::ClientSecretPost => "client_secret_post",
            TokenAuthMethod::ClientSecretBasic => "client_secret_basic",
            TokenAuthMethod::PrivateKeyJwt => "private_key_jwt",
        }
    }
}

/// OIDC `application_type`, used for loopback rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplicationType {
    /// Runs on the person's machine (loopback and private-use redirects allowed).
    Native,
    /// Runs on a server.
    Web,
}

/// The registration request body; unknown members are ignored (RFC 7591 §2). Validated by
/// `RegistrationRequest::validate`, defined in `clients::registration` next to the redirect
/// binding it applies (this module does no I/O and imports no binding).
#[derive(Debug, Deserialize)]
pub struct RegistrationRequest {
    pub(crate) redirect_uris: Option<Vec<String>>,
    pub(crate) client_name: Option<String>,
    pub(crate) token_endpoint_auth_method: Option<String>,
    pub(crate) grant_types: Option<Vec<String>>,
    pub(crate) response_types: Option<Vec<String>>,
    pub(crate) scope: Option<String>,
    pub(crate) application_type: Option<String>,
}

/// Metadata that passed validation.
#[derive(Debug, Clone)]
pub struct ClientMetadata {
    /// Display name (untrusted).
    pub client_name: Option<String>,
    /// Redirect URIs, verbatim.
    pub redirect_uris: Vec<String>,
    /// Token endpoint authentication.
    pub auth_method: TokenAuthMethod,
    /// Grant types.
    pub grant_types: Vec<String>,
    /// Scopes the client may ask for (`None`: any the server offers).
    pub scope: Option<ScopeSet>,
    /// Native or web.
    pub application_type: ApplicationType,
}
