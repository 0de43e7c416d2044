//! Command-line clients of a running proxy (the `admin` subcommand).

pub mod admin;
