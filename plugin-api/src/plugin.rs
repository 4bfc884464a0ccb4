//! The safe trait a plugin author implements, and the contexts it is given.

use serde::de::DeserializeOwned;

use crate::error::Result;
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
