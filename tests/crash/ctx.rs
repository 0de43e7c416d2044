//! The shared context of the load and the checks: the HTTP client, the proxy's address, the
//! model, the gate between load (readers) and checks (the writer). Every request is either
//! answered, not sent (connection refused), or lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::support::browser::{CookieJar, Resp};
use crate::support::{Pkce, query_param};

use super::model::Model;

/// A short, single-line description of a response body (an HTML page's title).
pub(super) fn brief(body: &str) -> String {
    if let Some(start) = body.find("<title>") {
        let rest = &body[start + 7..];
        return rest[..rest.find("</title>").unwrap_or(rest.len())].to_owned();
    }
    let one: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
    one.chars().take(200).collect()
}

#[derive(Debug)]
pub(super) enum Fail {
    /// The TCP connection was refused: the server never saw the request.
    NotSent,
    /// Sent, but no complete response: the outcome is unknown.
    Lost(String),
}

pub(super) type Out<T> = Result<T, Fail>;

/// The innermost cause of an HTTP error (no URL, so no query parameters in the output).
pub(super) fn reason(e: &reqwest::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}

/// What the checks read from an answer, beyond [`Resp`]'s status, `Location` and hidden fields.
pub(super) trait Answer {
    fn json(&self) -> Value;
    fn error(&self) -> String;
    fn is_invalid_grant(&self) -> bool;
    /// Status and a short description of the body, for a violation's message.
    fn brief(&self) -> String;
}

impl Answer for Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_default().to_owned()
    }
    fn is_invalid_grant(&self) -> bool {
        self.status == 400 && self.error() == "invalid_grant"
    }
    fn brief(&self) -> String {
        format!("{} {}", self.status, brief(&self.body))
    }
}

pub(super) struct Ctx {
    pub(super) http: reqwest::Client,
    pub(super) base: String,
    /// The admin listener's base URL (its audit export is where the trail is read).
    pub(super) admin: String,
    pub(super) model: Mutex<Model>,
    pub(super) gate: RwLock<()>,
    pub(super) stop: AtomicBool,
    /// A request timed out: checks stop until a probe shows the server still writes.
    pub(super) hung: AtomicBool,
    /// Concurrent checks.
    pub(super) concurrency: usize,
}

impl Ctx {
    pub(super) fn m(&self) -> MutexGuard<'_, Model> {
        self.model.lock().unwrap()
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(super) fn violation(&self, msg: String) {
        eprintln!("VIOLATION: {msg}");
        self.m().violations.push(msg);
    }

    pub(super) fn is_hung(&self) -> bool {
        self.hung.load(Ordering::SeqCst)
    }

    pub(super) fn checked(&self) {
        self.m().stats.checks += 1;
    }

    pub(super) async fn finish(
        &self,
        r: Result<reqwest::Response, reqwest::Error>,
        jar: Option<&CookieJar>,
    ) -> Out<Resp> {
        let out = match r {
            Err(e) if e.is_connect() => Err(Fail::NotSent),
            Err(e) => {
                if e.is_timeout() {
                    self.hung.store(true, Ordering::SeqCst);
                    self.m().stats.timeouts += 1;
                }
                Err(Fail::Lost(reason(&e)))
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let headers = r.headers().clone();
                if let Some(jar) = jar {
                    jar.store(&headers);
                }
                match r.text().await {
                    Ok(body) => Ok(Resp {
                        status,
                        headers,
                        body,
                    }),
                    Err(e) => {
                        if e.is_timeout() {
                            self.hung.store(true, Ordering::SeqCst);
                            self.m().stats.timeouts += 1;
                        }
                        Err(Fail::Lost(reason(&e)))
                    }
                }
            }
        };
        match &out {
            Err(Fail::NotSent) => self.m().stats.not_sent += 1,
            Err(Fail::Lost(_)) => self.m().stats.lost += 1,
            Ok(_) => {}
        }
        out
    }

    /// A top-level navigation with `Sec-Fetch-Site: site`.
    pub(super) async fn navigate(
        &self,
        url: &str,
        jar: Option<&CookieJar>,
        site: &str,
    ) -> Out<Resp> {
        let mut req = self
            .http
            .get(url)
            .header("sec-fetch-site", site)
            .header("sec-fetch-mode", "navigate");
        if let Some(jar) = jar {
            req = req.header("cookie", jar.header());
        }
        self.finish(req.send().await, jar).await
    }

    /// A form POST from a page on `origin`.
    pub(super) async fn post_form(
        &self,
        url: &str,
        fields: &[(&str, &str)],
        jar: Option<&CookieJar>,
        origin: &str,
    ) -> Out<Resp> {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let mut req = self
            .http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .header("sec-fetch-site", "same-origin")
            .body(body);
        if let Some(jar) = jar {
            req = req.header("cookie", jar.header());
        }
        self.finish(req.send().await, jar).await
    }

    /// `POST /token` as the public client `client_id`.
    pub(super) async fn token(&self, client_id: &str, fields: &[(&str, &str)]) -> Out<Resp> {
        let mut all = vec![("client_id", client_id)];
        all.extend_from_slice(fields);
        let r = self.http.post(self.url("/token")).form(&all).send().await;
        self.finish(r, None).await
    }

    pub(super) async fn redeem(
        &self,
        client_id: &str,
        redirect_uri: &str,
        code: &str,
        verifier: &str,
    ) -> Out<Resp> {
        let resource = self.url("/mcp");
        self.token(
            client_id,
            &[
                ("grant_type", "authorization_code"),
                ("code", code),
                ("redirect_uri", redirect_uri),
                ("code_verifier", verifier),
                ("resource", &resource),
            ],
        )
        .await
    }

    pub(super) async fn refresh(&self, client_id: &str, refresh_token: &str) -> Out<Resp> {
        self.token(
            client_id,
            &[
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh_token),
            ],
        )
        .await
    }

    /// RFC 7009 revocation.
    pub(super) async fn revoke(&self, client_id: &str, token: &str) -> Out<Resp> {
        let r = self
            .http
            .post(self.url("/revoke"))
            .form(&[("client_id", client_id), ("token", token)])
            .send()
            .await;
        self.finish(r, None).await
    }

    /// A stateless (2026-07-28) MCP `tools/call` with `token`, of a tool named uniquely for
    /// this call: 200 means accepted (forwarded to the demo backend, which answers an unknown
    /// tool with a JSON-RPC error), 401 refused. An accepted call is remembered with the
    /// moment its answer was read, to look for its `upstream_action` event after the next kill.
    pub(super) async fn mcp(&self, token: &str) -> Out<u16> {
        let sent = tokio::time::Instant::now();
        let tool = {
            let mut m = self.m();
            m.stats.mcp_calls += 1;
            format!("crash_{}", m.stats.mcp_calls)
        };
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": {},
                       "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}
        });
        let r = self
            .http
            .post(self.url("/mcp"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", &tool)
            .json(&body)
            .send()
            .await;
        let status = self.finish(r, None).await?.status;
        if status == 200 {
            let answered = tokio::time::Instant::now();
            self.m().calls.push(super::model::Call {
                tool,
                sent,
                answered,
            });
        }
        Ok(status)
    }

    /// The tools named by the `upstream_action` events of the stored trail, read through the
    /// admin API (from the client side, over HTTP, like every other check): its newest 10 000
    /// events (`tail`) with `newest`, else the whole trail (`export`).
    pub(super) async fn upstream_tools(
        &self,
        newest: bool,
    ) -> Result<std::collections::HashSet<String>, String> {
        let path = if newest {
            "/admin/api/audit/tail?limit=10000"
        } else {
            "/admin/api/audit/export"
        };
        let r = self
            .http
            .get(format!("{}{path}", self.admin))
            .bearer_auth(super::server::ADMIN_TOKEN)
            .timeout(std::time::Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| reason(&e))?;
        if r.status() != 200 {
            return Err(format!("{path} answered {}", r.status()));
        }
        let text = r.text().await.map_err(|e| reason(&e))?;
        let records: Vec<Value> = if newest {
            serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?
        } else {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect()
        };
        Ok(records
            .into_iter()
            .filter(|rec| rec["kind"] == "upstream_action")
            .filter_map(|rec| rec["event"]["tool"].as_str().map(str::to_owned))
            .collect())
    }

    pub(super) fn authorize_url(
        &self,
        client_id: &str,
        redirect_uri: &str,
        pkce: &Pkce,
        state: &str,
    ) -> String {
        let resource = self.url("/mcp");
        let q = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs([
                ("response_type", "code"),
                ("client_id", client_id),
                ("redirect_uri", redirect_uri),
                ("code_challenge", pkce.challenge.as_str()),
                ("code_challenge_method", "S256"),
                ("state", state),
                ("scope", "read:user"),
                ("resource", resource.as_str()),
            ])
            .finish();
        self.url(&format!("/authorize?{q}"))
    }

    /// The code in a redirect back to the client, checking where it goes, `state` and `iss`.
    pub(super) fn code_in(
        &self,
        location: Option<&str>,
        redirect_uri: &str,
        state: &str,
    ) -> Option<String> {
        let loc = location?;
        if !loc.starts_with(redirect_uri)
            || query_param(loc, "state").as_deref() != Some(state)
            || query_param(loc, "iss").as_deref() != Some(self.base.as_str())
        {
            return None;
        }
        query_param(loc, "code")
    }
}
