//! Property tests for the proxy's security-critical parsers and bindings: request parsing,
//! redirect URIs, registration metadata, the consent cookie, cookie reading, CSRF tokens,
//! JSON-RPC inspection, `requestState`, PKCE, scopes, the RFC 8707 resource check and the
//! tool-call policy. One test binary, a module per parser; the generators more than one module
//! uses are in `generators`.
//!
//! Each property is named after what it guarantees. Cases where a property found a real bug
//! are kept at the end of their module as plain tests, with a comment saying what was wrong;
//! the generators of the corresponding properties steer around those inputs, with a comment.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod generators;

mod consent_cookie;
mod cookies;
mod csrf;
mod envelope;
mod jsonrpc;
mod pkce;
mod redirect;
mod registration;
mod request;
mod request_state;
mod resource;
mod scopes;
mod tool_policy;
