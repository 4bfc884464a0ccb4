//! The yuv420 stage's cuda path: `kernels/yuv420.cu` converting a device frame with the
//! fixed-point [`Coefficients`] computed on the CPU.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameInfo, PixelFormat, Result, bail};

use crate::yuv420::{ChromaLayout, Coefficients};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv420.cu");
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;

/// The kernel's `layout` argument: [`ChromaLayout`] in declaration order.
pub fn layout_code(layout: ChromaLayout) -> u32 {
    match layout {
        ChromaLayout::I420 => 0,
        ChromaLayout::Nv12 => 1,
    }
}

/// The loaded kernel.
#[derive(Debug)]
pub struct GpuConverter {
    kernel: Kernel,
    block_x: u32,
    /// Groups of 16 x 2 pixels per thread (the kernel's header: one).
    per_thread: u32,
}

impl GpuConverter {
    /// Compile (or take from the cache) and load the kernel.
    pub fn new(ctx: &CreateContext<'_>) -> Result<GpuConverter> {
        GpuConverter::with_source(ctx, SOURCE, BLOCK_X, 1)
    }

    /// [`GpuConverter::new`] with another source of the same entry point and arguments, and
    /// another launch shape: `block_x` threads a block, `per_thread` groups of 16 x 2 pixels a
    /// thread. For `kernel-bench` (kernels/bench), which times candidate kernels through this
    /// launcher.
    pub fn with_source(
        ctx: &CreateContext<'_>,
        source: KernelSource,
        block_x: u32,
        per_thread: u32,
    ) -> Result<GpuConverter> {
        let [kernel] = source.load(ctx, ["rgb_to_yuv420"])?;
        Ok(GpuConverter { kernel, block_x: block_x.max(1), per_thread: per_thread.max(1) })
    }

    /// Enqueue converting the rgb8/rgba8 device frame `input` into the i420/nv12 device frame
    /// `output` (same size, checked by the caller) on `stream`.
    pub fn convert(
        &self,
        coeffs: &Coefficients,
        input: (&FrameInfo, DeviceBuffer),
        output: (&FrameInfo, DeviceBuffer),
        stream: usize,
    ) -> Result<()> {
        let in_bpp = match input.0.pixel() {
            PixelFormat::Rgb8 => 3,
            PixelFormat::Rgba8 => 4,
            other => bail!("yuv420 takes rgb8 or rgba8 frames; input is {other}"),
        };
        let (layout, out_layout) = (output.0.layout, output.1);
        let src = cuda::device_plane(input.1, &input.0.layout, 0)?;
        let y = cuda::device_plane(out_layout, &layout, 0)?;
        let u = cuda::device_plane(out_layout, &layout, 1)?;
        let (chroma, v_addr, v_pitch) = match output.0.pixel() {
            PixelFormat::I420 => {
                let v = cuda::device_plane(out_layout, &layout, 2)?;
                (ChromaLayout::I420, v.addr, v.pitch)
            }
            // nv12: the v arguments are unused; the header says to pass 0.
            PixelFormat::Nv12 => (ChromaLayout::Nv12, 0, 0),
            other => bail!("yuv420 writes i420 or nv12 frames; output is {other}"),
        };
        let (width, height) = (output.0.width(), output.0.height());
        // One thread per 16 x 2 pixels: ceil(width / 16) threads a row pair, one block row per
        // row pair (grid-stride beyond).
        let per_row = u64::from(width).div_ceil(16 * u64::from(self.per_thread));
        let grid = cuda::row_grid(per_row, u64::from(height).div_ceil(2), self.block_x);
        let c = coeffs;
        self.kernel.launch(
            stream,
            grid,
            (self.block_x, 1, 1),
            0,
            &[
                KernelArg::DevicePtr(src.addr),
                KernelArg::U64(src.pitch),
                KernelArg::U32(in_bpp),
                KernelArg::DevicePtr(y.addr),
                KernelArg::U64(y.pitch),
                KernelArg::DevicePtr(u.addr),
                KernelArg::U64(u.pitch),
                KernelArg::DevicePtr(v_addr),
                KernelArg::U64(v_pitch),
                KernelArg::U32(width),
                KernelArg::U32(height),
                KernelArg::U32(layout_code(chroma)),
                KernelArg::I32(c.y_offset),
                KernelArg::I32(c.y_r),
                KernelArg::I32(c.y_g),
                KernelArg::I32(c.y_b),
                KernelArg::I32(c.u_r),
                KernelArg::I32(c.u_g),
                KernelArg::I32(c.u_b),
                KernelArg::I32(c.v_r),
                KernelArg::I32(c.v_g),
                KernelArg::I32(c.v_b),
            ],
        )?;
        Ok(())
    }
}
