//! Frames in GPU memory the producer exports (VMM file descriptors or legacy IPC handles),
//! one interprocess `ready` event per slot recorded by the producer and one `released` event
//! per slot and consumer recorded by that consumer. The ring in host memory still carries the
//! counters. An event only means its latest record; the ring's counters make sure a record is
//! never replaced before the other side has enqueued its wait on it.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, device_frame};
use crate::control::handshake::{self, HandshakeError};
use crate::control::Import;
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent};
use crate::link::{ReadSlot, RingMap};

/// A consumer of a GPU ring: the producer's memory and `ready` events, imported, and its own
/// `released` events.
pub struct DeviceRead {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<IpcEvent>,
    /// The generation of the producer process whose objects these are.
    pub(crate) generation: u32,
}

impl ReadEnd for DeviceRead {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot) -> Result<RawFrame, GpuError> {
        self.ready[slot.index()].wait_on(self.gpu.stream())?;
        Ok(device_frame(ring, &self.memory[slot.index()], slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, slot: usize) -> Result<(), GpuError> {
        self.released[slot].record(self.gpu.stream())
    }

    fn follows_the_other_end(&self) -> bool {
        true
    }

    fn producer_generation(&self) -> Option<u32> {
        Some(self.generation)
    }

    /// A restarted producer: import its new memory and `ready` events. The stream first
    /// finishes what it has enqueued on the old memory, which goes then.
    fn update(&mut self, import: Import, fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        let producer = import.producer.as_ref().ok_or_else(|| HandshakeError::Protocol("no producer objects".into()))?;
        if producer.generation == self.generation {
            return Ok(());
        }
        self.gpu.synchronize()?;
        let released = std::mem::take(&mut self.released);
        *self = handshake::import_input(&self.gpu.clone(), import, fds, released)?;
        tracing::info!("took the restarted producer's GPU memory and events");
        Ok(())
    }
}

/// The producer of a GPU ring: its slot memory and `ready` events, and every consumer's
/// `released` events, imported (`released[consumer][slot]`).
pub struct DeviceWrite {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<Vec<IpcEvent>>,
}

impl WriteEnd for DeviceWrite {
    fn prepare(&self, slot: usize) -> Result<(), GpuError> {
        for consumer in &self.released {
            consumer[slot].wait_on(self.gpu.stream())?;
        }
        Ok(())
    }

    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        device_frame(ring, &self.memory[slot], seq, timestamp_ns)
    }

    fn finish(&self, _ring: &RingMap, slot: usize) -> Result<(), GpuError> {
        self.ready[slot].record(self.gpu.stream())
    }

    fn outlived_by_consumers(&self) -> bool {
        true
    }

    fn drain(&self, depth: usize) -> Result<(), GpuError> {
        (0..depth).try_for_each(|slot| self.prepare(slot))
    }

    fn follows_the_other_end(&self) -> bool {
        true
    }

    /// A consumer was restarted: open every consumer's `released` events again (a fresh
    /// process's are fresh events; the others' are the same).
    fn update(&mut self, import: Import, _fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        self.released = import.consumers.iter().map(|c| handshake::open_events(&self.gpu, &c.events)).collect::<Result<_, _>>()?;
        tracing::info!("took the restarted consumer's GPU events");
        Ok(())
    }
}
