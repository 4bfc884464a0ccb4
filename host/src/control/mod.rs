//! The control socket between the host and a stage: setup, start, and how the stage ended.
//! Per-frame traffic never goes through it; it goes through the links' shared memory.

mod messages;
mod socket;

pub use messages::{
    Export, FromStage, RingWire, Handle64, Import, InputSetup, LinkEnd, LinkMemoryWire, OutputSetup, SlotMemory, StageSetup, ToStage,
};
pub use socket::ControlSocket;
