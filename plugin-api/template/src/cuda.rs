//! The sepia stage's cuda path: `sepia.cu`, next to this file, compiled with NVRTC when a cuda
//! stage starts (and cached), launched on the stage's stream.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameInfo, Result};

/// The kernel source, `src/sepia.cu`, built into the library and named `sepia.cu` in NVRTC's
/// messages and the kernel cache.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("src", "sepia.cu");
/// Threads per block.
const BLOCK_X: u32 = 128;

/// The loaded kernel.
#[derive(Debug)]
pub struct GpuSepia {
    kernel: Kernel,
}

impl GpuSepia {
    /// Compile (or take from the cache) and load the kernel into the stage's context.
    pub fn new(ctx: &CreateContext<'_>) -> Result<GpuSepia> {
        let [kernel] = SOURCE.load(ctx, ["sepia"])?;
        Ok(GpuSepia { kernel })
    }

    /// Enqueue toning `input` into `output` (the same rgb8 or rgba8 format and size, which
    /// the caller checked) on `stream`, the stage's. Returns without waiting for the GPU.
    pub fn tone(
        &self,
        input: (&FrameInfo, DeviceBuffer),
        output: (&FrameInfo, DeviceBuffer),
        k: u32,
        stream: usize,
    ) -> Result<()> {
        // Checked against each frame's buffer, so the kernel stays inside them.
        let src = cuda::device_plane(input.1, &input.0.layout, 0)?;
        let dst = cuda::device_plane(output.1, &output.0.layout, 0)?;
        let (width, height) = (output.0.width(), output.0.height());
        let channels = output
            .0
            .pixel()
            .bytes_per_pixel()
            .expect("rgb8 and rgba8 are packed");
        self.kernel.launch(
            stream,
            cuda::row_grid(width as u64, height as u64, BLOCK_X),
            (BLOCK_X, 1, 1),
            0,
            &[
                KernelArg::DevicePtr(src.addr),
                KernelArg::U64(src.pitch),
                KernelArg::DevicePtr(dst.addr),
                KernelArg::U64(dst.pitch),
                KernelArg::U32(width),
                KernelArg::U32(height),
                KernelArg::U32(channels),
                KernelArg::U32(k),
            ],
        )?;
        Ok(())
    }
}
