//! The link's errors: [`HandshakeError`], of GPU link ends exchanging their objects
//! (`backing::device::handshake`) or taking new ones after a restart.

use crate::gpu::GpuError;

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("CUDA: {0}")]
    Gpu(#[from] GpuError),
    #[error("{0}")]
    Protocol(String),
}
