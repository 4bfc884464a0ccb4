//! Testing a GPU plugin on a real GPU: a CUDA context and stream made current on the test's
//! thread, device frames, and copies to and from them, so that a test can run a plugin's
//! cuda path and compare it with its cpu path.
//!
//! [`GpuHarness::for_test`] returns `None` where this machine has no CUDA driver or device, and
//! says that the test is skipped and why (`skipped <test>: <why>` on standard error, and a line
//! in `$GPUIPC_SKIP_LOG`, which `scripts/test.sh` counts): cargo test itself counts such a test
//! as passed. With `GPUIPC_REQUIRE_GPU=1` it panics instead, which is how the GPU check makes
//! sure they really ran. [`nvrtc_for_test`] does the same for NVRTC, with
//! `GPUIPC_REQUIRE_NVRTC=1`; [`skip_test`] says so for a test's own reasons.

use std::path::PathBuf;
use std::sync::Arc;

/// Device memory a test made: [`GpuHarness::upload`]'s frames.
pub use gpuipc_cuda::DeviceMemory;
use gpuipc_cuda::Gpu;
pub use gpuipc_cuda::testing::{REQUIRE_GPU_ENV, REQUIRE_NVRTC_ENV, nvrtc_for_test, skip_test};

use crate::error::Result;
use crate::plugin::{CreateContext, Domain, ProcessContext};

/// A CUDA context (the device's primary context) current on the creating thread and a stream
/// of it, standing in for a stage runner.
pub struct GpuHarness {
    gpu: Arc<Gpu>,
    cache_dir: PathBuf,
}

impl GpuHarness {
    /// A harness on device 0, or `None` where there is none (no CUDA driver, no device, or any
    /// other failure to make a context, which is printed). Panics instead of returning `None`
    /// when `GPUIPC_REQUIRE_GPU=1`.
    pub fn for_test() -> Option<GpuHarness> {
        super::bridge_logs();
        gpuipc_cuda::testing::gpu_for_test().map(GpuHarness::with)
    }

    /// A harness on device 0; `Ok(None)` without a CUDA driver or device (saying nothing: a
    /// test that skips on `None` should say so with [`skip_test`]).
    pub fn new() -> Result<Option<GpuHarness>> {
        super::bridge_logs();
        match Gpu::open(0) {
            Ok(gpu) => Ok(Some(GpuHarness::with(Arc::new(gpu)))),
            Err(e) if e.no_device() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn with(gpu: Arc<Gpu>) -> GpuHarness {
        GpuHarness { gpu, cache_dir: std::env::temp_dir().join("gpuipc-test-kernel-cache") }
    }

    /// What the runner hands `Plugin::create` for a cuda stage. Makes the context current on
    /// this thread first.
    pub fn create_context<'a>(&'a self, stage: &'a str) -> Result<CreateContext<'a>> {
        self.gpu.bind()?;
        Ok(CreateContext {
            stage,
            domain: Domain::Cuda,
            device_ordinal: Some(self.gpu.ordinal()),
            cuda_context: self.gpu.context_ptr() as usize,
            cuda_stream: self.stream(),
            kernel_cache_dir: Some(&self.cache_dir),
        })
    }

    /// What the runner hands `Plugin::process` for a cuda stage.
    pub fn process_context(&self, frame_index: u64) -> ProcessContext {
        ProcessContext { frame_index, cuda_stream: self.stream() }
    }

    /// The raw stream handle, as a plugin receives it.
    pub fn stream(&self) -> usize {
        self.gpu.stream_ptr() as usize
    }

    /// Device memory holding a copy of `bytes`, freed on drop: a frame, as a plugin sees it
    /// through [`DeviceMemory::buffer`].
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceMemory> {
        let memory = DeviceMemory::private(&self.gpu, bytes.len())?;
        self.gpu.upload(memory.addr(), bytes)?;
        Ok(memory)
    }

    /// The bytes of `frame`, after everything enqueued on the stream so far has finished.
    pub fn download(&self, frame: &DeviceMemory) -> Result<Vec<u8>> {
        let mut bytes = vec![0; frame.len()];
        self.gpu.download(frame.addr(), &mut bytes)?;
        Ok(bytes)
    }
}

/// Where two frames of `layout` first differ, in words (plane, row, byte, values), or `None`
/// when equal. For assertions on frames too large to print.
pub fn first_difference(got: &[u8], want: &[u8], layout: &crate::FrameLayout) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("lengths differ: {} and {}", got.len(), want.len()));
    }
    let at = got.iter().zip(want).position(|(g, w)| g != w)?;
    let differing = got.iter().zip(want).filter(|(g, w)| g != w).count();
    let place = layout
        .planes()
        .iter()
        .enumerate()
        .rev()
        .find(|(_, p)| p.offset <= at as u64)
        .map(|(i, p)| {
            let within = at as u64 - p.offset;
            let (row, byte) = (within / p.pitch.max(1), within % p.pitch.max(1));
            let what = if byte >= p.row_bytes || row >= p.rows { "padding" } else { "pixels" };
            format!("plane {i} row {row} byte {byte} ({what})")
        })
        .unwrap_or_else(|| "before the first plane".into());
    Some(format!("{differing} bytes differ; the first at offset {at}, {place}: got {}, want {}", got[at], want[at]))
}
