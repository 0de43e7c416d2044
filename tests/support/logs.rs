//! Captures every log line of the process (all tests) at TRACE level into memory, so tests can
//! prove that no secret issued during a flow was ever logged.

use std::io::Write;
use std::sync::{Mutex, OnceLock};

static LOGS: Mutex<Vec<u8>> = Mutex::new(Vec::new());
static INIT: OnceLock<()> = OnceLock::new();

struct Sink;

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the capturing subscriber once.
pub fn init() {
    INIT.get_or_init(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(|| Sink)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Everything logged so far.
pub fn all() -> String {
    String::from_utf8_lossy(&LOGS.lock().unwrap()).into_owned()
}
