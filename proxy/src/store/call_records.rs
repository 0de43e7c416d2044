//! The records one `/mcp` request reads once its access token is known: the token's refresh
//! family (revocation), the person's standing, their GitHub grant and this agent's allowance.
//! None depends on another, only on the token's record, so they are read together: one
//! statement on PostgreSQL (`Store::get_many`) instead of four round trips, or none when the
//! replica's cache holds them all (`store::cache`, exact: a revocation written by any replica
//! is seen by the next request).

use super::records::{AllowanceRecord, FamilyRecord, GrantRecord, StandingCheck};
use super::{Keyspace, Store, StoreError, decode};
use crate::ids::{ClientId, FamilyId, UserId};

/// What [`read`] found.
#[derive(Debug, Default)]
pub struct CallRecords {
    /// The token's refresh family.
    pub family: Option<FamilyRecord>,
    /// The person's standing.
    pub standing: Option<StandingCheck>,
    /// The person's GitHub grant.
    pub grant: Option<GrantRecord>,
    /// The agent's allowance to use it.
    pub allowance: Option<AllowanceRecord>,
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
    let mut next = || found.next().flatten().map(|v| v.value);
    let (family, standing, grant, allowance) = (next(), next(), next(), next());
    Ok(CallRecords {
        family: family
            .map(|b| decode(Keyspace::RefreshFamilies, &b))
            .transpose()?,
        standing: standing
            .map(|b| decode(Keyspace::Standing, &b))
            .transpose()?,
        grant: grant.map(|b| decode(Keyspace::Grants, &b)).transpose()?,
        allowance: allowance
            .map(|b| decode(Keyspace::Allowances, &b))
            .transpose()?,
    })
}
