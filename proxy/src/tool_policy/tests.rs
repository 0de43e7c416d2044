use serde::Deserialize;
use serde_json::{Value, json};

use super::*;

mod github_shapes;

#[derive(Deserialize)]
struct Doc {
    #[serde(default)]
    policy: Vec<RawRule>,
    #[serde(default)]
    policy_defaults: RawDefaults,
}

fn parse(toml_text: &str) -> Result<Policy, Vec<String>> {
    let doc: Doc = toml::from_str(toml_text).map_err(|e| vec![e.to_string()])?;
    let mut errs = Vec::new();
    let p = Policy::from_raw(&doc.policy, &doc.policy_defaults, &mut errs);
    if errs.is_empty() { Ok(p) } else { Err(errs) }
}

fn policy(toml_text: &str) -> Policy {
    parse(toml_text).unwrap()
}

fn errors(toml_text: &str) -> Vec<String> {
    parse(toml_text).unwrap_err()
}

struct Who {
    user: UserId,
    login: Option<String>,
    memberships: Vec<String>,
    client: ClientId,
}

impl Who {
    fn new() -> Who {
        Who {
            user: UserId::github(42),
            login: Some("Octocat".to_owned()),
            memberships: Vec::new(),
            client: ClientId::new("mcpc_one"),
        }
    }
    fn caller(&self) -> Caller<'_> {
        Caller {
            user_id: &self.user,
            login: self.login.as_deref(),
            memberships: &self.memberships,
            client_id: &self.client,
            answered: None,
        }
    }
}

fn decide(p: &Policy, who: &Who, name: &str, args: Value) -> Decision {
    p.decide(
        &who.caller(),
        &ToolCall {
            name,
            arguments: Some(&args),
        },
    )
}

fn rule_of(p: &Policy, who: &Who, name: &str, args: Value) -> Option<String> {
    decide(p, who, name, args).rule_id
}

const EXAMPLE: &str = r#"
[[policy]]
id = "no-deletes"
tools = ["delete_*"]
decision = "deny"

[[policy]]
id = "writes-need-a-human"
tools = ["create_*", "update_*", "push_files", "merge_pull_request"]
arguments = { owner = "acme" }
people = ["team:acme/platform"]
clients = ["https://claude.ai/oauth/claude-code-client-metadata"]
decision = "ask"
ask_ttl_secs = 900

[[policy]]
id = "repo-writes-need-repo-scope"
tools = ["create_branch"]
decision = "step_up"
scopes = ["repo"]

[policy_defaults]
decision = "allow"
"#;

#[test]
fn the_issue_example_validates_and_describes_itself() {
    let p = policy(EXAMPLE);
    assert_eq!(p.describe(), "3 rules, default allow");
    assert!(!p.is_empty());
    assert!(p.warnings().is_empty(), "{:?}", p.warnings());
    assert_eq!(
        p.questions(),
        vec![MembershipQuestion::Team {
            org: "acme".into(),
            slug: "platform".into()
        }]
    );
    let s = p.summary();
    assert_eq!(s.rules[1].arguments, vec!["/owner"]);
    assert_eq!(s.rules[1].ask_ttl_secs, Some(900));
    assert_eq!(s.rules[2].scopes.as_deref(), Some(&["repo".to_owned()][..]));
}

#[test]
fn no_rules_and_default_allow_is_empty() {
    assert!(policy("").is_empty());
    assert!(Policy::default().is_empty());
    assert!(!policy("[policy_defaults]\ndecision = \"deny\"").is_empty());
    let p = policy("");
    let who = Who::new();
    let d = decide(&p, &who, "anything", json!({}));
    assert_eq!(
        d,
        Decision {
            rule_id: None,
            action: Action::Allow,
            matched: vec![]
        }
    );
}

#[test]
fn first_match_wins() {
    let p = policy(
        r#"
[[policy]]
id = "one"
tools = ["get_*"]
arguments = { owner = "acme" }
decision = "allow"
[[policy]]
id = "two"
tools = ["get_me", "get_*"]
decision = "deny"
"#,
    );
    let who = Who::new();
    assert_eq!(
        rule_of(&p, &who, "get_issue", json!({"owner": "acme"})).as_deref(),
        Some("one")
    );
    assert_eq!(
        rule_of(&p, &who, "get_issue", json!({"owner": "other"})).as_deref(),
        Some("two")
    );
    assert_eq!(rule_of(&p, &who, "list_issues", json!({})), None);
    let d = decide(&p, &who, "get_issue", json!({"owner": "other"}));
    assert_eq!(d.action, Action::Deny);
    assert_eq!(d.matched, vec!["tool:get_issue"]);
}

#[test]
fn default_deny_applies_when_no_rule_matches() {
    let p = policy(
        r#"
[[policy]]
id = "reads"
tools = ["get_*", "list_*"]
decision = "allow"
[policy_defaults]
decision = "deny"
"#,
    );
    let who = Who::new();
    assert_eq!(decide(&p, &who, "get_me", json!({})).action, Action::Allow);
    let d = decide(&p, &who, "create_issue", json!({}));
    assert_eq!((d.rule_id, d.action), (None, Action::Deny));
    assert_eq!(p.describe(), "1 rule, default deny");
}

#[test]
fn tool_and_argument_globs_ignore_ascii_case() {
    let p = policy(
        r#"
[[policy]]
id = "acme-deletes"
tools = ["Delete_*"]
arguments = { owner = "acme", "/repo" = "sec*" }
decision = "deny"
"#,
    );
    let who = Who::new();
    for (tool, owner, repo) in [
        ("delete_file", "acme", "secrets"),
        ("DELETE_FILE", "ACME", "SECRETS"),
        ("dElEtE_x", "AcMe", "Sec"),
    ] {
        let d = decide(&p, &who, tool, json!({"owner": owner, "repo": repo}));
        assert_eq!(d.action, Action::Deny, "{tool} {owner} {repo}");
        assert_eq!(
            d.matched,
            vec![
                format!("tool:{tool}"),
                "argument:/owner".into(),
                "argument:/repo".into()
            ]
        );
    }
    // Nothing beyond ASCII case is folded: a look-alike is another string (as on GitHub),
    // and no GitHub name at all, so the rule fails closed on it (issue 31).
    let d = decide(
        &p,
        &who,
        "delete_file",
        json!({"owner": "аcme", "repo": "secrets"}),
    );
    assert_eq!(d.action, Action::Deny);
    assert_eq!(
        d.matched,
        vec![
            "tool:delete_file",
            "argument:/repo",
            "argument:/owner(outside github-name)"
        ]
    );
    // Without the built-in shape it is simply another owner.
    let any = policy(
        r#"
[[policy]]
id = "acme-deletes"
tools = ["Delete_*"]
arguments = { owner = "acme", "/repo" = "sec*" }
values = { owner = "any" }
decision = "deny"
"#,
    );
    let d = decide(
        &any,
        &who,
        "delete_file",
        json!({"owner": "аcme", "repo": "secrets"}),
    );
    assert_eq!(d.action, Action::Allow);
}

#[test]
fn globs_have_classes_alternatives_and_slash_is_ordinary() {
    let p = policy(
        r#"
[[policy]]
id = "r"
tools = ["get_?ile", "[lp]ush_*", "{merge,close}_pull_request"]
arguments = { "/path" = "*.env" }
decision = "deny"
"#,
    );
    let who = Who::new();
    for tool in [
        "get_file",
        "lush_x",
        "push_files",
        "merge_pull_request",
        "close_pull_request",
    ] {
        assert_eq!(
            decide(&p, &who, tool, json!({"path": "a/b/c/.env"})).action,
            Action::Deny,
            "{tool}"
        );
    }
    for tool in ["get_files", "rush_x", "reopen_pull_request"] {
        assert_eq!(
            decide(&p, &who, tool, json!({"path": ".env"})).action,
            Action::Allow,
            "{tool}"
        );
    }
}

#[test]
fn arguments_match_strings_numbers_and_booleans_never_containers_or_absence() {
    let p = policy(
        r#"
[[policy]]
id = "r"
tools = ["*"]
arguments = { "/issue/number" = "4?", "draft" = "TRUE" }
decision = "deny"
"#,
    );
    let who = Who::new();
    let deny = |args: Value| decide(&p, &who, "t", args).action == Action::Deny;
    assert!(deny(json!({"issue": {"number": 42}, "draft": true})));
    assert!(deny(json!({"issue": {"number": "41"}, "draft": "true"})));
    assert!(!deny(json!({"issue": {"number": 420}, "draft": true})));
    // The number 42 however it is written.
    assert!(deny(json!({"issue": {"number": 42.0}, "draft": true})));
    assert!(deny(
        serde_json::from_str(r#"{"issue": {"number": 4.2e1}, "draft": true}"#).unwrap()
    ));
    assert!(!deny(json!({"issue": {"number": 42.5}, "draft": true})));
    assert!(!deny(json!({"issue": {"number": 42}, "draft": false})));
    assert!(!deny(json!({"issue": {"number": 42}})));
    assert!(!deny(json!({"issue": {"number": [42]}, "draft": true})));
    assert!(!deny(json!({"issue": {"number": null}, "draft": true})));
    assert!(!deny(
        json!({"issue": {"number": {"n": 42}}, "draft": true})
    ));
    assert!(!deny(json!({"issue": 42, "draft": true})));
    assert!(!deny(json!([42, true])));
    assert_eq!(
        p.decide(
            &who.caller(),
            &ToolCall {
                name: "t",
                arguments: None
            }
        )
        .action,
        Action::Allow
    );
}

#[test]
fn pointers_reach_into_arrays_and_escape_slashes() {
    let p = policy(
        r#"
[[policy]]
id = "r"
tools = ["*"]
arguments = { "/files/0/path" = ".github/*", "a/b" = "x" }
decision = "deny"
"#,
    );
    let who = Who::new();
    let args = json!({"files": [{"path": ".github/workflows/ci.yml"}], "a/b": "X"});
    let d = decide(&p, &who, "push_files", args);
    assert_eq!(d.action, Action::Deny);
    assert_eq!(
        d.matched,
        vec![
            "tool:push_files",
            "argument:/a~1b",
            "argument:/files/0/path"
        ]
    );
}

#[test]
fn a_top_level_name_is_the_same_as_its_pointer() {
    let a = policy(
        "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={owner=\"acme\"}\ndecision=\"deny\"",
    );
    let b = policy(
        "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={\"/owner\"=\"acme\"}\ndecision=\"deny\"",
    );
    let who = Who::new();
    for args in [json!({"owner": "acme"}), json!({"owner": "x"}), json!({})] {
        assert_eq!(
            decide(&a, &who, "t", args.clone()),
            decide(&b, &who, "t", args)
        );
    }
}

#[test]
fn people_match_login_id_org_and_team() {
    let p = policy(
        r#"
[[policy]]
id = "by-login"
tools = ["a"]
people = ["octocat"]
decision = "deny"
[[policy]]
id = "by-id"
tools = ["b"]
people = ["id:42"]
decision = "deny"
[[policy]]
id = "by-org"
tools = ["c"]
people = ["org:ACME"]
decision = "deny"
[[policy]]
id = "by-team"
tools = ["d"]
people = ["someone-else", "team:Acme/Platform"]
decision = "deny"
"#,
    );
    let mut who = Who::new();
    assert_eq!(
        decide(&p, &who, "a", json!({})).matched,
        vec!["tool:a", "people:octocat"]
    );
    assert_eq!(
        decide(&p, &who, "b", json!({})).matched,
        vec!["tool:b", "people:id:42"]
    );
    assert_eq!(rule_of(&p, &who, "c", json!({})), None);
    assert_eq!(rule_of(&p, &who, "d", json!({})), None);
    who.memberships = vec!["acme".into(), "acme/platform".into()];
    assert_eq!(
        decide(&p, &who, "c", json!({})).matched,
        vec!["tool:c", "people:org:acme"]
    );
    assert_eq!(
        decide(&p, &who, "d", json!({})).matched,
        vec!["tool:d", "people:team:acme/platform"]
    );
    // Another person: no login, another id, no memberships.
    let other = Who {
        user: UserId::github(7),
        login: None,
        ..Who::new()
    };
    for t in ["a", "b", "c", "d"] {
        assert_eq!(rule_of(&p, &other, t, json!({})), None, "{t}");
    }
    // id:4 is not a prefix match of github:42.
    let p4 = policy("[[policy]]\nid=\"r\"\ntools=[\"*\"]\npeople=[\"id:4\"]\ndecision=\"deny\"");
    assert_eq!(rule_of(&p4, &Who::new(), "t", json!({})), None);
    assert_eq!(
        p.questions(),
        vec![
            MembershipQuestion::Org("acme".into()),
            MembershipQuestion::Team {
                org: "acme".into(),
                slug: "platform".into()
            }
        ]
    );
}

#[test]
fn clients_match_exactly() {
    let p = policy(
        r#"
[[policy]]
id = "r"
tools = ["*"]
clients = ["mcpc_one"]
decision = "deny"
"#,
    );
    let mut who = Who::new();
    assert_eq!(
        decide(&p, &who, "t", json!({})).matched,
        vec!["tool:t", "client"]
    );
    who.client = ClientId::new("MCPC_ONE");
    assert_eq!(rule_of(&p, &who, "t", json!({})), None);
}

#[test]
fn ask_ttl_comes_from_the_rule_then_the_defaults() {
    let p = policy(
        r#"
[[policy]]
id = "own"
tools = ["a"]
decision = "ask"
ask_ttl_secs = 60
[[policy]]
id = "inherited"
tools = ["b"]
decision = "ask"
[policy_defaults]
ask_ttl_secs = 120
"#,
    );
    let who = Who::new();
    assert_eq!(
        decide(&p, &who, "a", json!({})).action,
        Action::Ask { ttl_secs: 60 }
    );
    assert_eq!(
        decide(&p, &who, "b", json!({})).action,
        Action::Ask { ttl_secs: 120 }
    );
    let p = policy("[[policy]]\nid=\"x\"\ntools=[\"b\"]\ndecision=\"ask\"");
    assert_eq!(
        decide(&p, &who, "b", json!({})).action,
        Action::Ask {
            ttl_secs: DEFAULT_ASK_TTL_SECS
        }
    );
}

#[test]
fn action_names() {
    assert_eq!(Action::Allow.as_str(), "allow");
    assert_eq!(Action::Deny.as_str(), "deny");
    assert_eq!(Action::Ask { ttl_secs: 1 }.as_str(), "ask");
    assert_eq!(Action::StepUp { scopes: vec![] }.as_str(), "step_up");
}

fn one_error(toml_text: &str) -> String {
    let errs = errors(toml_text);
    assert_eq!(errs.len(), 1, "{errs:?}");
    errs.into_iter().next().unwrap()
}

#[test]
fn from_raw_names_each_problem_with_the_rule() {
    let cases = [
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"deny\"\n[[policy]]\nid=\"A\"\ntools=[\"y\"]\ndecision=\"deny\"",
            "policy[1] (id \"A\"): the id is used by an earlier rule",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[]\ndecision=\"deny\"",
            "policy[0] (id \"a\"): tools is empty",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"[x\"]\ndecision=\"deny\"",
            "policy[0] (id \"a\"): tools: bad glob \"[x\"",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"\"]\ndecision=\"deny\"",
            "tools: bad glob \"\": an empty glob",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\narguments={owner=\"{a\"}\ndecision=\"deny\"",
            "policy[0] (id \"a\"): arguments.owner: bad glob",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\narguments={\"/a~2\"=\"x\"}\ndecision=\"deny\"",
            "arguments: \"/a~2\" is not a JSON pointer",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\narguments={}\ndecision=\"deny\"",
            "arguments is empty",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"step_up\"",
            "policy[0] (id \"a\"): decision = \"step_up\" needs scopes",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"step_up\"\nscopes=[]",
            "needs scopes",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"step_up\"\nscopes=[\"a b\"]",
            "scopes: \"a b\" is not a scope token",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"deny\"\nscopes=[\"repo\"]",
            "scopes belongs to decision = \"step_up\" only",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"allow\"\nask_ttl_secs=60",
            "ask_ttl_secs belongs to decision = \"ask\" only",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"ask\"\nask_ttl_secs=29",
            "ask_ttl_secs must be 30..=86400",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"ask\"\nask_ttl_secs=86401",
            "ask_ttl_secs must be 30..=86400",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\npeople=[\"team:acme\"]\ndecision=\"deny\"",
            "people: \"team:acme\": \"team:\" takes \"org/team-slug\"",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\npeople=[\"id:abc\"]\ndecision=\"deny\"",
            "\"id:\" takes GitHub's numeric user id",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\npeople=[\"org:a/b\"]\ndecision=\"deny\"",
            "\"org:\" takes an organisation login",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\npeople=[\"not a login\"]\ndecision=\"deny\"",
            "is none of a GitHub login",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\npeople=[]\ndecision=\"deny\"",
            "people is empty",
        ),
        (
            "[[policy]]\nid=\"a\"\ntools=[\"x\"]\nclients=[\"\"]\ndecision=\"deny\"",
            "clients: an empty client id",
        ),
        (
            "[[policy]]\nid=\"has space\"\ntools=[\"x\"]\ndecision=\"deny\"",
            "policy[0] (id \"has space\"): id must be 1 to 64",
        ),
        (
            "[policy_defaults]\ndecision=\"ask\"",
            "policy_defaults.decision: must be \"allow\" or \"deny\"",
        ),
        (
            "[policy_defaults]\nask_ttl_secs=5",
            "policy_defaults.ask_ttl_secs: must be 30..=86400",
        ),
    ];
    for (text, want) in cases {
        let e = one_error(text);
        assert!(e.contains(want), "{text}\n→ {e}\nwant {want}");
    }
}

#[test]
fn unknown_keys_and_decisions_are_refused_by_the_parser() {
    for text in [
        "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"deny\"\ntool=[\"y\"]",
        "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"maybe\"",
        "[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"deny\"\narguments={owner=1}",
        "[[policy]]\ntools=[\"x\"]\ndecision=\"deny\"",
        "[policy_defaults]\ndecisions=\"deny\"",
    ] {
        assert!(parse(text).is_err(), "{text}");
    }
}

#[test]
fn unreachable_rules_are_warned_about() {
    let p = policy(
        r#"
[[policy]]
id = "all-deletes"
tools = ["delete_*"]
decision = "deny"
[[policy]]
id = "some-deletes"
tools = ["delete_file", "DELETE_issue*"]
decision = "ask"
[[policy]]
id = "narrowed"
tools = ["*_file"]
people = ["octocat"]
decision = "deny"
[[policy]]
id = "behind-narrowed"
tools = ["get_file"]
decision = "deny"
[[policy]]
id = "suffix"
tools = ["update_*_file"]
decision = "allow"
[[policy]]
id = "partly"
tools = ["delete_x", "get_x"]
decision = "allow"
[[policy]]
id = "odd"
tools = ["get issue"]
decision = "allow"
"#,
    );
    let w = p.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].starts_with(
        "policy[1] (id \"some-deletes\"): unreachable behind policy[0] (id \"all-deletes\")"
    ));
    assert!(w[1].contains("policy[6] (id \"odd\"): tools glob \"get issue\""));

    let catch_all = policy(
        "[[policy]]\nid=\"a\"\ntools=[\"*\"]\ndecision=\"allow\"\n[[policy]]\nid=\"b\"\ntools=[\"x\"]\ndecision=\"deny\"",
    );
    assert!(catch_all.warnings()[0].contains("unreachable behind policy[0] (id \"a\")"));
    let suffix = policy(
        "[[policy]]\nid=\"a\"\ntools=[\"*_file\"]\ndecision=\"allow\"\n[[policy]]\nid=\"b\"\ntools=[\"get_*_FILE\"]\ndecision=\"deny\"",
    );
    assert_eq!(suffix.warnings().len(), 1);
}

#[test]
fn hidden_only_when_every_call_is_denied() {
    let p = policy(
        r#"
[[policy]]
id = "deny-acme-pushes"
tools = ["push_files"]
arguments = { owner = "acme" }
decision = "deny"
[[policy]]
id = "ask-acme-merges"
tools = ["merge_*"]
arguments = { owner = "acme" }
decision = "ask"
[[policy]]
id = "deletes"
tools = ["delete_*", "merge_*"]
decision = "deny"
[[policy]]
id = "platform-only"
tools = ["admin_*"]
people = ["team:acme/platform"]
decision = "allow"
[[policy]]
id = "no-admin"
tools = ["admin_*"]
decision = "deny"
"#,
    );
    let mut who = Who::new();
    let hidden = |who: &Who, t: &str| p.hidden(&who.caller(), t);
    assert!(hidden(&who, "delete_file"));
    // Some arguments are asked about, not denied.
    assert!(!hidden(&who, "merge_pull_request"));
    // Denied for acme, allowed by default elsewhere.
    assert!(!hidden(&who, "push_files"));
    assert!(!hidden(&who, "get_me"));
    assert!(hidden(&who, "admin_thing"));
    who.memberships = vec!["acme/platform".into()];
    assert!(!hidden(&who, "admin_thing"));

    let strict = policy(
        r#"
[[policy]]
id = "deny-acme-pushes"
tools = ["push_files"]
arguments = { owner = "acme" }
decision = "deny"
[policy_defaults]
decision = "deny"
"#,
    );
    assert!(strict.hidden(&Who::new().caller(), "push_files"));
    assert!(strict.hidden(&Who::new().caller(), "get_me"));
}

#[test]
fn valid_tool_names() {
    for ok in ["a", "get_me", "A.b-c_9", &"x".repeat(128)] {
        assert!(valid_tool_name(ok), "{ok}");
    }
    for bad in [
        "",
        &"x".repeat(129),
        "get me",
        "get/me",
        "dеlete_file", // Cyrillic е
        "delete_file\u{200b}",
        "ｄelete",
        "a\0",
        "tool:x",
    ] {
        assert!(!valid_tool_name(bad), "{bad:?}");
    }
}

#[test]
fn digest_is_canonical() {
    let a = json!({"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": "s"}});
    let b: Value =
        serde_json::from_str(r#"{ "a" : { "x":"s", "y":[1,{"p":3,"q":2}] }, "b":1 }"#).unwrap();
    assert_eq!(arguments_digest(Some(&a)), arguments_digest(Some(&b)));
    assert_eq!(
        arguments_digest(Some(&json!({"b":1,"a":2}))),
        arguments_digest(Some(&json!({"a":2,"b":1})))
    );
    assert_eq!(arguments_digest(None), arguments_digest(Some(&json!({}))));
    assert_eq!(arguments_digest(None), arguments_digest(Some(&Value::Null)));
    assert_ne!(
        arguments_digest(Some(&json!({"a": 1}))),
        arguments_digest(Some(&json!({"a": "1"})))
    );
    assert_ne!(
        arguments_digest(Some(&json!({"a": [1, 2]}))),
        arguments_digest(Some(&json!({"a": [2, 1]})))
    );
    // base64url of 32 bytes, no padding.
    let d = arguments_digest(None);
    assert_eq!(d.len(), 43);
    assert!(
        d.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
}

#[test]
fn question_mark_is_one_byte_and_star_spans_anything() {
    let p = policy(
        "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={a=\"x?y\", b=\"*\"}\ndecision=\"deny\"",
    );
    let who = Who::new();
    let deny =
        |a: &str, b: &str| decide(&p, &who, "t", json!({"a": a, "b": b})).action == Action::Deny;
    assert!(deny("x-y", ""));
    assert!(deny("X/Y", "anything\nat all é"));
    assert!(!deny("xéy", "")); // é is two bytes
    assert!(!deny("xy", ""));
}

#[test]
fn live_policy_swaps_whole_and_a_held_policy_stays_as_it_was() {
    let live = LivePolicy::new(policy(
        "[[policy]]\nid=\"old\"\ntools=[\"*\"]\ndecision=\"deny\"",
    ));
    let held = live.current();
    live.replace(Policy::default());
    assert_eq!(held.describe(), "1 rule, default allow");
    assert!(live.current().is_empty());
    let who = Who::new();
    assert_eq!(decide(&held, &who, "t", json!({})).action, Action::Deny);
}

#[test]
fn names_logins_only_when_a_rule_names_one() {
    assert!(!policy(EXAMPLE).names_logins());
    assert!(
        policy(
            "[[policy]]\nid=\"r\"\ntools=[\"*\"]\npeople=[\"id:1\", \"octocat\"]\ndecision=\"deny\""
        )
        .names_logins()
    );
}

#[test]
fn an_unknown_membership_matches_rules_that_restrict_and_never_rules_that_allow() {
    let p = policy(
        r#"
[[policy]]
id = "contractors-read-only"
tools = ["create_*"]
people = ["team:acme/contractors"]
decision = "deny"

[[policy]]
id = "platform-may-delete"
tools = ["delete_*"]
people = ["org:acme"]
decision = "allow"

[policy_defaults]
decision = "deny"
"#,
    );
    let who = Who::new();
    let call = |name: &str, answered: &[String]| {
        let c = Caller {
            answered: Some(answered),
            ..who.caller()
        };
        p.decide(
            &c,
            &ToolCall {
                name,
                arguments: None,
            },
        )
    };
    // Never asked about (a reload named them after the last check): the deny holds, the
    // allow does not open.
    let d = call("create_issue", &[]);
    assert_eq!(d.rule_id.as_deref(), Some("contractors-read-only"));
    assert!(d.matched.iter().any(|m| m.ends_with("(unknown)")), "{d:?}");
    assert_eq!(call("delete_repo", &[]).rule_id, None, "default deny");
    // Asked and answered "not a member": neither rule matches.
    let known = vec!["acme/contractors".to_owned(), "acme".to_owned()];
    assert_eq!(call("create_issue", &known).action, Action::Deny);
    assert_eq!(call("create_issue", &known).rule_id, None);
    assert_eq!(call("delete_repo", &known).rule_id, None);
}

// --- Shapes (`values`, issue 31): a value outside its shape fails the rule closed. ---

/// One rule of each decision naming `owner`, in front of an allow rule naming it too.
const SHAPED: &str = r#"
[[policy]]
id = "deny-acme-deletes"
tools = ["delete_repo"]
arguments = { owner = "acme" }
decision = "deny"
[[policy]]
id = "ask-acme-issues"
tools = ["create_issue"]
arguments = { owner = "acme" }
decision = "ask"
[[policy]]
id = "step-up-acme-branches"
tools = ["create_branch"]
arguments = { owner = "acme" }
decision = "step_up"
scopes = ["repo"]
[[policy]]
id = "allow-sandbox"
tools = ["*"]
arguments = { owner = "sandbox*" }
decision = "allow"
[policy_defaults]
decision = "deny"
"#;

#[test]
fn a_value_outside_its_shape_matches_every_restricting_rule_and_no_allow_rule() {
    let p = policy(SHAPED);
    let who = Who::new();
    // The finding: the glob sees "acme/infra-prod/issues?", GitHub's server builds
    // /repos/acme/infra-prod/issues from it. `%65` is an "e" once GitHub decodes the path.
    for owner in [
        "acme/infra-prod/issues?",
        "acm%65",
        "acme#",
        "acme/../acme",
        "ACME\n",
    ] {
        let args = json!({"owner": owner, "repo": "site"});
        let d = decide(&p, &who, "delete_repo", args.clone());
        assert_eq!(d.rule_id.as_deref(), Some("deny-acme-deletes"), "{owner:?}");
        assert_eq!(d.action, Action::Deny);
        assert_eq!(
            d.matched,
            vec!["tool:delete_repo", "argument:/owner(outside github-name)"]
        );
        let d = decide(&p, &who, "create_issue", args.clone());
        assert_eq!(d.rule_id.as_deref(), Some("ask-acme-issues"), "{owner:?}");
        let d = decide(&p, &who, "create_branch", args.clone());
        assert_eq!(
            d.action,
            Action::StepUp {
                scopes: vec!["repo".into()]
            },
            "{owner:?}"
        );
        // The allow rule's glob `sandbox*` would hold for "sandbox/../acme", but never
        // for a value outside the shape: the default decides.
        let d = decide(&p, &who, "get_me", args);
        assert_eq!((d.rule_id, d.action), (None, Action::Deny), "{owner:?}");
    }
    let d = decide(
        &p,
        &who,
        "get_me",
        json!({"owner": "sandbox/../acme", "repo": "x"}),
    );
    assert_eq!((d.rule_id, d.action), (None, Action::Deny));
    // Well-formed values are decided by the globs as before.
    let d = decide(
        &p,
        &who,
        "delete_repo",
        json!({"owner": "other", "repo": "x"}),
    );
    assert_eq!(d.rule_id, None);
    let d = decide(
        &p,
        &who,
        "get_me",
        json!({"owner": "Sandbox-1", "repo": "x"}),
    );
    assert_eq!(d.rule_id.as_deref(), Some("allow-sandbox"));
    assert_eq!(d.matched, vec!["tool:get_me", "argument:/owner"]);
}

#[test]
fn an_injected_repo_fails_a_rule_on_owner_closed_too() {
    // `repo = "../acme/infra"` with owner "evil" is /repos/acme/infra once the URL is
    // resolved: one injected argument changes what the others mean, so every shaped argument
    // is checked, not only the ones the rule has globs on.
    let p = policy(SHAPED);
    let who = Who::new();
    let d = decide(
        &p,
        &who,
        "delete_repo",
        json!({"owner": "evil", "repo": "../acme/infra"}),
    );
    assert_eq!(d.rule_id.as_deref(), Some("deny-acme-deletes"));
    assert_eq!(
        d.matched,
        vec!["tool:delete_repo", "argument:/repo(outside github-name)"]
    );
    // A condition that holds on its own is listed as well.
    let d = decide(
        &p,
        &who,
        "delete_repo",
        json!({"owner": "acme", "repo": "x?y"}),
    );
    assert_eq!(
        d.matched,
        vec![
            "tool:delete_repo",
            "argument:/owner",
            "argument:/repo(outside github-name)"
        ]
    );
}

#[test]
fn an_absent_shaped_argument_changes_nothing() {
    let p = policy(SHAPED);
    let who = Who::new();
    // No owner: the condition does not hold, as before; no repo: nothing to check.
    assert_eq!(rule_of(&p, &who, "delete_repo", json!({"repo": "x"})), None);
    assert_eq!(
        rule_of(&p, &who, "delete_repo", json!({"owner": "acme"})).as_deref(),
        Some("deny-acme-deletes")
    );
    assert_eq!(
        rule_of(&p, &who, "get_me", json!({"owner": "sandbox"})).as_deref(),
        Some("allow-sandbox")
    );
    for none in [None, Some(Value::Null), Some(json!({}))] {
        let d = p.decide(
            &who.caller(),
            &ToolCall {
                name: "delete_repo",
                arguments: none.as_ref(),
            },
        );
        assert_eq!(d.rule_id, None, "{none:?}");
    }
}

#[test]
fn numbers_booleans_null_arrays_and_objects_are_outside_a_string_shape() {
    let p = policy(SHAPED);
    let who = Who::new();
    // Go's %v prints an array as "[acme/x?]" and JavaScript's `${}` as "acme/x?": a
    // container can carry a path. Numbers and booleans cannot, but they are no name either.
    for owner in [
        json!(["acme/infra-prod/issues?"]),
        json!(["acme"]),
        json!({"login": "acme"}),
        json!(42),
        json!(4.2e1),
        json!(true),
        Value::Null,
        json!(""),
    ] {
        let d = decide(
            &p,
            &who,
            "delete_repo",
            json!({"owner": owner, "repo": "x"}),
        );
        assert_eq!(d.rule_id.as_deref(), Some("deny-acme-deletes"), "{owner}");
        let d = decide(&p, &who, "get_me", json!({"owner": owner}));
        assert_eq!(d.rule_id, None, "{owner}: the allow rule never holds");
    }
    // The same values under an argument without a shape: the rule just does not apply, as
    // before issue 31.
    let p = policy(
        "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={\"/issue_number\"=\"42\"}\ndecision=\"deny\"",
    );
    assert_eq!(rule_of(&p, &who, "t", json!({"issue_number": [42]})), None);
    assert_eq!(
        rule_of(&p, &who, "t", json!({"issue_number": 42.0})).as_deref(),
        Some("r")
    );
    // Arguments that are not an object (MCP says they are one) name no argument at all.
    assert_eq!(
        rule_of(&policy(SHAPED), &who, "delete_repo", json!(["acme/x?"])),
        None
    );
}

#[test]
fn nested_pointers_shape_their_own_value_and_a_scalar_on_the_way_is_outside() {
    let p = policy(
        r#"
[[policy]]
id = "first-file-not-workflows"
tools = ["push_files"]
arguments = { "/files/0/path" = ".github/*" }
values = { "/files/0/path" = "repo-path", repo = "any" }
decision = "deny"
"#,
    );
    let who = Who::new();
    let files = |v: Value| json!({"owner": "acme", "repo": "r", "files": v});
    let deny = |args: Value| decide(&p, &who, "push_files", args).action == Action::Deny;
    assert!(deny(files(json!([{"path": ".github/workflows/ci.yml"}]))));
    // Ways to name the same file that a glob on ".github/*" would not see.
    for path in [
        "/.github/workflows/ci.yml",
        "./.github/workflows/ci.yml",
        "docs/../.github/workflows/ci.yml",
        ".github//workflows/ci.yml",
        "%2egithub/workflows/ci.yml",
        ".github\\workflows\\ci.yml",
    ] {
        assert!(deny(files(json!([{"path": path}]))), "{path}");
    }
    assert!(!deny(files(json!([{"path": "docs/README.md"}]))));
    // A scalar or null where the pointer goes deeper: not what the shape says, outside.
    for odd in [
        json!("x"),
        Value::Null,
        json!({"0": {"path": "docs/a"}}),
        json!([["a"]]),
    ] {
        let outside = match &odd {
            // An object has a member "0": the pointer reaches a value (RFC 6901).
            Value::Object(_) => false,
            _ => true,
        };
        assert_eq!(deny(files(odd.clone())), outside, "{odd}");
    }
    // Missing on the way: absent, nothing to check.
    assert!(!deny(files(json!([]))));
    assert!(!deny(json!({"owner": "acme"})));
    // The rule set `repo = "any"`, so an odd repo is not its business; owner keeps its shape.
    assert!(!deny(
        json!({"owner": "acme", "repo": "a/b", "files": [{"path": "x"}]})
    ));
    assert!(deny(json!({"owner": "a/b", "files": [{"path": "x"}]})));
}

#[test]
fn github_names_and_repo_paths_have_exact_edges() {
    let name = |v: &str| {
        let p = policy(SHAPED);
        decide(
            &p,
            &Who::new(),
            "delete_repo",
            json!({"owner": "x", "repo": v}),
        )
        .rule_id
        .is_none()
    };
    for ok in [
        "a",
        "A-b_c.d",
        "...",
        ".github",
        &"r".repeat(100),
        "alice_acme",
    ] {
        assert!(name(ok), "{ok:?} is a GitHub name");
    }
    for bad in [
        "",
        ".",
        "..",
        &"r".repeat(101),
        "a b",
        "a/b",
        "a%2fb",
        "ｒepo",
        "repo\u{200b}",
        "a\0",
    ] {
        assert!(!name(bad), "{bad:?} is not");
    }
    let p = policy(
        "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={path=\"nothing\"}\nvalues={path=\"repo-path\"}\ndecision=\"deny\"",
    );
    let path = |v: &str| rule_of(&p, &Who::new(), "t", json!({"path": v})).is_none();
    for ok in [
        "README.md",
        ".github/workflows/ci.yml",
        "dir/é file.txt",
        "a...b/..c/c..",
        "~/x",
    ] {
        assert!(path(ok), "{ok:?} is a repository path");
    }
    for bad in [
        "", "/", "/a", "a/", "a//b", "./a", "a/.", "a/../b", "..", "a%20b", "a?b", "a#b", "a\\b",
        "a\tb", "a\u{7f}",
    ] {
        assert!(!path(bad), "{bad:?} is not");
    }
}

#[test]
fn any_removes_a_shape_and_policy_defaults_set_them_for_every_rule() {
    let who = Who::new();
    let text = |defaults: &str, rule_values: &str| {
        format!(
            "[[policy]]\nid=\"r\"\ntools=[\"*\"]\narguments={{owner=\"acme\"}}\n{rule_values}\ndecision=\"deny\"\n[policy_defaults]\n{defaults}"
        )
    };
    let denied = |p: &Policy, args: Value| rule_of(p, &who, "t", args).is_some();
    let odd_repo = json!({"owner": "x", "repo": "a/b"});
    let odd_path = json!({"owner": "x", "path": "/a"});
    // Built in: owner and repo.
    let p = policy(&text("", ""));
    assert!(denied(&p, odd_repo.clone()));
    assert!(!denied(&p, odd_path.clone()));
    // [policy_defaults] values adds and removes for every rule.
    let p = policy(&text(
        "values = { path = \"repo-path\", repo = \"any\" }",
        "",
    ));
    assert!(!denied(&p, odd_repo.clone()));
    assert!(denied(&p, odd_path.clone()));
    // The rule's own values win over both.
    let p = policy(&text(
        "values = { path = \"repo-path\", repo = \"any\" }",
        "values = { repo = \"github-name\", path = \"any\" }",
    ));
    assert!(denied(&p, odd_repo.clone()));
    assert!(!denied(&p, odd_path));
    // A rule without arguments conditions reads no argument: shapes do not concern it.
    let p = policy(
        "[[policy]]\nid=\"reads\"\ntools=[\"get_*\"]\ndecision=\"allow\"\n[policy_defaults]\ndecision=\"deny\"",
    );
    assert_eq!(
        rule_of(&p, &who, "get_me", json!({"owner": "acme/x?"})).as_deref(),
        Some("reads")
    );
}

#[test]
fn shapes_leave_hidden_and_the_digest_alone() {
    let p = policy(SHAPED);
    let who = Who::new();
    // Rules with arguments conditions never hide a tool; the default deny does.
    assert!(!p.hidden(&who.caller(), "delete_repo"));
    assert!(!p.hidden(&who.caller(), "get_me"));
    // The approval digest is over the arguments as sent, shaped or not.
    assert_ne!(
        arguments_digest(Some(&json!({"owner": "acme"}))),
        arguments_digest(Some(&json!({"owner": "acme/x?"})))
    );
}

#[test]
fn values_problems_are_readable_lines() {
    let rule =
        |extra: &str| format!("[[policy]]\nid=\"a\"\ntools=[\"x\"]\ndecision=\"deny\"\n{extra}");
    let cases = [
        (
            rule("arguments={owner=\"acme\"}\nvalues={owner=\"name\"}"),
            "policy[0] (id \"a\"): values.owner: \"name\" is not a shape: one of \"github-name\", \"repo-path\" or \"any\"",
        ),
        (
            rule("arguments={owner=\"acme\"}\nvalues={\"/a~2\"=\"any\"}"),
            "policy[0] (id \"a\"): values: \"/a~2\" is not a JSON pointer",
        ),
        (
            rule("arguments={owner=\"acme\"}\nvalues={\"\"=\"any\"}"),
            "values: an empty key names no argument",
        ),
        (
            rule("values={owner=\"github-name\"}"),
            "policy[0] (id \"a\"): values belongs to a rule with arguments conditions",
        ),
        (
            rule("arguments={owner=\"acme\"}\nvalues={}"),
            "values is empty",
        ),
        (
            rule("arguments={owner=\"acme\"}\nvalues={owner=\"any\", \"/owner\"=\"github-name\"}"),
            "values: \"/owner\" and \"owner\" name the same argument (/owner)",
        ),
        (
            rule("arguments={\"/repo/name\"=\"infra-*\"}"),
            "policy[0] (id \"a\"): arguments: \"/repo/name\" looks inside \"/repo\", which is a github-name string (built in: GitHub's MCP server takes owner and repo as strings), so the condition could never hold: put the glob on \"/repo\" itself, or set values = { \"/repo\" = \"any\" }",
        ),
        (
            rule("arguments={\"/path/x\"=\"y\"}\nvalues={path=\"repo-path\"}"),
            "looks inside \"/path\", which is a repo-path string (from this rule's values)",
        ),
        (
            format!(
                "{}\n[policy_defaults]\nvalues={{path=\"repo-path\"}}",
                rule("arguments={\"/path/x\"=\"y\"}")
            ),
            "(from [policy_defaults] values)",
        ),
        (
            "[policy_defaults]\nvalues={owner=\"login\"}".to_owned(),
            "policy_defaults.values.owner: \"login\" is not a shape",
        ),
        (
            "[policy_defaults]\nvalues={\"/~\"=\"any\"}".to_owned(),
            "policy_defaults.values: \"/~\" is not a JSON pointer",
        ),
    ];
    for (text, want) in cases {
        let e = one_error(&text);
        assert!(e.contains(want), "{text}\n→ {e}\nwant {want}");
    }
    // Once repo's shape is off, a pointer into it is what the rule says.
    let p = policy(&rule(
        "arguments={\"/repo/name\"=\"infra-*\"}\nvalues={repo=\"any\"}",
    ));
    assert_eq!(
        rule_of(
            &p,
            &Who::new(),
            "x",
            json!({"repo": {"name": "infra-prod"}})
        )
        .as_deref(),
        Some("a")
    );
    assert!(parse(&rule("arguments={owner=\"acme\"}\nvalues={owner=1}")).is_err());
}

#[test]
fn a_glob_no_well_formed_value_can_match_is_warned_about() {
    let p = policy(
        r#"
[[policy]]
id = "slash"
tools = ["*"]
arguments = { repo = "acme/infra*", owner = "{acme,a b}", title = "a/b" }
decision = "deny"
[[policy]]
id = "paths"
tools = ["*"]
arguments = { path = "docs/*%20*" }
values = { path = "repo-path" }
decision = "deny"
"#,
    );
    let w = p.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert_eq!(
        w[0],
        "policy[0] (id \"slash\"): arguments /repo: glob \"acme/infra*\" has a character no \
         github-name value can have (A-Z a-z 0-9 _ . -), so it holds for no well-formed value"
    );
    assert!(w[1].starts_with("policy[1] (id \"paths\"): arguments /path: glob \"docs/*%20*\""));
}

/// What the gateway treats as keys it reads in `arguments` (`gateway::envelope`): every
/// condition's pointer and every shape a rule checks, the built-in `owner` and `repo` included.
#[test]
fn argument_pointers_name_every_condition_and_every_checked_shape() {
    let p = policy(
        r#"
[[policy]]
id = "r"
tools = ["create_branch"]
arguments = { "/base/ref" = "main" }
values = { "/head/path" = "repo-path" }
decision = "deny"

[[policy]]
id = "plain"
tools = ["get_me"]
decision = "deny"
"#,
    );
    let mut pointers: Vec<&str> = p.argument_pointers().collect();
    pointers.sort_unstable();
    pointers.dedup();
    assert_eq!(
        pointers,
        ["/base/ref", "/head/path", "/owner", "/repo"],
        "conditions, declared shapes and the built-in ones"
    );
}
