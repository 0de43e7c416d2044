//! (gateway tests: auth)
