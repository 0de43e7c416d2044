//! Real clients against a real proxy: the official MCP TypeScript SDK (npm, unmodified) runs the
//! whole OAuth flow and calls a tool (and, refused with a connect link as a URL elicitation,
//! retries after the person completed the link), and Debian's headless Chromium (driven by
//! playwright-core) checks the consent page, its cookies, framing and a cross-site POST. The Node
//! scripts live beside this file (`tests/e2e/*.mjs`); each prints one JSON line that is checked
//! here, together with what the proxy, the fake GitHub and the demo backend saw.
//!
//! Prerequisites: `node`, `tests/e2e/node_modules` (`npm ci` in `tests/e2e`) and
//! `/usr/bin/chromium` (Debian's `chromium`; `MCP_E2E_CHROMIUM` overrides the path). When one is
//! missing the tests print a notice and pass, so a machine with only Rust still passes
//! `cargo test`; with `MCP_E2E=require` (as in CI, which installs them) they fail instead.
//! Screenshots of the consent and connect-link pages go to `target/e2e/`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::people::Person;
use crate::support::{Options, TestProxy};
use mcp_oauth_proxy::clock::ManualClock;
use mcp_oauth_proxy::store::Keyspace;

/// Upper bound for one Node script (Chromium start-up included).
const NODE_TIMEOUT: Duration = Duration::from_secs(120);

/// `tests/e2e`.
fn e2e_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e")
}

/// Where screenshots go: `<target>/e2e/NAME`.
fn artifact(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
        PathBuf::from,
    );
    target.join("e2e").join(name)
}

fn chromium_path() -> PathBuf {
    std::env::var_os("MCP_E2E_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// What is missing to run the real-client tests (empty when all is there).
fn missing_prerequisites() -> Vec<String> {
    let mut missing = Vec::new();
    let node = Command::new("node")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    match node {
        Ok(out) if out.status.success() => {}
        Ok(out) => missing.push(format!(
            "node (`node --version` exited with {})",
            out.status
        )),
        Err(err) => missing.push(format!("node ({err})")),
    }
    let modules = e2e_dir().join("node_modules");
    for package in ["@modelcontextprotocol/sdk", "playwright-core"] {
        if !modules.join(package).join("package.json").is_file() {
            missing.push(format!(
                "{} (run `npm ci` in {})",
                modules.join(package).display(),
                e2e_dir().display()
            ));
        }
    }
    let chromium = chromium_path();
    if !chromium.is_file() {
        missing.push(format!(
            "{} (Debian's package: `apt-get install --no-install-recommends chromium`)",
            chromium.display()
        ));
    }
    missing
}

/// Whether the test can run. Missing prerequisites skip it with a notice, or fail it when
/// `MCP_E2E=require`.
fn prerequisites_present(test: &str) -> bool {
    let missing = missing_prerequisites();
    if missing.is_empty() {
        return true;
    }
    let list = missing.join("; ");
    if std::env::var("MCP_E2E").as_deref() == Ok("require") {
        panic!("MCP_E2E=require but the real-client e2e prerequisites are missing: {list}");
    }
    eprintln!(
        "NOTICE: skipping e2e test {test}: missing {list}. \
         Install them (see .ci/run) or set MCP_E2E=require to make this a failure."
    );
    false
}

/// The outcome of one Node script.
struct NodeRun {
    success: bool,
    stdout: String,
    stderr: String,
    /// The last stdout line, parsed as JSON.
    result: Value,
    elapsed: Duration,
}

/// Kills the script's whole process group (Node and its Chromium) if the test ends early.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // The child leads its own process group (see `run_node`): end Node and Chromium.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Runs `node SCRIPT ARGS…` in `tests/e2e` and waits (without blocking the runtime that serves
/// the proxy) for it to exit, at most [`NODE_TIMEOUT`].
/// A control server for a script that must move the proxy's injected clock: `POST
/// /advance?ms=N` advances it by N milliseconds. Returns its base URL.
async fn clock_control(clock: std::sync::Arc<ManualClock>) -> String {
    use axum::extract::{Query, State};
    let app = axum::Router::new()
        .route(
            "/advance",
            axum::routing::post(
                |State(clock): State<std::sync::Arc<ManualClock>>,
                 Query(q): Query<std::collections::HashMap<String, u64>>| async move {
                    clock.advance_millis(q.get("ms").copied().unwrap_or(0));
                    "ok"
                },
            ),
        )
        .with_state(clock);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn run_node(script: &str, args: &[&str]) -> NodeRun {
    use std::os::unix::process::CommandExt;

    let started = tokio::time::Instant::now();
    let child = Command::new("node")
        .arg(script)
        .args(args)
        .current_dir(e2e_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start node {script}: {err}"));
    let mut guard = ChildGuard(child);
    let stdout = read_all(guard.0.stdout.take().unwrap());
    let stderr = read_all(guard.0.stderr.take().unwrap());
    let status = loop {
        if let Some(status) = guard.0.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > NODE_TIMEOUT {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(guard); // kills the group if it is still running
    let stdout = stdout.join().unwrap();
    let stderr = stderr.join().unwrap();
    let elapsed = started.elapsed();
    // Progress lines of the script, shown with `--nocapture` or when the test fails.
    eprintln!(
        "--- node {script} ({:.1} s) stderr:\n{stderr}---",
        elapsed.as_secs_f64()
    );
    let Some(status) = status else {
        panic!(
            "node {script} did not finish within {NODE_TIMEOUT:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
    };
    let result = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(Value::Null);
    NodeRun {
        success: status.success(),
        stdout,
        stderr,
        result,
        elapsed,
    }
}

impl NodeRun {
    /// Panics with everything the script said unless it exited 0 with `"ok": true`.
    fn assert_ok(&self, script: &str) -> &Value {
        assert!(
            self.success && self.result["ok"] == true,
            "node {script} failed: {}\nstdout:\n{}\nstderr:\n{}",
            self.result["error"],
            self.stdout,
            self.stderr
        );
        eprintln!(
            "node {script}: ok in {:.1} s: {}",
            self.elapsed.as_secs_f64(),
            self.result
        );
        &self.result
    }
}

fn str_list(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn assert_png(path: &Path) {
    let bytes = std::fs::read(path)
        .unwrap_or_else(|err| panic!("screenshot {} missing: {err}", path.display()));
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 10_000,
        "{} is not a real PNG screenshot ({} bytes)",
        path.display(),
        bytes.len()
    );
}

/// The stored audit events as JSON, in the store's key order (not the order they happened).
async fn audit(proxy: &TestProxy) -> Vec<Value> {
    // The anonymous refusals of this minute too (the server writes them once it is over).
    proxy.app.audit.flush_refusals(true).await.unwrap();
    proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.event)
        .collect()
}

fn count_events(events: &[Value], name: &str) -> usize {
    events.iter().filter(|e| e["event"] == name).count()
}

/// The issue's requirement: the official MCP TypeScript SDK, with its own OAuth client code,
/// discovers the proxy from the 401, registers, sends the person through the proxy's consent and
/// GitHub in Chromium, redeems the code (PKCE, `resource`), lists and calls tools through `/mcp`,
/// and refreshes by itself when its access token stops working.
#[tokio::test]
async fn official_typescript_sdk_client_completes_oauth_and_calls_a_tool() {
    if !prerequisites_present("official_typescript_sdk_client_completes_oauth_and_calls_a_tool") {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Default::default()
    })
    .await;
    let mcp_url = proxy.url("/mcp");
    let shot = artifact("sdk-consent.png");
    let shot_arg = shot.to_string_lossy().into_owned();
    let run = run_node(
        "sdk_flow.mjs",
        &[
            "--mcp-url",
            &mcp_url,
            "--screenshot",
            &shot_arg,
            "--login",
            "alice",
        ],
    )
    .await;
    let r = run.assert_ok("sdk_flow.mjs");

    // What the SDK reported.
    assert_eq!(r["login"], "alice");
    assert!(str_list(&r["tools"]).contains(&"whoami"), "{}", r["tools"]);
    let who = r["whoami"].as_str().unwrap();
    assert!(who.contains("You are alice on GitHub"), "{who}");
    assert!(
        r["whoami_after_refresh"]
            .as_str()
            .unwrap()
            .contains("You are alice on GitHub")
    );
    assert_eq!(r["refreshed"], true);
    assert_eq!(r["refresh_rotated"], true);
    assert_eq!(r["callback_iss"], proxy.base.as_str());
    assert_eq!(r["token_type"], "Bearer");
    let authz = &r["authorize_request"];
    assert_eq!(authz["path"], "/authorize");
    assert_eq!(authz["response_type"], "code");
    assert_eq!(authz["code_challenge_method"], "S256");
    assert_eq!(authz["has_code_challenge"], true);
    assert_eq!(authz["has_state"], true);
    assert_eq!(authz["resource"], mcp_url.as_str());
    assert_eq!(r["consent_page"]["clientName"], "SDK e2e");

    // The SDK found everything by itself: 401 with resource_metadata → RFC 9728 → RFC 8414 →
    // registration → code (PKCE, resource) → ... → 401 invalid_token → refresh (resource).
    let http = r["http"].as_array().unwrap();
    let first = &http[0];
    assert_eq!(
        (
            first["method"].as_str(),
            first["path"].as_str(),
            first["status"].as_u64()
        ),
        (Some("POST"), Some("/mcp"), Some(401)),
        "{first}"
    );
    assert_eq!(
        first["resource_metadata"],
        proxy
            .url("/.well-known/oauth-protected-resource/mcp")
            .as_str()
    );
    let seen = |method: &str, path: &str, status: u64| {
        http.iter()
            .any(|e| e["method"] == method && e["path"] == path && e["status"] == status)
    };
    assert!(
        seen("GET", "/.well-known/oauth-protected-resource/mcp", 200),
        "{http:?}"
    );
    assert!(
        seen("GET", "/.well-known/oauth-authorization-server", 200),
        "{http:?}"
    );
    assert!(seen("POST", "/register", 201), "{http:?}");
    let token_call = |grant: &str| {
        http.iter()
            .find(|e| e["path"] == "/token" && e["grant_type"] == grant)
            .unwrap_or_else(|| panic!("no {grant} token request: {http:?}"))
    };
    let code = token_call("authorization_code");
    assert_eq!(code["status"], 200);
    assert_eq!(code["has_code_verifier"], true);
    assert_eq!(code["resource"], mcp_url.as_str());
    let refresh = token_call("refresh_token");
    assert_eq!(refresh["status"], 200);
    assert_eq!(refresh["resource"], mcp_url.as_str());
    assert!(
        http.iter().any(|e| e["path"] == "/mcp"
            && e["status"] == 401
            && e["www_authenticate_error"] == "invalid_token"),
        "the garbage access token was refused with invalid_token: {http:?}"
    );

    // The proxy's side: the whole flow is in the audit trail, the tool call included.
    let events = audit(&proxy).await;
    let registered = events
        .iter()
        .find(|e| e["event"] == "client_registered")
        .unwrap();
    assert_eq!(registered["client_name"], "SDK e2e");
    assert_eq!(registered["client_id"], r["client_id"]);
    for name in [
        "consent_shown",
        "consent_approved",
        "signed_in",
        "consent_recorded",
        "code_issued",
        "token_issued",
        "token_refreshed",
    ] {
        assert_eq!(count_events(&events, name), 1, "{name}: {events:?}");
    }
    // Refused at /mcp twice: the first request (no token) and the garbage access token.
    // Anonymous refusals, so counted per source and minute rather than stored one by one.
    assert!(
        !events.iter().any(|e| e["event"] == "token_rejected"),
        "{events:?}"
    );
    let mut rejected: Vec<(&str, u64)> = events
        .iter()
        .filter(|e| e["event"] == "anonymous_refusals" && e["refused_at"] == "mcp_token")
        .filter_map(|e| Some((e["reason"].as_str()?, e["count"].as_u64()?)))
        .collect();
    rejected.sort_unstable();
    assert_eq!(rejected, [("missing", 1), ("unknown", 1)], "{events:?}");
    let whoami_calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "upstream_action" && e["tool"] == "whoami")
        .collect();
    assert_eq!(whoami_calls.len(), 2, "{events:?}");
    assert!(
        whoami_calls.iter().all(|e| e["outcome"] == "ok"),
        "{whoami_calls:?}"
    );

    // No passthrough: the backend got alice's GitHub token and never a proxy token; GitHub never
    // saw a proxy token either.
    let gh_tokens = proxy.github.issued_access_tokens("alice");
    assert_eq!(gh_tokens.len(), 1);
    let backend = proxy.backend().requests();
    assert!(!backend.is_empty());
    for req in &backend {
        assert_eq!(
            req.header("authorization"),
            Some(format!("Bearer {}", gh_tokens[0]).as_str())
        );
        let all = format!("{:?}{}", req.headers, req.body);
        assert!(!all.contains("mcpat_") && !all.contains("mcprt_"), "{all}");
    }
    assert!(
        proxy.github.violations().is_empty(),
        "{:?}",
        proxy.github.violations()
    );
    assert!(!r.to_string().contains(&gh_tokens[0]));
    assert_png(&shot);
}

/// The issue's requirement for 2026-07-28: the official TypeScript SDK v2 client, pinned to
/// 2026-07-28, completes OAuth through the proxy in Chromium and calls a tool statelessly; after
/// the person stops the agent from using GitHub, its call meets the connect link as an
/// `input_required` URL request, the person completes it in the browser, and the SDK's own
/// retry with the `requestState` succeeds. The backend saw the 2026-07-28 routing headers
/// unchanged and consistent with each body (the demo backend refuses a mismatch with -32020).
#[tokio::test]
async fn typescript_sdk_v2_on_2026_07_28_completes_oauth_and_retries_after_a_connect_link() {
    if !prerequisites_present(
        "typescript_sdk_v2_on_2026_07_28_completes_oauth_and_retries_after_a_connect_link",
    ) {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Default::default()
    })
    .await;
    let mcp_url = proxy.url("/mcp");
    let run = run_node(
        "sdk_v2_flow.mjs",
        &["--mcp-url", &mcp_url, "--login", "alice"],
    )
    .await;
    let r = run.assert_ok("sdk_v2_flow.mjs");

    assert_eq!(r["login"], "alice");
    assert!(str_list(&r["tools"]).contains(&"whoami"), "{}", r["tools"]);
    for field in ["whoami", "whoami_after_link"] {
        let text = r[field].as_str().unwrap();
        assert!(text.contains("You are alice on GitHub"), "{field}: {text}");
    }
    assert_eq!(r["authorize_resource"], mcp_url.as_str());
    assert_eq!(r["callback_iss"], proxy.base.as_str());
    assert_eq!(r["elicitation"]["mode"], "url");
    let link = r["elicitation"]["url"].as_str().unwrap();
    assert!(link.starts_with(&proxy.url("/connect/")), "{link}");

    // Every /mcp request was 2026-07-28, stateless, with the method mirrored in its header.
    let http = r["http"].as_array().unwrap();
    let mcp: Vec<&Value> = http
        .iter()
        .filter(|e| e["path"] == "/mcp" && e["rpc_method"].is_string())
        .collect();
    assert!(
        mcp.iter()
            .any(|e| e["rpc_method"] == "server/discover" && e["status"] == 200),
        "{mcp:?}"
    );
    for e in &mcp {
        if e["status"] == 401 {
            continue;
        }
        assert_eq!(e["protocol_version"], "2026-07-28", "{e}");
        assert_eq!(e["mcp_method"], e["rpc_method"], "{e}");
        assert!(e["session_id"].is_null(), "{e}");
    }
    // The refused call, then the SDK's own retry with the requestState.
    let calls = r["calls_after_withdrawal"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[0]["result_type"], "input_required", "{calls:?}");
    assert_eq!(calls[0]["declares_url_elicitation"], true, "{calls:?}");
    assert_eq!(calls[0]["has_request_state"], false, "{calls:?}");
    assert_eq!(calls[1]["has_request_state"], true, "{calls:?}");
    assert_eq!(calls[1]["status"], 200, "{calls:?}");
    for c in calls {
        assert_eq!(c["mcp_name"], "whoami", "{c}");
    }

    // The backend got the same 2026-07-28 headers, consistent with the bodies it was sent, and
    // never our requestState or a proxy token.
    let backend = proxy.backend().requests();
    let tool_calls: Vec<_> = backend
        .iter()
        .filter(|q| q.body.contains("\"tools/call\""))
        .collect();
    assert_eq!(
        tool_calls.len(),
        2,
        "the refused call never reached it: {backend:?}"
    );
    for q in &backend {
        assert_eq!(
            q.header("mcp-protocol-version"),
            Some("2026-07-28"),
            "{q:?}"
        );
        let body: Value = serde_json::from_str(&q.body).unwrap();
        assert_eq!(q.header("mcp-method"), body["method"].as_str(), "{q:?}");
        if body["method"] == "tools/call" {
            assert_eq!(
                q.header("mcp-name"),
                body["params"]["name"].as_str(),
                "{q:?}"
            );
            assert!(body["params"].get("requestState").is_none(), "{q:?}");
        }
        let all = format!("{:?}{}", q.headers, q.body);
        assert!(!all.contains("mcpat_") && !all.contains("mcprt_"), "{all}");
    }
    let events = audit(&proxy).await;
    assert_eq!(
        count_events(&events, "connect_link_completed"),
        1,
        "{events:?}"
    );
}

/// `[[policy]] decision = "ask"` with both official SDKs in Chromium: v1 (2025-11-25) gets
/// `-32042` with the approval link and retries the same call; v2 (2026-07-28) gets
/// `input_required` with a `requestState`, its elicitation handler approves, and the SDK retries
/// by itself. The call reaches the backend once, after the approval; a changed argument is
/// held again.
#[tokio::test]
async fn ask_rule_answers_with_an_approval_link_and_the_retry_succeeds_after_approval() {
    if !prerequisites_present(
        "ask_rule_answers_with_an_approval_link_and_the_retry_succeeds_after_approval",
    ) {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: r#"
[[policy]]
id = "writes-need-a-human"
tools = ["create_*"]
arguments = { owner = "acme" }
decision = "ask"
"#
        .to_owned(),
        ..Default::default()
    })
    .await;
    let mcp_url = proxy.url("/mcp");
    for sdk in ["v1", "v2"] {
        let before = proxy.backend().requests().len();
        let run = run_node(
            "sdk_ask.mjs",
            &["--mcp-url", &mcp_url, "--sdk", sdk, "--login", "alice"],
        )
        .await;
        let r = run.assert_ok("sdk_ask.mjs");
        let link = r["first"]["url"].as_str().unwrap();
        assert!(link.starts_with(&proxy.url("/approve/")), "{sdk}: {link}");
        assert_eq!(r["first"]["mode"], "url", "{sdk}");
        if sdk == "v1" {
            assert_eq!(r["first"]["code"], -32042);
        } else {
            let calls = r["after"]["calls"].as_array().unwrap();
            assert_eq!(calls[0]["result_type"], "input_required", "{calls:?}");
            assert_eq!(calls[1]["has_request_state"], true, "{calls:?}");
        }
        assert_eq!(r["approvals"][0]["approve_label"], "Approve once");
        assert_eq!(r["after"]["arguments"]["title"], "Fix the build", "{sdk}");
        assert_ne!(r["changed"]["url"], r["first"]["url"], "{sdk}");
        // The backend got the call once, after the approval, and never the changed one.
        let calls: Vec<Value> = proxy.backend().requests()[before..]
            .iter()
            .filter_map(|q| serde_json::from_str::<Value>(&q.body).ok())
            .filter(|b| b["method"] == "tools/call")
            .collect();
        assert_eq!(calls.len(), 1, "{sdk}: {calls:?}");
        assert_eq!(calls[0]["params"]["arguments"]["title"], "Fix the build");
        assert!(calls[0]["params"].get("requestState").is_none());
    }
    let events = audit(&proxy).await;
    assert_eq!(count_events(&events, "approval_answered"), 2, "{events:?}");
}

/// The consent page in a real browser: Chromium shows the untrusted name as text and the exact
/// destination, stores the proxy's cookies with exactly the `__Host-` attributes (CSRF cookie on
/// the page, flow cookie only after Approve, session after GitHub), refuses to render the page
/// in another site's frame, and an attacker's consent form auto-submitted from another site (or
/// another origin of the same site) is refused with nothing created.
#[tokio::test]
async fn consent_page_cookies_framing_and_cross_site_post_in_chromium() {
    if !prerequisites_present("consent_page_cookies_framing_and_cross_site_post_in_chromium") {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Default::default()
    })
    .await;
    let shot = artifact("consent.png");
    let shot_arg = shot.to_string_lossy().into_owned();
    let run = run_node(
        "consent_browser.mjs",
        &[
            "--base",
            &proxy.base,
            "--screenshot",
            &shot_arg,
            "--login",
            "alice",
        ],
    )
    .await;
    let r = run.assert_ok("consent_browser.mjs");

    // The page as the person saw it.
    let consent = &r["consent"];
    assert_eq!(consent["status"], 200);
    assert_eq!(consent["client_name_shown"], "Browser <b>E2E</b> & Co");
    assert_eq!(consent["unverified_badge"], true);
    assert_eq!(consent["headers"]["x_frame_options"], "DENY");
    assert!(
        consent["headers"]["content_security_policy"]
            .as_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );
    assert_eq!(consent["callback_iss"], proxy.base.as_str());
    assert_eq!(consent["code_redeemed"], true);

    // Cookies exactly as Chromium stored them.
    let cookies = &consent["cookies"];
    for (key, name) in [
        ("csrf_before_approve", "__Host-mcp-csrf"),
        ("flow_after_approve", "__Host-mcp-flow"),
        ("session_after_callback", "__Host-mcp-session"),
    ] {
        let c = &cookies[key];
        assert_eq!(c["name"], name, "{cookies}");
        assert_eq!(c["domain"], "127.0.0.1", "host-only: {c}");
        assert_eq!(c["path"], "/", "{c}");
        assert_eq!(c["secure"], true, "{c}");
        assert_eq!(c["httpOnly"], true, "{c}");
        assert_eq!(c["sameSite"], "Lax", "{c}");
    }
    assert_eq!(cookies["flow_after_callback"], false);

    // Framing: the control frame rendered, the consent frame did not.
    let framing = &r["framing"];
    assert_eq!(framing["control_frame_rendered"], true);
    assert_eq!(framing["approve_buttons_in_frame"], 0);
    assert_eq!(framing["x_frame_options"], "DENY");
    assert_eq!(framing["csp_frame_ancestors"], "frame-ancestors 'none'");

    // Cross-site POSTs: refused, nothing set.
    let posts = r["cross_site_posts"].as_array().unwrap();
    assert_eq!(posts.len(), 2);
    for p in posts {
        assert_eq!(p["status"], 403, "{p}");
        assert_eq!(p["refused"], true, "{p}");
        assert_eq!(p["flow_cookie"], false, "{p}");
        assert_ne!(p["sent_sec_fetch_site"], "same-origin", "{p}");
    }

    // The proxy's side: one approval (the person's), one code, one token; the attacker's forms
    // created no upstream state; GitHub saw one sign-in and no proxy token.
    let events = audit(&proxy).await;
    assert_eq!(count_events(&events, "consent_approved"), 1, "{events:?}");
    assert_eq!(count_events(&events, "code_issued"), 1, "{events:?}");
    assert_eq!(count_events(&events, "token_issued"), 1, "{events:?}");
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
    assert_eq!(proxy.github.issued_access_tokens("alice").len(), 1);
    assert!(
        proxy.github.violations().is_empty(),
        "{:?}",
        proxy.github.violations()
    );
    assert_png(&shot);
}

/// The issue's requirement for connect links: with the official MCP TypeScript SDK client
/// (declaring URL-mode elicitation), a `tools/call` the person's agent may not make is answered
/// with the URL elicitation (`-32042`), the person completes the link in Chromium (same browser,
/// signed in by the authorization), and the SDK's retried call succeeds. The refused call never
/// reaches the backend; only the retry carries the person's GitHub token there.
#[tokio::test]
async fn official_sdk_client_gets_url_elicitation_and_succeeds_after_the_link() {
    if !prerequisites_present(
        "official_sdk_client_gets_url_elicitation_and_succeeds_after_the_link",
    ) {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Default::default()
    })
    .await;
    let mcp_url = proxy.url("/mcp");
    let shot = artifact("connect-link.png");
    let done_shot = artifact("connect-link-done.png");
    let shot_arg = shot.to_string_lossy().into_owned();
    let done_shot_arg = done_shot.to_string_lossy().into_owned();
    let run = run_node(
        "sdk_connect_link.mjs",
        &[
            "--mcp-url",
            &mcp_url,
            "--screenshot",
            &shot_arg,
            "--done-screenshot",
            &done_shot_arg,
            "--login",
            "alice",
        ],
    )
    .await;
    let r = run.assert_ok("sdk_connect_link.mjs");
    let client_id = r["client_id"].as_str().unwrap();
    let client_name = r["client_name"].as_str().unwrap();

    // What the SDK declared and what it raised.
    assert!(
        r["declared_capabilities"]["elicitation"]["url"].is_object(),
        "{}",
        r["declared_capabilities"]
    );
    assert_eq!(r["protocol_version"], "2025-11-25");
    assert_eq!(r["account"]["redirected_to"], "/account?notice=withdrawn");
    let e = &r["elicitation"];
    assert_eq!(e["error_class"], "UrlElicitationRequiredError", "{e}");
    assert_eq!(e["code"], -32042);
    assert_eq!(e["count"], 1);
    assert_eq!(e["mode"], "url");
    let link_url = e["url"].as_str().unwrap();
    assert!(link_url.starts_with(&proxy.url("/connect/")), "{link_url}");
    assert!(
        e["text"].as_str().unwrap().contains(client_name),
        "the message names the agent: {e}"
    );
    let link_id = e["elicitation_id"].as_str().unwrap();

    // The page behind the link, and after Allow.
    let link = &r["link"];
    assert_eq!(link["status"], 200);
    // The authorization's sign-in was silent at GitHub: the link asked for GitHub's picker.
    assert_eq!(link["signed_in_through_picker"], true, "{link}");
    assert_eq!(link["sign_in_prompts"], json!(["select_account"]), "{link}");
    assert_eq!(link["approve_label"], "Allow");
    assert_eq!(link["agent_shown"], client_name);
    assert!(
        link["done_text"]
            .as_str()
            .unwrap()
            .contains("Go back to your agent"),
        "{link}"
    );
    assert_eq!(link["done_url_is_link"], true);
    let who = r["whoami_after"].as_str().unwrap();
    assert!(who.contains("You are alice on GitHub"), "{who}");

    // The proxy's side: the withdrawal, the link made for exactly this refusal (its id is the
    // elicitationId), and its completion.
    let events = audit(&proxy).await;
    let one = |name: &str| {
        let found: Vec<&Value> = events.iter().filter(|e| e["event"] == name).collect();
        assert_eq!(found.len(), 1, "{name}: {events:?}");
        found[0]
    };
    let withdrawn = one("allowance_withdrawn");
    assert_eq!(withdrawn["client_id"], client_id, "{withdrawn}");
    let created = one("connect_link_created");
    assert_eq!(created["link_id"], link_id, "{created}");
    assert_eq!(created["client_id"], client_id, "{created}");
    assert_eq!(created["kind"], "allow", "{created}");
    let completed = one("connect_link_completed");
    assert_eq!(completed["link_id"], link_id, "{completed}");
    assert_eq!(completed["client_id"], client_id, "{completed}");
    assert_eq!(created["user_id"], completed["user_id"]);
    let whoami_calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "upstream_action" && e["tool"] == "whoami")
        .collect();
    assert_eq!(
        whoami_calls.len(),
        1,
        "only the retry went upstream: {events:?}"
    );
    assert_eq!(whoami_calls[0]["outcome"], "ok", "{whoami_calls:?}");

    // The backend: the refused call never reached it; the retry did, with alice's GitHub token
    // (and no request ever carried a proxy token). GitHub issued two: the authorization's,
    // stored, and the link's sign-in's, which only said who signed in and was deleted at once.
    let gh_tokens = proxy.github.issued_access_tokens("alice");
    assert_eq!(gh_tokens.len(), 2);
    assert!(proxy.github.token_scopes(&gh_tokens[1]).is_none());
    let github_bearer = format!("Bearer {}", gh_tokens[0]);
    let backend = proxy.backend().requests();
    let whoami_requests: Vec<_> = backend
        .iter()
        .filter(|req| {
            serde_json::from_str::<Value>(&req.body)
                .is_ok_and(|b| b["method"] == "tools/call" && b["params"]["name"] == "whoami")
        })
        .collect();
    assert_eq!(
        whoami_requests.len(),
        1,
        "the backend got only the retried whoami: {backend:?}"
    );
    assert_eq!(
        whoami_requests[0].header("authorization"),
        Some(github_bearer.as_str())
    );
    for req in &backend {
        assert_eq!(req.header("authorization"), Some(github_bearer.as_str()));
        let all = format!("{:?}{}", req.headers, req.body);
        assert!(!all.contains("mcpat_") && !all.contains("mcprt_"), "{all}");
    }
    assert!(
        proxy.github.violations().is_empty(),
        "{:?}",
        proxy.github.violations()
    );
    assert!(!r.to_string().contains(&gh_tokens[0]));
    assert_png(&shot);
    assert_png(&done_shot);
}

/// The issue's requirement for double-clickjacking, in Chromium (`consent_double_click.mjs`):
/// trusted double-clicks, clicks and Enter on Approve right at load submit nothing; the buttons
/// act only once the page has been visible and focused for a second, go dead at once on blur or
/// hiding and wait again after; then one click approves. With JavaScript off, Continue leads to
/// the confirmation page, which refuses an Approve right after it appeared and takes one a
/// second later. The proxy saw exactly the two deliberate approvals.
#[tokio::test]
async fn consent_buttons_do_nothing_until_the_page_has_been_seen() {
    if !prerequisites_present("consent_buttons_do_nothing_until_the_page_has_been_seen") {
        return;
    }
    let proxy = TestProxy::start().await;
    // The server times the confirmation step with the injected clock, which stands still here:
    // the script moves it on (POST /advance?ms=N to this control server) when it means "a
    // second later", so a loaded machine cannot make a prompt click late or a late one prompt.
    let control = clock_control(proxy.clock.clone()).await;
    let run = run_node(
        "consent_double_click.mjs",
        &[
            "--base",
            &proxy.base,
            "--login",
            "alice",
            "--clock",
            &control,
        ],
    )
    .await;
    let r = run.assert_ok("consent_double_click.mjs");

    let scripted = &r["with_script"];
    assert_eq!(scripted["at_load"]["disabled"], true, "{scripted}");
    assert_eq!(scripted["after_stray"]["posts"], 0, "{scripted}");
    // Page time (Playwright's paused clock): the gestures came at once, and the buttons armed
    // after a second, not before.
    assert!(
        scripted["stray_within_ms"].as_f64().unwrap() < 1000.0,
        "{scripted}"
    );
    assert_eq!(scripted["disabled_900ms_after_load"], true, "{scripted}");
    assert_eq!(scripted["armed_1100ms_after_load"], true, "{scripted}");
    let losses = scripted["focus_loss"].as_array().unwrap();
    assert_eq!(losses.len(), 2, "{scripted}");
    for loss in losses {
        assert_eq!(loss["disabled_on_loss"], true, "{loss}");
        assert_eq!(loss["disabled_on_return"], true, "{loss}");
        assert_eq!(loss["disabled_900ms_after_return"], true, "{loss}");
        assert_eq!(loss["armed_1100ms_after_return"], true, "{loss}");
    }
    assert_eq!(scripted["consent_posts"], 1, "{scripted}");

    let plain = &r["without_script"];
    assert_eq!(plain["script_buttons_visible"], false, "{plain}");
    assert_eq!(plain["too_soon_refused"], true, "{plain}");
    // Back from GitHub without the approving page's value: the finish page, same rule.
    assert_eq!(plain["finish_too_soon_refused"], true, "{plain}");
    // Continue, the refused Approve, the accepted one.
    assert_eq!(plain["consent_posts"], 3, "{plain}");

    let events = audit(&proxy).await;
    assert_eq!(count_events(&events, "consent_approved"), 2, "{events:?}");
    assert_eq!(count_events(&events, "consent_denied"), 0, "{events:?}");
    assert_eq!(proxy.count(Keyspace::UpstreamStates).await, 0);
}

/// The link a refused `tools/call` of `p`'s agent carried (a 2026-07-28 client without URL
/// elicitation: the link is in the tool error's text).
async fn connect_link_for(p: &Person) -> String {
    let (status, msg) = p.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(status, 200, "{msg}");
    assert_eq!(msg["result"]["isError"], true, "a refusal: {msg}");
    msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .find(|w| w.contains("/connect/"))
        .unwrap()
        .to_owned()
}

/// The review's finding, in Chromium (`connect_double_click.mjs`): a connect link's Allow
/// button worked at once, and a double-click begun on another site gave an agent the person
/// had stopped its GitHub access back. Now the browser, with no sign-in of its own, is first
/// sent through GitHub's account picker (`prompt=select_account`); then on the connect,
/// reconnect and allow pages trusted double-clicks, clicks, Enter and Space right at load
/// submit nothing, the buttons arm only after a second of visibility and focus (paused page
/// clock), go dead on blur or hiding and wait again; one click then allows. Without JavaScript,
/// Continue leads to a confirmation that refuses an Allow at once and takes one a second
/// (server time) later. The proxy completed exactly the two deliberate allows.
#[tokio::test]
async fn connect_page_buttons_do_nothing_until_the_page_has_been_seen() {
    use mcp_oauth_proxy::bindings::connect_link::{self, For};
    use mcp_oauth_proxy::ids::{ClientId, UserId};
    use mcp_oauth_proxy::oauth::scope::ScopeSet;
    use mcp_oauth_proxy::store::records::LinkKind;

    if !prerequisites_present("connect_page_buttons_do_nothing_until_the_page_has_been_seen") {
        return;
    }
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Default::default()
    })
    .await;
    // Two of alice's agents, stopped on the account page: their next calls get allow links.
    let a = Person::with_agent(&proxy, "alice", "Agent A", "2026-07-28").await;
    let b = Person::with_agent(&proxy, "alice", "Agent B", "2026-07-28").await;
    a.withdraw_agent(&proxy).await;
    b.withdraw_agent(&proxy).await;
    let allow = connect_link_for(&a).await;
    let allow_noscript = connect_link_for(&b).await;
    // A connect and a reconnect link, made as the gateway makes them (their page is the same
    // template; only whether it holds its buttons is checked for them).
    let mut kind_links = Vec::new();
    for (agent, kind) in [
        ("agent-c", LinkKind::Connect),
        ("agent-d", LinkKind::Reconnect),
    ] {
        let (user, client) = (UserId::github(1001), ClientId::new(agent));
        let issued = connect_link::request(
            proxy.app.store.as_ref(),
            &proxy.app.keys.connect_link,
            proxy.app.clock.now(),
            1800,
            For {
                user: &user,
                client: &client,
            },
            kind,
            &ScopeSet::default(),
        )
        .await
        .unwrap();
        kind_links.push(proxy.url(&issued.path));
    }
    let picker_requests_before = picker_requests(&proxy);
    let control = clock_control(proxy.clock.clone()).await;
    let run = run_node(
        "connect_double_click.mjs",
        &[
            "--base",
            &proxy.base,
            "--clock",
            &control,
            "--login",
            "alice",
            "--allow",
            &allow,
            "--allow-noscript",
            &allow_noscript,
            "--connect",
            &kind_links[0],
            "--reconnect",
            &kind_links[1],
        ],
    )
    .await;
    let r = run.assert_ok("connect_double_click.mjs");

    let scripted = &r["with_script"];
    assert_eq!(
        scripted["sign_in"]["authorize_requests"],
        json!([{"prompt": "select_account", "login": null}]),
        "{scripted}"
    );
    for (kind, label) in [
        ("connect", "Connect GitHub"),
        ("reconnect", "Reconnect GitHub"),
        ("allow", "Allow"),
    ] {
        let k = &scripted["kinds"][kind];
        assert_eq!(k["label"], label, "{kind}: {k}");
        assert_eq!(k["disabled_at_load"], true, "{kind}: {k}");
        assert_eq!(k["posts_after_stray"], 0, "{kind}: {k}");
        assert!(
            k["stray_within_ms"].as_f64().unwrap() < 1000.0,
            "{kind}: {k}"
        );
        assert_eq!(k["disabled_900ms_after_load"], true, "{kind}: {k}");
        assert_eq!(k["armed_1100ms_after_load"], true, "{kind}: {k}");
    }
    let losses = scripted["focus_loss"].as_array().unwrap();
    assert_eq!(losses.len(), 2, "{scripted}");
    for loss in losses {
        assert_eq!(loss["disabled_on_loss"], true, "{loss}");
        assert_eq!(loss["disabled_on_return"], true, "{loss}");
        assert_eq!(loss["disabled_900ms_after_return"], true, "{loss}");
        assert_eq!(loss["armed_1100ms_after_return"], true, "{loss}");
    }
    assert_eq!(scripted["allow_posts"], 1, "{scripted}");

    let plain = &r["without_script"];
    assert_eq!(plain["script_buttons_visible"], false, "{plain}");
    assert_eq!(plain["too_soon_refused"], true, "{plain}");
    // Continue, the refused Allow, the accepted one.
    assert_eq!(plain["link_posts"], 3, "{plain}");

    // The proxy's side: the two deliberate allows and nothing else. Both agents may use
    // GitHub again; the connect and reconnect links are still open; each browser signed in
    // once, through the picker, and GitHub received exactly those two picker requests.
    let events = audit(&proxy).await;
    assert_eq!(
        count_events(&events, "connect_link_completed"),
        2,
        "{events:?}"
    );
    let mut sign_ins: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "signed_in")
        .filter_map(|e| e["sign_in"].as_str())
        .collect();
    sign_ins.sort_unstable();
    assert_eq!(
        sign_ins,
        ["account_picker", "account_picker", "silent", "silent"],
        "{events:?}"
    );
    assert_eq!(picker_requests(&proxy) - picker_requests_before, 2);
    for p in [&a, &b] {
        let (_, msg) = p.mcp.call_tool("whoami", json!({})).await;
        assert!(msg.to_string().contains("You are alice"), "{msg}");
    }
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, 2);
}

/// Authorize requests the fake GitHub received with `prompt=select_account`.
fn picker_requests(proxy: &TestProxy) -> usize {
    proxy
        .github
        .requests()
        .iter()
        .filter(|r| r.path() == "/login/oauth/authorize")
        .filter(|r| r.path_and_query.contains("prompt=select_account"))
        .count()
}

/// The issue's `form-action` requirement, in Chromium (`consent_form_action.mjs`), which
/// applies `form-action` to the redirects after a form POST: the consent page lists exactly
/// GitHub and this request's redirect URI, so Deny still reaches a loopback redirect on its
/// request-time port (127.0.0.1 and `[::1]`) and a private-use-scheme one, Approve still reaches
/// GitHub, and a form pointed anywhere else is blocked.
#[tokio::test]
async fn consent_form_action_lets_approve_and_deny_through_and_blocks_other_destinations() {
    if !prerequisites_present(
        "consent_form_action_lets_approve_and_deny_through_and_blocks_other_destinations",
    ) {
        return;
    }
    let proxy = TestProxy::start().await;
    let run = run_node("consent_form_action.mjs", &["--base", &proxy.base]).await;
    let r = run.assert_ok("consent_form_action.mjs");
    let github = proxy.github.base_url();

    for (key, source) in [
        ("deny_loopback", "http://127.0.0.1:"),
        ("deny_ipv6_loopback", "http:"),
        ("deny_private_scheme", "com.example.e2e:"),
    ] {
        let d = &r[key];
        let fa = d["form_action"].as_str().unwrap();
        assert!(
            fa.starts_with(&format!("form-action 'self' {github} {source}")),
            "{key}: {fa}"
        );
        assert_eq!(d["csp_violations"], 0, "{key}: {d}");
    }
    assert_eq!(r["deny_loopback"]["error"], "access_denied");
    assert_eq!(r["deny_loopback"]["code"], Value::Null);
    assert_eq!(r["deny_ipv6_loopback"]["error"], "access_denied");
    let scheme = &r["deny_private_scheme"];
    assert_eq!(scheme["followed"], true, "{scheme}");
    assert_eq!(scheme["redirected_by"], 303, "{scheme}");
    assert_eq!(scheme["error"], "access_denied", "{scheme}");
    assert_eq!(scheme["state_matches"], true, "{scheme}");

    let approve = &r["approve"];
    assert!(
        approve["title"]
            .as_str()
            .unwrap()
            .starts_with("Sign in to GitHub"),
        "{approve}"
    );
    assert_eq!(approve["csp_violations"], 0, "{approve}");

    let injected = &r["injected_form"];
    assert_eq!(injected["hits_elsewhere"], 0, "{injected}");
    assert_eq!(injected["stayed_at_the_proxy"], true, "{injected}");
    assert!(
        injected["violation"]
            .as_str()
            .unwrap()
            .contains("form-action"),
        "{injected}"
    );

    let events = audit(&proxy).await;
    assert_eq!(count_events(&events, "consent_denied"), 3, "{events:?}");
    assert_eq!(count_events(&events, "code_issued"), 0, "{events:?}");
}

/// The review's cookie-tossing Low, in Chromium (`tossed_cookie.mjs`): a page on another port of
/// 127.0.0.1 sets `__Host-mcp-flow` over plain HTTP and Chromium sends it to the proxy's port;
/// GitHub sends the victim straight back with her code and the attacker's state. The proxy
/// answers with the finish page and stays there: no code, no GitHub exchange, nothing at the
/// attacker's redirect URI.
#[tokio::test]
async fn tossed_flow_cookie_in_chromium_reaches_only_the_finish_page() {
    if !prerequisites_present("tossed_flow_cookie_in_chromium_reaches_only_the_finish_page") {
        return;
    }
    let proxy = TestProxy::start().await;
    let run = run_node("tossed_cookie.mjs", &["--base", &proxy.base]).await;
    let r = run.assert_ok("tossed_cookie.mjs");
    let t = &r["tossed"];
    // The attack's premise holds in Chromium: the other port's cookie reached the proxy.
    assert_eq!(t["cookie_accepted_for_proxy"], true, "{t}");
    assert_eq!(t["at_proxy_callback"], true, "{t}");
    assert_eq!(
        t["final_title"], "Finish authorization · MCP OAuth Proxy",
        "{t}"
    );
    assert_eq!(t["names_mallorys_client"], "Triage Helper", "{t}");
    assert_eq!(t["reached_mallorys_redirect"], 0, "{t}");
    // Alice's own authorization: one code and one GitHub exchange; Mallory's: none.
    let events = audit(&proxy).await;
    assert_eq!(count_events(&events, "code_issued"), 1, "{events:?}");
    assert_eq!(count_events(&events, "consent_recorded"), 1, "{events:?}");
    assert_eq!(proxy.github.token_requests(), 1);
    assert_eq!(
        proxy.count(Keyspace::UpstreamStates).await,
        1,
        "Mallory's waits, unused"
    );
}
