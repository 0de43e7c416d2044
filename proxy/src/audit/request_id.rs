//! The id of the HTTP request being served, so every audit event and log line of one request
//! can be joined. The HTTP layer generates it (never taken from the client: an attacker could
//! otherwise make unrelated events look related) and runs the handler inside [`scope`].

use std::future::Future;

use crate::crypto;

tokio::task_local! {
    static REQUEST_ID: String;
}

/// A new request id (16 random bytes, base64url).
pub fn generate() -> Option<String> {
    crypto::random_bytes::<16>()
        .ok()
        .map(|b| crypto::b64url(&b))
}

/// Runs `f` with `id` as the current request id.
pub async fn scope<F: Future>(id: String, f: F) -> F::Output {
    REQUEST_ID.scope(id, f).await
}

/// The current request id, if running inside a request.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}
