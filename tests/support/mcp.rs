//! A minimal MCP client over Streamable HTTP for the gateway tests: JSON-RPC over POST,
//! JSON or SSE answers, sessions for 2025-x and mirrored headers for 2026-07-28.

use serde_json::{Value, json};

use super::{Browser, Client, TestProxy, http};

/// An MCP client holding an access token from the proxy.
pub struct Mcp {
    /// `/mcp` URL.
    pub url: String,
    /// The proxy access token.
    pub token: String,
    /// `Mcp-Session-Id` (2025-x).
    pub session: Option<String>,
    /// `MCP-Protocol-Version`.
    pub version: &'static str,
}

/// Parses every JSON-RPC message out of an SSE body.
pub fn sse_messages(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|ev| {
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            if data.is_empty() {
                return None;
            }
            serde_json::from_str(&data.join("\n")).ok()
        })
        .collect()
}

impl Mcp {
    /// Authorizes `login` for a fresh client and returns an MCP client with its token.
    pub async fn for_user(proxy: &TestProxy, login: &str) -> Mcp {
        let c = Client::register(
            proxy,
            &format!("Agent of {login}"),
            "https://agent.example/cb",
        )
        .await;
        let t = c.tokens(proxy, &Browser::new(), login).await;
        Mcp::with_token(proxy, t.json["access_token"].as_str().unwrap())
    }

    /// An MCP client with a given token.
    pub fn with_token(proxy: &TestProxy, token: &str) -> Mcp {
        Mcp {
            url: proxy.url("/mcp"),
            token: token.to_owned(),
            session: None,
            version: "2025-11-25",
        }
    }

    /// A POST with the client's headers plus `extra`.
    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut r = http()
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", self.version)
            .json(body);
        if let Some(s) = &self.session {
            r = r.header("mcp-session-id", s);
        }
        if self.version == "2026-07-28"
            && let Some(m) = body["method"].as_str()
        {
            r = r.header("mcp-method", m);
            if let Some(n) = body["params"]["name"].as_str() {
                r = r.header("mcp-name", n);
            }
        }
        r
    }

    /// Sends a request and returns (status, the JSON-RPC response message).
    pub async fn request(&self, body: Value) -> (u16, Value) {
        let resp = self.post(&body).send().await.unwrap();
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap().starts_with("text/event-stream"));
        let text = resp.text().await.unwrap();
        let msg = if sse {
            sse_messages(&text)
                .into_iter()
                .find(|m| m.get("id").is_some() && m.get("method").is_none())
                .unwrap_or(Value::Null)
        } else {
            serde_json::from_str(&text).unwrap_or(Value::Null)
        };
        (status, msg)
    }

    /// `initialize` (2025-x), keeping the session id the backend minted.
    pub async fn initialize(&mut self, url_elicitation: bool) -> Value {
        let caps = if url_elicitation {
            json!({"elicitation": {"form": {}, "url": {}}})
        } else {
            json!({})
        };
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": self.version, "capabilities": caps, "clientInfo": {"name": "tests", "version": "0"}}});
        let resp = self.post(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        self.session = resp
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(self.session.is_some(), "backend should mint a session");
        let text = resp.text().await.unwrap();
        let notified = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .send()
            .await
            .unwrap();
        assert_eq!(notified.status(), 202);
        serde_json::from_str(&text).unwrap_or_else(|_| sse_messages(&text).pop().unwrap())
    }

    /// `tools/call`; returns (status, response message).
    pub async fn call_tool(&self, name: &str, args: Value) -> (u16, Value) {
        self.request(json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}})).await
    }
}
