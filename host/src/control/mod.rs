//! The control socket between the host and a stage: setup, start, and how the stage ended.
//! Per-frame traffic never goes through it; it goes through the links' shared memory.
//! [`handshake`] is the stage's side of exchanging GPU link objects over it.

pub mod handshake;
mod messages;
mod socket;

pub use messages::{
    Export, FromStage, GpuFailure, Handle64, Import, InputSetup, LinkEnd, LinkMemoryWire, OutputSetup, ReplicaSetup,
    RingWire, SlotMemory, StageSetup, ToStage,
};
pub use socket::{ControlSocket, SocketError};
