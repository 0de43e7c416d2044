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
    /// One line per inconsistency.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// Nothing inconsistent was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

fn field<'a>(event: &'a serde_json::Value, name: &str) -> &'a str {
    event.get(name).and_then(|v| v.as_str()).unwrap_or_default()
}

/// Checks a trail (oldest first). Pure: the caller reads the events.
///
/// - every `code_issued` follows a `consent_recorded` for the same person and client that no
///   `client_access_revoked` withdrew in between (a remembered consent was recorded earlier);
/// - every `token_issued` names a `code_issued` (by `code_id`, else by family) for the same
///   person and client;
/// - every `token_refreshed` belongs to a family a `token_issued` started.
///
/// Events older than the retention period are gone, so a family older than that reads as
/// unknown: run it over a trail that covers the refresh tokens' lifetime.
pub fn verify(events: &[AuditRecord]) -> VerifyReport {
    use std::collections::{HashMap, HashSet};

    let mut report = VerifyReport {
        events: events.len(),
        ..VerifyReport::default()
    };
    let mut consents: HashSet<(String, String)> = HashSet::new();
    // code_id → (person, client, family)
    let mut codes: HashMap<String, (String, String, String)> = HashMap::new();
    // family → (person, client) for codes issued
    let mut code_families: HashMap<String, (String, String)> = HashMap::new();
    let mut families: HashSet<String> = HashSet::new();
    for r in events {
        let e = &r.event;
        let kind = e.get("event").and_then(|v| v.as_str()).unwrap_or_default();
        let user = field(e, "user_id").to_owned();
        let client = field(e, "client_id").to_owned();
        let at = format!("{} {} ({})", r.at.0, r.id, kind);
        match kind {
            "consent_recorded" => {
                consents.insert((user, client));
            }
            "client_access_revoked" => {
                consents.remove(&(user, client));
            }
            "code_issued" => {
                report.checked_codes += 1;
                let code_id = field(e, "code_id").to_owned();
                let family = field(e, "family_id").to_owned();
                if !consents.contains(&(user.clone(), client.clone())) {
                    report.problems.push(format!(
                        "{at}: code {code_id} issued to client {client} for {user} without a consent recorded before it"
                    ));
                }
                if !family.is_empty() {
                    code_families.insert(family.clone(), (user.clone(), client.clone()));
                }
                if !code_id.is_empty() {
                    codes.insert(code_id, (user, client, family));
                }
            }
            "token_issued" => {
                report.checked_tokens += 1;
                let code_id = field(e, "code_id");
                let family = field(e, "family_id").to_owned();
                let from_code = if code_id.is_empty() {
                    code_families
                        .get(&family)
                        .map(|(u, c)| (u.clone(), c.clone(), family.clone()))
                } else {
                    codes.get(code_id).cloned()
                };
                match from_code {
                    None => report.problems.push(format!(
                        "{at}: tokens of family {family} issued to client {client} for {user} from code {code_id:?}, which was never issued"
                    )),
                    Some((u, c, f)) if u != user || c != client || (!f.is_empty() && f != family) => {
                        report.problems.push(format!(
                            "{at}: tokens of family {family} issued to client {client} for {user} from a code issued to client {c} for {u} (family {f})"
                        ));
                    }
                    Some(_) => {}
                }
                families.insert(family);
            }
            "token_refreshed" => {
                report.checked_tokens += 1;
                let family = field(e, "family_id");
                if !families.contains(family) {
                    report.problems.push(format!(
                        "{at}: refresh of family {family} for client {client}, which no token issuance started"
                    ));
                }
            }
            _ => {}
        }
    }
    report
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
}
