//! `[[policy]]` at the gateway: deny, step-up and "ask the person", each before anything
//! reaches the backend. Alice is the person; mallory the colleague who should not approve for
//! her.

use crate::support::client::Pkce;
use crate::support::mcp::Mcp;
use crate::support::people::Person;
use crate::support::{Options, TestProxy, http, query_param};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::{Value, json};

const POLICY: &str = r#"
[[policy]]
id = "no-deletes"
tools = ["delete_*"]
decision = "deny"

[[policy]]
id = "writes-need-a-human"
tools = ["create_issue"]
arguments = { owner = "acme" }
decision = "ask"
ask_ttl_secs = 1800

[[policy]]
id = "branches-need-a-permission"
tools = ["create_branch"]
decision = "step_up"
scopes = ["tools:branches"]

[alerts]
policy_denial_threshold = 3
"#;

fn opts() -> Options {
    Options {
        backend: true,
        extra_toml: POLICY.to_owned(),
        ..Options::default()
    }
}

/// Tool calls the backend received, by tool name.
fn backend_calls(proxy: &TestProxy, tool: &str) -> usize {
    proxy
        .backend()
        .requests()
        .iter()
        .filter(|r| {
            serde_json::from_str::<Value>(&r.body)
                .is_ok_and(|b| b["method"] == "tools/call" && b["params"]["name"] == tool)
        })
        .count()
}

fn events(records: &[mcp_oauth_proxy::audit::AuditRecord], kind: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r.kind == kind)
        .map(|r| r.event.clone())
        .collect()
}

fn call(name: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": name, "arguments": args}})
}

/// The approval link a held call's fallback answer carries (a client without URL elicitation).
fn link_in(msg: &Value) -> String {
    assert_eq!(msg["result"]["isError"], true, "{msg}");
    msg["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .find(|w| w.contains("/approve/"))
        .unwrap_or_else(|| panic!("an approval link: {msg}"))
        .to_owned()
}

#[tokio::test]
async fn denied_tool_never_reaches_the_backend_and_is_hidden_from_tools_list() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;

    let (status, msg) = alice
        .mcp
        .call_tool("delete_repo", json!({"owner": "acme", "repo": "site"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(msg["result"]["isError"], true, "{msg}");
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("no-deletes"), "the rule is named: {text}");
    assert_eq!(backend_calls(&proxy, "delete_repo"), 0);

    // Case does not get around the rule (tool names are matched without ASCII case).
    let (_, msg) = alice
        .mcp
        .call_tool("DELETE_repo", json!({"owner": "acme", "repo": "site"}))
        .await;
    assert_eq!(msg["result"]["isError"], true, "{msg}");
    assert_eq!(backend_calls(&proxy, "DELETE_repo"), 0);

    // The list no longer names it; the others are all there.
    let (status, list) = alice
        .mcp
        .request(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}))
        .await;
    assert_eq!(status, 200, "{list}");
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"delete_repo"), "{names:?}");
    for kept in ["whoami", "create_issue", "create_branch", "slow_count"] {
        assert!(names.contains(&kept), "{kept} stays listed: {names:?}");
    }

    // Audited with the rule and a digest, never the arguments.
    let all = proxy.app.audit.all().await.unwrap();
    let denied = events(&all, "policy_decision");
    let first = denied
        .iter()
        .find(|e| e["outcome"] == "denied")
        .expect("the denial is audited");
    assert_eq!(first["rule_id"], "no-deletes");
    assert_eq!(first["decision"], "deny");
    assert!(!first.to_string().contains("site"), "{first}");
    assert!(
        denied
            .iter()
            .any(|e| e["outcome"] == "hidden" && e["tool"] == "delete_repo")
    );

    // A third denial within the window raises the burst alert for this client.
    alice.mcp.call_tool("delete_repo", json!({})).await;
    let all = proxy.app.audit.all().await.unwrap();
    let alerts = events(&all, "alert_raised");
    assert!(
        alerts.iter().any(|a| a["alert"] == "policy_denial_burst"),
        "{alerts:?}"
    );
}

#[tokio::test]
async fn ambiguous_json_and_look_alike_tool_names_are_refused_before_the_policy_runs() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let before = proxy.backend().requests().len();
    // `owner` twice: a rule would read one, the backend maybe the other.
    let raw = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"acme","owner":"elsewhere","repo":"r","title":"t"}}}"#;
    let resp = http()
        .post(proxy.url("/mcp"))
        .bearer_auth(&alice.mcp.token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "create_issue")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let msg: Value = resp.json().await.unwrap();
    assert_eq!(msg["error"]["code"], -32600, "{msg}");
    assert_eq!(msg["id"], 9, "the top-level id is unambiguous: answered");
    // A Cyrillic "е" in "dеlete_repo" is not the tool the rule names; it never gets that far
    // (here, as a 2025-11-25 client sends it: no mirrored header to disagree with).
    let mut old = Mcp::with_token(&proxy, &alice.mcp.token);
    old.version = "2025-11-25";
    let (_, msg) = old
        .call_tool("d\u{0435}lete_repo", json!({"owner": "acme"}))
        .await;
    assert_eq!(msg["error"]["code"], -32602, "{msg}");
    // As a 2026-07-28 client sends it, the non-ASCII name in `Mcp-Name` is refused as well.
    let (status, msg) = alice
        .mcp
        .call_tool("d\u{0435}lete_repo", json!({"owner": "acme"}))
        .await;
    assert!(
        status == 400 || msg["error"]["code"] == -32602,
        "{status} {msg}"
    );
    assert_eq!(
        proxy.backend().requests().len(),
        before,
        "nothing forwarded"
    );
    assert_eq!(proxy.count(Keyspace::ApprovalLinks).await, 0);
}

#[tokio::test]
async fn approval_is_single_use_and_bound_to_the_arguments() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site", "title": "Fix the build"});

    // Not under the rule (another owner): forwarded at once.
    let (_, msg) = alice
        .mcp
        .call_tool(
            "create_issue",
            json!({"owner": "alice", "repo": "r", "title": "t"}),
        )
        .await;
    assert_eq!(msg["result"]["isError"], false, "{msg}");

    let (_, held) = alice.mcp.call_tool("create_issue", args.clone()).await;
    let link = link_in(&held);
    assert_eq!(
        backend_calls(&proxy, "create_issue"),
        1,
        "held, not forwarded"
    );
    // Asked again before the person answers: the same link, still nothing forwarded.
    let (_, again) = alice.mcp.call_tool("create_issue", args.clone()).await;
    assert_eq!(link_in(&again), link);
    assert_eq!(proxy.count(Keyspace::ApprovalLinks).await, 1);

    // The page shows the agent, the tool, the rule and the arguments.
    let page = alice.open_link(&proxy, &link).await;
    assert_eq!(page.status, 200, "{}", page.body);
    for shown in [
        "Repo Helper",
        "create_issue",
        "writes-need-a-human",
        "Fix the build",
    ] {
        assert!(page.body.contains(shown), "{shown} on the page");
    }
    let done = alice.decide(&proxy, &link, &page, "approve").await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(done.body.contains("Go back to your agent"));
    assert!(done.location().is_none(), "the page never redirects");
    assert_eq!(alice.open(&link).await.status, 404, "answered: gone");

    // One changed argument: asks again, and the approval stays unused.
    let mut changed = args.clone();
    changed["title"] = json!("Fix the build (and delete the tests)");
    let (_, msg) = alice.mcp.call_tool("create_issue", changed).await;
    let other_link = link_in(&msg);
    assert_ne!(other_link, link);
    // Key order is not a change: the canonical arguments are the same call.
    let reordered = json!({"title": "Fix the build", "repo": "site", "owner": "acme"});
    let (_, msg) = alice.mcp.call_tool("create_issue", reordered).await;
    assert_eq!(msg["result"]["isError"], false, "{msg}");
    assert_eq!(
        msg["result"]["structuredContent"]["arguments"]["title"],
        "Fix the build"
    );
    assert_eq!(backend_calls(&proxy, "create_issue"), 2);

    // Replayed: the approval was used.
    let (_, msg) = alice.mcp.call_tool("create_issue", args.clone()).await;
    assert!(link_in(&msg).contains("/approve/"));
    assert_eq!(
        backend_calls(&proxy, "create_issue"),
        2,
        "a replay is held again"
    );
    assert_eq!(proxy.count(Keyspace::ToolApprovals).await, 0);

    let all = proxy.app.audit.all().await.unwrap();
    let outcomes: Vec<String> = events(&all, "policy_decision")
        .iter()
        .filter(|e| e["tool"] == "create_issue")
        .map(|e| e["outcome"].as_str().unwrap().to_owned())
        .collect();
    assert!(outcomes.contains(&"approval_requested".to_owned()));
    assert!(outcomes.contains(&"approval_used".to_owned()));
    assert_eq!(events(&all, "approval_answered")[0]["answer"], "approved");

    // The account page lists the waiting call and the recent answer.
    let account = alice.open(&proxy.url("/account")).await;
    assert!(account.body.contains("Tool calls held for your approval"));
    assert!(account.body.contains("Approved"));
    assert!(account.body.contains("/approve/"), "{}", account.body);
}

#[tokio::test]
async fn denying_an_approval_forwards_nothing() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site", "title": "t"});
    let (_, held) = alice.mcp.call_tool("create_issue", args.clone()).await;
    let link = link_in(&held);
    let page = alice.open_link(&proxy, &link).await;
    let done = alice.decide(&proxy, &link, &page, "deny").await;
    assert_eq!(done.status, 200);
    let (_, msg) = alice.mcp.call_tool("create_issue", args).await;
    assert!(link_in(&msg).contains("/approve/"), "asks again");
    assert_eq!(backend_calls(&proxy, "create_issue"), 0);
}

#[tokio::test]
async fn approval_link_opened_by_another_person_approves_nothing_and_alerts() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let mallory = Person::with_agent(&proxy, "mallory", "Triage Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site", "title": "t"});
    let (_, held) = alice.mcp.call_tool("create_issue", args.clone()).await;
    let link = link_in(&held);

    let page = mallory.open(&link).await;
    assert_eq!(page.status, 403);
    assert!(
        !page.body.contains("name=\"decision\""),
        "no action offered"
    );
    assert!(
        !page.body.contains("create_issue"),
        "nothing of the call shown"
    );
    let post = mallory
        .browser
        .post_form(
            &link,
            &[("csrf", "x"), ("decision", "approve")],
            &proxy.base,
            "same-origin",
        )
        .await;
    assert_eq!(post.status, 403);
    // Nothing approved: alice's call is still held; the link still works for alice.
    assert_eq!(proxy.count(Keyspace::ToolApprovals).await, 0);
    let (_, msg) = alice.mcp.call_tool("create_issue", args).await;
    assert_eq!(link_in(&msg), link);
    assert_eq!(backend_calls(&proxy, "create_issue"), 0);
    assert_eq!(alice.open_link(&proxy, &link).await.status, 200);

    let all = proxy.app.audit.all().await.unwrap();
    assert!(
        events(&all, "alert_raised")
            .iter()
            .any(|a| a["alert"] == "connect_link_wrong_person"),
        "operators are alerted"
    );
    let refused = events(&all, "connect_link_refused");
    assert_eq!(refused[0]["opener"], "github:1002");
}

#[tokio::test]
async fn stale_sign_in_must_sign_in_again_before_approving() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site", "title": "t"});
    let (_, held) = alice.mcp.call_tool("create_issue", args.clone()).await;
    let link = link_in(&held);
    let page = alice.open_link(&proxy, &link).await;
    assert_eq!(page.status, 200);
    proxy.clock.advance(16 * 60);
    let r = alice.open(&link).await;
    assert_eq!(r.status, 303);
    assert!(r.location().unwrap().contains("prompt=select_account"));
    // The form of the page seen before is refused the same way; nothing is approved.
    let r = alice.decide(&proxy, &link, &page, "approve").await;
    assert_eq!(r.status, 303);
    assert_eq!(proxy.count(Keyspace::ToolApprovals).await, 0);
    // Signing in again leads back to the link, and approving then works.
    let gh = r.location().unwrap();
    let back = alice.browser.through_github(&gh, "alice").await;
    let cb = alice
        .browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    assert_eq!(cb.status, 303);
    assert!(cb.location().unwrap().contains("/approve/"));
    let page = alice.open(&link).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(
        alice.decide(&proxy, &link, &page, "approve").await.status,
        200
    );
    let (_, msg) = alice.mcp.call_tool("create_issue", args).await;
    assert_eq!(msg["result"]["isError"], false, "{msg}");
}

#[tokio::test]
async fn ask_answers_a_2025_client_with_url_elicitation_and_a_2026_client_with_input_required() {
    let proxy = TestProxy::start_with(opts()).await;
    let args = json!({"owner": "acme", "repo": "site", "title": "t"});

    let mut old = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    old.mcp.initialize(true).await;
    let (_, msg) = old.mcp.call_tool("create_issue", args.clone()).await;
    assert_eq!(msg["error"]["code"], -32042, "{msg}");
    let e = &msg["error"]["data"]["elicitations"][0];
    assert_eq!(e["mode"], "url");
    let url = e["url"].as_str().unwrap().to_owned();
    assert!(url.contains("/approve/"));
    let page = old.open_link(&proxy, &url).await;
    assert_eq!(old.decide(&proxy, &url, &page, "approve").await.status, 200);
    let (_, msg) = old.mcp.call_tool("create_issue", args.clone()).await;
    assert_eq!(
        msg["result"]["isError"], false,
        "the same call, retried: {msg}"
    );

    let new = Person::with_agent(&proxy, "bob", "Repo Helper", "2026-07-28").await;
    let body = |state: Option<&str>| {
        let mut params = json!({"name": "create_issue", "arguments": args, "_meta": {
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}}}});
        if let Some(s) = state {
            params["requestState"] = json!(s);
            params["inputResponses"] = json!({"tool_approval": {"action": "accept"}});
        }
        json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params})
    };
    let (_, msg) = new.mcp.request(body(None)).await;
    let r = &msg["result"];
    assert_eq!(r["resultType"], "input_required", "{msg}");
    let url = r["inputRequests"]["tool_approval"]["params"]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = r["requestState"].as_str().unwrap().to_owned();
    let page = new.open_link(&proxy, &url).await;
    assert_eq!(new.decide(&proxy, &url, &page, "approve").await.status, 200);
    let (_, done) = new.mcp.request(body(Some(&state))).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let forwarded = proxy.backend().requests().pop().unwrap();
    assert!(
        !forwarded.body.contains("requestState") && !forwarded.body.contains("tool_approval"),
        "{}",
        forwarded.body
    );
    // The state is bound to the call: the same state with other arguments is refused.
    let mut other = body(Some(&state));
    other["params"]["arguments"]["title"] = json!("other");
    let (status, _) = new.mcp.request(other).await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn step_up_rule_returns_insufficient_scope_and_a_reauthorization_with_the_scope_passes() {
    let proxy = TestProxy::start_with(opts()).await;
    // The agent asked for read:user only (the test client's default scope).
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site", "branch": "fix"});
    let resp = alice
        .mcp
        .post(&call("create_branch", args.clone()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("tools:branches"), "{challenge}");
    assert!(
        challenge.contains("read:user") && challenge.contains("repo"),
        "what the token has stays: {challenge}"
    );
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{}",
            proxy.url("/.well-known/oauth-protected-resource")
        )),
        "{challenge}"
    );
    assert_eq!(backend_calls(&proxy, "create_branch"), 0);

    // The client re-authorizes with the scope the challenge named; the person consents again
    // (the consent page shows the extra access) and the call passes.
    let scope = challenge
        .split("scope=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    let pkce = Pkce::new();
    let page = alice
        .browser
        .navigate(
            &alice
                .client
                .authorize_url(&proxy, &pkce, "st-2", &[("scope", &scope)]),
            "none",
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("tools:branches") && page.body.contains("adds no GitHub access"),
        "the consent page names the extra permission: {}",
        page.body
    );
    let gh = crate::support::client::approve(&proxy, &alice.browser, &page).await;
    let back = alice.browser.through_github(&gh, "alice").await;
    let cb = alice
        .browser
        .navigate(&back.location().unwrap(), "cross-site")
        .await;
    let code = query_param(&cb.location().unwrap(), "code").unwrap();
    let t = alice.client.redeem(&proxy, &code, &pkce, &[]).await;
    assert_eq!(t.status, 200, "{:?}", t.json);
    assert!(t.json["scope"].as_str().unwrap().contains("tools:branches"));
    let mut stepped = Mcp::with_token(&proxy, t.json["access_token"].as_str().unwrap());
    stepped.version = "2026-07-28";
    let (status, msg) = stepped.call_tool("create_branch", args).await;
    assert_eq!(status, 200);
    assert_eq!(msg["result"]["isError"], false, "{msg}");
    assert_eq!(backend_calls(&proxy, "create_branch"), 1);
}

#[tokio::test]
async fn hidden_tools_are_left_out_of_a_tools_list_answered_over_sse_too() {
    let proxy = TestProxy::start_with(Options {
        backend_prefers_sse: true,
        ..opts()
    })
    .await;
    let mut alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    alice.mcp.initialize(false).await;
    let resp = alice
        .mcp
        .post(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = resp.text().await.unwrap();
    assert!(!body.contains("delete_repo"), "{body}");
    assert!(body.contains("create_issue"), "{body}");
}

/// A POST of raw bytes to /mcp with alice's token, as a 2026-07-28 client.
async fn raw_post(proxy: &TestProxy, token: &str, body: Vec<u8>, name: &str) -> (u16, Value) {
    let resp = http()
        .post(proxy.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn bodies_other_parsers_read_differently_never_carry_a_denied_call_past_the_rules() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let call = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"delete_repo","arguments":{"owner":"acme","repo":"x"#;
    let deep = format!(
        "{call}\"}}}},\"pad\":{}{}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    for (what, body) in [
        // A lone surrogate: serde_json refuses it, many parsers accept it.
        (
            "lone surrogate",
            format!("{call}\\ud800\"}}}}}}").into_bytes(),
        ),
        // Nesting past serde_json's limit.
        ("deep nesting", deep.into_bytes()),
        // Trailing bytes after the object (a streaming decoder stops at the first value).
        (
            "trailing bytes",
            format!("{call}\"}}}}}} {{\"x\":1}}").into_bytes(),
        ),
        // An invalid UTF-8 byte in a string.
        ("invalid UTF-8", {
            let mut b = call.as_bytes().to_vec();
            b.push(0xff);
            b.extend_from_slice(b"\"}}}");
            b
        }),
    ] {
        let (status, msg) = raw_post(&proxy, &alice.mcp.token, body, "delete_repo").await;
        assert_eq!(status, 400, "{what}: {msg}");
        assert_eq!(msg["error"]["code"], -32700, "{what}: {msg}");
    }
    // `method` twice: serde_json reads the last (`ping`), a first-wins parser `tools/call`.
    let twice = format!("{call}\"}}}},\"method\":\"ping\"}}");
    let (status, msg) = raw_post(&proxy, &alice.mcp.token, twice.into_bytes(), "delete_repo").await;
    assert_eq!(status, 400);
    assert_eq!(msg["error"]["code"], -32600, "{msg}");
    assert_eq!(
        msg["id"],
        Value::Null,
        "a top-level ambiguity answers no id"
    );
    // The mirrored header names another tool than the body.
    let honest = format!("{call}\"}}}}}}");
    let (status, msg) = raw_post(
        &proxy,
        &alice.mcp.token,
        honest.clone().into_bytes(),
        "create_issue",
    )
    .await;
    assert_eq!(status, 400, "{msg}");
    // `Mcp-Name` mirrors `params.uri` for resources/read: an honest one is not refused.
    let read = http()
        .post(proxy.url("/mcp"))
        .bearer_auth(&alice.mcp.token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "resources/read")
        .header("mcp-name", "repo://acme/site")
        .body(r#"{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"repo://acme/site"}}"#)
        .send()
        .await
        .unwrap();
    let read: Value = read.json().await.unwrap_or(Value::Null);
    assert_ne!(read["error"]["code"], -32020, "{read}");
    let before = proxy.backend().requests().len();
    // Another method, or a body on GET: refused.
    let put = http()
        .put(proxy.url("/mcp"))
        .bearer_auth(&alice.mcp.token)
        .header("content-type", "application/json")
        .body(honest.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 405);
    let get = http()
        .get(proxy.url("/mcp"))
        .bearer_auth(&alice.mcp.token)
        .header("accept", "text/event-stream")
        .body(honest)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 400);
    assert_eq!(
        proxy.backend().requests().len(),
        before,
        "nothing reached the backend"
    );
    let all = proxy.app.audit.all().await.unwrap();
    let outcomes: Vec<String> = events(&all, "policy_decision")
        .iter()
        .map(|e| e["outcome"].as_str().unwrap().to_owned())
        .collect();
    for o in [
        "refused_unreadable",
        "refused_ambiguous_keys",
        "refused_mirrored_headers",
        "refused_method",
        "refused_body",
    ] {
        assert!(outcomes.iter().any(|x| x == o), "{o} audited: {outcomes:?}");
    }
}

#[tokio::test]
async fn a_denied_call_creates_no_connect_link_even_when_github_access_is_missing() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    alice.withdraw_agent(&proxy).await;
    let (_, msg) = alice
        .mcp
        .call_tool("delete_repo", json!({"owner": "acme", "repo": "site"}))
        .await;
    let text = msg["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("no-deletes"), "{text}");
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, 0);
    assert_eq!(proxy.count(Keyspace::ApprovalLinks).await, 0);
    // An allowed call still gets its connect link.
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("/connect/"), "{msg}");
}

/// The SIGHUP path in process (`run::reload_config`, what the signal handler calls), seen from
/// tool calls: a file with a broken policy changes nothing, a good one applies to the next call.
#[tokio::test]
async fn bad_policy_on_reload_keeps_denying_and_a_good_one_applies_to_the_next_call() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let args = json!({"owner": "acme", "repo": "site"});
    let denied = |msg: &Value| {
        msg["result"]["content"][0]["text"]
            .to_string()
            .contains("no-deletes")
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.toml");
    let env = std::collections::HashMap::<String, String>::new();

    let broken = proxy
        .toml
        .replace(r#"tools = ["delete_*"]"#, r#"tools = ["delete_[oops"]"#);
    assert_ne!(broken, proxy.toml);
    std::fs::write(&path, &broken).unwrap();
    mcp_oauth_proxy::run::reload_config(&proxy.app, &path, &env);
    let (_, msg) = alice.mcp.call_tool("delete_repo", args.clone()).await;
    assert!(denied(&msg), "the current policy stays: {msg}");
    assert_eq!(backend_calls(&proxy, "delete_repo"), 0);

    let allowing = proxy
        .toml
        .replace(r#"decision = "deny""#, r#"decision = "allow""#);
    std::fs::write(&path, &allowing).unwrap();
    mcp_oauth_proxy::run::reload_config(&proxy.app, &path, &env);
    let (_, msg) = alice.mcp.call_tool("delete_repo", args).await;
    assert_eq!(
        msg["result"]["isError"], false,
        "the new policy applies: {msg}"
    );
    assert_eq!(backend_calls(&proxy, "delete_repo"), 1);
}

#[tokio::test]
async fn an_approved_call_reaches_the_backend_as_the_page_showed_it() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    // A number serde_json reads as 1e23, which another parser may read as an exact integer.
    let raw = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"acme","repo":"site","title":"t","count":99999999999999999999999}}}"#;
    let (_, held) = raw_post(
        &proxy,
        &alice.mcp.token,
        raw.as_bytes().to_vec(),
        "create_issue",
    )
    .await;
    let link = link_in(&held);
    let page = alice.open_link(&proxy, &link).await;
    assert!(page.body.contains("1e+23"), "{}", page.body);
    assert_eq!(
        alice.decide(&proxy, &link, &page, "approve").await.status,
        200
    );
    let (_, done) = raw_post(
        &proxy,
        &alice.mcp.token,
        raw.as_bytes().to_vec(),
        "create_issue",
    )
    .await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let forwarded = proxy.backend().requests().pop().unwrap();
    assert!(
        forwarded.body.contains("1e+23") && !forwarded.body.contains("99999999999999999999999"),
        "{}",
        forwarded.body
    );
}

#[tokio::test]
async fn a_denied_call_creates_no_reconnect_link_when_github_stopped_honouring_the_token() {
    let proxy = TestProxy::start_with(opts()).await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    // GitHub revokes the app's token; the standing check learns it.
    proxy.github.revoke_tokens_of("alice");
    proxy.clock.advance(301);
    let (_, msg) = alice
        .mcp
        .call_tool("delete_repo", json!({"owner": "acme", "repo": "site"}))
        .await;
    assert!(msg.to_string().contains("no-deletes"), "{msg}");
    assert_eq!(proxy.count(Keyspace::ConnectLinks).await, 0);
    // An allowed call gets the reconnect link.
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert!(msg.to_string().contains("/connect/"), "{msg}");
}
