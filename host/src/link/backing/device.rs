//! Frames in GPU memory the producer exports (VMM file descriptors or legacy IPC handles),
//! one interprocess `ready` event per slot recorded by the producer and one `released` event
//! per slot and consumer recorded by that consumer. The ring in host memory still carries the
//! counters. An event only means its latest record; the ring's counters make sure a record is
//! never replaced before the other side has enqueued its wait on it.
//!
//! A consumer of frames under 16 MiB waits for `ready` on its host first, for a while
//! ([`host_wait_for_ready`]): a GPU wait on an event another process has not yet reached
//! stalls the waiting stream's channel, and with many stages sharing the GPU through MPS
//! those stalls, not the kernels, bounded small frames.
//!
//! [`handshake`] is how the ends get each other's objects, through the host, when they start;
//! after a restart of the other end they take the new ones here ([`ReadEnd::update`]).

pub mod handshake;

use std::os::fd::OwnedFd;
use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, device_frame};
use crate::control::{Export, Handle64, Import, SlotMemory};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent, SideStream};
use crate::link::wakes::HeldWakes;
use crate::link::{HandshakeError, ReadSlot, RingMap};

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
    /// How long it polls a frame's `ready` event on its host before it leaves the wait to its
    /// GPU (the stage's `plan::tuning`, which has the measurements; zero: the GPU waits).
    pub(crate) ready_spin: std::time::Duration,
    /// Frames on another GPU copied into this one's memory first ([`CopyIn`]); `None`: the
    /// stage's kernels read them where they are, over peer access.
    pub(crate) copy_in: Option<CopyIn>,
}

/// Buffers of this stage's GPU, one a ring slot, and the copy-engine streams that copy frames
/// between them and the ring's slots beside the stage's stream, taking the slots in turn: a
/// consumer's [`CopyIn`] and a producer's [`CopyOut`].
pub(crate) struct SlotCopies {
    /// The streams the copies run on, slot `k`'s on `lanes[k % lanes.len()]`
    /// (`peer_copy_lanes`), so copies of consecutive frames can run side by side.
    lanes: Vec<SideStream>,
    /// A buffer per slot, so a slot's next frame never overwrites one still being copied.
    local: Vec<DeviceMemory>,
    /// Per slot: the copy between `local` and the slot is done.
    copied: Vec<IpcEvent>,
    /// Per slot: the stage's work on `local` is done.
    worked: Vec<IpcEvent>,
}

impl SlotCopies {
    /// Buffers and events for `slots` slots of `bytes` each, on `gpu`, the copies on `lanes`
    /// streams.
    fn new(gpu: &Arc<Gpu>, slots: usize, bytes: usize, lanes: usize) -> Result<SlotCopies, GpuError> {
        let events = || (0..slots).map(|_| IpcEvent::create(gpu).map(|(e, _)| e)).collect::<Result<Vec<_>, _>>();
        let lanes = (0..lanes.clamp(1, slots.max(1))).map(|_| SideStream::new(gpu)).collect::<Result<Vec<_>, _>>()?;
        let local = (0..slots).map(|_| DeviceMemory::private(gpu, bytes)).collect::<Result<Vec<_>, _>>()?;
        Ok(SlotCopies { lanes, local, copied: events()?, worked: events()? })
    }

    fn lane(&self, k: usize) -> &SideStream {
        &self.lanes[k % self.lanes.len()]
    }

    fn synchronize(&self) -> Result<(), GpuError> {
        self.lanes.iter().try_for_each(SideStream::synchronize)
    }
}

/// A consumer on another GPU than its ring's memory copies each frame into a buffer of its
/// own GPU with the copy engines, on a stream beside the stage's, and the stage's kernels read
/// that. The copy of the next frame then runs while the kernels work on this one, and a copy
/// engine moves more over NVLink than kernels reading across it (docs/gpu.md, "Two GPUs"; the
/// tuning's `peer_copy_min_bytes` decides per link). The producer's slot goes back as soon as
/// its copy is done.
pub(crate) struct CopyIn(SlotCopies);

impl CopyIn {
    /// Enqueue the copy of slot `k`'s frame (`bytes` at `src`, written once `ready` has
    /// completed unless `written` already) into its local buffer, and make `stage` wait for it.
    fn enqueue(
        &self,
        k: usize,
        src: u64,
        bytes: usize,
        ready: &IpcEvent,
        written: bool,
        stage: &crate::gpu::Stream,
    ) -> Result<(), GpuError> {
        let c = &self.0;
        let lane = c.lane(k);
        // The copy waits for the stage's work on the slot's last frame here, and for the
        // producer's frame; the stage's stream waits for the copy.
        c.worked[k].wait_on(lane.stream())?;
        if !written {
            ready.wait_on(lane.stream())?;
        }
        lane.copy_dtod_async(c.local[k].addr(), src, bytes)?;
        c.copied[k].record(lane.stream())?;
        c.copied[k].wait_on(stage)
    }

    /// Slot `k`'s frame is done: the next copy into its buffer waits for the stage's work
    /// (`stage`), and `released` is recorded after the copy (the last thing on its lane for
    /// slot `k`: a slot's frames are taken and done in order), as the producer's slot was
    /// read by the copy alone.
    fn done(&self, k: usize, stage: &crate::gpu::Stream, released: &IpcEvent) -> Result<(), GpuError> {
        self.0.worked[k].record(stage)?;
        released.record(self.0.lane(k).stream())
    }
}

impl DeviceRead {
    /// Copy frames into this GPU's memory before the stage reads them ([`CopyIn`]), the
    /// copies on `lanes` streams.
    pub(crate) fn copy_in(&mut self, ring: &RingMap, lanes: usize) -> Result<(), GpuError> {
        let bytes = ring.layout().total_bytes as usize;
        self.copy_in = Some(CopyIn(SlotCopies::new(&self.gpu, self.memory.len(), bytes, lanes)?));
        Ok(())
    }
}

impl ReadEnd for DeviceRead {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot, held: Option<&Arc<HeldWakes>>) -> Result<RawFrame, GpuError> {
        let k = slot.index();
        let ready = &self.ready[k];
        let written = host_wait_for_ready(ready, self.ready_spin, held);
        let Some(c) = &self.copy_in else {
            if !written {
                ready.wait_on(self.gpu.stream())?;
            }
            return Ok(device_frame(ring, &self.memory[k], slot.meta().seq, slot.meta().timestamp_ns));
        };
        c.enqueue(k, self.memory[k].addr(), ring.layout().total_bytes as usize, ready, written, self.gpu.stream())?;
        Ok(device_frame(ring, &c.0.local[k], slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, slot: usize) -> Result<(), GpuError> {
        match &self.copy_in {
            None => self.released[slot].record(self.gpu.stream()),
            // The producer's slot was read by the copy alone.
            Some(c) => c.done(slot, self.gpu.stream(), &self.released[slot]),
        }
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
                if let Some(c) = &self.copy_in {
                    c.0.synchronize()?;
                }
                synchronized = true;
            }
            let (memory, ready) = import_part(&self.gpu, part, &mut fds)?;
            if memory.len() != self.part_slots {
                return Err(HandshakeError::Protocol(format!(
                    "a part of {} slots replaced one of {}",
                    memory.len(),
                    self.part_slots
                )));
            }
            let range = k * self.part_slots..(k + 1) * self.part_slots;
            self.memory.splice(range.clone(), memory);
            self.ready.splice(range, ready);
            self.generations[k] = part.generation;
            tracing::info!(
                "took the restarted producer's GPU memory and events{}",
                if self.generations.len() > 1 { format!(" (replica {k})") } else { String::new() }
            );
        }
        Ok(())
    }
}

/// Poll `ready` on the host until the producer's GPU has written the frame (true), or for
/// `spin` at most (false: the caller enqueues the GPU's wait, which is correct
/// whatever happened; a producer that died mid-frame, or a query that fails, is found
/// there as before). Once the event has completed, the frame's bytes are in device memory
/// for any later work to read. Before it spins, the stage's `held` wake-ups go out: its
/// neighbours must not wait on it while it waits.
fn host_wait_for_ready(ready: &IpcEvent, spin: std::time::Duration, held: Option<&Arc<HeldWakes>>) -> bool {
    if spin.is_zero() {
        return false;
    }
    let written = || ready.query().unwrap_or(false);
    if written() {
        return true;
    }
    if let Some(held) = held {
        held.flush();
    }
    let until = std::time::Instant::now() + spin;
    while std::time::Instant::now() < until {
        std::hint::spin_loop();
        if written() {
            return true;
        }
    }
    false
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
    /// Frames written into this GPU's memory first and pushed into the ring's slots, which
    /// live on another GPU, by the copy engines ([`CopyOut`]); `None`: kernels write the
    /// slots where they are.
    pub(crate) copy_out: Option<CopyOut>,
}

/// A producer whose ring lives on another GPU (its consumers') writes each frame into a
/// buffer of its own GPU and the copy engines push it into the slot, on streams beside the
/// stage's: writes over the link rather than a consumer's reads (docs/gpu.md, "Links between
/// GPUs"). The stage's stream never waits on the far GPU: the pushes wait for the consumers.
pub(crate) struct CopyOut(SlotCopies);

impl DeviceWrite {
    /// Write frames into this GPU's memory and push them into the ring ([`CopyOut`]).
    pub(crate) fn copy_out(&mut self, ring: &RingMap, lanes: usize) -> Result<(), GpuError> {
        let bytes = ring.layout().total_bytes as usize;
        self.copy_out = Some(CopyOut(SlotCopies::new(&self.gpu, self.memory.len(), bytes, lanes)?));
        Ok(())
    }

    fn wait_for_consumers(&self, slot: usize, stream: &crate::gpu::Stream) -> Result<(), GpuError> {
        self.released.iter().try_for_each(|consumer| consumer[slot].wait_on(stream))
    }
}

impl WriteEnd for DeviceWrite {
    fn prepare(&self, slot: usize) -> Result<(), GpuError> {
        match &self.copy_out {
            None => self.wait_for_consumers(slot, self.gpu.stream()),
            // The consumers' waits go to the push; the stage waits for its buffer only.
            Some(CopyOut(c)) => c.copied[slot - self.first_slot].wait_on(self.gpu.stream()),
        }
    }

    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        let k = slot - self.first_slot;
        match &self.copy_out {
            None => device_frame(ring, &self.memory[k], seq, timestamp_ns),
            Some(CopyOut(c)) => device_frame(ring, &c.local[k], seq, timestamp_ns),
        }
    }

    fn finish(&self, ring: &RingMap, slot: usize) -> Result<(), GpuError> {
        let k = slot - self.first_slot;
        let Some(CopyOut(c)) = &self.copy_out else { return self.ready[k].record(self.gpu.stream()) };
        // The push waits for the stage's work on the frame and for the consumers' work on the
        // slot's last frame; `ready` and the buffer's next frame wait for the push.
        let lane = c.lane(k);
        c.worked[k].record(self.gpu.stream())?;
        c.worked[k].wait_on(lane.stream())?;
        self.wait_for_consumers(slot, lane.stream())?;
        lane.copy_dtod_async(self.memory[k].addr(), c.local[k].addr(), ring.layout().total_bytes as usize)?;
        c.copied[k].record(lane.stream())?;
        self.ready[k].record(lane.stream())
    }

    fn outlived_by_consumers(&self) -> bool {
        true
    }

    /// Its own slots: the others are its siblings' memory.
    fn drain(&self, _depth: usize) -> Result<(), GpuError> {
        if let Some(CopyOut(c)) = &self.copy_out {
            c.synchronize()?;
        }
        (self.first_slot..self.first_slot + self.memory.len())
            .try_for_each(|slot| self.wait_for_consumers(slot, self.gpu.stream()))
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
        self.released = import.consumers.iter().map(|c| open_events(&self.gpu, &c.events)).collect::<Result<_, _>>()?;
        self.current_for = import.epoch;
        tracing::info!("took the current consumers' GPU events ({} consumer processes)", self.released.len());
        Ok(())
    }
}

/// The other ends' `released` (or `ready`) events, opened from the handles they exported.
fn open_events(gpu: &Arc<Gpu>, handles: &[Handle64]) -> Result<Vec<IpcEvent>, GpuError> {
    handles.iter().map(|h| IpcEvent::open(gpu, h.0)).collect()
}

/// One producer part's slot memory and `ready` events, its descriptors (a VMM part's, one per
/// slot) taken from `fds`.
fn import_part(
    gpu: &Arc<Gpu>,
    part: &Export,
    fds: &mut impl Iterator<Item = OwnedFd>,
) -> Result<(Vec<DeviceMemory>, Vec<IpcEvent>), HandshakeError> {
    let slots = part.events.len();
    let memory = match &part.memory {
        Some(SlotMemory::Vmm { slot_bytes }) => (0..slots)
            .map(|_| {
                let fd =
                    fds.next().ok_or_else(|| HandshakeError::Protocol("fewer memory descriptors than slots".into()))?;
                Ok(DeviceMemory::import_vmm(gpu, fd, *slot_bytes as usize)?)
            })
            .collect::<Result<Vec<_>, HandshakeError>>()?,
        Some(SlotMemory::Legacy { handles, .. }) if handles.len() == slots => {
            handles.iter().map(|h| DeviceMemory::import_legacy(gpu, h.0)).collect::<Result<Vec<_>, _>>()?
        }
        Some(SlotMemory::Legacy { handles, .. }) => {
            return Err(HandshakeError::Protocol(format!("{} memory handles for {slots} slots", handles.len())));
        }
        None => return Err(HandshakeError::Protocol("the producer shared no memory".into())),
    };
    Ok((memory, open_events(gpu, &part.events)?))
}
