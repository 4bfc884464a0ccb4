//! Messages on the control socket, JSON-encoded, one per datagram. File descriptors travel
//! beside them (SCM_RIGHTS) in the order the message says.

use std::path::PathBuf;

use gpuipc_plugin_api::FrameFormat;
use serde::{Deserialize, Serialize};

use crate::config::Policy;

/// A frame format on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireFormat {
    pub pixel: u32,
    pub width: u32,
    pub height: u32,
}

impl From<FrameFormat> for WireFormat {
    fn from(f: FrameFormat) -> WireFormat {
        WireFormat { pixel: f.pixel, width: f.width, height: f.height }
    }
}

impl From<WireFormat> for FrameFormat {
    fn from(f: WireFormat) -> FrameFormat {
        FrameFormat { pixel: f.pixel, width: f.width, height: f.height }
    }
}

/// Host to stage.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToStage {
    /// Everything the stage needs. Descriptors attached: the stats block, then one ring per
    /// input in order, then the output ring if `output.linked`.
    Setup(Box<StageSetup>),
    /// Every stage is ready: begin the frame loop.
    Start,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageSetup {
    pub stage: String,
    pub plugin_path: PathBuf,
    pub params: String,
    /// "cpu" or "cuda".
    pub domain: String,
    pub device: Option<u32>,
    /// For a source: how many frames to emit (`None`: until told to stop).
    pub frames: Option<u64>,
    pub inputs: Vec<InputSetup>,
    pub output: Option<OutputSetup>,
    pub spin_us: u32,
    /// Write `seq hash` of every output frame to `<dir>/<stage>.sum` (`run --checksums`).
    pub checksums: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputSetup {
    pub from: String,
    /// This stage's consumer index on the ring.
    pub consumer: usize,
    pub policy: Policy,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutputSetup {
    pub format: WireFormat,
    /// Whether a ring descriptor is attached; if not, the stage writes into private memory.
    pub linked: bool,
}

/// Stage to host.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromStage {
    /// Plugin loaded, instance created, links mapped.
    Ready,
    /// Stream ended and flushed; the stage exits 0 next.
    Finished,
    /// The stage failed; it exits non-zero next.
    Failed { error: String },
    /// The run was aborted because of another stage; this one stopped.
    Aborted,
}
