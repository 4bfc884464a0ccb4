//! The yuv-to-rgb stage: its params, the fixed-point coefficients and the conversion loop,
//! which `kernels/yuv_to_rgb.cu` mirrors.

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat,
    Plugin, PluginInfo, ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::cuda::GpuConverter;
use gpuipc_plugin_api::bands;

/// Fractional bits of the fixed-point coefficients.
pub const FRAC_BITS: u32 = 16;

/// The `params` table of a yuv-to-rgb stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Luma weights the frames were made with. Default `bt709`.
    pub matrix: Matrix,
    /// Signal range the frames were made with. Default `limited`.
    pub range: ColorRange,
    /// Output pixel format. Default `rgb8`.
    pub format: RgbFormat,
    /// Threads converting a frame in the cpu domain, 0..=[`bands::MAX_THREADS`]; 0 is a share
    /// of the cores ([`bands::thread_count`]). Default 0.
    pub threads: u32,
}

/// The `matrix` param: the same names and values as `yuv420`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Matrix {
    /// Kr = 0.2126, Kb = 0.0722 (HD).
    #[default]
    Bt709,
    /// Kr = 0.299, Kb = 0.114 (SD, JPEG).
    Bt601,
}

impl Matrix {
    /// `(Kr, Kb)`.
    pub fn kr_kb(self) -> (f64, f64) {
        match self {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt601 => (0.299, 0.114),
        }
    }
}

/// The `range` param: the same names and values as `yuv420`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColorRange {
    /// Y in 16..=235, U and V in 16..=240.
    #[default]
    Limited,
    /// Y, U and V in 0..=255.
    Full,
}

/// The `format` param.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RgbFormat {
    #[default]
    Rgb8,
    /// Alpha 255.
    Rgba8,
}

impl RgbFormat {
    pub fn pixel(self) -> PixelFormat {
        match self {
            RgbFormat::Rgb8 => PixelFormat::Rgb8,
            RgbFormat::Rgba8 => PixelFormat::Rgba8,
        }
    }
}

/// The fixed-point conversion: multipliers scaled by 2^[`FRAC_BITS`], each rounded to the
/// nearest integer on its own. A GPU kernel takes these as arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coefficients {
    /// 16 (limited) or 0 (full).
    pub y_offset: i32,
    /// Of `Y - y_offset`: 255/219 (limited) or 1 (full).
    pub y_mul: i32,
    /// Of `V - 128` in R.
    pub r_v: i32,
    /// Of `U - 128` in G.
    pub g_u: i32,
    /// Of `V - 128` in G.
    pub g_v: i32,
    /// Of `U - 128` in B.
    pub b_u: i32,
}

impl Coefficients {
    /// The inverse of `yuv420`'s equations for `matrix` and `range`:
    ///
    /// ```text
    /// Y' = (Y - 16) 255/219 (limited) or Y (full); Cb, Cr = (U - 128), (V - 128), times
    /// 255/224 (limited)
    /// R = Y' + 2 (1 - Kr) Cr
    /// B = Y' + 2 (1 - Kb) Cb
    /// G = (Y' - Kr R - Kb B) / Kg = Y' - 2 Kb (1 - Kb) / Kg Cb - 2 Kr (1 - Kr) / Kg Cr
    /// ```
    pub fn new(matrix: Matrix, range: ColorRange) -> Coefficients {
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let (y_offset, y_scale, c_scale) = match range {
            ColorRange::Full => (0, 1.0, 1.0),
            ColorRange::Limited => (16, 255.0 / 219.0, 255.0 / 224.0),
        };
        let fixed = |x: f64| (x * (1 << FRAC_BITS) as f64).round() as i32;
        Coefficients {
            y_offset,
            y_mul: fixed(y_scale),
            r_v: fixed(2.0 * (1.0 - kr) * c_scale),
            g_u: fixed(-2.0 * kb * (1.0 - kb) / kg * c_scale),
            g_v: fixed(-2.0 * kr * (1.0 - kr) / kg * c_scale),
            b_u: fixed(2.0 * (1.0 - kb) * c_scale),
        }
    }

    /// What the U, V of a pixel add to its R, G and B sums: `(dr, dg, db)`.
    #[inline(always)]
    pub fn chroma(&self, u: u8, v: u8) -> (i32, i32, i32) {
        let (u, v) = (u as i32 - 128, v as i32 - 128);
        (self.r_v * v, self.g_u * u + self.g_v * v, self.b_u * u)
    }

    /// `y_mul (Y - y_offset) + 2^15`: a pixel's sum before its chroma.
    #[inline(always)]
    pub fn luma(&self, y: u8) -> i32 {
        self.y_mul * (y as i32 - self.y_offset) + (1 << (FRAC_BITS - 1))
    }

    /// (R, G, B) of one pixel: each `clamp(max(sum, 0) >> 16, 0, 255)`, the value rounded
    /// half up.
    pub fn rgb(&self, y: u8, u: u8, v: u8) -> [u8; 3] {
        let t = self.luma(y);
        let (dr, dg, db) = self.chroma(u, v);
        [channel(t + dr), channel(t + dg), channel(t + db)]
    }
}

/// `clamp(max(sum, 0) >> 16, 0, 255)`: clamping a negative sum to 0 first makes the shift the
/// floor the clamp to 0 needs, on any integer type the kernel might use.
#[inline(always)]
fn channel(sum: i32) -> u8 {
    (sum.max(0) >> FRAC_BITS).min(255) as u8
}

/// Pixels a band must have for the default `threads` to give it a thread of its own (as for
/// `rgb-process` and `yuv420`: a thread costs tens of microseconds to start).
pub const MIN_BAND_PIXELS: usize = 1 << 18;

/// Convert one `i420` or `nv12` frame (host memory) into `output` (`rgb8` or `rgba8` of the
/// same size, host memory): every pixel with the U and V of its 2x2 block, as
/// `kernels/yuv_to_rgb.cu` does; bands of rows on `threads` threads as the param says.
pub fn convert(
    coeffs: &Coefficients,
    threads: u32,
    input: &InputFrame<'_>,
    output: &mut OutputFrame<'_>,
) -> Result<()> {
    let (width, height) = (input.info.width() as usize, input.info.height() as usize);
    let out_info = *output.info();
    if (out_info.width() as usize, out_info.height() as usize) != (width, height) {
        bail!("output frame is {}, input is {}", out_info.format, input.info.format);
    }
    let bpp = match out_info.pixel() {
        PixelFormat::Rgb8 => 3,
        PixelFormat::Rgba8 => 4,
        other => bail!("yuv-to-rgb writes rgb8 or rgba8 frames; output is {other}"),
    };
    let host_only = || Error::new("yuv-to-rgb reads and writes host memory only (cpu domain)");
    let y_plane = input.plane(0).ok_or_else(host_only)?;
    let u_plane = input.plane(1).ok_or_else(host_only)?;
    let v_plane = match input.info.pixel() {
        PixelFormat::I420 => Some(input.plane(2).ok_or_else(host_only)?),
        PixelFormat::Nv12 => None,
        other => bail!("yuv-to-rgb takes i420 or nv12 frames; input is {other}"),
    };
    let planes = bands::planes_mut(output).ok_or_else(host_only)??;
    let Some(out) = planes.into_iter().next() else { bail!("the output frame has no plane") };
    let n = bands::thread_count(threads, width * height / MIN_BAND_PIXELS, height);
    let counts: Vec<usize> = bands::even_counts(height, bands::band_count(n, height)).collect();
    let work: Vec<_> = bands::starts(&counts).zip(out.split(counts.iter().copied())).collect();
    bands::run(work, n, |(first, mut band)| {
        for (y, row) in (first..).zip(band.iter_mut()) {
            let (luma, u_row) = (y_plane.row(y), u_plane.row(y / 2));
            let v_row = v_plane.as_ref().map(|p| p.row(y / 2));
            // Two pixels (one chroma sample) at a time; the last one alone on an odd width.
            for (cx, (pair, px)) in luma.chunks(2).zip(row.chunks_mut(2 * bpp)).enumerate() {
                let (u, v) = match v_row {
                    Some(v_row) => (u_row[cx], v_row[cx]),
                    None => (u_row[2 * cx], u_row[2 * cx + 1]),
                };
                let (dr, dg, db) = coeffs.chroma(u, v);
                for (&y, px) in pair.iter().zip(px.chunks_exact_mut(bpp)) {
                    let t = coeffs.luma(y);
                    px[0] = channel(t + dr);
                    px[1] = channel(t + dg);
                    px[2] = channel(t + db);
                    if bpp == 4 {
                        px[3] = 255;
                    }
                }
            }
        }
        Ok(())
    })
}

/// A yuv-to-rgb stage instance.
#[derive(Debug)]
pub struct YuvToRgb {
    coeffs: Coefficients,
    /// The `threads` param.
    threads: u32,
    input: FrameFormat,
    output: FrameFormat,
    /// The loaded kernel, in the cuda domain.
    gpu: Option<GpuConverter>,
}

fn output_format(params: &Params, inputs: &[FrameFormat]) -> Result<FrameFormat> {
    let [input] = inputs else { bail!("yuv-to-rgb takes 1 input, got {}", inputs.len()) };
    match input.pixel_format() {
        Some(PixelFormat::I420 | PixelFormat::Nv12) => {
            Ok(FrameFormat::new(params.format.pixel(), input.width, input.height))
        }
        _ => bail!("yuv-to-rgb takes i420 or nv12 frames; input is {input}"),
    }
}

impl Plugin for YuvToRgb {
    type Params = Params;

    // Replicas allowed: each frame is converted on its own.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "yuv-to-rgb",
        version: env!("CARGO_PKG_VERSION"),
        description: "I420 or NV12 to RGB, BT.709 or BT.601, limited or full range (the inverse of yuv420)",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::I420, PixelFormat::Nv12],
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "matrix",
            kind: r#""bt709" | "bt601""#,
            default: r#""bt709""#,
            range: "",
            description: "luma weights the frames were made with: BT.709 Kr = 0.2126, Kb = 0.0722; BT.601 Kr = 0.299, Kb = 0.114",
        },
        ParamInfo {
            name: "range",
            kind: r#""limited" | "full""#,
            default: r#""limited""#,
            range: "",
            description: "limited: Y 16..=235, U, V 16..=240 (values beyond clamp); full: 0..=255",
        },
        ParamInfo {
            name: "format",
            kind: r#""rgb8" | "rgba8""#,
            default: r#""rgb8""#,
            range: "",
            description: "output pixel format; rgba8 has alpha 255",
        },
        bands::threads_param("cpu domain: threads converting each frame, each a band of rows; 0: one per core this process may use, at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain"),
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let mut problems = Vec::new();
        bands::check_threads_param(params.threads, &mut problems);
        if problems.is_empty() { Ok(()) } else { bail!("{}", problems.join("; ")) }
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        output_format(params, inputs).map(Some)
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<YuvToRgb> {
        let expected = output_format(&params, inputs)?;
        if output != Some(expected) {
            bail!("yuv-to-rgb makes {expected} frames here, but the output was set to {output:?}");
        }
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuConverter::new(ctx)?),
            Domain::Cpu => None,
        };
        Ok(YuvToRgb {
            threads: params.threads,
            coeffs: Coefficients::new(params.matrix, params.range),
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
        let [input] = inputs else { bail!("yuv-to-rgb takes 1 input, got {}", inputs.len()) };
        let output = output.ok_or_else(|| Error::new("yuv-to-rgb needs an output frame"))?;
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
        convert(&self.coeffs, self.threads, input, output)
    }
}
#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{check_doc_examples, cpu_context, frame_bytes, packed_planes, padded};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    const MATRICES: [Matrix; 2] = [Matrix::Bt709, Matrix::Bt601];
    const RANGES: [ColorRange; 2] = [ColorRange::Limited, ColorRange::Full];

    /// `yuv420`'s fixed-point RGB to YUV of one pixel, as its docs write it (a plugin's test
    /// cannot link another plugin: both export the same entry symbol). Its coefficients are
    /// checked below against the integers `yuv420`'s own tests assert.
    struct Forward {
        y_offset: i32,
        y: [i32; 3],
        u: [i32; 3],
        v: [i32; 3],
    }

    impl Forward {
        fn new(matrix: Matrix, range: ColorRange) -> Forward {
            let (kr, kb) = matrix.kr_kb();
            let kg = 1.0 - kr - kb;
            let (y_offset, ys, cs) = match range {
                ColorRange::Full => (0, 1.0, 1.0),
                ColorRange::Limited => (16, 219.0 / 255.0, 224.0 / 255.0),
            };
            let f = |x: f64| (x * 65536.0).round() as i32;
            let (cb, cr) = (2.0 * (1.0 - kb), 2.0 * (1.0 - kr));
            Forward {
                y_offset,
                y: [f(kr * ys), f(kg * ys), f(kb * ys)],
                u: [f(-kr / cb * cs), f(-kg / cb * cs), f(0.5 * cs)],
                v: [f(0.5 * cs), f(-kg / cr * cs), f(-kb / cr * cs)],
            }
        }

        /// Y, U, V of a pixel (a block of one: yuv420's `chroma(r, g, b, 1)`).
        fn yuv(&self, [r, g, b]: [u8; 3]) -> [u8; 3] {
            let (r, g, b) = (r as i32, g as i32, b as i32);
            let sum = |off: i32, k: [i32; 3]| (off << 16) + k[0] * r + k[1] * g + k[2] * b + (1 << 15);
            let clamp = |x: i32| (x.max(0) >> 16).min(255) as u8;
            [clamp(sum(self.y_offset, self.y)), clamp(sum(128, self.u)), clamp(sum(128, self.v))]
        }
    }

    #[test]
    fn the_forward_copy_has_yuv420s_integers() {
        let f = Forward::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!((f.y_offset, f.y, f.u, f.v), (16, [11966, 40254, 4064], [-6596, -22189, 28784], [28784, -26145, -2639]));
        let f = Forward::new(Matrix::Bt709, ColorRange::Full);
        assert_eq!((f.y_offset, f.y, f.u, f.v), (0, [13933, 46871, 4732], [-7509, -25259, 32768], [32768, -29763, -3005]));
        let f = Forward::new(Matrix::Bt601, ColorRange::Limited);
        assert_eq!((f.y_offset, f.y, f.u, f.v), (16, [16829, 33039, 6416], [-9714, -19071, 28784], [28784, -24103, -4681]));
        let f = Forward::new(Matrix::Bt601, ColorRange::Full);
        assert_eq!((f.y_offset, f.y, f.u, f.v), (0, [19595, 38470, 7471], [-11058, -21710, 32768], [32768, -27439, -5329]));
        // And yuv420's known colours.
        let f = Forward::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!(f.yuv([255, 0, 0]), [63, 102, 240]);
        assert_eq!(f.yuv([0, 255, 0]), [173, 42, 26]);
        assert_eq!(f.yuv([255, 255, 0]), [219, 16, 138]);
        assert_eq!(Forward::new(Matrix::Bt601, ColorRange::Full).yuv([255, 0, 0]), [76, 85, 255]);
    }

    #[test]
    fn coefficients_are_the_documented_integers() {
        let c = |m, r| {
            let c = Coefficients::new(m, r);
            (c.y_offset, c.y_mul, c.r_v, c.g_u, c.g_v, c.b_u)
        };
        assert_eq!(c(Matrix::Bt709, ColorRange::Limited), (16, 76309, 117489, -13975, -34925, 138438));
        assert_eq!(c(Matrix::Bt709, ColorRange::Full), (0, 65536, 103206, -12276, -30679, 121609));
        assert_eq!(c(Matrix::Bt601, ColorRange::Limited), (16, 76309, 104597, -25675, -53279, 132201));
        assert_eq!(c(Matrix::Bt601, ColorRange::Full), (0, 65536, 91881, -22553, -46802, 116130));
    }

    #[test]
    fn known_colours() {
        for matrix in MATRICES {
            for range in RANGES {
                let c = Coefficients::new(matrix, range);
                let (black, white) = match range {
                    ColorRange::Limited => (16, 235),
                    ColorRange::Full => (0, 255),
                };
                assert_eq!(c.rgb(black, 128, 128), [0, 0, 0], "{matrix:?} {range:?}");
                assert_eq!(c.rgb(white, 128, 128), [255, 255, 255], "{matrix:?} {range:?}");
                // Below black and above white clamp; so do the extreme chroma values.
                assert_eq!(c.rgb(0, 128, 128), [0, 0, 0]);
                assert_eq!(c.rgb(255, 128, 128), [255, 255, 255]);
                assert_eq!(c.rgb(255, 255, 255)[0], 255);
                assert_eq!(c.rgb(0, 0, 0)[0], 0);
            }
        }
        // Mid gray: limited 126 is 128.1, full 128 is 128.
        assert_eq!(Coefficients::new(Matrix::Bt709, ColorRange::Limited).rgb(126, 128, 128), [128, 128, 128]);
        assert_eq!(Coefficients::new(Matrix::Bt601, ColorRange::Full).rgb(128, 128, 128), [128, 128, 128]);
        // yuv420's primaries back: within 1 of what went in (the YUV is rounded).
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!(c.rgb(63, 102, 240), [255, 1, 0]);
        assert_eq!(c.rgb(173, 42, 26), [0, 255, 1]);
        assert_eq!(c.rgb(32, 240, 118), [1, 0, 255]);
        assert_eq!(c.rgb(219, 16, 138), [254, 255, 0]);
        let c = Coefficients::new(Matrix::Bt601, ColorRange::Limited);
        assert_eq!(c.rgb(81, 90, 240), [254, 0, 0]);
        assert_eq!(c.rgb(145, 54, 34), [0, 255, 1]);
        assert_eq!(c.rgb(41, 240, 110), [0, 0, 255]);
        let c = Coefficients::new(Matrix::Bt709, ColorRange::Full);
        assert_eq!(c.rgb(54, 99, 255), [254, 0, 0]);
        assert_eq!(c.rgb(182, 30, 12), [0, 255, 0]);
        let c = Coefficients::new(Matrix::Bt601, ColorRange::Full);
        assert_eq!(c.rgb(76, 85, 255), [254, 0, 0]); // JPEG's red
        assert_eq!(c.rgb(150, 44, 21), [0, 255, 1]);
    }

    /// The standards' inverse equations in f64, written out here rather than taken from
    /// [`Coefficients`]: (R, G, B) before rounding.
    fn reference(matrix: Matrix, range: ColorRange, [y, u, v]: [f64; 3]) -> [f64; 3] {
        let (kr, kb) = match matrix {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt601 => (0.299, 0.114),
        };
        let (y, cb, cr) = match range {
            ColorRange::Full => (y, u - 128.0, v - 128.0),
            ColorRange::Limited => ((y - 16.0) * 255.0 / 219.0, (u - 128.0) * 255.0 / 224.0, (v - 128.0) * 255.0 / 224.0),
        };
        let r = y + 2.0 * (1.0 - kr) * cr;
        let b = y + 2.0 * (1.0 - kb) * cb;
        let g = (y - kr * r - kb * b) / (1.0 - kr - kb);
        [r, g, b]
    }

    fn round(v: f64) -> i32 {
        (v + 0.5).floor().clamp(0.0, 255.0) as i32
    }

    #[test]
    fn fixed_point_is_the_float_equations_rounded() {
        // Every Y, U and V in steps of 3 (and 255): within 1 of the float result everywhere,
        // equal to it for nearly all.
        let values: Vec<u8> = (0..=255).step_by(3).chain([255]).collect();
        for matrix in MATRICES {
            for range in RANGES {
                let c = Coefficients::new(matrix, range);
                let (mut exact, mut total) = (0u32, 0u32);
                for &y in &values {
                    for &u in &values {
                        for &v in &values {
                            let got = c.rgb(y, u, v).map(i32::from);
                            let want = reference(matrix, range, [y, u, v].map(f64::from)).map(round);
                            for (got, want) in got.into_iter().zip(want) {
                                assert!((got - want).abs() <= 1, "{matrix:?} {range:?} {y},{u},{v}");
                                total += 1;
                                exact += (got == want) as u32;
                            }
                        }
                    }
                }
                assert!(exact as f64 >= 0.999 * total as f64, "{matrix:?} {range:?}: {exact} of {total}");
            }
        }
    }

    /// The round trip of [`ROUND_TRIP_TOLERANCE`]: every colour (in steps of 3 in a debug
    /// build) through yuv420's fixed point and back; the largest error per channel.
    fn round_trip_error(matrix: Matrix, range: ColorRange) -> [i32; 3] {
        let (f, c) = (Forward::new(matrix, range), Coefficients::new(matrix, range));
        let step = if cfg!(debug_assertions) { 3 } else { 1 };
        let values: Vec<u8> = (0..=255).step_by(step).chain([255]).collect();
        let mut max = [0; 3];
        for &r in &values {
            for &g in &values {
                for &b in &values {
                    let [y, u, v] = f.yuv([r, g, b]);
                    let back = c.rgb(y, u, v);
                    for (i, (got, want)) in back.into_iter().zip([r, g, b]).enumerate() {
                        max[i] = max[i].max((got as i32 - want as i32).abs());
                    }
                }
            }
        }
        max
    }

    /// RGB to yuv420 to yuv-to-rgb gives every colour back within 1 (full range) or 2 (limited:
    /// 219 and 224 levels for 256) per channel, on a pixel whose 2x2 block is one colour
    /// (measured over all 2^24 colours in a release build: max [1, 1, 1] full, [1, 1, 2]
    /// limited, for both matrices).
    const ROUND_TRIP_TOLERANCE: [(ColorRange, i32); 2] = [(ColorRange::Full, 1), (ColorRange::Limited, 2)];

    #[test]
    fn round_trip_through_yuv420_within_tolerance() {
        for matrix in MATRICES {
            for (range, tolerance) in ROUND_TRIP_TOLERANCE {
                let max = round_trip_error(matrix, range);
                assert!(max.iter().all(|&m| m <= tolerance), "{matrix:?} {range:?}: max error {max:?}");
                // The tolerance is tight: the largest error reaches it.
                assert_eq!(max.iter().max(), Some(&tolerance), "{matrix:?} {range:?}: {max:?}");
            }
        }
    }

    /// Convert packed `planes` (i420 or nv12, `w` x `h`) with a stage made from `params`;
    /// returns the packed output, after checking that no padding byte was written.
    fn run(params: &str, pixel: PixelFormat, w: u32, h: u32, planes: &[u8]) -> Vec<u8> {
        let params = parse_params::<YuvToRgb>(params).unwrap();
        let in_format = FrameFormat::new(pixel, w, h);
        let out_format = YuvToRgb::negotiate(&params, &[in_format]).unwrap().unwrap();
        assert_eq!((out_format.width, out_format.height), (w, h));
        let mut stage = YuvToRgb::create(params, &[in_format], Some(out_format), &cpu_context()).unwrap();
        let mut in_info = FrameInfo::new(in_format, 3, 0).unwrap();
        in_info.layout = padded(in_info.layout, 5);
        let in_bytes = frame_bytes(&in_info, planes, 0x77);
        let input = InputFrame::host(in_info, &in_bytes).unwrap();
        let mut out_info = FrameInfo::new(out_format, 3, 0).unwrap();
        out_info.layout = padded(out_info.layout, 3);
        let mut out_bytes = vec![0xa5; out_info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        stage.process(&[input], Some(&mut output), &pc).unwrap();
        packed_planes(&out_info.layout, &out_bytes, 0xa5).concat()
    }

    /// Every thread count writes what the per-pixel equations give, on sizes whose rows do not
    /// divide evenly among the threads.
    #[test]
    fn every_thread_count_writes_the_per_pixel_bytes() {
        for (w, h) in [(1usize, 1usize), (5, 3), (33, 17), (130, 67), (257, 11)] {
            let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
            let luma: Vec<u8> = (0..w * h).map(|i| (i * 37 + 11) as u8).collect();
            let u: Vec<u8> = (0..cw * ch).map(|i| (i * 53 + 7) as u8).collect();
            let v: Vec<u8> = (0..cw * ch).map(|i| (i * 71 + 201) as u8).collect();
            let i420 = [luma.clone(), u.clone(), v.clone()].concat();
            let uv: Vec<u8> = u.iter().zip(&v).flat_map(|(&u, &v)| [u, v]).collect();
            let nv12 = [luma.clone(), uv].concat();
            let c = Coefficients::new(Matrix::Bt601, ColorRange::Full);
            let want: Vec<u8> = (0..h)
                .flat_map(|y| (0..w).map(move |x| (x, y)))
                .flat_map(|(x, y)| c.rgb(luma[y * w + x], u[(y / 2) * cw + x / 2], v[(y / 2) * cw + x / 2]))
                .collect();
            for threads in [1, 2, 3, 4, 7, 64, 0] {
                let text = format!("matrix = \"bt601\"\nrange = \"full\"\nthreads = {threads}");
                assert_eq!(run(&text, PixelFormat::I420, w as u32, h as u32, &i420), want, "i420 {w}x{h} threads {threads}");
                assert_eq!(run(&text, PixelFormat::Nv12, w as u32, h as u32, &nv12), want, "nv12 {w}x{h} threads {threads}");
            }
        }
        let too_many = parse_params::<YuvToRgb>("threads = 257").unwrap();
        assert!(YuvToRgb::check(&too_many, &[]).is_err_and(|e| e.to_string().contains("param `threads`")));
    }

    #[test]
    fn odd_sized_i420_and_nv12_take_the_chroma_of_their_block() {
        // 5x3: chroma 3x2; pixel (x, y) takes sample (x / 2, y / 2).
        let (w, h) = (5usize, 3usize);
        let luma: Vec<u8> = (0..15).map(|i| 20 + i * 13).collect();
        let u: Vec<u8> = vec![40, 90, 128, 160, 200, 240];
        let v: Vec<u8> = vec![230, 60, 128, 100, 20, 180];
        let i420 = [luma.clone(), u.clone(), v.clone()].concat();
        let uv: Vec<u8> = u.iter().zip(&v).flat_map(|(&u, &v)| [u, v]).collect();
        let nv12 = [luma.clone(), uv].concat();
        for matrix in ["bt709", "bt601"] {
            for range in ["limited", "full"] {
                let text = format!("matrix = \"{matrix}\"\nrange = \"{range}\"");
                let params = parse_params::<YuvToRgb>(&text).unwrap();
                let c = Coefficients::new(params.matrix, params.range);
                let mut rgb = Vec::new();
                let mut rgba = Vec::new();
                for y in 0..h {
                    for x in 0..w {
                        let s = (y / 2) * 3 + x / 2;
                        let px = c.rgb(luma[y * w + x], u[s], v[s]);
                        rgb.extend_from_slice(&px);
                        rgba.extend_from_slice(&[px[0], px[1], px[2], 255]);
                    }
                }
                assert_eq!(run(&text, PixelFormat::I420, 5, 3, &i420), rgb, "{text}");
                assert_eq!(run(&text, PixelFormat::Nv12, 5, 3, &nv12), rgb, "{text}");
                let text = format!("{text}\nformat = \"rgba8\"");
                assert_eq!(run(&text, PixelFormat::I420, 5, 3, &i420), rgba, "{text}");
                assert_eq!(run(&text, PixelFormat::Nv12, 5, 3, &nv12), rgba, "{text}");
            }
        }
        // One pixel, one column, one row.
        assert_eq!(run("", PixelFormat::I420, 1, 1, &[235, 128, 128]), [255, 255, 255]);
        assert_eq!(run("", PixelFormat::Nv12, 1, 1, &[16, 128, 128]), [0, 0, 0]);
        let column = run("range = \"full\"", PixelFormat::I420, 1, 3, &[0, 128, 255, 128, 128, 128, 128]);
        assert_eq!(column, [0, 0, 0, 128, 128, 128, 255, 255, 255]);
        let row = run("range = \"full\"", PixelFormat::Nv12, 3, 1, &[0, 128, 255, 128, 128, 128, 128]);
        assert_eq!(row, [0, 0, 0, 128, 128, 128, 255, 255, 255]);
    }

    #[test]
    fn a_cpu_stage_refuses_device_frames_and_cuda_needs_a_context() {
        let params = parse_params::<YuvToRgb>("").unwrap();
        let in_format = FrameFormat::new(PixelFormat::I420, 4, 4);
        let out_format = YuvToRgb::negotiate(&params, &[in_format]).unwrap().unwrap();
        let mut stage = YuvToRgb::create(params, &[in_format], Some(out_format), &cpu_context()).unwrap();
        let (in_info, out_info) = (FrameInfo::new(in_format, 0, 0).unwrap(), FrameInfo::new(out_format, 0, 0).unwrap());
        let buffer = gpuipc_plugin_api::DeviceBuffer { addr: 0x1000, len: 1 << 20 };
        let input = InputFrame::device(in_info, buffer);
        let mut out = OutputFrame::device(out_info, buffer);
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[input], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("runs in the cpu domain"), "{e}");
        let cuda = CreateContext { domain: Domain::Cuda, ..cpu_context() };
        let e = YuvToRgb::create(params, &[in_format], Some(out_format), &cuda).unwrap_err();
        assert!(e.message().contains("kernels/yuv_to_rgb.cu"), "{e}");
    }

    /// The cuda path writes exactly the cpu path's bytes, padding untouched, for both inputs,
    /// both outputs, every matrix and range, odd sizes, aligned and unaligned pitches. Needs a
    /// GPU (skipped without one unless GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        let Some(gpu) = GpuHarness::for_test() else { return };
        const SENTINEL: u8 = 0xa5;
        let settings = [
            "",
            "format = \"rgba8\"",
            "matrix = \"bt601\"\nrange = \"full\"",
            "matrix = \"bt601\"\nrange = \"full\"\nformat = \"rgba8\"",
            "matrix = \"bt709\"\nrange = \"full\"",
            "matrix = \"bt601\"\nrange = \"limited\"",
        ];
        let sizes = [(1, 1), (2, 2), (5, 3), (17, 9), (33, 1), (1, 33), (641, 479), (1920, 1080)];
        for (width, height) in sizes {
            for pixel in [PixelFormat::I420, PixelFormat::Nv12] {
                let in_format = FrameFormat::new(pixel, width, height);
                for text in settings {
                    let params = parse_params::<YuvToRgb>(text).unwrap();
                    let out_format = YuvToRgb::negotiate(&params, &[in_format]).unwrap().unwrap();
                    let ctx = gpu.create_context("yuv-to-rgb").unwrap();
                    let mut stage = YuvToRgb::create(params, &[in_format], Some(out_format), &ctx).unwrap();
                    for (in_extra, out_extra) in [(0, 0), (5, 3)] {
                        let mut in_info = FrameInfo::new(in_format, 1, 0).unwrap();
                        in_info.layout = padded(in_info.layout, in_extra);
                        let mut out_info = FrameInfo::new(out_format, 1, 0).unwrap();
                        out_info.layout = padded(out_info.layout, out_extra);
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
                            panic!("{in_format} {text:?} pitch +{in_extra}/+{out_extra}: {d}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn params_and_formats_are_checked() {
        let e = parse_params::<YuvToRgb>("matrix = \"bt2020\"").unwrap_err();
        assert!(e.message().contains("matrix") && e.message().contains("bt2020"), "{e}");
        let e = parse_params::<YuvToRgb>("range = \"tv\"").unwrap_err();
        assert!(e.message().contains("range"), "{e}");
        let e = parse_params::<YuvToRgb>("format = \"gray8\"").unwrap_err();
        assert!(e.message().contains("format"), "{e}");
        let e = parse_params::<YuvToRgb>("layout = \"nv12\"").unwrap_err();
        assert!(e.message().contains("layout"), "{e}");
        let p = parse_params::<YuvToRgb>("").unwrap();
        assert_eq!(p, Params { matrix: Matrix::Bt709, range: ColorRange::Limited, format: RgbFormat::Rgb8, threads: 0 });
        let e = YuvToRgb::negotiate(&p, &[FrameFormat::new(PixelFormat::Rgb8, 4, 4)]).unwrap_err();
        assert_eq!(e.message(), "yuv-to-rgb takes i420 or nv12 frames; input is rgb8 4x4");
        let rgba = Params { format: RgbFormat::Rgba8, ..p };
        let out = YuvToRgb::negotiate(&rgba, &[FrameFormat::new(PixelFormat::Nv12, 7, 5)]).unwrap();
        assert_eq!(out, Some(FrameFormat::new(PixelFormat::Rgba8, 7, 5)));
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<YuvToRgb>(include_str!("lib.rs"), "");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), YuvToRgb::INFO.name, |text| {
            parse_params::<YuvToRgb>(text).unwrap();
        });
    }
}
