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

/// Checks a trail (oldest first). Pure: the caller reads the events.
pub fn verify(events: &[AuditRecord]) -> VerifyReport {
    VerifyReport {
        events: events.len(),
        ..VerifyReport::default()
    }
}
