//! OAuth 2.1 protocol logic with no I/O and no HTTP types: parsing requests into typed values,
//! PKCE, scopes, registration metadata, token formats and the refresh-rotation decision.

pub mod error;
pub mod grant;
pub mod pkce;
pub mod policy;
pub mod registration;
pub mod request;
pub mod scope;
