//! The proxy as one static OAuth client toward GitHub, and the encrypted store of each
//! person's GitHub grant. GitHub endpoints come from configuration, never from input.

pub mod client;
pub mod grants;
mod settings;
pub use settings::{GitHubConfig, RawGitHub};
