//! The records one `/mcp` request reads once its access token is known: the token's refresh
//! family (revocation), the person's standing, their GitHub grant and this agent's allowance.
//! None depends on another, only on the token's record, so they are read together: one
//! statement on PostgreSQL (`Store::get_many`) instead of four round trips, or none when the
//! replica's cache holds them all (`store::cache`, exact: a revocation written by any replica
//! is seen by the next request). The records are shared with the cache's entries, decoded
//! once per entry rather than on every request.

use std::sync::Arc;

use super::records::{AllowanceRecord, FamilyRecord, GrantRecord, StandingCheck};
use super::{Keyspace, Store, StoreError};
use crate::ids::{ClientId, FamilyId, UserId};

/// What [`read`] found.
#[derive(Debug, Default)]
pub struct CallRecords {
    /// The token's refresh family.
    pub family: Option<Arc<FamilyRecord>>,
    /// The person's standing.
    pub standing: Option<Arc<StandingCheck>>,
    /// The person's GitHub grant.
    pub grant: Option<Arc<GrantRecord>>,
    /// The agent's allowance to use it.
    pub allowance: Option<Arc<AllowanceRecord>>,
}

/// Reads the four records of a request of `user`'s agent `client` holding a token of
/// `family`.
pub async fn read(
    store: &dyn Store,
    family: &FamilyId,
    user: &UserId,
    client: &ClientId,
) -> Result<CallRecords, StoreError> {
    let allowance = super::allowances::key_of(user, client);
    let mut found = store
        .get_many_cached(&[
            (Keyspace::RefreshFamilies, family.as_str()),
            (Keyspace::Standing, user.as_str()),
            super::grants::at(user),
            (Keyspace::Allowances, &allowance),
        ])
        .await?
        .into_iter();
    // In the order asked for.
    let mut next = || found.next().flatten();
    let (family, standing, grant, allowance) = (next(), next(), next(), next());
    Ok(CallRecords {
        family: family
            .map(|r| r.decoded(Keyspace::RefreshFamilies))
            .transpose()?,
        standing: standing
            .map(|r| r.decoded(Keyspace::Standing))
            .transpose()?,
        grant: grant.map(|r| r.decoded(Keyspace::Grants)).transpose()?,
        allowance: allowance
            .map(|r| r.decoded(Keyspace::Allowances))
            .transpose()?,
    })
}
