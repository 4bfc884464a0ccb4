//! The rgb-process stage: its params, the lookup table and the per-row loop, run on bands of
//! rows at once.

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::bands;
use crate::cuda::GpuLut;

/// Pixels a band must have for the default `threads` to give it a thread of its own: starting
/// a thread takes 20 to 50 us (measured on a 2-core VM), and 2^18 pixels take 200 us.
/// (A pool of threads kept from frame to frame would start faster, but lending it the
/// frame's rows needs `unsafe` or a crate this workspace does not have.)
pub const MIN_BAND_PIXELS: usize = 1 << 18;

/// The `params` table of an rgb-process stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Added after contrast, in units of full scale, -1..=1. Default 0.
    pub brightness: f64,
    /// Slope around mid-gray, >= 0. Default 1.
    pub contrast: f64,
    /// Output is value^(1/gamma), > 0. Default 1.
    pub gamma: f64,
    /// Output is 1 - value, applied last. Default false.
    pub invert: bool,
    /// Threads mapping a frame in the cpu domain, 0..=[`bands::MAX_THREADS`]; 0 is a share of
    /// the cores ([`bands::thread_count`]). Default 0.
    pub threads: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params { brightness: 0.0, contrast: 1.0, gamma: 1.0, invert: false, threads: 0 }
    }
}

impl Params {
    /// Check the ranges, reporting every problem at once. NaN and infinities are refused.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if !(-1.0..=1.0).contains(&self.brightness) {
            problems.push(format!("param `brightness` must be in -1..=1, got {}", self.brightness));
        }
        if !(self.contrast.is_finite() && self.contrast >= 0.0) {
            problems.push(format!("param `contrast` must be a finite number >= 0, got {}", self.contrast));
        }
        if !(self.gamma.is_finite() && self.gamma > 0.0) {
            problems.push(format!("param `gamma` must be a finite number > 0, got {}", self.gamma));
        }
        bands::check_threads_param(self.threads, &mut problems);
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }
}

/// The table every colour code goes through, computed in f64:
/// `v = c / 255; v = (v - 0.5) * contrast + 0.5 + brightness; clamp to [0, 1];
/// v = v^(1 / gamma); if invert { v = 1 - v }; round(v * 255)`.
pub fn lut(params: &Params) -> [u8; 256] {
    let mut table = [0; 256];
    for (c, out) in table.iter_mut().enumerate() {
        let v = c as f64 / 255.0;
        let v = ((v - 0.5) * params.contrast + 0.5 + params.brightness).clamp(0.0, 1.0);
        let v = v.powf(1.0 / params.gamma);
        let v = if params.invert { 1.0 - v } else { v };
        *out = (v * 255.0).round() as u8;
    }
    table
}

/// Map one row of `pixel` format through `table`; alpha is copied.
pub fn apply_row(table: &[u8; 256], pixel: PixelFormat, input: &[u8], output: &mut [u8]) {
    match pixel {
        PixelFormat::Rgba8 => {
            for (o, i) in output.chunks_exact_mut(4).zip(input.chunks_exact(4)) {
                o.copy_from_slice(&[table[i[0] as usize], table[i[1] as usize], table[i[2] as usize], i[3]]);
            }
        }
        _ => {
            // Byte by byte: reading eight bytes at once and taking them apart was 10% faster
            // on a frame in cache, but 10% slower in a pipeline, whose frames come from
            // another core (measured on a 2-core VM).
            for (o, &i) in output.iter_mut().zip(input) {
                *o = table[i as usize];
            }
        }
    }
}

/// An rgb-process stage instance.
#[derive(Debug)]
pub struct RgbProcess {
    table: [u8; 256],
    format: FrameFormat,
    /// The `threads` param.
    threads: u32,
    /// The loaded kernel and the table in device memory, in the cuda domain.
    gpu: Option<GpuLut>,
}

impl Plugin for RgbProcess {
    type Params = Params;

    // Replicas allowed: each frame is graded on its own.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "rgb-process",
        version: env!("CARGO_PKG_VERSION"),
        description: "brightness, contrast, gamma and invert through a 256-entry table",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8],
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "brightness",
            kind: "float",
            default: "0.0",
            range: "-1..=1",
            description: "added after contrast, in units of full scale",
        },
        ParamInfo {
            name: "contrast",
            kind: "float",
            default: "1.0",
            range: ">= 0",
            description: "slope around mid-gray (0.5); 0 makes every value mid-gray",
        },
        ParamInfo {
            name: "gamma",
            kind: "float",
            default: "1.0",
            range: "> 0",
            description: "output = value^(1/gamma); > 1 brightens mid-tones",
        },
        ParamInfo {
            name: "invert",
            kind: "bool",
            default: "false",
            range: "",
            description: "output = 1 - value, last",
        },
        bands::threads_param(
            "cpu domain: threads mapping each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain",
        ),
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate()
    }

    /// The one input, in a format of `INFO.accepts` (checked against `INFO` before this is
    /// called), is also the output's format.
    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(inputs[0]))
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<RgbProcess> {
        let format = inputs[0];
        if output != Some(format) {
            bail!("rgb-process writes its input format {format}, but the output was set to {output:?}");
        }
        let table = lut(&params);
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuLut::new(ctx, &table)?),
            Domain::Cpu => None,
        };
        Ok(RgbProcess { table, format, threads: params.threads, gpu })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let input = &inputs[0];
        let output = output.ok_or_else(|| Error::new("rgb-process needs an output frame"))?;
        for frame in [&input.info, output.info()] {
            if frame.format != self.format {
                bail!("frame is {}, expected {}", frame.format, self.format);
            }
        }
        if let Some(dst) = output.device_buffer() {
            let Some(gpu) = &self.gpu else {
                bail!("the output frame is in device memory, but this stage runs in the cpu domain")
            };
            let Some(src) = input.device_buffer() else {
                bail!("the output frame is in device memory but the input is in host memory")
            };
            // Enqueued on the stage's stream; the runner orders it with its neighbours.
            return gpu.apply((&input.info, src), (output.info(), dst), ctx.cuda_stream);
        }
        let host_only = || Error::new("rgb-process reads and writes host memory only (cpu domain)");
        let src = input.plane(0).ok_or_else(host_only)?;
        let planes = bands::planes_mut(output).ok_or_else(host_only)??;
        let Some(dst) = planes.into_iter().next() else { bail!("the output frame has no plane") };
        let (pixel, rows) = (input.info.pixel(), dst.rows());
        let pixels = self.format.width as usize * self.format.height as usize;
        let n = bands::thread_count(self.threads, pixels / MIN_BAND_PIXELS, rows);
        let counts: Vec<usize> = bands::even_counts(rows, bands::band_count(n, rows)).collect();
        let work: Vec<_> = bands::starts(&counts).zip(dst.split(counts.iter().copied())).collect();
        bands::run(work, n, |(first, mut band)| {
            for (y, row) in (first..).zip(band.iter_mut()) {
                apply_row(&self.table, pixel, src.row(y), row);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples, cpu_context, frame_bytes, packed_planes, padded};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    fn params(text: &str) -> Params {
        let p = parse_params::<RgbProcess>(text).unwrap();
        p.validate().unwrap();
        p
    }

    /// Run a stage on one frame of `pixel` format whose packed pixels are `pixels`; the input
    /// and output get different padding. Returns the output's packed pixels after checking
    /// that its padding was not written.
    fn run(text: &str, pixel: PixelFormat, width: u32, height: u32, pixels: &[u8]) -> Vec<u8> {
        let format = FrameFormat::new(pixel, width, height);
        let p = params(text);
        assert_eq!(RgbProcess::negotiate(&p, &[format]).unwrap(), Some(format));
        let mut stage = RgbProcess::create(p, &[format], Some(format), &cpu_context()).unwrap();

        let mut in_info = FrameInfo::new(format, 9, 0).unwrap();
        in_info.layout = padded(in_info.layout, 5);
        let row_bytes = in_info.layout.planes[0].row_bytes as usize;
        assert_eq!(pixels.len(), row_bytes * height as usize);
        // Input padding is garbage that must not leak into the output.
        let in_bytes = frame_bytes(&in_info, pixels, 0x5a);
        let input = InputFrame::host(in_info, &in_bytes).unwrap();

        let out_info = FrameInfo::new(format, 9, 0).unwrap(); // the default 64-byte pitch
        let mut out_bytes = vec![0xa5; out_info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        stage.process(&[input], Some(&mut output), &pc).unwrap();
        // rgb8, rgba8 and gray8 have one plane.
        packed_planes(&out_info.layout, &out_bytes, 0xa5).concat()
    }

    fn check(table: &[u8; 256], expected: &[(usize, u8)]) {
        for &(c, v) in expected {
            assert_eq!(table[c], v, "code {c}");
        }
    }

    #[test]
    fn identity_params_give_the_identity_table() {
        let table = lut(&params(""));
        assert!(table.iter().enumerate().all(|(c, &v)| v as usize == c));
        assert_eq!(lut(&params("brightness = 0\ncontrast = 1\ngamma = 1")), table);
    }

    #[test]
    fn invert_maps_c_to_255_minus_c() {
        let table = lut(&params("invert = true"));
        assert!(table.iter().enumerate().all(|(c, &v)| v as usize == 255 - c));
    }

    #[test]
    fn tables_match_hand_computed_values() {
        // c = 128, brightness 0.1, contrast 1.2: (128/255 - 0.5) * 1.2 + 0.6 = 0.60235 -> 153.6.
        let t = lut(&params("brightness = 0.1\ncontrast = 1.2"));
        check(&t, &[(0, 0), (1, 1), (10, 12), (64, 77), (100, 120), (128, 154), (200, 240), (254, 255), (255, 255)]);
        // gamma 2.2: (128/255)^(1/2.2) = 0.73107 -> 186.4.
        let t = lut(&params("gamma = 2.2"));
        check(&t, &[(0, 0), (1, 21), (10, 59), (64, 136), (100, 167), (128, 186), (200, 228), (255, 255)]);
        // gamma 0.5 squares: (128/255)^2 = 0.25197 -> 64.25.
        let t = lut(&params("gamma = 0.5"));
        check(&t, &[(1, 0), (10, 0), (64, 16), (100, 39), (128, 64), (200, 157), (254, 253)]);
        // Brightness shifts by 0.2 * 255 = 51 and clips.
        let t = lut(&params("brightness = 0.2"));
        check(&t, &[(0, 51), (1, 52), (128, 179), (200, 251), (204, 255), (255, 255)]);
        let t = lut(&params("brightness = -0.2"));
        check(&t, &[(0, 0), (51, 0), (64, 13), (128, 77), (255, 204)]);
        // Contrast 0 makes everything 0.5 -> 127.5, rounded half away from zero.
        assert!(lut(&params("contrast = 0")).iter().all(|&v| v == 128));
        // All of it, then inverted.
        let t = lut(&params("brightness = 0.1\ncontrast = 1.2\ngamma = 2.2\ninvert = true"));
        check(&t, &[(0, 255), (1, 233), (10, 191), (64, 107), (128, 52), (200, 7), (254, 0)]);
    }

    #[test]
    fn bad_params_name_the_param() {
        let cases = [
            ("brightness = 1.5", "brightness"),
            ("brightness = nan", "brightness"),
            ("contrast = -0.1", "contrast"),
            ("contrast = inf", "contrast"),
            ("gamma = 0", "gamma"),
            ("gamma = -1.0", "gamma"),
        ];
        for (text, key) in cases {
            let p = parse_params::<RgbProcess>(text).unwrap();
            let format = FrameFormat::new(PixelFormat::Rgb8, 2, 2);
            let e = RgbProcess::check(&p, &[format]).unwrap_err();
            assert!(e.message().contains(&format!("param `{key}`")), "{text}: {e}");
        }
        let e = parse_params::<RgbProcess>("invert = \"yes\"").unwrap_err();
        assert!(e.message().contains("invert"), "{e}");
        let e = parse_params::<RgbProcess>("saturation = 1.0").unwrap_err();
        assert!(e.message().contains("saturation"), "{e}");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), RgbProcess::INFO.name, |text| {
            RgbProcess::check(&parse_params::<RgbProcess>(text).unwrap(), &[]).unwrap();
        });
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<RgbProcess>(include_str!("lib.rs"), "");
    }

    #[test]
    fn rgb_frames_map_every_channel() {
        // 3x2, odd row length (9 bytes).
        let pixels: Vec<u8> = (0..18).map(|i| i * 14).collect();
        let out = run("invert = true", PixelFormat::Rgb8, 3, 2, &pixels);
        let expected: Vec<u8> = pixels.iter().map(|&c| 255 - c).collect();
        assert_eq!(out, expected);
        let out = run("brightness = 0.2", PixelFormat::Rgb8, 3, 2, &pixels);
        assert_eq!(out[..4], [51, 65, 79, 93]);
        assert_eq!(out[17], 255); // 238 + 51 clips
    }

    #[test]
    fn rgba_alpha_is_copied() {
        let pixels = [10, 20, 30, 40, 200, 100, 0, 255, 1, 2, 3, 0];
        let out = run("invert = true", PixelFormat::Rgba8, 3, 1, &pixels);
        assert_eq!(out, [245, 235, 225, 40, 55, 155, 255, 255, 254, 253, 252, 0]);
    }

    #[test]
    fn gray_frames_of_odd_size() {
        let pixels: Vec<u8> = (0..35).map(|i| i * 7).collect();
        let out = run("gamma = 0.5", PixelFormat::Gray8, 7, 5, &pixels);
        let table = lut(&params("gamma = 0.5"));
        assert_eq!(out, pixels.iter().map(|&c| table[c as usize]).collect::<Vec<_>>());
        assert_eq!(out[..3], [0, 0, 1]); // (7/255)^2 * 255 = 0.19, (14/255)^2 * 255 = 0.77
    }

    #[test]
    fn a_cpu_stage_refuses_device_frames_and_cuda_needs_a_context() {
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 4);
        let mut stage = RgbProcess::create(params(""), &[format], Some(format), &cpu_context()).unwrap();
        let info = FrameInfo::new(format, 0, 0).unwrap();
        let buffer = gpuipc_plugin_api::DeviceBuffer { addr: 0x1000, len: info.layout.total_bytes };
        let input = InputFrame::device(info, buffer);
        let mut out = OutputFrame::device(info, buffer);
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[input], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("runs in the cpu domain"), "{e}");
        let cuda = CreateContext { domain: Domain::Cuda, ..cpu_context() };
        let e = RgbProcess::create(params(""), &[format], Some(format), &cuda).unwrap_err();
        assert!(e.message().contains("kernels/rgb_process.cu"), "{e}");
    }

    /// The cuda path writes exactly the cpu path's bytes, padding untouched, for every format,
    /// odd sizes, aligned and unaligned pitches. Needs a GPU (skipped without one unless
    /// GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        let Some(gpu) = GpuHarness::for_test() else { return };
        const SENTINEL: u8 = 0xa5;
        let settings = ["invert = true", "brightness = 0.1\ncontrast = 1.2\ngamma = 2.2"];
        for (width, height) in [(1, 1), (5, 3), (17, 9), (641, 479), (1920, 1080)] {
            for pixel in [PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8] {
                let format = FrameFormat::new(pixel, width, height);
                for text in settings {
                    let ctx = gpu.create_context("grade").unwrap();
                    let mut stage = RgbProcess::create(params(text), &[format], Some(format), &ctx).unwrap();
                    for (in_extra, out_extra) in [(0, 0), (5, 3)] {
                        let mut in_info = FrameInfo::new(format, 1, 0).unwrap();
                        in_info.layout = padded(in_info.layout, in_extra);
                        let mut out_info = FrameInfo::new(format, 1, 0).unwrap();
                        out_info.layout = padded(out_info.layout, out_extra);
                        let in_bytes: Vec<u8> = (0..in_info.layout.total_bytes).map(|i| (i * 31 + 7) as u8).collect();

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
                            panic!("{format} {text:?} pitch +{in_extra}/+{out_extra}: {d}");
                        }
                    }
                }
            }
        }
    }

    /// Every format and size, odd ones and row counts that do not divide evenly among 2, 3,
    /// 4 or 7 threads included: any thread count writes the bytes of one thread, which are
    /// the table's (alpha copied), and no padding byte.
    #[test]
    fn every_thread_count_maps_every_row_once() {
        let sizes = [(1, 1), (2, 1), (1, 2), (3, 3), (5, 3), (1, 33), (33, 1), (17, 9), (1031, 517)];
        for (width, height) in sizes {
            let formats = [(PixelFormat::Rgb8, 3), (PixelFormat::Rgba8, 4), (PixelFormat::Gray8, 1)];
            for (pixel, bpp) in formats {
                let n = (width * height * bpp) as usize;
                let pixels: Vec<u8> = (0..n).map(|i| ((i * 2_654_435_761) >> 11) as u8).collect();
                for setting in ["invert = true", "brightness = 0.1\ncontrast = 1.2\ngamma = 2.2"] {
                    let table = lut(&params(setting));
                    let want: Vec<u8> = (pixels.iter().enumerate())
                        .map(|(i, &c)| if bpp == 4 && i % 4 == 3 { c } else { table[c as usize] })
                        .collect();
                    let frame = |threads| {
                        let text = format!("{setting}\nthreads = {threads}");
                        run(&text, pixel, width, height, &pixels)
                    };
                    for threads in [1, 2, 3, 4, 7, 64, 0] {
                        let got = frame(threads);
                        assert!(got == want, "{pixel} {width}x{height} {setting:?}, {threads}");
                    }
                }
            }
        }
    }

    #[test]
    fn threads_are_checked() {
        let p = parse_params::<RgbProcess>("threads = 300\ngamma = 0").unwrap();
        let e = p.validate().unwrap_err();
        let want = "param `gamma` must be a finite number > 0, got 0; \
                    param `threads` must be 0 (a share of the cores) or 1..=256, got 300";
        assert_eq!(e.message(), want);
        assert_eq!(params("threads = 256").threads, 256);
        assert_eq!(params("").threads, 0);
    }

    #[test]
    fn formats_it_cannot_take_are_refused() {
        let e = CpuStage::<RgbProcess>::new("", &[FrameFormat::new(PixelFormat::I420, 4, 4)]).err().unwrap();
        assert_eq!(e.message(), "rgb-process takes rgb8, rgba8 or gray8 frames; input is i420 4x4");
    }
}
