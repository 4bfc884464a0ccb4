//! The link's errors: [`LinkError`], of making, mapping, checking and waiting on rings and
//! the replicas' queue block; [`HandshakeError`], of GPU link ends exchanging their objects
//! (`backing::device::handshake`) or taking new ones after a restart.

use super::wait::TimedOut;
use crate::gpu::GpuError;

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("cannot create or map the ring's shared memory: {0}")]
    Memory(#[from] std::io::Error),
    #[error("the ring's control block is invalid: {0}")]
    Invalid(String),
    #[error("the run was aborted")]
    Aborted,
    #[error("timed out waiting for the other end of the link")]
    TimedOut,
    /// A header field breaks a rule or differs from the plan; `expected` says what it should be,
    /// in words ("the plan says 4", "expected 1..=64").
    #[error("link {link}: ring header field {field} is {found}, {expected}")]
    Mismatch { link: String, field: &'static str, found: String, expected: String },
    #[error("link {link}: the ring's control block is {len} bytes, smaller than a ring header ({needed} bytes)")]
    TooShort { link: String, len: u64, needed: u64 },
    /// The ring's data memfd is missing, or came where frames live on a GPU.
    #[error("link {link}: {problem}")]
    Data { link: String, problem: String },
    #[error("link {link}: cannot map the ring's {what}: {source}")]
    Map { link: String, what: &'static str, source: std::io::Error },
}

impl From<TimedOut> for LinkError {
    fn from(_: TimedOut) -> LinkError {
        LinkError::TimedOut
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("CUDA: {0}")]
    Gpu(#[from] GpuError),
    #[error("{0}")]
    Protocol(String),
}
