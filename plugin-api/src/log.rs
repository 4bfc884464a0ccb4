//! Logging from a plugin into the host's log. A cdylib's own `tracing` would not reach the
//! host, so the host passes a callback at create time and these functions use it.

use std::sync::OnceLock;

use crate::abi::{self, LogFn, RawStr};

static SINK: OnceLock<LogFn> = OnceLock::new();

pub(crate) fn install(sink: Option<LogFn>) {
    if let Some(sink) = sink {
        // A second instance in the same process brings the same host callback; keep the first.
        let _ = SINK.set(sink);
    }
}

fn emit(level: u32, message: &str) {
    match SINK.get() {
        Some(sink) => sink(level, RawStr::from_str(message)),
        None => eprintln!("{message}"),
    }
}

pub fn error(message: &str) {
    emit(abi::LOG_ERROR, message)
}

pub fn warn(message: &str) {
    emit(abi::LOG_WARN, message)
}

pub fn info(message: &str) {
    emit(abi::LOG_INFO, message)
}

pub fn debug(message: &str) {
    emit(abi::LOG_DEBUG, message)
}
