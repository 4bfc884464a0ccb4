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

#[cfg(test)]
mod tests {
    //! The pure arithmetic of kernels/yuv420.cu's fast path, on the CPU (the kernel itself is
    //! checked on a GPU by `gpu_frames_equal_cpu_frames` in yuv420.rs).
    use gpuipc_plugin_api::color::{ColorRange, Matrix};

    use crate::yuv420::Coefficients;

    /// Every matrix and range.
    fn all_coefficients() -> Vec<Coefficients> {
        let mut all = Vec::new();
        for m in [Matrix::Bt709, Matrix::Bt601] {
            for r in [ColorRange::Limited, ColorRange::Full] {
                all.push(Coefficients::new(m, r));
            }
        }
        all
    }

    /// yuv420.cu `fast_coeffs`: the fast path is taken for every matrix and range (else whole
    /// groups would run the general path, correct but twice the instructions).
    #[test]
    fn fast_path_covers_every_matrix_and_range() {
        for c in all_coefficients() {
            let y_max = (i64::from(c.y_offset) << 16) + 255 * i64::from(c.y_r + c.y_g + c.y_b) + 32768;
            assert!((0..=255).contains(&c.y_offset) && y_max < 1 << 24, "{c:?}");
            for k in [c.y_r, c.y_g, c.y_b] {
                assert!((0..=65535).contains(&k), "{c:?}");
            }
            for k in [c.u_r, c.u_g, c.u_b, c.v_r, c.v_g, c.v_b] {
                assert!((-32767..=32768).contains(&k), "{c:?}");
            }
        }
    }

    /// yuv420.cu's fast-path chroma of a whole 2x2 block: accumulate ~(128 one + one / 2)
    /// plus the negated coefficients times the channel sums (one = 2^18), shift right by 18,
    /// clamp to [-256, -1] and invert the low byte; the CPU's `Coefficients::chroma` for n = 4.
    fn chroma_2x2(c: &Coefficients, r: u32, g: u32, b: u32) -> (u8, u8) {
        let start = !(128 * (1 << 18) + (1 << 17));
        let one = |kr: i32, kg: i32, kb: i32| {
            let acc: i32 = start + (-kr) * r as i32 + (-kg) * g as i32 + (-kb) * b as i32;
            !((acc >> 18).clamp(-256, -1) as u8)
        };
        (one(c.u_r, c.u_g, c.u_b), one(c.v_r, c.v_g, c.v_b))
    }

    #[test]
    fn fast_path_chroma_arithmetic_is_the_cpus() {
        // Channel sums of 4 pixels: the corners and edges of the cube, and a grid through it.
        let mut sums: Vec<u32> = (0..=1020).step_by(17).collect();
        sums.extend([0, 1, 2, 3, 508, 509, 510, 511, 512, 1017, 1018, 1019, 1020]);
        for c in all_coefficients() {
            for &r in &sums {
                for &g in &sums {
                    for &b in &sums {
                        assert_eq!(chroma_2x2(&c, r, g, b), c.chroma(r, g, b, 4), "{c:?} {r} {g} {b}");
                    }
                }
            }
        }
    }
}
