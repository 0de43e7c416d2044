//! `[[policy]]` argument shapes (issue 31): a value GitHub's MCP server would read as another
//! owner or repository than the one the glob saw never gets past a rule that names the owner.
//! GitHub's server formats `owner` and `repo` into API paths as they are, so
//! `owner = "acme/infra-prod/issues?"` is `POST /repos/acme/infra-prod/issues` there.

use crate::support::people::Person;
use crate::support::{Options, TestProxy};
use mcp_oauth_proxy::store::Keyspace;
use serde_json::{Value, json};

const POLICY: &str = r#"
[[policy]]
id = "hands-off-acme"
tools = ["create_issue", "delete_repo"]
arguments = { owner = "acme" }
decision = "deny"
"#;

/// The `tools/call` bodies the backend received for `tool`.
fn backend_calls(proxy: &TestProxy, tool: &str) -> Vec<Value> {
    proxy
        .backend()
        .requests()
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(&r.body).ok())
        .filter(|b| b["method"] == "tools/call" && b["params"]["name"] == tool)
        .collect()
}

#[tokio::test]
async fn injected_owner_matches_the_deny_rule_naming_it() {
    let proxy = TestProxy::start_with(Options {
        backend: true,
        extra_toml: POLICY.to_owned(),
        ..Options::default()
    })
    .await;
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;

    // A well-formed owner the rule does not name is forwarded as before.
    let (status, msg) = alice
        .mcp
        .call_tool(
            "create_issue",
            json!({"owner": "octo-org", "repo": "site", "title": "t"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(msg["result"]["isError"], false, "{msg}");
    assert_eq!(backend_calls(&proxy, "create_issue").len(), 1);
    let decisions_before = proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.kind == "policy_decision")
        .count();

    // Each names acme's repository to GitHub's server, none matches the glob "acme".
    let injected = [
        // `?` ends the path: POST /repos/acme/infra-prod/issues.
        (
            json!({"owner": "acme/infra-prod/issues?", "repo": "x", "title": "t"}),
            "argument:/owner(outside github-name)",
        ),
        // GitHub decodes the path: "acm%65" is "acme" there.
        (
            json!({"owner": "acm%65", "repo": "infra-prod", "title": "t"}),
            "argument:/owner(outside github-name)",
        ),
        // An array prints as its element in a JavaScript template string.
        (
            json!({"owner": ["acme"], "repo": "infra-prod", "title": "t"}),
            "argument:/owner(outside github-name)",
        ),
        // repos/evil/../acme/infra-prod/issues resolves to /repos/acme/infra-prod/issues.
        (
            json!({"owner": "evil", "repo": "../acme/infra-prod", "title": "t"}),
            "argument:/repo(outside github-name)",
        ),
    ];
    for (args, _) in &injected {
        let (status, msg) = alice.mcp.call_tool("create_issue", args.clone()).await;
        assert_eq!(status, 200, "{args}");
        assert_eq!(msg["result"]["isError"], true, "{args}: {msg}");
        let text = msg["result"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(
            text,
            "The tool create_issue is not available: denied by policy rule \"hands-off-acme\" \
             of this server.",
            "{args}"
        );
    }
    // The delete is refused the same way.
    let (_, msg) = alice
        .mcp
        .call_tool(
            "delete_repo",
            json!({"owner": "acme/infra-prod?", "repo": "x"}),
        )
        .await;
    assert_eq!(msg["result"]["isError"], true, "{msg}");

    // Nothing of it reached the backend, and no other state was made.
    assert_eq!(
        backend_calls(&proxy, "create_issue").len(),
        1,
        "only the well-formed call"
    );
    assert!(backend_calls(&proxy, "delete_repo").is_empty());
    assert_eq!(proxy.count(Keyspace::ApprovalLinks).await, 0);

    // One denial per call, naming the rule and the argument outside its shape, never a value.
    let all = proxy.app.audit.all().await.unwrap();
    let decisions: Vec<&Value> = all
        .iter()
        .filter(|r| r.kind == "policy_decision")
        .map(|r| &r.event)
        .skip(decisions_before)
        .collect();
    assert_eq!(decisions.len(), injected.len() + 1, "{decisions:?}");
    for (event, (args, label)) in decisions.iter().zip(&injected) {
        assert_eq!(event["outcome"], "denied", "{event}");
        assert_eq!(event["decision"], "deny", "{event}");
        assert_eq!(event["rule_id"], "hands-off-acme", "{event}");
        assert_eq!(event["tool"], "create_issue", "{event}");
        let matched: Vec<&str> = event["matched"]
            .as_array()
            .unwrap_or_else(|| panic!("{event}"))
            .iter()
            .map(|m| m.as_str().unwrap())
            .collect();
        assert!(matched.contains(label), "{args}: {matched:?}");
        assert!(!event.to_string().contains("infra-prod"), "{event}");
    }
    let last = decisions.last().unwrap();
    assert_eq!(
        (&last["tool"], &last["rule_id"], &last["outcome"]),
        (
            &json!("delete_repo"),
            &json!("hands-off-acme"),
            &json!("denied")
        )
    );
}
