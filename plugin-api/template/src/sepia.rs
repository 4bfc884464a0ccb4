//! The sepia stage: its params, the per-pixel arithmetic, and the `Plugin` implementation that
//! runs it on host frames (cpu domain) or hands device frames to [`crate::cuda`].

use gpuipc_plugin_api::serde::Deserialize;
use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat,
    Plugin, PluginInfo, ProcessContext, Result, bail, info,
};

use crate::cuda::GpuSepia;

/// The `params` table of a sepia stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
// serde's derive names its crate `serde`; this plugin has it only through plugin-api.
#[serde(crate = "gpuipc_plugin_api::serde", default, deny_unknown_fields)]
pub struct Params {
    /// 0 leaves frames as they are, 1 is full sepia. Default 1.
    pub strength: f64,
}

impl Default for Params {
    fn default() -> Params {
        Params { strength: 1.0 }
    }
}

impl Params {
    /// The mix weight out of 256, for a `strength` that [`Sepia::check`] accepted.
    pub fn weight(&self) -> u32 {
        (self.strength * 256.0).round() as u32
    }
}

/// The sepia colour of one pixel, from the classic matrix in integers.
pub fn sepia(r: u8, g: u8, b: u8) -> [u8; 3] {
    let (r, g, b) = (r as u32, g as u32, b as u32);
    let row = |cr: u32, cg: u32, cb: u32| ((cr * r + cg * g + cb * b + 500) / 1000).min(255) as u8;
    [row(393, 769, 189), row(349, 686, 168), row(272, 534, 131)]
}

/// Tone one row of `channels`-byte pixels (3 or 4; alpha copied) with weight `k` of 256.
pub fn tone(input: &[u8], output: &mut [u8], channels: usize, k: u32) {
    for (o, i) in output
        .chunks_exact_mut(channels)
        .zip(input.chunks_exact(channels))
    {
        let s = sepia(i[0], i[1], i[2]);
        for c in 0..3 {
            o[c] = ((i[c] as u32 * (256 - k) + s[c] as u32 * k + 128) >> 8) as u8;
        }
        if channels == 4 {
            o[3] = i[3];
        }
    }
}

/// A sepia stage instance.
#[derive(Debug)]
pub struct Sepia {
    k: u32,
    format: FrameFormat,
    /// The loaded kernel, in the cuda domain.
    gpu: Option<GpuSepia>,
}

impl Plugin for Sepia {
    type Params = Params;

    // Replicas allowed: each frame is toned on its own: several instances may share a stage's frames.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "sepia",
        version: env!("CARGO_PKG_VERSION"),
        description: "tones rgb8 and rgba8 frames sepia",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::Rgb8, PixelFormat::Rgba8],
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`; a test checks that it
    /// agrees with `Params` and the docs.
    const PARAMS: &'static [ParamInfo] = &[ParamInfo {
        name: "strength",
        kind: "float",
        default: "1.0",
        range: "0..=1",
        description: "0 leaves frames as they are, 1 is full sepia",
    }];

    /// At plan time (`gpuipc-host validate`, and `run` before any process starts), and again
    /// before `create`: a bad value is reported with the file's line before anything runs.
    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        if !(0.0..=1.0).contains(&params.strength) {
            bail!("param `strength` must be in 0..=1, got {}", params.strength);
        }
        Ok(())
    }

    /// The host (and the export glue, before this is called) has checked the inputs against
    /// `INFO`: one, in a pixel format of `INFO.accepts`. The output is its format and size.
    fn negotiate(_: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(inputs[0]))
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Sepia> {
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuSepia::new(ctx)?),
            Domain::Cpu => None,
        };
        // The host shows it with the stage's name: `INFO stage{name=tone}: strength 0.8 ...`.
        info!(
            "strength {} in the {} domain",
            params.strength,
            ctx.domain.name()
        );
        Ok(Sepia {
            k: params.weight(),
            format: inputs[0],
            gpu,
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        // One input, as INFO says: the host (and the export glue) checked it.
        let input = &inputs[0];
        let output = output.ok_or("sepia needs an output frame")?;
        if output.info().format != self.format || input.info.format != self.format {
            bail!(
                "frames are {} and {}, expected {}",
                input.info.format,
                output.info().format,
                self.format
            );
        }
        if let (Some(gpu), Some(src), Some(dst)) =
            (&self.gpu, input.device_buffer(), output.device_buffer())
        {
            // Enqueued on the stage's stream; the runner orders it with the neighbours' work.
            // Never synchronise here: the stage would wait for the GPU every frame.
            return gpu.tone(
                (&input.info, src),
                (output.info(), dst),
                self.k,
                ctx.cuda_stream,
            );
        }
        let host_only = || Error::new("sepia in the cpu domain reads and writes host frames");
        let src = input.plane(0).ok_or_else(host_only)?;
        let channels = input
            .info
            .pixel()
            .bytes_per_pixel()
            .expect("rgb8 and rgba8 are packed") as usize;
        let mut dst = output.plane_mut(0).ok_or_else(host_only)?;
        // Rows are padded: go row by row, never by width * channels over the whole plane.
        for y in 0..dst.rows() {
            tone(src.row(y), dst.row_mut(y), channels, self.k);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    fn rgb(width: u32, height: u32) -> FrameFormat {
        FrameFormat::new(PixelFormat::Rgb8, width, height)
    }

    #[test]
    fn white_gray_and_black_tone_as_computed_by_hand() {
        // White: (393 + 769 + 189) * 255 / 1000 = 344.5 and 306.8 clip, 238.9 rounds to 239.
        assert_eq!(sepia(255, 255, 255), [255, 255, 239]);
        assert_eq!(sepia(0, 0, 0), [0, 0, 0]);
        // Gray 100: 135.1, 120.3, 93.7.
        assert_eq!(sepia(100, 100, 100), [135, 120, 94]);
    }

    #[test]
    fn full_strength_is_sepia_and_zero_is_the_input() {
        let pixels = [255, 255, 255, 100, 100, 100, 0, 0, 0, 10, 200, 30];
        let mut stage = CpuStage::<Sepia>::new("", &[rgb(2, 2)]).unwrap();
        let out = stage.process(0, &[&pixels]).unwrap().unwrap();
        assert_eq!(out, [255, 255, 239, 135, 120, 94, 0, 0, 0, 163, 146, 113]);
        let mut none = CpuStage::<Sepia>::new("strength = 0", &[rgb(2, 2)]).unwrap();
        assert_eq!(none.process(1, &[&pixels]).unwrap().unwrap(), pixels);
    }

    #[test]
    fn alpha_is_copied_and_odd_sizes_work() {
        let format = FrameFormat::new(PixelFormat::Rgba8, 3, 1);
        let mut stage = CpuStage::<Sepia>::new("strength = 0.5", &[format]).unwrap();
        let out = stage
            .process(0, &[&[255, 255, 255, 7, 100, 100, 100, 8, 0, 0, 0, 9]])
            .unwrap()
            .unwrap();
        // Half way: (255 + 255) / 2, (255 + 239) / 2 = 247, (100 + 135) / 2 = 117.5 -> 118.
        assert_eq!(out, [255, 255, 247, 7, 118, 110, 97, 8, 0, 0, 0, 9]);
    }

    #[test]
    fn bad_params_are_refused_at_plan_time() {
        let p = parse_params::<Sepia>("strength = 1.5").unwrap();
        let e = Sepia::check(&p, &[rgb(2, 2)]).unwrap_err();
        assert_eq!(e.message(), "param `strength` must be in 0..=1, got 1.5");
        let e = CpuStage::<Sepia>::new("strength = -0.5", &[rgb(2, 2)])
            .err()
            .unwrap();
        assert_eq!(e.message(), "param `strength` must be in 0..=1, got -0.5");
        let e = parse_params::<Sepia>("strength = \"high\"").unwrap_err();
        assert!(e.message().contains("strength"), "{e}");
        let e = parse_params::<Sepia>("amount = 1").unwrap_err();
        assert!(e.message().contains("amount"), "{e}");
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Sepia>(include_str!("lib.rs"), "");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Sepia::INFO.name, |text| {
            let p = parse_params::<Sepia>(text).unwrap();
            Sepia::check(&p, &[rgb(2, 2)]).unwrap();
        });
    }

    /// The cuda path writes the cpu path's bytes, padding untouched. Runs on a GPU (and
    /// NVRTC); elsewhere it returns at once, unless GPUIPC_REQUIRE_GPU=1 makes that a failure.
    #[test]
    fn gpu_frames_equal_cpu_frames() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        use gpuipc_plugin_api::testing::padded;
        let Some(gpu) = GpuHarness::for_test() else {
            return;
        };
        for pixel in [PixelFormat::Rgb8, PixelFormat::Rgba8] {
            for (width, height) in [(1, 1), (5, 3), (641, 359)] {
                let format = FrameFormat::new(pixel, width, height);
                let params = parse_params::<Sepia>("strength = 0.8").unwrap();
                let ctx = gpu.create_context("tone").unwrap();
                let mut stage = Sepia::create(params, &[format], Some(format), &ctx).unwrap();
                let mut info = FrameInfo::new(format, 0, 0).unwrap();
                info.layout = padded(info.layout, 5);
                let bytes: Vec<u8> = (0..info.layout.total_bytes)
                    .map(|i| (i * 31 + 7) as u8)
                    .collect();

                let mut cpu = vec![0xa5; bytes.len()];
                let mut out = OutputFrame::host(info, &mut cpu).unwrap();
                let pc = ProcessContext {
                    frame_index: 0,
                    cuda_stream: 0,
                };
                stage
                    .process(
                        &[InputFrame::host(info, &bytes).unwrap()],
                        Some(&mut out),
                        &pc,
                    )
                    .unwrap();

                let (src, dst) = (
                    gpu.upload(&bytes).unwrap(),
                    gpu.upload(&vec![0xa5; bytes.len()]).unwrap(),
                );
                let mut out = OutputFrame::device(info, dst.buffer());
                let input = InputFrame::device(info, src.buffer());
                stage
                    .process(&[input], Some(&mut out), &gpu.process_context(0))
                    .unwrap();
                if let Some(d) = first_difference(&gpu.download(&dst).unwrap(), &cpu, &info.layout)
                {
                    panic!("{format}: {d}");
                }
            }
        }
    }
}
