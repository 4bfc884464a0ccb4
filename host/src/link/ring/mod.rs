//! The ring protocol over a control block in shared memory.
//!
//! Each slot has one state word (see [`SlotState`](super::header::SlotState)). The producer
//! takes a slot by compare-and-swap to WRITING, which succeeds only while no consumer holds a
//! claim on it and no `block` consumer still has it pending; it writes the frame, then stores
//! the published state (Release). A consumer claims a frame by compare-and-swap adding its
//! claim bit to the exact state it saw (Acquire), reads, then clears its claim and pending
//! bits. So a frame is never overwritten while read, and a `block` consumer never misses one;
//! `drop_oldest` and `latest` consumers never hold the producer back (they count the frames
//! they missed).
//!
//! - [`map`]: a ring as one end maps it, its control block and (in host memory) its frames;
//! - [`producer`]: the producing end, and the slot it writes ([`WriteSlot`]);
//! - [`consumer`]: a consuming end, the frame it holds ([`ReadSlot`]), and what a ring can
//!   still deliver to it ([`Offer`], for fan-in);
//! - `tests`: the protocol under stress, both ends at once.

mod consumer;
mod map;
mod producer;
#[cfg(test)]
mod tests;

pub use consumer::{Consumer, Offer, ReadSlot};
pub use map::{FrameAccess, RingFds, RingMap};
pub use producer::{Producer, WriteSlot};
