//! The generator stage: its params, the pattern formulas and the frame loop.
//!
//! The per-pixel functions are `pub` so the CUDA version and its tests can check themselves
//! against them.

use std::thread;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::bands;
use crate::cuda::GpuGenerator;

/// Largest accepted width and height. Keeps every intermediate of the formulas (`x * 255`,
/// `x + w`) far inside 32 bits, so GPU kernels can use 32-bit arithmetic.
pub const MAX_SIZE: u32 = 32768;

/// Slowest accepted `fps`: a frame every 1000 s. A slower rate paces nothing a run could
/// wait for (`fps = 1e-300` puts frame 1 past any representable instant).
pub const MIN_FPS: f64 = 1e-3;

/// `x` as a message shows it: plain where that is short (`29.97`, `0.001`), in exponent form
/// where plain would run to hundreds of digits (`1e-300`).
pub fn show_float(x: f64) -> String {
    let plain = format!("{x}");
    if plain.len() <= 12 { plain } else { format!("{x:e}") }
}

/// The `params` table of a generator stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Frame width in pixels, 1..=[`MAX_SIZE`]. Default 1280.
    pub width: u32,
    /// Frame height in pixels, 1..=[`MAX_SIZE`]. Default 720.
    pub height: u32,
    /// What to draw. Default `bars`.
    pub pattern: Pattern,
    /// Output pixel format. Default `rgb8`.
    pub format: Format,
    /// Pace output to this many frames per second (finite, >= [`MIN_FPS`]). Default: unpaced.
    pub fps: Option<f64>,
    /// Seed of the `noise` pattern. Default 0.
    pub seed: u64,
    /// Threads drawing a frame in the cpu domain, 0..=[`bands::MAX_THREADS`]; 0 is a share of
    /// the cores ([`bands::thread_count`]). Default 0.
    pub threads: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            width: 1280,
            height: 720,
            pattern: Pattern::Bars,
            format: Format::Rgb8,
            fps: None,
            seed: 0,
            threads: 0,
        }
    }
}

impl Params {
    /// Check the values serde cannot, reporting every problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        for (key, value) in [("width", self.width), ("height", self.height)] {
            if !(1..=MAX_SIZE).contains(&value) {
                problems.push(format!("param `{key}` must be 1..={MAX_SIZE}, got {value}"));
            }
        }
        match self.fps {
            Some(fps) if !(fps.is_finite() && fps > 0.0) => {
                problems.push(format!("param `fps` must be a finite number > 0, got {}", show_float(fps)));
            }
            Some(fps) if fps < MIN_FPS => problems.push(format!(
                "param `fps` must be at least {MIN_FPS} (a frame every {} s), got {}: too slow to pace a run",
                1.0 / MIN_FPS,
                show_float(fps)
            )),
            _ => {}
        }
        bands::check_threads_param(self.threads, &mut problems);
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }

    /// The format of every frame this stage makes.
    pub fn frame_format(&self) -> FrameFormat {
        FrameFormat::new(self.format.pixel(), self.width, self.height)
    }
}

/// The `pattern` param.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pattern {
    /// Eight vertical 100% colour bars, see [`bars_rgb`].
    #[default]
    Bars,
    /// Horizontal red ramp, vertical green ramp, blue moving with `seq`, see [`gradient_rgb`].
    Gradient,
    /// Hashed noise, see [`noise_byte`].
    Noise,
    /// A white box moving diagonally over gray, see [`box_rgb`].
    Box,
}

/// The `format` param: the pixel formats a generator can make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Rgb8,
    Rgba8,
    Gray8,
}

impl Format {
    pub fn pixel(self) -> PixelFormat {
        match self {
            Format::Rgb8 => PixelFormat::Rgb8,
            Format::Rgba8 => PixelFormat::Rgba8,
            Format::Gray8 => PixelFormat::Gray8,
        }
    }
}

/// The bars, left to right: white, yellow, cyan, green, magenta, red, blue, black.
pub const BARS: [[u8; 3]; 8] =
    [[255, 255, 255], [255, 255, 0], [0, 255, 255], [0, 255, 0], [255, 0, 255], [255, 0, 0], [0, 0, 255], [0, 0, 0]];

/// Background of the `box` pattern.
pub const BOX_BACKGROUND: [u8; 3] = [64, 64, 64];
/// The box of the `box` pattern.
pub const BOX_FOREGROUND: [u8; 3] = [255, 255, 255];

/// `bars`: bar `x * 8 / width` of [`BARS`].
pub fn bars_rgb(x: u32, width: u32) -> [u8; 3] {
    BARS[(x * 8 / width) as usize]
}

/// `gradient`: `R = x * 255 / max(w - 1, 1)`, `G = y * 255 / max(h - 1, 1)`,
/// `B = (x + y + 4 * seq) mod 256`.
pub fn gradient_rgb(x: u32, y: u32, width: u32, height: u32, seq: u64) -> [u8; 3] {
    let r = x * 255 / (width - 1).max(1);
    let g = y * 255 / (height - 1).max(1);
    // Only the low 8 bits of the sum matter, so the low 32 bits of seq are enough.
    let b = x.wrapping_add(y).wrapping_add((seq as u32).wrapping_mul(4)) & 0xff;
    [r as u8, g as u8, b as u8]
}

const MURMUR_C1: u32 = 0xcc9e_2d51;
const MURMUR_C2: u32 = 0x1b87_3593;

/// One 4-byte block of MurmurHash3_x86_32: mixes word `k` into state `h`.
pub fn murmur3_block(h: u32, k: u32) -> u32 {
    let k = k.wrapping_mul(MURMUR_C1).rotate_left(15).wrapping_mul(MURMUR_C2);
    (h ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64)
}

/// MurmurHash3's 32-bit finaliser.
pub fn murmur3_fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// MurmurHash3_x86_32 of the message made of `words` as little-endian u32s.
pub fn murmur3_32(words: &[u32], seed: u32) -> u32 {
    let h = words.iter().fold(seed, |h, &k| murmur3_block(h, k));
    murmur3_fmix32(h ^ (words.len() as u32 * 4))
}

/// The `noise` hash state after the four words of `seed` and `seq`: one value per frame.
pub fn noise_state(seed: u64, seq: u64) -> u32 {
    [seed as u32, (seed >> 32) as u32, seq as u32, (seq >> 32) as u32].into_iter().fold(0, murmur3_block)
}

/// `noise`: channel `c` of pixel `(x, y)`, the low byte of
/// `murmur3_32([seed lo, seed hi, seq lo, seq hi, x, y, c], 0)` continued from
/// [`noise_state`].
pub fn noise_byte(state: u32, x: u32, y: u32, channel: u32) -> u8 {
    let h = murmur3_block(murmur3_block(murmur3_block(state, x), y), channel);
    murmur3_fmix32(h ^ 28) as u8
}

/// `noise`: the RGB triple of pixel `(x, y)`, channels 0, 1, 2.
pub fn noise_rgb(state: u32, x: u32, y: u32) -> [u8; 3] {
    [noise_byte(state, x, y, 0), noise_byte(state, x, y, 1), noise_byte(state, x, y, 2)]
}

/// Where the `box` pattern's box is in one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BoxPlace {
    pub x0: u32,
    pub y0: u32,
    /// `max(width / 8, 1)`.
    pub box_width: u32,
    /// `max(height / 8, 1)`.
    pub box_height: u32,
}

impl BoxPlace {
    /// `x0 = (4 * seq) mod width`, `y0 = (4 * seq) mod height`, computed without overflow.
    pub fn new(width: u32, height: u32, seq: u64) -> BoxPlace {
        let corner = |size: u32| ((seq % size as u64) * 4 % size as u64) as u32;
        BoxPlace {
            x0: corner(width),
            y0: corner(height),
            box_width: (width / 8).max(1),
            box_height: (height / 8).max(1),
        }
    }
}

/// `box`: white where `(x + w - x0) mod w < bw` and `(y + h - y0) mod h < bh`, else gray.
pub fn box_rgb(place: &BoxPlace, x: u32, y: u32, width: u32, height: u32) -> [u8; 3] {
    let inside =
        (x + width - place.x0) % width < place.box_width && (y + height - place.y0) % height < place.box_height;
    if inside { BOX_FOREGROUND } else { BOX_BACKGROUND }
}

/// Integer luma used for `gray8`: `(77 R + 150 G + 29 B + 128) >> 8`.
pub fn luma([r, g, b]: [u8; 3]) -> u8 {
    ((77 * r as u32 + 150 * g as u32 + 29 * b as u32 + 128) >> 8) as u8
}

/// What one frame of a pattern needs besides `(x, y)`: the arguments of a GPU kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PatternFrame {
    pub pattern: Pattern,
    pub width: u32,
    pub height: u32,
    pub seq: u64,
    /// [`noise_state`] of the frame.
    pub noise_state: u32,
    pub box_place: BoxPlace,
}

impl PatternFrame {
    pub fn new(pattern: Pattern, width: u32, height: u32, seq: u64, seed: u64) -> PatternFrame {
        PatternFrame {
            pattern,
            width,
            height,
            seq,
            noise_state: noise_state(seed, seq),
            box_place: BoxPlace::new(width, height, seq),
        }
    }

    /// The RGB triple of pixel `(x, y)`.
    pub fn rgb(&self, x: u32, y: u32) -> [u8; 3] {
        match self.pattern {
            Pattern::Bars => bars_rgb(x, self.width),
            Pattern::Gradient => gradient_rgb(x, y, self.width, self.height, self.seq),
            Pattern::Noise => noise_rgb(self.noise_state, x, y),
            Pattern::Box => box_rgb(&self.box_place, x, y, self.width, self.height),
        }
    }

    /// Row `y` of the frame in `pixel` format into `row` (pixels only).
    pub fn fill_row(&self, pixel: PixelFormat, y: u32, row: &mut [u8]) -> Result<()> {
        match pixel {
            PixelFormat::Rgb8 if self.pattern == Pattern::Gradient => self.gradient_row_rgb8(y, row),
            PixelFormat::Rgb8 => {
                for (x, px) in (0..).zip(row.chunks_exact_mut(3)) {
                    px.copy_from_slice(&self.rgb(x, y));
                }
            }
            PixelFormat::Rgba8 => {
                for (x, px) in (0..).zip(row.chunks_exact_mut(4)) {
                    let [r, g, b] = self.rgb(x, y);
                    px.copy_from_slice(&[r, g, b, 255]);
                }
            }
            PixelFormat::Gray8 => {
                for (x, px) in (0..).zip(row.iter_mut()) {
                    *px = luma(self.rgb(x, y));
                }
            }
            other => bail!("the generator does not make {other} frames"),
        }
        Ok(())
    }

    /// [`gradient_rgb`] for a whole rgb8 row without a division per pixel: R's quotient
    /// `x * 255 / d` is carried from pixel to pixel (add `255 / d`, and one more when the
    /// remainder reaches `d`), G is the row's, B counts up by one. The per-pixel formula stays
    /// the reference; a test checks this against it.
    fn gradient_row_rgb8(&self, y: u32, row: &mut [u8]) {
        let d = (self.width - 1).max(1);
        let (step, step_rem) = (255 / d, 255 % d);
        let g = (y * 255 / (self.height - 1).max(1)) as u8;
        let (mut r, mut rem) = (0u32, 0u32);
        let mut b = y.wrapping_add((self.seq as u32).wrapping_mul(4));
        for px in row.chunks_exact_mut(3) {
            px.copy_from_slice(&[r as u8, g, b as u8]);
            r += step;
            rem += step_rem;
            if rem >= d {
                r += 1;
                rem -= d;
            }
            b = b.wrapping_add(1);
        }
    }
}

/// Draw `frame` into `output` (host memory), row by row through the layout's pitch: the
/// reference, pixel by pixel on one thread. The stage runs a [`crate::cpu::Drawer`], which
/// draws the same bytes faster (its tests compare the two).
pub fn render(frame: &PatternFrame, output: &mut OutputFrame<'_>) -> Result<()> {
    let pixel = output.info().pixel();
    let mut plane =
        output.plane_mut(0).ok_or_else(|| Error::new("the generator writes host memory only (cpu domain)"))?;
    if frame.pattern == Pattern::Bars {
        // Every row of the bars is the same: draw one, copy it.
        let mut first = vec![0; plane.layout.row_bytes as usize];
        frame.fill_row(pixel, 0, &mut first)?;
        for y in 0..plane.rows() {
            plane.row_mut(y).copy_from_slice(&first);
        }
    } else {
        for y in 0..plane.rows() {
            frame.fill_row(pixel, y as u32, plane.row_mut(y))?;
        }
    }
    Ok(())
}

/// When frame `frame_index` of a paced stage is due: `start + frame_index / fps`. `None` if
/// that instant cannot be represented (absurdly low `fps`).
pub fn deadline(start: Instant, frame_index: u64, fps: f64) -> Option<Instant> {
    let offset = Duration::try_from_secs_f64(frame_index as f64 / fps).ok()?;
    start.checked_add(offset)
}

/// A generator stage instance.
#[derive(Debug)]
pub struct Generator {
    params: Params,
    format: FrameFormat,
    /// Taken at the first `process` call when pacing.
    start: Option<Instant>,
    /// The loaded kernel, in the cuda domain.
    gpu: Option<GpuGenerator>,
    /// What the cpu domain keeps from frame to frame.
    drawer: crate::cpu::Drawer,
}

impl Plugin for Generator {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "generator",
        version: env!("CARGO_PKG_VERSION"),
        description: "synthetic test frames (bars, gradient, noise, box), a function of seq",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 0,
        max_inputs: 0,
        accepts: &[],
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "width",
            kind: "integer",
            default: "1280",
            range: "1..=32768",
            description: "frame width in pixels",
        },
        ParamInfo {
            name: "height",
            kind: "integer",
            default: "720",
            range: "1..=32768",
            description: "frame height in pixels",
        },
        ParamInfo {
            name: "pattern",
            kind: r#""bars" | "gradient" | "noise" | "box""#,
            default: r#""bars""#,
            range: "",
            description: "what to draw: eight colour bars, colour ramps, hashed noise, or a white box moving over gray",
        },
        ParamInfo {
            name: "format",
            kind: r#""rgb8" | "rgba8" | "gray8""#,
            default: r#""rgb8""#,
            range: "",
            description: "output pixel format",
        },
        ParamInfo {
            name: "fps",
            kind: "float",
            default: ParamInfo::NONE,
            range: ">= 0.001",
            description: "pace output to this rate; none: as fast as the pipeline takes frames",
        },
        ParamInfo {
            name: "seed",
            kind: "integer",
            default: "0",
            range: "0..=2^63-1",
            description: "seed of the `noise` pattern",
        },
        bands::threads_param(
            "cpu domain: threads drawing each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^16 pixels for `noise`, per 2^20 for the others (whose rows are copies or nearly); ignored in the cuda domain",
        ),
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate()
    }

    /// A source: no inputs (checked against `INFO` before this is called).
    fn negotiate(params: &Params, _inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(params.frame_format()))
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Generator> {
        let format = params.frame_format();
        if output != Some(format) {
            bail!("the generator makes {format} frames, but the output was set to {output:?}");
        }
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuGenerator::new(ctx, params.format.pixel())?),
            Domain::Cpu => None,
        };
        Ok(Generator { params, format, start: None, gpu, drawer: crate::cpu::Drawer::default() })
    }

    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let output = output.ok_or_else(|| Error::new("the generator needs an output frame"))?;
        if output.info().format != self.format {
            bail!("output frame is {}, expected {}", output.info().format, self.format);
        }
        let p = &self.params;
        let frame = PatternFrame::new(p.pattern, p.width, p.height, output.info().seq, p.seed);
        match (output.device_buffer(), &self.gpu) {
            // Enqueued on the stage's stream; the runner orders it with the consumers.
            (Some(buffer), Some(gpu)) => gpu.draw(&frame, buffer, &output.info().layout, ctx.cuda_stream)?,
            (Some(_), None) => {
                bail!("the output frame is in device memory, but this stage runs in the cpu domain")
            }
            (None, _) => self.drawer.render(&frame, p.threads, output)?,
        }
        if let Some(fps) = p.fps {
            let start = *self.start.get_or_insert_with(Instant::now);
            let due = deadline(start, ctx.frame_index, fps).ok_or_else(|| {
                Error::new(format!("frame {} at fps {} is due too far ahead", ctx.frame_index, show_float(fps)))
            })?;
            // Drawn first, then held: the frame leaves as close to its due time as we can.
            thread::sleep(due.saturating_duration_since(Instant::now()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{check_doc_examples, cpu_context, packed_planes, padded};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    /// Run a generator made from `params` text for frame `seq` with `extra` row padding;
    /// returns the packed pixels, after checking no padding byte was written.
    fn generate(params: &str, seq: u64, extra: u64) -> Vec<u8> {
        let params = parse_params::<Generator>(params).unwrap();
        let format = Generator::negotiate(&params, &[]).unwrap().unwrap();
        let mut stage = Generator::create(params, &[], Some(format), &cpu_context()).unwrap();
        let mut info = FrameInfo::new(format, seq, 0).unwrap();
        info.layout = padded(info.layout, extra);
        const SENTINEL: u8 = 0xa5;
        let mut bytes = vec![SENTINEL; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        stage.process(&[], Some(&mut out), &pc).unwrap();
        // rgb8, rgba8 and gray8 have one plane.
        packed_planes(&info.layout, &bytes, SENTINEL).concat()
    }

    #[test]
    fn defaults_are_documented_values() {
        let p = parse_params::<Generator>("").unwrap();
        assert_eq!(p, Params::default());
        assert_eq!((p.width, p.height, p.pattern, p.format), (1280, 720, Pattern::Bars, Format::Rgb8));
        assert_eq!((p.fps, p.seed, p.threads), (None, 0, 0));
        let format = Generator::negotiate(&p, &[]).unwrap();
        assert_eq!(format, Some(FrameFormat::new(PixelFormat::Rgb8, 1280, 720)));
    }

    #[test]
    fn bad_params_name_the_param() {
        let cases = [
            ("width = 0", "width"),
            ("height = 40000", "height"),
            ("fps = 0.0", "fps"),
            ("fps = -5.0", "fps"),
            ("fps = nan", "fps"),
            ("fps = inf", "fps"),
            ("fps = 1e-300", "fps"),
            ("fps = 0.000999", "fps"),
            ("threads = 257", "threads"),
        ];
        for (text, key) in cases {
            let params = parse_params::<Generator>(text).unwrap();
            let e = Generator::check(&params, &[]).unwrap_err();
            assert!(e.message().contains(&format!("param `{key}`")), "{text}: {e}");
        }
        let e = parse_params::<Generator>("pattern = \"zigzag\"").unwrap_err();
        assert_eq!(
            e.message(),
            "param `pattern`: unknown variant `zigzag`, expected one of `bars`, `gradient`, `noise`, `box`"
        );
        let e = parse_params::<Generator>("format = \"i420\"").unwrap_err();
        assert!(e.message().contains("format"), "{e}");
        let e = parse_params::<Generator>("colour = 1").unwrap_err();
        assert!(e.message().contains("colour"), "{e}");
        // Every problem is reported, not only the first.
        let params = parse_params::<Generator>("width = 0\nheight = 0").unwrap();
        let e = params.validate().unwrap_err();
        assert_eq!(e.message(), "param `width` must be 1..=32768, got 0; param `height` must be 1..=32768, got 0");
    }

    #[test]
    fn an_fps_too_slow_to_pace_a_run_is_refused_in_a_short_message() {
        let refused = |text: &str| {
            Generator::check(&parse_params::<Generator>(text).unwrap(), &[]).unwrap_err().message().to_owned()
        };
        assert_eq!(
            refused("fps = 1e-300"),
            "param `fps` must be at least 0.001 (a frame every 1000 s), got 1e-300: too slow to pace a run"
        );
        assert_eq!(
            refused("fps = 0.0009"),
            "param `fps` must be at least 0.001 (a frame every 1000 s), got 0.0009: too slow to pace a run"
        );
        assert_eq!(refused("fps = -1e300"), "param `fps` must be a finite number > 0, got -1e300");
        assert_eq!(refused("fps = -inf"), "param `fps` must be a finite number > 0, got -inf");
        for fine in ["fps = 0.001", "fps = 29.97", "fps = 1e300"] {
            Generator::check(&parse_params::<Generator>(fine).unwrap(), &[]).unwrap();
        }
        // The slowest rate accepted still places every frame a run can reach.
        let start = Instant::now();
        assert!(deadline(start, 1 << 40, MIN_FPS).is_some());
        assert_eq!(show_float(2.5e-7), "0.00000025");
        assert_eq!(show_float(2.5e-12), "2.5e-12");
        assert_eq!(show_float(f64::MAX).len(), "1.7976931348623157e308".len());
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Generator::INFO.name, |text| {
            Generator::check(&parse_params::<Generator>(text).unwrap(), &[]).unwrap();
        });
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Generator>(include_str!("lib.rs"), "");
    }

    #[test]
    fn bars_are_eight_equal_columns() {
        let rgb = generate("width = 16\nheight = 3", 0, 0);
        for y in 0..3 {
            for x in 0..16 {
                let at = (y * 16 + x) * 3;
                assert_eq!(rgb[at..at + 3], BARS[x / 2], "pixel ({x}, {y})");
            }
        }
        // Odd width: bar x*8/w, so 5 pixels show bars 0, 1, 3, 4, 6.
        let rgb = generate("width = 5\nheight = 1", 0, 13);
        let expected: Vec<u8> = [0, 1, 3, 4, 6].iter().flat_map(|&i| BARS[i]).collect();
        assert_eq!(rgb, expected);
        assert_eq!(BARS[1], [255, 255, 0]);
        assert_eq!(BARS[6], [0, 0, 255]);
    }

    #[test]
    fn gradient_ramps_and_moves_with_seq() {
        let rgb = generate("width = 5\nheight = 3\npattern = \"gradient\"", 10, 7);
        let px = |x: usize, y: usize| &rgb[(y * 5 + x) * 3..(y * 5 + x) * 3 + 3];
        assert_eq!(px(0, 0), [0, 0, 40]);
        assert_eq!(px(1, 0), [63, 0, 41]); // 255 / 4 = 63
        assert_eq!(px(4, 0), [255, 0, 44]);
        assert_eq!(px(2, 1), [127, 127, 43]);
        assert_eq!(px(4, 2), [255, 255, 46]);
        // Blue wraps modulo 256: seq 63 adds 252.
        let rgb = generate("width = 5\nheight = 3\npattern = \"gradient\"", 63, 0);
        assert_eq!(rgb[(2 * 5 + 4) * 3 + 2], ((4u32 + 2 + 252) % 256) as u8);
        // A 1x1 frame divides by max(0, 1).
        assert_eq!(generate("width = 1\nheight = 1\npattern = \"gradient\"", 1, 0), [0, 0, 4]);
    }

    #[test]
    fn gradient_rows_equal_the_per_pixel_formula() {
        for (width, height) in [(1, 1), (2, 3), (5, 3), (64, 64), (255, 2), (256, 7), (257, 9), (1001, 5), (3840, 3)] {
            for seq in [0, 1, 63, 64, u64::from(u32::MAX) + 5] {
                let frame = PatternFrame::new(Pattern::Gradient, width, height, seq, 0);
                for y in 0..height {
                    let mut row = vec![0u8; width as usize * 3];
                    frame.fill_row(PixelFormat::Rgb8, y, &mut row).unwrap();
                    let expected: Vec<u8> = (0..width).flat_map(|x| gradient_rgb(x, y, width, height, seq)).collect();
                    assert_eq!(row, expected, "{width}x{height}, row {y}, seq {seq}");
                }
            }
        }
    }

    #[test]
    fn noise_is_murmur3_of_the_documented_message() {
        // Reference values from the `mmh3` Python package (MurmurHash3_x86_32, seed 0).
        assert_eq!(murmur3_32(&[0], 0), 0x2362_f9de);
        assert_eq!(murmur3_32(&[0x8765_4321], 0), 0xf55b_516b);
        let message =
            |seed: u64, seq: u64, x, y, c| [seed as u32, (seed >> 32) as u32, seq as u32, (seq >> 32) as u32, x, y, c];
        let cases = [
            ((0, 0, 0, 0, 0), 0xaefc_623a),
            ((0, 0, 1, 0, 0), 0xbe44_3158),
            ((42, 7, 3, 2, 1), 0xb4c5_f57b),
            ((0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210, 1919, 1079, 2), 0x5da5_365a),
        ];
        for ((seed, seq, x, y, c), hash) in cases {
            assert_eq!(murmur3_32(&message(seed, seq, x, y, c), 0), hash);
            assert_eq!(noise_byte(noise_state(seed, seq), x, y, c), hash as u8);
        }
        // Through the stage: seed 42, frame 7, pixel (3, 2), green.
        let rgb = generate("width = 4\nheight = 3\npattern = \"noise\"\nseed = 42", 7, 5);
        assert_eq!(rgb[(2 * 4 + 3) * 3 + 1], 0x7b);
        let state = noise_state(42, 7);
        for (i, px) in rgb.chunks_exact(3).enumerate() {
            let (x, y) = (i as u32 % 4, i as u32 / 4);
            for c in 0..3 {
                assert_eq!(px[c as usize], murmur3_32(&message(42, 7, x, y, c), 0) as u8);
            }
            assert_eq!(px, noise_rgb(state, x, y));
        }
        assert_ne!(rgb, generate("width = 4\nheight = 3\npattern = \"noise\"\nseed = 43", 7, 0));
        assert_ne!(rgb, generate("width = 4\nheight = 3\npattern = \"noise\"\nseed = 42", 8, 0));
    }

    #[test]
    fn box_moves_four_pixels_a_frame_and_wraps() {
        // 17x9: the box is 2x1; frame 4 puts its corner at (16 mod 17, 16 mod 9) = (16, 7).
        let rgb = generate("width = 17\nheight = 9\npattern = \"box\"", 4, 3);
        let white: Vec<usize> =
            rgb.chunks_exact(3).enumerate().filter(|(_, px)| *px == BOX_FOREGROUND).map(|(i, _)| i).collect();
        assert_eq!(white, [7 * 17, 7 * 17 + 16]); // (0, 7) wrapped, and (16, 7)
        assert!(rgb.chunks_exact(3).all(|px| px == BOX_FOREGROUND || px == BOX_BACKGROUND));
        // 16x16: a 2x2 box at (0, 0) in frame 0, at (4, 4) in frame 1, at (0, 0) again in frame 4.
        let place = |seq| BoxPlace::new(16, 16, seq);
        assert_eq!((place(0).x0, place(1).x0, place(1).y0, place(4).x0), (0, 4, 4, 0));
        assert_eq!((place(0).box_width, place(0).box_height), (2, 2));
        // No overflow for huge seq: 2^64 - 1 is 1 mod 7 and 6 mod 9, so the corner is (4, 24 mod 9).
        let place = BoxPlace::new(7, 9, u64::MAX);
        assert_eq!((place.x0, place.y0), (4, 6));
        // A 1x1 frame is all box.
        assert_eq!(generate("width = 1\nheight = 1\npattern = \"box\"", 3, 0), BOX_FOREGROUND);
    }

    #[test]
    fn rgba_adds_opaque_alpha_and_gray_is_the_luma() {
        let base = "width = 7\nheight = 5\npattern = \"noise\"\nseed = 3";
        let rgb = generate(base, 2, 0);
        let rgba = generate(&format!("{base}\nformat = \"rgba8\""), 2, 9);
        let gray = generate(&format!("{base}\nformat = \"gray8\""), 2, 1);
        assert_eq!(rgba.len(), 7 * 5 * 4);
        assert_eq!(gray.len(), 7 * 5);
        for ((px, pa), g) in rgb.chunks_exact(3).zip(rgba.chunks_exact(4)).zip(&gray) {
            assert_eq!(px, &pa[..3]);
            assert_eq!(pa[3], 255);
            let (r, gr, b) = (px[0] as u32, px[1] as u32, px[2] as u32);
            assert_eq!(*g as u32, (r * 77 + gr * 150 + b * 29 + 128) >> 8);
        }
        assert_eq!(luma([255, 255, 255]), 255);
        assert_eq!(luma([64, 64, 64]), 64);
        assert_eq!(luma([255, 0, 0]), 77); // (19635 + 128) >> 8
        assert_eq!(luma([0, 0, 255]), 29);
    }

    #[test]
    fn content_depends_on_seq_only() {
        let text = "width = 9\nheight = 4\npattern = \"gradient\"\nfps = 1000.0";
        let params = parse_params::<Generator>(text).unwrap();
        let format = params.frame_format();
        let mut stage = Generator::create(params, &[], Some(format), &cpu_context()).unwrap();
        let info = FrameInfo::new(format, 5, 0).unwrap();
        let mut frames = Vec::new();
        for frame_index in 0..3 {
            let mut bytes = vec![0; info.layout.total_bytes as usize];
            let mut out = OutputFrame::host(info, &mut bytes).unwrap();
            let pc = ProcessContext { frame_index, cuda_stream: 0 };
            stage.process(&[], Some(&mut out), &pc).unwrap();
            frames.push(bytes);
        }
        assert!(frames.iter().all(|f| *f == frames[0]));
    }

    #[test]
    fn the_threads_param_changes_no_byte() {
        for pattern in ["bars", "gradient", "noise", "box"] {
            let base = format!("width = 301\nheight = 37\npattern = \"{pattern}\"\nseed = 4");
            let want = generate(&format!("{base}\nthreads = 1"), 9, 3);
            for threads in [0, 2, 5, 256] {
                let got = generate(&format!("{base}\nthreads = {threads}"), 9, 3);
                assert!(got == want, "{pattern}, {threads} threads");
            }
        }
    }

    #[test]
    fn pacing_deadline_is_start_plus_index_over_fps() {
        let start = Instant::now();
        assert_eq!(deadline(start, 0, 30.0), Some(start));
        assert_eq!(deadline(start, 30, 30.0), Some(start + Duration::from_secs(1)));
        assert_eq!(deadline(start, 3, 2.0), Some(start + Duration::from_millis(1500)));
        assert_eq!(deadline(start, 1, 1e-300), None);
    }

    #[test]
    fn a_cpu_stage_refuses_device_frames_and_cuda_needs_a_context() {
        let params = parse_params::<Generator>("width = 4\nheight = 4").unwrap();
        let format = params.frame_format();
        let mut stage = Generator::create(params.clone(), &[], Some(format), &cpu_context()).unwrap();
        let info = FrameInfo::new(format, 0, 0).unwrap();
        let buffer = gpuipc_plugin_api::DeviceBuffer { addr: 0x1000, len: info.layout.total_bytes };
        let mut out = OutputFrame::device(info, buffer);
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("runs in the cpu domain"), "{e}");
        // No context: an error before any CUDA call.
        let cuda = CreateContext { domain: Domain::Cuda, ..cpu_context() };
        let e = Generator::create(params, &[], Some(format), &cuda).unwrap_err();
        assert!(e.message().contains("kernels/generator.cu"), "{e}");
    }

    /// The cuda path draws exactly the cpu path's bytes, padding untouched, for every format
    /// and pattern, odd sizes and large sequence numbers included. Needs a GPU (skipped
    /// without one unless GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        let Some(gpu) = GpuHarness::for_test() else { return };
        const SENTINEL: u8 = 0xa5;
        for (width, height) in [(1, 1), (5, 3), (17, 9), (64, 2), (641, 479), (1920, 1080)] {
            for format in ["rgb8", "rgba8", "gray8"] {
                for pattern in ["bars", "gradient", "noise", "box"] {
                    let text = format!(
                        "width = {width}\nheight = {height}\nformat = \"{format}\"\n\
                         pattern = \"{pattern}\"\nseed = 99"
                    );
                    let params = parse_params::<Generator>(&text).unwrap();
                    let frame_format = params.frame_format();
                    let ctx = gpu.create_context("gen").unwrap();
                    let mut stage = Generator::create(params, &[], Some(frame_format), &ctx).unwrap();
                    for seq in [0, 7, (1 << 33) + 5] {
                        let info = FrameInfo::new(frame_format, seq, 0).unwrap();
                        let mut cpu = vec![SENTINEL; info.layout.total_bytes as usize];
                        let mut out = OutputFrame::host(info, &mut cpu).unwrap();
                        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
                        stage.process(&[], Some(&mut out), &pc).unwrap();

                        let device = gpu.upload(&vec![SENTINEL; cpu.len()]).unwrap();
                        let mut out = OutputFrame::device(info, device.buffer());
                        stage.process(&[], Some(&mut out), &gpu.process_context(0)).unwrap();
                        let got = gpu.download(&device).unwrap();
                        if let Some(d) = first_difference(&got, &cpu, &info.layout) {
                            panic!("{text} seq {seq}: GPU and CPU frames differ: {d}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_output_frame_is_refused() {
        let params = parse_params::<Generator>("width = 4\nheight = 4").unwrap();
        let format = params.frame_format();
        let wrong = FrameFormat::new(PixelFormat::Rgb8, 4, 5);
        assert!(Generator::create(params.clone(), &[], Some(wrong), &cpu_context()).is_err());
        let mut stage = Generator::create(params, &[], Some(format), &cpu_context()).unwrap();
        let info = FrameInfo::new(wrong, 0, 0).unwrap();
        let mut bytes = vec![0; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("expected rgb8 4x4"), "{e}");
    }
}
