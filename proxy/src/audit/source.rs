//! The client IP of the HTTP request being served, as the edge resolved it (forwarded
//! headers trusted only from configured proxies, `http::client_ip`), so an anonymous refusal
//! can be counted under its source without every flow passing the address down.

use std::future::Future;
use std::net::IpAddr;

tokio::task_local! {
    static SOURCE: IpAddr;
}

/// Runs `f` with `ip` as the current request's client IP.
pub async fn scope<F: Future>(ip: IpAddr, f: F) -> F::Output {
    SOURCE.scope(ip, f).await
}

/// The current request's client IP, if running inside a request whose address is known.
pub fn current() -> Option<IpAddr> {
    SOURCE.try_with(|ip| *ip).ok()
}
