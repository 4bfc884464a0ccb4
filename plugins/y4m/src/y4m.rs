//! The y4m stage: its params, the header and the packed frame writer of the sink, and the
//! choice between sink and source ([`crate::source`]) by the stage's inputs.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::source::{self, Source};

/// The `params` table of a y4m stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Sink: the file to write, created or truncated at start. Source: the file to read, or
    /// `-` for standard input. Required.
    pub path: PathBuf,
    /// Sink only: frame rate numerator for the header, >= 1. Default 30.
    pub fps: Option<u32>,
    /// Sink only: frame rate denominator for the header, >= 1. Default 1.
    pub fps_den: Option<u32>,
    /// Source only: play the file again from its first frame when it ends. Default false.
    #[serde(rename = "loop", default)]
    pub looping: bool,
}

/// What a y4m stage is, by its inputs: a sink with one, a source with none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Sink,
    Source,
}

impl Role {
    fn of(inputs: &[FrameFormat]) -> Role {
        if inputs.is_empty() { Role::Source } else { Role::Sink }
    }
}

impl Params {
    /// The header's rate: `(fps, fps_den)`, defaults applied.
    pub fn rate(&self) -> (u32, u32) {
        (self.fps.unwrap_or(30), self.fps_den.unwrap_or(1))
    }

    /// Check the values serde cannot, for a stage of `role`, reporting every problem at once.
    pub fn validate(&self, role: Role) -> Result<()> {
        let mut problems = Vec::new();
        match role {
            Role::Sink => {
                if let Err(e) = gpuipc_plugin_api::check_output_path("path", &self.path) {
                    problems.push(e.to_string());
                }
                for (key, value) in [("fps", self.fps), ("fps_den", self.fps_den)] {
                    if value == Some(0) {
                        problems.push(format!("param `{key}` must be at least 1, got 0"));
                    }
                }
                if self.looping {
                    problems.push(
                        "param `loop` is for a y4m source (a stage without inputs); this stage has an input and writes a file"
                            .to_owned(),
                    );
                }
            }
            Role::Source => {
                if self.path.as_os_str().is_empty() {
                    problems
                        .push("param `path` is empty; give the file to read, or \"-\" for standard input".to_owned());
                }
                for (key, value) in [("fps", self.fps), ("fps_den", self.fps_den)] {
                    if value.is_some() {
                        problems.push(format!(
                            "param `{key}` sets the rate a y4m sink writes; this stage has no inputs, so it reads {} and takes no `{key}`",
                            source::stream_name(&self.path)
                        ));
                    }
                }
                if self.looping && source::is_stdin(&self.path) {
                    problems.push(
                        "param `loop` needs a file: standard input (path = \"-\") cannot be read again".to_owned(),
                    );
                }
            }
        }
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }
}

/// The stream header line, newline included.
pub fn header(format: FrameFormat, fps: u32, fps_den: u32) -> String {
    format!("YUV4MPEG2 W{} H{} F{fps}:{fps_den} Ip A1:1 C420jpeg\n", format.width, format.height)
}

/// Write one frame: `FRAME\n`, then every plane's rows without padding.
pub fn write_frame(out: &mut impl Write, frame: &InputFrame<'_>) -> Result<()> {
    out.write_all(b"FRAME\n")?;
    for index in 0..frame.info.layout.planes().len() {
        let plane = frame.plane(index).ok_or_else(|| Error::new("y4m reads host memory only (cpu domain)"))?;
        for y in 0..plane.rows() {
            out.write_all(plane.row(y))?;
        }
    }
    Ok(())
}

fn check_input(inputs: &[FrameFormat]) -> Result<FrameFormat> {
    let [input] = inputs else { bail!("y4m takes 1 input, got {}", inputs.len()) };
    match input.pixel_format() {
        Some(PixelFormat::I420) => Ok(*input),
        Some(other) => bail!("y4m writes i420 frames; input is {other}, add a yuv420 stage with layout = \"i420\""),
        None => bail!("y4m writes i420 frames; input is {input}, add a yuv420 stage with layout = \"i420\""),
    }
}

/// A y4m sink: the file being written.
#[derive(Debug)]
pub struct Sink {
    out: BufWriter<File>,
    path: PathBuf,
    format: FrameFormat,
}

impl Sink {
    fn write_error(&self, e: impl std::fmt::Display) -> Error {
        Error::new(format!("cannot write {}: {e}", self.path.display()))
    }

    fn create(params: Params, format: FrameFormat) -> Result<Sink> {
        let (mut file, kept) = gpuipc_plugin_api::open_output_file("path", &params.path)?;
        let (fps, fps_den) = params.rate();
        let header = header(format, fps, fps_den);
        if kept {
            // A restarted stage goes on with the stream its earlier processes wrote: every
            // whole frame stays, what a killed process left of one goes.
            keep_whole_frames(&mut file, &header, format)
                .map_err(|e| Error::new(format!("{}: {e}", params.path.display())))?;
            return Ok(Sink { out: BufWriter::new(file), path: params.path.clone(), format });
        }
        let mut sink = Sink { out: BufWriter::new(file), path: params.path.clone(), format };
        sink.out.write_all(header.as_bytes()).map_err(|e| sink.write_error(e))?;
        Ok(sink)
    }

    fn write(&mut self, input: &InputFrame<'_>) -> Result<()> {
        if input.info.format != self.format {
            bail!("input frame is {}, but the file's header says {}", input.info.format, self.format);
        }
        // Each frame reaches the file as it is written, so a stage killed at any moment loses
        // no frame it was done with.
        write_frame(&mut self.out, input).and_then(|()| Ok(self.out.flush()?)).map_err(|e| self.write_error(e))
    }
}

/// Bytes of one frame in the stream: its `FRAME` line and its planes, packed.
fn frame_record_bytes(format: FrameFormat) -> u64 {
    let (w, h) = (u64::from(format.width), u64::from(format.height));
    6 + w * h + 2 * w.div_ceil(2) * h.div_ceil(2)
}

/// Check that `file` starts with `header` and cut it after its last whole frame, leaving it
/// positioned at its end to write on.
fn keep_whole_frames(file: &mut File, header: &str, format: FrameFormat) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let len = file.metadata()?.len();
    let mut start = vec![0u8; header.len()];
    file.seek(SeekFrom::Start(0))?;
    let read = file.read(&mut start)?;
    if read < header.len() || start != header.as_bytes() {
        bail!(
            "the stage was restarted, but the file does not start with the header it writes ({:?}); it was changed meanwhile",
            header.trim_end()
        );
    }
    let frame = frame_record_bytes(format);
    let whole = (len - header.len() as u64) / frame;
    let keep = header.len() as u64 + whole * frame;
    file.set_len(keep)?;
    file.seek(SeekFrom::Start(keep))?;
    Ok(())
}

/// A y4m stage instance: a sink (one input) or a source (none).
#[derive(Debug)]
pub enum Y4m {
    Sink(Sink),
    Source(Source),
}

impl Plugin for Y4m {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "y4m",
        version: env!("CARGO_PKG_VERSION"),
        description: "writes i420 frames to a YUV4MPEG2 file, or reads them from one (or standard input) as a source",
        domains: &[Domain::Cpu],
        min_inputs: 0,
        max_inputs: 1,
        accepts: &[PixelFormat::I420],
        produces: &[PixelFormat::I420],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "path",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "",
            description: r#"sink: the file to write, created or truncated when the stage starts; source: the file to read, or "-" for standard input"#,
        },
        ParamInfo {
            name: "fps",
            kind: "integer",
            default: ParamInfo::NONE,
            range: ">= 1",
            description: "sink only: frame rate numerator written in the header; 30 when not given",
        },
        ParamInfo {
            name: "fps_den",
            kind: "integer",
            default: ParamInfo::NONE,
            range: ">= 1",
            description: "sink only: frame rate denominator (fps = 30000, fps_den = 1001 is 29.97); 1 when not given",
        },
        ParamInfo {
            name: "loop",
            kind: "bool",
            default: "false",
            range: "",
            description: r#"source only: play the file again from its first frame when it ends (not with "-")"#,
        },
    ];

    /// The params of a sink or of a source, by the inputs; nothing is opened or created.
    fn check(params: &Params, inputs: &[FrameFormat]) -> Result<()> {
        params.validate(Role::of(inputs))
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        match Role::of(inputs) {
            Role::Sink => {
                check_input(inputs)?;
                Ok(None)
            }
            Role::Source => Ok(Some(source::format_of(&source::probe(&params.path)?))),
        }
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        _ctx: &CreateContext<'_>,
    ) -> Result<Y4m> {
        match Role::of(inputs) {
            Role::Sink => Ok(Y4m::Sink(Sink::create(params, check_input(inputs)?)?)),
            Role::Source => {
                let Some(format) = output else {
                    bail!("a y4m source needs an output frame format (the host negotiates it)")
                };
                Ok(Y4m::Source(Source::open(&params.path, params.looping, format)?))
            }
        }
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        match self {
            Y4m::Sink(sink) => {
                let [input] = inputs else { bail!("y4m takes 1 input, got {}", inputs.len()) };
                sink.write(input)
            }
            Y4m::Source(source) => {
                let output = output.ok_or_else(|| Error::new("a y4m source needs an output frame"))?;
                source.fill(output)
            }
        }
    }

    fn flush(&mut self) -> Result<()> {
        match self {
            Y4m::Sink(sink) => sink.out.flush().map_err(|e| sink.write_error(e)),
            Y4m::Source(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{check_doc_examples, cpu_context, frame_bytes, packed_planes, padded, temp_path};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;

    #[test]
    fn writes_header_and_packed_frames() {
        let path = temp_path("y4m", "two-frames.y4m");
        let text = format!("path = {:?}\nfps = 30000\nfps_den = 1001", path.to_str().unwrap());
        let params = parse_params::<Y4m>(&text).unwrap();
        // 5x3: Y 5x3 = 15 bytes, U and V 3x2 = 6 bytes each: 27 bytes a frame.
        let format = FrameFormat::new(PixelFormat::I420, 5, 3);
        assert_eq!(Y4m::negotiate(&params, &[format]).unwrap(), None);
        let mut stage = Y4m::create(params, &[format], None, &cpu_context()).unwrap();
        let frames: Vec<Vec<u8>> = (0..2u8).map(|f| (0..27).map(|i| f * 100 + i).collect()).collect();
        for (seq, packed) in frames.iter().enumerate() {
            let mut info = FrameInfo::new(format, seq as u64, 0).unwrap();
            if seq == 1 {
                info.layout = padded(info.layout, 11);
            }
            let bytes = frame_bytes(&info, packed, 0xee);
            let pc = ProcessContext { frame_index: seq as u64, cuda_stream: 0 };
            stage.process(&[InputFrame::host(info, &bytes).unwrap()], None, &pc).unwrap();
        }
        stage.flush().unwrap();
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();

        let header = b"YUV4MPEG2 W5 H3 F30000:1001 Ip A1:1 C420jpeg\n";
        assert_eq!(written.len(), header.len() + 2 * (6 + 27));
        let mut expected = header.to_vec();
        for packed in &frames {
            expected.extend_from_slice(b"FRAME\n");
            expected.extend_from_slice(packed);
        }
        assert_eq!(written, expected);
        assert!(!written.contains(&0xee));
    }

    #[test]
    fn default_rate_is_30_over_1() {
        let params = parse_params::<Y4m>("path = \"x.y4m\"").unwrap();
        assert_eq!(params.rate(), (30, 1));
        let (fps, fps_den) = params.rate();
        let h = header(FrameFormat::new(PixelFormat::I420, 1920, 1080), fps, fps_den);
        assert_eq!(h, "YUV4MPEG2 W1920 H1080 F30:1 Ip A1:1 C420jpeg\n");
    }

    #[test]
    fn other_formats_are_refused_with_a_hint() {
        let params = parse_params::<Y4m>("path = \"x.y4m\"").unwrap();
        let e = Y4m::negotiate(&params, &[FrameFormat::new(PixelFormat::Nv12, 4, 4)]).unwrap_err();
        assert_eq!(e.message(), "y4m writes i420 frames; input is nv12, add a yuv420 stage with layout = \"i420\"");
        let e = Y4m::negotiate(&params, &[FrameFormat::new(PixelFormat::Rgb8, 4, 4)]).unwrap_err();
        assert!(e.message().contains("input is rgb8"), "{e}");
    }

    #[test]
    fn bad_params_name_the_param() {
        let e = parse_params::<Y4m>("fps = 30").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
        let e = parse_params::<Y4m>("path = \"x\"\nfps = 29.97").unwrap_err();
        assert!(e.message().contains("fps"), "{e}");
        let e = parse_params::<Y4m>("path = \"x\"\nfps = -1").unwrap_err();
        assert!(e.message().contains("fps"), "{e}");
        let format = FrameFormat::new(PixelFormat::I420, 2, 2);
        for (text, key) in [("fps = 0", "`fps`"), ("fps_den = 0", "`fps_den`")] {
            let params = parse_params::<Y4m>(&format!("path = \"x\"\n{text}")).unwrap();
            let e = Y4m::check(&params, &[format]).unwrap_err();
            assert!(e.message().contains(key), "{e}");
        }
        let params = parse_params::<Y4m>("path = \"/proc/nonexistent/x.y4m\"").unwrap();
        let e = Y4m::create(params, &[format], None, &cpu_context()).unwrap_err();
        assert!(
            e.message().starts_with(
                "param `path`: /proc/nonexistent/x.y4m cannot be created: /proc is on the kernel's proc file system"
            ),
            "{e}"
        );
    }

    /// A y4m file of `frames` (each packed Y, U, V of a 5x3 frame: 27 bytes), written by the
    /// sink, and its path.
    fn sink_file(name: &str, frames: &[Vec<u8>]) -> std::path::PathBuf {
        let path = temp_path("y4m", name);
        let params = parse_params::<Y4m>(&format!("path = {:?}", path.to_str().unwrap())).unwrap();
        let mut stage = Y4m::create(params, &[FORMAT_5X3], None, &cpu_context()).unwrap();
        for (seq, packed) in frames.iter().enumerate() {
            let info = FrameInfo::new(FORMAT_5X3, seq as u64, 0).unwrap();
            let bytes = frame_bytes(&info, packed, 0);
            let pc = ProcessContext { frame_index: seq as u64, cuda_stream: 0 };
            stage.process(&[InputFrame::host(info, &bytes).unwrap()], None, &pc).unwrap();
        }
        stage.flush().unwrap();
        path
    }

    const FORMAT_5X3: FrameFormat = FrameFormat { pixel: PixelFormat::I420 as u32, width: 5, height: 3 };

    fn frames_5x3(n: u8) -> Vec<Vec<u8>> {
        (0..n).map(|f| (0..27).map(|i| f * 50 + i).collect()).collect()
    }

    /// A source stage on `params`: its negotiated format and the stage.
    fn source(params: &str) -> Result<(FrameFormat, Y4m)> {
        let params = parse_params::<Y4m>(params)?;
        Y4m::check(&params, &[])?;
        let format = Y4m::negotiate(&params, &[])?.expect("a source has an output");
        Ok((format, Y4m::create(params, &[], Some(format), &cpu_context())?))
    }

    /// Frame `seq` from a source into a padded frame: the packed planes, or `None` when the
    /// source ended its stream.
    fn read(stage: &mut Y4m, format: FrameFormat, seq: u64) -> Result<Option<Vec<u8>>> {
        let mut info = FrameInfo::new(format, seq, 0).unwrap();
        info.layout = padded(info.layout, 7);
        let mut bytes = vec![0xee; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let pc = ProcessContext { frame_index: seq, cuda_stream: 0 };
        stage.process(&[], Some(&mut out), &pc)?;
        if out.ends_stream() {
            assert!(bytes.iter().all(|&b| b == 0xee), "an ended frame is written");
            return Ok(None);
        }
        Ok(Some(packed_planes(&info.layout, &bytes, 0xee).concat()))
    }

    fn path_param(path: &std::path::Path) -> String {
        format!("path = {:?}", path.to_str().unwrap())
    }

    #[test]
    fn a_source_reads_back_what_the_sink_wrote_then_ends_its_stream() {
        let frames = frames_5x3(3);
        let path = sink_file("read-back.y4m", &frames);
        let (format, mut stage) = source(&path_param(&path)).unwrap();
        assert_eq!(format, FORMAT_5X3);
        for (seq, want) in frames.iter().enumerate() {
            assert_eq!(read(&mut stage, format, seq as u64).unwrap().as_ref(), Some(want), "frame {seq}");
        }
        assert_eq!(read(&mut stage, format, 3).unwrap(), None);
        stage.flush().unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_source_loops_and_a_restarted_one_starts_at_its_seq() {
        let frames = frames_5x3(2);
        let path = sink_file("loop.y4m", &frames);
        let (format, mut stage) = source(&format!("{}\nloop = true", path_param(&path))).unwrap();
        for seq in 0..5 {
            let got = read(&mut stage, format, seq).unwrap();
            assert_eq!(got.as_ref(), Some(&frames[seq as usize % 2]), "seq {seq}");
        }
        // A restarted process carries on at a later seq: it skips to that frame of the file.
        let (_, mut restarted) = source(&format!("{}\nloop = true", path_param(&path))).unwrap();
        assert_eq!(read(&mut restarted, format, 3).unwrap().as_ref(), Some(&frames[1]));
        assert_eq!(read(&mut restarted, format, 4).unwrap().as_ref(), Some(&frames[0]));
        let (_, mut restarted) = source(&path_param(&path)).unwrap();
        assert_eq!(read(&mut restarted, format, 1).unwrap().as_ref(), Some(&frames[1]));
        let (_, mut restarted) = source(&path_param(&path)).unwrap();
        assert_eq!(read(&mut restarted, format, 2).unwrap(), None);
        // A file with no frame ends at once, looping or not.
        let empty = sink_file("empty.y4m", &[]);
        for text in [path_param(&empty), format!("{}\nloop = true", path_param(&empty))] {
            let (_, mut stage) = source(&text).unwrap();
            assert_eq!(read(&mut stage, format, 0).unwrap(), None, "{text}");
        }
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&empty).unwrap();
    }

    /// Write `bytes` to a temporary file; its path.
    fn file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let path = temp_path("y4m", name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn frame_lines_may_have_tags_and_headers_other_tags() {
        // As ffmpeg writes it, with made-up frame tags, and a 1x1 frame (3 bytes).
        let mut bytes = b"YUV4MPEG2 W1 H1 F25:1 Ip A0:0 C420mpeg2 XYSCSS=420MPEG2 XCOLORRANGE=LIMITED\n".to_vec();
        bytes.extend_from_slice(b"FRAME\n\x10\x80\x90FRAME Ib XA=1\n\x11\x81\x91");
        let path = file("tags.y4m", &bytes);
        let (format, mut stage) = source(&path_param(&path)).unwrap();
        assert_eq!(format, FrameFormat::new(PixelFormat::I420, 1, 1));
        assert_eq!(read(&mut stage, format, 0).unwrap(), Some(vec![0x10, 0x80, 0x90]));
        assert_eq!(read(&mut stage, format, 1).unwrap(), Some(vec![0x11, 0x81, 0x91]));
        assert_eq!(read(&mut stage, format, 2).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_truncated_frame_is_an_error_naming_it() {
        let frames = frames_5x3(3);
        let path = sink_file("cut.y4m", &frames);
        let mut bytes = std::fs::read(&path).unwrap();
        let name = path.display().to_string();
        bytes.truncate(bytes.len() - 10);
        std::fs::write(&path, &bytes).unwrap();
        let (format, mut stage) = source(&path_param(&path)).unwrap();
        for seq in 0..2 {
            assert!(read(&mut stage, format, seq).unwrap().is_some());
        }
        let e = read(&mut stage, format, 2).unwrap_err();
        assert_eq!(e.message(), format!("{name}: frame 2 is truncated: the stream ends after 17 of its 27 bytes"));

        // Cut inside a FRAME line, and a line that is not one.
        let header_len = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
        let frame_len = 6 + 27;
        bytes.truncate(header_len + frame_len + 3);
        std::fs::write(&path, &bytes).unwrap();
        let (_, mut stage) = source(&path_param(&path)).unwrap();
        assert!(read(&mut stage, format, 0).unwrap().is_some());
        let e = read(&mut stage, format, 1).unwrap_err();
        assert_eq!(e.message(), format!("{name}: frame 1 is truncated: the stream ends inside its FRAME line"));
        bytes.truncate(header_len + frame_len);
        bytes.extend_from_slice(b"GARBAGE\n");
        std::fs::write(&path, &bytes).unwrap();
        let (_, mut stage) = source(&path_param(&path)).unwrap();
        assert!(read(&mut stage, format, 0).unwrap().is_some());
        let e = read(&mut stage, format, 1).unwrap_err();
        assert_eq!(e.message(), format!("{name}: frame 1: expected a FRAME line, found \"GARBAGE\""));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_source_refuses_other_chroma_and_missing_files_naming_them() {
        let path = file("444.y4m", b"YUV4MPEG2 W4 H4 F25:1 C444\nFRAME\n");
        let e = source(&path_param(&path)).unwrap_err();
        let name = path.display();
        assert!(
            e.message().starts_with(&format!("{name}: the stream is C444; the y4m source reads 8-bit 4:2:0 only")),
            "{e}"
        );
        std::fs::remove_file(&path).unwrap();
        let e = source("path = \"/nonexistent/in.y4m\"").unwrap_err();
        assert!(e.message().starts_with("param `path`: cannot open /nonexistent/in.y4m:"), "{e}");
        // The file changed between planning and the stage's start.
        let path = sink_file("changed.y4m", &frames_5x3(1));
        let params = parse_params::<Y4m>(&path_param(&path)).unwrap();
        let planned = FrameFormat::new(PixelFormat::I420, 6, 3);
        let e = Y4m::create(params, &[], Some(planned), &cpu_context()).unwrap_err();
        let name = path.display();
        assert_eq!(e.message(), format!("{name} now holds i420 5x3 frames, but the pipeline was planned for i420 6x3"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn params_belong_to_a_role() {
        let format = FrameFormat::new(PixelFormat::I420, 2, 2);
        let params = parse_params::<Y4m>("path = \"x.y4m\"\nloop = true").unwrap();
        let e = Y4m::check(&params, &[format]).unwrap_err();
        assert!(e.message().starts_with("param `loop` is for a y4m source"), "{e}");
        let params = parse_params::<Y4m>("path = \"x.y4m\"\nfps = 25\nfps_den = 1").unwrap();
        let e = Y4m::check(&params, &[]).unwrap_err();
        assert_eq!(
            e.message(),
            "param `fps` sets the rate a y4m sink writes; this stage has no inputs, so it reads x.y4m and takes no `fps`; \
             param `fps_den` sets the rate a y4m sink writes; this stage has no inputs, so it reads x.y4m and takes no `fps_den`"
        );
        let params = parse_params::<Y4m>("path = \"-\"\nloop = true").unwrap();
        let e = Y4m::check(&params, &[]).unwrap_err();
        assert_eq!(e.message(), "param `loop` needs a file: standard input (path = \"-\") cannot be read again");
        let params = parse_params::<Y4m>("path = \"\"").unwrap();
        let e = Y4m::check(&params, &[]).unwrap_err();
        assert!(e.message().starts_with("param `path` is empty"), "{e}");
        let e = parse_params::<Y4m>("path = \"x\"\nloop = 1").unwrap_err();
        assert!(e.message().contains("loop"), "{e}");
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Y4m>(include_str!("lib.rs"), "path = \"x\"");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Y4m::INFO.name, |text| {
            let params = parse_params::<Y4m>(text).unwrap();
            // Valid as a sink or as a source (the docs' examples have both).
            let sink = params.validate(Role::Sink);
            let source = params.validate(Role::Source);
            assert!(sink.is_ok() || source.is_ok(), "{text}: {sink:?} {source:?}");
        });
    }
}
