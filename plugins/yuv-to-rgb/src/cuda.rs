//! The yuv-to-rgb stage's cuda path: `kernels/yuv_to_rgb.cu` converting a device frame with
//! the fixed-point [`Coefficients`] computed on the CPU.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, Kernels};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameInfo, PixelFormat, Result, bail};

use crate::yuv_to_rgb::Coefficients;

/// The kernel source, compiled with NVRTC when a cuda stage starts.
pub const SOURCE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../kernels/yuv_to_rgb.cu"
));
/// How the source is named in NVRTC's messages and the kernel cache.
pub const FILE_NAME: &str = "kernels/yuv_to_rgb.cu";
/// The kernel's entry point.
pub const ENTRY_POINT: &str = "yuv420_to_rgb";
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;

/// The kernel's `layout` argument: 0 i420, 1 nv12.
pub fn layout_code(pixel: PixelFormat) -> Option<u32> {
    match pixel {
        PixelFormat::I420 => Some(0),
        PixelFormat::Nv12 => Some(1),
        _ => None,
    }
}

/// The loaded kernel.
#[derive(Debug)]
pub struct GpuConverter {
    kernel: Kernel,
}

impl GpuConverter {
    /// Compile (or take from the cache) and load the kernel.
    pub fn new(ctx: &CreateContext<'_>) -> Result<GpuConverter> {
        let kernels = Kernels::load(ctx, FILE_NAME, SOURCE, &[ENTRY_POINT])?;
        Ok(GpuConverter {
            kernel: kernels.get(ENTRY_POINT)?.clone(),
        })
    }

    /// Enqueue converting the i420/nv12 device frame `input` into the rgb8/rgba8 device frame
    /// `output` (same size, checked by the caller) on `stream`.
    pub fn convert(
        &self,
        coeffs: &Coefficients,
        input: (&FrameInfo, DeviceBuffer),
        output: (&FrameInfo, DeviceBuffer),
        stream: usize,
    ) -> Result<()> {
        let out_bpp = match output.0.pixel() {
            PixelFormat::Rgb8 => 3,
            PixelFormat::Rgba8 => 4,
            other => bail!("yuv-to-rgb writes rgb8 or rgba8 frames; output is {other}"),
        };
        let (layout, in_buffer) = (input.0.layout, input.1);
        let Some(code) = layout_code(input.0.pixel()) else {
            bail!("yuv-to-rgb takes i420 or nv12 frames; input is {}", input.0.pixel())
        };
        let y = cuda::device_plane(in_buffer, &layout, 0)?;
        let u = cuda::device_plane(in_buffer, &layout, 1)?;
        // nv12: the v arguments are unused; the header says to pass 0.
        let (v_addr, v_pitch) = match input.0.pixel() {
            PixelFormat::I420 => {
                let v = cuda::device_plane(in_buffer, &layout, 2)?;
                (v.addr, v.pitch)
            }
            _ => (0, 0),
        };
        let dst = cuda::device_plane(output.1, &output.0.layout, 0)?;
        let (width, height) = (output.0.width(), output.0.height());
        // One thread per chroma sample: ceil(width / 2) threads a row pair, one block row per
        // row pair (grid-stride beyond).
        let grid = cuda::row_grid(
            u64::from(width).div_ceil(2),
            u64::from(height).div_ceil(2),
            BLOCK_X,
        );
        let c = coeffs;
        self.kernel.launch(
            stream,
            grid,
            (BLOCK_X, 1, 1),
            0,
            &[
                KernelArg::DevicePtr(y.addr),
                KernelArg::U64(y.pitch),
                KernelArg::DevicePtr(u.addr),
                KernelArg::U64(u.pitch),
                KernelArg::DevicePtr(v_addr),
                KernelArg::U64(v_pitch),
                KernelArg::DevicePtr(dst.addr),
                KernelArg::U64(dst.pitch),
                KernelArg::U32(out_bpp),
                KernelArg::U32(width),
                KernelArg::U32(height),
                KernelArg::U32(code),
                KernelArg::I32(c.y_offset),
                KernelArg::I32(c.y_mul),
                KernelArg::I32(c.r_v),
                KernelArg::I32(c.g_u),
                KernelArg::I32(c.g_v),
                KernelArg::I32(c.b_u),
            ],
        )
    }
}
