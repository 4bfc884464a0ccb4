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
}

impl GpuLut {
    /// Compile (or take from the cache) and load the kernel; upload `table`.
    pub fn new(ctx: &CreateContext<'_>, table: &[u8; 256]) -> Result<GpuLut> {
        let [kernel] = SOURCE.load(ctx, ["rgb_process_lut"])?;
        let table = DeviceTable::upload(ctx, table)?;
        Ok(GpuLut { kernel, table })
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
        let grid = cuda::row_grid(dst.row_bytes.div_ceil(16), dst.rows, BLOCK_X);
        self.kernel.launch(
            stream,
            grid,
            (BLOCK_X, 1, 1),
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
