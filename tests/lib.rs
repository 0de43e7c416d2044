//! Integration tests live in main.rs; this empty library keeps cargo happy.
