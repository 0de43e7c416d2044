//! Exchange mode (docs/DESIGN.md §7): the backend never receives a GitHub token. It trades the
//! proxy-minted token it was given (`mcpbt_…`) for the person's GitHub token at the proxy's
//! token endpoint (RFC 8693), authenticating as the confidential client the operator configured,
//! and it understands the proxy's connect-link refusal (`400 invalid_grant` with `connect_uri`).
//! Anything else the endpoint says is a failure: the tool answers "could not obtain GitHub access".

use base64::prelude::{BASE64_STANDARD, Engine as _};
use reqwest::header::{self, HeaderValue};
use serde_json::Value;

use super::AppState;

/// RFC 8693 §2.1 `grant_type`.
pub const GRANT_TYPE_TOKEN_EXCHANGE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// RFC 8693 §3: the type of both the subject token and the issued token.
pub const TOKEN_TYPE_ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
/// The `reason`s of a connect-link refusal (docs/DESIGN.md §6: connect, allow, reconnect).
pub const REFUSAL_REASONS: [&str; 3] = ["connect_required", "allow_required", "reconnect_required"];

/// How the backend reaches the proxy's token endpoint in exchange mode.
#[derive(Clone, PartialEq, Eq)]
pub struct ExchangeConfig {
    /// The proxy's token endpoint, e.g. `http://127.0.0.1:8080/token`.
    pub token_url: String,
    /// The backend's confidential client id at the proxy.
    pub client_id: String,
    /// Its secret (sent with HTTP Basic, never in the body).
    pub client_secret: String,
    /// The `audience` asked for: the GitHub service identifier, `"github"`.
    pub audience: String,
}

impl ExchangeConfig {
    /// The audience of GitHub at the proxy.
    pub const GITHUB_AUDIENCE: &'static str = "github";

    /// A config asking for [`GITHUB_AUDIENCE`](Self::GITHUB_AUDIENCE).
    pub fn new(
        token_url: impl Into<String>,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Self {
        Self {
            token_url: token_url.into(),
            client_id: client_id.into(),
            client_secret: client_secret.into(),
            audience: Self::GITHUB_AUDIENCE.to_owned(),
        }
    }
}

/// The secret never prints.
impl std::fmt::Debug for ExchangeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeConfig")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"[redacted]")
            .field("audience", &self.audience)
            .finish()
    }
}

/// One exchange attempt as the backend saw it, for tests: the HTTP status of the token
/// endpoint's answer (`0` when there was none: connection refused, timeout, …) and the `reason`
/// member of its JSON body, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExchangeAttempt {
    pub status: u16,
    pub reason: Option<String>,
}

/// A well-formed connect-link refusal, checked field by field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// One of [`REFUSAL_REASONS`].
    pub(crate) reason: String,
    /// An absolute `http`/`https` URL (the link checks who opens it, so it may be shown).
    pub(crate) connect_uri: String,
    /// The correlation id: the `elicitationId` of a 2025-11-25 URL elicitation.
    pub(crate) connect_id: String,
    pub(crate) connect_message: String,
}

/// What an exchange comes to.
#[derive(Debug)]
pub(crate) enum Exchanged {
    /// The person's GitHub token.
    Token(String),
    /// The person must act first (connect, allow, reconnect).
    Refused(Refusal),
    /// Anything else; the detail is in the logs, not in the tool's answer.
    Failed,
}

/// Exchanges `subject_token` and records the attempt.
pub(crate) async fn exchange(
    app: &AppState,
    config: &ExchangeConfig,
    subject_token: &str,
) -> Exchanged {
    let (exchanged, attempt) = request(&app.http, config, subject_token).await;
    tracing::debug!(
        status = attempt.status,
        reason = attempt.reason.as_deref(),
        "demo backend: token exchange"
    );
    app.lock().exchanges.push(attempt);
    exchanged
}

async fn request(
    http: &reqwest::Client,
    config: &ExchangeConfig,
    subject_token: &str,
) -> (Exchanged, ExchangeAttempt) {
    let form = [
        ("grant_type", GRANT_TYPE_TOKEN_EXCHANGE),
        ("subject_token", subject_token),
        ("subject_token_type", TOKEN_TYPE_ACCESS_TOKEN),
        ("audience", config.audience.as_str()),
    ];
    let sent = http
        .post(&config.token_url)
        .header(
            header::AUTHORIZATION,
            basic_auth(&config.client_id, &config.client_secret),
        )
        .header(header::ACCEPT, "application/json")
        .form(&form)
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(err) => {
            // reqwest's error names the URL, never the body: no token in the log.
            tracing::warn!(%err, "demo backend: the token endpoint could not be reached");
            let attempt = ExchangeAttempt {
                status: 0,
                reason: None,
            };
            return (Exchanged::Failed, attempt);
        }
    };
    let status = resp.status().as_u16();
    let body = resp.json::<Value>().await.ok();
    let attempt = ExchangeAttempt {
        status,
        reason: body
            .as_ref()
            .and_then(|b| b.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let exchanged = match (status, body) {
        (200, Some(body)) => success(&body),
        (400, Some(body)) => refusal(&body),
        _ => None,
    };
    if exchanged.is_none() {
        tracing::warn!(
            status,
            "demo backend: the token endpoint gave no token and no connect link"
        );
    }
    (exchanged.unwrap_or(Exchanged::Failed), attempt)
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))`, RFC 6749 §2.3.1.
fn basic_auth(client_id: &str, client_secret: &str) -> HeaderValue {
    let encode = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let credentials = format!("{}:{}", encode(client_id), encode(client_secret));
    let value = format!("Basic {}", BASE64_STANDARD.encode(credentials));
    // Base64 and "Basic " are visible ASCII, so this cannot fail.
    let mut value = HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("Basic"));
    value.set_sensitive(true);
    value
}

/// RFC 8693 §2.2.1: an access token of type access token.
fn success(body: &Value) -> Option<Exchanged> {
    let token = body
        .get("access_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())?;
    (body.get("issued_token_type").and_then(Value::as_str) == Some(TOKEN_TYPE_ACCESS_TOKEN))
        .then(|| Exchanged::Token(token.to_owned()))
}

/// docs/DESIGN.md §7: `invalid_grant` with a known `reason` and a usable link.
fn refusal(body: &Value) -> Option<Exchanged> {
    let text = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.trim().is_empty())
    };
    if text("error") != Some("invalid_grant") {
        return None;
    }
    let reason = text("reason").filter(|r| REFUSAL_REASONS.contains(r))?;
    let connect_uri = text("connect_uri").filter(|u| {
        url::Url::parse(u).is_ok_and(|u| matches!(u.scheme(), "https" | "http") && u.has_host())
    })?;
    Some(Exchanged::Refused(Refusal {
        reason: reason.to_owned(),
        connect_uri: connect_uri.to_owned(),
        connect_id: text("connect_id")?.to_owned(),
        connect_message: text("connect_message")?.to_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn basic_auth_form_encodes_id_and_secret_first() {
        // RFC 6749 §2.3.1: ':' in the id and ' ', '&', '+' in the secret are encoded.
        let value = basic_auth("back:end", "s3 cr&t+");
        assert!(value.is_sensitive());
        let b64 = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
        let decoded = String::from_utf8(BASE64_STANDARD.decode(b64).unwrap()).unwrap();
        assert_eq!(decoded, "back%3Aend:s3+cr%26t%2B");
    }

    #[test]
    fn exchange_config_debug_hides_the_secret() {
        let config = ExchangeConfig::new("http://proxy/token", "backend", "hunter2");
        assert_eq!(config.audience, "github");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    fn refusal_body() -> Value {
        json!({
            "error": "invalid_grant",
            "error_description": "no GitHub account connected",
            "reason": "connect_required",
            "connect_uri": "https://proxy.example/connect/abc",
            "connect_id": "c1",
            "connect_expires_in": 1800,
            "connect_message": "Open this link.",
        })
    }

    #[test]
    fn refusal_requires_every_field() {
        let Some(Exchanged::Refused(r)) = refusal(&refusal_body()) else {
            panic!("a well-formed refusal was not understood");
        };
        assert_eq!(r.reason, "connect_required");
        assert_eq!(r.connect_uri, "https://proxy.example/connect/abc");
        assert_eq!(r.connect_id, "c1");
        assert_eq!(r.connect_message, "Open this link.");

        let broken = [
            ("error", json!("invalid_request")),
            ("reason", json!("something_else")),
            ("connect_uri", json!("javascript:alert(1)")),
            ("connect_uri", json!("/connect/abc")),
            ("connect_id", json!("")),
            ("connect_message", json!(null)),
        ];
        for (field, value) in broken {
            let mut body = refusal_body();
            body[field] = value.clone();
            assert!(refusal(&body).is_none(), "{field} = {value} was accepted");
        }
    }

    #[test]
    fn success_requires_an_access_token_of_type_access_token() {
        let ok = json!({"access_token": "gho_x", "issued_token_type": TOKEN_TYPE_ACCESS_TOKEN, "token_type": "Bearer"});
        assert!(matches!(success(&ok), Some(Exchanged::Token(t)) if t == "gho_x"));
        let wrong_type = json!({"access_token": "gho_x", "issued_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_type": "N_A"});
        assert!(success(&wrong_type).is_none());
        let empty = json!({"access_token": "", "issued_token_type": TOKEN_TYPE_ACCESS_TOKEN});
        assert!(success(&empty).is_none());
    }
}
