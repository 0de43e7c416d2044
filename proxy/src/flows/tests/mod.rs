//! In-process tests of the flows' decisions: a real store, a manual clock and the fake GitHub,
//! driven through the functions the HTTP handlers call ([`fixture`]), with the store's state
//! checked after each step. They sit next to the end-to-end suite (`tests/`), which proves the
//! same rules over real HTTP against a running proxy; these pin down the decisions themselves,
//! including the ones that need exact clock positions or many concurrent calls.
//!
//! The fake GitHub is the `mcp-examples` crate, an optional dependency behind the default
//! `demo` feature; a build without it (`--no-default-features`) has no fake to sign in with.
#![cfg(feature = "demo")]

mod branches;
mod consent_skip;
mod fixture;
mod redemption;
mod refresh;
