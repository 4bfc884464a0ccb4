//! Frames in GPU memory the producer exports (VMM file descriptors or legacy IPC handles),
//! interprocess `ready` events recorded by the producer and `released` events recorded by each
//! consumer, several per slot. The ring in host memory still carries the counters. An event
//! only means its latest record; the ring's counters make sure a record is never replaced
//! before the other side has enqueued its wait on it.
//!
//! Why several events per slot (rounds): the driver makes a record of an interprocess event
//! wait, spinning the recording thread, until every wait another process enqueued on the
//! event's previous record has run on the GPU. With one event per slot that previous record is
//! one ring's depth of frames old, and the other side's GPU is often not past it: measured on an
//! H100, the middle stage of a 4K chain spent 28 µs a frame spinning there. The frame of
//! sequence number `seq` uses its slot's event of round `(seq / depth) % rounds`, so an event's
//! previous record is `rounds` ring-fulls old (with a bound on how far a host runs ahead of its
//! GPU, `stage::gpu_lead`, enough rounds rule the spin out; without one, the default, the hosts
//! run ahead until the driver blocks them elsewhere). Measured on an H100 (docs/benchmarks.md):
//! 1080p separate processes 53,519 -> 57,505 frames/s, 4K and an 8-stage chain unchanged.
//! Both ends know `seq` (the producer writes it, a consumer reads it from the slot), so they
//! agree on the event without a word more in shared memory; a frame that breaks the pattern
//! (drops, replicas) only makes a record wait longer, never wrong: an event is recorded only
//! for a slot its recorder holds, and waited on only for the frame it holds.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, device_frame};
use crate::control::handshake::{self, HandshakeError};
use crate::control::{Import, SlotMemory};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent};
use crate::link::{ReadSlot, RingMap};

/// How many events each slot of a ring of `depth` slots has on each end: enough rounds that an
/// event's previous record is older than a ring-full plus the frames a host runs ahead of its
/// GPU. `GPUIPC_EVENT_ROUNDS` overrides it (1: one event per slot, for measurements); every
/// process of a run inherits the same environment, so both ends agree.
pub fn rounds(depth: usize) -> usize {
    if let Some(n) = std::env::var("GPUIPC_EVENT_ROUNDS").ok().and_then(|v| v.parse::<usize>().ok()).filter(|&n| n >= 1) {
        return n;
    }
    rounds_for(depth, crate::stage::gpu_lead::frames())
}

/// Rounds for a ring of `depth` slots when hosts run at most `lead` frames ahead of their GPU
/// (0: unbounded, sized as for 1). A producer recording frame `seq` holds its slot, so its
/// consumers' hosts have released `seq - depth` and their GPUs are at most `lead` frames behind
/// them; the event's previous record (`rounds * depth` frames back) then has its waits run when
/// `rounds * depth >= depth + lead`. A consumer recording `released` for `seq` needs the
/// producer's GPU past its write of `seq - (rounds - 1) * depth`; the producer's host has
/// published `seq`, so `(rounds - 1) * depth >= lead`. One round more for slack.
fn rounds_for(depth: usize, lead: usize) -> usize {
    let depth = depth.max(1);
    (depth + lead.max(1)).div_ceil(depth) + 1
}

/// The index in a slot-major list of events (`rounds` per slot) of the event the frame `seq`
/// in `slot` uses.
fn event_index(slot: usize, seq: u64, depth: usize, rounds: usize) -> usize {
    slot * rounds + ((seq / depth as u64) % rounds as u64) as usize
}

/// A consumer of a GPU ring: the producer's memory and `ready` events, imported, and its own
/// `released` events (`rounds` per slot, slot-major). A producer stage with replicas shares
/// its ring in parts, one per replica process (`part_slots` slots each, in replica order),
/// each with its generation.
pub struct DeviceRead {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<IpcEvent>,
    pub(crate) depth: usize,
    pub(crate) rounds: usize,
    /// The generation of the producer process whose objects each part holds.
    pub(crate) generations: Vec<u32>,
    pub(crate) part_slots: usize,
}

impl ReadEnd for DeviceRead {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot) -> Result<RawFrame, GpuError> {
        self.ready[event_index(slot.index(), slot.meta().seq, self.depth, self.rounds)].wait_on(self.gpu.stream())?;
        Ok(device_frame(ring, &self.memory[slot.index()], slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, slot: &ReadSlot) -> Result<(), GpuError> {
        self.released[event_index(slot.index(), slot.meta().seq, self.depth, self.rounds)].record(self.gpu.stream())
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
                    fds.by_ref().take(part.events.len() / self.rounds).for_each(drop);
                }
                continue;
            }
            if !synchronized {
                self.gpu.synchronize()?;
                synchronized = true;
            }
            let (memory, ready) = handshake::import_part(&self.gpu, part, self.rounds, &mut fds)?;
            if memory.len() != self.part_slots {
                return Err(HandshakeError::Protocol(format!("a part of {} slots replaced one of {}", memory.len(), self.part_slots)));
            }
            let range = k * self.part_slots..(k + 1) * self.part_slots;
            self.memory.splice(range.clone(), memory);
            self.ready.splice(range.start * self.rounds..range.end * self.rounds, ready);
            self.generations[k] = part.generation;
            tracing::info!("took the restarted producer's GPU memory and events{}", if self.generations.len() > 1 { format!(" (replica {k})") } else { String::new() });
        }
        Ok(())
    }
}

/// The producer of a GPU ring: the memory and `ready` events of the slots it writes (all of
/// them, or a replica's part from `first_slot`), and every consumer process's `released`
/// events, imported (`released[consumer]`: every slot of the ring, `rounds` events each).
pub struct DeviceWrite {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) first_slot: usize,
    pub(crate) memory: Vec<DeviceMemory>,
    pub(crate) ready: Vec<IpcEvent>,
    pub(crate) released: Vec<Vec<IpcEvent>>,
    pub(crate) depth: usize,
    pub(crate) rounds: usize,
    /// The sequence number this process last wrote into each of its slots (`NONE_WRITTEN`
    /// before the first): the frame whose readers `prepare` waits for.
    pub(crate) last_seq: Vec<AtomicU64>,
    /// The ring's consumer epoch `released` is current for (the host says, with each import).
    pub(crate) current_for: Option<u32>,
}

/// `DeviceWrite::last_seq` of a slot this process has not written: its readers' events of
/// every round are waited on (a restarted producer does not know what its predecessor wrote).
pub(crate) const NONE_WRITTEN: u64 = u64::MAX;

impl DeviceWrite {
    pub(crate) fn last_seqs(slots: usize) -> Vec<AtomicU64> {
        (0..slots).map(|_| AtomicU64::new(NONE_WRITTEN)).collect()
    }
}

impl WriteEnd for DeviceWrite {
    fn prepare(&self, slot: usize) -> Result<(), GpuError> {
        let rounds = match self.last_seq[slot - self.first_slot].load(Ordering::Relaxed) {
            NONE_WRITTEN => slot * self.rounds..(slot + 1) * self.rounds,
            seq => {
                let i = event_index(slot, seq, self.depth, self.rounds);
                i..i + 1
            }
        };
        for consumer in &self.released {
            for event in &consumer[rounds.clone()] {
                event.wait_on(self.gpu.stream())?;
            }
        }
        Ok(())
    }

    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        device_frame(ring, &self.memory[slot - self.first_slot], seq, timestamp_ns)
    }

    fn finish(&self, _ring: &RingMap, slot: usize, seq: u64) -> Result<(), GpuError> {
        let own = slot - self.first_slot;
        self.ready[event_index(own, seq, self.depth, self.rounds)].record(self.gpu.stream())?;
        self.last_seq[own].store(seq, Ordering::Relaxed);
        Ok(())
    }

    fn outlived_by_consumers(&self) -> bool {
        true
    }

    /// Its own slots, every round: the others are its siblings' memory.
    fn drain(&self, _depth: usize) -> Result<(), GpuError> {
        for consumer in &self.released {
            for event in &consumer[self.first_slot * self.rounds..(self.first_slot + self.memory.len()) * self.rounds] {
                event.wait_on(self.gpu.stream())?;
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_rotates_its_events_once_a_ring_full() {
        // Depth 4, 3 rounds: slot 1 holds seqs 1, 5, 9, 13...; each takes the next round.
        let idx: Vec<usize> = [1u64, 5, 9, 13].iter().map(|&seq| event_index(1, seq, 4, 3)).collect();
        assert_eq!(idx, vec![3, 4, 5, 3]);
        // Every index stays inside the slot's own events.
        for seq in 0..100 {
            assert!((6..9).contains(&event_index(2, seq, 4, 3)));
        }
    }

    #[test]
    fn rounds_cover_a_ring_full_and_the_lead() {
        for depth in [1, 2, 3, 4, 8, 16, 64] {
            for lead in [0, 1, 4, 8, 16, 32] {
                let k = rounds_for(depth, lead);
                assert!(k * depth >= depth + lead, "depth {depth}, lead {lead}: {k} rounds");
                assert!((k - 1) * depth >= lead, "depth {depth}, lead {lead}: {k} rounds");
            }
        }
        assert_eq!(rounds_for(4, 0), 3);
        assert_eq!(rounds_for(4, 8), 4);
    }
}
