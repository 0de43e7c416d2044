//! Client assertions already presented (`private_key_jwt`, RFC 7523 §3 item 7): one record
//! per client and `jti`, by the hash of both, written with an atomic put-if-absent so one
//! assertion authenticates once across every replica sharing the store. The key layout stays
//! here: the client id is hashed with its length in front, so no two (client, jti) pairs
//! share a key whatever characters either holds.

use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::crypto;

/// What is kept: only when it was used (the key says what).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct UsedAssertion {
    used_at: UnixTime,
}

fn key(client_id: &str, jti: &str) -> String {
    crypto::hash_secret(&format!("{}:{client_id}{jti}", client_id.len()))
}

/// Records the first use of `jti` by `client_id`, kept until `keep_until`; `Ok(true)` if this
/// call was the first (the assertion may authenticate), `Ok(false)` if it was used before.
/// Durable when it returns, like every store write.
pub async fn first_use(
    store: &dyn Store,
    client_id: &str,
    jti: &str,
    now: UnixTime,
    keep_until: UnixTime,
) -> Result<bool, StoreError> {
    store
        .insert_json(
            Keyspace::UsedAssertions,
            &key(client_id, jti),
            &UsedAssertion { used_at: now },
            Some(keep_until),
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_different_pairs_differ() {
        assert_ne!(key("ab", "c"), key("a", "bc"));
        assert_ne!(key("a", "b"), key("b", "a"));
        assert_eq!(key("a", "b"), key("a", "b"));
    }
}
