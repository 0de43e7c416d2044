//! Scope sets: space-delimited on the wire, a sorted set inside, and "covers" means superset.

use std::collections::BTreeSet;

use super::error::{ErrorCode, OAuthError};

/// A set of scope tokens.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ScopeSet(BTreeSet<String>);

impl ScopeSet {
    /// Parses a space-delimited `scope` parameter (RFC 6749 §3.3).
    pub fn parse(s: &str) -> Result<ScopeSet, OAuthError> {
        let mut set = BTreeSet::new();
        for tok in s.split(' ') {
            if tok.is_empty() {
                continue;
            }
            // scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
            if !tok
                .bytes()
                .all(|b| b == 0x21 || (0x23..=0x5B).contains(&b) || (0x5D..=0x7E).contains(&b))
            {
                return Err(OAuthError::new(ErrorCode::InvalidScope, "malformed scope"));
            }
            set.insert(tok.to_owned());
        }
        Ok(ScopeSet(set))
    }
    /// From known-good strings.
    pub fn from_list<I: IntoIterator<Item = S>, S: Into<String>>(items: I) -> ScopeSet {
        ScopeSet(items.into_iter().map(Into::into).collect())
    }
    /// Whether every scope of `other` is in `self`.
    pub fn covers(&self, other: &ScopeSet) -> bool {
        other.0.is_subset(&self.0)
    }
    /// Whether `scope` is in the set.
    pub fn contains(&self, scope: &str) -> bool {
        self.0.contains(scope)
    }
    /// Adds `scope`.
    pub fn insert(&mut self, scope: &str) {
        self.0.insert(scope.to_owned());
    }
    /// Every scope of either set.
    pub fn union(&self, other: &ScopeSet) -> ScopeSet {
        ScopeSet(self.0.union(&other.0).cloned().collect())
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Iterates in order.
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }
    /// Space-delimited wire form.
    pub fn to_wire(&self) -> String {
        self.iter().collect::<Vec<_>>().join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_is_superset() {
        let big = ScopeSet::parse("repo read:user").unwrap();
        assert!(big.covers(&ScopeSet::parse("read:user").unwrap()));
        assert!(!ScopeSet::parse("read:user").unwrap().covers(&big));
    }

    #[test]
    fn malformed_scope_rejected() {
        assert!(ScopeSet::parse("a\"b").is_err());
        assert!(ScopeSet::parse("a\\b").is_err());
    }
}
