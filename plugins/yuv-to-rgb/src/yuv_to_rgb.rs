//! The yuv-to-rgb stage: its params, the fixed-point coefficients and the conversion loop,
//! which `kernels/yuv_to_rgb.cu` mirrors.

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::cuda::GpuConverter;
use gpuipc_plugin_api::bands;
/// The `matrix` and `range` params: the same names and values as `yuv420`'s.
pub use gpuipc_plugin_api::color::{ColorRange, Matrix};
use gpuipc_plugin_api::color::{matrix_param, range_param};

/// Fractional bits of the fixed-point coefficients for 8-bit samples (`i420`, `nv12`); 10-bit
/// ones (`p010`) take 2 more ([`Coefficients::frac_bits`]).
pub const FRAC_BITS: u32 = 16;

/// Bits of each Y, U and V sample of a `pixel` frame as yuv-to-rgb reads it: 8 for `i420` and
/// `nv12`, 10 for `p010`; `None` for a format it does not take.
pub fn sample_bits(pixel: PixelFormat) -> Option<u32> {
    match pixel {
        PixelFormat::I420 | PixelFormat::Nv12 => Some(8),
        PixelFormat::P010 => Some(10),
        _ => None,
    }
}

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

/// The fixed-point conversion: multipliers scaled by 2^[`Coefficients::frac_bits`], each
/// rounded to the nearest integer on its own. `kernels/yuv_to_rgb.cu` takes `y_offset`,
/// `y_mul`, `r_v`, `g_u`, `g_v` and `b_u` as arguments; `c_offset` and `frac_bits` follow
/// from the sample depth, which its entry point fixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coefficients {
    /// Black's Y: 16 (limited) or 0 (full), times 2^(bits - 8): 64 or 0 for 10-bit samples.
    pub y_offset: i32,
    /// The U, V of no colour: 128 for 8-bit samples, 512 for 10-bit ones.
    pub c_offset: i32,
    /// Of `Y - y_offset`: 255/219 (limited) or 1 (full) for 8-bit samples; 255/876 (limited)
    /// or 255/1023 (full) for 10-bit ones.
    pub y_mul: i32,
    /// Of `V - c_offset` in R.
    pub r_v: i32,
    /// Of `U - c_offset` in G.
    pub g_u: i32,
    /// Of `V - c_offset` in G.
    pub g_v: i32,
    /// Of `U - c_offset` in B.
    pub b_u: i32,
    /// Fractional bits of the multipliers: [`FRAC_BITS`] + (bits - 8), 16 for 8-bit samples and
    /// 18 for 10-bit ones, so that a multiplier of a sample four times finer keeps the same
    /// precision (and limited range's are the 8-bit integers).
    pub frac_bits: u32,
}

impl Coefficients {
    /// The inverse of `yuv420`'s equations for `matrix` and `range`, for 8-bit samples:
    ///
    /// ```text
    /// Y' = (Y - 16) 255/219 (limited) or Y (full); Cb, Cr = (U - 128), (V - 128), times
    /// 255/224 (limited)
    /// R = Y' + 2 (1 - Kr) Cr
    /// B = Y' + 2 (1 - Kb) Cb
    /// G = (Y' - Kr R - Kb B) / Kg = Y' - 2 Kb (1 - Kb) / Kg Cb - 2 Kr (1 - Kr) / Kg Cr
    /// ```
    pub fn new(matrix: Matrix, range: ColorRange) -> Coefficients {
        Coefficients::for_bits(matrix, range, 8)
    }

    /// The same equations for samples of `bits` bits, 8 or 10 ([`sample_bits`]), whose levels
    /// are the 8-bit ones times 2^(bits - 8) in limited range (10-bit: Y 64..=940, U, V
    /// 64..=960 around 512) and span 0..=2^bits - 1 in full range (U, V around 2^(bits - 1)),
    /// as H.273 defines them:
    ///
    /// ```text
    /// limited: Y' = (Y - 16 k) 255/(219 k)   Cb, Cr = (U, V - 128 k) 255/(224 k)   k = 2^(bits - 8)
    /// full:    Y' = Y 255/(2^bits - 1)       Cb, Cr = (U, V - 2^(bits - 1)) 255/(2^bits - 1)
    /// ```
    ///
    /// with R, G and B as in [`Coefficients::new`], in 8-bit levels.
    ///
    /// # Panics
    /// For `bits` other than 8 or 10.
    pub fn for_bits(matrix: Matrix, range: ColorRange, bits: u32) -> Coefficients {
        assert!(bits == 8 || bits == 10, "yuv-to-rgb reads 8- or 10-bit samples, not {bits}-bit");
        let (kr, kb) = matrix.kr_kb();
        let kg = 1.0 - kr - kb;
        let k = 1i32 << (bits - 8);
        let (y_offset, y_scale, c_scale) = match range {
            ColorRange::Full => {
                let max = f64::from((1 << bits) - 1);
                (0, 255.0 / max, 255.0 / max)
            }
            ColorRange::Limited => (16 * k, 255.0 / f64::from(219 * k), 255.0 / f64::from(224 * k)),
        };
        let frac_bits = FRAC_BITS + (bits - 8);
        let fixed = |x: f64| (x * f64::from(1u32 << frac_bits)).round() as i32;
        Coefficients {
            y_offset,
            c_offset: 128 * k,
            y_mul: fixed(y_scale),
            r_v: fixed(2.0 * (1.0 - kr) * c_scale),
            g_u: fixed(-2.0 * kb * (1.0 - kb) / kg * c_scale),
            g_v: fixed(-2.0 * kr * (1.0 - kr) / kg * c_scale),
            b_u: fixed(2.0 * (1.0 - kb) * c_scale),
            frac_bits,
        }
    }

    /// Bits of the samples these coefficients are for: 8 or 10.
    pub fn sample_bits(&self) -> u32 {
        (self.frac_bits + 8).saturating_sub(FRAC_BITS)
    }

    /// Whether `c_offset` and `frac_bits` are those [`Coefficients::for_bits`] gives samples of
    /// [`Coefficients::sample_bits`]: 128 and 16, or 512 and 18, the constants of
    /// `kernels/yuv_to_rgb.cu`'s entry points for 8-bit and 10-bit input.
    pub fn has_standard_depth(&self) -> bool {
        match self.sample_bits() {
            8 => (self.c_offset, self.frac_bits) == (128, FRAC_BITS),
            10 => (self.c_offset, self.frac_bits) == (512, FRAC_BITS + 2),
            _ => false,
        }
    }

    /// What the U, V of a pixel add to its R, G and B sums: `(dr, dg, db)`.
    #[inline(always)]
    pub fn chroma(&self, u: u16, v: u16) -> (i32, i32, i32) {
        let (u, v) = (i32::from(u) - self.c_offset, i32::from(v) - self.c_offset);
        (self.r_v * v, self.g_u * u + self.g_v * v, self.b_u * u)
    }

    /// `y_mul (Y - y_offset) + 2^(frac_bits - 1)`: a pixel's sum before its chroma.
    #[inline(always)]
    pub fn luma(&self, y: u16) -> i32 {
        self.y_mul * (i32::from(y) - self.y_offset) + (1 << (self.frac_bits - 1))
    }

    /// One channel of a pixel from its sum: `clamp(max(sum, 0) >> frac_bits, 0, 255)`, the
    /// value rounded half up. Clamping a negative sum to 0 first makes the shift the floor the
    /// clamp to 0 needs, on any integer type the kernel might use.
    #[inline(always)]
    pub fn channel(&self, sum: i32) -> u8 {
        (sum.max(0) >> self.frac_bits).min(255) as u8
    }

    /// (R, G, B) of one pixel of samples `y`, `u`, `v` (values of the coefficients' bits).
    pub fn rgb(&self, y: u16, u: u16, v: u16) -> [u8; 3] {
        let t = self.luma(y);
        let (dr, dg, db) = self.chroma(u, v);
        [self.channel(t + dr), self.channel(t + dg), self.channel(t + db)]
    }

    /// Write one pixel of sum `t` (its [`Coefficients::luma`]) and chroma `d` into `px`, 3 or
    /// 4 bytes (alpha 255).
    #[inline(always)]
    fn put(&self, px: &mut [u8], t: i32, (dr, dg, db): (i32, i32, i32)) {
        px[0] = self.channel(t + dr);
        px[1] = self.channel(t + dg);
        px[2] = self.channel(t + db);
        if let Some(alpha) = px.get_mut(3) {
            *alpha = 255;
        }
    }
}

/// Pixels a band must have for the default `threads` to give it a thread of its own (as for
/// `rgb-process` and `yuv420`: a thread costs tens of microseconds to start).
pub const MIN_BAND_PIXELS: usize = 1 << 18;

/// One output row from its input rows: the Y row, the U row (`i420`), the UV row (`nv12`,
/// `p010`) and the V row (`i420`; empty otherwise), each pixel `bpp` bytes.
type RowFn = fn(&Coefficients, &[u8], &[u8], &[u8], &mut [u8], usize);

/// `i420`: pixels two at a time (one chroma sample), the last one alone on an odd width.
fn i420_row(c: &Coefficients, luma: &[u8], u: &[u8], v: &[u8], out: &mut [u8], bpp: usize) {
    for (((pair, &u), &v), px) in luma.chunks(2).zip(u).zip(v).zip(out.chunks_mut(2 * bpp)) {
        let d = c.chroma(u.into(), v.into());
        for (&y, px) in pair.iter().zip(px.chunks_exact_mut(bpp)) {
            c.put(px, c.luma(y.into()), d);
        }
    }
}

/// `nv12`: as [`i420_row`], U and V from one row of pairs.
fn nv12_row(c: &Coefficients, luma: &[u8], uv: &[u8], _: &[u8], out: &mut [u8], bpp: usize) {
    for ((pair, uv), px) in luma.chunks(2).zip(uv.chunks_exact(2)).zip(out.chunks_mut(2 * bpp)) {
        let d = c.chroma(uv[0].into(), uv[1].into());
        for (&y, px) in pair.iter().zip(px.chunks_exact_mut(bpp)) {
            c.put(px, c.luma(y.into()), d);
        }
    }
}

/// A `p010` sample: the little-endian u16 at `bytes`, its high 10 bits (the low 6 are zero in
/// a well-formed frame and ignored in any other).
#[inline(always)]
fn p010_sample(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[0], bytes[1]]) >> 6
}

/// `p010`: as [`nv12_row`], every sample two bytes.
fn p010_row(c: &Coefficients, luma: &[u8], uv: &[u8], _: &[u8], out: &mut [u8], bpp: usize) {
    for ((pair, uv), px) in luma.chunks(4).zip(uv.chunks_exact(4)).zip(out.chunks_mut(2 * bpp)) {
        let d = c.chroma(p010_sample(&uv[..2]), p010_sample(&uv[2..]));
        for (y, px) in pair.chunks_exact(2).zip(px.chunks_exact_mut(bpp)) {
            c.put(px, c.luma(p010_sample(y)), d);
        }
    }
}

/// Convert one `i420`, `nv12` or `p010` frame (host memory) into `output` (`rgb8` or `rgba8`
/// of the same size, host memory): every pixel with the U and V of its 2x2 block, as
/// `kernels/yuv_to_rgb.cu` does; bands of rows on `threads` threads as the param says.
/// `coeffs` must be for the input's [`sample_bits`].
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
    let pixel = input.info.pixel();
    let row_fn: RowFn = match pixel {
        PixelFormat::I420 => i420_row,
        PixelFormat::Nv12 => nv12_row,
        PixelFormat::P010 => p010_row,
        other => bail!("yuv-to-rgb takes i420, nv12 or p010 frames; input is {other}"),
    };
    if sample_bits(pixel) != Some(coeffs.sample_bits()) {
        bail!("coefficients for {}-bit samples cannot convert {pixel} frames", coeffs.sample_bits());
    }
    let host_only = || Error::new("yuv-to-rgb reads and writes host memory only (cpu domain)");
    let y_plane = input.plane(0).ok_or_else(host_only)?;
    let u_plane = input.plane(1).ok_or_else(host_only)?;
    let v_plane = match pixel {
        PixelFormat::I420 => Some(input.plane(2).ok_or_else(host_only)?),
        _ => None,
    };
    let planes = bands::planes_mut(output).ok_or_else(host_only)??;
    let Some(out) = planes.into_iter().next() else { bail!("the output frame has no plane") };
    let n = bands::thread_count(threads, width * height / MIN_BAND_PIXELS, height);
    let counts: Vec<usize> = bands::even_counts(height, bands::band_count(n, height)).collect();
    let work: Vec<_> = bands::starts(&counts).zip(out.split(counts.iter().copied())).collect();
    bands::run(work, n, |(first, mut band)| {
        for (y, row) in (first..).zip(band.iter_mut()) {
            let v_row = v_plane.as_ref().map_or(&[][..], |p| p.row(y / 2));
            row_fn(coeffs, y_plane.row(y), u_plane.row(y / 2), v_row, row, bpp);
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

/// The output for the one input (i420, nv12 or p010, checked against `INFO` before
/// `negotiate` and `create` are called): the `format` param's format, the same size.
fn output_format(params: &Params, input: FrameFormat) -> FrameFormat {
    FrameFormat::new(params.format.pixel(), input.width, input.height)
}

impl Plugin for YuvToRgb {
    type Params = Params;

    // Replicas allowed: each frame is converted on its own.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "yuv-to-rgb",
        version: env!("CARGO_PKG_VERSION"),
        description: "I420, NV12 or P010 (10-bit) to RGB, BT.709 or BT.601, limited or full range (the inverse of yuv420)",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::I420, PixelFormat::Nv12, PixelFormat::P010],
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        matrix_param(
            "luma weights the frames were made with: BT.709 Kr = 0.2126, Kb = 0.0722; BT.601 Kr = 0.299, Kb = 0.114",
        ),
        range_param(
            "limited: Y 16..=235, U, V 16..=240 (p010: 64..=940, 64..=960; values beyond clamp); full: 0..=255 (p010: 0..=1023)",
        ),
        ParamInfo {
            name: "format",
            kind: r#""rgb8" | "rgba8""#,
            default: r#""rgb8""#,
            range: "",
            description: "output pixel format; rgba8 has alpha 255",
        },
        bands::threads_param(
            "cpu domain: threads converting each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain",
        ),
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let mut problems = Vec::new();
        bands::check_threads_param(params.threads, &mut problems);
        if problems.is_empty() { Ok(()) } else { bail!("{}", problems.join("; ")) }
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(output_format(params, inputs[0])))
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<YuvToRgb> {
        let expected = output_format(&params, inputs[0]);
        if output != Some(expected) {
            bail!("yuv-to-rgb makes {expected} frames here, but the output was set to {output:?}");
        }
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuConverter::new(ctx)?),
            Domain::Cpu => None,
        };
        // INFO.accepts holds only formats whose samples it knows.
        let bits = inputs[0].pixel_format().and_then(sample_bits).expect("an input format of INFO.accepts");
        Ok(YuvToRgb {
            threads: params.threads,
            coeffs: Coefficients::for_bits(params.matrix, params.range, bits),
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
    use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples, cpu_context, frame_bytes, packed_planes, padded};
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
        assert_eq!(
            (f.y_offset, f.y, f.u, f.v),
            (16, [11966, 40254, 4064], [-6596, -22189, 28784], [28784, -26145, -2639])
        );
        let f = Forward::new(Matrix::Bt709, ColorRange::Full);
        assert_eq!(
            (f.y_offset, f.y, f.u, f.v),
            (0, [13933, 46871, 4732], [-7509, -25259, 32768], [32768, -29763, -3005])
        );
        let f = Forward::new(Matrix::Bt601, ColorRange::Limited);
        assert_eq!(
            (f.y_offset, f.y, f.u, f.v),
            (16, [16829, 33039, 6416], [-9714, -19071, 28784], [28784, -24103, -4681])
        );
        let f = Forward::new(Matrix::Bt601, ColorRange::Full);
        assert_eq!(
            (f.y_offset, f.y, f.u, f.v),
            (0, [19595, 38470, 7471], [-11058, -21710, 32768], [32768, -27439, -5329])
        );
        // And yuv420's known colours.
        let f = Forward::new(Matrix::Bt709, ColorRange::Limited);
        assert_eq!(f.yuv([255, 0, 0]), [63, 102, 240]);
        assert_eq!(f.yuv([0, 255, 0]), [173, 42, 26]);
        assert_eq!(f.yuv([255, 255, 0]), [219, 16, 138]);
        assert_eq!(Forward::new(Matrix::Bt601, ColorRange::Full).yuv([255, 0, 0]), [76, 85, 255]);
    }

    #[test]
    fn coefficients_are_the_documented_integers() {
        let c = |m, r, bits| {
            let c = Coefficients::for_bits(m, r, bits);
            ((c.y_offset, c.c_offset, c.frac_bits), (c.y_mul, c.r_v, c.g_u, c.g_v, c.b_u))
        };
        let eight = |m, r| c(m, r, 8);
        assert_eq!(eight(Matrix::Bt709, ColorRange::Limited), ((16, 128, 16), (76309, 117489, -13975, -34925, 138438)));
        assert_eq!(eight(Matrix::Bt709, ColorRange::Full), ((0, 128, 16), (65536, 103206, -12276, -30679, 121609)));
        assert_eq!(eight(Matrix::Bt601, ColorRange::Limited), ((16, 128, 16), (76309, 104597, -25675, -53279, 132201)));
        assert_eq!(eight(Matrix::Bt601, ColorRange::Full), ((0, 128, 16), (65536, 91881, -22553, -46802, 116130)));
        for m in MATRICES {
            for r in RANGES {
                assert_eq!(Coefficients::new(m, r), Coefficients::for_bits(m, r, 8));
            }
        }
        // 10-bit: 18 fractional bits. Limited range's multipliers are the 8-bit integers
        // (255/876 2^18 = 255/219 2^16); full range's are 1020/1023 of full 8-bit's, rounded.
        let ten = |m, r| c(m, r, 10);
        assert_eq!(ten(Matrix::Bt709, ColorRange::Limited), ((64, 512, 18), (76309, 117489, -13975, -34925, 138438)));
        assert_eq!(ten(Matrix::Bt709, ColorRange::Full), ((0, 512, 18), (65344, 102903, -12240, -30589, 121252)));
        assert_eq!(ten(Matrix::Bt601, ColorRange::Limited), ((64, 512, 18), (76309, 104597, -25675, -53279, 132201)));
        assert_eq!(ten(Matrix::Bt601, ColorRange::Full), ((0, 512, 18), (65344, 91612, -22487, -46664, 115789)));
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

    /// The standards' inverse equations in f64 for samples of `bits` bits (8 or 10), written
    /// out here rather than taken from [`Coefficients`]: (R, G, B) in 8-bit levels before
    /// rounding.
    fn reference(matrix: Matrix, range: ColorRange, bits: u32, [y, u, v]: [f64; 3]) -> [f64; 3] {
        let (kr, kb) = match matrix {
            Matrix::Bt709 => (0.2126, 0.0722),
            Matrix::Bt601 => (0.299, 0.114),
        };
        let (y, cb, cr) = match (range, bits) {
            (ColorRange::Full, 8) => (y, u - 128.0, v - 128.0),
            (ColorRange::Limited, 8) => {
                ((y - 16.0) * 255.0 / 219.0, (u - 128.0) * 255.0 / 224.0, (v - 128.0) * 255.0 / 224.0)
            }
            // H.273: full range spans 0..=1023 with chroma around 512; limited range is the
            // 8-bit levels times 4 (Y 64..=940, U, V 64..=960).
            (ColorRange::Full, 10) => (y * 255.0 / 1023.0, (u - 512.0) * 255.0 / 1023.0, (v - 512.0) * 255.0 / 1023.0),
            (ColorRange::Limited, 10) => {
                ((y - 64.0) * 255.0 / 876.0, (u - 512.0) * 255.0 / 896.0, (v - 512.0) * 255.0 / 896.0)
            }
            _ => unreachable!("{bits}-bit samples"),
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
        // Every Y, U and V in steps of 3 (and 255) for 8-bit samples, of 11 (and 1023) for
        // 10-bit ones: within 1 of the float result everywhere, equal to it for nearly all.
        for (bits, step) in [(8, 3), (10, 11)] {
            let max = (1u16 << bits) - 1;
            let values: Vec<u16> = (0..=max).step_by(step).chain([max]).collect();
            for matrix in MATRICES {
                for range in RANGES {
                    let c = Coefficients::for_bits(matrix, range, bits);
                    let (mut exact, mut total) = (0u32, 0u32);
                    for &y in &values {
                        for &u in &values {
                            for &v in &values {
                                let got = c.rgb(y, u, v).map(i32::from);
                                let want = reference(matrix, range, bits, [y, u, v].map(f64::from)).map(round);
                                for (got, want) in got.into_iter().zip(want) {
                                    assert!((got - want).abs() <= 1, "{bits} bits {matrix:?} {range:?} {y},{u},{v}");
                                    total += 1;
                                    exact += (got == want) as u32;
                                }
                            }
                        }
                    }
                    assert!(
                        exact as f64 >= 0.999 * total as f64,
                        "{bits} bits {matrix:?} {range:?}: {exact} of {total}"
                    );
                }
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
                    let back = c.rgb(y.into(), u.into(), v.into());
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

    /// Convert packed `planes` (i420, nv12 or p010, `w` x `h`) with a stage made from `params`;
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
                .flat_map(|(x, y)| {
                    let s = (y / 2) * cw + x / 2;
                    c.rgb(luma[y * w + x].into(), u[s].into(), v[s].into())
                })
                .collect();
            // p010: 10-bit samples of the same kind, each `value << 6`.
            let ten =
                |n: usize, a: usize, b: usize| -> Vec<u16> { (0..n).map(|i| ((i * a + b) % 1024) as u16).collect() };
            let (luma10, u10, v10) = (ten(w * h, 389, 41), ten(cw * ch, 577, 7), ten(cw * ch, 811, 1000));
            let bytes = |s: &[u16]| -> Vec<u8> { s.iter().flat_map(|&s| (s << 6).to_le_bytes()).collect() };
            let uv10: Vec<u16> = u10.iter().zip(&v10).flat_map(|(&u, &v)| [u, v]).collect();
            let p010 = [bytes(&luma10), bytes(&uv10)].concat();
            let c10 = Coefficients::for_bits(Matrix::Bt601, ColorRange::Full, 10);
            let want10: Vec<u8> = (0..h)
                .flat_map(|y| (0..w).map(move |x| (x, y)))
                .flat_map(|(x, y)| {
                    let s = (y / 2) * cw + x / 2;
                    c10.rgb(luma10[y * w + x], u10[s], v10[s])
                })
                .collect();
            for threads in [1, 2, 3, 4, 7, 64, 0] {
                let text = format!("matrix = \"bt601\"\nrange = \"full\"\nthreads = {threads}");
                assert_eq!(
                    run(&text, PixelFormat::I420, w as u32, h as u32, &i420),
                    want,
                    "i420 {w}x{h} threads {threads}"
                );
                assert_eq!(
                    run(&text, PixelFormat::Nv12, w as u32, h as u32, &nv12),
                    want,
                    "nv12 {w}x{h} threads {threads}"
                );
                assert_eq!(
                    run(&text, PixelFormat::P010, w as u32, h as u32, &p010),
                    want10,
                    "p010 {w}x{h} threads {threads}"
                );
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
                        let px = c.rgb(luma[y * w + x].into(), u[s].into(), v[s].into());
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

    /// A small random generator (splitmix64) for the p010 tests, seeded afresh each run
    /// (`GPUIPC_TEST_SEED=N` repeats a run); failures name the seed.
    struct Rng {
        seed: u64,
        state: u64,
    }

    impl Rng {
        fn fresh(test: &str) -> Rng {
            use std::hash::{BuildHasher, RandomState};
            let seed = match std::env::var("GPUIPC_TEST_SEED") {
                Ok(seed) => seed.parse().expect("GPUIPC_TEST_SEED is an integer"),
                Err(_) => RandomState::new().hash_one(std::time::SystemTime::now()),
            };
            eprintln!("{test}: seed {seed} (GPUIPC_TEST_SEED={seed} repeats it)");
            Rng { seed, state: seed }
        }

        fn next(&mut self) -> u64 {
            self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        /// A 10-bit value, uniform over 0..=1023.
        fn ten_bit(&mut self) -> u16 {
            (self.next() >> 54) as u16
        }
    }

    /// A `w` x `h` p010 frame of random 10-bit samples: the values per plane, and the packed
    /// bytes (Y plane then UV pairs, each sample `value << 6` as little-endian u16, its low 6
    /// bits random when `noisy`).
    struct P010 {
        luma: Vec<u16>,
        u: Vec<u16>,
        v: Vec<u16>,
        packed: Vec<u8>,
    }

    fn random_p010(rng: &mut Rng, w: usize, h: usize, noisy: bool) -> P010 {
        let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
        let mut values = |n: usize| -> Vec<u16> { (0..n).map(|_| rng.ten_bit()).collect() };
        let (luma, u, v) = (values(w * h), values(cw * ch), values(cw * ch));
        assert!(luma.iter().chain(&u).chain(&v).any(|&s| s != 0), "seed {}: an all-zero frame", rng.seed);
        let mut sample = |value: u16| {
            let low = if noisy { (rng.next() & 0x3f) as u16 } else { 0 };
            ((value << 6) | low).to_le_bytes()
        };
        let mut packed: Vec<u8> = luma.iter().flat_map(|&y| sample(y)).collect();
        packed.extend(u.iter().zip(&v).flat_map(|(&u, &v)| [sample(u), sample(v)]).flatten());
        P010 { luma, u, v, packed }
    }

    /// The cpu path on fresh random p010 frames agrees with the standards' float equations
    /// (H.273's 10-bit levels) within 1 on every byte, for every matrix, range and output, at
    /// odd sizes and on several threads; equal on nearly all.
    #[test]
    fn p010_frames_are_the_float_equations_within_1() {
        let mut rng = Rng::fresh("p010_frames_are_the_float_equations_within_1");
        let sizes = [(1usize, 1usize), (3, 1), (1, 3), (5, 3), (17, 9), (33, 17), (127, 65)];
        for matrix in MATRICES {
            for range in RANGES {
                let (mut exact, mut total) = (0usize, 0usize);
                for (w, h) in sizes {
                    let frame = random_p010(&mut rng, w, h, false);
                    for (format, bpp) in [("rgb8", 3), ("rgba8", 4)] {
                        let names = (format!("{matrix:?}").to_lowercase(), format!("{range:?}").to_lowercase());
                        let text = format!(
                            "matrix = \"{}\"\nrange = \"{}\"\nformat = \"{format}\"\nthreads = 3",
                            names.0, names.1
                        );
                        let out = run(&text, PixelFormat::P010, w as u32, h as u32, &frame.packed);
                        assert_eq!(out.len(), w * h * bpp);
                        for (i, px) in out.chunks_exact(bpp).enumerate() {
                            let (x, y) = (i % w, i / w);
                            let s = (y / 2) * w.div_ceil(2) + x / 2;
                            let yuv = [frame.luma[i], frame.u[s], frame.v[s]];
                            let want = reference(matrix, range, 10, yuv.map(f64::from)).map(round);
                            for (&got, want) in px.iter().zip(want) {
                                let seed = rng.seed;
                                assert!(
                                    (got as i32 - want).abs() <= 1,
                                    "seed {seed}: {text:?} {w}x{h} ({x}, {y}) {yuv:?}: {px:?}, want {want:?}"
                                );
                                exact += (got as i32 == want) as usize;
                                total += 1;
                            }
                            if bpp == 4 {
                                assert_eq!(px[3], 255);
                            }
                        }
                    }
                }
                assert!(
                    exact as f64 >= 0.999 * total as f64,
                    "seed {}: {matrix:?} {range:?}: {exact} of {total}",
                    rng.seed
                );
            }
        }
    }

    /// The low 6 bits of a p010 sample carry nothing: a frame with them random converts to
    /// the bytes of the same frame with them zero.
    #[test]
    fn p010_ignores_the_low_bits() {
        let mut rng = Rng::fresh("p010_ignores_the_low_bits");
        let (w, h) = (37, 11);
        let noisy = random_p010(&mut rng, w, h, true);
        let clean: Vec<u8> = noisy
            .packed
            .chunks_exact(2)
            .flat_map(|s| (u16::from_le_bytes([s[0], s[1]]) & !0x3f).to_le_bytes())
            .collect();
        assert_ne!(clean, noisy.packed, "seed {}", rng.seed);
        for text in ["", "matrix = \"bt601\"\nrange = \"full\"\nformat = \"rgba8\""] {
            let want = run(text, PixelFormat::P010, w as u32, h as u32, &clean);
            assert_eq!(run(text, PixelFormat::P010, w as u32, h as u32, &noisy.packed), want, "seed {}", rng.seed);
        }
    }

    /// In limited range a 10-bit sample four times an 8-bit one is the same level, and the
    /// fixed point gives the same bytes (the multipliers are the same integers, the sums 4
    /// times larger, shifted 2 bits more); in full range 1023 and 255 levels differ by less
    /// than 1 in 340, and the results by at most 1.
    #[test]
    fn p010_of_8_bit_levels_gives_the_8_bit_bytes() {
        let values: Vec<u16> = (0..=255).step_by(3).chain([255]).collect();
        for matrix in MATRICES {
            let (c8, c10) = (
                Coefficients::new(matrix, ColorRange::Limited),
                Coefficients::for_bits(matrix, ColorRange::Limited, 10),
            );
            let (f8, f10) =
                (Coefficients::new(matrix, ColorRange::Full), Coefficients::for_bits(matrix, ColorRange::Full, 10));
            for &y in &values {
                for &u in &values {
                    for &v in &values {
                        assert_eq!(c10.rgb(4 * y, 4 * u, 4 * v), c8.rgb(y, u, v), "{matrix:?} {y},{u},{v}");
                        // The 10-bit level nearest the 8-bit one: y 1023/255.
                        let y10 = ((u32::from(y) * 1023 + 127) / 255) as u16;
                        let (a, b) = (f10.rgb(y10, 4 * u, 4 * v), f8.rgb(y, u, v));
                        assert!(
                            a.iter().zip(b).all(|(&a, b)| a.abs_diff(b) <= 1),
                            "{matrix:?} full {y},{u},{v}: {a:?} {b:?}"
                        );
                    }
                }
            }
        }
        // Whole frames: an nv12 frame and its p010 twin (every sample times 4) in limited range.
        let mut rng = Rng::fresh("p010_of_8_bit_levels_gives_the_8_bit_bytes");
        let (w, h) = (29usize, 7usize);
        let nv12: Vec<u8> = (0..w * h + 2 * w.div_ceil(2) * h.div_ceil(2)).map(|_| rng.next() as u8).collect();
        let p010: Vec<u8> = nv12.iter().flat_map(|&s| (u16::from(s) << 8).to_le_bytes()).collect();
        for text in ["", "matrix = \"bt601\"\nformat = \"rgba8\""] {
            let want = run(text, PixelFormat::Nv12, w as u32, h as u32, &nv12);
            assert_eq!(run(text, PixelFormat::P010, w as u32, h as u32, &p010), want, "seed {} {text:?}", rng.seed);
        }
    }

    #[test]
    fn p010_known_colours() {
        for matrix in MATRICES {
            for range in RANGES {
                let c = Coefficients::for_bits(matrix, range, 10);
                let (black, white) = match range {
                    ColorRange::Limited => (64, 940),
                    ColorRange::Full => (0, 1023),
                };
                assert_eq!(c.rgb(black, 512, 512), [0, 0, 0], "{matrix:?} {range:?}");
                assert_eq!(c.rgb(white, 512, 512), [255, 255, 255], "{matrix:?} {range:?}");
                // Below black and above white clamp; so do the extreme chroma values.
                assert_eq!(c.rgb(0, 512, 512), [0, 0, 0]);
                assert_eq!(c.rgb(1023, 512, 512), [255, 255, 255]);
                assert_eq!(c.rgb(1023, 1023, 1023)[0], 255);
                assert_eq!(c.rgb(0, 0, 0)[0], 0);
            }
        }
        // Mid gray: limited 504 is (504 - 64) 255/876 = 128.1, full 514 is 128.1.
        assert_eq!(Coefficients::for_bits(Matrix::Bt709, ColorRange::Limited, 10).rgb(504, 512, 512), [128, 128, 128]);
        assert_eq!(Coefficients::for_bits(Matrix::Bt601, ColorRange::Full, 10).rgb(514, 512, 512), [128, 128, 128]);
        // One pixel through the stage, each sample `value << 6`.
        let p010 = |samples: &[u16]| -> Vec<u8> { samples.iter().flat_map(|&s| (s << 6).to_le_bytes()).collect() };
        assert_eq!(run("", PixelFormat::P010, 1, 1, &p010(&[940, 512, 512])), [255, 255, 255]);
        assert_eq!(run("", PixelFormat::P010, 1, 1, &p010(&[64, 512, 512])), [0, 0, 0]);
        let row = run("range = \"full\"", PixelFormat::P010, 3, 1, &p010(&[0, 514, 1023, 512, 512, 512, 512]));
        assert_eq!(row, [0, 0, 0, 128, 128, 128, 255, 255, 255]);
    }

    /// `convert` refuses coefficients made for other samples than the input's.
    #[test]
    fn coefficients_must_match_the_samples() {
        let format = FrameFormat::new(PixelFormat::P010, 2, 2);
        let info = FrameInfo::new(format, 0, 0).unwrap();
        let bytes = vec![0u8; info.layout.total_bytes as usize];
        let input = InputFrame::host(info, &bytes).unwrap();
        let out_info = FrameInfo::new(FrameFormat::new(PixelFormat::Rgb8, 2, 2), 0, 0).unwrap();
        let mut out_bytes = vec![0u8; out_info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        let eight = Coefficients::new(Matrix::Bt709, ColorRange::Limited);
        let e = convert(&eight, 1, &input, &mut output).unwrap_err();
        assert_eq!(e.message(), "coefficients for 8-bit samples cannot convert p010 frames");
        let ten = Coefficients::for_bits(Matrix::Bt709, ColorRange::Limited, 10);
        convert(&ten, 1, &input, &mut output).unwrap();
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

    /// `layout` with plane `plane` and every plane after it moved `by` bytes further into the
    /// frame: a plane address that is not a multiple of 16 while every pitch is.
    fn shifted(mut layout: gpuipc_plugin_api::FrameLayout, plane: usize, by: u64) -> gpuipc_plugin_api::FrameLayout {
        for p in &mut layout.planes[plane..layout.n_planes as usize] {
            p.offset += by;
        }
        layout.total_bytes += by;
        layout
    }

    /// How a test lays frames out: (input pitch +, output pitch +, input's last plane moved
    /// by, output plane moved by), bytes.
    type Placement = (u64, u64, u64, u64);

    /// Convert `in_bytes` (a frame of `in_format` padded by `in_extra` bytes a row, its last
    /// plane moved by `in_shift`) with a stage made from `params` on the CPU and on the GPU,
    /// into `out_extra`-padded frames (moved by `out_shift`) filled with a sentinel first; the
    /// first byte where the two differ (padding included), or `None`.
    fn gpu_against_cpu(
        gpu: &gpuipc_plugin_api::cuda::testing::GpuHarness,
        in_format: FrameFormat,
        text: &str,
        (in_extra, out_extra, in_shift, out_shift): Placement,
        in_bytes: impl FnOnce(&FrameInfo) -> Vec<u8>,
    ) -> Option<String> {
        use gpuipc_plugin_api::cuda::testing::first_difference;
        const SENTINEL: u8 = 0xa5;
        let params = parse_params::<YuvToRgb>(text).unwrap();
        let out_format = YuvToRgb::negotiate(&params, &[in_format]).unwrap().unwrap();
        let ctx = gpu.create_context("yuv-to-rgb").unwrap();
        let mut stage = YuvToRgb::create(params, &[in_format], Some(out_format), &ctx).unwrap();
        let mut in_info = FrameInfo::new(in_format, 1, 0).unwrap();
        let last = in_info.layout.n_planes as usize - 1;
        in_info.layout = shifted(padded(in_info.layout, in_extra), last, in_shift);
        let mut out_info = FrameInfo::new(out_format, 1, 0).unwrap();
        out_info.layout = shifted(padded(out_info.layout, out_extra), 0, out_shift);
        let in_bytes = in_bytes(&in_info);

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
        first_difference(&got, &cpu, &out_info.layout)
    }

    /// The cuda path writes exactly the cpu path's bytes, padding untouched, for every input
    /// format, both outputs, every matrix and range, odd sizes and partial 16-pixel groups,
    /// aligned and unaligned pitches (odd ones too: p010's two-byte samples then lie at odd
    /// addresses; +16/+48: 16-aligned but not 64), and a misaligned plane address with aligned
    /// pitches (the input's last plane: V or UV; or the output plane), so that
    /// kernels/yuv_to_rgb.cu's uint4 path and its byte path (partial groups, misaligned
    /// planes) are both checked. The input is hashed bytes, so p010 samples have low bits set,
    /// which both paths ignore. Needs a GPU (skipped without one unless GPUIPC_REQUIRE_GPU=1)
    /// and NVRTC.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::GpuHarness;
        let Some(gpu) = GpuHarness::for_test() else { return };
        let settings = [
            "",
            "format = \"rgba8\"",
            "matrix = \"bt601\"\nrange = \"full\"",
            "matrix = \"bt601\"\nrange = \"full\"\nformat = \"rgba8\"",
            "matrix = \"bt709\"\nrange = \"full\"",
            "matrix = \"bt601\"\nrange = \"limited\"",
        ];
        let sizes = [(1, 1), (2, 2), (5, 3), (16, 5), (17, 9), (33, 1), (1, 33), (641, 479), (654, 481), (1920, 1080)];
        let placements: [Placement; 5] = [(0, 0, 0, 0), (5, 3, 0, 0), (16, 48, 0, 0), (0, 0, 8, 0), (0, 0, 0, 4)];
        for (width, height) in sizes {
            for pixel in [PixelFormat::I420, PixelFormat::Nv12, PixelFormat::P010] {
                let in_format = FrameFormat::new(pixel, width, height);
                for text in settings {
                    for place in placements {
                        let hashed = |info: &FrameInfo| {
                            (0..info.layout.total_bytes).map(|i| ((i * 2_654_435_761) >> 13) as u8).collect()
                        };
                        if let Some(d) = gpu_against_cpu(&gpu, in_format, text, place, hashed) {
                            panic!("{in_format} {text:?} pitch/plane placement {place:?}: {d}");
                        }
                    }
                }
            }
        }
    }

    /// The cuda path writes exactly the cpu path's bytes for random p010 frames (fresh each
    /// run, well formed: low 6 bits zero), every matrix, range and output, odd sizes and
    /// pitches. Needs a GPU (skipped without one unless GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_p010_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::GpuHarness;
        let Some(gpu) = GpuHarness::for_test() else { return };
        let mut rng = Rng::fresh("gpu_p010_frames_equal_cpu_frames");
        for (width, height) in [(1, 1), (3, 5), (17, 9), (641, 479), (1921, 1081)] {
            let in_format = FrameFormat::new(PixelFormat::P010, width, height);
            for matrix in ["bt709", "bt601"] {
                for range in ["limited", "full"] {
                    for format in ["rgb8", "rgba8"] {
                        let text = format!("matrix = \"{matrix}\"\nrange = \"{range}\"\nformat = \"{format}\"");
                        for place in [(0, 0, 0, 0), (5, 3, 0, 0)] {
                            let frame = random_p010(&mut rng, width as usize, height as usize, false);
                            let bytes = |info: &FrameInfo| frame_bytes(info, &frame.packed, 0x77);
                            if let Some(d) = gpu_against_cpu(&gpu, in_format, &text, place, bytes) {
                                panic!("seed {}: {in_format} {text:?} placement {place:?}: {d}", rng.seed);
                            }
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
        assert_eq!(
            p,
            Params { matrix: Matrix::Bt709, range: ColorRange::Limited, format: RgbFormat::Rgb8, threads: 0 }
        );
        let e = CpuStage::<YuvToRgb>::new("", &[FrameFormat::new(PixelFormat::Rgb8, 4, 4)]).err().unwrap();
        assert_eq!(e.message(), "yuv-to-rgb takes i420, nv12 or p010 frames; input is rgb8 4x4");
        let out = YuvToRgb::negotiate(&p, &[FrameFormat::new(PixelFormat::P010, 7, 5)]).unwrap();
        assert_eq!(out, Some(FrameFormat::new(PixelFormat::Rgb8, 7, 5)));
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
