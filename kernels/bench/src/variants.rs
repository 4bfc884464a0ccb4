//! Candidate kernels: the production sources with another launch shape, and rewritten
//! sources in `kernels/bench/variants/` with the same entry points and arguments. Each runs
//! through the plugin's own launcher (`with_source`), is checked byte for byte against the
//! CPU reference before it is timed, and is reported beside the production kernel.

use gpuipc_plugin_api::cuda::KernelSource;

/// One way to run a stage's kernel.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    /// "production" for the plugin exactly as it runs.
    pub name: &'static str,
    /// The source, `None` for the plugin's own (through its `new`, which also picks the
    /// launch shape: `block_x` and `per_thread` are then unused).
    pub source: Option<KernelSource>,
    pub block_x: u32,
    /// Units of work a thread, in the launcher's `with_source` units.
    pub per_thread: u32,
    /// Block rows launched per SM of the device (the grid's y capped at this many times the
    /// SM count, the kernel's grid-stride loop covering the other rows); 0: the launcher's
    /// grid. Only the generator's launcher takes it.
    pub blocks_per_sm: u32,
    /// What it changes, for the report.
    pub about: &'static str,
}

const fn production() -> Variant {
    Variant {
        name: "production",
        source: None,
        block_x: 128,
        per_thread: 1,
        blocks_per_sm: 0,
        about: "the plugin as it runs",
    }
}

const fn shape(
    name: &'static str,
    source: KernelSource,
    block_x: u32,
    per_thread: u32,
    about: &'static str,
) -> Variant {
    Variant { name, source: Some(source), block_x, per_thread, blocks_per_sm: 0, about }
}

/// A generator variant whose blocks each draw whole rows: `per_thread` large enough for one
/// block a row of any width (32768 rgba8 pixels: 8192 pieces), and `blocks_per_sm` blocks a
/// SM in all, striding over the rows.
const fn rows(
    name: &'static str,
    source: KernelSource,
    block_x: u32,
    blocks_per_sm: u32,
    about: &'static str,
) -> Variant {
    Variant { name, source: Some(source), block_x, per_thread: 8192 / block_x, blocks_per_sm, about }
}

const GENERATOR_ROWS_CU: KernelSource = gpuipc_plugin_api::kernel_source!(".", "variants/generator_rows.cu");

const GENERATOR_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/generator.cu");
const RGB_PROCESS_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/rgb_process.cu");
const YUV420_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv420.cu");
const YUV_TO_RGB_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv_to_rgb.cu");

pub const GENERATOR: &[Variant] = &[
    production(),
    shape("block256", GENERATOR_CU, 256, 1, "production source, 256-thread blocks"),
    shape("before", GENERATOR_CU, 128, 1, "the launch before: one 16-byte piece a thread"),
    shape("stride8", GENERATOR_CU, 128, 8, "production source, an eighth of the threads (grid-stride, 8 pieces each)"),
    shape(
        "stride16",
        GENERATOR_CU,
        128,
        16,
        "production source, a sixteenth of the threads (grid-stride, 16 pieces each)",
    ),
    shape("stride8-b256", GENERATOR_CU, 256, 8, "stride8 with 256-thread blocks"),
    shape("stride16-b256", GENERATOR_CU, 256, 16, "stride16 with 256-thread blocks"),
    rows(
        "prod-rows-sm4",
        GENERATOR_CU,
        256,
        4,
        "production source with rows's grid: one 256-thread block a row, 4 blocks a SM striding over the rows (the grid alone)",
    ),
    rows(
        "rows-sm2",
        GENERATOR_ROWS_CU,
        256,
        2,
        "a block draws whole rows, thread t pieces t + k blockDim (a warp: 512 contiguous bytes), 4 computed before storing; 256-thread blocks, 2 a SM striding over the rows",
    ),
    rows("rows-sm4", GENERATOR_ROWS_CU, 256, 4, "rows, 256-thread blocks, 4 a SM"),
    rows("rows-sm8", GENERATOR_ROWS_CU, 256, 8, "rows, 256-thread blocks, 8 a SM (all 2048 threads of a SM)"),
    rows("rows-b512-sm2", GENERATOR_ROWS_CU, 512, 2, "rows, 512-thread blocks, 2 a SM"),
    rows("rows-b512-sm4", GENERATOR_ROWS_CU, 512, 4, "rows, 512-thread blocks, 4 a SM (all 2048 threads of a SM)"),
    rows(
        "rows-all",
        GENERATOR_ROWS_CU,
        256,
        0,
        "rows source with one 256-thread block a row (the launcher's grid): the source alone",
    ),
    shape(
        "px16",
        gpuipc_plugin_api::kernel_source!(".", "variants/generator_px16.cu"),
        128,
        3,
        "thread per 16 pixels (48 bytes, 3 uint4 stores): no /3, no 64-bit funnel shifts",
    ),
];

pub const RGB_PROCESS: &[Variant] = &[
    production(),
    shape("block256", RGB_PROCESS_CU, 256, 1, "production source, 256-thread blocks"),
    shape(
        "ilp2",
        gpuipc_plugin_api::kernel_source!(".", "variants/rgb_process_ilp2.cu"),
        128,
        2,
        "two uint4 loads in flight a thread (pieces k and k + stride), table as words",
    ),
    shape(
        "ilp4",
        gpuipc_plugin_api::kernel_source!(".", "variants/rgb_process_ilp2.cu"),
        128,
        4,
        "ilp2's source with 4 pieces a thread (two rounds of two)",
    ),
];

pub const YUV420: &[Variant] = &[
    production(),
    shape("block64", YUV420_CU, 64, 1, "production source, 64-thread blocks (more blocks a row pair)"),
    shape("block256", YUV420_CU, 256, 1, "production source, 256-thread blocks"),
    shape("stride2", YUV420_CU, 128, 2, "production source, half the threads (grid-stride)"),
    shape(
        "before",
        gpuipc_plugin_api::kernel_source!(".", "variants/yuv420_before.cu"),
        128,
        1,
        "yuv420.cu before the dp2a fast path (same 16 x 2 pixels a thread and uint4 loads/stores; byte extraction, multiply-adds, clamps and selects for every group)",
    ),
];

pub const YUV_TO_RGB: &[Variant] = &[
    production(),
    shape("block256", YUV_TO_RGB_CU, 256, 8, "production source, 256-thread blocks"),
    shape(
        "before",
        gpuipc_plugin_api::kernel_source!(".", "variants/yuv_to_rgb_before.cu"),
        128,
        1,
        "yuv_to_rgb.cu before 16 x 2 pixels a thread: a thread per chroma sample (2 x 2 pixels), byte loads and stores",
    ),
];
