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
    /// The source, `None` for the plugin's own (through its `new`).
    pub source: Option<KernelSource>,
    pub block_x: u32,
    /// Units of work a thread (the kernel header's "one thread per ...").
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
const YUV420_2X2_CU: KernelSource = gpuipc_plugin_api::kernel_source!(".", "variants/yuv420_2x2.cu");
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
        "2x2-dp2a",
        YUV420_2X2_CU,
        128,
        1,
        "production's 16 x 2 pixels a thread and uint4 loads/stores; Y two dp2a a pixel, U and V three a block row, no clamps or selects on whole groups (about half the instructions)",
    ),
    shape("2x2-dp2a-b64", YUV420_2X2_CU, 64, 1, "2x2-dp2a with 64-thread blocks (two blocks a 1080p row pair)"),
];

pub const YUV_TO_RGB: &[Variant] = &[
    production(),
    shape("block256", YUV_TO_RGB_CU, 256, 1, "production source, 256-thread blocks"),
    shape(
        "x16",
        gpuipc_plugin_api::kernel_source!(".", "variants/yuv_to_rgb_x16.cu"),
        128,
        8,
        "thread per 16 x 2 pixels: uint4 Y loads, uint4 RGB stores (byte path where misaligned)",
    ),
];

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::color::{ColorRange, Matrix};
    use gpuipc_yuv420::yuv420::Coefficients;

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

    /// yuv420_2x2.cu `fast_coeffs`: the whole-group path is taken for every matrix and range
    /// (else the variant would time production's code).
    #[test]
    fn yuv420_2x2_fast_path_covers_every_matrix_and_range() {
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

    /// yuv420_2x2.cu's chroma of a whole 2x2 block: accumulate ~(128 one + one / 2) plus the
    /// negated coefficients times the channel sums (one = 2^18), shift right by 18, clamp to
    /// [-256, -1] and invert the low byte; the CPU's `Coefficients::chroma` for n = 4.
    fn chroma_2x2(c: &Coefficients, r: u32, g: u32, b: u32) -> (u8, u8) {
        let start = !(128 * (1 << 18) + (1 << 17));
        let one = |kr: i32, kg: i32, kb: i32| {
            let acc: i32 = start + (-kr) * r as i32 + (-kg) * g as i32 + (-kb) * b as i32;
            !((acc >> 18).clamp(-256, -1) as u8)
        };
        (one(c.u_r, c.u_g, c.u_b), one(c.v_r, c.v_g, c.v_b))
    }

    #[test]
    fn yuv420_2x2_chroma_arithmetic_is_the_cpus() {
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
