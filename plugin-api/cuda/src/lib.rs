//! The CUDA driver and NVRTC as gpuipc uses them, wrapped once: small safe wrappers over
//! cudarc's raw `sys` bindings (cudarc's own layering is raw → Result → safe; `driver.rs` and
//! `nvrtc.rs` hold our Result layer, the other files the safe one). The host (stage processes,
//! `doctor`, the planner's device queries) uses it directly; plugin-api re-exports what plugin
//! authors need.
//!
//! - loading ([`driver_available`], [`nvrtc_available`]): one rule for finding `libcuda` and
//!   `libnvrtc`, checked before first use; see below;
//! - errors: [`CudaError`], which keeps the driver's code and name
//!   (`CUDA_ERROR_ILLEGAL_ADDRESS (700)`), what was being done, and NVRTC's compile log;
//! - devices: [`devices`], [`count_devices`], [`can_access_peer`], [`vmm_fd_supported`],
//!   [`driver_version`], [`built_for_cuda`];
//! - [`Gpu`]: one device's primary context and the one non-blocking [`Stream`] a stage works
//!   on; [`RawStream`]: a context and stream someone else owns, as a plugin is handed them,
//!   and [`Target`], what the types a plugin makes take to say where they live (a
//!   `RawStream`, or plugin-api's `CreateContext`);
//! - memory: [`DeviceMemory`] (frame slots: VMM POSIX-fd or legacy IPC exports and their
//!   imports, private allocations) and [`PinnedHost`] (a host range registered for fast
//!   copies);
//! - [`IpcEvent`]: an interprocess event (DisableTiming | Interprocess); [`SleepEvent`] a local
//!   one a host thread sleeps on (BlockingSync); [`TimingEvent`] and
//!   [`memory_in_use`] and [`memory_info`] for measuring;
//! - kernels: [`Kernels`] (compile with NVRTC or take from the disk cache, load, look up),
//!   [`Kernel`] (a launch checked against the kernel's parameters), [`KernelArg`],
//!   [`DeviceTable`], [`compile_cubin`];
//! - NCCL ([`NcclPair`], [`NcclId`], [`nccl_available`], [`nccl_version`]): a two-rank
//!   communicator, created non-blocking and aborted on drop, sending and receiving device
//!   memory on a stage's stream (the `nccl` links between hosts); `libnccl.so.2` is loaded at
//!   run time like the others (`nccl.rs` says why it is not cudarc's loader);
//! - NVTX ([`Nvtx`], [`NvtxRange`]): a stage's ranges per frame and its thread's name for
//!   Nsight Systems, with `GPUIPC_NVTX=1` only; `libnvToolsExt` (or CUDA 13's
//!   `libnvtx3interop`) is loaded at run time by `nvtx.rs` itself, and its absence is an
//!   error, never a panic;
//! - [`ScratchBuffer`]: device memory a plugin allocates in the context it is handed, with
//!   fills and copies (host to device without waiting, device to device, to and from frames
//!   ([`DeviceBuffer`], [`DeviceBytes`]), a read-back that waits) enqueued on its stream;
//! - [`log`]: where this crate's messages go; [`testing`]: skipping tests without NVRTC or a
//!   GPU.
//!
//! plugin-api's `cuda` module re-exports the types a plugin uses (kernels, tables, scratch
//! buffers, NCCL) rather than wrapping them: one type per concept, whose errors convert into a
//! plugin's with `?`.
//!
//! # Finding the libraries
//!
//! Both libraries are loaded at run time, never at link time, so everything runs where
//! neither is installed as long as it stays in the cpu domain. The rule, the same for both:
//! the library is the first of cudarc's candidate names (`libcuda.so`, ..., `libcuda.so.1`;
//! `libnvrtc.so`, ..., `libnvrtc.so.13`) that the dynamic loader opens, so `LD_LIBRARY_PATH`
//! and the system's paths apply; before the first call into it, this crate finds it that way
//! and checks that it has every function this crate calls, once per process. A missing
//! library or function is a [`CudaError`] (`NoDriver`, `NoNvrtc`, `MissingSymbol`), never
//! cudarc's panic. `GPUIPC_NO_CUDA` set in the environment makes the driver count as missing.
//! For NVRTC from the PyPI wheel `nvidia-cuda-nvrtc`, put its `site-packages/nvidia/cu13/lib`
//! on `LD_LIBRARY_PATH`; NVRTC then finds its `libnvrtc-builtins.so.13.0` there too.
//!
//! # The kernel cache
//!
//! A compiled kernel is a CUBIN for the device's exact architecture (`sm_{major}{minor}`),
//! kept in [`kernel_cache_dir`]. Its file name is `{stem}-{key:016x}-{arch}.cubin`, where
//! `stem` is the kernel file's name without folder and extension and `key` is xxh3-64 of the
//! source, the NVRTC options (architecture included) and the NVRTC version. Files are written
//! to a temporary name and renamed, so processes starting together never read a partial file.
//! A hit skips compiling: NVRTC is only loaded and asked its version, which is part of the key
//! (so NVRTC must be loadable even with a warm cache). A cached file the driver refuses is
//! deleted and compiled again.
//!
//! Every object that needs a context holds an `Arc<Gpu>`, so the context outlives everything
//! created in it. `unsafe` is allowed only in the modules that call the libraries; each block
//! says why it holds.
#![deny(unsafe_code)]

mod alloc;
mod args;
mod cache;
mod context;
mod driver;
mod error;
mod event;
mod kernels;
mod library;
pub mod log;
mod memory;
mod module;
mod nccl;
mod nvrtc;
mod nvtx;
mod pinned;
mod scratch;
mod sleep_event;
mod table;
mod target;
pub mod testing;
mod timing;

pub use args::{KernelArg, MAX_KERNEL_PARAMS};
pub use cache::dir as kernel_cache_dir;
pub use context::{Gpu, RawStream, SideStream, Stream, StreamOrder, synchronize_stream};
pub use driver::{
    ComputeMode, DeviceInfo, built_for_cuda, can_access_peer, count_devices, devices, driver_version, vmm_fd_supported,
};
pub use error::CudaError;
pub use event::IpcEvent;
pub use kernels::Kernels;
pub use library::{Library, driver_available, nvrtc_available};
pub use memory::{DeviceMemory, MemoryKind};
pub use module::Kernel;
pub use nccl::{NCCL_ID_BYTES, NcclId, NcclPair, nccl_available, nccl_version};
pub use nvrtc::{NVRTC_OPTIONS, compile_cubin, nvrtc_version};
pub use nvtx::{Nvtx, Range as NvtxRange, enabled_by as nvtx_enabled_by, frame_range_name};
pub use pinned::PinnedHost;
pub use scratch::ScratchBuffer;
pub use sleep_event::SleepEvent;
pub use table::DeviceTable;
pub use target::{DeviceBuffer, DeviceBytes, Target};
pub use timing::{TimingEvent, memory_in_use, memory_info};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// On a machine without libcuda (CI, this one), every entry point answers with a clean
    /// error instead of cudarc's panic.
    #[test]
    fn every_entry_point_fails_cleanly_without_a_driver() {
        if driver_available() {
            eprintln!("a CUDA driver is present; the no-driver paths are not exercised here");
            return;
        }
        let no_driver = |r: Result<(), CudaError>| matches!(r, Err(CudaError::NoDriver { .. }));
        assert!(no_driver(driver_version().map(drop)));
        assert!(no_driver(devices().map(drop)));
        assert!(no_driver(can_access_peer(0, 1).map(drop)));
        assert!(no_driver(count_devices().map(drop)));
        assert!(no_driver(vmm_fd_supported(0).map(drop)));
        let err = Gpu::open(0).expect_err("no driver, no Gpu");
        assert!(matches!(err, CudaError::NoDriver { .. }));
        assert!(err.no_device());
        assert!(err.to_string().contains("libcuda.so.1"), "{err}");
        let on = RawStream { context: 0x1000, stream: 0x2000 };
        let no_driver_during = |r: Result<(), CudaError>| matches!(r, Err(CudaError::Context { source, .. }) if matches!(*source, CudaError::NoDriver { .. }));
        assert!(no_driver_during(DeviceTable::upload(&on, &[1]).map(drop)));
        assert!(no_driver_during(ScratchBuffer::zeroed(&on, 1).map(drop)));
        // Nothing else can be reached without a `Gpu`; the type system closes the rest.
        let _: fn(&Arc<Gpu>, usize) -> Result<DeviceMemory, CudaError> = DeviceMemory::private;
    }

    #[test]
    fn built_for_matches_the_cudarc_feature() {
        // The workspace pins cudarc's `cuda-13000` feature.
        assert_eq!(built_for_cuda(), (13, 0));
    }

    /// On a GPU: copies, fills, an interprocess event within one process, and a kernel with a
    /// device table, checked byte for byte. Skipped without a GPU unless GPUIPC_REQUIRE_GPU=1;
    /// needs NVRTC.
    #[test]
    fn gpu_memory_events_and_kernels_work() {
        let Some(gpu) = testing::gpu_for_test() else { return };
        assert!(testing::nvrtc_for_test(), "NVRTC is needed to test kernels");
        let bytes: Vec<u8> = (0..=255).collect();
        let a = DeviceMemory::private(&gpu, bytes.len()).unwrap();
        let b = DeviceMemory::private(&gpu, bytes.len()).unwrap();
        gpu.upload(a.addr(), &bytes).unwrap();
        gpu.memset_d8_async(b.addr(), 0xee, b.len()).unwrap();
        gpu.copy_dtod_async(b.addr(), a.addr(), 16).unwrap();
        let mut back = vec![0u8; bytes.len()];
        gpu.download(b.addr(), &mut back).unwrap();
        assert_eq!(back[..16], bytes[..16]);
        assert!(back[16..].iter().all(|&x| x == 0xee));

        if gpu.supports_ipc_events() {
            let (event, _handle) = IpcEvent::create(&gpu).unwrap();
            event.record(gpu.stream()).unwrap();
            event.wait_on(gpu.stream()).unwrap();
            event.synchronize().unwrap();
            assert!(event.query().unwrap());
        }

        let source = r#"
            extern "C" __global__ void put(unsigned* out, unsigned v, unsigned long long w,
                                           int i, float f, const unsigned char* table) {
                out[0] = v; out[1] = (unsigned)(w >> 32); out[2] = (unsigned)i;
                out[3] = __float_as_uint(f); out[4] = table[0] | (table[255] << 8);
            }
        "#;
        /// The stream, with a kernel cache folder of the test's own.
        struct Cached(RawStream, tempfile::TempDir);
        impl Target for Cached {
            fn raw_stream(&self) -> Result<RawStream, CudaError> {
                Ok(self.0)
            }
            fn kernel_cache_dir(&self) -> Option<&std::path::Path> {
                Some(self.1.path())
            }
        }
        let on = gpu.raw_stream();
        let cached = Cached(on, tempfile::tempdir().unwrap());
        gpu.bind().unwrap();
        let kernels = Kernels::load(&cached, "kernels/test.cu", source, &["put"]).unwrap();
        let e = Kernels::load(&cached, "kernels/test.cu", source, &["absent"]).unwrap_err();
        assert_eq!(e.driver_code(), Some(500), "CUDA_ERROR_NOT_FOUND: {e}");
        assert!(e.to_string().contains("CUDA_ERROR_NOT_FOUND"), "{e}");
        let put = kernels.get("put").unwrap();
        assert_eq!(put.param_sizes(), [8, 4, 8, 4, 4, 8]);
        let table = DeviceTable::upload(&on, &bytes).unwrap();
        let out = DeviceMemory::private(&gpu, 20).unwrap();
        let args = [
            KernelArg::DevicePtr(out.addr()),
            KernelArg::U32(7),
            KernelArg::U64(5 << 32),
            KernelArg::I32(-3),
            KernelArg::F32(1.5),
            table.arg(),
        ];
        put.launch(on.stream, (1, 1, 1), (1, 1, 1), 0, &args).unwrap();
        let mut words = [0u8; 20];
        gpu.download(out.addr(), &mut words).unwrap();
        let words: Vec<u32> = words.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(words, [7, 5, (-3i32) as u32, 1.5f32.to_bits(), 0xff00]);
        // The driver's own limits come back as errors keeping its code.
        let e = put.launch(on.stream, (1, 1, 1), (4096, 1, 1), 0, &args).unwrap_err();
        assert!(e.driver_code().is_some(), "{e}");
        assert!(e.to_string().starts_with("kernel `put`: cuLaunchKernel: CUDA_ERROR_"), "{e}");
    }
}
