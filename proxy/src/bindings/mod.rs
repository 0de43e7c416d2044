//! One module per security binding (docs/DESIGN.md §3). Each passed check returns a value only its
//! module can construct, and the next step takes it by value:
//!
//! | binding | module | witness |
//! |---|---|---|
//! | redirect URI | [`redirect`] | `RedirectMatched` |
//! | issuer (`iss`) | [`issuer`] | every client redirect is built from a `RedirectMatched` |
//! | consent cookie | [`consent_cookie`] | none: checked inside `browser_state::take` |
//! | browser-bound state | [`browser_state`] | `BrowserBound<UpstreamStateRecord>` |
//! | per-client consent | [`consent_registry`] | `ConsentGranted` (carries the person's `Presence`) |
//! | audience (RFC 8707) | [`audience`] | `Audience`, `Audienced<T>` |
//! | no passthrough | [`upstream_auth`] | `BackendCredential` |
//! | session binding | [`session_binding`] | `SessionBound`, `SessionChecked` |
//! | connect-link opener | [`connect_link`] | `OpenedBy` |
//! | admission (`[access]`) | [`admission`] | `Admitted` (storing a session or grant needs it) |
//! | consent = real access | [`consent_scope`] | `WithinConsent` (storing a GitHub grant needs it) |
//! | client assertion (`private_key_jwt`) | [`client_assertion`] | `Verified`, then `Asserted` (jti used once) |
//!
//! `flows::codes::issue_code` needs all of them before a code exists. Each witness has private
//! fields, no `Clone`, and a `compile_fail` doc-test on its type.
//!
//! [`backend`] is no binding: it holds the `[backend]` settings that `upstream_auth`, the
//! token-exchange flow and the gateway read.

pub mod admission;
pub mod approvals;
pub mod audience;
pub mod backend;
pub mod browser_state;
pub mod client_assertion;
pub mod connect_link;
pub mod consent_cookie;
pub mod consent_registry;
pub mod consent_scope;
pub mod issuer;
pub mod redirect;
pub mod session_binding;
pub mod upstream_auth;
