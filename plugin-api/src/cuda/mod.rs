//! CUDA for plugin authors: kernels compiled with NVRTC when a stage starts and cached on disk,
//! launched on the runner's stream with their argument list checked, small device tables, and
//! [`ScratchBuffer`]s: a stage's own device memory, filled, copied to and from frames and host
//! memory, and read back, all on the stage's stream.
//!
//! The CUDA driver and NVRTC are wrapped once, in the workspace crate `gpuipc-cuda`
//! (`plugin-api/cuda`), which the host uses too; this module re-exports its types as they are
//! (one type per concept) and adds what ties them to a stage: a
//! [`CreateContext`] is the [`Target`] they are made in, a device
//! frame is [`DeviceBytes`] a [`ScratchBuffer`] copies, and [`device_plane`] and [`row_grid`]
//! shape a launch. Their errors are [`CudaError`]s, which keep the driver's code and name
//! (e.g. `CUDA_ERROR_ILLEGAL_ADDRESS (700)`) and NVRTC's compile log, and which `?` turns
//! into a plugin's [`Error`] (as text). Everything here is safe to call; what a launch cannot
//! check (the device addresses a kernel is given) is spelled out on [`Kernel`].
//!
//! ```ignore
//! use gpuipc_plugin_api::cuda::{self, KernelArg, KernelSource};
//!
//! /// `src/fill.cu`, built into the plugin.
//! const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("src", "fill.cu");
//!
//! // In `Plugin::create`, when `ctx.domain == Domain::Cuda`:
//! let [fill] = SOURCE.load(ctx, ["fill"])?;
//!
//! // In `Plugin::process`, for a device output frame:
//! let plane = cuda::device_plane(buffer, &out.info().layout, 0)?;
//! fill.launch(ctx.cuda_stream, cuda::row_grid(plane.row_bytes.div_ceil(16), plane.rows, 128),
//!             (128, 1, 1), 0, &[KernelArg::DevicePtr(plane.addr), KernelArg::U64(plane.pitch)])?;
//! ```
//!
//! # Loading the libraries
//!
//! The CUDA driver and NVRTC are loaded on first use, never at link time, so a plugin runs
//! where neither is installed as long as it stays in the cpu domain. One rule finds both:
//! the first of cudarc's candidate names (`libcuda.so`, ..., `libcuda.so.1`; `libnvrtc.so`,
//! ..., `libnvrtc.so.13`) that the dynamic loader opens, checked for every function called
//! before the first call; a missing library or function is an [`Error`], never a panic. For
//! NVRTC from the PyPI wheel `nvidia-cuda-nvrtc`, put its `site-packages/nvidia/cu13/lib` on
//! `LD_LIBRARY_PATH`; NVRTC then finds its `libnvrtc-builtins.so.13.0` there too.
//!
//! # The kernel cache
//!
//! A compiled kernel is a CUBIN for the device's exact architecture, kept in the first of:
//! [`CreateContext::kernel_cache_dir`](crate::CreateContext), `$XDG_CACHE_HOME/gpuipc/kernels`,
//! `$HOME/.cache/gpuipc/kernels` (none: no cache), named by a hash of the source, the NVRTC
//! options and the NVRTC version. Stages starting together never read a partial file; a hit
//! skips compiling (NVRTC must still load: its version is part of the key); a cached file the
//! driver refuses is compiled again. The cache is private: its folder is this user's and
//! closed to others (0700), files are 0600, and a file is loaded only if its trailer names the
//! key it is looked up by and the hash of its CUBIN matches.

mod source;
pub mod testing;
#[cfg(test)]
mod tests;

pub use source::KernelSource;

pub use gpuipc_cuda::{
    CudaError, DeviceBytes, DeviceTable, Kernel, KernelArg, Kernels, MAX_KERNEL_PARAMS, NVRTC_OPTIONS, ScratchBuffer,
    StreamOrder, Target, compile_cubin, nvrtc_available, nvrtc_version, synchronize_stream,
};
/// NCCL between two stages on different hosts (the built-in `nccl-send` and `nccl-receive`):
/// a two-rank communicator on the stage's context and stream (`RawStream { context:
/// ctx.cuda_context, stream: ctx.cuda_stream }`), aborted when dropped. See `gpuipc-cuda`'s
/// `nccl.rs` for how `libnccl.so.2` is found.
pub use gpuipc_cuda::{NCCL_ID_BYTES, NcclId, NcclPair, RawStream, nccl_available, nccl_version};

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::FrameLayout;
use crate::frame::{DeviceBuffer, InputFrame, OutputFrame};
use crate::plugin::{CreateContext, Domain};

/// A stage's context and stream, where [`Kernels::load`], [`ScratchBuffer::zeroed`] and
/// [`DeviceTable::upload`] put what a plugin makes in `create`; in the cpu domain there are
/// none, which they report as [`CudaError::NoContext`] naming the stage.
impl Target for CreateContext<'_> {
    fn raw_stream(&self) -> Result<RawStream, CudaError> {
        if self.domain != Domain::Cuda || self.cuda_context == 0 {
            return Err(CudaError::NoContext { stage: self.stage.to_owned(), domain: self.domain.name() });
        }
        Ok(RawStream { context: self.cuda_context, stream: self.cuda_stream })
    }

    fn kernel_cache_dir(&self) -> Option<&Path> {
        self.kernel_cache_dir
    }
}

/// A device input frame's bytes, for [`ScratchBuffer::copy_from`].
impl DeviceBytes for InputFrame<'_> {
    fn device_bytes(&self) -> Result<DeviceBuffer, CudaError> {
        frame_bytes(&self.info.layout, self.device_buffer(), "input")
    }
}

/// A device output frame's bytes, for [`ScratchBuffer::copy_to`].
impl DeviceBytes for OutputFrame<'_> {
    fn device_bytes(&self) -> Result<DeviceBuffer, CudaError> {
        frame_bytes(&self.info().layout, self.device_buffer(), "output")
    }
}

/// The bytes of a frame of `layout` in `buffer`: its total size, or less where the buffer is
/// shorter but still holds every plane's last row.
fn frame_bytes(layout: &FrameLayout, buffer: Option<DeviceBuffer>, which: &str) -> Result<DeviceBuffer, CudaError> {
    let refuse = |reason: String| CudaError::Invalid { op: "frame copy", reason };
    let Some(buffer) = buffer else {
        return Err(refuse(format!("the {which} frame is in host memory, not on the GPU (cpu domain)")));
    };
    let needed =
        layout.planes().iter().map(|p| p.offset + p.pitch * p.rows.saturating_sub(1) + p.row_bytes).max().unwrap_or(0);
    if needed > buffer.len {
        return Err(refuse(format!("the frame's layout needs {needed} bytes, its device buffer has {}", buffer.len)));
    }
    Ok(DeviceBuffer { addr: buffer.addr, len: layout.total_bytes.min(buffer.len) })
}

/// Send the CUDA crate's messages (what the kernel cache did, failed releases) to the host's
/// log through this plugin's log callback: a cdylib's own `tracing` reaches no one. Called
/// when a stage is created, and by [`testing::GpuHarness`].
pub(crate) fn bridge_logs() {
    fn forward(level: gpuipc_cuda::log::Level, message: &str) {
        use gpuipc_cuda::log::Level;
        match level {
            Level::Error => crate::log::error(message),
            Level::Warn => crate::log::warn(message),
            Level::Info => crate::log::info(message),
            Level::Debug => crate::log::debug(message),
        }
    }
    gpuipc_cuda::log::set_sink(forward);
}

/// One plane of a frame in device memory, as a kernel takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevicePlane {
    /// Device address of the plane's first row: frame address + plane offset.
    pub addr: u64,
    /// Bytes from one row to the next.
    pub pitch: u64,
    /// Bytes of pixels in a row.
    pub row_bytes: u64,
    pub rows: u64,
}

/// Plane `index` of a device frame, checked to lie inside the frame's buffer: every row up to
/// its full pitch (kernels may read a row's padding in 16-byte pieces), so a kernel that keeps
/// to `rows` x `pitch` from `addr` stays inside the buffer.
pub fn device_plane(buffer: DeviceBuffer, layout: &FrameLayout, index: usize) -> Result<DevicePlane> {
    let Some(plane) = layout.planes().get(index) else {
        return Err(Error::new(format!("the frame has {} planes, plane {index} was asked for", layout.n_planes)));
    };
    let end = plane.pitch.checked_mul(plane.rows).and_then(|bytes| bytes.checked_add(plane.offset));
    match end {
        Some(end) if plane.row_bytes <= plane.pitch && end <= buffer.len => {}
        _ => {
            return Err(Error::new(format!(
                "plane {index} (offset {}, pitch {}, {} rows of {} bytes) does not fit in the \
                 {}-byte device frame",
                plane.offset, plane.pitch, plane.rows, plane.row_bytes, buffer.len
            )));
        }
    }
    let addr = buffer
        .addr
        .checked_add(plane.offset)
        .ok_or_else(|| Error::new(format!("plane {index}: device address overflows")))?;
    Ok(DevicePlane { addr, pitch: plane.pitch, row_bytes: plane.row_bytes, rows: plane.rows })
}

/// The largest `gridDim.y` CUDA allows.
pub const MAX_GRID_Y: u32 = 65535;
/// The largest `gridDim.x` CUDA allows.
pub const MAX_GRID_X: u32 = i32::MAX as u32;

/// Set by the host for a cuda stage's process: the most rows a kernel launched with
/// [`row_grid`] works on at once (block rows; its grid-stride loop covers the other rows), 0
/// or unset for one block row a row. The host bounds them on a GPU whose large frames cross
/// to another GPU through its copy engines: a kernel that takes all of the GPU's memory
/// bandwidth for a moment starves the copies, and the link then carries less than it can
/// (docs/gpu.md, "Kernels paced beside the link").
pub const KERNEL_ROWS_ENV: &str = "GPUIPC_KERNEL_ROWS";

/// The grid of a row kernel with grid-stride loops in both dimensions: enough blocks of
/// `block_x` threads for `threads_per_row` threads in x, one block row per row in y (at most
/// as many as this stage's [`KERNEL_ROWS_ENV`] allows), each clamped to CUDA's limits (a
/// grid-stride kernel covers the rest) and at least 1.
pub fn row_grid(threads_per_row: u64, rows: u64, block_x: u32) -> (u32, u32, u32) {
    row_grid_within(threads_per_row, rows, block_x, paced_rows())
}

/// [`row_grid`] with at most `max_rows` block rows (0: no bound but CUDA's).
pub fn row_grid_within(threads_per_row: u64, rows: u64, block_x: u32, max_rows: u32) -> (u32, u32, u32) {
    let x = threads_per_row.div_ceil(block_x.max(1) as u64);
    let max_y = match max_rows {
        0 => MAX_GRID_Y,
        n => n.min(MAX_GRID_Y),
    };
    (x.clamp(1, MAX_GRID_X as u64) as u32, rows.clamp(1, max_y as u64) as u32, 1)
}

/// This process's [`KERNEL_ROWS_ENV`], read once (a launch is too frequent to read it each
/// time); 0 where it is unset or not a number.
fn paced_rows() -> u32 {
    static ROWS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| std::env::var(KERNEL_ROWS_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(0))
}
