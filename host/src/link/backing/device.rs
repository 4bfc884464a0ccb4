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
use crate::control::{Import, SlotMemory};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent};
use crate::link::{ReadSlot, RingMap};

/// A consumer of a GPU ring: the producer's memory and `ready` events, imported, and its own
/// `released` events. A producer stage with replicas shares its ring in parts, one per
/// replica process (`part_slots` slots each, in replica order), each with its generation.
pub struct DeviceRead {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<IpcEvent>,
    /// The generation of the producer process whose objects each part holds.
    pub(crate) generations: Vec<u32>,
    pub(crate) part_slots: usize,
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

    fn producer_generation(&self, slot: usize) -> Option<u32> {
        self.generations.get(slot / self.part_slots).copied()
    }

    /// A restarted producer process: import the new memory and `ready` events of each part
    /// whose generation changed. The stream first finishes what it has enqueued on the old
    /// memory, which goes then.
    fn update(&mut self, import: Import, fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        if import.producers.len() != self.generations.len() {
            return Err(HandshakeError::Protocol(format!(
                "{} producer parts for a ring read in {}",
                import.producers.len(),
                self.generations.len()
            )));
        }
        let mut fds = fds.into_iter();
        let mut synchronized = false;
        for (k, part) in import.producers.iter().enumerate() {
            if part.generation == self.generations[k] {
                // Its descriptors are not needed: they close here.
                if matches!(part.memory, Some(SlotMemory::Vmm { .. })) {
                    fds.by_ref().take(part.events.len()).for_each(drop);
                }
                continue;
            }
            if !synchronized {
                self.gpu.synchronize()?;
                synchronized = true;
            }
            let (memory, ready) = handshake::import_part(&self.gpu, part, &mut fds)?;
            if memory.len() != self.part_slots {
                return Err(HandshakeError::Protocol(format!("a part of {} slots replaced one of {}", memory.len(), self.part_slots)));
            }
            let range = k * self.part_slots..(k + 1) * self.part_slots;
            self.memory.splice(range.clone(), memory);
            self.ready.splice(range, ready);
            self.generations[k] = part.generation;
            tracing::info!("took the restarted producer's GPU memory and events{}", if self.generations.len() > 1 { format!(" (replica {k})") } else { String::new() });
        }
        Ok(())
    }
}

/// The producer of a GPU ring: the memory and `ready` events of the slots it writes (all of
/// them, or a replica's part from `first_slot`), and every consumer process's `released`
/// events, imported (`released[consumer][slot]`, every slot of the ring).
pub struct DeviceWrite {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) first_slot: usize,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<Vec<IpcEvent>>,
    /// The ring's consumer epoch `released` is current for (the host says, with each import).
    pub(crate) current_for: Option<u32>,
}

impl WriteEnd for DeviceWrite {
    fn prepare(&self, slot: usize) -> Result<(), GpuError> {
        for consumer in &self.released {
            consumer[slot].wait_on(self.gpu.stream())?;
        }
        Ok(())
    }

    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        device_frame(ring, &self.memory[slot - self.first_slot], seq, timestamp_ns)
    }

    fn finish(&self, _ring: &RingMap, slot: usize) -> Result<(), GpuError> {
        self.ready[slot - self.first_slot].record(self.gpu.stream())
    }

    fn outlived_by_consumers(&self) -> bool {
        true
    }

    /// Its own slots: the others are its siblings' memory.
    fn drain(&self, _depth: usize) -> Result<(), GpuError> {
        (self.first_slot..self.first_slot + self.memory.len()).try_for_each(|slot| self.prepare(slot))
    }

    fn follows_the_other_end(&self) -> bool {
        true
    }

    fn consumers_current_for(&self) -> Option<u32> {
        self.current_for
    }

    /// A consumer process died or joined: open every live consumer process's `released`
    /// events again (a fresh process's are fresh events; the others' are the same).
    fn update(&mut self, import: Import, _fds: Vec<OwnedFd>) -> Result<(), HandshakeError> {
        self.released = import.consumers.iter().map(|c| handshake::open_events(&self.gpu, &c.events)).collect::<Result<_, _>>()?;
        self.current_for = import.epoch;
        tracing::info!("took the current consumers' GPU events ({} consumer processes)", self.released.len());
        Ok(())
    }
}
