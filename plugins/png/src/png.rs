//! The png stage: its params (the file name pattern, `every`, `compression`) and the writing
//! of each chosen frame with [`crate::encode`].

use std::path::PathBuf;

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

use crate::encode::{self, ColorType, Compression};

/// The `params` table of a png stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Where each frame goes: a path with `{seq}` or `{seq:0N}` in it. Required.
    pub path: String,
    /// Write frames whose `seq` is a multiple of this, >= 1. Default 1 (every frame).
    #[serde(default = "default_every")]
    pub every: u64,
    /// `fast` (LZ77 and fixed Huffman codes, filtered rows) or `none` (stored). Default `fast`.
    #[serde(default)]
    pub compression: CompressionParam,
}

fn default_every() -> u64 {
    1
}

/// The `compression` param.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompressionParam {
    #[default]
    Fast,
    None,
}

impl CompressionParam {
    fn encoder(self) -> Compression {
        match self {
            CompressionParam::Fast => Compression::Fast,
            CompressionParam::None => Compression::None,
        }
    }
}

/// The most digits `{seq:0N}` may ask for (a u64 has 20).
pub const MAX_WIDTH: usize = 20;

/// One piece of a file name pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    /// The frame's `seq` in decimal, zero-padded to `width` digits (0: as it is).
    Seq {
        width: usize,
    },
}

/// A `path` param: text with `{seq}` (the frame's sequence number) or `{seq:0N}` (padded with
/// zeros to N digits, N in 1..=20) at least once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(Vec<Part>);

impl Pattern {
    pub fn parse(text: &str) -> Result<Pattern, String> {
        let usage = "write `{seq}` or `{seq:06}` (zero-padded to 6 digits) where the frame's number goes";
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            let next = rest.find(['{', '}']).unwrap_or(rest.len());
            if next > 0 {
                parts.push(Part::Text(rest[..next].to_owned()));
            }
            rest = &rest[next..];
            if rest.starts_with('}') {
                return Err(format!("param `path`: `}}` without `{{` in {text:?}; {usage}"));
            }
            let Some(inner) = rest.strip_prefix('{') else { break };
            let Some(end) = inner.find('}') else {
                return Err(format!("param `path`: `{{` without `}}` in {text:?}; {usage}"));
            };
            let placeholder = &inner[..end];
            let width = match placeholder.strip_prefix("seq") {
                Some("") => 0,
                Some(spec) => spec
                    .strip_prefix(":0")
                    .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| (1..=MAX_WIDTH).contains(n))
                    .ok_or_else(|| {
                        format!("param `path`: `{{{placeholder}}}` is not a placeholder; {usage}, N in 1..=20")
                    })?,
                None => return Err(format!("param `path`: `{{{placeholder}}}` is not a placeholder; {usage}")),
            };
            parts.push(Part::Seq { width });
            rest = &inner[end + 1..];
        }
        if !parts.iter().any(|p| matches!(p, Part::Seq { .. })) {
            return Err(format!("param `path` has no `{{seq}}`, so every frame would overwrite one file; {usage}"));
        }
        Ok(Pattern(parts))
    }

    /// The file of frame `seq`.
    pub fn render(&self, seq: u64) -> PathBuf {
        let mut out = String::new();
        for part in &self.0 {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Seq { width } => out.push_str(&format!("{seq:0width$}")),
            }
        }
        PathBuf::from(out)
    }
}

impl Params {
    /// Check the values serde cannot, reporting every problem at once.
    pub fn validate(&self) -> Result<Pattern> {
        let mut problems = Vec::new();
        let pattern = match Pattern::parse(&self.path) {
            Ok(p) => {
                if let Err(e) = gpuipc_plugin_api::check_output_path("path", &p.render(0)) {
                    problems.push(e.to_string());
                }
                Some(p)
            }
            Err(e) => {
                problems.push(e);
                None
            }
        };
        if self.every == 0 {
            problems.push("param `every` must be at least 1 (1 writes every frame), got 0".to_owned());
        }
        match pattern {
            Some(p) if problems.is_empty() => Ok(p),
            _ => Err(Error::new(problems.join("; "))),
        }
    }
}

fn color_type(format: FrameFormat) -> Result<ColorType> {
    match format.pixel_format() {
        Some(PixelFormat::Gray8) => Ok(ColorType::Gray),
        Some(PixelFormat::Rgb8) => Ok(ColorType::Rgb),
        Some(PixelFormat::Rgba8) => Ok(ColorType::Rgba),
        _ => bail!(
            "png writes rgb8, rgba8 or gray8 frames; input is {format} (for i420 or nv12, put a yuv-to-rgb stage in front)"
        ),
    }
}

fn check_input(inputs: &[FrameFormat]) -> Result<(FrameFormat, ColorType)> {
    let [input] = inputs else { bail!("png takes 1 input, got {}", inputs.len()) };
    Ok((*input, color_type(*input)?))
}

/// A png stage instance.
#[derive(Debug)]
pub struct Png {
    pattern: Pattern,
    /// The `path` param, as written.
    path: String,
    every: u64,
    compression: Compression,
    format: FrameFormat,
    color: ColorType,
    /// The folder last made sure of, so that a fixed folder is created once.
    made_dir: Option<PathBuf>,
    written: u64,
}

impl Png {
    /// Encode `input` and write it to its file.
    fn write(&mut self, input: &InputFrame<'_>) -> Result<()> {
        let path = self.pattern.render(input.info.seq);
        let plane = input.plane(0).ok_or_else(|| Error::new("png reads host memory only (cpu domain)"))?;
        let bytes =
            encode::encode(self.format.width, self.format.height, self.color, self.compression, |y| plane.row(y));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && self.made_dir.as_deref() != Some(dir)
        {
            std::fs::create_dir_all(dir).map_err(|e| Error::new(format!("cannot create {}: {e}", dir.display())))?;
            self.made_dir = Some(dir.to_owned());
        }
        std::fs::write(&path, bytes).map_err(|e| Error::new(format!("cannot write {}: {e}", path.display())))?;
        self.written += 1;
        Ok(())
    }
}

impl Plugin for Png {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "png",
        version: env!("CARGO_PKG_VERSION"),
        description: "writes frames (or every Nth) as PNG files",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8],
        produces: &[],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "path",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "a pattern",
            description: "the file of each frame, with {seq} or {seq:0N} (zero-padded to N digits); folders are made as needed",
        },
        ParamInfo {
            name: "every",
            kind: "integer",
            default: "1",
            range: ">= 1",
            description: "write the frames whose seq is a multiple of this (1: all of them)",
        },
        ParamInfo {
            name: "compression",
            kind: r#""fast" | "none""#,
            default: r#""fast""#,
            range: "",
            description: "fast: LZ77 with fixed Huffman codes and row filters; none: stored blocks",
        },
    ];

    /// The pattern and `every`; nothing is created.
    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate().map(drop)
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
    ) -> Result<Png> {
        let pattern = Pattern::parse(&params.path).map_err(Error::new)?;
        let (format, color) = check_input(inputs)?;
        Ok(Png {
            pattern,
            path: params.path,
            every: params.every,
            compression: params.compression.encoder(),
            format,
            color,
            made_dir: None,
            written: 0,
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let [input] = inputs else { bail!("png takes 1 input, got {}", inputs.len()) };
        if input.info.format != self.format {
            bail!("input frame is {}, expected {}", input.info.format, self.format);
        }
        if !input.info.seq.is_multiple_of(self.every) {
            return Ok(());
        }
        self.write(input)
    }

    fn flush(&mut self) -> Result<()> {
        gpuipc_plugin_api::log::info(&format!(
            "wrote {} PNG file{} ({})",
            self.written,
            if self.written == 1 { "" } else { "s" },
            self.path
        ));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{check_doc_examples, cpu_context, frame_bytes, padded, temp_path};
    use gpuipc_plugin_api::{FrameInfo, parse_params};

    use super::*;
    use crate::encode::decode;

    #[test]
    fn patterns_put_the_seq_where_asked() {
        let p = Pattern::parse("out/frame-{seq:06}.png").unwrap();
        assert_eq!(p.render(42), PathBuf::from("out/frame-000042.png"));
        assert_eq!(p.render(1_234_567), PathBuf::from("out/frame-1234567.png"));
        let p = Pattern::parse("{seq}/f{seq:03}-{seq}.png").unwrap();
        assert_eq!(p.render(7), PathBuf::from("7/f007-7.png"));
        assert_eq!(Pattern::parse("{seq}").unwrap().render(u64::MAX), PathBuf::from(u64::MAX.to_string()));
        let p = Pattern::parse("x{seq:020}").unwrap();
        assert_eq!(p.render(5), PathBuf::from(format!("x{:020}", 5)));
    }

    #[test]
    fn bad_patterns_say_what_to_write() {
        let cases = [
            ("out/frame.png", "param `path` has no `{seq}`, so every frame would overwrite one file"),
            ("out/{frame}.png", "param `path`: `{frame}` is not a placeholder"),
            ("out/{seq:6}.png", "param `path`: `{seq:6}` is not a placeholder"),
            ("out/{seq:00}.png", "param `path`: `{seq:00}` is not a placeholder"),
            ("out/{seq:021}.png", "param `path`: `{seq:021}` is not a placeholder"),
            ("out/{seq.png", "param `path`: `{` without `}`"),
            ("out/seq}.png", "param `path`: `}` without `{`"),
        ];
        for (text, want) in cases {
            let e = Pattern::parse(text).unwrap_err();
            assert!(e.starts_with(want), "{text}: {e}");
            assert!(e.contains("write `{seq}` or `{seq:06}`"), "{text}: {e}");
        }
    }

    #[test]
    fn bad_params_name_the_param() {
        let e = parse_params::<Png>("every = 2").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
        let e = parse_params::<Png>("path = \"{seq}.png\"\ncompression = \"best\"").unwrap_err();
        assert!(e.message().contains("compression"), "{e}");
        let p = parse_params::<Png>("path = \"f.png\"\nevery = 0").unwrap();
        let e = Png::check(&p, &[FrameFormat::new(PixelFormat::Rgb8, 2, 2)]).unwrap_err();
        assert!(e.message().starts_with("param `path` has no `{seq}`"), "{e}");
        assert!(e.message().contains("; param `every` must be at least 1"), "{e}");
        let p = parse_params::<Png>("path = \"{seq}.png\"").unwrap();
        assert_eq!(p, Params { path: "{seq}.png".into(), every: 1, compression: CompressionParam::Fast });
        let e = Png::negotiate(&p, &[FrameFormat::new(PixelFormat::I420, 2, 2)]).unwrap_err();
        assert_eq!(
            e.message(),
            "png writes rgb8, rgba8 or gray8 frames; input is i420 2x2 (for i420 or nv12, put a yuv-to-rgb stage in front)"
        );
    }

    #[test]
    fn every_nth_frame_is_written_and_decodes_to_its_pixels() {
        let dir = temp_path("png", "frames");
        let _ = std::fs::remove_dir_all(&dir);
        for (pixel, channels, color) in
            [(PixelFormat::Rgb8, 3, 2), (PixelFormat::Rgba8, 4, 6), (PixelFormat::Gray8, 1, 0)]
        {
            for compression in ["fast", "none"] {
                let sub = dir.join(format!("{pixel}-{compression}"));
                let text = format!(
                    "path = \"{}/f-{{seq:04}}.png\"\nevery = 3\ncompression = \"{compression}\"",
                    sub.display()
                );
                let params = parse_params::<Png>(&text).unwrap();
                let format = FrameFormat::new(pixel, 7, 5);
                assert_eq!(Png::negotiate(&params, &[format]).unwrap(), None);
                let mut stage = Png::create(params, &[format], None, &cpu_context()).unwrap();
                let mut frames = Vec::new();
                for seq in 0..8u64 {
                    let packed: Vec<u8> = (0..7 * 5 * channels).map(|i| (i as u64 * 31 + seq * 7) as u8).collect();
                    let mut info = FrameInfo::new(format, seq, 0).unwrap();
                    info.layout = padded(info.layout, 9);
                    let bytes = frame_bytes(&info, &packed, 0xee);
                    let pc = ProcessContext { frame_index: seq, cuda_stream: 0 };
                    stage.process(&[InputFrame::host(info, &bytes).unwrap()], None, &pc).unwrap();
                    frames.push(packed);
                }
                stage.flush().unwrap();
                let mut names: Vec<String> =
                    std::fs::read_dir(&sub).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
                names.sort();
                assert_eq!(names, ["f-0000.png", "f-0003.png", "f-0006.png"], "{pixel} {compression}");
                for seq in [0, 3, 6] {
                    let file = std::fs::read(sub.join(format!("f-{seq:04}.png"))).unwrap();
                    let image = decode::png(&file).unwrap();
                    let want = decode::Image { width: 7, height: 5, color, pixels: frames[seq].clone() };
                    assert_eq!(image, want, "{pixel} {compression} seq {seq}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unwritable_file_is_an_error_naming_it() {
        let params = parse_params::<Png>("path = \"/proc/nonexistent/{seq}.png\"").unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 1, 1);
        let mut stage = Png::create(params, &[format], None, &cpu_context()).unwrap();
        let info = FrameInfo::new(format, 4, 0).unwrap();
        let bytes = vec![0u8; info.layout.total_bytes as usize];
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[InputFrame::host(info, &bytes).unwrap()], None, &pc).unwrap_err();
        assert!(e.message().starts_with("cannot create /proc/nonexistent:"), "{e}");
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Png>(include_str!("lib.rs"), "path = \"{seq}.png\"");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Png::INFO.name, |text| {
            parse_params::<Png>(text).unwrap().validate().unwrap();
        });
    }
}
