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
    /// What it changes, for the report.
    pub about: &'static str,
}

const fn production() -> Variant {
    Variant { name: "production", source: None, block_x: 128, per_thread: 1, about: "the plugin as it runs" }
}

const fn shape(
    name: &'static str,
    source: KernelSource,
    block_x: u32,
    per_thread: u32,
    about: &'static str,
) -> Variant {
    Variant { name, source: Some(source), block_x, per_thread, about }
}

const GENERATOR_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/generator.cu");
const RGB_PROCESS_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/rgb_process.cu");
const YUV420_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv420.cu");
const YUV_TO_RGB_CU: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/yuv_to_rgb.cu");

pub const GENERATOR: &[Variant] = &[
    production(),
    shape("block256", GENERATOR_CU, 256, 1, "production source, 256-thread blocks"),
    shape("stride4", GENERATOR_CU, 128, 4, "production source, a quarter of the threads (grid-stride, 4 pieces each)"),
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
