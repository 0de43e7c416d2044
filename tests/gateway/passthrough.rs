//! (gateway tests: passthrough)
