//! Links: rings of frame slots shared between one producer stage and its consumers.
//!
//! The files, lowest floor first: each imports only from its own floor or below, with no
//! circle (`scripts/import-floors.py` checks it).
//!
//! - [`shm`]: memfd shared memory, mapped; read-only for whoever must not write it.
//! - [`header`]: the ring's control block layout in that memory (its slot data is a memfd of
//!   its own, which consumers get for reading only); its sizes are the plan's arithmetic.
//! - [`stats`]: per-stage counters the host reads for live statistics, and its stop flag.
//! - [`wait`]: spin-then-futex waiting on shared counters, with deadlines; it knows no ring.
//! - `error`: the link's errors.
//! - [`wakes`]: waking a ring's sleepers, one side at a time, and wake-ups held back.
//! - [`check`]: the check of a control block against the plan, kept as a private copy.
//! - [`queue`]: what the replicas of one stage share: the take lock, tickets and the turn.
//! - [`ring`]: the protocol, as a [`Producer`] and [`Consumer`] endpoint over a [`RingMap`].
//! - `reclaim`: the host taking back the slots of an end that died.
//! - [`backing`]: where frame bytes live (host memory, staged through it, GPU memory) and
//!   what each end does per frame to reach them; the GPU ends' handshake.

pub mod backing;
pub mod check;
mod error;
pub mod header;
pub mod queue;
mod reclaim;
pub mod ring;
pub mod shm;
pub mod stats;
pub mod wait;
pub mod wakes;

pub use error::{HandshakeError, LinkError};
pub use header::RingParams;
pub use ring::{Consumer, FrameAccess, Producer, ReadSlot, RingFds, RingMap, WriteSlot};
pub use stats::StatsMap;
