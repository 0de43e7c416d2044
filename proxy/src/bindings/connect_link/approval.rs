//! Binding: an approval link ↔ the person a held tool call was made for, and an approval ↔
//! (person, agent, tool, arguments). A `[[policy]]` rule with `decision = "ask"` holds a
//! `tools/call` until its person approves it at `/approve/<code>`:
//!
//! * The code is 32 bytes derived from the link's id with the connect-link key under a label
//!   of its own, stored only as a hash. One open link per person, agent and call: the same
//!   call asked again (a 2025-11-25 client simply retries) gets the same link.
//! * Opening it runs the connect-link opener checks ([`super::opener`]), in the same order and
//!   with the same uniform 404 for anything unknown, expired or answered. Only the link's
//!   person with a recent sign-in gets [`ApprovalOpenedBy`], which answering requires.
//! * Approving stores one approval, bound by its key to the person, the agent, the tool and
//!   the digest of the canonical arguments, until the ask expires. [`use_approval`] takes it:
//!   one approval forwards exactly one call, and a call with any argument changed finds none.

use super::{For, Opened, opener};
use crate::clock::UnixTime;
use crate::crypto::{self, Key};
use crate::session::Session;
use crate::store::records::{
    ApprovalAnswer, ApprovalHistoryEntry, ApprovalLinkRecord, ToolApprovalRecord,
};
use crate::store::tool_approvals::{self, ApprovalKey, Rule};

/// Approval links one person may have open for one agent at once: an agent that changes an
/// argument on every try cannot pile up held calls (each keeps its arguments until it lapses).
pub const MAX_OPEN_PER_AGENT: usize = 16;
use crate::store::{Store, StoreError};

/// The code of an approval link, derived from its id.
pub fn code_for(key: &Key, link_id: &str) -> String {
    crypto::b64url(&key.mac(&[b"mcp-oauth-proxy/approval-link/v1", link_id.as_bytes()]))
}

/// The held call.
#[derive(Debug, Clone, Copy)]
pub struct Ask<'a> {
    /// The tool.
    pub tool: &'a str,
    /// The rule that asks.
    pub rule_id: &'a str,
    /// `tool_policy::arguments_digest` of the arguments.
    pub arguments_digest: &'a str,
    /// The arguments as canonical JSON text, for the page.
    pub arguments: &'a str,
    /// How long the ask (and an approval it yields) lasts.
    pub ttl_secs: u64,
}

/// An approval link as handed to an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedApproval {
    /// Its id (`elicitationId`).
    pub link_id: String,
    /// `/approve/<code>`, relative to the public URL.
    pub path: String,
    /// Seconds until it expires.
    pub expires_in: u64,
    /// Whether this call created it (false: the open one was returned again).
    pub created: bool,
}

impl Ask<'_> {
    fn call(&self) -> Rule<'_> {
        Rule {
            rule_id: self.rule_id,
            tool: self.tool,
            arguments_digest: self.arguments_digest,
        }
    }
}

/// Returns the open approval link of this call, creating it if there is none; `None` when the
/// person already has [`MAX_OPEN_PER_AGENT`] links open for this agent (nothing is stored).
pub async fn request(
    store: &dyn Store,
    key: &Key,
    now: UnixTime,
    who: For<'_>,
    ask: Ask<'_>,
) -> Result<Option<IssuedApproval>, StoreError> {
    if let Some(open) = tool_approvals::open(store, who.user, who.client, &ask.call()).await?
        && tool_approvals::get(store, &ApprovalKey::of_open(&open))
            .await?
            .is_some()
    {
        return Ok(Some(IssuedApproval {
            path: path_of(key, &open.link_id),
            link_id: open.link_id,
            expires_in: open.expires_at.since(now),
            created: false,
        }));
    }
    if tool_approvals::open_of_agent(store, who.user, who.client).await? >= MAX_OPEN_PER_AGENT {
        return Ok(None);
    }
    let link_id = crypto::b64url(
        &crypto::random_bytes::<16>().map_err(|e| StoreError::Backend(e.to_string()))?,
    );
    let code = code_for(key, &link_id);
    let rec = ApprovalLinkRecord {
        link_id: link_id.clone(),
        user_id: who.user.clone(),
        client_id: who.client.clone(),
        tool: ask.tool.to_owned(),
        rule_id: ask.rule_id.to_owned(),
        arguments_digest: ask.arguments_digest.to_owned(),
        arguments: ask.arguments.to_owned(),
        created_at: now,
        expires_at: now.plus(ask.ttl_secs),
        confirm_shown_at_ms: None,
    };
    tool_approvals::put(store, &ApprovalKey::of_code(&code), &rec).await?;
    Ok(Some(IssuedApproval {
        path: format!("/approve/{code}"),
        link_id,
        expires_in: ask.ttl_secs,
        created: true,
    }))
}

/// The person who opened an approval link is the person the call was made for, with a
/// recent sign-in. Only this module makes one ([`open`]).
///
/// ```compile_fail
/// use mcp_oauth_proxy::bindings::connect_link::approval::ApprovalOpenedBy;
/// use mcp_oauth_proxy::store::records::ApprovalLinkRecord;
/// use mcp_oauth_proxy::store::tool_approvals::ApprovalKey;
/// // Private fields: a link cannot be declared opened by its person outside this module.
/// fn forge(link: ApprovalLinkRecord) -> ApprovalOpenedBy {
///     ApprovalOpenedBy { link, stored_at: ApprovalKey::of_code("c") }
/// }
/// ```
#[derive(Debug)]
pub struct ApprovalOpenedBy {
    link: ApprovalLinkRecord,
    stored_at: ApprovalKey,
}

impl ApprovalOpenedBy {
    /// The held call.
    pub fn link(&self) -> &ApprovalLinkRecord {
        &self.link
    }

    /// Records that the no-JavaScript confirmation step is being shown now (milliseconds);
    /// `false` if the link was answered in the meantime (it stays closed).
    pub async fn confirm_shown(
        &mut self,
        store: &dyn Store,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        match tool_approvals::confirm_shown(store, &self.stored_at, now_ms).await? {
            Some(rec) => {
                self.link = rec;
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Runs the opener checks on an approval link, in order.
pub async fn open(
    store: &dyn Store,
    code: &str,
    session: Option<&Session>,
    now: UnixTime,
    max_sign_in_age_secs: u64,
) -> Result<Opened<ApprovalOpenedBy>, StoreError> {
    let stored_at = ApprovalKey::of_code(code);
    let Some(link) = tool_approvals::get(store, &stored_at).await? else {
        return Ok(Opened::NotFound);
    };
    if let Err(refused) = opener(
        &link.link_id,
        &link.user_id,
        session,
        now,
        max_sign_in_age_secs,
    ) {
        return Ok(refused);
    }
    Ok(Opened::Owner(ApprovalOpenedBy { link, stored_at }))
}

/// The path of the approval link with this id (to return to it after a sign-in; the opener
/// checks run again when it is opened).
pub fn path_of(key: &Key, link_id: &str) -> String {
    format!("/approve/{}", code_for(key, link_id))
}

/// Answers the link. The link is taken first (single use): of two answers racing (a double
/// submit, two tabs, approve against deny) only the one that took it counts, and the other
/// gets `None` and changes nothing. Then the approval is stored and the index cleared. A crash
/// between the take and the approval loses the answer (the link is gone, the agent asks again),
/// never grants one twice.
pub async fn answer(
    store: &dyn Store,
    opened: ApprovalOpenedBy,
    answer: ApprovalAnswer,
    now: UnixTime,
) -> Result<Option<ApprovalLinkRecord>, StoreError> {
    let Some(taken) = tool_approvals::take(store, &opened.stored_at).await? else {
        return Ok(None);
    };
    if answer == ApprovalAnswer::Approved {
        tool_approvals::approve(store, &taken, now).await?;
    }
    tool_approvals::close(store, &opened.stored_at, &taken).await?;
    let l = &taken;
    tool_approvals::remember(
        store,
        &l.user_id,
        ApprovalHistoryEntry {
            link_id: l.link_id.clone(),
            client_id: l.client_id.clone(),
            tool: l.tool.clone(),
            rule_id: l.rule_id.clone(),
            answer,
            at: now,
        },
    )
    .await?;
    Ok(Some(taken))
}

/// A call its person approved, the approval now used up. Only [`use_approval`] makes one.
#[derive(Debug)]
pub struct Approved {
    approval: ToolApprovalRecord,
}

impl Approved {
    /// The approval that was used.
    pub fn record(&self) -> &ToolApprovalRecord {
        &self.approval
    }
}

/// Uses the approval of this exact call (person, agent, tool, arguments' digest), if its
/// person gave one that has not expired or been used. Durable when it returns: a replayed call
/// finds nothing, on any replica.
pub async fn use_approval(
    store: &dyn Store,
    who: For<'_>,
    rule_id: &str,
    tool: &str,
    arguments_digest: &str,
) -> Result<Option<Approved>, StoreError> {
    let call = Rule {
        rule_id,
        tool,
        arguments_digest,
    };
    Ok(
        tool_approvals::take_approval(store, who.user, who.client, &call)
            .await?
            .map(|approval| Approved { approval }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::ids::{ClientId, GitHubLogin, UserId};
    use crate::store::SledStore;
    use crate::store::records::SessionRecord;

    fn session(user: u64, auth_time: u64) -> Session {
        Session::for_tests(SessionRecord {
            user_id: UserId::github(user),
            login: GitHubLogin::new("x"),
            auth_time: UnixTime(auth_time),
            sign_in: crate::session::SignInKind::AccountPicker,
        })
    }

    const ASK: Ask<'static> = Ask {
        tool: "create_issue",
        rule_id: "writes",
        arguments_digest: "d1",
        arguments: "{\"owner\":\"acme\"}",
        ttl_secs: 600,
    };

    fn code(path: &str) -> &str {
        path.strip_prefix("/approve/").unwrap()
    }

    #[tokio::test]
    async fn approval_is_single_use_and_bound_to_the_call() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap();
        let k = Key::generate().unwrap();
        let (u, c) = (UserId::github(1), ClientId::new("agent"));
        let who = For {
            user: &u,
            client: &c,
        };
        let a = request(&s, &k, UnixTime(1_000), who, ASK)
            .await
            .unwrap()
            .unwrap();
        let again = request(&s, &k, UnixTime(1_010), who, ASK)
            .await
            .unwrap()
            .unwrap();
        assert!(a.created && !again.created);
        assert_eq!(a.path, again.path);
        // Nothing is approved until the person answers.
        assert!(
            use_approval(&s, who, "writes", "create_issue", "d1")
                .await
                .unwrap()
                .is_none()
        );
        let Opened::Owner(o) = open(
            &s,
            code(&a.path),
            Some(&session(1, 1_000)),
            UnixTime(1_020),
            900,
        )
        .await
        .unwrap() else {
            panic!("owner expected")
        };
        answer(&s, o, ApprovalAnswer::Approved, UnixTime(1_020))
            .await
            .unwrap()
            .unwrap();
        // Answered: the code is unknown.
        assert!(matches!(
            open(
                &s,
                code(&a.path),
                Some(&session(1, 1_000)),
                UnixTime(1_021),
                900
            )
            .await
            .unwrap(),
            Opened::NotFound
        ));
        // Other arguments, another tool, another agent: no approval.
        assert!(
            use_approval(&s, who, "writes", "create_issue", "d2")
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            use_approval(&s, who, "writes", "create_branch", "d1")
                .await
                .unwrap()
                .is_none()
        );
        let other = ClientId::new("other");
        assert!(
            use_approval(
                &s,
                For {
                    user: &u,
                    client: &other
                },
                "writes",
                "create_issue",
                "d1"
            )
            .await
            .unwrap()
            .is_none()
        );
        // The call itself: once.
        assert!(
            use_approval(&s, who, "writes", "create_issue", "d1")
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            use_approval(&s, who, "writes", "create_issue", "d1")
                .await
                .unwrap()
                .is_none()
        );
        let h = tool_approvals::history(&s, &u).await.unwrap();
        assert_eq!(h.len(), 1);
        assert_eq!(h[0].answer, ApprovalAnswer::Approved);
    }

    #[tokio::test]
    async fn opener_checks_run_in_the_connect_link_order() {
        let s = SledStore::temporary(ManualClock::new(UnixTime(1_000))).unwrap();
        let k = Key::generate().unwrap();
        let (u, c) = (UserId::github(1), ClientId::new("agent"));
        let a = request(
            &s,
            &k,
            UnixTime(1_000),
            For {
                user: &u,
                client: &c,
            },
            ASK,
        )
        .await
        .unwrap()
        .unwrap();
        let cd = code(&a.path);
        // A connect-link code of the same id is not an approval code.
        let connect_code = super::super::code_for(&k, &a.link_id);
        assert!(matches!(
            open(
                &s,
                &connect_code,
                Some(&session(1, 1_000)),
                UnixTime(1_001),
                900
            )
            .await
            .unwrap(),
            Opened::NotFound
        ));
        assert!(matches!(
            open(&s, cd, None, UnixTime(1_001), 900).await.unwrap(),
            Opened::SignIn { .. }
        ));
        assert!(matches!(
            open(&s, cd, Some(&session(2, 0)), UnixTime(1_001), 900)
                .await
                .unwrap(),
            Opened::WrongPerson { .. }
        ));
        assert!(matches!(
            open(&s, cd, Some(&session(1, 0)), UnixTime(1_001), 900)
                .await
                .unwrap(),
            Opened::Stale { .. }
        ));
        // Denied: closed, and nothing to use.
        let Opened::Owner(o) = open(&s, cd, Some(&session(1, 1_000)), UnixTime(1_001), 900)
            .await
            .unwrap()
        else {
            panic!("owner expected")
        };
        // A second answer racing this one (another tab) finds the link taken.
        let Opened::Owner(twin) = open(&s, cd, Some(&session(1, 1_000)), UnixTime(1_001), 900)
            .await
            .unwrap()
        else {
            panic!("owner expected")
        };
        assert!(
            answer(&s, o, ApprovalAnswer::Denied, UnixTime(1_002))
                .await
                .unwrap()
                .is_some()
        );
        assert!(
            answer(&s, twin, ApprovalAnswer::Approved, UnixTime(1_002))
                .await
                .unwrap()
                .is_none(),
            "only one answer counts"
        );
        assert!(
            use_approval(
                &s,
                For {
                    user: &u,
                    client: &c
                },
                "writes",
                "create_issue",
                "d1"
            )
            .await
            .unwrap()
            .is_none()
        );
        // Answered: asking again makes a new link.
        let b = request(
            &s,
            &k,
            UnixTime(1_000),
            For {
                user: &u,
                client: &c,
            },
            ASK,
        )
        .await
        .unwrap()
        .unwrap();
        assert!(b.created);
        // At most MAX_OPEN_PER_AGENT open links per person and agent.
        for i in 1..MAX_OPEN_PER_AGENT {
            let d = format!("other-{i}");
            let more = Ask {
                arguments_digest: &d,
                ..ASK
            };
            let who = For {
                user: &u,
                client: &c,
            };
            assert!(
                request(&s, &k, UnixTime(1_000), who, more)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
        let over = Ask {
            arguments_digest: "one-too-many",
            ..ASK
        };
        let who = For {
            user: &u,
            client: &c,
        };
        assert!(
            request(&s, &k, UnixTime(1_000), who, over)
                .await
                .unwrap()
                .is_none()
        );
    }
}
