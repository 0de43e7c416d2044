//! Approvals that may count for the consent page's warnings (see `bindings::approvals`): per
//! redirect host, the hashed ids of admitted people who approved a client sending access
//! there; per client, who first approved it and when. Callers name hosts and clients; the key
//! layout stays here. Bounded: at most `MAX_REMEMBERED_APPROVERS` each.

use super::records::{ClientApproval, ClientApprovalsRecord, SeenHostRecord};
use super::{Keyspace, Store, StoreError, StoreExt};
use crate::clock::UnixTime;
use crate::ids::ClientId;

/// Approvers remembered per host and per client (`bindings::approvals` re-exports it).
pub const MAX_REMEMBERED_APPROVERS: usize = 8;

/// The approvers recorded for a redirect host.
pub async fn seen_host(
    store: &dyn Store,
    host: &str,
) -> Result<Option<SeenHostRecord>, StoreError> {
    store.get_json(Keyspace::SeenRedirectHosts, host).await
}

/// The approvals recorded for a client.
pub async fn of_client(
    store: &dyn Store,
    client: &ClientId,
) -> Result<Option<ClientApprovalsRecord>, StoreError> {
    store
        .get_json(Keyspace::ClientApprovals, client.as_str())
        .await
}

/// Records that `approver` (a hashed user id) approved `client`, sending access to `host`.
/// Two approvals racing may drop one name; the host or client then stays "new" a little
/// longer, which errs on the side of warning.
pub async fn note(
    store: &dyn Store,
    host: &str,
    client: &ClientId,
    approver: &str,
    now: UnixTime,
) -> Result<(), StoreError> {
    let mut rec = seen_host(store, host).await?.unwrap_or_default();
    if !rec.admitted_approvers.iter().any(|a| a == approver)
        && rec.admitted_approvers.len() < MAX_REMEMBERED_APPROVERS
    {
        rec.admitted_approvers.push(approver.to_owned());
        store
            .put_json(Keyspace::SeenRedirectHosts, host, &rec, None)
            .await?;
    }
    let mut rec = of_client(store, client).await?.unwrap_or_default();
    if !rec.approvals.iter().any(|a| a.approver == approver)
        && rec.approvals.len() < MAX_REMEMBERED_APPROVERS
    {
        rec.approvals.push(ClientApproval {
            approver: approver.to_owned(),
            at: now,
        });
        store
            .put_json(Keyspace::ClientApprovals, client.as_str(), &rec, None)
            .await?;
    }
    Ok(())
}

/// Forgets a client's approvals (the client was deleted).
pub async fn forget_client(store: &dyn Store, client: &ClientId) -> Result<(), StoreError> {
    store
        .remove(Keyspace::ClientApprovals, client.as_str())
        .await
}
