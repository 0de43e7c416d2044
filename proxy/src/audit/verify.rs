//! `audit verify`: joins the stored trail and reports what does not add up (a code without a
//! consent, a token without a code or refresh).
//!
//! The join itself belongs to the audit work (issue 6); this fixes the interface the admin API
//! and CLI call.

use serde::Serialize;

use super::AuditRecord;

/// What `audit verify` found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    /// Events read.
    pub events: usize,
    /// Codes checked against consents.
    pub checked_codes: usize,
    /// Tokens checked against codes and refreshes.
    pub checked_tokens: usize,
    /// One line per inconsistency (the first [`MAX_PROBLEMS`]).
    pub problems: Vec<String>,
    /// Inconsistencies beyond those listed.
    #[serde(skip_serializing_if = "is_zero")]
    pub problems_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl VerifyReport {
    /// Nothing inconsistent was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.problems_omitted == 0
    }
}

fn field<'a>(event: &'a serde_json::Value, name: &str) -> &'a str {
    event.get(name).and_then(|v| v.as_str()).unwrap_or_default()
}

/// Most problems listed one by one; beyond that they are only counted (`problems_omitted`),
/// so a badly broken trail cannot make the report itself unbounded.
pub const MAX_PROBLEMS: usize = 1000;

/// A code names its tokens within this many seconds of being issued or not at all (codes
/// live minutes); older codes are forgotten, so what is held stays bounded by the codes of
/// the last hour, not the whole trail.
pub const CODE_HORIZON_SECS: u64 = 3600;

/// Checks a trail fed one event at a time, oldest first ([`Verifier::feed`]), so the trail is
/// never held whole: `audit verify` reads it window by window. What it keeps is the consents
/// and refresh families seen (bounded by live state, not by the trail's length), the codes of
/// the last [`CODE_HORIZON_SECS`] and at most [`MAX_PROBLEMS`] problem lines.
///
/// - every `code_issued` follows a `consent_recorded` for the same person and client that no
///   `client_access_revoked` withdrew in between (a remembered consent was recorded earlier);
/// - every `token_issued` names a `code_issued` (by `code_id`, else by family) for the same
///   person and client;
/// - every `token_refreshed` belongs to a family a `token_issued` started.
///
/// Events older than the retention period are gone, so a family older than that reads as
/// unknown: run it over a trail that covers the refresh tokens' lifetime.
#[derive(Debug, Default)]
pub struct Verifier {
    report: VerifyReport,
    consents: std::collections::HashSet<(String, String)>,
    /// code_id → (person, client, family, issued at)
    codes: std::collections::HashMap<String, (String, String, String, u64)>,
    /// family → (person, client, issued at) for codes issued
    code_families: std::collections::HashMap<String, (String, String, u64)>,
    families: std::collections::HashSet<String>,
    /// When codes were last pruned.
    pruned_at: u64,
}

impl Verifier {
    /// A verifier that has seen nothing.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    fn problem(&mut self, line: String) {
        if self.report.problems.len() < MAX_PROBLEMS {
            self.report.problems.push(line);
        } else {
            self.report.problems_omitted += 1;
        }
    }

    fn forget_old_codes(&mut self, now: u64) {
        if now < self.pruned_at.saturating_add(CODE_HORIZON_SECS) {
            return;
        }
        self.pruned_at = now;
        let keep = |at: u64| at.saturating_add(CODE_HORIZON_SECS) >= now;
        self.codes.retain(|_, c| keep(c.3));
        self.code_families.retain(|_, c| keep(c.2));
    }

    /// Takes the next event (oldest first).
    pub fn feed(&mut self, r: &AuditRecord) {
        self.report.events += 1;
        self.forget_old_codes(r.at.0);
        let e = &r.event;
        let kind = e.get("event").and_then(|v| v.as_str()).unwrap_or_default();
        let user = field(e, "user_id").to_owned();
        let client = field(e, "client_id").to_owned();
        let at = format!("{} {} ({})", r.at.0, r.id, kind);
        match kind {
            "consent_recorded" => {
                self.consents.insert((user, client));
            }
            "client_access_revoked" => {
                self.consents.remove(&(user, client));
            }
            "code_issued" => {
                self.report.checked_codes += 1;
                let code_id = field(e, "code_id").to_owned();
                let family = field(e, "family_id").to_owned();
                if !self.consents.contains(&(user.clone(), client.clone())) {
                    self.problem(format!(
                        "{at}: code {code_id} issued to client {client} for {user} without a consent recorded before it"
                    ));
                }
                if !family.is_empty() {
                    self.code_families
                        .insert(family.clone(), (user.clone(), client.clone(), r.at.0));
                }
                if !code_id.is_empty() {
                    self.codes.insert(code_id, (user, client, family, r.at.0));
                }
            }
            "token_issued" => {
                self.report.checked_tokens += 1;
                let code_id = field(e, "code_id");
                let family = field(e, "family_id").to_owned();
                let from_code = if code_id.is_empty() {
                    self.code_families
                        .get(&family)
                        .map(|(u, c, _)| (u.clone(), c.clone(), family.clone()))
                } else {
                    self.codes
                        .get(code_id)
                        .map(|(u, c, f, _)| (u.clone(), c.clone(), f.clone()))
                };
                match from_code {
                    None => self.problem(format!(
                        "{at}: tokens of family {family} issued to client {client} for {user} from code {code_id:?}, which was never issued (within the hour before)"
                    )),
                    Some((u, c, f)) if u != user || c != client || (!f.is_empty() && f != family) => {
                        self.problem(format!(
                            "{at}: tokens of family {family} issued to client {client} for {user} from a code issued to client {c} for {u} (family {f})"
                        ));
                    }
                    Some(_) => {}
                }
                self.families.insert(family);
            }
            "token_refreshed" => {
                self.report.checked_tokens += 1;
                let family = field(e, "family_id");
                if !self.families.contains(family) {
                    let line = format!(
                        "{at}: refresh of family {family} for client {client}, which no token issuance started"
                    );
                    self.problem(line);
                }
            }
            _ => {}
        }
    }

    /// The report on everything fed.
    pub fn finish(self) -> VerifyReport {
        self.report
    }
}

/// Checks a whole trail held in memory (oldest first): [`Verifier`] over `events`.
pub fn verify(events: &[AuditRecord]) -> VerifyReport {
    let mut v = Verifier::new();
    for r in events {
        v.feed(r);
    }
    v.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::UnixTime;

    fn rec(n: u64, event: serde_json::Value) -> AuditRecord {
        AuditRecord {
            id: format!("e{n}"),
            at: UnixTime(n),
            request_id: None,
            kind: event["event"].as_str().unwrap_or_default().to_owned(),
            event,
        }
    }

    fn normal() -> Vec<AuditRecord> {
        use serde_json::json;
        vec![
            rec(
                1,
                json!({"event": "consent_recorded", "user_id": "u", "client_id": "c"}),
            ),
            rec(
                2,
                json!({"event": "code_issued", "user_id": "u", "client_id": "c", "code_id": "k1", "family_id": "f1"}),
            ),
            rec(
                3,
                json!({"event": "token_issued", "user_id": "u", "client_id": "c", "code_id": "k1", "family_id": "f1"}),
            ),
            rec(
                4,
                json!({"event": "token_refreshed", "user_id": "u", "client_id": "c", "family_id": "f1"}),
            ),
            // Remembered consent: a second code later, no new consent event.
            rec(
                5,
                json!({"event": "code_issued", "user_id": "u", "client_id": "c", "code_id": "k2", "family_id": "f2", "consent_remembered": true}),
            ),
            rec(
                6,
                json!({"event": "token_issued", "user_id": "u", "client_id": "c", "code_id": "k2", "family_id": "f2"}),
            ),
        ]
    }

    #[test]
    fn a_normal_trail_is_clean() {
        let r = verify(&normal());
        assert!(r.is_clean(), "{:?}", r.problems);
        assert_eq!((r.events, r.checked_codes, r.checked_tokens), (6, 2, 3));
    }

    #[test]
    fn each_broken_link_is_reported() {
        use serde_json::json;
        let mut t = normal();
        t.push(rec(7, json!({"event": "code_issued", "user_id": "v", "client_id": "c", "code_id": "k3", "family_id": "f3"})));
        t.push(rec(8, json!({"event": "token_issued", "user_id": "u", "client_id": "c", "code_id": "nope", "family_id": "f9"})));
        t.push(rec(9, json!({"event": "token_refreshed", "user_id": "u", "client_id": "c", "family_id": "f8"})));
        t.push(rec(10, json!({"event": "token_issued", "user_id": "u", "client_id": "evil", "code_id": "k2", "family_id": "f2"})));
        t.push(rec(
            11,
            json!({"event": "client_access_revoked", "user_id": "u", "client_id": "c"}),
        ));
        t.push(rec(12, json!({"event": "code_issued", "user_id": "u", "client_id": "c", "code_id": "k4", "family_id": "f4"})));
        let r = verify(&t);
        assert_eq!(r.problems.len(), 5, "{:#?}", r.problems);
        assert!(r.problems[0].contains("code k3") && r.problems[0].contains("without a consent"));
        assert!(r.problems[1].contains("\"nope\", which was never issued"));
        assert!(r.problems[2].contains("family f8"));
        assert!(r.problems[3].contains("client evil"));
        assert!(r.problems[4].contains("code k4"));
    }

    #[test]
    fn codes_older_than_the_horizon_are_forgotten_and_problems_are_capped() {
        use serde_json::json;
        let mut v = Verifier::new();
        v.feed(&rec(
            1,
            json!({"event": "consent_recorded", "user_id": "u", "client_id": "c"}),
        ));
        for n in 0..(MAX_PROBLEMS as u64 + 5) {
            v.feed(&rec(
                2 + n,
                json!({"event": "code_issued", "user_id": "u", "client_id": "c", "code_id": format!("k{n}"), "family_id": format!("f{n}")}),
            ));
        }
        assert!(v.codes.len() > MAX_PROBLEMS);
        // Two hours later only the codes of the last hour are held.
        let later = 2 * CODE_HORIZON_SECS;
        v.feed(&rec(later, json!({"event": "token_issued", "user_id": "u", "client_id": "c", "code_id": "k0", "family_id": "f0"})));
        assert!(v.codes.is_empty() && v.code_families.is_empty());
        for n in 0..(MAX_PROBLEMS as u64 + 5) {
            v.feed(&rec(later + n, json!({"event": "token_refreshed", "user_id": "u", "client_id": "c", "family_id": format!("nope{n}")})));
        }
        let r = v.finish();
        assert_eq!(r.problems.len(), MAX_PROBLEMS);
        assert_eq!(r.problems_omitted, 6);
        assert!(r.problems[0].contains("\"k0\", which was never issued"));
        assert!(!r.is_clean());
    }
}
