//! (gateway tests: streaming)
