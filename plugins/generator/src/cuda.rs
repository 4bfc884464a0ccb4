//! The generator's cuda path: `kernels/generator.cu` drawing a frame straight into device
//! memory, with the per-frame values (noise hash state, box corner) computed by the CPU code.

use gpuipc_plugin_api::cuda::{self, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameLayout, PixelFormat, Result, bail};

use crate::generator::{Pattern, PatternFrame};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/generator.cu");
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;
/// 16-byte pieces of a row each thread stores (the kernel's grid-stride loop): 4 drew a 4K
/// rgb8 frame in 11.74 µs against 12.75 with 1 on an H100 (75 % of a 64 MiB copy's bandwidth
/// against 69 %; 8 and 16 no better; 1080p even: docs/benchmarks.md, "The kernels on their
/// own").
const PER_THREAD: u32 = 4;

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
    block_x: u32,
    /// 16-byte pieces of a row per thread (the kernel's header: one).
    per_thread: u32,
    /// The most block rows launched (the kernel's grid-stride loop covers the other rows);
    /// 0: one a row, as the header says.
    max_grid_y: u32,
}

impl GpuGenerator {
    /// Compile (or take from the cache) and load the kernel drawing `pixel` frames.
    pub fn new(ctx: &CreateContext<'_>, pixel: PixelFormat) -> Result<GpuGenerator> {
        GpuGenerator::with_source(ctx, pixel, SOURCE, BLOCK_X, PER_THREAD)
    }

    /// [`GpuGenerator::new`] with another source of the same entry points and arguments, and
    /// another launch shape: `block_x` threads a block, `per_thread` 16-byte pieces of a row
    /// a thread. For `kernel-bench` (kernels/bench), which times candidate kernels through
    /// this launcher.
    pub fn with_source(
        ctx: &CreateContext<'_>,
        pixel: PixelFormat,
        source: KernelSource,
        block_x: u32,
        per_thread: u32,
    ) -> Result<GpuGenerator> {
        let [kernel] = source.load(ctx, [entry_point(pixel)?])?;
        Ok(GpuGenerator { kernel, block_x: block_x.max(1), per_thread: per_thread.max(1), max_grid_y: 0 })
    }

    /// Launch at most `max_grid_y` block rows (0: one a row, the default), the kernel's
    /// grid-stride loop over rows covering the rest: a grid of a few blocks per SM rather than
    /// one block row per row. For `kernel-bench` (kernels/bench).
    pub fn with_max_grid_y(mut self, max_grid_y: u32) -> GpuGenerator {
        self.max_grid_y = max_grid_y;
        self
    }

    /// Enqueue drawing `frame` into plane 0 of the device frame `out` on `stream`.
    pub fn draw(&self, frame: &PatternFrame, out: DeviceBuffer, layout: &FrameLayout, stream: usize) -> Result<()> {
        let plane = cuda::device_plane(out, layout, 0)?;
        // One thread per 16 bytes of a row, one block row per row (grid-stride beyond).
        let mut grid =
            cuda::row_grid(plane.row_bytes.div_ceil(16 * u64::from(self.per_thread)), plane.rows, self.block_x);
        if self.max_grid_y > 0 {
            grid.1 = grid.1.min(self.max_grid_y);
        }
        let place = frame.box_place;
        self.kernel.launch(
            stream,
            grid,
            (self.block_x, 1, 1),
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
