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
    /// The name the pipeline file uses for a built-in, and the name shown in plans.
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

/// A stage's logic. Implement it and call [`crate::export_plugin!`]; no `unsafe` needed.
///
/// Panics are caught at the ABI boundary and reported as errors of the stage.
pub trait Plugin: Sized + Send + 'static {
    /// The stage's `params` table from the pipeline file. Keys this type does not read are
    /// rejected; add `#[serde(deny_unknown_fields)]` for the best messages.
    type Params: DeserializeOwned;

    const INFO: PluginInfo;

    /// The output format for these params and input formats, or `None` for a sink. Called by
    /// the host while planning, before any stage process exists; must not touch a GPU.
    fn negotiate(params: &Self::Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>>;

    /// Make an instance for a stage. `output` is what [`Plugin::negotiate`] returned.
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
