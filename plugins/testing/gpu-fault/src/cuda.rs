//! The test-gpu-fault stage's cuda path: `kernels/gpu_fault.cu` copying every plane of a
//! device frame, and the kernel that faults on purpose.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, Error, FrameInfo, Result, bail};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../../..", "kernels/gpu_fault.cu");
/// Threads per block of the copy (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;

/// How [`GpuFault::poison`] faults: the kernel's `how` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poison {
    /// Write one byte at device address 0, which no allocation (and, with HMM or ATS, no host
    /// mapping: Linux never maps the first page) covers: CUDA_ERROR_ILLEGAL_ADDRESS.
    IllegalAddress,
    /// `__trap()`: a launch failure.
    Trap,
}

/// The loaded kernels.
#[derive(Debug)]
pub struct GpuFault {
    /// `gpu_fault_copy`, copying one plane.
    copy: Kernel,
    /// `gpu_fault_poison`, which faults.
    poison: Kernel,
    /// `gpu_fault_busy`, which keeps one SM busy for a given time.
    busy: Kernel,
}

impl GpuFault {
    /// Compile (or take from the cache) and load both kernels, whatever the mode, so that a
    /// stage asked to fault fails at frame `at` and not earlier.
    pub fn new(ctx: &CreateContext<'_>) -> Result<GpuFault> {
        let [copy, poison, busy] = SOURCE.load(ctx, ["gpu_fault_copy", "gpu_fault_poison", "gpu_fault_busy"])?;
        Ok(GpuFault { copy, poison, busy })
    }

    /// Enqueue copying every plane of `input` into `output` on `stream`, row by row, padding
    /// untouched. Both frames have the same format, which the caller checked; their pitches
    /// and plane offsets may differ.
    pub fn copy(
        &self,
        input: (&FrameInfo, DeviceBuffer),
        output: (&FrameInfo, DeviceBuffer),
        stream: usize,
    ) -> Result<()> {
        for index in 0..output.0.layout.planes().len() {
            let src = cuda::device_plane(input.1, &input.0.layout, index)?;
            let dst = cuda::device_plane(output.1, &output.0.layout, index)?;
            if (src.row_bytes, src.rows) != (dst.row_bytes, dst.rows) {
                bail!(
                    "plane {index}: the input has {} rows of {} bytes, the output {} rows of {}",
                    src.rows,
                    src.row_bytes,
                    dst.rows,
                    dst.row_bytes
                );
            }
            let too_big = |what: &str| Error::new(format!("plane {index}: {what} does not fit in 32 bits"));
            let row_bytes = u32::try_from(dst.row_bytes).map_err(|_| too_big("row_bytes"))?;
            let rows = u32::try_from(dst.rows).map_err(|_| too_big("rows"))?;
            // One thread per 16 bytes of a row, one block row per row (grid-stride beyond).
            let grid = cuda::row_grid(dst.row_bytes.div_ceil(16), dst.rows, BLOCK_X);
            self.copy.launch(
                stream,
                grid,
                (BLOCK_X, 1, 1),
                0,
                &[
                    KernelArg::DevicePtr(src.addr),
                    KernelArg::U64(src.pitch),
                    KernelArg::DevicePtr(dst.addr),
                    KernelArg::U64(dst.pitch),
                    KernelArg::U32(row_bytes),
                    KernelArg::U32(rows),
                ],
            )?;
        }
        Ok(())
    }

    /// Enqueue the kernel that faults on `stream`. Returns once it is enqueued: the fault
    /// surfaces later, in whichever CUDA call of the stage comes after the kernel ran.
    pub fn poison(&self, how: Poison, stream: usize) -> Result<()> {
        let (target, how) = match how {
            Poison::IllegalAddress => (0, 1),
            Poison::Trap => (0, 2),
        };
        self.poison.launch(stream, (1, 1, 1), (1, 1, 1), 0, &[KernelArg::DevicePtr(target), KernelArg::U32(how)])?;
        Ok(())
    }

    /// Enqueue a kernel of `blocks` blocks of one warp each that spin for `micros`
    /// microseconds on `stream`.
    pub fn busy(&self, micros: u64, blocks: u32, stream: usize) -> Result<()> {
        self.busy.launch(stream, (blocks, 1, 1), (32, 1, 1), 0, &[KernelArg::U64(micros.saturating_mul(1000))])?;
        Ok(())
    }
}
