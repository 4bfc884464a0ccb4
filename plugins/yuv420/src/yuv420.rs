//! The yuv420 stage: its params, the fixed-point coefficients and the reference conversion
//! loop (the stage runs the faster loops of [`crate::cpu`]).

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

/// The `matrix` and `range` params, shared with yuv-to-rgb.
pub use gpuipc_plugin_api::color::{ColorRange, Matrix};
use gpuipc_plugin_api::color::{matrix_param, range_param};

use crate::bands;
use crate::cpu::RowCoefficients;
use crate::cuda::GpuConverter;

/// Fractional bits of the fixed-point coefficients.
pub const FRAC_BITS: u32 = 16;

/// The `params` table of a yuv420 stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Luma weights. Default `bt709`.
    pub matrix: Matrix,
    /// Signal range. Default `limited`.
    pub range: ColorRange,
    /// How the chroma planes are stored. Default `i420`.
    pub layout: ChromaLayout,
    /// Threads converting a frame in the cpu domain, 0..=[`bands::MAX_THREADS`]; 0 is a share
    /// of the cores ([`bands::thread_count`]). Default 0.
    pub threads: u32,
}

impl Params {
    /// Check the values serde cannot, reporting every problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        bands::check_threads_param(self.threads, &mut problems);
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }
}

/// The `layout` param.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChromaLayout {
    /// Y plane, U plane, V plane.
    #[default]
    I420,
    /// Y plane, then one plane of U, V pairs.
    Nv12,
}

impl ChromaLayout {
    pub fn pixel(self) -> PixelFormat {
        match self {
            ChromaLayout::I420 => PixelFormat::I420,
            ChromaLayout::Nv12 => PixelFormat::Nv12,
        }
    }
}

/// The fixed-point conversion: multipliers of R, G, B scaled by 2^[`FRAC_BITS`], each
/// rounded to the nearest integer on its own. A GPU kernel takes these as arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coefficients {
    /// 16 (limited) or 0 (full).
    pub y_offset: i32,
    pub y_r: i32,
    pub y_g: i32,
    pub y_b: i32,
    pub u_r: i32,
    pub u_g: i32,
    pub u_b: i32,
    pub v_r: i32,
    pub v_g: i32,
    pub v_b: i32,
}

impl Coefficients {
    pub fn new(matrix: Matrix, range: ColorRange) -> Coefficients {
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let (y_offset, y_scale, c_scale) = match range {
            ColorRange::Full => (0, 1.0, 1.0),
            ColorRange::Limited => (16, 219.0 / 255.0, 224.0 / 255.0),
        };
        let fixed = |x: f64| (x * (1 << FRAC_BITS) as f64).round() as i32;
        let (cb_div, cr_div) = (2.0 * (1.0 - kb), 2.0 * (1.0 - kr));
        Coefficients {
            y_offset,
            y_r: fixed(kr * y_scale),
            y_g: fixed(kg * y_scale),
            y_b: fixed(kb * y_scale),
            // Cb = (B - Y') / (2 (1 - Kb)) = (-Kr R - Kg G + (1 - Kb) B) / (2 (1 - Kb))
            u_r: fixed(-kr / cb_div * c_scale),
            u_g: fixed(-kg / cb_div * c_scale),
            u_b: fixed(0.5 * c_scale),
            // Cr = (R - Y') / (2 (1 - Kr)) = ((1 - Kr) R - Kg G - Kb B) / (2 (1 - Kr))
            v_r: fixed(0.5 * c_scale),
            v_g: fixed(-kg / cr_div * c_scale),
            v_b: fixed(-kb / cr_div * c_scale),
        }
    }

    /// Y of one pixel: `((y_offset << 16) + y_r R + y_g G + y_b B + 32768) >> 16`, clamped.
    pub fn luma(&self, r: u8, g: u8, b: u8) -> u8 {
        let (r, g, b) = (r as i32, g as i32, b as i32);
        let sum = (self.y_offset << FRAC_BITS) + self.y_r * r + self.y_g * g + self.y_b * b + (1 << (FRAC_BITS - 1));
        (sum.max(0) >> FRAC_BITS).min(255) as u8
    }

    /// (U, V) of a block of `n` pixels (1, 2 or 4) whose channels sum to `r`, `g`, `b`: the
    /// mean, rounded half up, clamped to 0..=255.
    pub fn chroma(&self, r: u32, g: u32, b: u32, n: u32) -> (u8, u8) {
        let (r, g, b) = (r as i64, g as i64, b as i64);
        let one = (n as i64) << FRAC_BITS;
        let value = |cr: i32, cg: i32, cb: i32| {
            let num = 128 * one + cr as i64 * r + cg as i64 * g + cb as i64 * b + one / 2;
            // Clamping a negative numerator to 0 first makes truncating division a floor.
            (num.max(0) / one).min(255) as u8
        };
        (value(self.u_r, self.u_g, self.u_b), value(self.v_r, self.v_g, self.v_b))
    }
}

/// Convert one RGB frame (`rgb8` or `rgba8`, host memory) into `output` (`i420` or `nv12` of
/// the same size, host memory): the reference, pixel by pixel and block by block on one
/// thread, that `kernels/yuv420.cu` mirrors. The stage runs [`crate::cpu::convert`], which
/// writes the same bytes faster (its tests compare the two).
pub fn convert(coeffs: &Coefficients, input: &InputFrame<'_>, output: &mut OutputFrame<'_>) -> Result<()> {
    let bpp = match input.info.pixel() {
        PixelFormat::Rgb8 => 3,
        PixelFormat::Rgba8 => 4,
        other => bail!("yuv420 takes rgb8 or rgba8 frames; input is {other}"),
    };
    let (width, height) = (input.info.width() as usize, input.info.height() as usize);
    if (output.info().width() as usize, output.info().height() as usize) != (width, height) {
        bail!("output frame is {}, input is {}", output.info().format, input.info.format);
    }
    let out_pixel = output.info().pixel();
    let host_only = || Error::new("yuv420 reads and writes host memory only (cpu domain)");
    let src = input.plane(0).ok_or_else(host_only)?;
    let mut planes = output.planes_mut().ok_or_else(host_only)?;

    for y in 0..height {
        let out = planes[0].row_mut(y);
        for (o, px) in out.iter_mut().zip(src.row(y).chunks_exact(bpp)) {
            *o = coeffs.luma(px[0], px[1], px[2]);
        }
    }

    // The 2x2 block of chroma sample (cx, cy), cut to the frame: (U, V) from its mean.
    let block = |cx: usize, cy: usize| {
        let (mut r, mut g, mut b, mut n) = (0, 0, 0, 0);
        for y in 2 * cy..(2 * cy + 2).min(height) {
            let row = src.row(y);
            for x in 2 * cx..(2 * cx + 2).min(width) {
                let px = &row[x * bpp..x * bpp + 3];
                (r, g, b, n) = (r + px[0] as u32, g + px[1] as u32, b + px[2] as u32, n + 1);
            }
        }
        coeffs.chroma(r, g, b, n)
    };
    let (cw, ch) = (width.div_ceil(2), height.div_ceil(2));
    match (out_pixel, planes.as_mut_slice()) {
        (PixelFormat::I420, [_, u_plane, v_plane]) => {
            for cy in 0..ch {
                let (u_row, v_row) = (u_plane.row_mut(cy), v_plane.row_mut(cy));
                for cx in 0..cw {
                    (u_row[cx], v_row[cx]) = block(cx, cy);
                }
            }
        }
        (PixelFormat::Nv12, [_, uv_plane]) => {
            for cy in 0..ch {
                let uv_row = uv_plane.row_mut(cy);
                for cx in 0..cw {
                    (uv_row[2 * cx], uv_row[2 * cx + 1]) = block(cx, cy);
                }
            }
        }
        (other, _) => bail!("yuv420 writes i420 or nv12 frames; output is {other}"),
    }
    Ok(())
}

/// A yuv420 stage instance.
#[derive(Debug)]
pub struct Yuv420 {
    coeffs: Coefficients,
    /// `coeffs` for the cpu loops.
    rows: RowCoefficients,
    /// The `threads` param.
    threads: u32,
    input: FrameFormat,
    output: FrameFormat,
    /// The loaded kernel, in the cuda domain.
    gpu: Option<GpuConverter>,
}

/// The output for the one input (rgb8 or rgba8, checked against `INFO` before `negotiate` and
/// `create` are called): the `layout` param's format, the same size.
fn output_format(params: &Params, input: FrameFormat) -> FrameFormat {
    FrameFormat::new(params.layout.pixel(), input.width, input.height)
}

impl Plugin for Yuv420 {
    type Params = Params;

    // Replicas allowed: each frame is converted on its own.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "yuv420",
        version: env!("CARGO_PKG_VERSION"),
        description: "RGB to I420 or NV12, BT.709 or BT.601, limited or full range",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::Rgb8, PixelFormat::Rgba8],
        produces: &[PixelFormat::I420, PixelFormat::Nv12],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        matrix_param("luma weights: BT.709 Kr = 0.2126, Kb = 0.0722; BT.601 Kr = 0.299, Kb = 0.114"),
        range_param("limited: Y 16..=235, U, V 16..=240; full: 0..=255"),
        ParamInfo {
            name: "layout",
            kind: r#""i420" | "nv12""#,
            default: r#""i420""#,
            range: "",
            description: "i420: Y, U, V planes; nv12: Y plane, then U, V pairs interleaved (U first)",
        },
        bands::threads_param(
            "cpu domain: threads converting each frame, each a band of row pairs; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain",
        ),
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate()
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(output_format(params, inputs[0])))
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Yuv420> {
        let expected = output_format(&params, inputs[0]);
        if output != Some(expected) {
            bail!("yuv420 makes {expected} frames here, but the output was set to {output:?}");
        }
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuConverter::new(ctx)?),
            Domain::Cpu => None,
        };
        let coeffs = Coefficients::new(params.matrix, params.range);
        Ok(Yuv420 {
            coeffs,
            rows: RowCoefficients::new(&coeffs)?,
            threads: params.threads,
            input: inputs[0],
            output: expected,
            gpu,
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let input = &inputs[0];
        let output = output.ok_or_else(|| Error::new("yuv420 needs an output frame"))?;
        if input.info.format != self.input {
            bail!("input frame is {}, expected {}", input.info.format, self.input);
        }
        if output.info().format != self.output {
            bail!("output frame is {}, expected {}", output.info().format, self.output);
        }
        if let Some(dst) = output.device_buffer() {
            let Some(gpu) = &self.gpu else {
                bail!("the output frame is in device memory, but this stage runs in the cpu domain")
            };
            let Some(src) = input.device_buffer() else {
                bail!("the output frame is in device memory but the input is in host memory")
            };
            // Enqueued on the stage's stream; the runner orders it with its neighbours.
            let (input, output) = ((&input.info, src), (output.info(), dst));
            return gpu.convert(&self.coeffs, input, output, ctx.cuda_stream);
        }
        crate::cpu::convert(&self.rows, self.threads, input, output)
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples, cpu_context, frame_bytes, packed_planes, padded};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    /// The standards' float equations on 0..=255 values, written out here rather than taken
    /// from [`Coefficients`]: (Y, U, V) before rounding.
    fn reference(matrix: Matrix, range: ColorRange, [r, g, b]: [f64; 3]) -> [f64; 3] {
        let (kr, kb) = match matrix {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt601 => (0.299, 0.114),
        };
        let y = kr * r + (1.0 - kr - kb) * g + kb * b;
        let cb = (b - y) / (2.0 * (1.0 - kb));
        let cr = (r - y) / (2.0 * (1.0 - kr));
        match range {
            ColorRange::Full => [y, 128.0 + cb, 128.0 + cr],
            ColorRange::Limited => [16.0 + y * 219.0 / 255.0, 128.0 + cb * 224.0 / 255.0, 128.0 + cr * 224.0 / 255.0],
        }
    }

    fn round(v: f64) -> i32 {
        (v + 0.5).floor().clamp(0.0, 255.0) as i32
    }

    fn fixed(c: &Coefficients, [r, g, b]: [u8; 3]) -> [i32; 3] {
        let (u, v) = c.chroma(r as u32, g as u32, b as u32, 1);
        [c.luma(r, g, b) as i32, u as i32, v as i32]
    }

    const RED: [u8; 3] = [255, 0, 0];
    const GREEN: [u8; 3] = [0, 255, 0];
    const BLUE: [u8; 3] = [0, 0, 255];
    const WHITE: [u8; 3] = [255, 255, 255];
    const BLACK: [u8; 3] = [0, 0, 0];

    #[test]
    fn primaries_match_the_standards() {
        let bt709 = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!(fixed(&bt709, RED), [63, 102, 240]);
        assert_eq!(fixed(&bt709, GREEN), [173, 42, 26]);
        assert_eq!(fixed(&bt709, BLUE), [32, 240, 118]);
        assert_eq!(fixed(&bt709, WHITE), [235, 128, 128]);
        assert_eq!(fixed(&bt709, BLACK), [16, 128, 128]);
        assert_eq!(fixed(&bt709, [255, 255, 0]), [219, 16, 138]);

        let bt601 = Coefficients::new(Matrix::Bt601, ColorRange::Limited);
        assert_eq!(fixed(&bt601, RED), [81, 90, 240]);
        assert_eq!(fixed(&bt601, GREEN), [145, 54, 34]);
        assert_eq!(fixed(&bt601, BLUE), [41, 240, 110]);
        assert_eq!(fixed(&bt601, WHITE), [235, 128, 128]);
        assert_eq!(fixed(&bt601, BLACK), [16, 128, 128]);

        for matrix in [Matrix::Bt709, Matrix::Bt601] {
            let full = Coefficients::new(matrix, ColorRange::Full);
            assert_eq!(fixed(&full, WHITE), [255, 128, 128]);
            assert_eq!(fixed(&full, BLACK), [0, 128, 128]);
            // Full-range blue is 128 + 127.5: clamped.
            assert_eq!(fixed(&full, BLUE)[1], 255);
            assert_eq!(fixed(&full, RED)[2], 255);
        }
        let full = Coefficients::new(Matrix::Bt601, ColorRange::Full);
        assert_eq!(fixed(&full, RED), [76, 85, 255]); // JPEG's 76.245, 84.972
        let full = Coefficients::new(Matrix::Bt709, ColorRange::Full);
        assert_eq!(fixed(&full, GREEN), [182, 30, 12]);

        // And the hand-written numbers above are what the float equations give.
        for (rgb, yuv) in [(RED, [63, 102, 240]), (GREEN, [173, 42, 26]), (BLUE, [32, 240, 118])] {
            let float = reference(Matrix::Bt709, ColorRange::Limited, rgb.map(f64::from));
            assert_eq!(float.map(round), yuv);
        }
        for (rgb, yuv) in [(RED, [81, 90, 240]), (GREEN, [145, 54, 34]), (BLUE, [41, 240, 110])] {
            let float = reference(Matrix::Bt601, ColorRange::Limited, rgb.map(f64::from));
            assert_eq!(float.map(round), yuv);
        }
    }

    #[test]
    fn grays_have_neutral_chroma() {
        for matrix in [Matrix::Bt709, Matrix::Bt601] {
            for range in [ColorRange::Limited, ColorRange::Full] {
                let c = Coefficients::new(matrix, range);
                for v in 0..=255u32 {
                    for n in [1, 2, 4] {
                        assert_eq!(c.chroma(v * n, v * n, v * n, n), (128, 128), "{matrix:?} {range:?} {v}");
                    }
                }
            }
        }
    }

    #[test]
    fn fixed_point_tracks_the_float_equations() {
        for matrix in [Matrix::Bt709, Matrix::Bt601] {
            for range in [ColorRange::Limited, ColorRange::Full] {
                let c = Coefficients::new(matrix, range);
                let (mut total, mut exact) = (0, 0);
                for r in (0..=255u8).step_by(3) {
                    for g in (0..=255u8).step_by(3) {
                        for b in (0..=255u8).step_by(3) {
                            let got = fixed(&c, [r, g, b]);
                            let want = reference(matrix, range, [r, g, b].map(f64::from)).map(round);
                            for (got, want) in got.into_iter().zip(want) {
                                assert!((got - want).abs() <= 1, "{matrix:?} {range:?} {r},{g},{b}");
                                total += 1;
                                exact += (got == want) as u32;
                            }
                        }
                    }
                }
                assert!(exact as f64 >= 0.998 * total as f64, "{matrix:?} {range:?}: {exact} of {total}");
            }
        }
    }

    #[test]
    fn blocks_average_before_rounding() {
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        // Four distinct colours: the chroma of their mean RGB, not the mean of their chroma.
        let colours = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]];
        let sum = |i: usize| colours.iter().map(|px| px[i] as u32).sum::<u32>();
        let mean = [0, 1, 2].map(|i| sum(i) as f64 / 4.0);
        let want = reference(Matrix::Bt709, ColorRange::Limited, mean).map(round);
        let (u, v) = c.chroma(sum(0), sum(1), sum(2), 4);
        assert_eq!([u as i32, v as i32], want[1..]);
        // The mean is (127.5, 127.5, 127.5): a gray.
        assert_eq!((u, v), (128, 128));
        // Red and blue side by side (the last column of an odd height): mean (127.5, 0, 127.5).
        let want = reference(Matrix::Bt709, ColorRange::Limited, [127.5, 0.0, 127.5]).map(round);
        let (u, v) = c.chroma(255, 0, 255, 2);
        assert_eq!([u as i32, v as i32], want[1..]);
        assert_eq!((u, v), (171, 179));
    }

    #[test]
    fn coefficients_are_the_documented_integers() {
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!((c.y_offset, c.y_r, c.y_g, c.y_b), (16, 11966, 40254, 4064));
        assert_eq!((c.u_r, c.u_g, c.u_b), (-6596, -22189, 28784));
        assert_eq!((c.v_r, c.v_g, c.v_b), (28784, -26145, -2639));
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Full);
        assert_eq!((c.y_offset, c.y_r, c.y_g, c.y_b), (0, 13933, 46871, 4732));
        assert_eq!((c.u_r, c.u_g, c.u_b), (-7509, -25259, 32768));
        assert_eq!((c.v_r, c.v_g, c.v_b), (32768, -29763, -3005));
        let c = Coefficients::new(Matrix::Bt601, ColorRange::Limited);
        assert_eq!((c.y_offset, c.y_r, c.y_g, c.y_b), (16, 16829, 33039, 6416));
        assert_eq!((c.u_r, c.u_g, c.u_b), (-9714, -19071, 28784));
        assert_eq!((c.v_r, c.v_g, c.v_b), (28784, -24103, -4681));
        let c = Coefficients::new(Matrix::Bt601, ColorRange::Full);
        assert_eq!((c.y_offset, c.y_r, c.y_g, c.y_b), (0, 19595, 38470, 7471));
        assert_eq!((c.u_r, c.u_g, c.u_b), (-11058, -21710, 32768));
        assert_eq!((c.v_r, c.v_g, c.v_b), (32768, -27439, -5329));
    }

    /// Convert packed `pixels` (rgb8 or rgba8) with a stage made from `params`; returns the
    /// packed output planes, after checking that no padding byte was written.
    fn run(params: &str, pixel: PixelFormat, w: u32, h: u32, pixels: &[u8]) -> Vec<Vec<u8>> {
        let params = parse_params::<Yuv420>(params).unwrap();
        let in_format = FrameFormat::new(pixel, w, h);
        let out_format = Yuv420::negotiate(&params, &[in_format]).unwrap().unwrap();
        assert_eq!((out_format.width, out_format.height), (w, h));
        let mut stage = Yuv420::create(params, &[in_format], Some(out_format), &cpu_context()).unwrap();

        let in_info = FrameInfo::new(in_format, 3, 0).unwrap();
        let in_bytes = frame_bytes(&in_info, pixels, 0x77);
        let input = InputFrame::host(in_info, &in_bytes).unwrap();

        let mut out_info = FrameInfo::new(out_format, 3, 0).unwrap();
        out_info.layout = padded(out_info.layout, 3);
        let mut out_bytes = vec![0xa5; out_info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        stage.process(&[input], Some(&mut output), &pc).unwrap();
        packed_planes(&out_info.layout, &out_bytes, 0xa5)
    }

    /// A 5x3 frame of distinct colours, as `[r, g, b]` per pixel, row by row.
    fn colours_5x3() -> Vec<[u8; 3]> {
        (0..15u8).map(|i| [i * 17, 255 - i * 13, i.wrapping_mul(71)]).collect()
    }

    /// What a 5x3 frame's chroma must be: blocks of 4, 2 (last column, last row) and 1 (corner).
    fn expected_chroma_5x3(c: &Coefficients, px: &[[u8; 3]]) -> Vec<(u8, u8)> {
        let mut out = Vec::new();
        for cy in 0..2 {
            for cx in 0..3 {
                let (mut sum, mut n) = ([0u32; 3], 0);
                for y in 2 * cy..(2 * cy + 2).min(3) {
                    for x in 2 * cx..(2 * cx + 2).min(5) {
                        let p = px[y * 5 + x];
                        sum = [sum[0] + p[0] as u32, sum[1] + p[1] as u32, sum[2] + p[2] as u32];
                        n += 1;
                    }
                }
                let expected_n = [[4, 4, 2], [2, 2, 1]][cy][cx];
                assert_eq!(n, expected_n);
                out.push(c.chroma(sum[0], sum[1], sum[2], n));
            }
        }
        out
    }

    #[test]
    fn odd_sized_i420_and_nv12() {
        let px = colours_5x3();
        let rgb: Vec<u8> = px.iter().flatten().copied().collect();
        let rgba: Vec<u8> = px.iter().flat_map(|p| [p[0], p[1], p[2], 0x33]).collect();
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        let luma: Vec<u8> = px.iter().map(|p| c.luma(p[0], p[1], p[2])).collect();
        let chroma = expected_chroma_5x3(&c, &px);
        let u: Vec<u8> = chroma.iter().map(|c| c.0).collect();
        let v: Vec<u8> = chroma.iter().map(|c| c.1).collect();
        let uv: Vec<u8> = chroma.iter().flat_map(|&(u, v)| [u, v]).collect();

        for (pixel, bytes) in [(PixelFormat::Rgb8, &rgb), (PixelFormat::Rgba8, &rgba)] {
            let planes = run("", pixel, 5, 3, bytes);
            assert_eq!(planes, [luma.clone(), u.clone(), v.clone()]);
            let planes = run("layout = \"nv12\"", pixel, 5, 3, bytes);
            assert_eq!(planes, [luma.clone(), uv.clone()]);
        }
        // The corner block is pixel (4, 2) alone.
        let p = px[14];
        let alone = reference(Matrix::Bt709, ColorRange::Limited, p.map(f64::from)).map(round);
        assert_eq!([u[5] as i32, v[5] as i32], alone[1..]);
    }

    #[test]
    fn one_pixel_frames() {
        for layout in ["i420", "nv12"] {
            let planes = run(&format!("layout = \"{layout}\""), PixelFormat::Rgb8, 1, 1, &RED);
            let want: Vec<Vec<u8>> =
                if layout == "i420" { vec![vec![63], vec![102], vec![240]] } else { vec![vec![63], vec![102, 240]] };
            assert_eq!(planes, want, "{layout}");
        }
        let planes = run("matrix = \"bt601\"\nrange = \"full\"", PixelFormat::Rgba8, 1, 1, &[0, 0, 0, 255]);
        assert_eq!(planes, [[0], [128], [128]]);
    }

    #[test]
    fn two_by_two_block_averages_distinct_colours() {
        // Red, green / blue, white: one chroma sample from the mean (127.5, 127.5, 127.5).
        let rgb = [RED, GREEN, BLUE, WHITE].concat();
        let planes = run("layout = \"nv12\"", PixelFormat::Rgb8, 2, 2, &rgb);
        assert_eq!(planes, [vec![63, 173, 32, 235], vec![128, 128]]);
        // Red, red / blue, blue: mean (127.5, 0, 127.5).
        let rgb = [RED, RED, BLUE, BLUE].concat();
        let planes = run("", PixelFormat::Rgb8, 2, 2, &rgb);
        assert_eq!(planes, [vec![63, 63, 32, 32], vec![171], vec![179]]);
    }

    #[test]
    fn a_cpu_stage_refuses_device_frames_and_cuda_needs_a_context() {
        let params = parse_params::<Yuv420>("").unwrap();
        let in_format = FrameFormat::new(PixelFormat::Rgb8, 4, 4);
        let out_format = Yuv420::negotiate(&params, &[in_format]).unwrap().unwrap();
        let mut stage = Yuv420::create(params, &[in_format], Some(out_format), &cpu_context()).unwrap();
        let (in_info, out_info) = (FrameInfo::new(in_format, 0, 0).unwrap(), FrameInfo::new(out_format, 0, 0).unwrap());
        let buffer = gpuipc_plugin_api::DeviceBuffer { addr: 0x1000, len: 1 << 20 };
        let input = InputFrame::device(in_info, buffer);
        let mut out = OutputFrame::device(out_info, buffer);
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[input], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("runs in the cpu domain"), "{e}");
        let cuda = CreateContext { domain: Domain::Cuda, ..cpu_context() };
        let e = Yuv420::create(params, &[in_format], Some(out_format), &cuda).unwrap_err();
        assert!(e.message().contains("kernels/yuv420.cu"), "{e}");
    }

    /// `layout` with plane `plane` and every plane after it moved `by` bytes further into the
    /// frame: a plane address that is not a multiple of 16 while every pitch is.
    fn shifted(mut layout: gpuipc_plugin_api::FrameLayout, plane: usize, by: u64) -> gpuipc_plugin_api::FrameLayout {
        for p in &mut layout.planes[plane..layout.n_planes as usize] {
            p.offset += by;
        }
        layout.total_bytes += by;
        layout
    }

    /// The cuda path writes exactly the cpu path's bytes, padding untouched, for both inputs,
    /// both layouts, every matrix and range, odd sizes and partial 16-pixel groups, aligned and
    /// unaligned pitches (+5/+3: every row after the first misaligned; +16/+48: 16-aligned but
    /// not 64), and a misaligned plane address with aligned pitches (the input plane, or the
    /// output's last plane: V or UV), so that kernels/yuv420.cu's fast path and its general
    /// path (partial groups, odd last rows, misaligned planes) are both checked. Needs a GPU
    /// (skipped without one unless GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        let Some(gpu) = GpuHarness::for_test() else { return };
        const SENTINEL: u8 = 0xa5;
        let mut settings = Vec::new();
        for matrix in ["bt709", "bt601"] {
            for range in ["limited", "full"] {
                for layout in ["i420", "nv12"] {
                    settings.push(format!("matrix = \"{matrix}\"\nrange = \"{range}\"\nlayout = \"{layout}\""));
                }
            }
        }
        let sizes = [(1, 1), (2, 2), (5, 3), (16, 5), (17, 9), (33, 1), (1, 33), (641, 479), (654, 481), (1920, 1080)];
        // (input pitch +, output pitch +, input plane moved by, output's last plane moved by)
        let layouts = [(0, 0, 0, 0), (5, 3, 0, 0), (16, 48, 0, 0), (0, 0, 4, 0), (0, 0, 0, 8)];
        for (width, height) in sizes {
            for pixel in [PixelFormat::Rgb8, PixelFormat::Rgba8] {
                let in_format = FrameFormat::new(pixel, width, height);
                for text in &settings {
                    let params = parse_params::<Yuv420>(text).unwrap();
                    let out_format = Yuv420::negotiate(&params, &[in_format]).unwrap().unwrap();
                    let ctx = gpu.create_context("yuv").unwrap();
                    let mut stage = Yuv420::create(params, &[in_format], Some(out_format), &ctx).unwrap();
                    for (in_extra, out_extra, in_shift, out_shift) in layouts {
                        let mut in_info = FrameInfo::new(in_format, 1, 0).unwrap();
                        in_info.layout = shifted(padded(in_info.layout, in_extra), 0, in_shift);
                        let mut out_info = FrameInfo::new(out_format, 1, 0).unwrap();
                        let last = out_info.layout.n_planes as usize - 1;
                        out_info.layout = shifted(padded(out_info.layout, out_extra), last, out_shift);
                        let in_bytes: Vec<u8> =
                            (0..in_info.layout.total_bytes).map(|i| ((i * 2_654_435_761) >> 13) as u8).collect();

                        let input = InputFrame::host(in_info, &in_bytes).unwrap();
                        let mut cpu = vec![SENTINEL; out_info.layout.total_bytes as usize];
                        let mut out = OutputFrame::host(out_info, &mut cpu).unwrap();
                        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
                        stage.process(&[input], Some(&mut out), &pc).unwrap();

                        let device_in = gpu.upload(&in_bytes).unwrap();
                        let device_out = gpu.upload(&vec![SENTINEL; cpu.len()]).unwrap();
                        let input = InputFrame::device(in_info, device_in.buffer());
                        let mut out = OutputFrame::device(out_info, device_out.buffer());
                        stage.process(&[input], Some(&mut out), &gpu.process_context(0)).unwrap();
                        let got = gpu.download(&device_out).unwrap();
                        if let Some(d) = first_difference(&got, &cpu, &out_info.layout) {
                            panic!(
                                "{in_format} {text:?} pitch +{in_extra}/+{out_extra}, planes moved {in_shift}/{out_shift}: {d}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn params_and_formats_are_checked() {
        let e = parse_params::<Yuv420>("matrix = \"bt2020\"").unwrap_err();
        assert!(e.message().contains("matrix") && e.message().contains("bt2020"), "{e}");
        let e = parse_params::<Yuv420>("range = \"tv\"").unwrap_err();
        assert!(e.message().contains("range"), "{e}");
        let e = parse_params::<Yuv420>("layout = \"yv12\"").unwrap_err();
        assert!(e.message().contains("layout"), "{e}");
        let p = parse_params::<Yuv420>("").unwrap();
        assert_eq!(
            p,
            Params { matrix: Matrix::Bt709, range: ColorRange::Limited, layout: ChromaLayout::I420, threads: 0 }
        );
        let e = CpuStage::<Yuv420>::new("", &[FrameFormat::new(PixelFormat::Gray8, 4, 4)]).err().unwrap();
        assert_eq!(e.message(), "yuv420 takes rgb8 or rgba8 frames; input is gray8 4x4");
        let nv12 = Params { layout: ChromaLayout::Nv12, ..p };
        let out = Yuv420::negotiate(&nv12, &[FrameFormat::new(PixelFormat::Rgba8, 7, 5)]).unwrap();
        assert_eq!(out, Some(FrameFormat::new(PixelFormat::Nv12, 7, 5)));
    }

    #[test]
    fn threads_are_checked_and_change_no_byte() {
        let p = parse_params::<Yuv420>("threads = 257").unwrap();
        let e = Yuv420::check(&p, &[FrameFormat::new(PixelFormat::Rgb8, 4, 4)]).unwrap_err();
        let want = "param `threads` must be 0 (a share of the cores) or 1..=256, got 257";
        assert_eq!(e.message(), want);
        assert!(parse_params::<Yuv420>("threads = -1").is_err());
        let px: Vec<u8> = (0..37 * 23 * 4).map(|i| (i * 97 % 251) as u8).collect();
        for layout in ["i420", "nv12"] {
            let frame = |threads| {
                let text = format!("layout = \"{layout}\"\nthreads = {threads}");
                run(&text, PixelFormat::Rgba8, 37, 23, &px)
            };
            let want = frame(1);
            for threads in [0, 2, 3, 5, 12, 256] {
                assert_eq!(frame(threads), want, "{layout}, {threads} threads");
            }
        }
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Yuv420::INFO.name, |text| {
            Yuv420::check(&parse_params::<Yuv420>(text).unwrap(), &[]).unwrap();
        });
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Yuv420>(include_str!("lib.rs"), "");
    }
}
