//! The y4m stage: its params, the header and the packed frame writer.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, PixelFormat, Plugin,
    PluginInfo, ProcessContext, Result, bail,
};
use serde::Deserialize;

/// The `params` table of a y4m stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The file to write, created or truncated at start. Required.
    pub path: PathBuf,
    /// Frame rate numerator for the header, >= 1. Default 30.
    #[serde(default = "default_fps")]
    pub fps: u32,
    /// Frame rate denominator for the header, >= 1. Default 1.
    #[serde(default = "default_fps_den")]
    pub fps_den: u32,
}

fn default_fps() -> u32 {
    30
}

fn default_fps_den() -> u32 {
    1
}

impl Params {
    /// Check the values serde cannot, reporting every problem at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if let Err(e) = gpuipc_plugin_api::check_output_path("path", &self.path) {
            problems.push(e.to_string());
        }
        for (key, value) in [("fps", self.fps), ("fps_den", self.fps_den)] {
            if value == 0 {
                problems.push(format!("param `{key}` must be at least 1, got 0"));
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
        let plane = frame
            .plane(index)
            .ok_or_else(|| Error::new("y4m reads host memory only (cpu domain)"))?;
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
        Some(other) => bail!(
            "y4m writes i420 frames; input is {other}, add a yuv420 stage with layout = \"i420\""
        ),
        None => bail!(
            "y4m writes i420 frames; input is {input}, add a yuv420 stage with layout = \"i420\""
        ),
    }
}

/// A y4m stage instance.
#[derive(Debug)]
pub struct Y4m {
    out: BufWriter<File>,
    path: PathBuf,
    format: FrameFormat,
}

impl Y4m {
    fn write_error(&self, e: impl std::fmt::Display) -> Error {
        Error::new(format!("cannot write {}: {e}", self.path.display()))
    }
}

impl Plugin for Y4m {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "y4m",
        version: env!("CARGO_PKG_VERSION"),
        description: "writes i420 frames to a YUV4MPEG2 file",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::I420],
        produces: &[],
    };

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        params.validate()?;
        check_input(inputs)?;
        Ok(None)
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        _ctx: &CreateContext<'_>,
    ) -> Result<Y4m> {
        params.validate()?;
        let format = check_input(inputs)?;
        let file = gpuipc_plugin_api::create_output_file("path", &params.path)?;
        let mut stage = Y4m { out: BufWriter::new(file), path: params.path, format };
        let header = header(format, params.fps, params.fps_den);
        stage.out.write_all(header.as_bytes()).map_err(|e| stage.write_error(e))?;
        Ok(stage)
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let [input] = inputs else { bail!("y4m takes 1 input, got {}", inputs.len()) };
        if input.info.format != self.format {
            bail!(
                "input frame is {}, but the file's header says {}",
                input.info.format,
                self.format
            );
        }
        write_frame(&mut self.out, input).map_err(|e| self.write_error(e))
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.write_error(e))
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{
        check_doc_examples, cpu_context, frame_bytes, padded, temp_path,
    };
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
        let frames: Vec<Vec<u8>> =
            (0..2u8).map(|f| (0..27).map(|i| f * 100 + i).collect()).collect();
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
        assert_eq!((params.fps, params.fps_den), (30, 1));
        let h = header(FrameFormat::new(PixelFormat::I420, 1920, 1080), params.fps, params.fps_den);
        assert_eq!(h, "YUV4MPEG2 W1920 H1080 F30:1 Ip A1:1 C420jpeg\n");
    }

    #[test]
    fn other_formats_are_refused_with_a_hint() {
        let params = parse_params::<Y4m>("path = \"x.y4m\"").unwrap();
        let e = Y4m::negotiate(&params, &[FrameFormat::new(PixelFormat::Nv12, 4, 4)]).unwrap_err();
        assert_eq!(
            e.message(),
            "y4m writes i420 frames; input is nv12, add a yuv420 stage with layout = \"i420\""
        );
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
            let e = Y4m::negotiate(&params, &[format]).unwrap_err();
            assert!(e.message().contains(key), "{e}");
        }
        let params = parse_params::<Y4m>("path = \"/proc/nonexistent/x.y4m\"").unwrap();
        let e = Y4m::create(params, &[format], None, &cpu_context()).unwrap_err();
        assert!(e.message().starts_with("param `path`: cannot create"), "{e}");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Y4m::INFO.name, |text| {
            parse_params::<Y4m>(text).unwrap().validate().unwrap();
        });
    }
}
