//! The rgb-process stage's cuda path: `kernels/rgb_process.cu` mapping every colour byte of a
//! device frame through the stage's table, uploaded once at create.

use gpuipc_plugin_api::cuda::{self, DeviceTable, Kernel, KernelArg, KernelSource};
use gpuipc_plugin_api::{CreateContext, DeviceBuffer, FrameInfo, Result};

/// The kernel source, compiled with NVRTC when a cuda stage starts.
const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/rgb_process.cu");
/// Threads per block (any works; 128 is what the kernel's header suggests).
const BLOCK_X: u32 = 128;

/// The loaded kernel and the table in device memory.
#[derive(Debug)]
pub struct GpuLut {
    kernel: Kernel,
    table: DeviceTable,
    block_x: u32,
    /// 16-byte pieces of a row per thread (the kernel's header: one).
    per_thread: u32,
}

impl GpuLut {
    /// Compile (or take from the cache) and load the kernel; upload `table`.
    pub fn new(ctx: &CreateContext<'_>, table: &[u8; 256]) -> Result<GpuLut> {
        GpuLut::with_source(ctx, table, SOURCE, BLOCK_X, 1)
    }

    /// [`GpuLut::new`] with another source of the same entry point and arguments, and another
    /// launch shape: `block_x` threads a block, `per_thread` 16-byte pieces of a row a thread.
    /// For `kernel-bench` (kernels/bench), which times candidate kernels through this
    /// launcher.
    pub fn with_source(
        ctx: &CreateContext<'_>,
        table: &[u8; 256],
        source: KernelSource,
        block_x: u32,
        per_thread: u32,
    ) -> Result<GpuLut> {
        let [kernel] = source.load(ctx, ["rgb_process_lut"])?;
        let table = DeviceTable::upload(ctx, table)?;
        Ok(GpuLut { kernel, table, block_x: block_x.max(1), per_thread: per_thread.max(1) })
    }

    /// Enqueue mapping plane 0 of `input` into plane 0 of `output` on `stream`. Both frames
    /// have the same format (rgb8, rgba8 or gray8), which the caller checked.
    pub fn apply(
        &self,
        input: (&FrameInfo, DeviceBuffer),
        output: (&FrameInfo, DeviceBuffer),
        stream: usize,
    ) -> Result<()> {
        let src = cuda::device_plane(input.1, &input.0.layout, 0)?;
        let dst = cuda::device_plane(output.1, &output.0.layout, 0)?;
        // One thread per 16 bytes of a row, one block row per row (grid-stride beyond).
        let grid = cuda::row_grid(dst.row_bytes.div_ceil(16 * u64::from(self.per_thread)), dst.rows, self.block_x);
        self.kernel.launch(
            stream,
            grid,
            (self.block_x, 1, 1),
            0,
            &[
                KernelArg::DevicePtr(src.addr),
                KernelArg::U64(src.pitch),
                KernelArg::DevicePtr(dst.addr),
                KernelArg::U64(dst.pitch),
                KernelArg::U32(output.0.width()),
                KernelArg::U32(output.0.height()),
                // The PixelFormat ABI code: 1 rgb8, 2 rgba8, 3 gray8, as the kernel takes it.
                KernelArg::U32(output.0.format.pixel),
                self.table.arg(),
            ],
        )?;
        Ok(())
    }
}
