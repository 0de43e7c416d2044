//! The `[[policy]]` examples the docs give, checked against the argument shapes of GitHub's MCP
//! server (issue 31). An example whose pointer reaches inside a string (`"/repo/name"`, when
//! `repo` is a string) or names an argument none of its tools has protects nothing, and an
//! operator copies examples.

use super::*;

/// Tool name → its arguments as `name:type`, array items' members as `name/*/member:type`:
/// the tools the documented examples' globs match. Our own table, written from reading
/// github/github-mcp-server at commit 64a49f34d076b6f5917dae1424521d43c7bcae84: the tool
/// definitions (`InputSchema: &jsonschema.Schema{…}`) in pkg/github/repositories.go,
/// issues_granular.go, issues.go, pullrequests.go, pullrequests_granular.go and gists.go, and
/// the schemas they produce, pkg/github/__toolsnaps__/<tool>.snap. `string|null` is an
/// `anyOf` of the two. `create_issue` and `update_issue_*` exist only behind that server's
/// granular-issues feature flag; by default issues are written with `issue_write`.
const GITHUB_MCP_SERVER: &[(&str, &str)] = &[
    (
        "create_branch",
        "branch:string from_branch:string owner:string repo:string",
    ),
    (
        "create_gist",
        "content:string description:string filename:string public:boolean",
    ),
    (
        "create_issue",
        "body:string owner:string repo:string title:string",
    ),
    (
        "create_or_update_file",
        "allow_symlink_write:boolean branch:string content:string message:string owner:string \
         path:string repo:string sha:string",
    ),
    (
        "create_pull_request",
        "base:string body:string draft:boolean head:string maintainer_can_modify:boolean \
         owner:string repo:string reviewers:array title:string",
    ),
    (
        "create_pull_request_review",
        "body:string commitID:string event:string owner:string pullNumber:number repo:string",
    ),
    (
        "create_repository",
        "autoInit:boolean description:string name:string organization:string private:boolean",
    ),
    (
        "delete_file",
        "branch:string message:string owner:string path:string repo:string",
    ),
    (
        "delete_pending_pull_request_review",
        "owner:string pullNumber:number repo:string",
    ),
    ("delete_repository", "owner:string repo:string"),
    (
        "get_file_contents",
        "fields:array owner:string path:string ref:string repo:string sha:string",
    ),
    (
        "issue_write",
        "assignees:array body:string duplicate_of:number issue_fields:array issue_number:number \
         labels:array method:string milestone:number owner:string repo:string state:string \
         state_reason:string title:string type:string|null",
    ),
    (
        "merge_pull_request",
        "commit_message:string commit_title:string merge_method:string owner:string \
         pullNumber:number repo:string",
    ),
    (
        "push_files",
        "branch:string files:array files/*/content:string files/*/path:string message:string \
         owner:string repo:string",
    ),
    (
        "update_gist",
        "content:string description:string filename:string gist_id:string",
    ),
    (
        "update_issue_assignees",
        "assignees:array issue_number:number owner:string repo:string",
    ),
    (
        "update_issue_body",
        "body:string issue_number:number owner:string repo:string",
    ),
    (
        "update_issue_labels",
        "issue_number:number labels:array owner:string repo:string",
    ),
    (
        "update_issue_milestone",
        "issue_number:number milestone:integer owner:string repo:string",
    ),
    (
        "update_issue_state",
        "confidence:string duplicate_of:number is_suggestion:boolean issue_number:number \
         owner:string rationale:string repo:string state:string state_reason:string",
    ),
    (
        "update_issue_title",
        "issue_number:number owner:string repo:string title:string",
    ),
    (
        "update_issue_type",
        "confidence:string is_suggestion:boolean issue_number:number issue_type:string|null \
         owner:string rationale:string repo:string",
    ),
    (
        "update_pull_request",
        "base:string body:string draft:boolean maintainer_can_modify:boolean owner:string \
         pullNumber:number repo:string reviewers:array state:string title:string",
    ),
    (
        "update_pull_request_body",
        "body:string owner:string pullNumber:number repo:string",
    ),
    (
        "update_pull_request_branch",
        "expectedHeadSha:string owner:string pullNumber:number repo:string",
    ),
    (
        "update_pull_request_draft_state",
        "draft:boolean owner:string pullNumber:number repo:string",
    ),
    (
        "update_pull_request_state",
        "owner:string pullNumber:number repo:string state:string",
    ),
    (
        "update_pull_request_title",
        "owner:string pullNumber:number repo:string title:string",
    ),
];

/// The type of `key` (`files/*/path`) in `tool`'s arguments.
fn type_of(tool: &str, key: &str) -> Option<&'static str> {
    let (_, args) = GITHUB_MCP_SERVER.iter().find(|(t, _)| *t == tool)?;
    args.split_whitespace()
        .find_map(|a| a.rsplit_once(':').filter(|(k, _)| *k == key))
        .map(|(_, ty)| ty)
}

/// A JSON pointer as a key of the table: indices become `*`.
fn key_of(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| {
            if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                "*".to_owned()
            } else {
                t.replace("~1", "/").replace("~0", "~")
            }
        })
        .collect()
}

/// What is wrong with `pointer` in the tools `tools` (those of the table the rule names):
/// `Err` when no tool has its argument, or a tool has it but the pointer reaches inside a
/// non-container or ends on a type `ok` refuses.
fn check_pointer(
    what: &str,
    pointer: &str,
    tools: &[&str],
    ok: impl Fn(&str) -> bool,
) -> Vec<String> {
    let key = key_of(pointer);
    let Some(top) = key.first() else {
        return vec![format!("{what} {pointer}: the whole arguments object")];
    };
    let having: Vec<&&str> = tools.iter().filter(|t| type_of(t, top).is_some()).collect();
    if having.is_empty() {
        return vec![format!(
            "{what} {pointer}: none of the tools {tools:?} takes an argument {top:?}"
        )];
    }
    let mut out = Vec::new();
    for tool in having {
        for depth in 1..=key.len() {
            let here = key[..depth].join("/");
            match type_of(tool, &here) {
                Some(ty) if depth < key.len() && !matches!(ty, "object" | "array") => {
                    out.push(format!(
                        "{what} {pointer}: {tool}'s {here:?} is of type {ty}, the pointer looks inside it"
                    ));
                    break;
                }
                Some(ty) if depth == key.len() && !ok(ty) => {
                    out.push(format!(
                        "{what} {pointer}: {tool}'s {here:?} is of type {ty}"
                    ));
                }
                Some(_) => {}
                None => {
                    out.push(format!("{what} {pointer}: {tool} has no {here:?}"));
                    break;
                }
            }
        }
    }
    out
}

/// Every problem of the `[[policy]]` examples in `text` (a TOML document) against the table.
fn problems(where_: &str, text: &str) -> (usize, Vec<String>) {
    let p = match parse(text) {
        Ok(p) => p,
        Err(errs) => return (0, errs.iter().map(|e| format!("{where_}: {e}")).collect()),
    };
    let mut out: Vec<String> = p
        .warnings()
        .into_iter()
        .map(|w| format!("{where_}: {w}"))
        .collect();
    for rule in &p.rules {
        let at = format!("{where_}: rule {:?}", rule.id);
        for g in &rule.tool_globs {
            let m = rule::glob(g).map(|g| g.compile_matcher());
            if !m.is_ok_and(|m| GITHUB_MCP_SERVER.iter().any(|(t, _)| m.is_match(t))) {
                out.push(format!(
                    "{at}: tools glob {g:?} names no tool of GitHub's MCP server"
                ));
            }
        }
        let tools: Vec<&str> = GITHUB_MCP_SERVER
            .iter()
            .map(|(t, _)| *t)
            .filter(|t| rule.names_tool(t))
            .collect();
        for a in &rule.arguments {
            // A glob matches strings, numbers and booleans; containers never.
            out.extend(
                check_pointer("arguments", a.pointer(), &tools, |ty| {
                    matches!(ty, "string" | "number" | "integer" | "boolean")
                })
                .into_iter()
                .map(|e| format!("{at}: {e}")),
            );
        }
        for s in &rule.shapes {
            // Every shape is a string shape. A built-in one (owner, repo) is checked only
            // where a tool has the argument; one the example declares must name an argument.
            let declared = !matches!(s.pointer(), "/owner" | "/repo");
            let found = check_pointer("values", s.pointer(), &tools, |ty| ty == "string");
            for e in found {
                if declared || !e.contains("takes an argument") {
                    out.push(format!("{at}: {e} (shape {})", s.shape().name()));
                }
            }
        }
    }
    (p.rules.len(), out)
}

/// The ```toml blocks of a Markdown text that hold `[[policy]]`.
fn policy_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut block: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        match &mut block {
            None if line.trim_start() == "```toml" => block = Some((i + 2, String::new())),
            Some(_) if line.trim_start() == "```" => {
                if let Some((at, text)) = block.take()
                    && text.contains("[[policy]]")
                {
                    out.push((at, text));
                }
            }
            Some((_, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    out
}

#[test]
fn documented_policy_examples_match_github_mcp_server_argument_shapes() {
    let config_md = include_str!("../../../../docs/CONFIG.md");
    let deploy = include_str!("../../../../deploy/proxy.toml");
    let mut sources: Vec<(String, String)> = policy_blocks(config_md)
        .into_iter()
        .map(|(line, text)| (format!("docs/CONFIG.md:{line}"), text))
        .collect();
    assert!(
        sources.len() >= 2,
        "the docs give [[policy]] examples in the file example and in the section"
    );
    if deploy.contains("[[policy]]") {
        sources.push(("deploy/proxy.toml".to_owned(), deploy.to_owned()));
    }
    let mut rules = 0;
    let mut all = Vec::new();
    for (where_, text) in &sources {
        let (n, found) = problems(where_, text);
        rules += n;
        all.extend(found);
    }
    assert!(all.is_empty(), "{}", all.join("\n"));
    assert!(rules >= 4, "{rules} rules checked");

    // The checker bites: the example issue 31 found, and a declared shape on an argument the
    // tools do not have.
    let (_, found) = problems(
        "old",
        r#"
[[policy]]
id = "writes-need-a-human"
tools = ["create_*", "update_*", "push_files", "merge_pull_request"]
arguments = { owner = "acme", "/repo/name" = "infra-*" }
values = { repo = "any", "/files/path" = "repo-path" }
decision = "ask"
"#,
    );
    assert!(
        found.iter().any(|e| e
            .contains("create_issue's \"repo\" is of type string, the pointer looks inside it")),
        "{found:?}"
    );
    assert!(
        found
            .iter()
            .any(|e| e.contains("values /files/path: push_files has no \"files/path\"")),
        "{found:?}"
    );
    let (_, found) = problems(
        "typo",
        "[[policy]]\nid=\"x\"\ntools=[\"delete_repo\"]\narguments={owner=\"acme\"}\ndecision=\"deny\"",
    );
    assert_eq!(
        found,
        [
            "typo: rule \"x\": tools glob \"delete_repo\" names no tool of GitHub's MCP server",
            "typo: rule \"x\": arguments /owner: none of the tools [] takes an argument \"owner\""
        ]
    );
}
