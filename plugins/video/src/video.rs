//! The video stage: its params, what it checks at plan time, and the frame loop that asks its
//! decoder for the display frame a `seq` names, so a restarted stage carries on where the
//! last frame it delivered left off.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::ffmpeg::Program;
use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::container::Index;
use crate::decode::{Decoder, Read1, cpu, cpu::CpuDecoder, cuda::GpuDecoder};

/// The `params` table of a video stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The file to decode. Required.
    pub path: PathBuf,
    /// Start again at the first frame after the last. Default false.
    #[serde(rename = "loop", default)]
    pub looping: bool,
    /// Hand frames on at the pace of their timestamps, as a camera would. Default false.
    #[serde(default)]
    pub realtime: bool,
    /// The ffmpeg program of the cpu decoder. Default `$GPUIPC_FFMPEG`, else `ffmpeg` on PATH
    /// (`gpuipc_plugin_api::ffmpeg`).
    pub ffmpeg: Option<String>,
}

impl Params {
    fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.path.as_os_str().is_empty() {
            problems.push("param `path` is empty; give the video file to decode".to_owned());
        }
        problems.extend(cpu::ffmpeg_param_problem(self.ffmpeg.as_deref()));
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }
}

/// The output format of a stream, or why the video source cannot give it.
pub fn output_format(index: &Index, path: &Path) -> Result<FrameFormat> {
    gpuipc_video_codec::decode::frame_format(&index.info, &path.display(), "video")
}

/// Where a realtime source is on the wall clock: when the frame it started at was due.
#[derive(Debug, Clone, Copy)]
struct Clock {
    started: Instant,
    /// The presentation time of the frame made at `started`.
    at_ns: u64,
}

/// A video stage instance.
#[derive(Debug)]
pub struct Video {
    index: Arc<Index>,
    decoder: Decoder,
    looping: bool,
    realtime: bool,
    clock: Option<Clock>,
    /// The pass the decoder is on (`None` before the first frame).
    pass: Option<u64>,
    damaged: u64,
    what: String,
}

impl Video {
    /// Put the decoder at display frame `k` of pass `pass`: on from where it is when that is
    /// on the way, else from the last entry before `k` (a key frame; the file's start at
    /// worst), reading past the frames between.
    fn seek(&mut self, pass: u64, k: usize) -> Result<bool> {
        let entry = self.index.entry_for(k);
        let on_the_way = |at: usize| at <= k && at >= entry.display;
        if self.pass != Some(pass) || !self.decoder.position().is_some_and(on_the_way) {
            self.decoder.start_pass(entry)?;
            self.pass = Some(pass);
        }
        while self.decoder.position().is_some_and(|at| at < k) {
            if self.decoder.next_frame(None)? == Read1::End {
                return Ok(false);
            }
        }
        Ok(self.decoder.position() == Some(k))
    }

    /// Wait until frame time `at_ns` is due (realtime only).
    fn pace(&mut self, at_ns: u64) {
        let clock = *self.clock.get_or_insert(Clock { started: Instant::now(), at_ns });
        let due = clock.started + Duration::from_nanos(at_ns.saturating_sub(clock.at_ns));
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
}

impl Plugin for Video {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "video",
        version: env!("CARGO_PKG_VERSION"),
        description: "decodes a video file (H.264, HEVC, VP9, AV1 in MP4/MOV; H.264/HEVC elementary streams) into nv12 or p010 frames, with NVDEC on the GPU or ffmpeg on the CPU",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 0,
        max_inputs: 0,
        accepts: &[],
        produces: &[PixelFormat::Nv12, PixelFormat::P010],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "path",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "",
            description: "the file to decode: MP4 or MOV (H.264, HEVC, VP9, AV1), or an H.264 or HEVC elementary stream (.h264, .264, .h265, .hevc)",
        },
        ParamInfo {
            name: "loop",
            kind: "bool",
            default: "false",
            range: "",
            description: "start again at the first frame after the last, until the pipeline's `frames` or Ctrl-C",
        },
        ParamInfo {
            name: "realtime",
            kind: "bool",
            default: "false",
            range: "",
            description: "hand frames on at the pace of their timestamps, as a camera would; otherwise as fast as the pipeline takes them",
        },
        cpu::FFMPEG_PARAM,
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate()
    }

    /// Opens the file and reads what it holds; says it in the log (`validate` shows it).
    fn negotiate(params: &Params, _inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        let index = Index::open(&params.path)?;
        let format = output_format(&index, &params.path)?;
        gpuipc_plugin_api::info!("{}: {} -> {}", params.path.display(), index.info, format);
        Ok(Some(format))
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Video> {
        let index = Arc::new(Index::open(&params.path)?);
        let format = output_format(&index, &params.path)?;
        if output != Some(format) {
            let planned = output.map_or("no output".to_owned(), |f| f.to_string());
            bail!("{} now holds {format} video, but the pipeline was planned for {planned}", params.path.display());
        }
        let decoder = match ctx.domain {
            Domain::Cpu => {
                let program = Program::for_param(params.ffmpeg.as_deref()).find()?;
                Decoder::Cpu(CpuDecoder::new(Arc::clone(&index), &params.path, program))
            }
            Domain::Cuda => Decoder::Cuda(GpuDecoder::new(Arc::clone(&index), &params.path, ctx)?),
        };
        Ok(Video {
            index,
            decoder,
            looping: params.looping,
            realtime: params.realtime,
            clock: None,
            pass: None,
            damaged: 0,
            what: params.path.display().to_string(),
        })
    }

    /// Frame `seq` is display frame `seq % frames` of pass `seq / frames`.
    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let out = output.ok_or_else(|| Error::new("a video source needs an output frame"))?;
        let seq = out.info().seq;
        let frames = self.index.info.frames;
        let (pass, k) = (seq / frames, (seq % frames) as usize);
        if pass > 0 && !self.looping {
            out.end_stream();
            return Ok(());
        }
        if !self.seek(pass, k)? {
            return self.ran_short(out, pass);
        }
        let at_ns = self.index.time_ns(pass, k);
        if self.realtime {
            self.pace(at_ns);
        }
        match self.decoder.next_frame(Some(out))? {
            Read1::End => return self.ran_short(out, pass),
            Read1::Frame { damaged } => {
                if damaged {
                    self.damaged += 1;
                    out.mark_damaged();
                }
            }
        }
        out.relay(seq, at_ns);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.damaged > 0 {
            gpuipc_plugin_api::warn!("{}: {} frames were decoded with errors (concealed)", self.what, self.damaged);
        }
        Ok(())
    }
}

impl Video {
    /// The decoder gave fewer frames than the file holds (some could not be decoded): the
    /// stream ends there; a looping source cannot tell where its next pass would begin.
    fn ran_short(&mut self, out: &mut OutputFrame<'_>, pass: u64) -> Result<()> {
        if self.looping {
            bail!(
                "{}: pass {pass} ended before the last of the file's {} frames (the rest could not be decoded), so it cannot loop",
                self.what,
                self.index.info.frames
            );
        }
        out.end_stream();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::container::Chroma;
    use gpuipc_plugin_api::parse_params;
    use gpuipc_plugin_api::testing::check_doc_examples;

    use super::*;
    use crate::container::{Codec, Packing, Sample, StreamInfo};

    fn index(chroma: Chroma, bit_depth: u32, (width, height): (u32, u32)) -> Index {
        Index {
            info: StreamInfo {
                container: "MP4",
                codec: Codec::Hevc,
                profile: "Main 10".into(),
                width,
                height,
                bit_depth,
                chroma,
                frame_rate: Some((30000, 1001)),
                frames: 3,
            },
            samples: vec![Sample { offset: 0, size: 1 }; 3],
            entries: vec![crate::container::Entry { sample: 0, display: 0 }],
            display_times: vec![0, 1001, 2002],
            timescale: 30000,
            duration: 3003,
            packing: Packing::AnnexB,
        }
    }

    #[test]
    fn the_output_is_nv12_or_p010_of_the_picture_size() {
        let path = Path::new("in.mp4");
        let nv12 = output_format(&index(Chroma::C420, 8, (1920, 1080)), path).unwrap();
        assert_eq!(nv12, FrameFormat::new(PixelFormat::Nv12, 1920, 1080));
        let p010 = output_format(&index(Chroma::C420, 10, (642, 362)), path).unwrap();
        assert_eq!(p010, FrameFormat::new(PixelFormat::P010, 642, 362));
        let e = output_format(&index(Chroma::C444, 8, (64, 64)), path).unwrap_err();
        assert_eq!(
            e.message(),
            "in.mp4: HEVC Main 10 has 4:4:4 chroma; the video source makes nv12 and p010 frames (4:2:0) only"
        );
        let e = output_format(&index(Chroma::C420, 12, (64, 64)), path).unwrap_err();
        assert_eq!(
            e.message(),
            "in.mp4: HEVC Main 10 is 12-bit; the video source decodes 8-bit (nv12) and 10-bit (p010) video only"
        );
    }

    #[test]
    fn frame_times_follow_the_file_and_loop_after_its_duration() {
        let index = index(Chroma::C420, 8, (64, 64));
        assert_eq!(index.time_ns(0, 0), 0);
        assert_eq!(index.time_ns(0, 1), 33_366_666);
        // The second pass starts after the third frame's duration: 3003 / 30000 s.
        assert_eq!(index.time_ns(1, 0), 100_100_000);
        assert_eq!(index.time_ns(1, 2), 166_833_333);
    }

    #[test]
    fn the_stream_line_says_what_validate_shows() {
        let info = index(Chroma::C420, 10, (642, 362)).info;
        assert_eq!(
            info.to_string(),
            "HEVC Main 10 in MP4, 642x362, 10-bit 4:2:0, 29.970 frames/s (30000/1001), 3 frames"
        );
    }

    #[test]
    fn params_are_checked_and_named() {
        let e = parse_params::<Video>("loop = true").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
        let params = parse_params::<Video>("path = \"\"\nffmpeg = \"\"").unwrap();
        let e = Video::check(&params, &[]).unwrap_err();
        assert_eq!(
            e.message(),
            "param `path` is empty; give the video file to decode; param `ffmpeg` is empty; leave it out for `ffmpeg` on PATH"
        );
        let e = Video::negotiate(&parse_params::<Video>("path = \"/nonexistent/in.mp4\"").unwrap(), &[]).unwrap_err();
        assert!(e.message().starts_with("param `path`: cannot open /nonexistent/in.mp4:"), "{e}");
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Video>(include_str!("lib.rs"), "path = \"x.mp4\"");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Video::INFO.name, |text| {
            let params = parse_params::<Video>(text).unwrap();
            params.validate().unwrap();
        });
    }
}
