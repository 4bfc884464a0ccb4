//! The yuv-to-rgb stage's cuda path: `kernels/yuv_to_rgb.cu` converting a device frame with
//! the fixed-point [`Coefficients`] computed on the CPU.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameInfo, PixelFormat, Result, bail};

use crate::yuv_to_rgb::{Coefficients, sample_bits};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv_to_rgb.cu");
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;
/// Chroma samples of a row pair per `yuv420_to_rgb` thread: the kernel's header, one thread per
/// 16 x 2 pixels.
const PER_THREAD: u32 = 8;

/// The `layout` argument of `yuv420_to_rgb`, the entry point for 8-bit input: 0 i420, 1 nv12;
/// `None` for other formats (`p010` has an entry point of its own, `p010_to_rgb`).
pub fn layout_code(pixel: PixelFormat) -> Option<u32> {
    match pixel {
        PixelFormat::I420 => Some(0),
        PixelFormat::Nv12 => Some(1),
        _ => None,
    }
}

/// The loaded kernels.
#[derive(Debug)]
pub struct GpuConverter {
    /// `yuv420_to_rgb`, for 8-bit input (`i420`, `nv12`).
    yuv420: Kernel,
    /// `p010_to_rgb`, for 10-bit input (`p010`).
    p010: Kernel,
    block_x: u32,
    /// Chroma samples (2 x 2 pixels) of a row pair per `yuv420_to_rgb` thread (the kernel's
    /// header: 8). `p010_to_rgb` always takes one a thread.
    per_thread: u32,
}

impl GpuConverter {
    /// Compile (or take from the cache) and load the kernels.
    pub fn new(ctx: &CreateContext<'_>) -> Result<GpuConverter> {
        GpuConverter::with_source(ctx, SOURCE, BLOCK_X, PER_THREAD)
    }

    /// [`GpuConverter::new`] with another source of the same entry points and arguments, and
    /// another launch shape: `block_x` threads a block, `per_thread` chroma samples of a row
    /// pair a `yuv420_to_rgb` thread (`p010_to_rgb` is launched with one a thread whatever
    /// `per_thread` is, as the header says). For `kernel-bench` (kernels/bench), which times
    /// candidate kernels through this launcher.
    pub fn with_source(
        ctx: &CreateContext<'_>,
        source: KernelSource,
        block_x: u32,
        per_thread: u32,
    ) -> Result<GpuConverter> {
        let [yuv420, p010] = source.load(ctx, ["yuv420_to_rgb", "p010_to_rgb"])?;
        Ok(GpuConverter { yuv420, p010, block_x: block_x.max(1), per_thread: per_thread.max(1) })
    }

    /// Enqueue converting the i420/nv12/p010 device frame `input` into the rgb8/rgba8 device
    /// frame `output` (same size, checked by the caller) on `stream`. `coeffs` must be made by
    /// [`Coefficients::for_bits`] for the input's [`sample_bits`]: the kernels take their
    /// `c_offset` and `frac_bits` from the entry point.
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
        let pixel = input.0.pixel();
        let Some(bits) = sample_bits(pixel) else {
            bail!("yuv-to-rgb takes i420, nv12 or p010 frames; input is {pixel}")
        };
        if coeffs.sample_bits() != bits {
            bail!("coefficients for {}-bit samples cannot convert {pixel} frames", coeffs.sample_bits());
        }
        if !coeffs.has_standard_depth() {
            bail!(
                "the kernels take c_offset and frac_bits from the input format; these coefficients have {} and {}",
                coeffs.c_offset,
                coeffs.frac_bits
            );
        }
        let y = cuda::device_plane(in_buffer, &layout, 0)?;
        let u = cuda::device_plane(in_buffer, &layout, 1)?;
        let dst = cuda::device_plane(output.1, &output.0.layout, 0)?;
        let (width, height) = (output.0.width(), output.0.height());
        // yuv420_to_rgb: one thread per `per_thread` chroma samples (8: 16 x 2 pixels);
        // p010_to_rgb: one per chroma sample. ceil(width / (2 per_thread)) threads a row pair,
        // one block row per row pair (grid-stride beyond).
        let per_thread = if layout_code(pixel).is_some() { self.per_thread } else { 1 };
        let per_row = u64::from(width).div_ceil(2 * u64::from(per_thread));
        let grid = cuda::row_grid(per_row, u64::from(height).div_ceil(2), self.block_x);
        let c = coeffs;
        let coefficients = [c.y_offset, c.y_mul, c.r_v, c.g_u, c.g_v, c.b_u].map(KernelArg::I32);
        let planes = [
            KernelArg::DevicePtr(y.addr),
            KernelArg::U64(y.pitch),
            KernelArg::DevicePtr(u.addr),
            KernelArg::U64(u.pitch),
        ];
        let (kernel, args) = match layout_code(pixel) {
            Some(code) => {
                // nv12: the v arguments are unused; the header says to pass 0.
                let (v_addr, v_pitch) = match pixel {
                    PixelFormat::I420 => {
                        let v = cuda::device_plane(in_buffer, &layout, 2)?;
                        (v.addr, v.pitch)
                    }
                    _ => (0, 0),
                };
                let rest = [
                    KernelArg::DevicePtr(v_addr),
                    KernelArg::U64(v_pitch),
                    KernelArg::DevicePtr(dst.addr),
                    KernelArg::U64(dst.pitch),
                    KernelArg::U32(out_bpp),
                    KernelArg::U32(width),
                    KernelArg::U32(height),
                    KernelArg::U32(code),
                ];
                (&self.yuv420, [&planes[..], &rest, &coefficients].concat())
            }
            None => {
                let rest = [
                    KernelArg::DevicePtr(dst.addr),
                    KernelArg::U64(dst.pitch),
                    KernelArg::U32(out_bpp),
                    KernelArg::U32(width),
                    KernelArg::U32(height),
                ];
                (&self.p010, [&planes[..], &rest, &coefficients].concat())
            }
        };
        kernel.launch(stream, grid, (self.block_x, 1, 1), 0, &args)?;
        Ok(())
    }
}
