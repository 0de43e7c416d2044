//! `[[policy]]` and `[policy_defaults]`: which tool calls go through, are refused, wait for the
//! person's approval (`ask`) or need a broader token (`step_up`) — the pure rule engine, without
//! I/O (issue 19). The gateway asks [`Policy::decide`] on every `tools/call` and
//! [`Policy::hidden`] for every tool of a `tools/list` answer, after authentication and before
//! anything reaches the backend.
//!
//! Matching, as docs/CONFIG.md states it:
//! - Rules are tried in the order written; the **first** whose conditions all hold decides.
//!   None: `[policy_defaults] decision`.
//! - A rule holds when the tool name matches one of its `tools` globs, **every** `arguments`
//!   condition holds, the caller is **one of** its `people` (when given) and the client is **one
//!   of** its `clients` (when given).
//! - Globs (tool names and argument values): `*` any run of characters, `?` one character (one
//!   byte: non-ASCII text needs `*`), `[abc]`, `[a-z]`, `[!a]` classes, `{a,b}` alternatives,
//!   `\` escapes the next character. `/` is an ordinary character. Matching is ASCII
//!   case-insensitive (GitHub owners and repositories are, so `ACME` must not escape a rule on
//!   `acme`) and nothing else is normalised: a Unicode look-alike is another string, which is
//!   also what GitHub sees.
//! - An `arguments` key is a top-level argument name (`owner`) or a JSON pointer
//!   (`/files/0/path`, RFC 6901, `~0` and `~1` escapes); `owner` and `/owner` are the same
//!   condition. A string value matches against its glob; a number or boolean against its JSON
//!   text (`42`, `true`), an integral number also as its integer text (`42.0` and `4.2e1`
//!   match `"42"`); null, arrays, objects and missing keys never match, so the rule does not
//!   apply.
//! - Shapes (`values`, issue 31): a rule with `arguments` conditions first checks the shapes
//!   that apply to it — `owner` and `repo` are `github-name` unless `[policy_defaults] values`
//!   or the rule's own `values` say otherwise (`any` removes one). A present value outside its
//!   shape (`owner = "acme/infra/issues?"`, a number, an array) makes the rule's `arguments`
//!   conditions count as holding for `deny`, `ask` and `step_up` and as failing for `allow`:
//!   the backend may act on another owner, repository or path than the glob saw, so such a
//!   call never gets through a rule that reads arguments. An absent value has no shape to
//!   break.
//! - `people`: `login` (case-insensitive), `id:N` (GitHub's numeric user id), `org:X` and
//!   `team:X/Y` (active memberships, as last checked: see `flows::admission`).
//! - `clients`: client ids, exact.
//!
//! Two things the gateway refuses before the policy ever runs, so the matcher sees exactly what
//! the backend would: a body some backend reads differently (`gateway::envelope`: repeated or
//! case-folded keys, a key a rule names spelt otherwise) and a tool name outside MCP's
//! `[A-Za-z0-9_.-]{1,128}` ([`valid_tool_name`]).

mod canonical;
mod rule;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ids::{ClientId, UserId};

pub use canonical::arguments_digest;
use rule::{Rule, Shape, ShapeSource, glob_covers};

/// How long an `ask` approval stays usable when neither the rule nor `[policy_defaults]` says.
pub const DEFAULT_ASK_TTL_SECS: u64 = 600;
/// The bounds of `ask_ttl_secs`.
pub const ASK_TTL_RANGE: std::ops::RangeInclusive<u64> = 30..=86_400;

/// A decision as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawDecision {
    /// Forward the call.
    Allow,
    /// Refuse the call.
    Deny,
    /// Ask the person in their browser first.
    Ask,
    /// Require a token with more scopes.
    StepUp,
}

/// `[[policy]]` entry as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRule {
    id: String,
    tools: Vec<String>,
    /// Argument name or JSON pointer → glob on the value.
    #[serde(default)]
    arguments: Option<BTreeMap<String, String>>,
    /// Argument name or JSON pointer → the shape its value must have (`github-name`,
    /// `repo-path`, `any`), over `[policy_defaults] values` and the built-in shapes.
    #[serde(default)]
    values: Option<BTreeMap<String, String>>,
    #[serde(default)]
    people: Option<Vec<String>>,
    #[serde(default)]
    clients: Option<Vec<String>>,
    decision: RawDecision,
    ask_ttl_secs: Option<u64>,
    scopes: Option<Vec<String>>,
}

/// `[policy_defaults]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDefaults {
    /// `allow` or `deny`; `allow` when absent.
    decision: Option<RawDecision>,
    /// The `ask_ttl_secs` of `ask` rules that do not set their own.
    ask_ttl_secs: Option<u64>,
    /// Shapes for every rule, over the built-in ones (`owner` and `repo`: `github-name`).
    #[serde(default)]
    values: Option<BTreeMap<String, String>>,
}

/// What a decision tells the gateway to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Forward the call.
    Allow,
    /// Refuse it with a tool error naming the rule.
    Deny,
    /// Answer with an approval link; the approval stays usable for `ttl_secs`.
    Ask {
        /// Seconds an approval may be used for.
        ttl_secs: u64,
    },
    /// Answer `insufficient_scope` for these scopes.
    StepUp {
        /// The scopes the token must carry.
        scopes: Vec<String>,
    },
}

impl Action {
    /// `allow`, `deny`, `ask` or `step_up`, as in the config and the audit log.
    pub fn as_str(&self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Deny => "deny",
            Action::Ask { .. } => "ask",
            Action::StepUp { .. } => "step_up",
        }
    }
}

/// Who is calling: what the gateway knows after authentication, without asking GitHub.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    /// `github:<numeric id>`.
    pub user_id: &'a UserId,
    /// GitHub login as last seen.
    pub login: Option<&'a str>,
    /// Active memberships the policy asks about: `acme` for an org, `acme/platform` for a
    /// team, lower-case.
    pub memberships: &'a [String],
    /// The MCP client the token was issued to.
    pub client_id: &'a ClientId,
    /// The membership questions `memberships` answers (same form), when that is known: an
    /// org or team outside it is **unknown** (a reload named it after the person's last
    /// check), and so is the login when `login` is `None`. An unknown fact counts as matching
    /// a `deny`, `ask` or `step_up` rule and as not matching an `allow` rule: what the proxy
    /// has not learnt yet never lets a call through. `None`: every fact is known.
    pub answered: Option<&'a [String]>,
}

/// One `tools/call`.
#[derive(Debug, Clone, Copy)]
pub struct ToolCall<'a> {
    /// `params.name`.
    pub name: &'a str,
    /// `params.arguments`.
    pub arguments: Option<&'a serde_json::Value>,
}

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The rule that decided; `None` for `[policy_defaults]`.
    pub rule_id: Option<String>,
    /// What to do.
    pub action: Action,
    /// The conditions that matched, for the audit log (`tool:create_issue`, `argument:/owner`,
    /// `people:team:acme/platform`, `client`): names and pointers, never argument values.
    pub matched: Vec<String>,
}

/// An org or team membership some `people` rule depends on: what sign-in and the periodic
/// recheck ask GitHub about, so a call never has to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MembershipQuestion {
    /// Membership of an org (lower-case login).
    Org(String),
    /// Membership of a team (lower-case org login and slug).
    Team {
        /// Organisation login.
        org: String,
        /// Team slug.
        slug: String,
    },
}

impl MembershipQuestion {
    /// The form [`Caller::memberships`] holds: `acme` or `acme/platform`.
    pub fn key(&self) -> String {
        match self {
            MembershipQuestion::Org(org) => org.clone(),
            MembershipQuestion::Team { org, slug } => format!("{org}/{slug}"),
        }
    }
}

/// What the admin API shows of one rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleSummary {
    /// `id`.
    pub id: String,
    /// `decision`.
    pub decision: &'static str,
    /// `tools`, as written.
    pub tools: Vec<String>,
    /// The pointers of `arguments` (not the globs: they are config, but keep it short).
    pub arguments: Vec<String>,
    /// `people`, normalised.
    pub people: Vec<String>,
    /// `clients`.
    pub clients: Vec<String>,
    /// `ask_ttl_secs` of an `ask` rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask_ttl_secs: Option<u64>,
    /// `scopes` of a `step_up` rule.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
}

/// The active policy as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicySummary {
    /// Rules in order.
    pub rules: Vec<RuleSummary>,
    /// `[policy_defaults] decision`.
    pub default: &'static str,
    /// [`Policy::describe`].
    pub description: String,
}

/// The validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: Vec<Rule>,
    default: Action,
}

impl Default for Policy {
    /// No rules, default allow: every call goes through, as before issue 19.
    fn default() -> Self {
        Policy {
            rules: Vec::new(),
            default: Action::Allow,
        }
    }
}

impl Policy {
    /// Validates `[[policy]]` and `[policy_defaults]`, one readable line per problem in `errs`
    /// (`policy[2] (id "x"): …`). On errors the returned policy holds the rules that were valid
    /// and must not be used.
    pub fn from_raw(rules: &[RawRule], defaults: &RawDefaults, errs: &mut Vec<String>) -> Policy {
        let default_ttl = match defaults.ask_ttl_secs {
            Some(s) if !ASK_TTL_RANGE.contains(&s) => {
                errs.push(format!(
                    "policy_defaults.ask_ttl_secs: must be {}..={}",
                    ASK_TTL_RANGE.start(),
                    ASK_TTL_RANGE.end()
                ));
                DEFAULT_ASK_TTL_SECS
            }
            Some(s) => s,
            None => DEFAULT_ASK_TTL_SECS,
        };
        let default = match defaults.decision {
            None | Some(RawDecision::Allow) => Action::Allow,
            Some(RawDecision::Deny) => Action::Deny,
            Some(RawDecision::Ask | RawDecision::StepUp) => {
                errs.push(
                    "policy_defaults.decision: must be \"allow\" or \"deny\" (ask and step_up \
                     belong to rules that name their tools)"
                        .to_owned(),
                );
                Action::Allow
            }
        };
        let mut base_shapes = rule::built_in_shapes();
        for (key, name) in defaults.values.iter().flatten() {
            match (rule::pointer_of(key), Shape::parse(name)) {
                (Ok(pointer), Ok(shape)) => {
                    base_shapes.insert(pointer, (shape, ShapeSource::Defaults));
                }
                (Err(e), _) => errs.push(format!("policy_defaults.values: {e}")),
                (_, Err(e)) => errs.push(format!("policy_defaults.values.{key}: {e}")),
            }
        }
        let mut seen = BTreeSet::new();
        let mut compiled = Vec::with_capacity(rules.len());
        for (i, raw) in rules.iter().enumerate() {
            let at = format!("policy[{i}] (id {:?})", raw.id);
            if !raw.id.is_empty() && !seen.insert(raw.id.to_ascii_lowercase()) {
                errs.push(format!("{at}: the id is used by an earlier rule"));
            }
            if let Some(rule) = Rule::from_raw(raw, default_ttl, &base_shapes, &at, errs) {
                compiled.push(rule);
            }
        }
        Policy {
            rules: compiled,
            default,
        }
    }

    /// Every scope a `step_up` rule names, in rule order, once each.
    pub fn step_up_scopes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.rules {
            if let Action::StepUp { scopes } = &r.action {
                for s in scopes {
                    if !out.contains(s) {
                        out.push(s.clone());
                    }
                }
            }
        }
        out
    }

    /// What `check-config` prints besides errors: rules that can never decide anything.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (j, later) in self.rules.iter().enumerate() {
            let at = format!("policy[{j}] (id {:?})", later.id);
            if let Some((i, earlier)) = self.rules[..j].iter().enumerate().find(|(_, e)| {
                !e.narrows()
                    && later
                        .tool_globs
                        .iter()
                        .all(|g| e.tool_globs.iter().any(|c| glob_covers(c, g)))
            }) {
                out.push(format!(
                    "{at}: unreachable behind policy[{i}] (id {:?}), which matches all of its \
                     tools with no arguments, people or clients condition",
                    earlier.id
                ));
            }
            for g in &later.tool_globs {
                if !rule::glob_can_name_a_tool(g) {
                    out.push(format!(
                        "{at}: tools glob {g:?} has a character no tool name can have \
                         ([A-Za-z0-9_.-]), so it never matches"
                    ));
                }
            }
            for (pointer, glob, shape) in later.shaped_globs() {
                if !rule::glob_literals_all(glob, |c| shape.literal_ok(c)) {
                    out.push(format!(
                        "{at}: arguments {pointer}: glob {glob:?} has a character no {} value \
                         can have ({}), so it holds for no well-formed value",
                        shape.name(),
                        shape.charset()
                    ));
                }
            }
        }
        out
    }

    /// Every JSON pointer a rule reads in `arguments` (`owner` as `/owner`): its conditions
    /// and the shapes it checks. The gateway refuses calls that spell one of these keys in a
    /// way some backend reads differently (a Go backend reads `Owner` as `owner`).
    pub fn argument_pointers(&self) -> impl Iterator<Item = &str> {
        self.rules.iter().flat_map(|r| {
            r.arguments
                .iter()
                .map(|a| a.pointer())
                .chain(r.shapes.iter().map(|s| s.pointer()))
        })
    }

    /// No rules and default allow: the gateway can skip all policy work.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default == Action::Allow
    }

    /// The first rule whose conditions all hold, else `[policy_defaults]`.
    pub fn decide(&self, who: &Caller<'_>, call: &ToolCall<'_>) -> Decision {
        for rule in &self.rules {
            if let Some(matched) = rule.matches(who, call) {
                return Decision {
                    rule_id: Some(rule.id.clone()),
                    action: rule.action.clone(),
                    matched,
                };
            }
        }
        Decision {
            rule_id: None,
            action: self.default.clone(),
            matched: Vec::new(),
        }
    }

    /// For `tools/list`: whether every call of `tool` by `who` is denied whatever its
    /// arguments. A tool that some arguments would let through (or ask about) stays listed.
    pub fn hidden(&self, who: &Caller<'_>, tool: &str) -> bool {
        for rule in &self.rules {
            if !rule.matches_without_arguments(who, tool) {
                continue;
            }
            if rule.arguments.is_empty() {
                return rule.action == Action::Deny;
            }
            if rule.action != Action::Deny {
                // Some arguments reach this rule, and it does not deny them.
                return false;
            }
            // A deny for some arguments: other arguments fall through to later rules.
        }
        self.default == Action::Deny
    }

    /// The orgs and teams `people` rules name, lower-case, each once.
    pub fn questions(&self) -> Vec<MembershipQuestion> {
        let set: BTreeSet<MembershipQuestion> = self
            .rules
            .iter()
            .flat_map(|r| r.people.iter().filter_map(rule::Person::question))
            .collect();
        set.into_iter().collect()
    }

    /// Whether some `people` rule names a login (which the gateway then needs to know).
    pub fn names_logins(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.people.iter().any(|p| matches!(p, rule::Person::Login(_))))
    }

    /// A short summary for logs: `3 rules, default allow`.
    pub fn describe(&self) -> String {
        let n = self.rules.len();
        format!(
            "{n} rule{}, default {}",
            if n == 1 { "" } else { "s" },
            self.default.as_str()
        )
    }

    /// The rules as the admin API shows them.
    pub fn summary(&self) -> PolicySummary {
        PolicySummary {
            rules: self.rules.iter().map(Rule::summary).collect(),
            default: self.default.as_str(),
            description: self.describe(),
        }
    }
}

/// The policy in force, swapped whole when SIGHUP brings a valid new one
/// (`run::reload_config`). A read per `tools/call` is an uncontended read lock and an `Arc`
/// clone; the lock is never held beyond that, so never across an `.await`.
#[derive(Debug, Default)]
pub struct LivePolicy(std::sync::RwLock<std::sync::Arc<Policy>>);

impl LivePolicy {
    /// Starts with `policy`.
    pub fn new(policy: Policy) -> LivePolicy {
        LivePolicy(std::sync::RwLock::new(std::sync::Arc::new(policy)))
    }

    /// The policy now. A call decided with it keeps it to the end, even across a reload.
    pub fn current(&self) -> std::sync::Arc<Policy> {
        // A writer that panicked mid-swap cannot have left a half-made policy: the swap is one
        // assignment of a whole `Arc`.
        match self.0.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Puts `policy` in force for every call decided from now on.
    pub fn replace(&self, policy: Policy) {
        let new = std::sync::Arc::new(policy);
        match self.0.write() {
            Ok(mut p) => *p = new,
            Err(poisoned) => *poisoned.into_inner() = new,
        }
    }
}

/// Tool names per MCP (SEP-986): 1 to 128 of `[A-Za-z0-9_.-]`. Anything else is refused before
/// the policy runs, so a Unicode look-alike never reaches the matcher or the backend.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(rule::tool_name_byte)
}
