//! Frames in GPU memory the producer exports (VMM file descriptors or legacy IPC handles),
//! one interprocess `ready` event per slot recorded by the producer and one `released` event
//! per slot and consumer recorded by that consumer. The ring in host memory still carries the
//! counters. An event only means its latest record; the ring's counters make sure a record is
//! never replaced before the other side has enqueued its wait on it.

use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, device_frame};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent};
use crate::link::{ReadSlot, RingMap};

/// A consumer of a GPU ring: the producer's memory and `ready` events, imported, and its own
/// `released` events.
pub struct DeviceRead {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<IpcEvent>,
}

impl ReadEnd for DeviceRead {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot) -> Result<RawFrame, GpuError> {
        self.ready[slot.index()].wait_on(self.gpu.stream())?;
        Ok(device_frame(ring, &self.memory[slot.index()], slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, slot: usize) -> Result<(), GpuError> {
        self.released[slot].record(self.gpu.stream())
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
}
