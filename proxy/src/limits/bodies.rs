//! What request bodies may hold in memory at once. A body being received or handled holds
//! bytes against three budgets: everyone's (`max_body_bytes`), its source's (client IP: IPv4
//! address, IPv6 /64; `max_body_bytes_per_source`) and, on `/mcp` once the caller is
//! authenticated, its access token's (`mcp_max_body_bytes_per_token`). A token also has a
//! number of `/mcp` requests it may have in flight (`mcp_max_requests_per_token`).
//!
//! Connection caps alone do not bound this: one HTTP/2 connection carries 100 streams, each
//! with a body of its own. A stranger's body (every route but authenticated `/mcp`) is charged
//! by the bytes that have arrived, never by the length it announces: announcing costs the
//! sender nothing, so a budget charged by announcements can be spent by a few addresses
//! sending no bytes at all (the review of 2026-12-04). Strangers' bodies together may hold at
//! most half of everyone's budget ([`Pool::Strangers`]): the other half is there for
//! authenticated `/mcp`, whose bodies are bounded per token. The edge (`http::conn`) refuses
//! a request (503, HTTP/2 `REFUSED_STREAM`) when its budget is spent; `/mcp` (`http::mcp`)
//! does the same for the token's budget and request count (429). Everything is given back
//! when the holder is dropped. The tables keep only sources and tokens that hold something,
//! so they are bounded by the requests in flight.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

/// The budgets' sizes (`[server]` keys, validated in `http::edge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyCaps {
    /// Bytes held by every body together.
    pub total: u64,
    /// Bytes held by the bodies of one source.
    pub per_source: u64,
    /// Bytes held by the `/mcp` bodies of one access token.
    pub per_token: u64,
    /// `/mcp` requests in flight with one access token.
    pub requests_per_token: usize,
}

/// Which budget a refused request found spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spent {
    /// Everyone's bytes.
    Total,
    /// The source's bytes.
    Source,
    /// The token's bytes.
    Token,
    /// The token's requests in flight.
    TokenRequests,
    /// The half of everyone's bytes that strangers' bodies may hold.
    Strangers,
}

/// Whose bytes a source's hold counts among.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// A body nobody has authenticated yet (forms, registration, `/token`): at most half of
    /// everyone's budget, so a flood of them leaves room for authenticated `/mcp`.
    Strangers,
    /// `/mcp`, whose edge hold grows only once the caller is authenticated.
    Authenticated,
}

/// An access token as the tables know it: the SHA-256 of the bearer value, so the table never
/// holds a token.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    /// The key of the bearer token `bearer` (as presented, without the scheme).
    pub fn of(bearer: &str) -> TokenKey {
        TokenKey(crate::crypto::sha256(bearer.as_bytes()))
    }
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey([redacted])")
    }
}

#[derive(Default)]
struct State {
    total: u64,
    strangers: u64,
    sources: HashMap<IpAddr, u64>,
    tokens: HashMap<TokenKey, TokenUse>,
}

#[derive(Default, Clone, Copy)]
struct TokenUse {
    bytes: u64,
    requests: usize,
}

/// The budgets of one listener (shared by all its connections).
pub struct BodyBudgets {
    caps: BodyCaps,
    state: Mutex<State>,
}

/// What a [`Held`] is charged to.
#[derive(Debug, Clone, Copy)]
enum Account {
    /// Everyone's bytes (and the strangers' share, for [`Pool::Strangers`]), and the
    /// source's if it is known.
    Source(Option<IpAddr>, Pool),
    /// One token's bytes (the same bytes are held against the source by the edge).
    Token(TokenKey),
}

/// Bytes held against the budgets; given back when dropped.
#[derive(Debug)]
pub struct Held {
    budgets: Arc<BodyBudgets>,
    account: Account,
    bytes: u64,
}

/// One `/mcp` request in flight with a token; given back when dropped.
#[derive(Debug)]
pub struct TokenSlot {
    budgets: Arc<BodyBudgets>,
    key: TokenKey,
}

impl std::fmt::Debug for BodyBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyBudgets")
            .field("caps", &self.caps)
            .finish_non_exhaustive()
    }
}

impl BodyBudgets {
    /// Empty budgets of the given sizes.
    pub fn new(caps: BodyCaps) -> Arc<BodyBudgets> {
        Arc::new(BodyBudgets {
            caps,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere between two integer updates.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `bytes` against everyone's budget, `pool`'s and `source`'s (`None`: no source
    /// known, only the global budgets apply), or says which is spent. `source` is a bucket
    /// key ([`bucket_key`](super::bucket_key)).
    pub fn hold(
        self: &Arc<Self>,
        source: Option<IpAddr>,
        pool: Pool,
        bytes: u64,
    ) -> Result<Held, Spent> {
        let mut held = Held {
            budgets: self.clone(),
            account: Account::Source(source, pool),
            bytes: 0,
        };
        held.grow(bytes)?;
        Ok(held)
    }

    /// Whether `bytes` more would fit in everyone's budget, `pool`'s and `source`'s now,
    /// without holding them: a body announcing more than is free is refused before it is
    /// read, while its announcement itself holds nothing.
    pub fn fits(&self, source: Option<IpAddr>, pool: Pool, bytes: u64) -> Result<(), Spent> {
        let state = self.state();
        if state.total.saturating_add(bytes) > self.caps.total {
            return Err(Spent::Total);
        }
        if pool == Pool::Strangers && state.strangers.saturating_add(bytes) > self.caps.total / 2 {
            return Err(Spent::Strangers);
        }
        let used = source.and_then(|s| state.sources.get(&s).copied());
        if used.unwrap_or(0).saturating_add(bytes) > self.caps.per_source {
            return Err(Spent::Source);
        }
        Ok(())
    }

    /// Holds `bytes` against `token`'s budget.
    pub fn hold_for_token(self: &Arc<Self>, token: TokenKey, bytes: u64) -> Result<Held, Spent> {
        let mut held = Held {
            budgets: self.clone(),
            account: Account::Token(token),
            bytes: 0,
        };
        held.grow(bytes)?;
        Ok(held)
    }

    /// One more `/mcp` request in flight with `token`, unless it has its cap.
    pub fn token_request(self: &Arc<Self>, token: TokenKey) -> Result<TokenSlot, Spent> {
        let mut state = self.state();
        let used = state.tokens.entry(token).or_default();
        if used.requests >= self.caps.requests_per_token {
            if used.requests == 0 && used.bytes == 0 {
                state.tokens.remove(&token);
            }
            return Err(Spent::TokenRequests);
        }
        used.requests += 1;
        Ok(TokenSlot {
            budgets: self.clone(),
            key: token,
        })
    }

    /// Bytes held by every body together (for tests and the logs).
    pub fn held_bytes(&self) -> u64 {
        self.state().total
    }

    /// Sources and tokens with something held (for tests: the tables forget the rest).
    #[cfg(test)]
    fn tracked(&self) -> (usize, usize) {
        let s = self.state();
        (s.sources.len(), s.tokens.len())
    }
}

impl Held {
    /// Holds `more` bytes besides those already held, or says which budget is spent (and
    /// holds nothing more).
    pub fn grow(&mut self, more: u64) -> Result<(), Spent> {
        if more == 0 {
            return Ok(());
        }
        let caps = self.budgets.caps;
        let mut state = self.budgets.state();
        match self.account {
            Account::Source(source, pool) => {
                if state.total.saturating_add(more) > caps.total {
                    return Err(Spent::Total);
                }
                let strangers = pool == Pool::Strangers;
                if strangers && state.strangers.saturating_add(more) > caps.total / 2 {
                    return Err(Spent::Strangers);
                }
                if let Some(source) = source {
                    let used = state.sources.get(&source).copied().unwrap_or(0);
                    if used.saturating_add(more) > caps.per_source {
                        return Err(Spent::Source);
                    }
                    state.sources.insert(source, used + more);
                }
                state.total += more;
                if strangers {
                    state.strangers += more;
                }
            }
            Account::Token(token) => {
                let used = state.tokens.get(&token).copied().unwrap_or_default();
                if used.bytes.saturating_add(more) > caps.per_token {
                    return Err(Spent::Token);
                }
                state.tokens.insert(
                    token,
                    TokenUse {
                        bytes: used.bytes + more,
                        ..used
                    },
                );
            }
        }
        self.bytes += more;
        Ok(())
    }

    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut state = self.budgets.state();
        match self.account {
            Account::Source(source, pool) => {
                state.total = state.total.saturating_sub(self.bytes);
                if pool == Pool::Strangers {
                    state.strangers = state.strangers.saturating_sub(self.bytes);
                }
                if let Some(source) = source
                    && let Some(used) = state.sources.get_mut(&source)
                {
                    *used = used.saturating_sub(self.bytes);
                    if *used == 0 {
                        state.sources.remove(&source);
                    }
                }
            }
            Account::Token(token) => {
                if let Some(used) = state.tokens.get_mut(&token) {
                    used.bytes = used.bytes.saturating_sub(self.bytes);
                    if used.bytes == 0 && used.requests == 0 {
                        state.tokens.remove(&token);
                    }
                }
            }
        }
    }
}

impl Drop for TokenSlot {
    fn drop(&mut self) {
        let mut state = self.budgets.state();
        if let Some(used) = state.tokens.get_mut(&self.key) {
            used.requests = used.requests.saturating_sub(1);
            if used.bytes == 0 && used.requests == 0 {
                state.tokens.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: BodyCaps = BodyCaps {
        total: 100,
        per_source: 40,
        per_token: 30,
        requests_per_token: 2,
    };

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn a_source_holds_at_most_its_budget_and_gets_it_back() {
        let b = BodyBudgets::new(CAPS);
        let one = b.hold(ip("192.0.2.1"), Pool::Strangers, 25).unwrap();
        let mut two = b.hold(ip("192.0.2.1"), Pool::Strangers, 15).unwrap();
        assert_eq!(
            b.hold(ip("192.0.2.1"), Pool::Strangers, 1).unwrap_err(),
            Spent::Source
        );
        assert_eq!(two.grow(1).unwrap_err(), Spent::Source);
        assert_eq!(two.bytes(), 15, "a refused growth holds nothing more");
        // Another source is unaffected (an authenticated call, past the strangers' half).
        let other = b.hold(ip("192.0.2.2"), Pool::Authenticated, 40).unwrap();
        assert_eq!(b.held_bytes(), 80);
        drop(one);
        two.grow(25).unwrap();
        assert_eq!(b.held_bytes(), 80);
        drop((two, other));
        assert_eq!(b.held_bytes(), 0);
        assert_eq!(
            b.tracked(),
            (0, 0),
            "the table forgets sources holding nothing"
        );
    }

    #[test]
    fn the_global_budget_holds_across_sources_and_without_a_source() {
        let b = BodyBudgets::new(CAPS);
        let auth = Pool::Authenticated;
        let _a = b.hold(ip("192.0.2.1"), auth, 40).unwrap();
        let _b = b.hold(ip("192.0.2.2"), auth, 40).unwrap();
        assert_eq!(b.hold(ip("192.0.2.3"), auth, 21).unwrap_err(), Spent::Total);
        assert_eq!(b.hold(None, Pool::Strangers, 21).unwrap_err(), Spent::Total);
        let c = b.hold(None, auth, 20).unwrap();
        assert_eq!(b.hold(ip("192.0.2.3"), auth, 1).unwrap_err(), Spent::Total);
        drop(c);
        assert_eq!(b.hold(ip("192.0.2.3"), auth, 20).map(|h| h.bytes()), Ok(20));
    }

    #[test]
    fn strangers_bodies_cannot_spend_the_half_kept_for_authenticated_calls() {
        let b = BodyBudgets::new(CAPS);
        let s1 = b.hold(ip("192.0.2.1"), Pool::Strangers, 40).unwrap();
        let s2 = b.hold(ip("192.0.2.2"), Pool::Strangers, 10).unwrap();
        assert_eq!(
            b.hold(ip("192.0.2.3"), Pool::Strangers, 1)
                .map(|h| h.bytes()),
            Err(Spent::Strangers)
        );
        // An authenticated call still finds the other half.
        let mut call = b.hold(ip("192.0.2.3"), Pool::Authenticated, 0).unwrap();
        call.grow(40).unwrap();
        assert_eq!(b.held_bytes(), 90);
        drop(s2);
        assert_eq!(
            b.hold(ip("192.0.2.4"), Pool::Strangers, 10)
                .map(|h| h.bytes()),
            Ok(10)
        );
        drop((s1, call));
        assert_eq!(b.held_bytes(), 0, "everything is given back");
    }

    #[test]
    fn an_announcement_that_fits_holds_nothing_and_one_that_does_not_is_refused() {
        let b = BodyBudgets::new(CAPS);
        assert_eq!(b.fits(ip("192.0.2.1"), Pool::Strangers, 40), Ok(()));
        assert_eq!(b.held_bytes(), 0, "fitting holds nothing");
        let _h = b.hold(ip("192.0.2.1"), Pool::Strangers, 30).unwrap();
        assert_eq!(
            b.fits(ip("192.0.2.1"), Pool::Strangers, 11),
            Err(Spent::Source)
        );
        assert_eq!(
            b.fits(ip("192.0.2.2"), Pool::Strangers, 21),
            Err(Spent::Strangers)
        );
        assert_eq!(b.fits(ip("192.0.2.2"), Pool::Authenticated, 40), Ok(()));
    }

    #[test]
    fn a_token_holds_at_most_its_bytes_and_its_requests() {
        let b = BodyBudgets::new(CAPS);
        let t = TokenKey::of("mcpat_one");
        let u = TokenKey::of("mcpat_two");
        let s1 = b.token_request(t).unwrap();
        let s2 = b.token_request(t).unwrap();
        assert_eq!(b.token_request(t).unwrap_err(), Spent::TokenRequests);
        assert!(b.token_request(u).is_ok(), "another token is unaffected");
        let h = b.hold_for_token(t, 30).unwrap();
        assert_eq!(b.hold_for_token(t, 1).unwrap_err(), Spent::Token);
        assert_eq!(
            b.held_bytes(),
            0,
            "token bytes are the edge's bytes seen again"
        );
        drop(s1);
        let s3 = b.token_request(t).unwrap();
        drop((s2, s3, h));
        assert_eq!(b.tracked(), (0, 0), "the table forgets idle tokens");
        assert_eq!(format!("{t:?}"), "TokenKey([redacted])");
    }

    #[test]
    fn ipv6_addresses_of_one_slash_64_share_a_budget_as_their_bucket_key() {
        let b = BodyBudgets::new(CAPS);
        let key = |s: &str| Some(super::super::bucket_key(s.parse().unwrap()));
        let _a = b.hold(key("2001:db8::1"), Pool::Strangers, 40).unwrap();
        assert_eq!(
            b.hold(key("2001:db8::ffff:2"), Pool::Strangers, 1)
                .unwrap_err(),
            Spent::Source
        );
        assert!(b.hold(key("2001:db8:0:1::1"), Pool::Strangers, 1).is_ok());
    }
}
