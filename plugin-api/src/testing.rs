//! Helpers for a plugin's unit tests, with no host and no process: the built-in plugins' tests
//! use them, and so can yours (`cargo test` in the plugin's crate, which builds as an `rlib`
//! too for this).
//!
//! - [`CpuStage`] drives a plugin as a cpu stage would, in the test's thread: params from
//!   TOML text, `negotiate`, `create`, then `process` on frames given and returned as packed
//!   pixels (each plane's rows one after another, no padding), handed to the plugin in padded
//!   layouts with garbage in the input padding, so that a stage reading or writing by
//!   `width * bytes_per_pixel` instead of the pitch fails;
//! - the pieces it is made of, for tests that need more control: [`cpu_context`] (what
//!   `create` gets in the cpu domain), [`padded`] layouts, [`frame_bytes`] (packed pixels
//!   into a padded frame) and [`packed_planes`] (back, checking the padding was not written);
//! - [`check_doc_examples`]: the ```toml examples in a plugin's `lib.rs` docs parse as its
//!   params; [`temp_path`] for sinks that write files.
//!
//! ```ignore
//! use gpuipc_plugin_api::testing::CpuStage;
//! use gpuipc_plugin_api::{FrameFormat, PixelFormat};
//!
//! #[test]
//! fn inverts_every_byte() {
//!     let format = FrameFormat::new(PixelFormat::Gray8, 3, 2);
//!     let mut stage = CpuStage::<Invert>::new("amount = 1.0", &[format]).unwrap();
//!     assert_eq!(stage.output_format(), Some(format));
//!     let out = stage.process(0, &[&[0, 1, 2, 253, 254, 255]]).unwrap().unwrap();
//!     assert_eq!(out, [255, 254, 253, 2, 1, 0]);
//! }
//! ```
//!
//! For a plugin's cuda path on a real GPU (skipped where there is none), see
//! [`crate::cuda::testing`].

use std::path::PathBuf;

use crate::error::{Error, Result};
use crate::export::parse_params;
use crate::format::{FrameFormat, FrameLayout};
use crate::frame::{FrameInfo, InputFrame, OutputFrame};
use crate::plugin::{CreateContext, Domain, Plugin, ProcessContext};

/// The Rust examples of docs/writing-plugins.md, compiled (and run) by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../docs/writing-plugins.md")]
pub struct WritingPluginsGuide;

/// Extra bytes of padding after every row of the input frames [`CpuStage`] hands a plugin
/// (odd, so that no row starts aligned by chance).
pub const INPUT_PADDING: u64 = 5;
/// Extra bytes of padding after every row of the output frames [`CpuStage`] hands a plugin.
pub const OUTPUT_PADDING: u64 = 3;
/// What the padding of the input frames [`CpuStage`] hands a plugin holds; a stage whose
/// output shows it read padding.
pub const INPUT_FILL: u8 = 0x5a;
/// What the padding of the output frames [`CpuStage`] hands a plugin holds before `process`;
/// [`CpuStage::process`] fails if it changed.
pub const OUTPUT_FILL: u8 = 0xa5;

/// A plugin driven as a cpu stage is, in this thread: made by [`CpuStage::new`] from params as
/// TOML text (what a stage's `params` table holds), then fed one set of frames per
/// [`CpuStage::process`] call as packed pixels.
pub struct CpuStage<P: Plugin> {
    plugin: P,
    inputs: Vec<FrameFormat>,
    output: Option<FrameFormat>,
    frame_index: u64,
    check_padding: bool,
    ended: bool,
}

impl<P: Plugin> CpuStage<P> {
    /// Parse `params` (`key = value` lines, or empty), then what the host does at plan time
    /// and when the stage starts: [`PluginInfo::check_inputs`](crate::PluginInfo::check_inputs),
    /// `check` and `negotiate` with `inputs` (one format per input, in the order of the
    /// stage's `inputs`), then `check` again and `create` with [`cpu_context`]. An error is any
    /// of theirs, as the host would report it.
    pub fn new(params: &str, inputs: &[FrameFormat]) -> Result<CpuStage<P>> {
        P::INFO.check_inputs(inputs)?;
        let planned = parse_params::<P>(params)?;
        P::check(&planned, inputs)?;
        let output = P::negotiate(&planned, inputs)?;
        let started = parse_params::<P>(params)?;
        P::check(&started, inputs)?;
        let plugin = P::create(started, inputs, output, &cpu_context())?;
        Ok(CpuStage { plugin, inputs: inputs.to_vec(), output, frame_index: 0, check_padding: true, ended: false })
    }

    /// What `negotiate` said the stage outputs (`None` for a sink).
    pub fn output_format(&self) -> Option<FrameFormat> {
        self.output
    }

    pub fn plugin(&self) -> &P {
        &self.plugin
    }

    pub fn plugin_mut(&mut self) -> &mut P {
        &mut self.plugin
    }

    /// Let `process` write the padding of output rows ([`CpuStage::process`] fails on it by
    /// default, since a stage that does so usually got its pitch wrong).
    pub fn allow_padding_writes(mut self) -> CpuStage<P> {
        self.check_padding = false;
        self
    }

    /// Call `process` with frames of sequence number `seq` (and timestamp 0) whose packed
    /// pixels are `inputs`, one per input in order, each as long as
    /// [`FrameLayout::pixel_bytes`] says. Returns the output frame's packed pixels, or `None`
    /// for a sink, or for a source that ended its stream ([`OutputFrame::end_stream`]; then
    /// [`CpuStage::ended`] is true).
    ///
    /// Panics if `inputs` does not match the formats given to [`CpuStage::new`]: that is the
    /// test's mistake, not the plugin's.
    pub fn process(&mut self, seq: u64, inputs: &[&[u8]]) -> Result<Option<Vec<u8>>> {
        assert_eq!(inputs.len(), self.inputs.len(), "one packed frame per input");
        let mut infos = Vec::with_capacity(inputs.len());
        let mut buffers = Vec::with_capacity(inputs.len());
        for (i, (format, packed)) in self.inputs.iter().zip(inputs).enumerate() {
            let mut info = FrameInfo::new(*format, seq, 0).expect("the input format has a layout");
            let want = info.layout.pixel_bytes() as usize;
            assert_eq!(packed.len(), want, "input {i} is {format}: {want} packed bytes");
            info.layout = padded(info.layout, INPUT_PADDING);
            buffers.push(frame_bytes(&info, packed, INPUT_FILL));
            infos.push(info);
        }
        let frames: Vec<InputFrame<'_>> = infos
            .iter()
            .zip(&buffers)
            .map(|(info, bytes)| InputFrame::host(*info, bytes).expect("the buffer fits its layout"))
            .collect();
        let ctx = ProcessContext { frame_index: self.frame_index, cuda_stream: 0 };
        self.frame_index += 1;
        let Some(format) = self.output else {
            self.plugin.process(&frames, None, &ctx)?;
            return Ok(None);
        };
        let mut info = FrameInfo::new(format, seq, 0).expect("the output format has a layout");
        info.layout = padded(info.layout, OUTPUT_PADDING);
        let mut bytes = vec![OUTPUT_FILL; info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(info, &mut bytes).expect("the buffer fits its layout");
        self.plugin.process(&frames, Some(&mut output), &ctx)?;
        if output.ends_stream() {
            self.ended = true;
            return Ok(None);
        }
        unpack(&info.layout, &bytes, self.check_padding).map(Some)
    }

    /// Whether the plugin ended its stream (a source with nothing more to give): the host
    /// would call `process` no more.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Call `flush`, as at the end of the stream.
    pub fn flush(&mut self) -> Result<()> {
        self.plugin.flush()
    }
}

/// The packed pixels of a frame, every plane in order; an error naming the first row whose
/// padding no longer holds [`OUTPUT_FILL`] when `check_padding`.
fn unpack(layout: &FrameLayout, bytes: &[u8], check_padding: bool) -> Result<Vec<u8>> {
    let mut packed = Vec::with_capacity(layout.pixel_bytes() as usize);
    for (i, plane) in layout.planes().iter().enumerate() {
        for y in 0..plane.rows {
            let start = (plane.offset + y * plane.pitch) as usize;
            let (pixels, padding) = bytes[start..start + plane.pitch as usize].split_at(plane.row_bytes as usize);
            if check_padding && padding.iter().any(|&b| b != OUTPUT_FILL) {
                return Err(Error::new(format!(
                    "process wrote the padding of output plane {i} row {y} (write rows through \
                     PlaneMut::row_mut, or by the plane's pitch)"
                )));
            }
            packed.extend_from_slice(pixels);
        }
    }
    Ok(packed)
}

/// What the runner hands `Plugin::create` for a cpu stage named "test".
pub fn cpu_context() -> CreateContext<'static> {
    CreateContext {
        stage: "test",
        domain: Domain::Cpu,
        device_ordinal: None,
        cuda_context: 0,
        cuda_stream: 0,
        kernel_cache_dir: None,
    }
}

/// `layout` with `extra` more bytes of padding after every row, planes still starting on
/// 256-byte boundaries.
pub fn padded(layout: FrameLayout, extra: u64) -> FrameLayout {
    let mut padded = layout;
    let mut offset = 0;
    for plane in &mut padded.planes[..layout.n_planes as usize] {
        plane.pitch += extra;
        plane.offset = offset;
        offset = (offset + plane.pitch * plane.rows).next_multiple_of(256);
    }
    padded.total_bytes = offset;
    padded
}

/// A frame of `info`'s layout whose packed pixels are `packed`, padding filled with `fill`.
pub fn frame_bytes(info: &FrameInfo, packed: &[u8], fill: u8) -> Vec<u8> {
    let mut bytes = vec![fill; info.layout.total_bytes as usize];
    let mut rest = packed;
    for plane in info.layout.planes() {
        for y in 0..plane.rows {
            let start = (plane.offset + y * plane.pitch) as usize;
            let (row, tail) = rest.split_at(plane.row_bytes as usize);
            bytes[start..start + row.len()].copy_from_slice(row);
            rest = tail;
        }
    }
    assert!(rest.is_empty());
    bytes
}

/// The packed pixels of each plane of a frame of `layout`, after checking that every row's
/// padding still holds `fill` (that the stage did not write it).
pub fn packed_planes(layout: &FrameLayout, bytes: &[u8], fill: u8) -> Vec<Vec<u8>> {
    let mut planes = Vec::new();
    for (i, plane) in layout.planes().iter().enumerate() {
        let mut packed = Vec::new();
        for y in 0..plane.rows {
            let start = (plane.offset + y * plane.pitch) as usize;
            let row = &bytes[start..start + plane.pitch as usize];
            let (pixels, padding) = row.split_at(plane.row_bytes as usize);
            assert!(padding.iter().all(|&b| b == fill), "plane {i} row {y} padding written");
            packed.extend_from_slice(pixels);
        }
        planes.push(packed);
    }
    planes
}

/// A path in the temporary folder, distinct per plugin, process and `name` (for a sink's
/// output file; the test removes it).
pub fn temp_path(plugin: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpuipc-{plugin}-{}-{name}", std::process::id()))
}

/// Calls `check` with the params (as TOML text) of every stage in the ```toml examples of
/// `lib_rs` (a crate's `lib.rs`, whose `//!` docs hold them), after checking that the stage's
/// plugin is `plugin`. Panics if there is no example.
pub fn check_doc_examples(lib_rs: &str, plugin: &str, mut check: impl FnMut(&str)) {
    let docs: Vec<&str> =
        lib_rs.lines().filter_map(|l| l.strip_prefix("//!")).map(|l| l.strip_prefix(' ').unwrap_or(l)).collect();
    let docs = docs.join("\n");
    let mut checked = 0;
    for block in docs.split("```toml").skip(1) {
        let doc: toml::Table = block.split("```").next().unwrap().parse().unwrap();
        for stage in doc["stage"].as_array().unwrap() {
            assert_eq!(stage["plugin"].as_str(), Some(plugin));
            let table = stage.get("params").and_then(|p| p.as_table()).cloned();
            let text = toml::to_string(&table.unwrap_or_default()).unwrap();
            check(&text);
            checked += 1;
        }
    }
    assert!(checked > 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::PixelFormat;
    use crate::plugin::PluginInfo;

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Params {
        /// Clear the whole frame, padding included, first (a bug the harness must catch).
        #[serde(default)]
        sloppy: bool,
    }

    /// Inverts gray frames; with two inputs, the second is subtracted first. A sink for
    /// anything else.
    struct Invert {
        sloppy: bool,
        sink: bool,
    }

    impl Plugin for Invert {
        type Params = Params;
        const INFO: PluginInfo = PluginInfo {
            name: "invert",
            version: "0",
            description: "",
            domains: &[Domain::Cpu],
            min_inputs: 1,
            max_inputs: 2,
            accepts: &[PixelFormat::Gray8, PixelFormat::Rgb8],
            produces: &[PixelFormat::Gray8],
        };
        fn negotiate(_: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok((inputs[0].pixel_format() == Some(PixelFormat::Gray8)).then_some(inputs[0]))
        }
        fn create(p: Params, _: &[FrameFormat], out: Option<FrameFormat>, _: &CreateContext) -> Result<Invert> {
            Ok(Invert { sloppy: p.sloppy, sink: out.is_none() })
        }
        fn process(&mut self, inputs: &[InputFrame], out: Option<&mut OutputFrame>, _: &ProcessContext) -> Result<()> {
            if self.sink {
                return Ok(());
            }
            let out = out.ok_or("no output")?;
            if let (true, crate::frame::FrameDataMut::Host(bytes)) = (self.sloppy, out.data()) {
                bytes.fill(0);
            }
            let mut plane = out.plane_mut(0).ok_or("no output plane")?;
            let a = inputs[0].plane(0).ok_or("no input")?;
            let b = inputs.get(1).and_then(|f| f.plane(0));
            for y in 0..plane.rows() {
                let row = plane.row_mut(y);
                for (x, o) in row.iter_mut().enumerate() {
                    *o = 255 - a.row(y)[x] - b.map_or(0, |b| b.row(y)[x]);
                }
            }
            Ok(())
        }
    }

    /// Counts frames; takes no params.
    struct Count(u64);

    impl Plugin for Count {
        type Params = crate::NoParams;
        const INFO: PluginInfo = PluginInfo { min_inputs: 1, max_inputs: 1, produces: &[], ..Invert::INFO };
        fn negotiate(_: &crate::NoParams, _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok(None)
        }
        fn create(_: crate::NoParams, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext) -> Result<Count> {
            Ok(Count(0))
        }
        fn process(&mut self, _: &[InputFrame], _: Option<&mut OutputFrame>, _: &ProcessContext) -> Result<()> {
            self.0 += 1;
            Ok(())
        }
    }

    /// A source of 1x1 gray frames holding their `seq`, ending its stream at seq 2.
    struct Two;

    impl Plugin for Two {
        type Params = crate::NoParams;
        const INFO: PluginInfo = PluginInfo { min_inputs: 0, max_inputs: 0, accepts: &[], ..Invert::INFO };
        fn negotiate(_: &crate::NoParams, _: &[FrameFormat]) -> Result<Option<FrameFormat>> {
            Ok(Some(FrameFormat::new(PixelFormat::Gray8, 1, 1)))
        }
        fn create(_: crate::NoParams, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext) -> Result<Two> {
            Ok(Two)
        }
        fn process(&mut self, _: &[InputFrame], out: Option<&mut OutputFrame>, _: &ProcessContext) -> Result<()> {
            let out = out.ok_or("no output")?;
            let seq = out.info().seq;
            if seq == 2 {
                out.end_stream();
                return Ok(());
            }
            out.plane_mut(0).ok_or("no plane")?.row_mut(0)[0] = seq as u8;
            Ok(())
        }
    }

    #[test]
    fn a_source_makes_frames_until_it_ends_its_stream() {
        let mut source = CpuStage::<Two>::new("", &[]).unwrap();
        assert_eq!(source.process(0, &[]).unwrap(), Some(vec![0]));
        assert_eq!(source.process(1, &[]).unwrap(), Some(vec![1]));
        assert!(!source.ended());
        assert_eq!(source.process(2, &[]).unwrap(), None);
        assert!(source.ended());
    }

    #[test]
    fn no_params_takes_an_empty_table_and_refuses_keys() {
        let gray = FrameFormat::new(PixelFormat::Gray8, 1, 1);
        let mut count = CpuStage::<Count>::new("", &[gray]).unwrap();
        assert_eq!(count.process(0, &[&[1]]).unwrap(), None);
        assert_eq!(count.process(1, &[&[1]]).unwrap(), None);
        assert_eq!(count.plugin().0, 2);
        let e = CpuStage::<Count>::new("x = 1", &[gray]).err().unwrap();
        assert_eq!(e.message(), "param `x`: unknown field `x`, there are no fields");
    }

    #[test]
    fn a_stage_runs_on_packed_frames_in_padded_layouts() {
        let gray = FrameFormat::new(PixelFormat::Gray8, 3, 2);
        let mut stage = CpuStage::<Invert>::new("", &[gray]).unwrap();
        assert_eq!(stage.output_format(), Some(gray));
        let out = stage.process(0, &[&[0, 1, 2, 253, 254, 255]]).unwrap();
        assert_eq!(out.unwrap(), [255, 254, 253, 2, 1, 0]);
        let mut two = CpuStage::<Invert>::new("", &[gray, gray]).unwrap();
        let out = two.process(7, &[&[0, 1, 2, 3, 4, 5], &[1, 1, 1, 1, 1, 1]]).unwrap();
        assert_eq!(out.unwrap(), [254, 253, 252, 251, 250, 249]);
        two.flush().unwrap();
    }

    #[test]
    fn sinks_wrong_params_and_padding_writes_are_reported() {
        let rgb = FrameFormat::new(PixelFormat::Rgb8, 2, 2);
        let mut sink = CpuStage::<Invert>::new("", &[rgb]).unwrap();
        assert_eq!(sink.process(0, &[&[0; 12]]).unwrap(), None);
        let e = CpuStage::<Invert>::new("level = 1", &[rgb]).err().unwrap();
        assert_eq!(e.message(), "param `level`: unknown field `level`, expected `sloppy`");
        let e = CpuStage::<Invert>::new("", &[rgb, rgb, rgb]).err().unwrap();
        assert_eq!(e.message(), "invert takes 1 to 2 inputs, got 3");
        let gray = FrameFormat::new(PixelFormat::Gray8, 3, 2);
        let mut sloppy = CpuStage::<Invert>::new("sloppy = true", &[gray]).unwrap();
        let e = sloppy.process(0, &[&[0; 6]]).unwrap_err();
        assert!(e.message().starts_with("process wrote the padding of output plane 0 row 0"), "{e}");
        let mut allowed = CpuStage::<Invert>::new("sloppy = true", &[gray]).unwrap().allow_padding_writes();
        assert_eq!(allowed.process(0, &[&[0; 6]]).unwrap().unwrap(), [255; 6]);
    }
}
