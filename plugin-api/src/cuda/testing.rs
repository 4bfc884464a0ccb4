//! Testing a GPU plugin on a real GPU: a CUDA context and stream made current on the test's
//! thread, device frames, and copies to and from them, so that a test can run a plugin's
//! cuda path and compare it with its cpu path.
//!
//! [`GpuHarness::for_test`] returns `None` where this machine has no CUDA driver or device, so
//! such tests pass trivially on CI; with `GPUIPC_REQUIRE_GPU=1` it panics instead, which is how
//! the GPU check makes sure they really ran.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::error::{Error, Result};
use crate::frame::DeviceBuffer;
use crate::plugin::{CreateContext, Domain, ProcessContext};

/// The environment variable that turns a missing GPU into a test failure.
pub const REQUIRE_GPU_ENV: &str = "GPUIPC_REQUIRE_GPU";

/// A CUDA context (the device's primary context) current on the creating thread and a stream
/// of it, standing in for a stage runner.
pub struct GpuHarness {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    cache_dir: PathBuf,
}

/// Device memory holding one frame, freed on drop.
pub struct DeviceFrame {
    slice: CudaSlice<u8>,
    addr: u64,
}

impl DeviceFrame {
    /// The frame as a plugin sees it.
    pub fn buffer(&self) -> DeviceBuffer {
        DeviceBuffer {
            addr: self.addr,
            len: self.slice.len() as u64,
        }
    }
}

fn driver_error(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::new(format!("{what}: {e}"))
}

impl GpuHarness {
    /// A harness on device 0, or `None` where there is none (no CUDA driver, no device, or any
    /// other failure to make a context, which is printed). Panics instead of returning `None`
    /// when `GPUIPC_REQUIRE_GPU=1`.
    pub fn for_test() -> Option<GpuHarness> {
        let why = match GpuHarness::new() {
            Ok(Some(harness)) => return Some(harness),
            Ok(None) => "there is no CUDA driver or device".to_owned(),
            Err(e) => e.to_string(),
        };
        if std::env::var(REQUIRE_GPU_ENV).as_deref() == Ok("1") {
            panic!("{REQUIRE_GPU_ENV}=1 but {why}");
        }
        eprintln!("GPU test skipped: {why}");
        None
    }

    /// A harness on device 0; `Ok(None)` without a CUDA driver or device.
    pub fn new() -> Result<Option<GpuHarness>> {
        if super::driver::ensure_loaded().is_err() {
            return Ok(None);
        }
        let ctx = match CudaContext::new(0) {
            Ok(ctx) => ctx,
            Err(e) => {
                use cudarc::driver::sys::CUresult::{
                    CUDA_ERROR_INVALID_DEVICE, CUDA_ERROR_NO_DEVICE,
                };
                if matches!(e.0, CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE) {
                    return Ok(None);
                }
                return Err(driver_error("creating a CUDA context on device 0")(e));
            }
        };
        let stream = ctx.new_stream().map_err(driver_error("cuStreamCreate"))?;
        let cache_dir = std::env::temp_dir().join("gpuipc-test-kernel-cache");
        Ok(Some(GpuHarness {
            ctx,
            stream,
            cache_dir,
        }))
    }

    /// What the runner hands `Plugin::create` for a cuda stage. Makes the context current on
    /// this thread first.
    pub fn create_context<'a>(&'a self, stage: &'a str) -> Result<CreateContext<'a>> {
        self.ctx
            .bind_to_thread()
            .map_err(driver_error("cuCtxSetCurrent"))?;
        Ok(CreateContext {
            stage,
            domain: Domain::Cuda,
            device_ordinal: Some(self.ctx.ordinal() as u32),
            cuda_context: self.ctx.cu_ctx() as usize,
            cuda_stream: self.stream.cu_stream() as usize,
            kernel_cache_dir: Some(&self.cache_dir),
        })
    }

    /// What the runner hands `Plugin::process` for a cuda stage.
    pub fn process_context(&self, frame_index: u64) -> ProcessContext {
        ProcessContext {
            frame_index,
            cuda_stream: self.stream.cu_stream() as usize,
        }
    }

    /// The raw stream handle, as a plugin receives it.
    pub fn stream(&self) -> usize {
        self.stream.cu_stream() as usize
    }

    /// A device frame holding a copy of `bytes`.
    pub fn upload(&self, bytes: &[u8]) -> Result<DeviceFrame> {
        let slice = self
            .stream
            .clone_htod(bytes)
            .map_err(driver_error("copying a frame to the device"))?;
        let addr = {
            let (addr, _record) = slice.device_ptr(&self.stream);
            addr
        };
        Ok(DeviceFrame { addr, slice })
    }

    /// The bytes of `frame`, after everything enqueued on the stream so far has finished.
    pub fn download(&self, frame: &DeviceFrame) -> Result<Vec<u8>> {
        self.stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
        let bytes = self
            .stream
            .clone_dtoh(&frame.slice)
            .map_err(driver_error("copying a frame to the host"))?;
        self.stream
            .synchronize()
            .map_err(driver_error("cuStreamSynchronize"))?;
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
            let what = if byte >= p.row_bytes || row >= p.rows {
                "padding"
            } else {
                "pixels"
            };
            format!("plane {i} row {row} byte {byte} ({what})")
        })
        .unwrap_or_else(|| "before the first plane".into());
    Some(format!(
        "{differing} bytes differ; the first at offset {at}, {place}: got {}, want {}",
        got[at], want[at]
    ))
}
