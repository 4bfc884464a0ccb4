//! Where this crate's messages go (a failed release in `Drop`, what the kernel cache did).
//! By default to `tracing`, which the host and its stage processes subscribe to. A plugin
//! cdylib's own `tracing` reaches no one, so plugin-api installs a [`Sink`] that forwards to
//! the host's log callback instead.

use std::sync::OnceLock;

/// How much a message matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

/// Receives every message of this crate once installed with [`set_sink`].
pub type Sink = fn(Level, &str);

static SINK: OnceLock<Sink> = OnceLock::new();

/// Send this crate's messages to `sink` instead of `tracing`, for the rest of the process
/// (of this copy of the crate: each plugin cdylib links its own). The first sink stays.
pub fn set_sink(sink: Sink) {
    let _ = SINK.set(sink);
}

fn emit(level: Level, message: &str) {
    match (SINK.get(), level) {
        (Some(sink), _) => sink(level, message),
        (None, Level::Error) => tracing::error!("{message}"),
        (None, Level::Warn) => tracing::warn!("{message}"),
        (None, Level::Info) => tracing::info!("{message}"),
        (None, Level::Debug) => tracing::debug!("{message}"),
    }
}

/// Send a warning where this crate's messages go (also for crates built on this one, such as
/// gpuipc-nvdec, whose `Drop` failures belong beside this crate's).
pub fn warn(message: &str) {
    emit(Level::Warn, message)
}

pub(crate) fn info(message: &str) {
    emit(Level::Info, message)
}

pub(crate) fn debug(message: &str) {
    emit(Level::Debug, message)
}
