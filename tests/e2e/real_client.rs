//! Real-client end-to-end tests (written next).
