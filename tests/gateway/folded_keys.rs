//! The gateway decides on the keys it reads; a backend that reads keys without case (Go's
//! `encoding/json`, so mark3labs/mcp-go: `"Method"`, `"METHOD"` and `"param\u{17F}"` all set
//! `method`/`params`, the last match winning) must never run something else. Against the Go
//! test backend (`tests/go_backend`), which decodes as mcp-go does.

use serde_json::{Value, json};

use crate::support::go_backend::{GoBackend, fold_table};
use crate::support::people::Person;
use crate::support::{Options, TestProxy, http};
use mcp_oauth_proxy::store::Keyspace;

const POLICY: &str = r#"
[[policy]]
id = "no-branches-on-acme"
tools = ["create_branch"]
arguments = { owner = "acme" }
decision = "deny"

[[policy]]
id = "no-prod-keys"
tools = ["set_deploy_key"]
arguments = { key = "prod-*" }
decision = "deny"

[[policy]]
id = "issues-need-a-human"
tools = ["create_issue"]
decision = "ask"
"#;

async fn start(test: &str, policy: &str) -> Option<(TestProxy, GoBackend)> {
    let go = GoBackend::start(test)?;
    let proxy = TestProxy::start_with(Options {
        backend_url: Some(go.mcp_url()),
        extra_toml: policy.to_owned(),
        ..Options::default()
    })
    .await;
    Some((proxy, go))
}

async fn post(proxy: &TestProxy, token: &str, body: impl Into<Vec<u8>>) -> (u16, Value) {
    let resp = http()
        .post(proxy.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.into())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// The `policy_decision` outcomes recorded so far.
async fn outcomes(proxy: &TestProxy) -> Vec<String> {
    proxy
        .app
        .audit
        .all()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.kind == "policy_decision")
        .map(|r| r.event["outcome"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// What a stored-state snapshot counts: nothing a refused body may change.
async fn state(proxy: &TestProxy) -> Vec<usize> {
    let mut counts = Vec::new();
    for ks in [
        Keyspace::ConnectLinks,
        Keyspace::ApprovalLinks,
        Keyspace::McpSessions,
        Keyspace::AccessTokens,
        Keyspace::RefreshFamilies,
        Keyspace::Grants,
    ] {
        counts.push(proxy.count(ks).await);
    }
    counts
}

/// Each body is what the outside review sent (and more): a key differing from one the gateway
/// reads only in case, in Unicode simple folding (LONG S, KELVIN SIGN) or in escapes, or two
/// keys folding together. Go would read `create_branch` for acme, or a prod key, in each.
fn attacks() -> Vec<(&'static str, String)> {
    let args = r#"{"owner":"acme","repo":"infra","branch":"x"}"#;
    vec![
        (
            "Method",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{{"name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
        (
            "method then METHOD",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"ping","METHOD":"tools/call","params":{{"name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
        (
            "name then Name",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"get_me","Name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
        (
            "Params",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","Params":{{"name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
        (
            "params with a long s",
            format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"param\u{17F}\":{{\"name\":\"create_branch\",\"arguments\":{args}}}}}"
            ),
        ),
        (
            "params then Params",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"get_me"}},"Params":{{"name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
        (
            "Owner the rule does not see",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_branch","arguments":{"Owner":"acme","repo":"infra","branch":"x"}}}"#.to_owned(),
        ),
        (
            "owner then OWNER",
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_branch","arguments":{"owner":"octo","OWNER":"acme","repo":"infra","branch":"x"}}}"#.to_owned(),
        ),
        (
            "key with a Kelvin sign",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"set_deploy_key\",\"arguments\":{\"owner\":\"octo\",\"repo\":\"x\",\"\u{212A}ey\":\"prod-main\"}}}".to_owned(),
        ),
        (
            "escaped method",
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"m\u0065thod":"tools/call","params":{{"name":"create_branch","arguments":{args}}}}}"#
            ),
        ),
    ]
}

#[tokio::test]
async fn case_variant_keys_never_reach_a_case_insensitive_backend() {
    let Some((proxy, go)) = start(
        "case_variant_keys_never_reach_a_case_insensitive_backend",
        POLICY,
    )
    .await
    else {
        return;
    };
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    let token = alice.mcp.token.clone();

    // The Go backend does read what the review found: sent straight to it, the first body runs
    // the tool (the check that this backend is a faithful one).
    let direct = http()
        .post(go.mcp_url())
        .body(attacks()[0].1.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status(), 200);
    assert_eq!(
        go.ran().await,
        ["create_branch"],
        "Go reads Method as method"
    );
    let ran_before = go.calls().await.len();

    let before = state(&proxy).await;
    for (what, body) in attacks() {
        let (status, msg) = post(&proxy, &token, body).await;
        assert_eq!(status, 400, "{what}: {msg}");
        assert_eq!(msg["error"]["code"], -32600, "{what}: {msg}");
        assert!(
            msg["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("differ only in case"),
            "{what}: {msg}"
        );
    }
    assert_eq!(
        go.calls().await.len(),
        ran_before,
        "nothing reached the backend: {:?}",
        go.calls().await
    );
    assert_eq!(state(&proxy).await, before, "nothing stored changed");
    let refused = outcomes(&proxy)
        .await
        .iter()
        .filter(|o| *o == "refused_ambiguous_keys")
        .count();
    assert_eq!(refused, attacks().len(), "each refusal audited");

    // The honest spellings still work, and the rules see them.
    let (_, msg) = post(
        &proxy,
        &token,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_branch","arguments":{"owner":"acme","repo":"infra","branch":"x"}}}"#,
    )
    .await;
    assert_eq!(msg["result"]["isError"], true, "denied: {msg}");
    let (_, msg) = post(
        &proxy,
        &token,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"create_branch","arguments":{"owner":"octo","repo":"infra","branch":"x"}}}"#,
    )
    .await;
    assert_eq!(msg["result"]["isError"], false, "allowed: {msg}");
    let calls = go.calls().await;
    let last = calls.last().unwrap();
    assert_eq!(last["tool"], "create_branch");
    assert_eq!(last["arguments"]["owner"], "octo");
}

#[tokio::test]
async fn approved_call_cannot_be_swapped_by_a_folded_key() {
    let Some((proxy, go)) = start("approved_call_cannot_be_swapped_by_a_folded_key", POLICY).await
    else {
        return;
    };
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    let token = alice.mcp.token.clone();
    let approved = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"octo","repo":"site","title":"typo"}}}"#;
    let (_, held) = post(&proxy, &token, approved).await;
    let link = held["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{held}"))
        .split_whitespace()
        .find(|w| w.contains("/approve/"))
        .unwrap_or_else(|| panic!("an approval link: {held}"))
        .to_owned();
    let page = alice.open_link(&proxy, &link).await;
    assert_eq!(
        alice.decide(&proxy, &link, &page, "approve").await.status,
        200
    );

    // The same call with a second `arguments` spelt with LONG S: serde_json's re-serialized
    // body would sort it after `arguments`, and Go would take it.
    let swapped = "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"create_issue\",\"arguments\":{\"owner\":\"octo\",\"repo\":\"site\",\"title\":\"typo\"},\"argument\u{17F}\":{\"owner\":\"acme\",\"repo\":\"infra-prod\",\"title\":\"pwned\"}}}";
    let (status, msg) = post(&proxy, &token, swapped).await;
    assert_eq!(status, 400, "{msg}");
    assert_eq!(msg["error"]["code"], -32600, "{msg}");
    assert!(go.ran().await.is_empty(), "{:?}", go.calls().await);
    assert_eq!(
        proxy.count(Keyspace::ToolApprovals).await,
        1,
        "the approval is not used up by the refused body"
    );

    // The call the person approved runs once, as approved.
    let (_, done) = post(&proxy, &token, approved).await;
    assert_eq!(done["result"]["isError"], false, "{done}");
    let calls = go.calls().await;
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "create_issue");
    assert_eq!(calls[0]["arguments"]["owner"], "octo");
    assert_eq!(calls[0]["arguments"]["title"], "typo");
}

#[tokio::test]
async fn every_refused_body_leaves_a_refusal_event() {
    let Some((proxy, go)) = start("every_refused_body_leaves_a_refusal_event", POLICY).await else {
        return;
    };
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2025-11-25").await;
    let token = alice.mcp.token.clone();
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_me"}}"#;
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend_from_slice(call.as_bytes());
    let refused: Vec<(&str, Vec<u8>, &str)> = vec![
        ("byte-order mark", bom, "refused_unreadable"),
        (
            "lone surrogate",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_me","arguments":{"x":"\ud800"}}}"#.to_vec(),
            "refused_unreadable",
        ),
        (
            "invalid UTF-8",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"get_\xff\"}}".to_vec(),
            "refused_unreadable",
        ),
        (
            "trailing bytes",
            format!("{call} {call}").into_bytes(),
            "refused_unreadable",
        ),
        ("empty", Vec::new(), "refused_unreadable"),
        (
            "exact duplicate",
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"ping","params":{"name":"get_me"}}"#.to_vec(),
            "refused_ambiguous_keys",
        ),
        (
            "folded duplicate deep in the arguments",
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"get_me\",\"arguments\":{\"a\":[{\"s\":1,\"\u{17F}\":2}]}}}".as_bytes().to_vec(),
            "refused_ambiguous_keys",
        ),
    ];
    let before = state(&proxy).await;
    for (what, body, outcome) in &refused {
        let seen = outcomes(&proxy).await.len();
        let (status, msg) = post(&proxy, &token, body.clone()).await;
        assert_eq!(status, 400, "{what}: {msg}");
        let code = if *outcome == "refused_unreadable" {
            -32700
        } else {
            -32600
        };
        assert_eq!(msg["error"]["code"], code, "{what}: {msg}");
        let now = outcomes(&proxy).await;
        assert_eq!(now.len(), seen + 1, "{what}: one event");
        assert_eq!(now.last().map(String::as_str), Some(*outcome), "{what}");
    }
    // A body on GET, and a method that carries none.
    for (req, status, outcome) in [
        (
            http()
                .get(proxy.url("/mcp"))
                .header("accept", "text/event-stream")
                .body(call),
            400,
            "refused_body",
        ),
        (
            http().put(proxy.url("/mcp")).body(call),
            405,
            "refused_method",
        ),
    ] {
        let resp = req.bearer_auth(&token).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{outcome}");
        assert_eq!(
            outcomes(&proxy).await.last().map(String::as_str),
            Some(outcome)
        );
    }
    assert!(go.ran().await.is_empty(), "{:?}", go.calls().await);
    assert_eq!(state(&proxy).await, before, "nothing stored changed");
}

#[tokio::test]
async fn unreadable_body_is_refused_without_a_policy_too() {
    // The demo backend (TypeScript-like: it reads what serde_json cannot) and no [[policy]].
    let proxy = TestProxy::start_with(Options {
        backend: true,
        ..Options::default()
    })
    .await;
    assert!(proxy.app.policy().is_empty());
    let alice = Person::with_agent(&proxy, "alice", "Repo Helper", "2026-07-28").await;
    let token = alice.mcp.token.clone();
    let sent = proxy.backend().requests().len();
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend_from_slice(
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami"}})
            .to_string()
            .as_bytes(),
    );
    let surrogate = br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","requestState":"\udc00"}}"#.to_vec();
    let folded = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","RequestState":"x"}}"#.to_vec();
    for (what, body, code) in [
        ("byte-order mark", bom, -32700),
        ("lone surrogate", surrogate, -32700),
        ("folded requestState", folded, -32600),
    ] {
        let (status, msg) = post(&proxy, &token, body).await;
        assert_eq!(status, 400, "{what}: {msg}");
        assert_eq!(msg["error"]["code"], code, "{what}: {msg}");
    }
    assert_eq!(
        proxy.backend().requests().len(),
        sent,
        "nothing reached the backend"
    );
    let outcomes = outcomes(&proxy).await;
    assert_eq!(
        outcomes,
        [
            "refused_unreadable",
            "refused_unreadable",
            "refused_ambiguous_keys"
        ],
        "every refusal is audited without a policy too"
    );
    // A readable call still goes through.
    let (_, msg) = alice.mcp.call_tool("whoami", json!({})).await;
    assert_eq!(msg["result"]["isError"], false, "{msg}");
}

/// The gateway's folding (`envelope::fold_key`) is the equivalence Go's decoder matches keys by,
/// on every code point: each rune folds to what Go's `encoding/json` matches it to. Two planned
/// differences: the dotted and dotless Turkic i, which Go leaves alone but .NET's and Java's
/// case-insensitive readers match to `i`, fold to `I` here (refusing more, never less); and case
/// pairs newer than the Unicode version of regex-syntax's tables (16.0), which a newer Go
/// knows. Those never involve ASCII, so no key the gateway reads can be spelt with them; the
/// test lists them, and fails if one ever reaches ASCII.
#[tokio::test]
async fn fold_key_agrees_with_go_on_every_code_point() {
    let Some(table) = fold_table("fold_key_agrees_with_go_on_every_code_point") else {
        return;
    };
    assert!(table.len() > 1000, "Go folds {} runes", table.len());
    let go: std::collections::HashMap<u32, u32> = table.into_iter().collect();
    let mut turkic = Vec::new();
    let mut newer = Vec::new();
    for c in (0..=0x10FFFF).filter_map(char::from_u32) {
        let ours = u32::from(mcp_oauth_proxy::gateway::envelope::fold_char(c));
        let theirs = go.get(&u32::from(c)).copied().unwrap_or(u32::from(c));
        if ours == theirs {
            continue;
        }
        if matches!(c, '\u{130}' | '\u{131}') {
            turkic.push(c);
            continue;
        }
        assert!(
            u32::from(c) > 0x7F && ours > 0x7F && theirs > 0x7F,
            "U+{:04X}: ours U+{ours:04X}, Go's U+{theirs:04X}: a difference that reaches ASCII",
            u32::from(c)
        );
        newer.push(format!("U+{:04X}", u32::from(c)));
    }
    assert_eq!(turkic, ['\u{130}', '\u{131}']);
    eprintln!(
        "{} code points Go folds by a newer Unicode than regex-syntax's 16.0 tables: {newer:?}",
        newer.len()
    );
    assert!(newer.len() < 64, "{newer:?}");
}
