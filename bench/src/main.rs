//! Benchmarks (written next).
fn main() {}
