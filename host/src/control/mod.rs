//! The control socket between the host and a stage: setup, start, and how the stage ended.
//! Per-frame traffic never goes through it; it goes through the links' shared memory.
//! Transport only: the messages and the socket. What the ends of a GPU link do with the
//! objects they exchange over it is the link's (`crate::link::backing::device::handshake`).

mod messages;
mod socket;

pub use messages::{
    Export, FromStage, GpuFailure, Handle64, Import, InputSetup, LinkEnd, LinkMemoryWire, OutputSetup, ReplicaSetup,
    RingWire, SlotMemory, StageSetup, ToStage,
};
pub use socket::{ControlSocket, SocketError};
