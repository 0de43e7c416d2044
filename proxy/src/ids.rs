//! Identifiers and secrets as distinct types. An id can never be passed where another id is
//! expected; a secret has no `Display`, prints as `Name([redacted])` and is read with `secret()`.

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a value already known to be well-formed.
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

macro_rules! secret_type {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(PartialEq, Eq, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a secret value.
            pub fn new(s: impl Into<String>) -> Self {
                Self(s.into())
            }
            /// The secret itself. Every call site is a place a reviewer should look at.
            pub fn secret(&self) -> &str {
                &self.0
            }
            /// SHA-256 of the secret, the only form that is stored.
            pub fn hash(&self) -> String {
                crate::crypto::hash_secret(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(concat!(stringify!($name), "([redacted])"))
            }
        }
    };
}

id_type!(
    /// An MCP client's id as issued by registration (never starts with `https://`).
    ClientId
);
id_type!(
    /// The proxy's stable id for a person: `github:<numeric GitHub user id>`.
    UserId
);
id_type!(
    /// A GitHub login (display only: logins can change, the numeric id cannot).
    GitHubLogin
);
id_type!(
    /// A server-side authorization transaction (what /authorize stored).
    TxnId
);
id_type!(
    /// A refresh-token family: one authorization's chain of rotated refresh tokens.
    FamilyId
);

secret_type!(
    /// An access token the proxy issued to an MCP client (`mcpat_…`).
    AccessToken
);
secret_type!(
    /// A refresh token the proxy issued (`mcprt_<family>.<secret>`).
    RefreshToken
);
secret_type!(
    /// A single-use authorization code (`mcpac_…`).
    AuthCode
);
secret_type!(
    /// The `state` sent to GitHub.
    UpstreamState
);
secret_type!(
    /// A confidential client's secret (`mcpc_secret_…`) or GitHub's client secret.
    ClientSecret
);
secret_type!(
    /// The initial access token that authorizes `POST /register` (RFC 7591 §3) when the
    /// registration policy requires one.
    InitialAccessToken
);
secret_type!(
    /// A person's GitHub access token. Never leaves the proxy toward an MCP client.
    GitHubToken
);
secret_type!(
    /// A GitHub App refresh token (`ghr_…`).
    GitHubRefreshToken
);
secret_type!(
    /// A proxy browser-session token (cookie value).
    SessionToken
);
secret_type!(
    /// The operator's bearer token for the admin API (`[admin] token`).
    AdminToken
);
secret_type!(
    /// The PKCE verifier the proxy uses toward GitHub.
    PkceVerifier
);
secret_type!(
    /// A PKCE verifier an MCP client presents at /token.
    CodeVerifier
);
secret_type!(
    /// A short-lived token an exchange-mode backend receives instead of the client's
    /// (`mcpbt_…`).
    BackendToken
);

impl UserId {
    /// The id for a GitHub account.
    pub fn github(numeric_id: u64) -> UserId {
        UserId(format!("github:{numeric_id}"))
    }
}

secret_type!(
    /// The shared secret that signs webhook deliveries (HMAC-SHA256).
    WebhookSecret
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let t = AccessToken::new("mcpat_supersecret");
        let g = GitHubToken::new("gho_supersecret");
        let c = ClientSecret::new("topsecret");
        for s in [format!("{t:?}"), format!("{g:?}"), format!("{c:?}")] {
            assert!(
                !s.contains("supersecret") && !s.contains("topsecret"),
                "{s}"
            );
            assert!(s.ends_with("([redacted])"));
        }
        assert_eq!(format!("{:?}", Some(&t)), "Some(AccessToken([redacted]))");
    }

    #[test]
    fn hash_is_stable_and_not_the_secret() {
        let t = AuthCode::new("mcpac_x");
        assert_eq!(t.hash(), AuthCode::new("mcpac_x").hash());
        assert!(!t.hash().contains("mcpac_x"));
    }
}
