//! The CUDA driver as the host uses it: the workspace crate `gpuipc-cuda` (plugin-api/cuda),
//! which wraps the driver once for the host and plugin-api alike, under the names the host's
//! modules use. [`Gpu`] is one device's primary context and a stage's stream,
//! [`DeviceMemory`] and [`PinnedHost`] the frame memory of links, [`IpcEvent`] their
//! synchronisation; the free functions answer the planner's and `doctor`'s device questions,
//! [`mps_installed`] among them (whether stages sharing a GPU can have MPS).
//!
//! Every entry point checks that the driver library can be loaded, by the crate's one rule,
//! and answers [`GpuError::NoDriver`] where it cannot (`GPUIPC_NO_CUDA` forces that), so the
//! host never meets cudarc's panic for a missing library.

pub use gpuipc_cuda::CudaError as GpuError;
pub use gpuipc_cuda::{
    ComputeMode, DeviceInfo, DeviceMemory, Gpu, IpcEvent, MemoryKind, Nvtx, NvtxRange, PinnedHost, SideStream,
    SleepEvent, Stream, TimingEvent, built_for_cuda, can_access_peer, count_devices, devices, driver_available,
    driver_version, frame_range_name, memory_in_use, memory_info, nvtx_enabled_by, vmm_fd_supported,
};

/// The MPS control program: it starts and stops an MPS daemon (`crate::supervisor`'s `mps`).
pub const MPS_CONTROL: &str = "nvidia-cuda-mps-control";

/// Whether the MPS control program is on the PATH: `isolation = "auto"` uses MPS then.
pub fn mps_installed() -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(MPS_CONTROL).is_file()))
}

/// Seconds `copies` device-to-device copies of `bytes` from `src` to `dst` take on `gpu`'s
/// stream, timed with events after three untimed ones (a warm-up).
pub fn time_copies(gpu: &std::sync::Arc<Gpu>, dst: u64, src: u64, bytes: usize, copies: u32) -> Result<f64, GpuError> {
    for _ in 0..3 {
        gpu.copy_dtod_async(dst, src, bytes)?;
    }
    let (start, end) = (TimingEvent::create(gpu)?, TimingEvent::create(gpu)?);
    start.record(gpu.stream())?;
    for _ in 0..copies {
        gpu.copy_dtod_async(dst, src, bytes)?;
    }
    end.record(gpu.stream())?;
    end.synchronize()?;
    Ok(f64::from(start.elapsed_ms(&end)?) / 1000.0)
}
