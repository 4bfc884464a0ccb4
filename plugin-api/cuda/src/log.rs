//! Where this crate's messages go (a failed release in `Drop`, what the kernel cache did).
//! By default to `tracing`, which the host and its stage processes subscribe to. A plugin
//! cdylib's own `tracing` reaches no one, so plugin-api installs a [`Sink`] that forwards to
//! the host's log callback instead.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::CudaError;

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

pub fn debug(message: &str) {
    emit(Level::Debug, message)
}

/// Set once this copy of the crate logged a release that failed after a fatal GPU fault.
static FAULT_SEEN: AtomicBool = AtomicBool::new(false);

/// Releasing a CUDA object (in a `Drop`) failed while `what` (if given) was being done. After a
/// fatal GPU fault every release of the process fails the same way, six to eight of them in a
/// stage: the process's first says so at warning level and the rest at debug level. A plugin's
/// copy of this crate (one with a [`Sink`]) keeps them all at debug level, since the stage's
/// own objects (its context, stream and events) fail the same way and say it once.
pub fn release_failed(what: Option<&str>, e: &CudaError) {
    let message = match what {
        Some(what) => format!("{what}: {e}"),
        None => e.to_string(),
    };
    if !e.is_fatal_fault() {
        return warn(&message);
    }
    if SINK.get().is_some() || FAULT_SEEN.swap(true, Ordering::Relaxed) {
        return debug(&message);
    }
    warn(&format!(
        "{message} (after a fatal GPU fault every release of this process fails alike; the others are logged at debug level)"
    ));
}
