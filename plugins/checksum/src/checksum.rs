//! The checksum stage: its params, the frame hash and the output file.

use std::fs::File;
use std::io::{LineWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use serde::Deserialize;

/// The `params` table of a checksum stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// The file to write, created or truncated at start. Required.
    pub path: PathBuf,
}

/// xxh3-64 (seed 0) of the frame's pixel bytes: every plane in order, row by row, padding
/// excluded. Equal to `xxh3_64` of the planes packed one after another.
///
/// # Panics
/// If the frame is in device memory; copy it to the host first.
pub fn frame_hash(frame: &InputFrame<'_>) -> u64 {
    frame.pixel_hash().expect("frame_hash needs a frame in host memory")
}

/// Most inputs one checksum stage hashes side by side (fan-in).
pub const MAX_INPUTS: u32 = 8;

/// A checksum stage instance. Each line goes to the file as it is made (a line writer), so a
/// stage killed at any moment loses no line of a frame it was done with.
#[derive(Debug)]
pub struct Checksum {
    out: LineWriter<File>,
    path: PathBuf,
}

/// Cut `file` after its last newline (what a killed process wrote of its last line goes) and
/// leave it positioned at its end, to write on.
pub fn keep_whole_lines(file: &mut File) -> std::io::Result<()> {
    let mut text = Vec::new();
    file.seek(SeekFrom::Start(0))?;
    file.read_to_end(&mut text)?;
    let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    file.set_len(keep as u64)?;
    file.seek(SeekFrom::Start(keep as u64))?;
    Ok(())
}

impl Checksum {
    fn write_error(&self, e: std::io::Error) -> Error {
        Error::new(format!("cannot write {}: {e}", self.path.display()))
    }
}

impl Plugin for Checksum {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "checksum",
        version: env!("CARGO_PKG_VERSION"),
        description: "writes `seq xxh3-64` of every frame's pixels to a text file",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: MAX_INPUTS,
        accepts: &PixelFormat::ALL,
        produces: &[],
    };

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[ParamInfo {
        name: "path",
        kind: "string",
        default: ParamInfo::REQUIRED,
        range: "",
        description: "the file to write, created or truncated when the stage starts (with its folder if missing); relative to the folder `gpuipc-host` runs in",
    }];

    /// Only what can be known without creating anything: the file is made in `create`.
    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        gpuipc_plugin_api::check_output_path("path", &params.path)
    }

    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if inputs.is_empty() || inputs.len() > MAX_INPUTS as usize {
            bail!("checksum takes 1 to {MAX_INPUTS} inputs, got {}", inputs.len());
        }
        Ok(None)
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        _ctx: &CreateContext<'_>,
    ) -> Result<Checksum> {
        let (mut file, kept) = gpuipc_plugin_api::open_output_file("path", &params.path)?;
        if kept {
            // A restarted stage: keep every whole line, drop what a killed process left of one.
            keep_whole_lines(&mut file)
                .map_err(|e| Error::new(format!("cannot write {}: {e}", params.path.display())))?;
        }
        Ok(Checksum { out: LineWriter::new(file), path: params.path })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let Some(first) = inputs.first() else { bail!("checksum needs at least 1 input") };
        let mut line = first.info.seq.to_string();
        for input in inputs {
            if input.info.seq != first.info.seq {
                bail!("inputs are not aligned: sequence numbers {} and {}", first.info.seq, input.info.seq);
            }
            let Some(hash) = input.pixel_hash() else {
                bail!("checksum reads host memory only (cpu domain)");
            };
            line += &format!(" {hash:016x}");
        }
        writeln!(self.out, "{line}").map_err(|e| self.write_error(e))
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|e| self.write_error(e))
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{check_doc_examples, cpu_context, frame_bytes, padded, temp_path};
    use gpuipc_plugin_api::{FrameInfo, parse_params};
    use xxhash_rust::xxh3::xxh3_64;

    use super::*;

    #[test]
    fn hash_ignores_padding_and_equals_the_packed_hash() {
        for pixel in PixelFormat::ALL {
            let format = FrameFormat::new(pixel, 5, 3);
            let tight = FrameInfo::new(format, 0, 0).unwrap();
            let packed: Vec<u8> = (0..tight.layout.pixel_bytes()).map(|i| (i * 37 % 251) as u8).collect();
            let mut wide = tight;
            wide.layout = padded(tight.layout, 29);
            let a = frame_bytes(&tight, &packed, 0);
            let b = frame_bytes(&wide, &packed, 0xff);
            let ha = frame_hash(&InputFrame::host(tight, &a).unwrap());
            let hb = frame_hash(&InputFrame::host(wide, &b).unwrap());
            assert_eq!(ha, hb, "{pixel}");
            assert_eq!(ha, xxh3_64(&packed), "{pixel}");
            // One changed pixel byte changes the hash.
            let mut changed = packed.clone();
            *changed.last_mut().unwrap() ^= 1;
            let c = frame_bytes(&tight, &changed, 0);
            assert_ne!(frame_hash(&InputFrame::host(tight, &c).unwrap()), ha, "{pixel}");
        }
        // A known value: xxh3-64 of no bytes.
        assert_eq!(xxh3_64(&[]), 0x2d06_8005_38d3_94c2);
    }

    #[test]
    fn writes_one_line_per_frame() {
        let path = temp_path("checksum", "lines");
        let text = format!("path = {:?}", path.to_str().unwrap());
        let params = parse_params::<Checksum>(&text).unwrap();
        let format = FrameFormat::new(PixelFormat::Nv12, 3, 3);
        assert_eq!(Checksum::negotiate(&params, &[format]).unwrap(), None);
        let mut stage = Checksum::create(params, &[format], None, &cpu_context()).unwrap();
        let mut expected = String::new();
        for seq in [0, 1, 7] {
            let info = FrameInfo::new(format, seq, 0).unwrap();
            let packed: Vec<u8> = (0..info.layout.pixel_bytes()).map(|i| (i + seq) as u8).collect();
            let bytes = frame_bytes(&info, &packed, 0xee);
            let pc = ProcessContext { frame_index: seq, cuda_stream: 0 };
            stage.process(&[InputFrame::host(info, &bytes).unwrap()], None, &pc).unwrap();
            expected += &format!("{seq} {:016x}\n", xxh3_64(&packed));
        }
        stage.flush().unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(written, expected);
        assert_eq!(written.lines().count(), 3);
        assert!(written.lines().all(|l| l.split_once(' ').unwrap().1.len() == 16));
    }

    #[test]
    fn the_file_is_truncated_at_create() {
        let path = temp_path("checksum", "truncate");
        std::fs::write(&path, "old contents\n").unwrap();
        let text = format!("path = {:?}", path.to_str().unwrap());
        let params = parse_params::<Checksum>(&text).unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 1, 1);
        let mut stage = Checksum::create(params, &[format], None, &cpu_context()).unwrap();
        stage.flush().unwrap();
        let written = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(written.is_empty());
    }

    #[test]
    fn bad_params_name_the_param() {
        let e = parse_params::<Checksum>("").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
        let e = parse_params::<Checksum>("path = 3").unwrap_err();
        assert!(e.message().contains("path"), "{e}");
        let e = parse_params::<Checksum>("path = \"a\"\nseed = 1").unwrap_err();
        assert!(e.message().contains("seed"), "{e}");
        let params = parse_params::<Checksum>("path = \"/proc/nonexistent/y.txt\"").unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 1, 1);
        let e = Checksum::create(params, &[format], None, &cpu_context()).unwrap_err();
        assert!(
            e.message().starts_with(
                "param `path`: /proc/nonexistent/y.txt cannot be created: /proc is on the kernel's proc file system"
            ),
            "{e}"
        );
    }

    #[test]
    fn check_refuses_paths_that_can_never_be_written_and_creates_nothing() {
        let dir = temp_path("checksum", "check");
        let cases = [
            ("", "param `path` is empty; give the file to write".to_owned()),
            ("/", "param `path`: / is a folder; give a file in it".to_owned()),
            ("out/", "param `path`: out/ ends in `/`, so it names a folder; give a file in it".to_owned()),
            (
                "/dev/null/x/y.xxh3",
                "param `path`: /dev/null is not a folder, so /dev/null/x/y.xxh3 cannot be created".to_owned(),
            ),
        ];
        for (path, want) in cases {
            let params = parse_params::<Checksum>(&format!("path = {path:?}")).unwrap();
            let e = Checksum::check(&params, &[]).unwrap_err();
            assert_eq!(e.message(), want, "{path}");
        }
        // A folder that does not exist yet is made at create; check makes nothing.
        let missing = dir.join("new/hashes.xxh3");
        let params = parse_params::<Checksum>(&format!("path = {:?}", missing.to_str().unwrap())).unwrap();
        Checksum::check(&params, &[]).unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Checksum>(include_str!("lib.rs"), "path = \"x\"");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Checksum::INFO.name, |text| {
            parse_params::<Checksum>(text).unwrap();
        });
    }
}
