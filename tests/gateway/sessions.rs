//! (gateway tests: sessions)
