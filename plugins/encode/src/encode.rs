//! The encode stage: its params, and the ffmpeg process it feeds raw frames through a pipe,
//! started in `create` and finished in `flush`.

use std::io::{BufWriter, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};

use gpuipc_plugin_api::child::ChildProcess;
use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plane, Plugin,
    PluginInfo, ProcessContext, Result, bail, debug, info, warn,
};
use serde::Deserialize;

use crate::ffmpeg::{self, Program};

/// The `params` table of an encode stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The file to write, or a URL ffmpeg writes to. Required.
    pub path: String,
    /// The encoder, ffmpeg's `-c:v`. Default `libx264`.
    #[serde(default = "default_codec")]
    pub codec: String,
    /// The container, ffmpeg's `-f`; ffmpeg guesses it from the path when not given.
    pub format: Option<String>,
    /// Frame rate numerator of the output, >= 1. Default 30.
    #[serde(default = "default_fps")]
    pub fps: u32,
    /// Frame rate denominator, >= 1. Default 1.
    #[serde(default = "default_fps_den")]
    pub fps_den: u32,
    /// Target bitrate, ffmpeg's `-b:v` (`4M`, `800k`). Not with `crf`.
    pub bitrate: Option<String>,
    /// Constant quality, ffmpeg's `-crf`. Not with `bitrate`.
    pub crf: Option<u32>,
    /// The encoder's preset, ffmpeg's `-preset`.
    pub preset: Option<String>,
    /// The pixel format the encoder gets, ffmpeg's output `-pix_fmt`.
    pub pix_fmt: Option<String>,
    /// More output arguments, given to ffmpeg as they are, before the container and path.
    #[serde(default)]
    pub options: Vec<String>,
    /// The ffmpeg program: a name on `PATH` or a path. Default: `$GPUIPC_FFMPEG`, else `ffmpeg`.
    pub ffmpeg: Option<String>,
    /// Replace an existing file (`-y`); false: refuse to (`-n`). Default true.
    #[serde(default = "default_overwrite")]
    pub overwrite: bool,
}

fn default_codec() -> String {
    "libx264".to_owned()
}

fn default_fps() -> u32 {
    30
}

fn default_fps_den() -> u32 {
    1
}

fn default_overwrite() -> bool {
    true
}

/// Where ffmpeg writes, by the look of `path`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output<'a> {
    /// A file (its folder is made when the stage starts).
    File(&'a Path),
    /// A URL with `://` (`udp://`, `rtmp://`, `srt://`, ...): ffmpeg's protocols decide.
    Url(&'a str),
    /// `-` or ffmpeg's `pipe:`: standard output, which the host prints on; refused.
    Stdout,
}

impl Params {
    /// The output's frame rate: `(fps, fps_den)`.
    pub fn rate(&self) -> (u32, u32) {
        (self.fps, self.fps_den)
    }

    pub fn output(&self) -> Output<'_> {
        if self.path == "-" || self.path.starts_with("pipe:") {
            Output::Stdout
        } else if self.path.contains("://") {
            Output::Url(&self.path)
        } else {
            Output::File(Path::new(&self.path))
        }
    }

    /// Check what serde cannot, reporting every problem at once, each naming its param. Only
    /// looks at the file system; the ffmpeg program is [`Encode::check`]'s.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        match self.output() {
            Output::Stdout => problems.push(format!(
                "param `path` is {:?}, standard output, where gpuipc-host prints its plan and report; write a file, \
                 a named pipe (mkfifo) or a URL such as \"udp://127.0.0.1:5000\" (with format = \"mpegts\")",
                self.path
            )),
            Output::Url(_) => {}
            Output::File(path) => {
                if let Err(e) = gpuipc_plugin_api::check_output_path("path", path) {
                    problems.push(e.to_string());
                } else if !self.overwrite && path.is_file() {
                    problems.push(format!(
                        "param `path`: {} exists and param `overwrite` is false; remove it or leave `overwrite` out",
                        path.display()
                    ));
                }
            }
        }
        let mut not_empty = |key: &str, value: Option<&str>, example: &str| {
            if value.is_some_and(|v| v.trim().is_empty()) {
                problems.push(format!("param `{key}` is empty; give one, e.g. {example}, or leave it out"));
            }
        };
        not_empty("codec", Some(&self.codec), "\"libx264\" (`ffmpeg -encoders` lists them)");
        not_empty("format", self.format.as_deref(), "\"mp4\" (`ffmpeg -muxers` lists them)");
        not_empty("preset", self.preset.as_deref(), "\"veryfast\"");
        not_empty("pix_fmt", self.pix_fmt.as_deref(), "\"yuv420p\" (`ffmpeg -pix_fmts` lists them)");
        for (key, value) in [("fps", self.fps), ("fps_den", self.fps_den)] {
            if value == 0 {
                problems.push(format!("param `{key}` must be at least 1, got 0"));
            }
        }
        if let Some(bitrate) = &self.bitrate
            && !bitrate.starts_with(|c: char| c.is_ascii_digit())
        {
            problems.push(format!(
                "param `bitrate` is {bitrate:?}; give bits per second, such as \"4M\", \"800k\" or \"2500000\""
            ));
        }
        if self.bitrate.is_some() && self.crf.is_some() {
            problems.push(
                "params `bitrate` and `crf` both set the quality (a target bitrate, or a constant quality); give one"
                    .to_owned(),
            );
        }
        if let Some(at) = self.options.iter().position(|o| o.is_empty()) {
            problems.push(format!("param `options`: item {at} is empty (ffmpeg would read it as an output file)"));
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }
}

/// The one input's format and pixel format, or why the stage cannot take it.
fn check_input(inputs: &[FrameFormat]) -> Result<(FrameFormat, PixelFormat)> {
    let [input] = inputs else { bail!("encode takes 1 input, got {}", inputs.len()) };
    match input.pixel_format() {
        Some(pixel) if Encode::INFO.accepts.contains(&pixel) => Ok((*input, pixel)),
        _ => bail!("encode takes i420, nv12, p010, rgb8, rgba8 or gray8 frames; input is {input}"),
    }
}

/// Write one frame's planes to ffmpeg, rows without their padding, and hand it over.
fn write_frame(out: &mut impl Write, planes: &[Plane<'_>]) -> std::io::Result<()> {
    for plane in planes {
        for y in 0..plane.rows() {
            out.write_all(plane.row(y))?;
        }
    }
    // Each frame reaches ffmpeg when it arrives: a live stream gets it at once, and a dead
    // ffmpeg is noticed at the frame it died.
    out.flush()
}

/// An encode stage: the ffmpeg process and the pipe to its standard input.
#[derive(Debug)]
pub struct Encode {
    /// `None` once ffmpeg finished (or failed and was waited for).
    child: Option<ChildProcess>,
    /// `None` once closed: at the end, or when ffmpeg stopped taking frames.
    input: Option<BufWriter<ChildStdin>>,
    format: FrameFormat,
    path: String,
    /// Frames written to ffmpeg's input.
    written: u64,
    /// Frames that came after ffmpeg ended on its own (an output option such as `-frames:v`).
    dropped: u64,
}

impl Encode {
    /// Writing to ffmpeg failed with `e` (a broken pipe: it exited): close the pipe, wait for
    /// it, and fail with what it said. An ffmpeg that exited 0 ended on purpose (`-frames:v`,
    /// `-t` in `options`): the frames that follow are dropped.
    fn ffmpeg_stopped(&mut self, e: std::io::Error) -> Result<()> {
        if let Some(writer) = self.input.take() {
            // What ffmpeg did not take is lost with it; dropping the writer would write it again.
            drop(writer.into_parts());
        }
        let Some(child) = self.child.take() else { bail!("cannot write to ffmpeg (encoding to {}): {e}", self.path) };
        // Waited for, not only asked: a broken pipe comes as ffmpeg exits, before its last
        // words may have been read.
        child.finish()?;
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            bail!("cannot write to ffmpeg (encoding to {}): {e}", self.path);
        }
        // This frame did not reach it.
        self.dropped += 1;
        warn!(
            "ffmpeg (encoding to {}) exited with code 0 before the stream ended, {} frames written to it (an output \
             option such as -frames:v or -t ends it early); the frames that follow are dropped",
            self.path, self.written
        );
        Ok(())
    }
}

impl Plugin for Encode {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "encode",
        version: env!("CARGO_PKG_VERSION"),
        description: "encodes frames into a playable file or stream through a child ffmpeg process (libx264 into .mp4 by default)",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[
            PixelFormat::I420,
            PixelFormat::Nv12,
            PixelFormat::P010,
            PixelFormat::Rgb8,
            PixelFormat::Rgba8,
            PixelFormat::Gray8,
        ],
        produces: &[],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "path",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "",
            description: "the file to write (its folder is made when the stage starts), or a URL ffmpeg writes to (udp://, rtmp://, srt://, ...); not \"-\"",
        },
        ParamInfo {
            name: "codec",
            kind: "string",
            default: r#""libx264""#,
            range: "",
            description: "the encoder, ffmpeg's -c:v (ffmpeg -encoders lists them)",
        },
        ParamInfo {
            name: "format",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the container, ffmpeg's -f (mp4, matroska, mpegts, flv, ...); ffmpeg guesses it from the file's extension when not given",
        },
        ParamInfo {
            name: "fps",
            kind: "integer",
            default: "30",
            range: ">= 1",
            description: "frame rate numerator of the output: frames are written one per 1/rate seconds, whatever their timestamps",
        },
        ParamInfo {
            name: "fps_den",
            kind: "integer",
            default: "1",
            range: ">= 1",
            description: "frame rate denominator (fps = 30000, fps_den = 1001 is 29.97)",
        },
        ParamInfo {
            name: "bitrate",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "target bitrate, ffmpeg's -b:v (\"4M\", \"800k\"); not with crf",
        },
        ParamInfo {
            name: "crf",
            kind: "integer",
            default: ParamInfo::NONE,
            range: ">= 0",
            description: "constant quality, ffmpeg's -crf (libx264: 0..=51, lower is better, 23 when not given); not with bitrate",
        },
        ParamInfo {
            name: "preset",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the encoder's speed against size, ffmpeg's -preset (libx264: ultrafast ... veryslow, medium when not given)",
        },
        ParamInfo {
            name: "pix_fmt",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the pixel format the encoder gets, ffmpeg's output -pix_fmt (\"yuv420p\": what players want); ffmpeg picks one when not given",
        },
        ParamInfo {
            name: "options",
            kind: "array of strings",
            default: "[]",
            range: "",
            description: "more output arguments for ffmpeg, passed as they are, one item per argument, after the others and before format and path",
        },
        ParamInfo {
            name: "ffmpeg",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the ffmpeg program, a name on PATH or a path; when not given, GPUIPC_FFMPEG if set, else ffmpeg",
        },
        ParamInfo {
            name: "overwrite",
            kind: "bool",
            default: "true",
            range: "",
            description: "replace an existing file (ffmpeg's -y); false: an existing file is an error (-n)",
        },
    ];

    /// The params, and that the ffmpeg program is there; nothing is started or created.
    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let program = Program::for_param(params.ffmpeg.as_deref()).find();
        match (params.validate(), program) {
            (Ok(()), Ok(_)) => Ok(()),
            (Err(e), Ok(_)) | (Ok(()), Err(e)) => Err(e),
            (Err(a), Err(b)) => Err(Error::new(format!("{a}; {b}"))),
        }
    }

    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        check_input(inputs)?;
        Ok(None)
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        _ctx: &CreateContext<'_>,
    ) -> Result<Encode> {
        let (format, pixel) = check_input(inputs)?;
        let program = Program::for_param(params.ffmpeg.as_deref()).find()?;
        if let Output::File(path) = params.output()
            && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::new(format!("param `path`: cannot create the folder {}: {e}", dir.display())))?;
        }
        let args = ffmpeg::arguments(&params, format, pixel);
        debug!("{} {}", program.display(), args.join(" "));
        let mut command = Command::new(&program);
        command
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            // Out of the terminal's process group (as stage processes are): Ctrl-C drains the
            // run, and ffmpeg ends when its input does, with every frame, not on the signal.
            .process_group(0);
        let mut child = ChildProcess::spawn(format!("ffmpeg (encoding to {})", params.path), command)?;
        let stdin = child.take_stdin().ok_or_else(|| Error::new("ffmpeg was started without a pipe to its input"))?;
        Ok(Encode {
            child: Some(child),
            // Rows are short; this many bytes go to the pipe per write.
            input: Some(BufWriter::with_capacity(1 << 16, stdin)),
            format,
            path: params.path,
            written: 0,
            dropped: 0,
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let [input] = inputs else { bail!("encode takes 1 input, got {}", inputs.len()) };
        if input.info.format != self.format {
            bail!("input frame is {}, but ffmpeg was started for {}", input.info.format, self.format);
        }
        let planes = (0..input.info.layout.planes().len())
            .map(|index| input.plane(index))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::new("encode reads host memory only (cpu domain)"))?;
        let Some(writer) = self.input.as_mut() else {
            self.dropped += 1;
            return Ok(());
        };
        match write_frame(writer, &planes) {
            Ok(()) => {
                self.written += 1;
                Ok(())
            }
            Err(e) => self.ffmpeg_stopped(e),
        }
    }

    /// Close ffmpeg's input and wait for it to finish the file: a failure there (the trailer
    /// could not be written) is the stage's, with ffmpeg's message.
    fn flush(&mut self) -> Result<()> {
        if let Some(writer) = self.input.as_mut()
            && let Err(e) = writer.flush()
        {
            return self.ffmpeg_stopped(e);
        }
        // ffmpeg sees the end of its input.
        drop(self.input.take());
        if let Some(child) = self.child.take() {
            child.finish()?;
        }
        if self.dropped > 0 {
            warn!("{} frames came after ffmpeg ended and were not encoded", self.dropped);
        }
        info!("ffmpeg finished {}, {} frames written to it", self.path, self.written);
        Ok(())
    }
}

impl Drop for Encode {
    fn drop(&mut self) {
        // A stage that ends without `flush` (it failed, or the run stopped) leaves the output
        // unfinished: the buffered bytes are not written (ffmpeg may not be reading), and the
        // child is killed and reaped when it drops.
        if let Some(writer) = self.input.take() {
            drop(writer.into_parts());
        }
    }
}

#[cfg(test)]
mod tests;
