//! The safe trait a plugin author implements, and the contexts it is given.

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::format::{FrameFormat, PixelFormat};
use crate::frame::{InputFrame, OutputFrame};

/// Where a stage's frames live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Cpu,
    Cuda,
}

impl Domain {
    pub fn bit(self) -> u32 {
        match self {
            Domain::Cpu => crate::abi::DOMAIN_CPU,
            Domain::Cuda => crate::abi::DOMAIN_CUDA,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Domain::Cpu => "cpu",
            Domain::Cuda => "cuda",
        }
    }
}

/// What a plugin tells the host before anything runs.
#[derive(Debug, Clone, Copy)]
pub struct PluginInfo {
    /// The name plans, reports and `gpuipc-host inspect` show. It does not decide lookup: the
    /// library's file name does (`plugin = "sepia-tone"` loads `libgpuipc_sepia_tone.so`,
    /// whatever name it gives here), so keep the two the same.
    pub name: &'static str,
    pub version: &'static str,
    pub description: &'static str,
    pub domains: &'static [Domain],
    /// 0 for a source.
    pub min_inputs: u32,
    pub max_inputs: u32,
    /// Pixel formats accepted on every input (empty for a source).
    pub accepts: &'static [PixelFormat],
    /// Pixel formats the output may have (empty for a sink).
    pub produces: &'static [PixelFormat],
}

impl PluginInfo {
    /// Whether `inputs` (one format per input) are what the plugin declares it takes: as many
    /// as `min_inputs..=max_inputs`, each in a pixel format of `accepts`. The host plans no
    /// stage that breaks this, and the export glue (and [`crate::testing::CpuStage`]) checks it
    /// again before [`Plugin::check`], [`Plugin::negotiate`] and [`Plugin::create`], so a
    /// plugin needs no check of its own: a filter declaring one input finds `inputs[0]` in
    /// every call, in a format it accepts.
    pub fn check_inputs(&self, inputs: &[FrameFormat]) -> Result<()> {
        let n = u32::try_from(inputs.len()).unwrap_or(u32::MAX);
        if n < self.min_inputs || n > self.max_inputs {
            let takes = match (self.min_inputs, self.max_inputs) {
                (_, 0) => "no inputs".to_owned(),
                (1, 1) => "1 input".to_owned(),
                (min, max) if min == max => format!("{min} inputs"),
                (min, max) => format!("{min} to {max} inputs"),
            };
            return Err(Error::new(format!("{} takes {takes}, got {n}", self.name)));
        }
        let refused: Vec<String> = inputs
            .iter()
            .enumerate()
            .filter(|(_, format)| !format.pixel_format().is_some_and(|p| self.accepts.contains(&p)))
            .map(
                |(i, format)| {
                    if inputs.len() == 1 { format!("input is {format}") } else { format!("input {i} is {format}") }
                },
            )
            .collect();
        if refused.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = self.accepts.iter().map(|p| p.name()).collect();
        let accepted = match names.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => "no".to_owned(),
        };
        Err(Error::new(format!("{} takes {accepted} frames; {}", self.name, refused.join(", "))))
    }
}

/// One param a plugin reads from its stage's `params` table, as `gpuipc-host inspect` shows
/// it. Every field is text for people; the `Params` type stays what decides.
///
/// ```
/// # use gpuipc_plugin_api::ParamInfo;
/// const PARAMS: &[ParamInfo] = &[
///     ParamInfo {
///         name: "level",
///         kind: "integer",
///         default: "1",
///         range: "1..=255",
///         description: "the gray level every pixel gets",
///     },
///     ParamInfo {
///         name: "mode",
///         kind: r#""fill" | "add""#,
///         default: r#""fill""#,
///         range: "",
///         description: "replace each pixel, or add to it",
///     },
/// ];
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// The key in the `params` table.
    pub name: &'static str,
    /// `integer`, `float`, `bool`, `string`, or the accepted strings as
    /// `"a" | "b" | "c"`.
    pub kind: &'static str,
    /// The default as a TOML value (`1280`, `"bars"`, `false`), `required` when the key must
    /// be given, or `none` when leaving it out means "unset" (an optional value).
    pub default: &'static str,
    /// The values accepted beyond the kind (`1..=32768`, `> 0`); empty when the kind says it.
    pub range: &'static str,
    /// What the param does, in one or a few sentences.
    pub description: &'static str,
}

impl ParamInfo {
    /// `default` of a param the stage must be given.
    pub const REQUIRED: &'static str = "required";
    /// `default` of an optional param with no value when left out.
    pub const NONE: &'static str = "none";
}

/// A stage's logic. Implement it and call [`crate::export_plugin!`]; no `unsafe` needed.
///
/// Panics are caught at the ABI boundary and reported as errors of the stage.
///
/// The host calls, through the export glue: at plan time (`validate`, and before `run` starts
/// any process) [`Plugin::check`] then [`Plugin::negotiate`]; in the stage process
/// [`Plugin::check`] again then [`Plugin::create`], then [`Plugin::process`] per frame and
/// [`Plugin::flush`] at the end.
pub trait Plugin: Sized + Send + 'static {
    /// The stage's `params` table from the pipeline file. Keys this type does not read are
    /// rejected; add `#[serde(deny_unknown_fields)]` for the best messages.
    type Params: DeserializeOwned;

    const INFO: PluginInfo;

    /// The params, for `gpuipc-host inspect`: one entry per key that `Params` reads, in the
    /// order of the plugin's docs. Empty by default (inspect then says none are declared).
    const PARAMS: &'static [ParamInfo] = &[];

    /// Whether a stage may run several instances of this plugin as replicas (`replicas = N`),
    /// each given some of the frames and none seeing all of them: true only when an instance
    /// carries no state from one frame to the next that changes its output. The host refuses
    /// `replicas > 1` for a plugin that leaves this `false` (the default). (A trait constant,
    /// not a field of [`PluginInfo`], so plugins written before it need no change.)
    const REPLICABLE: bool = false;

    /// Whether this is a live source (a camera) whose frames' relayed stamps say, on the host's
    /// wall clock, when each came into being ([`crate::abi::FLAG_LIVE`]): latency then counts
    /// from the stamp, and the numbers its frames skip are counted as dropped by it. `false` by
    /// default.
    const LIVE: bool = false;

    /// Check the params' values that their types cannot (ranges, combinations, a path that
    /// can never be written), reporting every problem at once and naming each param.
    ///
    /// Called by the export glue before [`Plugin::negotiate`] (at plan time, so `validate`
    /// reports what `run` would) and before [`Plugin::create`] (so `create` needs no check of
    /// its own). Runs where planning does, before any stage process exists: it must be cheap and
    /// have no side effects: no files created, no GPU touched. Checks that need them belong in
    /// `create`.
    fn check(params: &Self::Params, inputs: &[FrameFormat]) -> Result<()> {
        let _ = (params, inputs);
        Ok(())
    }

    /// The output format for these params and input formats, or `None` for a sink. Called by
    /// the host while planning, after [`Plugin::check`] accepted the params, before any stage
    /// process exists; must not touch a GPU.
    fn negotiate(params: &Self::Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>>;

    /// Make an instance for a stage, after [`Plugin::check`] accepted the params. `output` is
    /// what [`Plugin::negotiate`] returned.
    fn create(
        params: Self::Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Self>;

    /// Turn one set of input frames (aligned by sequence number) into the output frame.
    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()>;

    /// No more frames will come: finish files, print summaries.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Handed to [`Plugin::create`].
#[derive(Debug)]
pub struct CreateContext<'a> {
    pub stage: &'a str,
    pub domain: Domain,
    /// CUDA device ordinal in the cuda domain.
    pub device_ordinal: Option<u32>,
    /// Raw `CUcontext` current on this thread (cuda domain only).
    pub cuda_context: usize,
    /// Raw `CUstream` to launch on (cuda domain only).
    pub cuda_stream: usize,
    /// Where compiled kernels may be cached.
    pub kernel_cache_dir: Option<&'a std::path::Path>,
}

/// Handed to [`Plugin::process`].
#[derive(Debug, Clone, Copy)]
pub struct ProcessContext {
    /// Frames this instance processed before this call.
    pub frame_index: u64,
    /// Raw `CUstream` to launch on (cuda domain only), 0 otherwise.
    pub cuda_stream: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILTER: PluginInfo = PluginInfo {
        name: "tone",
        version: "1",
        description: "",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8],
        produces: &[PixelFormat::Rgb8],
    };

    #[test]
    fn inputs_are_checked_against_the_declared_count_and_formats() {
        let rgb = FrameFormat::new(PixelFormat::Rgb8, 4, 4);
        let i420 = FrameFormat::new(PixelFormat::I420, 4, 4);
        FILTER.check_inputs(&[rgb]).unwrap();
        assert_eq!(FILTER.check_inputs(&[rgb, rgb]).unwrap_err().message(), "tone takes 1 input, got 2");
        assert_eq!(
            FILTER.check_inputs(&[i420]).unwrap_err().message(),
            "tone takes rgb8, rgba8 or gray8 frames; input is i420 4x4"
        );
        let unknown = FrameFormat { pixel: 99, ..rgb };
        assert!(FILTER.check_inputs(&[unknown]).unwrap_err().message().starts_with("tone takes rgb8, rgba8 or gray8"));

        let source = PluginInfo { name: "gen", min_inputs: 0, max_inputs: 0, accepts: &[], ..FILTER };
        source.check_inputs(&[]).unwrap();
        assert_eq!(source.check_inputs(&[rgb]).unwrap_err().message(), "gen takes no inputs, got 1");
        let pair = PluginInfo { name: "diff", min_inputs: 2, max_inputs: 2, accepts: &[PixelFormat::Gray8], ..FILTER };
        assert_eq!(pair.check_inputs(&[]).unwrap_err().message(), "diff takes 2 inputs, got 0");
        let gray = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        assert_eq!(
            pair.check_inputs(&[gray, i420]).unwrap_err().message(),
            "diff takes gray8 frames; input 1 is i420 4x4"
        );
        let some = PluginInfo { name: "mix", min_inputs: 1, max_inputs: 3, ..FILTER };
        assert_eq!(some.check_inputs(&[]).unwrap_err().message(), "mix takes 1 to 3 inputs, got 0");
    }
}
