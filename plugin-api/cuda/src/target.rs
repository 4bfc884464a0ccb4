//! What a plugin is handed and this crate's safe types take from it: [`Target`], the context
//! and stream its CUDA work goes to (a [`RawStream`], or plugin-api's `CreateContext`), and
//! [`DeviceBuffer`] and [`DeviceBytes`], device memory someone else owns (a frame's).

use std::path::Path;

use crate::context::RawStream;
use crate::error::CudaError;

/// Where a plugin's CUDA work goes: a context someone else owns, current on this thread, and a
/// stream of it, as the stage runner hands them over, with the kernel cache folder it was
/// given. [`Kernels::load`](crate::Kernels::load), [`ScratchBuffer`](crate::ScratchBuffer) and
/// [`DeviceTable`](crate::DeviceTable) take one.
///
/// A [`RawStream`] is one (no cache folder of its own). plugin-api's `CreateContext` is the one
/// a plugin passes: it answers [`CudaError::NoContext`] for a stage in the cpu domain.
pub trait Target {
    /// The context and stream, or why there are none.
    fn raw_stream(&self) -> Result<RawStream, CudaError>;

    /// The kernel cache folder given explicitly, if any; without one the cache is in
    /// [`kernel_cache_dir`](crate::kernel_cache_dir)'s other places.
    fn kernel_cache_dir(&self) -> Option<&Path> {
        None
    }
}

impl Target for RawStream {
    fn raw_stream(&self) -> Result<RawStream, CudaError> {
        Ok(*self)
    }
}

/// Device memory someone else owns, such as a frame in GPU memory handed to a plugin (or part
/// of one): the device address of byte 0 and how many bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceBuffer {
    pub addr: u64,
    pub len: u64,
}

/// Something whose bytes lie in device memory someone else owns, copied as a whole by
/// [`ScratchBuffer::copy_from`](crate::ScratchBuffer::copy_from) and
/// [`copy_to`](crate::ScratchBuffer::copy_to): a [`DeviceBuffer`], or a frame as plugin-api
/// hands it over (its buffer, cut to the bytes its layout places).
pub trait DeviceBytes {
    /// The device memory, or why there is none (a frame in host memory).
    fn device_bytes(&self) -> Result<DeviceBuffer, CudaError>;
}

impl DeviceBytes for DeviceBuffer {
    fn device_bytes(&self) -> Result<DeviceBuffer, CudaError> {
        Ok(*self)
    }
}
