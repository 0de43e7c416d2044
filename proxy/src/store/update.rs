//! Read-modify-write on one record, the one way it is done: read the record, let the caller
//! decide, write only if the record is still exactly what was read, and otherwise read again
//! (a bounded number of times). [`Held`] is the same guard for a single attempt, where the
//! step between read and write must not run twice (a GitHub token refresh that rotated the
//! refresh token, a confirmation page already decided on).

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Keyspace, Store, StoreError, Versioned, decode, encode};
use crate::clock::UnixTime;

/// A record as read: its value and when it expires.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    /// The decoded record.
    pub value: T,
    /// Its expiry (`None`: kept until removed).
    pub expires_at: Option<UnixTime>,
}

/// What an [`update`] step decided about the record it was shown. Every variant carries what
/// `update` answers once that decision stands.
#[derive(Debug)]
pub enum Step<T, R> {
    /// Leave the record as it is.
    Keep(R),
    /// Write this record, keeping the expiry of the one read (none for a new record).
    Put(T, R),
    /// Write this record with this expiry (`None`: kept until removed).
    PutUntil(T, Option<UnixTime>, R),
    /// Keep the stored bytes, change only the expiry. Nothing to do if there is no record.
    SetExpiry(Option<UnixTime>, R),
    /// Delete the record. Nothing to do if there is none.
    Delete(R),
}

/// Runs `step` on the record at `key` (`None`: there is none) and applies its decision with a
/// compare-and-swap against exactly what was read (an insert-if-absent for a new record). A
/// lost race reads the record again and runs `step` again, at most `attempts` times in all;
/// `Ok(None)` means every attempt lost, and the caller decides what contention means. An
/// error from `step` ends the update with nothing written.
///
/// `step` returns a future, so it may await (the refresh grant asks GitHub about the person
/// between its read and its write); whatever it does runs again on a retry, so it must only
/// read, or be harmless to repeat. It is a closure returning an `async move` block over
/// references it copies in, not an `async` closure: the futures of `AsyncFnMut` closures
/// held across an await do not prove `Send` for axum's handlers (rustc cannot show the
/// closure's future is `Send` for every lifetime of the borrow of the closure).
pub async fn update<T, R, E, F, Fut>(
    store: &dyn Store,
    ks: Keyspace,
    key: &str,
    attempts: usize,
    mut step: F,
) -> Result<Option<R>, E>
where
    T: Serialize + DeserializeOwned,
    E: From<StoreError>,
    F: FnMut(Option<Entry<T>>) -> Fut,
    Fut: Future<Output = Result<Step<T, R>, E>>,
{
    for _ in 0..attempts {
        let current = store.get(ks, key).await?;
        let entry = match &current {
            Some(v) => Some(Entry {
                value: decode(ks, &v.value)?,
                expires_at: v.expires_at,
            }),
            None => None,
        };
        let kept_expiry = current.as_ref().and_then(|v| v.expires_at);
        let (next, out) = match step(entry).await? {
            Step::Keep(out) => return Ok(Some(out)),
            Step::Put(value, out) => (
                Some(Versioned {
                    value: encode(&value)?,
                    expires_at: kept_expiry,
                }),
                out,
            ),
            Step::PutUntil(value, expires_at, out) => (
                Some(Versioned {
                    value: encode(&value)?,
                    expires_at,
                }),
                out,
            ),
            Step::SetExpiry(expires_at, out) => match &current {
                Some(v) => (
                    Some(Versioned {
                        value: v.value.clone(),
                        expires_at,
                    }),
                    out,
                ),
                None => return Ok(Some(out)),
            },
            Step::Delete(out) => {
                if current.is_none() {
                    return Ok(Some(out));
                }
                (None, out)
            }
        };
        let written = match (&current, next) {
            (Some(old), next) => store.compare_and_swap(ks, key, old, next).await?,
            (None, Some(new)) => store.insert_new(ks, key, new.value, new.expires_at).await?,
            (None, None) => true,
        };
        if written {
            return Ok(Some(out));
        }
    }
    Ok(None)
}

/// A record as read, holding the exact stored version: one later write ([`Held::swap`],
/// [`Held::remove`], [`Held::set_expiry`]) happens only if nothing changed it in between, and
/// is never retried. Made only by the store's repositories.
#[derive(Debug)]
pub struct Held<T> {
    ks: Keyspace,
    key: String,
    raw: Versioned,
    value: T,
}

impl<T> Held<T> {
    /// The record.
    pub fn value(&self) -> &T {
        &self.value
    }
    /// The record, to change before a [`swap`](Self::swap) with it: the hold still compares
    /// against what was read.
    pub fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }
    /// The record, giving up the hold.
    pub fn into_value(self) -> T {
        self.value
    }
    /// Its expiry (`None`: kept until removed).
    pub fn expires_at(&self) -> Option<UnixTime> {
        self.raw.expires_at
    }

    /// Removes the record if it is still exactly as read; true if removed.
    pub async fn remove(&self, store: &dyn Store) -> Result<bool, StoreError> {
        store
            .compare_and_swap(self.ks, &self.key, &self.raw, None)
            .await
    }

    /// Keeps the stored bytes and changes only the expiry, if the record is still exactly as
    /// read; true if changed.
    pub async fn set_expiry(
        &self,
        store: &dyn Store,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        let next = Versioned {
            value: self.raw.value.clone(),
            expires_at,
        };
        store
            .compare_and_swap(self.ks, &self.key, &self.raw, Some(next))
            .await
    }
}

impl<T: Serialize> Held<T> {
    /// Replaces the record with `next`, expiring at `expires_at`, if it is still exactly as
    /// read; true if swapped.
    pub async fn swap(
        &self,
        store: &dyn Store,
        next: &T,
        expires_at: Option<UnixTime>,
    ) -> Result<bool, StoreError> {
        let next = Versioned {
            value: encode(next)?,
            expires_at,
        };
        store
            .compare_and_swap(self.ks, &self.key, &self.raw, Some(next))
            .await
    }
}

impl<T: DeserializeOwned> Held<T> {
    /// Holds a stored version (from a read or a scan).
    pub(super) fn decode(ks: Keyspace, key: String, raw: Versioned) -> Result<Self, StoreError> {
        let value = decode(ks, &raw.value)?;
        Ok(Held {
            ks,
            key,
            raw,
            value,
        })
    }
}

impl<T> Held<T> {
    /// Holds what this call just wrote.
    pub(super) fn written(ks: Keyspace, key: String, raw: Versioned, value: T) -> Self {
        Held {
            ks,
            key,
            raw,
            value,
        }
    }
}

/// Reads the record at `key` and holds it.
pub(super) async fn hold<T: DeserializeOwned>(
    store: &dyn Store,
    ks: Keyspace,
    key: &str,
) -> Result<Option<Held<T>>, StoreError> {
    match store.get(ks, key).await? {
        Some(raw) => Ok(Some(Held::decode(ks, key.to_owned(), raw)?)),
        None => Ok(None),
    }
}
