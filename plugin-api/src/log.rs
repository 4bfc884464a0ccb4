//! Logging from a plugin into the host's log. A cdylib's own `tracing` would not reach the
//! host, so the host passes a callback at create time and these functions use it.
//!
//! The macros take format arguments as `format!` does; the functions take ready text:
//!
//! ```
//! let (stage, frames) = ("grade", 3);
//! gpuipc_plugin_api::info!("stage {stage}: {frames} frames so far");
//! gpuipc_plugin_api::warn!("{} is slow", stage);
//! gpuipc_plugin_api::log::debug("plain text");
//! ```
//!
//! Each message becomes one line of the host's log, prefixed with the stage's name. Before
//! the host's callback is installed (in unit tests, before `create`) messages go to stderr.
//! Logging from `process` costs a formatting and a call per frame: keep it to what is rare.

use std::fmt;
use std::sync::OnceLock;

use crate::abi::{self, LogFn, RawStr};

static SINK: OnceLock<LogFn> = OnceLock::new();

/// How important a message is; the host's log filter decides what is shown (`info` and above
/// by default, `GPUIPC_LOG=debug` for everything).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    fn code(self) -> u32 {
        match self {
            Level::Error => abi::LOG_ERROR,
            Level::Warn => abi::LOG_WARN,
            Level::Info => abi::LOG_INFO,
            Level::Debug => abi::LOG_DEBUG,
        }
    }
}

pub(crate) fn install(sink: Option<LogFn>) {
    if let Some(sink) = sink {
        // A second instance in the same process brings the same host callback; keep the first.
        let _ = SINK.set(sink);
    }
    #[cfg(panic = "abort")]
    warn_panic_abort();
}

/// The export glue catches a plugin's panics only when they unwind. Built with
/// `panic = "abort"`, a panic ends the process at once: the stage's own (the host reports a
/// stage killed by SIGABRT, not the plugin's error), or, under `run --in-process`, the host
/// with every stage. Said once per library and process, when an instance is created.
#[cfg(panic = "abort")]
fn warn_panic_abort() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        warn(
            "this plugin was built with panic = \"abort\": a panic in it ends the process \
             (under `run --in-process`, the host and every stage) instead of being reported \
             as an error of the stage; build it with panic = \"unwind\", the default",
        )
    });
}

fn emit(level: u32, message: &str) {
    match SINK.get() {
        Some(sink) => sink(level, RawStr::from_str(message)),
        None => eprintln!("{message}"),
    }
}

/// Log `args` at `level`; what the macros [`error!`](crate::error!), [`warn!`](crate::warn!),
/// [`info!`](crate::info!) and [`debug!`](crate::debug!) call.
pub fn log(level: Level, args: fmt::Arguments<'_>) {
    match args.as_str() {
        Some(text) => emit(level.code(), text),
        None => emit(level.code(), &args.to_string()),
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

/// Log an error to the host's log, with `format!` arguments.
#[macro_export]
macro_rules! error {
    ($($arg:tt)+) => {
        $crate::log::log($crate::log::Level::Error, ::core::format_args!($($arg)+))
    };
}

/// Log a warning to the host's log, with `format!` arguments.
#[macro_export]
macro_rules! warn {
    ($($arg:tt)+) => {
        $crate::log::log($crate::log::Level::Warn, ::core::format_args!($($arg)+))
    };
}

/// Log at info level to the host's log, with `format!` arguments.
#[macro_export]
macro_rules! info {
    ($($arg:tt)+) => {
        $crate::log::log($crate::log::Level::Info, ::core::format_args!($($arg)+))
    };
}

/// Log at debug level to the host's log (shown with `GPUIPC_LOG=debug`), with `format!`
/// arguments.
#[macro_export]
macro_rules! debug {
    ($($arg:tt)+) => {
        $crate::log::log($crate::log::Level::Debug, ::core::format_args!($($arg)+))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_keep_their_abi_codes() {
        let codes = [Level::Error, Level::Warn, Level::Info, Level::Debug].map(Level::code);
        assert_eq!(codes, [abi::LOG_ERROR, abi::LOG_WARN, abi::LOG_INFO, abi::LOG_DEBUG]);
    }

    #[test]
    fn the_macros_format_their_arguments() {
        // No sink is installed in unit tests: the text goes to stderr.
        let n = 3;
        crate::info!("{n} frames, {}", "fine");
        crate::warn!("plain");
        crate::error!("{:>4}", n);
        crate::debug!("{n:?}");
        log(Level::Info, format_args!("{}", 1));
    }
}
