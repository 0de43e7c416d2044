//! OAuth client toward GitHub, built on `oauth2` over our own `reqwest` client: no redirects
//! followed, timeouts on every call, fixed endpoint URLs from configuration. GitHub answers
//! token errors with HTTP 200 and an `error` field; the transport shim below turns those into
//! 400 so `oauth2`'s standard error path applies and nothing mistakes them for success.

use std::time::Duration;

use oauth2::basic::BasicClient;
use oauth2::{
    AuthType, AuthUrl, AuthorizationCode, ClientId as OClientId, ClientSecret as OClientSecret,
    EndpointNotSet, EndpointSet, HttpRequest, HttpResponse, PkceCodeVerifier, RedirectUrl,
    RefreshToken as ORefreshToken, RequestTokenError, TokenResponse, TokenUrl,
};
use serde::Deserialize;

use super::GitHubConfig;
use crate::bindings::admission::{Membership, Question};
use crate::clock::UnixTime;
use crate::ids::{GitHubLogin, GitHubRefreshToken, GitHubToken, PkceVerifier, UpstreamState};
use crate::outbound;

type OAuthClient =
    BasicClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointSet>;

/// Failures talking to GitHub. The variant decides who is blamed: the person/GitHub's answer
/// (`Refused`, `Unauthorized`) or the network (`Unavailable`).
#[derive(Debug, thiserror::Error)]
pub enum GitHubError {
    /// GitHub refused the code or refresh token (e.g. `bad_verification_code`).
    #[error("GitHub refused: {0}")]
    Refused(String),
    /// GitHub no longer honours the token (401).
    #[error("GitHub token no longer accepted")]
    Unauthorized,
    /// Network error, timeout or 5xx.
    #[error("GitHub unavailable: {0}")]
    Unavailable(String),
    /// An answer we could not understand.
    #[error("unexpected answer from GitHub: {0}")]
    Protocol(String),
}

/// Why GitHub did not confirm revoking a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevocationFailed {
    /// GitHub answered with this non-success status (422 for a token it does not know).
    Refused(u16),
    /// No answer (network error or timeout).
    Unreachable,
}

/// Tokens GitHub issued.
#[derive(Debug)]
pub struct GitHubTokens {
    /// Access token.
    pub access_token: GitHubToken,
    /// Refresh token (GitHub Apps with expiring tokens).
    pub refresh_token: Option<GitHubRefreshToken>,
    /// Access token expiry, if it expires.
    pub expires_at: Option<UnixTime>,
    /// Granted scopes.
    pub scopes: Vec<String>,
}

/// A GitHub account.
#[derive(Debug, Clone, Deserialize)]
pub struct GitHubUser {
    /// Stable numeric id.
    pub id: u64,
    /// Login (can change).
    pub login: String,
}

impl GitHubUser {
    /// Login as a typed id.
    pub fn login(&self) -> GitHubLogin {
        GitHubLogin::new(self.login.clone())
    }
}

/// The GitHub client.
#[derive(Clone)]
pub struct GitHubClient {
    oauth: OAuthClient,
    http: reqwest::Client,
    config: GitHubConfig,
}

fn transport(e: &reqwest::Error) -> GitHubError {
    GitHubError::Unavailable(if e.is_timeout() {
        "timeout".to_owned()
    } else {
        "network error".to_owned()
    })
}

impl GitHubClient {
    /// A client for the configured GitHub, with our callback URL.
    pub fn new(config: GitHubConfig, callback_url: &str) -> Result<GitHubClient, GitHubError> {
        let bad = |e: &dyn std::fmt::Display| GitHubError::Protocol(e.to_string());
        let oauth = BasicClient::new(OClientId::new(config.client_id.clone()))
            .set_client_secret(OClientSecret::new(config.client_secret.secret().to_owned()))
            .set_auth_uri(AuthUrl::from_url(config.authorize_url.clone()))
            .set_token_uri(TokenUrl::from_url(config.token_url.clone()))
            .set_redirect_uri(RedirectUrl::new(callback_url.to_owned()).map_err(|e| bad(&e))?)
            .set_auth_type(AuthType::RequestBody);
        Ok(GitHubClient {
            oauth,
            http: outbound::github(Duration::from_secs(config.timeout_secs))
                .map_err(|e| GitHubError::Unavailable(e.to_string()))?,
            config,
        })
    }

    /// The URL that sends a browser to GitHub.
    pub fn authorize_url(
        &self,
        state: &UpstreamState,
        code_challenge: &str,
        prompt: Option<&str>,
    ) -> String {
        let mut url = self.config.authorize_url.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("client_id", &self.config.client_id);
            q.append_pair(
                "redirect_uri",
                self.oauth
                    .redirect_uri()
                    .map(|r| r.as_str())
                    .unwrap_or_default(),
            );
            q.append_pair("scope", &self.config.scopes.join(" "));
            q.append_pair("state", state.secret());
            q.append_pair("code_challenge", code_challenge);
            q.append_pair("code_challenge_method", "S256");
            q.append_pair("allow_signup", "false");
            if let Some(p) = prompt {
                q.append_pair("prompt", p);
            }
        }
        url.to_string()
    }

    async fn send(http: reqwest::Client, req: HttpRequest) -> Result<HttpResponse, ShimError> {
        let (parts, body) = req.into_parts();
        let resp = http
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await
            .map_err(|e| ShimError(transport(&e).to_string()))?;
        let mut status = resp.status();
        let headers = resp.headers().clone();
        let body = resp
            .bytes()
            .await
            .map_err(|e| ShimError(transport(&e).to_string()))?
            .to_vec();
        // GitHub reports token errors as HTTP 200 with {"error": ...}.
        if status == http::StatusCode::OK
            && serde_json::from_slice::<serde_json::Value>(&body)
                .is_ok_and(|v| v.get("error").is_some())
        {
            status = http::StatusCode::BAD_REQUEST;
        }
        let mut b = http::Response::builder().status(status);
        for (k, v) in &headers {
            b = b.header(k, v);
        }
        b.body(body).map_err(|e| ShimError(e.to_string()))
    }

    fn map_token_error<RE: std::error::Error + 'static>(
        e: RequestTokenError<RE, oauth2::basic::BasicErrorResponse>,
    ) -> GitHubError {
        match e {
            RequestTokenError::ServerResponse(r) => GitHubError::Refused(r.error().to_string()),
            RequestTokenError::Request(e) => GitHubError::Unavailable(e.to_string()),
            RequestTokenError::Parse(_, _) => {
                GitHubError::Protocol("token response did not parse".to_owned())
            }
            RequestTokenError::Other(s) => GitHubError::Protocol(s),
        }
    }

    fn tokens(resp: &oauth2::basic::BasicTokenResponse, now: UnixTime) -> GitHubTokens {
        // GitHub separates scopes with commas in token responses.
        let scopes = resp
            .scopes()
            .map(|s| {
                s.iter()
                    .flat_map(|x| x.split(','))
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        GitHubTokens {
            access_token: GitHubToken::new(resp.access_token().secret().clone()),
            refresh_token: resp
                .refresh_token()
                .map(|r| GitHubRefreshToken::new(r.secret().clone())),
            expires_at: resp.expires_in().map(|d| now.plus(d.as_secs())),
            scopes,
        }
    }

    /// Exchanges a callback code (with the proxy's PKCE verifier).
    pub async fn exchange_code(
        &self,
        code: &str,
        verifier: &PkceVerifier,
        now: UnixTime,
    ) -> Result<GitHubTokens, GitHubError> {
        let http = self.http.clone();
        let client = move |req: HttpRequest| Self::send(http.clone(), req);
        let resp = self
            .oauth
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier.secret().to_owned()))
            .request_async(&client)
            .await
            .map_err(Self::map_token_error)?;
        Ok(Self::tokens(&resp, now))
    }

    /// Refreshes an expiring GitHub App token (GitHub rotates the refresh token too).
    pub async fn refresh(
        &self,
        refresh: &GitHubRefreshToken,
        now: UnixTime,
    ) -> Result<GitHubTokens, GitHubError> {
        let http = self.http.clone();
        let client = move |req: HttpRequest| Self::send(http.clone(), req);
        let rt = ORefreshToken::new(refresh.secret().to_owned());
        let resp = self
            .oauth
            .exchange_refresh_token(&rt)
            .request_async(&client)
            .await
            .map_err(Self::map_token_error)?;
        Ok(Self::tokens(&resp, now))
    }

    /// `GET /user` with the person's token.
    pub async fn user(&self, token: &GitHubToken) -> Result<GitHubUser, GitHubError> {
        let url = format!(
            "{}/user",
            self.config.api_url.as_str().trim_end_matches('/')
        );
        let resp = self
            .http
            .get(url)
            .bearer_auth(token.secret())
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .send()
            .await
            .map_err(|e| transport(&e))?;
        match resp.status() {
            s if s.is_success() => resp
                .json::<GitHubUser>()
                .await
                .map_err(|_| GitHubError::Protocol("/user did not parse".to_owned())),
            http::StatusCode::UNAUTHORIZED => Err(GitHubError::Unauthorized),
            s if s.is_server_error() => {
                Err(GitHubError::Unavailable(format!("/user answered {s}")))
            }
            s => Err(GitHubError::Protocol(format!("/user answered {s}"))),
        }
    }

    /// `{api_url}/<segments…>`, each segment percent-encoded as one path segment.
    fn api(&self, segments: &[&str]) -> Result<url::Url, GitHubError> {
        let mut url = self.config.api_url.clone();
        url.path_segments_mut()
            .map_err(|()| GitHubError::Protocol("api_url cannot take a path".to_owned()))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// A membership question with the person's token: `GET /user/memberships/orgs/{org}` or
    /// `GET /orgs/{org}/teams/{slug}/memberships/{login}`. GitHub answers 200 with `state`
    /// `active` or `pending`, 404 for a non-member (or a membership this token may not see),
    /// and 403 with `X-GitHub-SSO: required; url=…` when the org's SAML SSO has not
    /// authorized this token.
    pub async fn membership(
        &self,
        token: &GitHubToken,
        question: &Question,
        login: &str,
    ) -> Result<Membership, GitHubError> {
        let url = match question {
            Question::Org(org) => self.api(&["user", "memberships", "orgs", org])?,
            Question::Team(t) => {
                self.api(&["orgs", &t.org, "teams", &t.slug, "memberships", login])?
            }
        };
        let resp = self
            .http
            .get(url)
            .bearer_auth(token.secret())
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let status = resp.status();
        if let Some(limited) = rate_limited(&resp) {
            return Err(limited);
        }
        match status {
            s if s.is_success() => {
                #[derive(Deserialize)]
                struct Body {
                    state: String,
                }
                let body: Body = resp.json().await.map_err(|_| {
                    GitHubError::Protocol("membership answer did not parse".to_owned())
                })?;
                Ok(match body.state.as_str() {
                    "active" => Membership::Active,
                    _ => Membership::Pending,
                })
            }
            http::StatusCode::NOT_FOUND => Ok(Membership::NotMember),
            http::StatusCode::UNAUTHORIZED => Err(GitHubError::Unauthorized),
            http::StatusCode::FORBIDDEN => match sso_required(resp.headers()) {
                Some(url) => Ok(Membership::SsoRequired { url }),
                // Without `read:org` GitHub refuses the question itself.
                None => Err(GitHubError::Protocol(
                    "GitHub refused the membership question (403): does the token have read:org?"
                        .to_owned(),
                )),
            },
            s if s.is_server_error() => {
                Err(GitHubError::Unavailable(format!("membership answered {s}")))
            }
            s => Err(GitHubError::Protocol(format!("membership answered {s}"))),
        }
    }

    /// Whether GitHub still honours a person's token: "Check a token"
    /// (`POST /applications/{client_id}/token` with the app's own credentials, so it does not
    /// spend the person's rate limit). 200: honoured; 404: revoked or never valid.
    pub async fn check_token(&self, token: &GitHubToken) -> Result<bool, GitHubError> {
        let url = self.api(&["applications", &self.config.client_id, "token"])?;
        let resp = self
            .http
            .post(url)
            .basic_auth(
                &self.config.client_id,
                Some(self.config.client_secret.secret()),
            )
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .json(&serde_json::json!({"access_token": token.secret()}))
            .send()
            .await
            .map_err(|e| transport(&e))?;
        if let Some(limited) = rate_limited(&resp) {
            return Err(limited);
        }
        match resp.status() {
            s if s.is_success() => Ok(true),
            http::StatusCode::NOT_FOUND => Ok(false),
            s if s.is_server_error() => Err(GitHubError::Unavailable(format!(
                "check token answered {s}"
            ))),
            // 401/403/422: our own app credentials or request are wrong, not the person's token.
            s => Err(GitHubError::Protocol(format!("check token answered {s}"))),
        }
    }

    /// Revokes one token at GitHub ("Delete an app token"), e.g. one minted only to learn who
    /// signed in. Best effort: failures are logged, never shown.
    pub async fn delete_token(&self, token: &GitHubToken) {
        // Logged by `app_api`; nobody is waiting to be told.
        let _ = self.app_api(reqwest::Method::DELETE, "token", token).await;
    }

    /// Revokes the person's whole authorization of our app at GitHub ("Delete an app
    /// authorization"): every token, and GitHub will ask for consent again. GitHub accepts an
    /// expired token here. The caller reports a failure (`github::grants::Grants::forget`).
    pub async fn delete_grant(&self, token: &GitHubToken) -> Result<(), RevocationFailed> {
        self.app_api(reqwest::Method::DELETE, "grant", token).await
    }

    async fn app_api(
        &self,
        method: reqwest::Method,
        what: &str,
        token: &GitHubToken,
    ) -> Result<(), RevocationFailed> {
        let url = format!(
            "{}/applications/{}/{what}",
            self.config.api_url.as_str().trim_end_matches('/'),
            self.config.client_id
        );
        let resp = self
            .http
            .request(method, url)
            .basic_auth(
                &self.config.client_id,
                Some(self.config.client_secret.secret()),
            )
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
            .json(&serde_json::json!({"access_token": token.secret()}))
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => {
                tracing::warn!(status = %r.status(), what, "GitHub token revocation refused");
                Err(RevocationFailed::Refused(r.status().as_u16()))
            }
            Err(e) => {
                tracing::warn!(error = %transport(&e), what, "GitHub token revocation failed");
                Err(RevocationFailed::Unreachable)
            }
        }
    }

    /// GitHub's host, for pages.
    pub fn display_host(&self) -> String {
        self.config.display_host()
    }
}

/// GitHub's primary or secondary rate limit (403 or 429 with `x-ratelimit-remaining: 0`, or a
/// `retry-after`): a passing failure, never an answer about the person.
fn rate_limited(resp: &reqwest::Response) -> Option<GitHubError> {
    let status = resp.status();
    if status != http::StatusCode::FORBIDDEN && status != http::StatusCode::TOO_MANY_REQUESTS {
        return None;
    }
    let h = resp.headers();
    let exhausted = h
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() == "0");
    (status == http::StatusCode::TOO_MANY_REQUESTS || exhausted || h.contains_key("retry-after"))
        .then(|| GitHubError::Unavailable("rate limited".to_owned()))
}

/// The link in `X-GitHub-SSO: required; url=<link>`; `Some(None)` when SSO is required but no
/// link was given, `None` when the header is absent (or says only `partial-results`).
fn sso_required(headers: &http::HeaderMap) -> Option<Option<String>> {
    let v = headers.get("x-github-sso")?.to_str().ok()?;
    let mut parts = v.split(';').map(str::trim);
    if !parts.next()?.eq_ignore_ascii_case("required") {
        return None;
    }
    Some(
        parts
            .find_map(|p| p.strip_prefix("url="))
            .map(str::to_owned),
    )
}

/// Error type of the transport shim.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ShimError(String);
