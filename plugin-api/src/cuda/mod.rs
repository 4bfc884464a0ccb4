//! CUDA for plugin authors: kernels compiled with NVRTC when a stage starts and cached on disk,
//! launched on the runner's stream with their argument list checked, and small device tables.
//!
//! Everything here is safe to call; what a launch cannot check (the device addresses a kernel
//! is given) is spelled out on [`Kernel`]. The `unsafe` FFI lives in this module's files only,
//! each block with the reason it is sound.
//!
//! ```ignore
//! use gpuipc_plugin_api::cuda::{self, KernelArg, Kernels};
//!
//! // In `Plugin::create`, when `ctx.domain == Domain::Cuda`:
//! let kernels = Kernels::load(ctx, "kernels/fill.cu", include_str!("../../../kernels/fill.cu"),
//!                             &["fill"])?;
//! let fill = kernels.get("fill")?.clone();
//!
//! // In `Plugin::process`, for a device output frame:
//! let plane = cuda::device_plane(buffer, &out.info.layout, 0)?;
//! fill.launch(ctx.cuda_stream, cuda::row_grid(plane.row_bytes.div_ceil(16), plane.rows, 128),
//!             (128, 1, 1), 0, &[KernelArg::DevicePtr(plane.addr), KernelArg::U64(plane.pitch)])?;
//! ```
//!
//! # Loading the libraries
//!
//! The CUDA driver (`libcuda.so.1`) and NVRTC (`libnvrtc.so.13`) are loaded on first use
//! through cudarc's dynamic loading, never at link time, so a plugin runs where neither is
//! installed as long as it stays in the cpu domain. Before the first call into either library
//! its presence and the symbols used here are checked; a missing library or symbol is an
//! [`Error`], never a panic. NVRTC is found by the dynamic loader under the names
//! cudarc tries (`libnvrtc.so`, ..., `libnvrtc.so.13`, ...), so the directory of the PyPI
//! wheel `nvidia-cuda-nvrtc` (`site-packages/nvidia/cu13/lib`) must be on `LD_LIBRARY_PATH`;
//! NVRTC then finds its `libnvrtc-builtins.so.13.0` there too.
//!
//! # The kernel cache
//!
//! A compiled kernel is a CUBIN for the device's exact architecture (`sm_{major}{minor}`), kept
//! in the first of: [`CreateContext::kernel_cache_dir`](crate::CreateContext),
//! `$XDG_CACHE_HOME/gpuipc/kernels`, `$HOME/.cache/gpuipc/kernels` (none: no cache). Its file
//! name is `{stem}-{key:016x}-{arch}.cubin`, where `stem` is the kernel file's name without
//! folder and extension and `key` is xxh3-64 of the source, the NVRTC options (architecture
//! included) and the NVRTC version. Files are written to a temporary name and renamed, so
//! stages starting together never read a partial file. A hit skips compiling: NVRTC is only
//! loaded and asked its version, which is part of the key (so NVRTC must be loadable even
//! with a warm cache). A cached file the driver refuses is deleted and compiled again.

mod cache;
mod driver;
mod kernel;
mod nvrtc;
mod table;
pub mod testing;

pub use kernel::{Kernel, KernelArg, Kernels, MAX_KERNEL_PARAMS};
pub use nvrtc::{compile_cubin, nvrtc_available, nvrtc_version};
pub use table::DeviceTable;

use crate::error::{Error, Result};
use crate::format::FrameLayout;
use crate::frame::DeviceBuffer;

/// The options every kernel is compiled with, besides `--gpu-architecture=sm_XX`; the same as
/// CI's `.ci/compile-kernels.py`.
pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17"];

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
pub fn device_plane(
    buffer: DeviceBuffer,
    layout: &FrameLayout,
    index: usize,
) -> Result<DevicePlane> {
    let Some(plane) = layout.planes().get(index) else {
        return Err(Error::new(format!(
            "the frame has {} planes, plane {index} was asked for",
            layout.n_planes
        )));
    };
    let end = plane
        .pitch
        .checked_mul(plane.rows)
        .and_then(|bytes| bytes.checked_add(plane.offset));
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
    Ok(DevicePlane {
        addr,
        pitch: plane.pitch,
        row_bytes: plane.row_bytes,
        rows: plane.rows,
    })
}

/// The largest `gridDim.y` CUDA allows.
pub const MAX_GRID_Y: u32 = 65535;
/// The largest `gridDim.x` CUDA allows.
pub const MAX_GRID_X: u32 = i32::MAX as u32;

/// The grid of a row kernel with grid-stride loops in both dimensions: enough blocks of
/// `block_x` threads for `threads_per_row` threads in x, one block row per row in y, each
/// clamped to CUDA's limits (a grid-stride kernel covers the rest) and at least 1.
pub fn row_grid(threads_per_row: u64, rows: u64, block_x: u32) -> (u32, u32, u32) {
    let x = threads_per_row.div_ceil(block_x.max(1) as u64);
    (
        x.clamp(1, MAX_GRID_X as u64) as u32,
        rows.clamp(1, MAX_GRID_Y as u64) as u32,
        1,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FrameFormat, PixelFormat};

    #[test]
    fn planes_are_checked_against_the_buffer() {
        let layout = FrameLayout::for_format(FrameFormat::new(PixelFormat::I420, 5, 3)).unwrap();
        let buffer = DeviceBuffer {
            addr: 0x7000_0000,
            len: layout.total_bytes,
        };
        let u = device_plane(buffer, &layout, 1).unwrap();
        assert_eq!(
            u,
            DevicePlane {
                addr: 0x7000_0100,
                pitch: 64,
                row_bytes: 3,
                rows: 2
            }
        );
        assert!(device_plane(buffer, &layout, 3).is_err());
        // The last plane's last row must fit up to its pitch.
        let short = DeviceBuffer {
            len: layout.planes[2].offset + 64 * 2 - 1,
            ..buffer
        };
        let e = device_plane(short, &layout, 2).unwrap_err();
        assert!(e.message().contains("does not fit"), "{e}");
        let top = DeviceBuffer {
            addr: u64::MAX - 10,
            ..buffer
        };
        assert!(device_plane(top, &layout, 1).is_err());
    }

    #[test]
    fn row_grids_are_clamped() {
        assert_eq!(row_grid(243, 2160, 128), (2, 2160, 1));
        assert_eq!(row_grid(1, 100_000, 128), (1, 65535, 1));
        assert_eq!(row_grid(0, 0, 128), (1, 1, 1));
    }
}
