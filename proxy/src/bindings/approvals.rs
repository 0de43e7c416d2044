//! Which earlier approvals may quiet the consent page's warnings and the fresh-client alert.
//! An attacker registers a client, has throw-away accounts approve it, and waits: none of that
//! may make the page a victim sees look familiar. So only approvals by **admitted** people
//! (`[access]` closed: everyone who could approve was checked at sign-in) other than the
//! person approving now count; with admission open, nobody's approval counts and only an
//! operator's `[registration] trusted_redirect_hosts` makes a destination known.
//!
//! * A redirect host is known when it is trusted by the operator, or when at least
//!   [`KNOWN_HOST_APPROVERS`] admitted people other than the one approving now approved a
//!   client sending access there.
//! * A client is "new" while it is younger than the new-client window by wall time, or (with
//!   admission closed) until the window has passed since another admitted person first
//!   approved it.

use crate::clock::UnixTime;
use crate::store::records::{ClientApprovalsRecord, SeenHostRecord};

/// Distinct counted approvers after which a redirect host is no longer "new".
pub const KNOWN_HOST_APPROVERS: usize = 2;
/// Approvers remembered per host and per client (a bound on the stored lists, so the store
/// defines it).
pub use crate::store::approvals::MAX_REMEMBERED_APPROVERS;

/// What decides whether approvals count.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalRules<'a> {
    /// `[access]` admits everyone: approvals prove nothing.
    pub admission_open: bool,
    /// `[registration] trusted_redirect_hosts`, lower-case.
    pub trusted_hosts: &'a [String],
}

impl ApprovalRules<'_> {
    /// Whether approvals are recorded at all (only those that can ever count).
    pub fn records_approvals(&self) -> bool {
        !self.admission_open
    }
}

/// Whether `host` counts as a known destination for someone (`excluding`: the hash of the
/// person approving now, whose own approvals never count for them).
pub fn host_known(
    rules: ApprovalRules<'_>,
    host: &str,
    seen: Option<&SeenHostRecord>,
    excluding: Option<&str>,
) -> bool {
    if rules
        .trusted_hosts
        .iter()
        .any(|t| t.eq_ignore_ascii_case(host))
    {
        return true;
    }
    if rules.admission_open {
        return false;
    }
    seen.is_some_and(|rec| {
        rec.admitted_approvers
            .iter()
            .filter(|a| Some(a.as_str()) != excluding)
            .count()
            >= KNOWN_HOST_APPROVERS
    })
}

/// How long the client has counted as established, for the "registered moments ago" warning
/// and the fresh-client alert: its wall-clock age, but with admission closed never more than
/// the time since another admitted person first approved it (0 if none has).
pub fn established_secs(
    rules: ApprovalRules<'_>,
    wall_age_secs: u64,
    approvals: Option<&ClientApprovalsRecord>,
    excluding: Option<&str>,
    now: UnixTime,
) -> u64 {
    if rules.admission_open {
        return wall_age_secs;
    }
    let first_by_another = approvals.and_then(|r| {
        r.approvals
            .iter()
            .filter(|a| Some(a.approver.as_str()) != excluding)
            .map(|a| a.at)
            .min()
    });
    first_by_another.map_or(0, |at| wall_age_secs.min(now.since(at)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::ClientApproval;

    const CLOSED: ApprovalRules<'static> = ApprovalRules {
        admission_open: false,
        trusted_hosts: &[],
    };
    const OPEN: ApprovalRules<'static> = ApprovalRules {
        admission_open: true,
        trusted_hosts: &[],
    };

    fn seen(who: &[&str]) -> SeenHostRecord {
        SeenHostRecord {
            admitted_approvers: who.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    fn approvals(list: &[(&str, u64)]) -> ClientApprovalsRecord {
        ClientApprovalsRecord {
            approvals: list
                .iter()
                .map(|(w, t)| ClientApproval {
                    approver: (*w).to_owned(),
                    at: UnixTime(*t),
                })
                .collect(),
        }
    }

    #[test]
    fn sybil_approvals_never_count_while_admission_is_open() {
        let many = seen(&["a", "b", "c", "d"]);
        assert!(!host_known(OPEN, "evil.example", Some(&many), None));
        assert_eq!(
            established_secs(
                OPEN,
                5_000,
                Some(&approvals(&[("a", 0)])),
                None,
                UnixTime(5_000)
            ),
            5_000,
            "open admission: wall time only"
        );
    }

    #[test]
    fn two_admitted_approvers_other_than_me_make_a_host_known() {
        let two = seen(&["me", "b"]);
        assert!(host_known(CLOSED, "app.example", Some(&two), None));
        assert!(
            !host_known(CLOSED, "app.example", Some(&two), Some("me")),
            "my own approval does not count for me"
        );
        assert!(host_known(
            CLOSED,
            "app.example",
            Some(&seen(&["me", "b", "c"])),
            Some("me")
        ));
        assert!(!host_known(CLOSED, "app.example", None, None));
    }

    #[test]
    fn trusted_redirect_host_is_known_without_approvals() {
        let trusted = ["app.example".to_owned()];
        for admission_open in [true, false] {
            let rules = ApprovalRules {
                admission_open,
                trusted_hosts: &trusted,
            };
            assert!(host_known(rules, "App.Example", None, None));
            assert!(!host_known(rules, "evil.example", None, None) || !admission_open);
        }
    }

    #[test]
    fn a_client_nobody_admitted_approved_stays_new_however_old() {
        assert_eq!(
            established_secs(CLOSED, 86_400, None, None, UnixTime(86_400)),
            0
        );
        // Only my own approval: still new for me.
        let mine = approvals(&[("me", 10)]);
        assert_eq!(
            established_secs(CLOSED, 86_400, Some(&mine), Some("me"), UnixTime(86_400)),
            0
        );
        // Another admitted person approved it 100 s ago: 100 s old, whatever its registration.
        let theirs = approvals(&[("me", 10), ("b", 86_300)]);
        assert_eq!(
            established_secs(CLOSED, 86_400, Some(&theirs), Some("me"), UnixTime(86_400)),
            100
        );
        // A registration younger than the first approval is as young as it is.
        assert_eq!(
            established_secs(CLOSED, 50, Some(&theirs), Some("me"), UnixTime(86_400)),
            50
        );
    }
}
