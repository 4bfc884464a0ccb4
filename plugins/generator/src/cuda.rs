//! The generator's cuda path: `kernels/generator.cu` drawing a frame straight into device
//! memory, with the per-frame values (noise hash state, box corner) computed by the CPU code.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameLayout, PixelFormat, Result, bail};

use crate::generator::{Pattern, PatternFrame};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/generator.cu");
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;

/// The entry point drawing `pixel` frames.
pub fn entry_point(pixel: PixelFormat) -> Result<&'static str> {
    Ok(match pixel {
        PixelFormat::Rgb8 => "gen_rgb8",
        PixelFormat::Rgba8 => "gen_rgba8",
        PixelFormat::Gray8 => "gen_gray8",
        other => bail!("the generator does not make {other} frames"),
    })
}

/// The kernel's `pattern` argument: [`Pattern`] in declaration order.
pub fn pattern_code(pattern: Pattern) -> u32 {
    match pattern {
        Pattern::Bars => 0,
        Pattern::Gradient => 1,
        Pattern::Noise => 2,
        Pattern::Box => 3,
    }
}

/// The loaded kernel for one output format.
#[derive(Debug)]
pub struct GpuGenerator {
    kernel: Kernel,
}

impl GpuGenerator {
    /// Compile (or take from the cache) and load the kernel drawing `pixel` frames.
    pub fn new(ctx: &CreateContext<'_>, pixel: PixelFormat) -> Result<GpuGenerator> {
        let [kernel] = SOURCE.load(ctx, [entry_point(pixel)?])?;
        Ok(GpuGenerator { kernel })
    }

    /// Enqueue drawing `frame` into plane 0 of the device frame `out` on `stream`.
    pub fn draw(&self, frame: &PatternFrame, out: DeviceBuffer, layout: &FrameLayout, stream: usize) -> Result<()> {
        let plane = cuda::device_plane(out, layout, 0)?;
        // One thread per 16 bytes of a row, one block row per row (grid-stride beyond).
        let grid = cuda::row_grid(plane.row_bytes.div_ceil(16), plane.rows, BLOCK_X);
        let place = frame.box_place;
        self.kernel.launch(
            stream,
            grid,
            (BLOCK_X, 1, 1),
            0,
            &[
                KernelArg::DevicePtr(plane.addr),
                KernelArg::U64(plane.pitch),
                KernelArg::U32(frame.width),
                KernelArg::U32(frame.height),
                KernelArg::U32(pattern_code(frame.pattern)),
                KernelArg::U64(frame.seq),
                KernelArg::U32(frame.noise_state),
                KernelArg::U32(place.x0),
                KernelArg::U32(place.y0),
                KernelArg::U32(place.box_width),
                KernelArg::U32(place.box_height),
            ],
        )?;
        Ok(())
    }
}
