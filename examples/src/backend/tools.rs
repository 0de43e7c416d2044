//! The demo tools.
//!
//! * `whoami` and `list_repos` prove that the token the backend received is a working GitHub
//!   token: they call `GET {github_api_url}/user` with it, exactly as a real GitHub-backed MCP
//!   server would. The backend never validates the token itself; GitHub does. In exchange mode
//!   they first trade the received token for the person's GitHub token ([`super::exchange`]);
//!   a connect-link refusal becomes [`Outcome::Refused`], for the transport to relay.
//! * `slow_count` sends one progress notification every `delay_ms`, so tests (and people) can
//!   watch events arrive one by one through the proxy and see a disconnect cancel the work.
//! * `create_issue`, `create_branch` and `delete_repo` stand for the writes a tool policy
//!   (`[[policy]]`) holds, denies or steps up: they check the token with `GET /user` like the
//!   others, change nothing anywhere, and answer with the arguments they received (so a test
//!   sees exactly what reached the backend).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::AppState;
use super::exchange::{self, Exchanged, Refusal};
use super::sse::Outgoing;

const USER_AGENT: &str = "mcp-oauth-proxy-demo-backend";

/// JSON-RPC error codes used by the tools.
pub(crate) const INVALID_PARAMS: i64 = -32602;

/// The client for GitHub's REST API: no redirects, bounded time.
#[allow(clippy::disallowed_methods)] // the demo backend's client, not the proxy's
pub(crate) fn github_client() -> reqwest::Result<reqwest::Client> {
    // reqwest is built with `rustls-no-provider`; even plain http needs one installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(20))
        .build()
}

/// The `tools/list` result.
pub(crate) fn list() -> Value {
    json!({
        "tools": [
            {
                "name": "whoami",
                "title": "Who am I on GitHub?",
                "description": "Calls GitHub's GET /user with your GitHub token and tells you your login.",
                "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            },
            {
                "name": "list_repos",
                "title": "List my repositories",
                "description": "Checks your GitHub token with GET /user, then lists three (made-up) repositories of yours.",
                "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            },
            {
                "name": "create_issue",
                "title": "Create an issue (demo)",
                "description": "Pretends to open an issue in owner/repo and echoes what it received. Nothing is created.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "owner": {"type": "string"},
                        "repo": {"type": "string"},
                        "title": {"type": "string"},
                        "body": {"type": "string"},
                    },
                    "required": ["owner", "repo", "title"],
                },
            },
            {
                "name": "create_branch",
                "title": "Create a branch (demo)",
                "description": "Pretends to create a branch in owner/repo and echoes what it received. Nothing is created.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"owner": {"type": "string"}, "repo": {"type": "string"}, "branch": {"type": "string"}},
                    "required": ["owner", "repo", "branch"],
                },
            },
            {
                "name": "delete_repo",
                "title": "Delete a repository (demo)",
                "description": "Pretends to delete owner/repo and echoes what it received. Nothing is deleted.",
                "inputSchema": {
                    "type": "object",
                    "properties": {"owner": {"type": "string"}, "repo": {"type": "string"}},
                    "required": ["owner", "repo"],
                },
            },
            {
                "name": "slow_count",
                "title": "Count slowly",
                "description": "Counts to `count`, sending a progress notification every `delay_ms` milliseconds. Streams over SSE.",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "count": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5, "description": "How far to count."},
                        "delay_ms": {"type": "integer", "minimum": 0, "maximum": 5000, "default": 200, "description": "Pause before each number, in milliseconds."},
                    },
                    "additionalProperties": false,
                },
            },
        ]
    })
}

/// What a tool says when exchange mode got neither a token nor a connect link.
pub(crate) const NO_GITHUB_ACCESS: &str = "could not obtain GitHub access";

/// A JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub(crate) fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// What a `tools/call` comes to.
pub(crate) enum Outcome {
    /// A `CallToolResult` (tool errors are results with `isError: true`).
    Result(Value),
    Error(RpcError),
    /// `slow_count`: the transport decides between streaming it and answering after the delays.
    SlowCount(SlowCount),
    /// Exchange mode: the proxy refused with a connect link; how to tell the client depends on
    /// its protocol version and capabilities ([`super::relay`]).
    Refused(Refusal),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SlowCount {
    pub(crate) count: u64,
    pub(crate) delay: Duration,
}

pub(crate) async fn call(app: &AppState, token: &str, params: &Value) -> Outcome {
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return Outcome::Error(RpcError::new(INVALID_PARAMS, "params.name is required"));
    };
    let args = params.get("arguments").cloned().unwrap_or(Value::Null);
    let github_tool = match name {
        "whoami" => Some(GitHubTool::WhoAmI),
        "list_repos" => Some(GitHubTool::ListRepos),
        "create_issue" | "create_branch" | "delete_repo" => Some(GitHubTool::Write),
        _ => None,
    };
    if let Some(tool) = github_tool {
        let github_token = match github_token(app, token).await {
            Ok(t) => t,
            Err(outcome) => return outcome,
        };
        if tool == GitHubTool::Write {
            return Outcome::Result(match github_user(app, &github_token).await {
                Ok((login, _)) => write_echo(name, &login, &args),
                Err(text) => tool_error(&text),
            });
        }
        return Outcome::Result(call_github_tool(app, tool, &github_token).await);
    }
    match name {
        "slow_count" => match slow_count_args(&args) {
            Ok(sc) => Outcome::SlowCount(sc),
            Err(err) => Outcome::Error(err),
        },
        other => Outcome::Error(RpcError::new(
            INVALID_PARAMS,
            format!("Unknown tool: {other}"),
        )),
    }
}

/// The GitHub token to use: the received one, or in exchange mode the one the proxy trades it
/// for (the received token then never goes to GitHub).
async fn github_token(app: &AppState, received: &str) -> Result<String, Outcome> {
    let Some(config) = &app.exchange else {
        return Ok(received.to_owned());
    };
    match exchange::exchange(app, config, received).await {
        Exchanged::Token(token) => Ok(token),
        Exchanged::Refused(refusal) => Err(Outcome::Refused(refusal)),
        Exchanged::Failed => Err(Outcome::Result(tool_error(NO_GITHUB_ACCESS))),
    }
}

/// The tools that need GitHub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GitHubTool {
    WhoAmI,
    ListRepos,
    /// `create_issue`, `create_branch`, `delete_repo`: echo what they received.
    Write,
}

/// A demo write's answer: what it would have done, and the arguments exactly as received.
fn write_echo(tool: &str, login: &str, args: &Value) -> Value {
    let target = format!(
        "{}/{}",
        args.get("owner").and_then(Value::as_str).unwrap_or("?"),
        args.get("repo").and_then(Value::as_str).unwrap_or("?")
    );
    json!({
        "content": [{"type": "text", "text": format!("{tool} for {login} on {target} (demo: nothing was changed).")}],
        "structuredContent": {"tool": tool, "login": login, "arguments": args},
        "isError": false,
    })
}

/// `whoami` or `list_repos` with a GitHub token.
async fn call_github_tool(app: &AppState, tool: GitHubTool, token: &str) -> Value {
    match tool {
        GitHubTool::WhoAmI => match github_user(app, token).await {
            Ok((login, id)) => json!({
                "content": [{"type": "text", "text": format!("You are {login} on GitHub (id {id}).")}],
                "structuredContent": {"login": login, "id": id},
                "isError": false,
            }),
            Err(text) => tool_error(&text),
        },
        GitHubTool::ListRepos => match github_user(app, token).await {
            Ok((login, _)) => repos(&login),
            Err(text) => tool_error(&text),
        },
        GitHubTool::Write => tool_error("a write needs its arguments"),
    }
}

/// A `CallToolResult` with `isError: true` and one text.
pub(crate) fn tool_error(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// `GET /user` with the received token: `(login, id)`, or the text of a tool error.
async fn github_user(app: &AppState, token: &str) -> Result<(String, u64), String> {
    let url = format!("{}/user", app.config.github_api_url.trim_end_matches('/'));
    let resp = app
        .http
        .get(&url)
        .bearer_auth(token)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .header(reqwest::header::ACCEPT, "application/vnd.github+json")
        .send()
        .await
        .map_err(|err| format!("Could not reach GitHub: {err}"))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED {
        return Err("GitHub rejected the token (401)".to_owned());
    }
    if !status.is_success() {
        return Err(format!("GitHub answered {status} to GET /user"));
    }
    let user: Value = resp
        .json()
        .await
        .map_err(|err| format!("GitHub's answer to GET /user was not JSON: {err}"))?;
    match (
        user.get("login").and_then(Value::as_str),
        user.get("id").and_then(Value::as_u64),
    ) {
        (Some(login), Some(id)) => Ok((login.to_owned(), id)),
        _ => Err("GitHub's answer to GET /user had no login or id".to_owned()),
    }
}

fn repos(login: &str) -> Value {
    let repos: Vec<Value> = ["demo-one", "demo-two", "dotfiles"]
        .iter()
        .map(|name| {
            json!({
                "full_name": format!("{login}/{name}"),
                "name": name,
                "private": false,
                "html_url": format!("https://github.com/{login}/{name}"),
            })
        })
        .collect();
    let lines: Vec<String> = repos
        .iter()
        .filter_map(|r| r.get("full_name").and_then(Value::as_str))
        .map(|n| format!("- {n}"))
        .collect();
    json!({
        "content": [{"type": "text", "text": format!("Repositories of {login}:\n{}", lines.join("\n"))}],
        "structuredContent": {"login": login, "repositories": repos},
        "isError": false,
    })
}

fn int_arg(args: &Value, name: &str, default: u64, max: u64, min: u64) -> Result<u64, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| {
                RpcError::new(
                    INVALID_PARAMS,
                    format!("{name} must be an integer from {min} to {max}"),
                )
            }),
    }
}

fn slow_count_args(args: &Value) -> Result<SlowCount, RpcError> {
    if !(args.is_null() || args.is_object()) {
        return Err(RpcError::new(INVALID_PARAMS, "arguments must be an object"));
    }
    Ok(SlowCount {
        count: int_arg(args, "count", 5, 50, 1)?,
        delay: Duration::from_millis(int_arg(args, "delay_ms", 200, 5000, 0)?),
    })
}

/// The `slow_count` result.
pub(crate) fn slow_count_result(count: u64) -> Value {
    // `resultType` is 2026-07-28's (required there); earlier revisions ignore the field, and
    // this result is also sent from the stream task, which does not know the revision.
    json!({
        "resultType": "complete",
        "content": [{"type": "text", "text": format!("counted to {count}")}],
    })
}

/// `notifications/progress` for tick `i` of `count`.
fn progress(token: &Value, i: u64, count: u64) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": i, "total": count, "message": format!("tick {i}")},
    })
}

/// Produces the `slow_count` stream: `count` progress notifications, one every `delay`, then
/// the response. Stops as soon as the stream's consumer is gone (the client disconnected) or
/// the server stops.
pub(crate) async fn slow_count_stream(
    sc: SlowCount,
    request_id: Value,
    progress_token: Value,
    tx: mpsc::Sender<Outgoing>,
    mut stopping: watch::Receiver<bool>,
) {
    for i in 1..=sc.count {
        tokio::select! {
            () = tokio::time::sleep(sc.delay) => {}
            () = tx.closed() => {
                tracing::debug!(tick = i, "slow_count: the client went away, stopping");
                return;
            }
            _ = stopping.changed() => return,
        }
        let message = Outgoing {
            message: progress(&progress_token, i, sc.count),
            last: false,
        };
        if tx.send(message).await.is_err() {
            return;
        }
    }
    let response =
        json!({"jsonrpc": "2.0", "id": request_id, "result": slow_count_result(sc.count)});
    let _ = tx
        .send(Outgoing {
            message: response,
            last: true,
        })
        .await;
}
