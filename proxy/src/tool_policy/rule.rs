//! One compiled `[[policy]]` rule and its conditions.

use std::collections::BTreeMap;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};
use serde_json::Value;

use super::{
    ASK_TTL_RANGE, Action, Caller, MembershipQuestion, RawDecision, RawRule, RuleSummary, ToolCall,
};

/// Bytes of a tool name (MCP SEP-986).
pub(super) fn tool_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')
}

/// The one glob dialect of the policy: ASCII case-insensitive, `/` ordinary, `\` escapes.
pub(super) fn glob(pattern: &str) -> Result<Glob, String> {
    if pattern.is_empty() {
        return Err("an empty glob matches nothing".to_owned());
    }
    GlobBuilder::new(pattern)
        .case_insensitive(true)
        .literal_separator(false)
        .backslash_escape(true)
        .empty_alternates(false)
        .build()
        .map_err(|e| e.kind().to_string())
}

/// A rule id ends up in logs, audit events, JSON-RPC errors and the approval page: keep it to
/// characters that need no escaping anywhere.
fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(tool_name_byte)
}

/// GitHub's rule for org logins and team slugs (the same as `[access]`'s).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// RFC 6749 scope-token.
fn valid_scope(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
}

/// An RFC 6901 pointer (non-empty: the whole document is never a string or number). `~` only
/// as `~0` or `~1`.
fn valid_pointer(p: &str) -> bool {
    if !p.starts_with('/') {
        return false;
    }
    let b = p.as_bytes();
    b.iter()
        .enumerate()
        .all(|(i, &c)| c != b'~' || matches!(b.get(i + 1), Some(b'0' | b'1')))
}

/// An `arguments` or `values` key as the pointer it names: `owner` is `/owner`, a key starting
/// with `/` is a pointer already.
pub(super) fn pointer_of(key: &str) -> Result<String, String> {
    if key.starts_with('/') {
        if valid_pointer(key) {
            Ok(key.to_owned())
        } else {
            Err(format!(
                "{key:?} is not a JSON pointer (a \"~\" must be \"~0\" or \"~1\")"
            ))
        }
    } else if key.is_empty() {
        Err("an empty key names no argument".to_owned())
    } else {
        Ok(format!("/{}", key.replace('~', "~0").replace('/', "~1")))
    }
}

/// What a value must look like before a rule reasons about it (`values`). A value outside its
/// shape may mean something else to the backend than to the glob (`owner =
/// "acme/infra/issues?"` is the owner `acme` to GitHub once its server has formatted it into a
/// URL path), so it counts as matching every restricting rule and no `allow` rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A GitHub login, organisation, repository or team name: a JSON string of 1 to 100 of
    /// `A-Z a-z 0-9 _ . -`, and neither `.` nor `..`.
    GitHubName,
    /// A file path inside a repository: a JSON string of `/`-separated segments, none empty,
    /// `.` or `..` (so no leading, trailing or doubled `/`), without `%`, `?`, `#`, `\` or
    /// control characters.
    RepoPath,
}

/// The shape names `values` accepts, for error messages.
const SHAPE_NAMES: &str = "\"github-name\", \"repo-path\" or \"any\"";

impl Shape {
    /// `None` for `"any"`: no shape (it switches a default off).
    pub(super) fn parse(name: &str) -> Result<Option<Shape>, String> {
        match name {
            "github-name" => Ok(Some(Shape::GitHubName)),
            "repo-path" => Ok(Some(Shape::RepoPath)),
            "any" => Ok(None),
            _ => Err(format!("{name:?} is not a shape: one of {SHAPE_NAMES}")),
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Shape::GitHubName => "github-name",
            Shape::RepoPath => "repo-path",
        }
    }

    /// Whether `v` has this shape. Every shape is a string: a number, boolean, null, array or
    /// object is outside (arrays and objects print as text that can carry a path: Go's `%v`
    /// writes `[acme/x?]`, JavaScript's template strings `acme/x?`).
    fn holds(self, v: &Value) -> bool {
        let Value::String(s) = v else {
            return false;
        };
        match self {
            Shape::GitHubName => {
                (1..=100).contains(&s.len())
                    && s != "."
                    && s != ".."
                    && s.bytes().all(tool_name_byte)
            }
            Shape::RepoPath => {
                s.split('/').all(|seg| !matches!(seg, "" | "." | ".."))
                    && !s.contains(['%', '?', '#', '\\'])
                    && !s.chars().any(char::is_control)
            }
        }
    }

    /// Whether a glob's literal character `c` can be part of a value of this shape.
    pub(super) fn literal_ok(self, c: char) -> bool {
        match self {
            Shape::GitHubName => c.is_ascii() && tool_name_byte(c as u8),
            Shape::RepoPath => !matches!(c, '%' | '?' | '#' | '\\') && !c.is_control(),
        }
    }

    /// The characters a value of this shape may have, for warnings.
    pub(super) fn charset(self) -> &'static str {
        match self {
            Shape::GitHubName => "A-Z a-z 0-9 _ . -",
            Shape::RepoPath => "no % ? # \\ or control characters",
        }
    }
}

/// Where an argument's shape was declared, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShapeSource {
    /// Built in: `owner` and `repo` are GitHub names.
    BuiltIn,
    /// `[policy_defaults] values`.
    Defaults,
    /// The rule's own `values`.
    Rule,
}

/// The shapes every rule with `arguments` conditions starts from: the top-level `owner` and
/// `repo`, which every tool of GitHub's MCP server takes as a string naming an account and a
/// repository, and formats into URL paths.
pub(super) fn built_in_shapes() -> BTreeMap<String, (Option<Shape>, ShapeSource)> {
    ["/owner", "/repo"]
        .into_iter()
        .map(|p| {
            (
                p.to_owned(),
                (Some(Shape::GitHubName), ShapeSource::BuiltIn),
            )
        })
        .collect()
}

/// A pointer's target, for a shape check: absent (nothing to check), a value, or unreachable
/// (a scalar, null, or an array with a non-index segment where the pointer goes deeper: the
/// value is not built as the shape's pointer says).
enum Found<'a> {
    Absent,
    Value(&'a Value),
    Unreachable,
}

/// RFC 6901 evaluation that tells a missing member (absent) from a path through a value that
/// has no members (unreachable). Array indices as serde_json reads them: digits, no leading
/// zero, no sign. `arguments` that are no object (MCP says they are one) name no argument:
/// every pointer is absent in them, as the conditions see it too.
fn find<'a>(root: Option<&'a Value>, pointer: &str) -> Found<'a> {
    let Some(mut at) = root.filter(|v| v.is_object()) else {
        return Found::Absent;
    };
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let next = match at {
            Value::Object(map) => map.get(&token),
            Value::Array(items) => {
                let index_like = !token.is_empty()
                    && token.bytes().all(|b| b.is_ascii_digit())
                    && (token == "0" || !token.starts_with('0'));
                if !index_like {
                    return Found::Unreachable;
                }
                token.parse::<usize>().ok().and_then(|i| items.get(i))
            }
            _ => return Found::Unreachable,
        };
        match next {
            Some(v) => at = v,
            None => return Found::Absent,
        }
    }
    Found::Value(at)
}

/// One argument whose shape a rule checks.
#[derive(Debug, Clone)]
pub(super) struct Shaped {
    pointer: String,
    shape: Shape,
}

impl Shaped {
    pub(super) fn pointer(&self) -> &str {
        &self.pointer
    }

    #[cfg(test)]
    pub(super) fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the call's value at this pointer is present and outside the shape.
    fn outside(&self, arguments: Option<&Value>) -> bool {
        match find(arguments, &self.pointer) {
            Found::Absent => false,
            Found::Value(v) => !self.shape.holds(v),
            Found::Unreachable => true,
        }
    }
}

/// One entry of `people`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Person {
    /// Lower-case login.
    Login(String),
    /// GitHub numeric user id.
    Id(u64),
    /// Lower-case org login.
    Org(String),
    /// Lower-case `org`, `slug`, and the membership key `org/slug`.
    Team(String, String, String),
}

impl Person {
    fn parse(s: &str) -> Result<Person, String> {
        if let Some(id) = s.strip_prefix("id:") {
            return match id.parse::<u64>() {
                Ok(n) if n > 0 => Ok(Person::Id(n)),
                _ => Err(format!(
                    "people: {s:?}: \"id:\" takes GitHub's numeric user id"
                )),
            };
        }
        if let Some(org) = s.strip_prefix("org:") {
            return if valid_name(org) {
                Ok(Person::Org(org.to_ascii_lowercase()))
            } else {
                Err(format!(
                    "people: {s:?}: \"org:\" takes an organisation login"
                ))
            };
        }
        if let Some(team) = s.strip_prefix("team:") {
            return match team.split_once('/') {
                Some((org, slug)) if valid_name(org) && valid_name(slug) => {
                    let (org, slug) = (org.to_ascii_lowercase(), slug.to_ascii_lowercase());
                    let key = format!("{org}/{slug}");
                    Ok(Person::Team(org, slug, key))
                }
                _ => Err(format!("people: {s:?}: \"team:\" takes \"org/team-slug\"")),
            };
        }
        // GitHub logins: letters, digits and single hyphens, at most 39.
        if s.len() <= 39 && valid_name(s) && !s.contains(['_', '.']) {
            Ok(Person::Login(s.to_ascii_lowercase()))
        } else {
            Err(format!(
                "people: {s:?} is none of a GitHub login, \"id:N\", \"org:X\", \"team:X/Y\""
            ))
        }
    }

    /// `None`: the caller's facts do not say (see [`Caller::answered`]).
    fn matches(&self, who: &Caller<'_>) -> Option<bool> {
        let answered = |key: &str| {
            who.answered
                .is_none_or(|a| a.iter().any(|q| q.eq_ignore_ascii_case(key)))
        };
        match self {
            Person::Login(_) if who.login.is_none() && who.answered.is_some() => None,
            Person::Org(org) if !answered(org) => None,
            Person::Team(_, _, key) if !answered(key) => None,
            _ => Some(self.holds(who)),
        }
    }

    fn holds(&self, who: &Caller<'_>) -> bool {
        match self {
            Person::Login(l) => who.login.is_some_and(|x| x.eq_ignore_ascii_case(l)),
            Person::Id(n) => {
                who.user_id
                    .as_str()
                    .strip_prefix("github:")
                    .and_then(|s| s.parse::<u64>().ok())
                    == Some(*n)
            }
            Person::Org(org) => who.memberships.iter().any(|m| m.eq_ignore_ascii_case(org)),
            Person::Team(_, _, key) => who.memberships.iter().any(|m| m.eq_ignore_ascii_case(key)),
        }
    }

    /// What the audit log records: `people:<entry>`.
    fn label(&self) -> String {
        match self {
            Person::Login(l) => format!("people:{l}"),
            Person::Id(n) => format!("people:id:{n}"),
            Person::Org(o) => format!("people:org:{o}"),
            Person::Team(_, _, key) => format!("people:team:{key}"),
        }
    }

    pub(super) fn question(&self) -> Option<MembershipQuestion> {
        match self {
            Person::Org(o) => Some(MembershipQuestion::Org(o.clone())),
            Person::Team(org, slug, _) => Some(MembershipQuestion::Team {
                org: org.clone(),
                slug: slug.clone(),
            }),
            Person::Login(_) | Person::Id(_) => None,
        }
    }
}

/// One `arguments` condition.
#[derive(Debug, Clone)]
pub(super) struct ArgCondition {
    /// RFC 6901 pointer (`owner` is stored as `/owner`).
    pointer: String,
    glob: GlobMatcher,
}

impl ArgCondition {
    /// The glob as written.
    pub(super) fn glob_text(&self) -> &str {
        self.glob.glob().glob()
    }

    pub(super) fn pointer(&self) -> &str {
        &self.pointer
    }

    fn matches(&self, arguments: Option<&Value>) -> bool {
        let Some(v) = arguments.and_then(|a| a.pointer(&self.pointer)) else {
            return false;
        };
        match v {
            Value::String(s) => self.glob.is_match(s),
            Value::Number(n) => {
                // `42.0` and `4.2e1` are the number 42 to the backend too: an integral float
                // also matches as its integer text, so a rule on "42" cannot be side-stepped.
                self.glob.is_match(n.to_string())
                    || n.as_f64().is_some_and(|f| {
                        f.fract() == 0.0
                            && f.abs() < 9.0e15
                            && self.glob.is_match(format!("{}", f as i64))
                    })
            }
            Value::Bool(b) => self.glob.is_match(if *b { "true" } else { "false" }),
            Value::Null | Value::Array(_) | Value::Object(_) => false,
        }
    }
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    pub(super) id: String,
    /// `tools` as written, for warnings and the admin API.
    pub(super) tool_globs: Vec<String>,
    tools: GlobSet,
    pub(super) arguments: Vec<ArgCondition>,
    /// The shapes this rule checks before it reads `arguments` (empty when it has no
    /// `arguments` condition: it reads no argument then).
    pub(super) shapes: Vec<Shaped>,
    pub(super) people: Vec<Person>,
    clients: Vec<String>,
    pub(super) action: Action,
}

impl Rule {
    /// Compiles one rule; `None` (with lines in `errs`) when anything is wrong with it.
    pub(super) fn from_raw(
        raw: &RawRule,
        default_ttl: u64,
        base_shapes: &BTreeMap<String, (Option<Shape>, ShapeSource)>,
        at: &str,
        errs: &mut Vec<String>,
    ) -> Option<Rule> {
        let before = errs.len();
        if !valid_id(&raw.id) {
            errs.push(format!(
                "{at}: id must be 1 to 64 of A-Z a-z 0-9 _ . - (it appears in logs, audit \
                 events and error messages)"
            ));
        }
        if raw.tools.is_empty() {
            errs.push(format!("{at}: tools is empty, so the rule matches nothing"));
        }
        let mut set = GlobSetBuilder::new();
        for g in &raw.tools {
            match glob(g) {
                Ok(g) => {
                    set.add(g);
                }
                Err(e) => errs.push(format!("{at}: tools: bad glob {g:?}: {e}")),
            }
        }
        let tools = match set.build() {
            Ok(s) => s,
            Err(e) => {
                errs.push(format!("{at}: tools: {e}"));
                GlobSet::empty()
            }
        };

        let mut arguments = Vec::new();
        for (key, pattern) in raw.arguments.iter().flatten() {
            let pointer = match pointer_of(key) {
                Ok(p) => p,
                Err(e) => {
                    errs.push(format!("{at}: arguments: {e}"));
                    continue;
                }
            };
            match glob(pattern) {
                Ok(g) => arguments.push(ArgCondition {
                    pointer,
                    glob: g.compile_matcher(),
                }),
                Err(e) => errs.push(format!("{at}: arguments.{key}: bad glob {pattern:?}: {e}")),
            }
        }
        // In pointer order, so `matched` reads the same however the table was written.
        arguments.sort_by(|a, b| a.pointer.cmp(&b.pointer));
        if raw.arguments.as_ref().is_some_and(|a| a.is_empty()) {
            errs.push(format!(
                "{at}: arguments is empty (leave it out to match any arguments)"
            ));
        }
        let shapes = shapes_of(raw, &arguments, base_shapes, at, errs);

        let mut people = Vec::new();
        for p in raw.people.iter().flatten() {
            match Person::parse(p) {
                Ok(p) => people.push(p),
                Err(e) => errs.push(format!("{at}: {e}")),
            }
        }
        if raw.people.as_ref().is_some_and(|p| p.is_empty()) {
            errs.push(format!(
                "{at}: people is empty, so the rule matches no one (leave it out to match \
                 everyone)"
            ));
        }
        let mut clients = Vec::new();
        for c in raw.clients.iter().flatten() {
            if c.is_empty() {
                errs.push(format!("{at}: clients: an empty client id"));
            } else {
                clients.push(c.clone());
            }
        }
        if raw.clients.as_ref().is_some_and(|c| c.is_empty()) {
            errs.push(format!(
                "{at}: clients is empty, so the rule matches no client (leave it out to match \
                 every client)"
            ));
        }

        if raw.ask_ttl_secs.is_some() && raw.decision != RawDecision::Ask {
            errs.push(format!(
                "{at}: ask_ttl_secs belongs to decision = \"ask\" only"
            ));
        }
        if raw.scopes.is_some() && raw.decision != RawDecision::StepUp {
            errs.push(format!(
                "{at}: scopes belongs to decision = \"step_up\" only"
            ));
        }
        let action = match raw.decision {
            RawDecision::Allow => Action::Allow,
            RawDecision::Deny => Action::Deny,
            RawDecision::Ask => match raw.ask_ttl_secs {
                Some(s) if !ASK_TTL_RANGE.contains(&s) => {
                    errs.push(format!(
                        "{at}: ask_ttl_secs must be {}..={}",
                        ASK_TTL_RANGE.start(),
                        ASK_TTL_RANGE.end()
                    ));
                    Action::Deny
                }
                Some(s) => Action::Ask { ttl_secs: s },
                None => Action::Ask {
                    ttl_secs: default_ttl,
                },
            },
            RawDecision::StepUp => match &raw.scopes {
                Some(s) if !s.is_empty() => {
                    for bad in s.iter().filter(|x| !valid_scope(x)) {
                        errs.push(format!("{at}: scopes: {bad:?} is not a scope token"));
                    }
                    let mut scopes = s.clone();
                    scopes.sort();
                    scopes.dedup();
                    Action::StepUp { scopes }
                }
                _ => {
                    errs.push(format!(
                        "{at}: decision = \"step_up\" needs scopes (the scopes the token must \
                         carry)"
                    ));
                    Action::Deny
                }
            },
        };
        (errs.len() == before).then(|| Rule {
            id: raw.id.clone(),
            tool_globs: raw.tools.clone(),
            tools,
            arguments,
            shapes,
            people,
            clients,
            action,
        })
    }

    #[cfg(test)]
    pub(super) fn names_tool(&self, tool: &str) -> bool {
        self.tools.is_match(tool)
    }

    /// Whether the rule has conditions beyond the tool name.
    pub(super) fn narrows(&self) -> bool {
        !self.arguments.is_empty() || !self.people.is_empty() || !self.clients.is_empty()
    }

    /// The tool, people and client conditions. `Some(matched)` when they hold.
    fn head(&self, who: &Caller<'_>, tool: &str) -> Option<Vec<String>> {
        if !self.tools.is_match(tool) {
            return None;
        }
        let mut matched = vec![format!("tool:{tool}")];
        if !self.people.is_empty() {
            // An unknown fact never lets a call through: it matches the rules that restrict.
            let restrictive = !matches!(self.action, Action::Allow);
            let (p, known) = self.people.iter().find_map(|p| match p.matches(who) {
                Some(true) => Some((p, true)),
                None if restrictive => Some((p, false)),
                _ => None,
            })?;
            matched.push(if known {
                p.label()
            } else {
                format!("{}(unknown)", p.label())
            });
        }
        if !self.clients.is_empty() {
            if !self.clients.iter().any(|c| c == who.client_id.as_str()) {
                return None;
            }
            matched.push("client".to_owned());
        }
        Some(matched)
    }

    /// `Some(the matched conditions)` when every condition holds. A call with a value outside
    /// its shape cannot be read (which owner, repository or path the backend will act on is
    /// not what the value says): the rule's `arguments` conditions count as holding when it
    /// restricts (`deny`, `ask`, `step_up`) and as failing when it allows.
    pub(super) fn matches(&self, who: &Caller<'_>, call: &ToolCall<'_>) -> Option<Vec<String>> {
        let mut matched = self.head(who, call.name)?;
        let outside: Vec<&Shaped> = self
            .shapes
            .iter()
            .filter(|s| s.outside(call.arguments))
            .collect();
        if !outside.is_empty() {
            if self.action == Action::Allow {
                return None;
            }
            for a in &self.arguments {
                if a.matches(call.arguments) && !outside.iter().any(|s| s.pointer == a.pointer) {
                    matched.push(format!("argument:{}", a.pointer));
                }
            }
            for s in outside {
                matched.push(format!(
                    "argument:{}(outside {})",
                    s.pointer,
                    s.shape.name()
                ));
            }
            return Some(matched);
        }
        for a in &self.arguments {
            if !a.matches(call.arguments) {
                return None;
            }
            matched.push(format!("argument:{}", a.pointer));
        }
        Some(matched)
    }

    /// `(pointer, glob, shape)` of each `arguments` condition on a shaped argument.
    pub(super) fn shaped_globs(&self) -> impl Iterator<Item = (&str, &str, Shape)> {
        self.arguments.iter().filter_map(|a| {
            self.shapes
                .iter()
                .find(|s| s.pointer == a.pointer)
                .map(|s| (a.pointer.as_str(), a.glob_text(), s.shape))
        })
    }

    /// Every condition but `arguments`.
    pub(super) fn matches_without_arguments(&self, who: &Caller<'_>, tool: &str) -> bool {
        self.head(who, tool).is_some()
    }

    pub(super) fn summary(&self) -> RuleSummary {
        RuleSummary {
            id: self.id.clone(),
            decision: self.action.as_str(),
            tools: self.tool_globs.clone(),
            arguments: self.arguments.iter().map(|a| a.pointer.clone()).collect(),
            people: self
                .people
                .iter()
                .map(|p| p.label().trim_start_matches("people:").to_owned())
                .collect(),
            clients: self.clients.clone(),
            ask_ttl_secs: match self.action {
                Action::Ask { ttl_secs } => Some(ttl_secs),
                _ => None,
            },
            scopes: match &self.action {
                Action::StepUp { scopes } => Some(scopes.clone()),
                _ => None,
            },
        }
    }
}

/// Glob metacharacters of the dialect.
fn is_meta(c: char) -> bool {
    matches!(
        c,
        '*' | '?' | '[' | ']' | '{' | '}' | '\\' | ',' | '!' | '^'
    )
}

/// Whether every name `later` matches, `earlier` matches too — only where that is certain
/// (for the unreachable-rule warning, which must never be wrong): a catch-all `*`, the same
/// glob, or `earlier` of the form `P*` / `*S` (literal `P`, `S`) against a `later` whose
/// literal head starts with `P` / literal tail ends with `S`.
pub(super) fn glob_covers(earlier: &str, later: &str) -> bool {
    if earlier.chars().all(|c| c == '*') || earlier.eq_ignore_ascii_case(later) {
        return true;
    }
    let literal_head = |g: &str| -> String { g.chars().take_while(|c| !is_meta(*c)).collect() };
    let literal_tail = |g: &str| -> String {
        let mut t: Vec<char> = g.chars().rev().take_while(|c| !is_meta(*c)).collect();
        t.reverse();
        t.into_iter().collect()
    };
    if let Some(prefix) = earlier.strip_suffix('*')
        && !prefix.contains(is_meta)
    {
        let head = literal_head(later).to_ascii_lowercase();
        if head.starts_with(&prefix.to_ascii_lowercase()) {
            return true;
        }
    }
    if let Some(suffix) = earlier.strip_prefix('*')
        && !suffix.contains(is_meta)
    {
        // A `later` with no metacharacter at all is its own head and tail.
        let tail = literal_tail(later).to_ascii_lowercase();
        if tail.ends_with(&suffix.to_ascii_lowercase()) {
            return true;
        }
    }
    false
}

/// Whether a tools glob's literal characters could all be part of a tool name.
pub(super) fn glob_can_name_a_tool(g: &str) -> bool {
    glob_literals_all(g, |c| c.is_ascii() && tool_name_byte(c as u8))
}

/// Whether a glob's literal characters (outside `[...]` classes and `{...}` alternatives,
/// where one odd choice does not doom the glob) all pass `ok`.
pub(super) fn glob_literals_all(g: &str, ok: impl Fn(char) -> bool) -> bool {
    let (mut class, mut alt, mut escaped) = (false, 0usize, false);
    for c in g.chars() {
        let literal = if escaped {
            escaped = false;
            true
        } else if class {
            class = c != ']';
            false
        } else {
            match c {
                '\\' => {
                    escaped = true;
                    false
                }
                '[' => {
                    class = true;
                    false
                }
                '{' => {
                    alt += 1;
                    false
                }
                '}' => {
                    alt = alt.saturating_sub(1);
                    false
                }
                '*' | '?' => false,
                ',' if alt > 0 => false,
                _ => alt == 0,
            }
        };
        if literal && !ok(c) {
            return false;
        }
    }
    true
}

/// The shapes a rule checks: `base` (built in, then `[policy_defaults] values`) with the rule's
/// own `values` over it, `any` removing one. Only a rule with `arguments` conditions checks
/// shapes: one without reads no argument, so no value can mislead it.
fn shapes_of(
    raw: &RawRule,
    arguments: &[ArgCondition],
    base: &BTreeMap<String, (Option<Shape>, ShapeSource)>,
    at: &str,
    errs: &mut Vec<String>,
) -> Vec<Shaped> {
    let mut declared = base.clone();
    let mut own = BTreeMap::new();
    for (key, name) in raw.values.iter().flatten() {
        let pointer = match pointer_of(key) {
            Ok(p) => p,
            Err(e) => {
                errs.push(format!("{at}: values: {e}"));
                continue;
            }
        };
        let shape = match Shape::parse(name) {
            Ok(s) => s,
            Err(e) => {
                errs.push(format!("{at}: values.{key}: {e}"));
                continue;
            }
        };
        if let Some(first) = own.insert(pointer.clone(), key) {
            errs.push(format!(
                "{at}: values: {first:?} and {key:?} name the same argument ({pointer})"
            ));
        }
        declared.insert(pointer, (shape, ShapeSource::Rule));
    }
    if raw.values.as_ref().is_some_and(|v| v.is_empty()) {
        errs.push(format!(
            "{at}: values is empty (leave it out to keep the default shapes)"
        ));
    }
    if raw.values.is_some() && raw.arguments.is_none() {
        errs.push(format!(
            "{at}: values belongs to a rule with arguments conditions (a rule without them reads \
             no argument, so no value can mislead it)"
        ));
    }
    if arguments.is_empty() {
        return Vec::new();
    }
    let shapes: Vec<(Shaped, ShapeSource)> = declared
        .into_iter()
        .filter_map(|(pointer, (shape, source))| {
            shape.map(|shape| (Shaped { pointer, shape }, source))
        })
        .collect();
    // A condition below a shaped argument reaches inside a string: it could never hold.
    for a in arguments {
        for (s, source) in &shapes {
            if a.pointer.starts_with(&format!("{}/", s.pointer)) {
                let source = match source {
                    ShapeSource::BuiltIn => {
                        "built in: GitHub's MCP server takes owner and repo as strings"
                    }
                    ShapeSource::Defaults => "from [policy_defaults] values",
                    ShapeSource::Rule => "from this rule's values",
                };
                errs.push(format!(
                    "{at}: arguments: {:?} looks inside {:?}, which is a {} string ({source}), \
                     so the condition could never hold: put the glob on {:?} itself, or set \
                     values = {{ {:?} = \"any\" }} for a backend that takes an object there",
                    a.pointer,
                    s.pointer,
                    s.shape.name(),
                    s.pointer,
                    s.pointer,
                ));
            }
        }
    }
    shapes.into_iter().map(|(s, _)| s).collect()
}
