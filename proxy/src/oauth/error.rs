//! OAuth error codes (RFC 6749 §4.1.2.1 and §5.2, RFC 7591 §3.2.2, RFC 8707, RFC 6750).
//! `Display` is the exact wire string.

/// An OAuth error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Malformed request.
    InvalidRequest,
    /// Client authentication failed or unknown client.
    InvalidClient,
    /// Bad, expired, revoked or reused code or refresh token; redirect or PKCE mismatch.
    InvalidGrant,
    /// Client may not use this grant.
    UnauthorizedClient,
    /// Grant type not supported.
    UnsupportedGrantType,
    /// Response type not supported.
    UnsupportedResponseType,
    /// Scope not allowed.
    InvalidScope,
    /// The person (or the proxy on their behalf) refused.
    AccessDenied,
    /// RFC 8707: the resource is not acceptable.
    InvalidTarget,
    /// RFC 7591: bad redirect URI in registration.
    InvalidRedirectUri,
    /// RFC 7591: bad client metadata.
    InvalidClientMetadata,
    /// RFC 7009: token type not revocable.
    UnsupportedTokenType,
    /// Our fault.
    ServerError,
    /// Upstream temporarily unavailable.
    TemporarilyUnavailable,
    /// RFC 6750: the access token is bad.
    InvalidToken,
    /// Rate limited (RFC 6585 429 with an OAuth-shaped body).
    SlowDown,
}

impl ErrorCode {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidClient => "invalid_client",
            ErrorCode::InvalidGrant => "invalid_grant",
            ErrorCode::UnauthorizedClient => "unauthorized_client",
            ErrorCode::UnsupportedGrantType => "unsupported_grant_type",
            ErrorCode::UnsupportedResponseType => "unsupported_response_type",
            ErrorCode::InvalidScope => "invalid_scope",
            ErrorCode::AccessDenied => "access_denied",
            ErrorCode::InvalidTarget => "invalid_target",
            ErrorCode::InvalidRedirectUri => "invalid_redirect_uri",
            ErrorCode::InvalidClientMetadata => "invalid_client_metadata",
            ErrorCode::UnsupportedTokenType => "unsupported_token_type",
            ErrorCode::ServerError => "server_error",
            ErrorCode::TemporarilyUnavailable => "temporarily_unavailable",
            ErrorCode::InvalidToken => "invalid_token",
            ErrorCode::SlowDown => "slow_down",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An OAuth error with a human description safe to show the caller (never a secret, never an
/// internal cause).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {description}")]
pub struct OAuthError {
    /// The code.
    pub code: ErrorCode,
    /// Safe description.
    pub description: &'static str,
}

impl OAuthError {
    /// Shorthand.
    pub const fn new(code: ErrorCode, description: &'static str) -> OAuthError {
        OAuthError { code, description }
    }
}
