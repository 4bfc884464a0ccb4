//! Where a link's frame bytes live, and what each end does per frame to reach them: one
//! implementation per file, behind two traits. The ring (`super::ring`) says which slot holds
//! which frame and when; a backing says where that slot's bytes are and keeps them consistent:
//!
//! - [`host`]: in the ring's own shared memory, both ends in the cpu domain: nothing to do;
//! - [`staged`]: in the ring's shared memory with a cuda end, which copies through a device
//!   buffer and waits for the copy before it publishes or releases (a cpu end cannot wait on
//!   the GPU);
//! - [`device`]: in GPU memory the producer exports, synchronised per slot by interprocess
//!   events: the producer's stream waits on every consumer's `released` event of the slot
//!   before the plugin writes it and records `ready` after; a consumer's stream waits on
//!   `ready` before the plugin reads and records its `released` after. No host thread waits
//!   for the GPU. How the ends exchange these objects is [`device::handshake`].
//!
//! One conformance suite (`conformance`) runs every backing pair through the same frames.

#[cfg(test)]
mod conformance;
pub mod device;
pub mod host;
pub mod staged;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::wakes::HeldWakes;
use super::{HandshakeError, ReadSlot, RingMap};
use crate::control::Import;
use crate::gpu::GpuError;

fn not_a_gpu_link() -> HandshakeError {
    HandshakeError::Protocol("new objects for a link that is not on a GPU".into())
}

/// A consumer's way to its frames.
pub trait ReadEnd {
    /// The frame in `slot`, ready for the plugin: its bytes are there, or (on a GPU) the
    /// stage's stream waits until they are. An end that waits on its host first sends the
    /// stage's `held` wake-ups before it does.
    fn frame(&self, ring: &RingMap, slot: &ReadSlot, held: Option<&Arc<HeldWakes>>) -> Result<RawFrame, GpuError>;
    /// The plugin's work on frame `slot` is enqueued: after this the slot may be released.
    fn done(&self, slot: usize) -> Result<(), GpuError>;
    /// Whether this end holds objects of the other end's process, which a restart of that
    /// end replaces (GPU memory, events): it must take the new ones before it goes on.
    fn follows_the_other_end(&self) -> bool {
        false
    }
    /// The link's objects, sent again after an end was restarted.
    fn update(&mut self, _import: Import, _fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        Err(not_a_gpu_link())
    }
    /// The generation of the producer process whose objects this end holds for `slot`, where
    /// frames of another producer process cannot be read through them (a GPU ring).
    fn producer_generation(&self, _slot: usize) -> Option<u32> {
        None
    }
}

/// A producer's way to its slots.
pub trait WriteEnd {
    /// Before the plugin writes `slot`: no consumer still reads it, on the GPU either.
    fn prepare(&self, slot: usize) -> Result<(), GpuError>;
    /// Where the plugin writes the frame for `slot`.
    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame;
    /// After the plugin's work on `slot` is enqueued, before the frame is published.
    fn finish(&self, ring: &RingMap, slot: usize) -> Result<(), GpuError>;
    /// At the end of the stream, before this end's objects go: whether the producer must
    /// first wait until its consumers are done with every frame. Memory in the ring's own
    /// shared memory outlives the producer (the host holds it); GPU memory and events the
    /// producer exported do not.
    fn outlived_by_consumers(&self) -> bool {
        false
    }
    /// After every consumer released every slot on the host: make the stage's stream wait
    /// until their GPU work on the frames is done too (the caller then synchronises).
    fn drain(&self, _depth: usize) -> Result<(), GpuError> {
        Ok(())
    }
    /// As [`ReadEnd::follows_the_other_end`].
    fn follows_the_other_end(&self) -> bool {
        false
    }
    /// As [`ReadEnd::update`].
    fn update(&mut self, _import: Import, _fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        Err(not_a_gpu_link())
    }
    /// The ring's consumer epoch ([`RingMap::consumer_epoch`]) the consumers' objects this
    /// end holds are current for, where it holds any.
    fn consumers_current_for(&self) -> Option<u32> {
        None
    }
}

/// A frame in the ring's own memory, slot `slot`.
fn host_frame(ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
    let (ptr, len) = ring.slot_data(slot).expect("host rings carry frame data");
    RawFrame {
        format: ring.format(),
        layout: ring.layout(),
        domain: gpuipc_plugin_api::abi::DOMAIN_CPU,
        addr: ptr as u64,
        len,
        seq,
        timestamp_ns,
    }
}

/// A frame in device memory.
fn device_frame(ring: &RingMap, memory: &crate::gpu::DeviceMemory, seq: u64, timestamp_ns: u64) -> RawFrame {
    RawFrame {
        format: ring.format(),
        layout: ring.layout(),
        domain: gpuipc_plugin_api::abi::DOMAIN_CUDA,
        addr: memory.addr(),
        len: memory.len() as u64,
        seq,
        timestamp_ns,
    }
}
