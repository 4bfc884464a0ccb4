//! Messages on the control socket, JSON-encoded, one per datagram. File descriptors travel
//! beside them (SCM_RIGHTS) in the order the message says.

use std::path::PathBuf;

use gpuipc_plugin_api::FrameFormat;
use serde::{Deserialize, Serialize};

use crate::config::{Policy, Transport};

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
    /// input in order, then the output ring if `output.link` is set.
    Setup(Box<StageSetup>),
    /// What the other ends of this stage's GPU links exported (descriptors attached: the
    /// producers' slot memory, for a consumer on a VMM link).
    Import(Box<Import>),
    /// Every stage is ready: begin the frame loop.
    Start,
}

/// Where a link's frames live, as a stage sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkMemoryWire {
    /// The ring's own shared memory (both ends cpu, or a cuda end that stages copies).
    Host,
    /// GPU memory exported by the producer, on GPU `device`, with interprocess events;
    /// `pushed`: `device` is the consumers' GPU, and the producer writes each frame on its own
    /// GPU and pushes it into the slot with its copy engines.
    Device { transport: Transport, device: u32, pushed: bool },
}

/// A 64-byte CUDA IPC handle (event or legacy memory), as hex on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handle64(pub [u8; 64]);

impl Serialize for Handle64 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.iter().map(|b| format!("{b:02x}")).collect::<String>())
    }
}

impl<'de> Deserialize<'de> for Handle64 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let bytes: Option<Vec<u8>> = (0..text.len())
            .step_by(2)
            .map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
            .collect();
        let bytes =
            bytes.filter(|b| b.len() == 64).ok_or_else(|| serde::de::Error::custom("expected 128 hex digits"))?;
        Ok(Handle64(bytes.try_into().expect("length checked")))
    }
}

/// Which end of a link an export comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LinkEnd {
    Producer,
    Consumer(usize),
}

/// The producer's slot memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum SlotMemory {
    /// One POSIX file descriptor per slot, attached in slot order.
    Vmm { slot_bytes: u64 },
    /// One legacy IPC memory handle per slot.
    Legacy { slot_bytes: u64, handles: Vec<Handle64> },
}

/// What one end of a GPU link shares with the other ends, through the host.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Export {
    pub link: usize,
    pub end: LinkEnd,
    /// Producer: its `ready` event per slot. Consumer: its `released` event per slot.
    pub events: Vec<Handle64>,
    /// Producer only.
    pub memory: Option<SlotMemory>,
    /// Producer only: which of its processes made these objects (the ring's epoch when it
    /// started); every frame it publishes carries the same number (`SlotMeta::flags`).
    #[serde(default)]
    pub generation: u32,
}

/// What a stage gets back for one of its GPU link ends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Import {
    pub link: usize,
    /// For a consumer: the producer's export; for a producer stage with replicas, one per
    /// replica in replica order, each covering its part of the ring's slots. The descriptors
    /// attached are theirs, in the same order.
    pub producers: Vec<Export>,
    /// For a producer: the export of every consumer process (a consumer stage with replicas
    /// has one per replica): the producer waits on all their `released` events.
    pub consumers: Vec<Export>,
    /// For a producer: the ring's consumer epoch these consumers' objects are current for (a
    /// consumer that dies or joins after they were sent moves it on, and the producer waits
    /// for the next update).
    #[serde(default)]
    pub epoch: Option<u32>,
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
    /// Every performance knob, as the plan decided it (`plan::tuning`).
    pub tuning: crate::plan::tuning::Tuning,
    /// Write `seq hash` of every output frame to `<dir>/<stage>.sum` (`run --checksums`).
    pub checksums: Option<PathBuf>,
    /// A stage whose output nobody reads writes, for each frame, the nanoseconds from the
    /// source's stamp to the completion of its own work on it to `<dir>/<stage>.latency`
    /// (`gpuipc-host bench`). A cuda stage waits for its GPU each frame to know.
    #[serde(default)]
    pub latency: Option<PathBuf>,
    /// A source starts frame k no sooner than k / `pace_fps` seconds after its first, and
    /// stamps it then (`gpuipc-host bench`, so latency counts no wait for a frame's turn).
    #[serde(default)]
    pub pace_fps: Option<f64>,
    /// 0 for the stage's first process, then one more for each restart.
    pub incarnation: u32,
    /// Set for one of a stage's replicas; its queue block's descriptor follows the rings'.
    #[serde(default)]
    pub replica: Option<ReplicaSetup>,
}

/// Which replica a process is, and how it shares its stage's links (docs/links.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplicaSetup {
    pub index: u32,
    pub count: u32,
    /// Slots of the output ring each replica writes; replica `index` writes its own part.
    pub slots_each: u32,
}

/// What a ring must look like, so a stage can check the header it maps against the plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingWire {
    /// `producer -> consumers`, for messages.
    pub name: String,
    pub format: WireFormat,
    pub depth: u32,
    /// One policy code per consumer.
    pub policies: Vec<u8>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InputSetup {
    pub link: usize,
    pub ring: RingWire,
    pub from: String,
    /// This stage's consumer index on the ring.
    pub consumer: usize,
    pub policy: Policy,
    pub memory: LinkMemoryWire,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutputSetup {
    pub format: WireFormat,
    /// The link index, when a ring descriptor is attached; `None`: nobody reads the output and
    /// the stage writes into private memory.
    pub link: Option<usize>,
    /// The ring, when `link` is set.
    pub ring: Option<RingWire>,
    pub memory: LinkMemoryWire,
}

/// A stage's failure that came from the CUDA driver: on which device, the driver's code, and
/// whether it is a fatal fault (the context is lost; under MPS, every client's on the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuFailure {
    pub device: Option<u32>,
    pub code: u32,
    pub fatal: bool,
}

/// Stage to host.
#[derive(Debug, Serialize, Deserialize)]
pub enum FromStage {
    /// Plugin loaded, instance created, links mapped.
    Ready,
    /// One GPU link end's shared objects, for the host to pass on (descriptors attached: one
    /// per slot for a VMM producer).
    Exported(Box<Export>),
    /// Stream ended and flushed; the stage exits 0 next.
    Finished,
    /// The stage failed; it exits non-zero next. `gpu`: the CUDA error it failed with, if
    /// it did (the host decides by it, not by the words of `error`).
    Failed {
        error: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        gpu: Option<GpuFailure>,
    },
    /// The run was aborted because of another stage; this one stopped.
    Aborted,
}
