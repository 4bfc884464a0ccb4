//! The ring protocol over a control block in shared memory.
//!
//! Each slot has one state word (see [`header::SlotState`]). The producer takes a slot by
//! compare-and-swap to WRITING, which succeeds only while no consumer holds a claim on it and
//! no `block` consumer still has it pending; it writes the frame, then stores the published
//! state (Release). A consumer claims a frame by compare-and-swap adding its claim bit to the
//! exact state it saw (Acquire), reads, then clears its claim and pending bits. So a frame is
//! never overwritten while read, and a `block` consumer never misses one; `drop_oldest` and
//! `latest` consumers never hold the producer back (they count the frames they missed).
//!
//! A ring with frames in host memory is two memfds: the control block, which every end maps
//! read-write (consumers write their claims and counters there), and the slots' frame data,
//! which only the producer can write: each consumer gets a descriptor of it open for reading
//! only, maps it read-only and closes it ([`RingMap::fds_for`], [`Mapping::read_only`]).
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use gpuipc_plugin_api::{FrameFormat, FrameLayout};

use super::check::RingGeometry;
use super::error::LinkError;
use super::header::{
    self, ABORTED, END_OF_STREAM, MAGIC, MAX_SLOTS, OPEN, POLICY_BLOCK, POLICY_LATEST, RingHeader, RingParams,
    SlotMeta, VERSION, WRITING,
};
use super::shm::{Mapping, SharedMemory};
use super::wakes::{HeldWakes, RingSides, Side, Waiter, wake_side};

/// What a stage does with the frames of a ring it maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAccess {
    /// A consumer: slot data comes through a descriptor open for reading only, mapped
    /// read-only and closed, so a stray write faults in this stage, and no code in it can
    /// make the mapping writable or map the data again writable: the frame other consumers
    /// read stays as the producer wrote it. The control block stays writable.
    Read,
    /// The producer.
    Write,
}

/// The descriptors one end of a ring gets: the control block's, and for a ring whose frames
/// live in host memory the data memfd's (read-write for the producer, read-only for a
/// consumer).
#[derive(Debug)]
pub struct RingFds {
    pub control: OwnedFd,
    pub data: Option<OwnedFd>,
}

/// A host ring's slot data as this end holds it.
enum SlotData {
    /// The host's, which made it: the memory, read-write, and the read-only descriptor its
    /// consumers are given (made once, at create).
    Created { memory: SharedMemory, read_only: OwnedFd },
    /// The producer's: read-write.
    Write(SharedMemory),
    /// A consumer's: a read-only mapping, no descriptor.
    Read(Mapping),
}

impl SlotData {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            SlotData::Created { memory, .. } | SlotData::Write(memory) => memory.as_ptr(),
            SlotData::Read(mapping) => mapping.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            SlotData::Created { memory, .. } | SlotData::Write(memory) => memory.len(),
            SlotData::Read(mapping) => mapping.len(),
        }
    }
}

/// A mapped ring: control block plus, for host rings, the slots' frame data.
pub struct RingMap {
    control: SharedMemory,
    /// `None` when frames live on a GPU.
    data: Option<SlotData>,
    /// The header's plain fields as checked at create or open. Accessors answer from this copy,
    /// so a peer that scribbles the shared header later cannot move a slot out of bounds.
    checked: RingGeometry,
}

impl RingMap {
    /// Create and initialise a ring (the host does this, before any stage starts): the control
    /// block in memfd `name`, frame data in host memory in memfd `<name>-data`.
    pub fn create(name: &str, params: &RingParams) -> Result<RingMap, LinkError> {
        let checked = RingGeometry::planned(params, name)?;
        let shm = SharedMemory::create(name, RingParams::control_bytes() as usize)?;
        let data = match params.data_bytes() {
            0 => None,
            bytes => {
                let memory = SharedMemory::create(&format!("{name}-data"), bytes as usize)?;
                let read_only = memory.read_only_fd()?;
                Some(SlotData::Created { memory, read_only })
            }
        };
        let header = shm.as_ptr() as *mut RingHeader;
        // SAFETY: the memory is fresh, zeroed, at least a header long, page-aligned, and not
        // yet shared with anyone; zero is a valid value for every field.
        unsafe {
            (*header).magic = MAGIC;
            (*header).depth = params.depth;
            (*header).n_consumers = params.policies.len() as u32;
            for (k, &policy) in params.policies.iter().enumerate() {
                (*header).policies[k] = policy;
            }
            (*header).slot_bytes = params.slot_bytes();
            (*header).format = params.format;
            (*header).layout = params.layout;
            // Written last: pairs with the Acquire load in `open`, publishing every field above.
            (*header).version.store(VERSION, Ordering::Release);
        }
        Ok(RingMap { control: shm, data, checked })
    }

    /// The descriptors an end of this ring is given (see [`RingFds`]), in that order: the
    /// control block's, then the data memfd's, read-write for [`FrameAccess::Write`] and open
    /// for reading only for [`FrameAccess::Read`]. The host's ring ([`RingMap::create`]) has
    /// both; a stage's has none to give for reading.
    pub fn fds_for(&self, access: FrameAccess) -> Vec<BorrowedFd<'_>> {
        let data = match (&self.data, access) {
            (Some(SlotData::Created { memory, .. } | SlotData::Write(memory)), FrameAccess::Write) => {
                Some(memory.as_fd())
            }
            (Some(SlotData::Created { read_only, .. }), FrameAccess::Read) => Some(read_only.as_fd()),
            _ => None,
        };
        std::iter::once(self.control.as_fd()).chain(data).collect()
    }

    /// Map a ring received as descriptors and check its header against the rules every ring
    /// keeps (see [`check`](super::check)); without a plan, errors name the link "(unnamed)".
    #[cfg(test)]
    pub fn open(fds: RingFds, access: FrameAccess) -> Result<RingMap, LinkError> {
        RingMap::map_checked(fds, None, "(unnamed)", access)
    }

    /// This ring opened again by another end, through copies of the descriptors that end is
    /// given, as a stage process maps them.
    #[cfg(test)]
    pub fn reopen(&self, access: FrameAccess) -> RingMap {
        let mut fds = self.fds_for(access).into_iter().map(|fd| fd.try_clone_to_owned().unwrap());
        let fds = RingFds { control: fds.next().unwrap(), data: fds.next() };
        RingMap::open(fds, access).unwrap()
    }

    /// Map a ring received as descriptors and check every header field against the rules and
    /// against `expected`, the plan's params for `link` ("gen -> grade"), and the data memfd
    /// against the header; a mismatch is refused with an error naming the link and the field.
    /// With [`FrameAccess::Read`], the data memfd's descriptor must be open for reading only,
    /// and is closed once mapped.
    pub fn open_checked(
        fds: RingFds,
        expected: &RingParams,
        link: &str,
        access: FrameAccess,
    ) -> Result<RingMap, LinkError> {
        let plan = RingGeometry::planned(expected, link)?;
        RingMap::map_checked(fds, Some(&plan), link, access)
    }

    fn map_checked(
        fds: RingFds,
        plan: Option<&RingGeometry>,
        link: &str,
        access: FrameAccess,
    ) -> Result<RingMap, LinkError> {
        let map_error = |what| move |source| LinkError::Map { link: link.to_owned(), what, source };
        let control = SharedMemory::open(fds.control).map_err(map_error("control block"))?;
        let checked = RingGeometry::read(&control, plan, link)?;
        let data = match (fds.data, access) {
            (None, _) => None,
            (Some(fd), FrameAccess::Write) => {
                Some(SlotData::Write(SharedMemory::open(fd).map_err(map_error("data memfd"))?))
            }
            (Some(fd), FrameAccess::Read) => {
                Some(SlotData::Read(Mapping::read_only(fd).map_err(map_error("data memfd for reading"))?))
            }
        };
        checked.check_data(data.as_ref().map(|d| d.len() as u64), link)?;
        Ok(RingMap { control, data, checked })
    }

    pub fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is page-aligned and at least a header long (checked in `open`,
        // sized in `create`); the header is only mutated through atomics and UnsafeCells.
        unsafe { &*(self.control.as_ptr() as *const RingHeader) }
    }

    /// The control block's memory.
    #[cfg(test)]
    pub fn control_block(&self) -> &SharedMemory {
        &self.control
    }

    pub fn depth(&self) -> usize {
        self.checked.depth()
    }

    pub fn n_consumers(&self) -> usize {
        self.checked.n_consumers()
    }

    /// Consumer `c`'s policy code.
    pub fn policy(&self, c: usize) -> u8 {
        self.checked.policy(c)
    }

    pub fn format(&self) -> FrameFormat {
        self.checked.format()
    }

    pub fn layout(&self) -> FrameLayout {
        self.checked.layout()
    }

    /// Host address of slot `i`'s frame data, or `None` when frames live on a GPU (or the ring
    /// has no slot `i`). Opened with [`FrameAccess::Read`], the memory is read-only.
    pub fn slot_data(&self, i: usize) -> Option<(*mut u8, u64)> {
        let (offset, len) = self.checked.slot_range(i)?;
        let data = self.data.as_ref()?;
        (offset.checked_add(len)? <= data.len() as u64).then(|| {
            // SAFETY: offset..offset + len lies within the data mapping (checked just above),
            // from the private checked copy, not from the shared header.
            let ptr = unsafe { data.as_ptr().add(offset as usize) };
            (ptr, len)
        })
    }

    /// End the run for everyone on this ring: waiters wake and see `Aborted`.
    pub fn abort(&self) {
        self.header().producer.0.closed.store(ABORTED, Ordering::Release);
        self.wake(Side::Consumers);
        self.wake(Side::Producer);
    }

    pub fn is_aborted(&self) -> bool {
        self.header().producer.0.closed.load(Ordering::Acquire) == ABORTED
    }

    /// Frames consumer `c` missed.
    pub fn dropped(&self, c: usize) -> u64 {
        self.header().consumers[c].0.dropped.load(Ordering::Relaxed)
    }
}

impl RingSides for RingMap {
    fn futex(&self, side: Side) -> (&std::sync::atomic::AtomicU32, &std::sync::atomic::AtomicU32) {
        match side {
            Side::Consumers => {
                let p = &self.header().producer.0;
                (&p.publish_futex, &p.consumers_sleeping)
            }
            Side::Producer => {
                let r = &self.header().release.0;
                (&r.release_futex, &r.producer_sleeping)
            }
        }
    }

    fn depth(&self) -> usize {
        RingMap::depth(self)
    }
}

/// A slot the producer owns until it publishes. Dropped unpublished (an early `?`, a failed
/// plugin), it goes back to the ring empty: no slot is ever left WRITING by a live producer.
pub struct WriteSlot {
    ring: Arc<RingMap>,
    index: usize,
    armed: bool,
}

impl WriteSlot {
    pub fn index(&self) -> usize {
        self.index
    }
}

impl std::fmt::Debug for WriteSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteSlot").field("index", &self.index).finish()
    }
}

impl Drop for WriteSlot {
    fn drop(&mut self) {
        if self.armed {
            // Release: whatever was half-written stays before the slot is free again.
            self.ring.header().slots[self.index].0.state.store(0, Ordering::Release);
            self.ring.wake(Side::Producer);
        }
    }
}

/// The producing end of a ring.
pub struct Producer {
    ring: Arc<RingMap>,
    waiter: Waiter,
    /// This producer process among the ring's producers: the ring's epoch when it started,
    /// stamped on every frame it publishes, so a consumer can tell a dead process's frames.
    generation: u32,
    next_seq: u64,
    published: u64,
    /// Consumers the producer must wait for (`block` policy).
    block_mask: u64,
    all_mask: u64,
    /// The slots this producer writes: all of them, or a replica's own part. Replicas write in
    /// parallel but publish in turn, so each waits for its turn holding a written slot; from a
    /// common pool, the turn's holder could find every slot held by siblings waiting for later
    /// turns (a deadlock). Own parts rule that out, and on a GPU each part is one process's
    /// memory.
    slots: std::ops::Range<usize>,
}

impl Producer {
    /// The producing end. A restarted producer carries on where the ring stands: sequence
    /// numbers after the last one published, publish ordinals after the last ordinal (the
    /// host repaired both if the previous producer died mid-publish).
    pub fn new(ring: RingMap, waiter: Waiter) -> Producer {
        let h = ring.header();
        let n = ring.n_consumers();
        let block_mask = (0..n).filter(|&c| ring.policy(c) == POLICY_BLOCK).fold(0, |m, c| m | (1 << c));
        let next_seq = h.producer.0.seq_end.load(Ordering::Acquire);
        let published = h.producer.0.published.load(Ordering::Acquire);
        let generation = h.producer.0.epoch.load(Ordering::Acquire);
        let slots = 0..ring.depth();
        Producer {
            ring: Arc::new(ring),
            waiter,
            generation,
            next_seq,
            published,
            block_mask,
            all_mask: (1u64 << n) - 1,
            slots,
        }
    }

    /// As [`Producer::new`], writing only `slots` of the ring: replica `r` of a stage whose
    /// replicas have `k` slots each writes `r * k .. (r + 1) * k`.
    pub fn with_slots(ring: RingMap, waiter: Waiter, slots: std::ops::Range<usize>) -> Result<Producer, LinkError> {
        if slots.is_empty() || slots.end > ring.depth() {
            return Err(LinkError::Invalid(format!("slots {slots:?} of a ring of {}", ring.depth())));
        }
        Ok(Producer { slots, ..Producer::new(ring, waiter) })
    }

    pub fn ring(&self) -> &RingMap {
        &self.ring
    }

    /// The wake-ups this producer's stage holds back, if it does (see [`HeldWakes`]).
    pub fn held_wakes(&self) -> Option<&Arc<HeldWakes>> {
        self.waiter.held_wakes()
    }

    /// The slots this producer writes (see the field).
    pub fn slots(&self) -> std::ops::Range<usize> {
        self.slots.clone()
    }

    /// See [`Producer`]'s field: what this process stamps on its frames.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Wake the consumers sleeping on this ring without publishing: a frame is on its way
    /// (see [`super::wait::Waiter::waking_ahead`]).
    pub fn wake_ahead(&self) {
        self.ring.wake(Side::Consumers);
    }

    /// A handle that wakes this ring's consumers ahead, for another waiter to call.
    pub fn wake_ahead_fn(&self) -> std::sync::Arc<dyn Fn() + Send + Sync> {
        let ring = self.ring.clone();
        std::sync::Arc::new(move || ring.wake(Side::Consumers))
    }

    /// The sequence number the next frame gets unless told otherwise: a source continues here.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Take a slot to write the next frame into: a free one, else (when no `block` consumer
    /// needs it) the one holding the oldest frame. Waits while none can be taken.
    pub fn acquire(&mut self, deadline: Option<Instant>) -> Result<WriteSlot, LinkError> {
        let h = self.ring.header();
        let r = &h.release.0;
        let preferred = self.slots.start + (self.next_seq % self.slots.len() as u64) as usize;
        let block_mask = self.block_mask;
        let index = self.waiter.wait(&r.release_futex, &r.producer_sleeping, deadline, || {
            if self.ring.is_aborted() {
                return Some(Err(LinkError::Aborted));
            }
            let pick = pick_write_slot(h, self.slots.clone(), preferred, block_mask)?;
            let slot = &h.slots[pick.0].0;
            // Acquire: pairs with consumers' release of their claim, so their reads of the
            // old frame happen before we overwrite it.
            slot.state.compare_exchange(pick.1, WRITING, Ordering::Acquire, Ordering::Relaxed).ok().map(|_| Ok(pick.0))
        })??;
        Ok(WriteSlot { ring: self.ring.clone(), index, armed: true })
    }

    /// Publish the frame written into `slot` with sequence number `seq`.
    pub fn publish(&mut self, mut slot: WriteSlot, seq: u64, timestamp_ns: u64) {
        let h = self.ring.header();
        let s = &h.slots[slot.index].0;
        let p = &h.producer.0;
        // Producers taking turns (a stage's replicas) publish one at a time, so the shared
        // count is this publish's ordinal (Relaxed: the turn's hand-over orders it after the
        // previous publish); for a lone producer it equals its own count.
        self.published = self.published.max(p.published.load(Ordering::Relaxed));
        // SAFETY: the slot is ours (state WRITING): no consumer can claim it, so nobody reads
        // the metadata while we write it.
        unsafe {
            *s.meta.get() = SlotMeta {
                seq,
                ordinal: self.published,
                timestamp_ns,
                flags: self.generation,
                format: self.ring.format(),
                layout: self.ring.layout(),
            };
        }
        s.seq.store(seq, Ordering::Relaxed);
        // Release: publishes the frame data and metadata written above to whoever claims the
        // slot with Acquire.
        s.state.store(header::published_state(seq, self.all_mask), Ordering::Release);
        slot.armed = false;
        self.published += 1;
        p.published.store(self.published, Ordering::Relaxed);
        // Release: a consumer that loads `seq_end` with Acquire and sees this frame also sees
        // the slot's published state (see `try_claim`).
        p.seq_end.store(seq + 1, Ordering::Release);
        self.next_seq = seq + 1;
        wake_side(self.waiter.held_wakes(), &self.ring, Side::Consumers);
    }

    /// Give a taken slot back without publishing (the plugin failed).
    pub fn cancel(&mut self, slot: WriteSlot) {
        drop(slot);
    }

    /// End of stream: consumers drain what was published, then stop.
    pub fn close(&mut self) {
        let p = &self.ring.header().producer.0;
        // Release: every publish above happens before a consumer sees the stream closed.
        let _ = p.closed.compare_exchange(OPEN, END_OF_STREAM, Ordering::Release, Ordering::Relaxed);
        self.ring.wake(Side::Consumers);
    }

    /// After `close`: wait until every consumer has read and released every frame in this
    /// producer's slots (none claimed or pending), so objects only this producer keeps alive
    /// (GPU memory, events) outlive every use. `Aborted` if the run is aborted meanwhile.
    pub fn wait_drained(&self, deadline: Option<Instant>) -> Result<(), LinkError> {
        let h = self.ring.header();
        let r = &h.release.0;
        self.waiter.wait(&r.release_futex, &r.producer_sleeping, deadline, || {
            if self.ring.is_aborted() {
                return Some(Err(LinkError::Aborted));
            }
            let busy = self.slots.clone().any(|i| {
                let st = h.slots[i].0.state.load(Ordering::Acquire);
                header::claims(st) != 0 || header::pendings(st) != 0
            });
            (!busy).then_some(Ok(()))
        })?
    }
}

/// A slot a producer may take now and the exact state seen, or `None` to wait.
fn pick_write_slot(
    h: &RingHeader,
    slots: std::ops::Range<usize>,
    preferred: usize,
    block_mask: u64,
) -> Option<(usize, u64)> {
    let load = |i: usize| h.slots[i].0.state.load(Ordering::Relaxed);
    let (start, len) = (slots.start, slots.len());
    // A slot nobody needs any more, the preferred one first.
    for i in (0..len).map(|k| start + (preferred - start + k) % len) {
        let st = load(i);
        if st & WRITING == 0 && header::claims(st) == 0 && header::pendings(st) == 0 {
            return Some((i, st));
        }
    }
    // Else the oldest frame that only non-blocking consumers still want and nobody reads now.
    slots
        .filter_map(|i| {
            let st = load(i);
            let free = st & WRITING == 0 && header::claims(st) == 0 && header::pendings(st) & block_mask == 0;
            free.then(|| (i, st, h.slots[i].0.seq.load(Ordering::Relaxed)))
        })
        .min_by_key(|&(_, _, seq)| seq)
        .map(|(i, st, _)| (i, st))
}

/// A frame a consumer holds. Dropping the guard releases it: the slot may be reused once
/// every `block` consumer released it too.
pub struct ReadSlot {
    ring: Arc<RingMap>,
    consumer: usize,
    index: usize,
    meta: SlotMeta,
    /// Whether letting go of it also says the frame was read (its pending bit goes).
    read: bool,
    /// The consumer's held-back wake-ups, which the producer's wake-up goes through.
    held: Option<Arc<HeldWakes>>,
}

impl ReadSlot {
    pub fn index(&self) -> usize {
        self.index
    }

    /// The frame's metadata, copied when it was claimed.
    pub fn meta(&self) -> &SlotMeta {
        &self.meta
    }

    /// Let go of the frame without having read it: it stays pending for this consumer index,
    /// for a sibling replica to take (a replica told to yield its turn).
    pub fn release_unread(mut self) {
        self.read = false;
    }
}

impl std::fmt::Debug for ReadSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadSlot").field("index", &self.index).field("seq", &self.meta.seq).finish()
    }
}

impl Drop for ReadSlot {
    fn drop(&mut self) {
        let h = self.ring.header();
        let pending = if self.read { header::pending_bit(self.consumer) } else { 0 };
        let bits = header::claim_bit(self.consumer) | pending;
        // Release: our reads of the frame happen before the producer's Acquire takes the slot.
        h.slots[self.index].0.state.fetch_and(!bits, Ordering::Release);
        wake_side(self.held.as_ref(), &self.ring, Side::Producer);
    }
}

/// What one scan of the slots found.
// Returned by value on every frame's claim: boxing the slot would allocate per frame.
#[allow(clippy::large_enum_variant)]
enum Scan {
    Claimed(ReadSlot),
    Nothing,
    /// A frame newer than the one wanted was published during the scan, so the wanted one may
    /// have been too, behind it: look again. Never looped on here: a producer that died
    /// between its two publish stores would make that loop spin for ever (the host repairs
    /// `seq_end` when it reclaims the dead end).
    Again,
}

/// One consuming end of a ring.
pub struct Consumer {
    ring: Arc<RingMap>,
    waiter: Waiter,
    index: usize,
    latest: bool,
    /// The sequence number wanted next.
    expected: u64,
    /// The publish ordinal expected next; gaps are drops on this link.
    next_ordinal: u64,
    /// Whether sibling processes (a stage's replicas) share this consumer's index: each takes
    /// frames no sibling holds, and the position in the stream lives in the shared
    /// `ConsumerState` (takes are serialised by the replicas' take lock, `queue`).
    shared: bool,
    /// The replicas' queue block: frames it owes (a dead sibling's, to be taken again) are not
    /// given up when a take passes over them.
    queue: Option<Arc<super::queue::QueueMap>>,
}

impl Consumer {
    /// The consuming end number `index`. A restarted consumer carries on after the last
    /// frame its previous process took (the one it held when it died is lost).
    pub fn new(ring: RingMap, index: usize, waiter: Waiter) -> Result<Consumer, LinkError> {
        let h = ring.header();
        if index >= ring.n_consumers() {
            return Err(LinkError::Invalid(format!("consumer {index} of a ring with {}", ring.n_consumers())));
        }
        let latest = ring.policy(index) == POLICY_LATEST;
        let c = &h.consumers[index].0;
        let expected = c.next_seq.load(Ordering::Acquire);
        let next_ordinal = c.next_ordinal.load(Ordering::Acquire);
        Ok(Consumer { ring: Arc::new(ring), waiter, index, latest, expected, next_ordinal, shared: false, queue: None })
    }

    /// As [`Consumer::new`], for one of several replicas sharing consumer `index`: a frame goes
    /// to one of them. The caller serialises their takes (`acquire` to `take`) with the take
    /// lock of `queue` (`None` in tests of the ring alone).
    pub fn new_shared(
        ring: RingMap,
        index: usize,
        waiter: Waiter,
        queue: Option<Arc<super::queue::QueueMap>>,
    ) -> Result<Consumer, LinkError> {
        Ok(Consumer { shared: true, queue, ..Consumer::new(ring, index, waiter)? })
    }

    /// Whether a frame numbered `seq` must stay pending although a take passes over it.
    fn keeps(&self, seq: u64) -> bool {
        self.queue.as_ref().is_some_and(|q| q.owes(seq))
    }

    /// Whether the frame numbered `seq` is claimed under this consumer's index (by a sibling
    /// replica, or one that gave it back and has yet to let go).
    pub fn claimed_under_index(&self, seq: u64) -> bool {
        let h = self.ring.header();
        let claim = header::claim_bit(self.index);
        (0..self.ring.depth()).any(|i| {
            let slot = &h.slots[i].0;
            let st = slot.state.load(Ordering::Acquire);
            st & claim != 0 && same_frame(st, seq) && slot.seq.load(Ordering::Relaxed) == seq
        })
    }

    /// Count `n` frames as dropped on this link (a replica's frame given up).
    pub fn count_dropped(&self, n: u64) {
        self.ring.header().consumers[self.index].0.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// A shared consumer starts each take where its siblings left the stream.
    pub fn catch_up(&mut self) {
        if self.shared {
            let c = &self.ring.header().consumers[self.index].0;
            self.expected = self.expected.max(c.next_seq.load(Ordering::Acquire));
            self.next_ordinal = self.next_ordinal.max(c.next_ordinal.load(Ordering::Acquire));
        }
    }

    pub fn ring(&self) -> &RingMap {
        &self.ring
    }

    /// The wake-ups this consumer's stage holds back, if it does (see [`HeldWakes`]).
    pub fn held_wakes(&self) -> Option<&Arc<HeldWakes>> {
        self.waiter.held_wakes()
    }

    /// Frames this consumer missed so far.
    pub fn dropped(&self) -> u64 {
        self.ring.dropped(self.index)
    }

    /// The next frame at or after sequence number `at_least` (and after the last one read):
    /// the oldest such, or the newest for a `latest` consumer. `None` at end of stream.
    pub fn acquire(&mut self, at_least: u64, deadline: Option<Instant>) -> Result<Option<ReadSlot>, LinkError> {
        self.catch_up();
        let h = self.ring.header();
        let p = &h.producer.0;
        let want = at_least.max(self.expected);
        let found = self.waiter.wait(&p.publish_futex, &p.consumers_sleeping, deadline, || {
            match p.closed.load(Ordering::Acquire) {
                ABORTED => return Some(Err(LinkError::Aborted)),
                // Closed (Acquire above): every frame ever published is visible, so a scan
                // that finds none means the stream is over.
                END_OF_STREAM => {
                    return match self.try_claim(want) {
                        Scan::Claimed(slot) => Some(Ok(Some(slot))),
                        Scan::Nothing => Some(Ok(None)),
                        Scan::Again => None,
                    };
                }
                _ => {}
            }
            match self.try_claim(want) {
                Scan::Claimed(slot) => Some(Ok(Some(slot))),
                Scan::Nothing | Scan::Again => None,
            }
        })??;
        if let Some(slot) = &found {
            self.take(slot);
        }
        Ok(found)
    }

    /// Claim the best published frame with seq >= `want`, if any. Frames older than `want`
    /// still pending for us will never be read: give them up, so a producer waiting for them
    /// (a `block` link whose consumer skips to align its inputs) can go on.
    fn try_claim(&self, want: u64) -> Scan {
        // Frames with a sequence number below this were published before the scan began;
        // any frame published during it has a higher one. The scan is not a snapshot: a
        // frame can be published behind it while a newer one is seen ahead.
        let seq_end = self.ring.header().producer.0.seq_end.load(Ordering::Acquire);
        let mut best: Option<(usize, u64, u64)> = None;
        let mut gave_up = false;
        for (i, st, seq) in self.pending_slots(None) {
            if seq < want {
                if !self.keeps(seq) {
                    gave_up |= self.give_up(i, st);
                }
                continue;
            }
            let better = match best {
                None => true,
                Some((_, _, b)) => {
                    if self.latest {
                        seq > b
                    } else {
                        seq < b
                    }
                }
            };
            if better {
                best = Some((i, st, seq));
            }
        }
        if gave_up {
            self.wake_producer();
        }
        let Some((i, st, seq)) = best else { return Scan::Nothing };
        if !self.latest && seq > want && seq >= seq_end {
            return Scan::Again;
        }
        self.claim(i, st).map_or(Scan::Again, Scan::Claimed)
    }

    /// The slots holding a frame still pending for us and not being rewritten: (slot, the
    /// state word seen, the frame's sequence number).
    /// `own`: a slot this consumer claimed itself (a fan-in holding it while it aligns).
    fn pending_slots(&self, own: Option<usize>) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let h = self.ring.header();
        let pending = header::pending_bit(self.index);
        // A sibling's claim under our index: that frame is its, not ours to take or give up.
        let siblings = if self.shared { header::claim_bit(self.index) } else { 0 };
        (0..self.ring.depth()).filter_map(move |i| {
            let slot = &h.slots[i].0;
            let st = slot.state.load(Ordering::Acquire);
            let sibling_holds = st & siblings != 0 && own != Some(i);
            (st & WRITING == 0 && st & pending != 0 && !sibling_holds)
                .then(|| (i, st, slot.seq.load(Ordering::Relaxed)))
        })
    }

    /// Give up the frame in slot `i`, seen in state `st`, which we will never read. Only the
    /// exact state seen: a slot rewritten meanwhile holds a newer frame.
    fn give_up(&self, i: usize, st: u64) -> bool {
        let pending = header::pending_bit(self.index);
        let slot = &self.ring.header().slots[i].0;
        slot.state.compare_exchange(st, st & !pending, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// A frame was given up: a producer waiting for its slot may go on.
    fn wake_producer(&self) {
        self.ring.wake(Side::Producer);
    }

    /// Claim the frame in slot `i`, seen in state `st`; `None` if the slot changed since.
    fn claim(&self, i: usize, st: u64) -> Option<ReadSlot> {
        let slot = &self.ring.header().slots[i].0;
        // Acquire: pairs with the producer's Release publish of this exact state, so the
        // frame and metadata are visible; failing means the slot changed under us.
        slot.state
            .compare_exchange(st, st | header::claim_bit(self.index), Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: our claim keeps the producer out of this slot until we release it.
        let meta = unsafe { *slot.meta.get() };
        Some(ReadSlot {
            ring: self.ring.clone(),
            consumer: self.index,
            index: i,
            meta,
            read: true,
            held: self.waiter.held_wakes().cloned(),
        })
    }

    // Fan-in (`stage::inputs`): a stage with several inputs takes the frame with one exact
    // sequence number from each. These survey what a ring can still deliver, claim one
    // number, and wait for a number not yet published.

    /// Whether this consumer takes the newest frame (`latest`) rather than the oldest.
    pub fn is_latest(&self) -> bool {
        self.latest
    }

    /// The sequence number this consumer wants next: one past the last frame it took.
    pub fn next_seq(&self) -> u64 {
        self.expected
    }

    /// What this ring can still deliver to us at or after `from`, as one scan sees it: the
    /// frames published and still pending for us, and the least number a frame published
    /// later can have (none once the stream is closed). A frame in `ready` may still be
    /// overwritten (`drop_oldest`, `latest`) until it is claimed; a number below `future_from`
    /// that is not in `ready` is gone for good.
    #[cfg(test)]
    pub fn offer(&self, from: u64) -> Result<Offer, LinkError> {
        self.offer_holding(from, None)
    }

    /// As [`Consumer::offer`], for a consumer that holds slot `own` claimed already: a replica
    /// sees its own claim under the shared index as its, not a sibling's.
    pub fn offer_holding(&self, from: u64, own: Option<usize>) -> Result<Offer, LinkError> {
        let h = self.ring.header();
        let p = &h.producer.0;
        // Acquire, before the scan: a closed stream's every frame is visible to it.
        let closed = match p.closed.load(Ordering::Acquire) {
            ABORTED => return Err(LinkError::Aborted),
            OPEN => false,
            _ => true,
        };
        // Acquire, before the scan: every frame numbered below this was published before the
        // scan began, so the scan sees it unless it was overwritten (or given up) already.
        let seq_end = p.seq_end.load(Ordering::Acquire);
        let mut offer =
            Offer { seqs: [0; MAX_SLOTS], len: 0, future_from: (!closed).then_some(seq_end.max(from)), seq_end };
        for (_, st, seq) in self.pending_slots(own) {
            // A number read while the slot is being rewritten belongs to no published state.
            if seq >= from && same_frame(st, seq) {
                offer.seqs[offer.len] = seq;
                offer.len += 1;
            }
        }
        offer.seqs[..offer.len].sort_unstable();
        Ok(offer)
    }

    /// Claim the frame numbered exactly `seq` if the ring holds it for us, giving up every
    /// older frame still pending for us (as `acquire` does, so a `block` producer never waits
    /// for a frame we will not read). The frame is not counted as received until `take`;
    /// releasing it untaken gives it up, and it is counted as dropped with the next frame taken.
    pub fn claim_seq(&self, seq: u64) -> Option<ReadSlot> {
        let claim = header::claim_bit(self.index);
        loop {
            let mut found = None;
            let mut gave_up = false;
            for (i, st, s) in self.pending_slots(None) {
                if st & claim != 0 || !same_frame(st, s) {
                    continue;
                }
                if s < seq {
                    if !self.keeps(s) {
                        gave_up |= self.give_up(i, st);
                    }
                } else if s == seq {
                    found = Some((i, st));
                }
            }
            if gave_up {
                self.wake_producer();
            }
            let (i, st) = found?;
            if let Some(slot) = self.claim(i, st) {
                return Some(slot);
            }
        }
    }

    /// Count a frame claimed with `claim_seq` as received, and every frame published between
    /// the last one taken and it as dropped (by publish ordinal, as `acquire` counts).
    pub fn take(&mut self, slot: &ReadSlot) {
        // A replica's own counts may lag its siblings' takes (an owed frame taken again).
        self.catch_up();
        let c = &self.ring.header().consumers[self.index].0;
        // Every frame published between the last we got and this one was lost to us:
        // overwritten (drop_oldest), skipped (latest), passed over to align inputs, or
        // taken back by the host from a producer that died.
        c.dropped.fetch_add(slot.meta.ordinal.saturating_sub(self.next_ordinal), Ordering::Relaxed);
        c.received.fetch_add(1, Ordering::Relaxed);
        self.next_ordinal = self.next_ordinal.max(slot.meta.ordinal + 1);
        // Never backwards: a replica may take a frame again that a sibling died holding.
        self.expected = self.expected.max(slot.meta.seq + 1);
        // Where a restarted process of this stage carries on from; a claimed frame numbered
        // below `next_seq` was taken (the host counts it lost if this process dies with it),
        // one at or above it was not (the host gives it back to the ring).
        c.next_ordinal.store(self.next_ordinal, Ordering::Relaxed);
        c.next_seq.store(self.expected, Ordering::Release);
    }

    /// The stream ended for this consumer: every frame published on the ring that it never
    /// took (passed over to align with an input that ended, given up after its producer
    /// died) is dropped. Counted once however many replicas share the consumer: the shared
    /// publish ordinal moves past them first.
    pub fn settle_at_end(&mut self) {
        let h = self.ring.header();
        let c = &h.consumers[self.index].0;
        let published = h.producer.0.published.load(Ordering::Acquire);
        let before = c.next_ordinal.fetch_max(published, Ordering::AcqRel);
        self.next_ordinal = self.next_ordinal.max(published);
        c.dropped.fetch_add(published.saturating_sub(before), Ordering::Relaxed);
    }

    /// Whether the ring published a frame or closed since `seen` was taken.
    pub fn changed_since(&self, seen: &Offer) -> bool {
        let p = &self.ring.header().producer.0;
        seen.future_from.is_none()
            || p.closed.load(Ordering::Acquire) != OPEN
            || p.seq_end.load(Ordering::Acquire) != seen.seq_end
    }

    /// Wait until the ring publishes a frame or closes after `seen` was taken, or until
    /// `elsewhere` says another input did. `Aborted` when the run is aborted, `TimedOut` at
    /// `deadline`.
    pub fn wait_for_change(
        &self,
        seen: &Offer,
        deadline: Option<Instant>,
        mut elsewhere: impl FnMut() -> bool,
    ) -> Result<(), LinkError> {
        let p = &self.ring.header().producer.0;
        self.waiter.wait(&p.publish_futex, &p.consumers_sleeping, deadline, || {
            if self.ring.is_aborted() {
                return Some(Err(LinkError::Aborted));
            }
            (self.changed_since(seen) || elsewhere()).then_some(Ok(()))
        })?
    }
}

/// What one ring can still deliver to one consumer, as one scan saw it ([`Consumer::offer`]).
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    seqs: [u64; MAX_SLOTS],
    len: usize,
    /// Every frame published after the scan is numbered at least this; `None` once the stream
    /// is closed (nothing more will come).
    pub future_from: Option<u64>,
    /// The producer's `seq_end` when the scan began.
    seq_end: u64,
}

impl Offer {
    /// Sequence numbers of the frames published and still pending for us, ascending.
    pub fn ready(&self) -> &[u64] {
        &self.seqs[..self.len]
    }

    /// Whether the ring can still deliver the frame numbered `seq`: it holds it, or may
    /// publish it later.
    pub fn can_deliver(&self, seq: u64) -> bool {
        self.ready().binary_search(&seq).is_ok() || self.future_from.is_some_and(|from| seq >= from)
    }

    /// An offer as a scan could have seen it (tests of what is made of offers).
    #[cfg(test)]
    pub fn for_test(ready: &[u64], future_from: Option<u64>) -> Offer {
        let mut offer = Offer { seqs: [0; MAX_SLOTS], len: ready.len(), future_from, seq_end: 0 };
        offer.seqs[..ready.len()].copy_from_slice(ready);
        offer.seqs[..ready.len()].sort_unstable();
        offer
    }
}

/// Whether the state word `st` is the published state of the frame numbered `seq` (a number
/// read while the slot was being rewritten is not).
fn same_frame(st: u64, seq: u64) -> bool {
    // The generation bits sit above WRITING; the published state has nothing below them.
    st & !(2 * WRITING - 1) == header::published_state(seq, 0)
}

#[cfg(test)]
mod tests {
    //! The protocol under stress: threads stand in for processes, each end maps the memfd on
    //! its own, and every frame's bytes carry its sequence number so a torn, repeated,
    //! reordered or lost frame is caught.
    use std::os::fd::AsFd;
    use std::thread;

    use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

    use super::*;
    use crate::link::header::{POLICY_DROP_OLDEST, POLICY_LATEST};

    fn ring(depth: u32, policies: &[u8]) -> RingMap {
        let format = FrameFormat::new(PixelFormat::Gray8, 64, 64);
        let layout = FrameLayout::for_format(format).unwrap();
        let params = RingParams { format, layout, depth, policies: policies.to_vec(), host_data: true };
        RingMap::create("gpuipc-test-ring", &params).unwrap()
    }

    /// The producer's end of `map`.
    fn reopen(map: &RingMap) -> RingMap {
        map.reopen(FrameAccess::Write)
    }

    /// A consumer's end of `map`: frames read-only.
    fn reopen_to_read(map: &RingMap) -> RingMap {
        map.reopen(FrameAccess::Read)
    }

    fn fill(map: &RingMap, slot: usize, seq: u64) {
        let (ptr, len) = map.slot_data(slot).unwrap();
        // SAFETY (test): the producer owns the slot while writing.
        #[allow(unsafe_code)]
        let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, len as usize) };
        for chunk in bytes.chunks_exact_mut(8) {
            chunk.copy_from_slice(&seq.to_le_bytes());
        }
    }

    fn check(map: &RingMap, slot: &ReadSlot) {
        let (ptr, len) = map.slot_data(slot.index()).unwrap();
        // SAFETY (test): the consumer's claim keeps the producer out.
        #[allow(unsafe_code)]
        let bytes = unsafe { std::slice::from_raw_parts(ptr, len as usize) };
        for chunk in bytes.chunks_exact(8) {
            assert_eq!(u64::from_le_bytes(chunk.try_into().unwrap()), slot.meta().seq, "torn frame");
        }
    }

    /// Run `frames` through a ring; returns each consumer's received sequence numbers.
    fn pump(depth: u32, policies: &[u8], frames: u64, slow: &[bool]) -> (Vec<Vec<u64>>, Vec<u64>) {
        pump_stride(depth, policies, frames, slow, 1)
    }

    /// As `pump`, publishing sequence numbers 0, stride, 2 * stride, ... (a stage after a
    /// dropping link passes on the numbers it got).
    fn pump_stride(depth: u32, policies: &[u8], frames: u64, slow: &[bool], stride: u64) -> (Vec<Vec<u64>>, Vec<u64>) {
        let map = ring(depth, policies);
        let waiter = Waiter::new(5);
        let consumers: Vec<_> = (0..policies.len())
            .map(|c| {
                let mut consumer = Consumer::new(reopen_to_read(&map), c, waiter.clone()).unwrap();
                let slow = slow[c];
                thread::spawn(move || {
                    let mut got = Vec::new();
                    let deadline = Some(Instant::now() + std::time::Duration::from_secs(60));
                    while let Some(slot) = consumer.acquire(0, deadline).unwrap() {
                        check(consumer.ring(), &slot);
                        got.push(slot.meta().seq);
                        if slow {
                            let t = Instant::now();
                            while t.elapsed().as_micros() < 50 {
                                std::hint::spin_loop();
                            }
                        }
                        drop(slot);
                    }
                    (got, consumer.dropped())
                })
            })
            .collect();
        let mut producer = Producer::new(reopen(&map), waiter);
        for seq in (0..frames).map(|i| i * stride) {
            let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
            fill(producer.ring(), slot.index(), seq);
            producer.publish(slot, seq, seq * 10);
        }
        producer.close();
        consumers.into_iter().map(|t| t.join().unwrap()).unzip()
    }

    #[test]
    fn replicas_sharing_a_consumer_each_take_different_frames_and_together_all() {
        for replicas in [1, 2, 4] {
            let map = ring(4, &[POLICY_BLOCK]);
            let waiter = Waiter::new(5);
            // Stands in for the replicas' take lock (`queue`): acquire to take, one at a time.
            let take_lock = Arc::new(std::sync::Mutex::new(()));
            let takers: Vec<_> = (0..replicas)
                .map(|_| {
                    let mut consumer = Consumer::new_shared(reopen_to_read(&map), 0, waiter.clone(), None).unwrap();
                    let take_lock = take_lock.clone();
                    thread::spawn(move || {
                        let mut got = Vec::new();
                        let deadline = Some(Instant::now() + std::time::Duration::from_secs(60));
                        loop {
                            let slot = {
                                let _taking = take_lock.lock().unwrap();
                                consumer.acquire(0, deadline).unwrap()
                            };
                            let Some(slot) = slot else { break };
                            check(consumer.ring(), &slot);
                            got.push(slot.meta().seq);
                            drop(slot);
                        }
                        (got, consumer.dropped())
                    })
                })
                .collect();
            let mut producer = Producer::new(reopen(&map), waiter);
            for seq in 0..2000 {
                let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
                fill(producer.ring(), slot.index(), seq);
                producer.publish(slot, seq, seq);
            }
            producer.close();
            let results: Vec<(Vec<u64>, u64)> = takers.into_iter().map(|t| t.join().unwrap()).collect();
            let mut all: Vec<u64> = results.iter().flat_map(|(got, _)| got.iter().copied()).collect();
            for (got, dropped) in &results {
                assert!(got.windows(2).all(|w| w[0] < w[1]), "{replicas} replicas: one took out of order: {got:?}");
                assert_eq!(*dropped, 0);
            }
            all.sort_unstable();
            assert_eq!(all, (0..2000).collect::<Vec<u64>>(), "{replicas} replicas: every frame taken exactly once");
        }
    }

    #[test]
    fn producers_taking_turns_publish_one_stream() {
        // One slot each: the turn's holder always has its own slot written.
        let map = ring(3, &[POLICY_BLOCK]);
        let waiter = Waiter::new(5);
        let mut consumer = Consumer::new(reopen_to_read(&map), 0, waiter.clone()).unwrap();
        // Stands in for the replicas' turn (`queue`): producer r publishes the numbers n with
        // n % 3 == r, each when the turn reaches it; each writes its slot before its turn.
        let turn = Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
        let producers: Vec<_> = (0..3u64)
            .map(|r| {
                let mut producer =
                    Producer::with_slots(reopen(&map), waiter.clone(), r as usize..r as usize + 1).unwrap();
                let turn = turn.clone();
                thread::spawn(move || {
                    for seq in (r..600).step_by(3) {
                        let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
                        fill(producer.ring(), slot.index(), seq);
                        let (lock, changed) = &*turn;
                        let mut now = changed.wait_while(lock.lock().unwrap(), |t| *t != seq).unwrap();
                        producer.publish(slot, seq, seq);
                        *now += 1;
                        changed.notify_all();
                    }
                })
            })
            .collect();
        let mut got = Vec::new();
        while got.len() < 600 {
            let slot = consumer.acquire(0, Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap().unwrap();
            check(consumer.ring(), &slot);
            got.push(slot.meta().seq);
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(got, (0..600).collect::<Vec<u64>>());
        assert_eq!(consumer.dropped(), 0, "the publish ordinals run on across producers");
    }

    #[test]
    fn block_consumers_get_every_frame_in_order_at_every_depth() {
        for depth in [1, 2, 3, 8] {
            let (got, dropped) = pump(depth, &[POLICY_BLOCK; 3], 10_000, &[false, false, true]);
            for (c, seqs) in got.iter().enumerate() {
                assert_eq!(seqs.len(), 10_000, "depth {depth} consumer {c}");
                assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64), "depth {depth} consumer {c}");
                assert_eq!(dropped[c], 0);
            }
        }
    }

    #[test]
    fn sequence_numbers_with_gaps_are_not_mistaken_for_drops() {
        let (got, dropped) = pump_stride(2, &[POLICY_BLOCK; 2], 5_000, &[false, true], 3);
        for seqs in got {
            assert_eq!(seqs, (0..5_000).map(|i| i * 3).collect::<Vec<u64>>());
        }
        assert_eq!(dropped, [0, 0]);
    }

    #[test]
    fn dropping_consumers_account_for_every_frame_and_keep_order() {
        for policy in [POLICY_DROP_OLDEST, POLICY_LATEST] {
            let frames = 5_000;
            let (got, dropped) = pump(3, &[policy, POLICY_BLOCK], frames, &[true, false]);
            let seqs = &got[0];
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "policy {policy}: out of order");
            assert_eq!(*seqs.last().unwrap(), frames - 1, "policy {policy}: the last frame is never lost");
            assert_eq!(seqs.len() as u64 + dropped[0], frames, "policy {policy}");
            assert_eq!(got[1].len() as u64, frames, "the block consumer beside it loses nothing");
        }
    }

    #[test]
    fn abort_wakes_a_waiting_consumer_and_producer() {
        let map = ring(1, &[POLICY_BLOCK]);
        let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
        let waiting = thread::spawn(move || consumer.acquire(0, None));
        let mut producer = Producer::new(reopen(&map), Waiter::new(0));
        let slot = producer.acquire(None).unwrap();
        producer.publish(slot, 0, 0);
        // The consumer holds frame 0 (its guard is kept until the end); the ring of one is full.
        let held = waiting.join().unwrap().unwrap().expect("frame 0");
        let blocked = thread::spawn(move || producer.acquire(None).map(|_| ()));
        map.abort();
        assert!(matches!(blocked.join().unwrap(), Err(LinkError::Aborted)));
        drop(held);
    }

    #[test]
    fn a_closed_producer_waits_until_its_consumers_released_every_frame() {
        let map = ring(2, &[POLICY_BLOCK]);
        let mut producer = Producer::new(reopen(&map), Waiter::new(0));
        for seq in 0..2 {
            let slot = producer.acquire(None).unwrap();
            producer.publish(slot, seq, 0);
        }
        producer.close();
        let (events, order) = std::sync::mpsc::channel();
        let (go, wait_for_go) = std::sync::mpsc::channel::<()>();
        let consumer_events = events.clone();
        let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
        let reader = thread::spawn(move || {
            let first = consumer.acquire(0, None).unwrap().unwrap();
            drop(first);
            let last = consumer.acquire(0, None).unwrap().unwrap();
            wait_for_go.recv().unwrap();
            consumer_events.send("releasing the last frame").unwrap();
            drop(last);
            assert!(consumer.acquire(0, None).unwrap().is_none());
        });
        let drainer = thread::spawn(move || {
            producer.wait_drained(None).unwrap();
            events.send("drained").unwrap();
        });
        go.send(()).unwrap();
        assert_eq!(order.recv().unwrap(), "releasing the last frame");
        assert_eq!(order.recv().unwrap(), "drained");
        reader.join().unwrap();
        drainer.join().unwrap();
    }

    #[test]
    fn a_deadline_ends_a_wait_for_a_silent_peer() {
        let map = ring(2, &[POLICY_BLOCK]);
        let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
        let deadline = Some(Instant::now() + std::time::Duration::from_millis(20));
        assert!(matches!(consumer.acquire(0, deadline), Err(LinkError::TimedOut)));
    }

    /// Frames in host memory are a memfd of their own: the producer writes them, each consumer
    /// reads them through a mapping it cannot make writable and holds no descriptor of them,
    /// and the descriptor consumers are given refuses a writable shared mapping.
    #[test]
    fn consumers_read_the_frames_the_producer_wrote_through_memory_they_cannot_write() {
        use rustix::io::Errno;
        use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

        let map = ring(2, &[POLICY_BLOCK, POLICY_BLOCK]);
        assert_eq!(map.fds_for(FrameAccess::Write).len(), 2, "control block and data memfd");
        let mut producer = Producer::new(reopen(&map), Waiter::new(0));
        let mut consumers: Vec<_> =
            (0..2).map(|c| Consumer::new(reopen_to_read(&map), c, Waiter::new(0)).unwrap()).collect();
        let slot = producer.acquire(None).unwrap();
        fill(producer.ring(), slot.index(), 41);
        producer.publish(slot, 41, 0);
        let page = rustix::param::page_size();
        for consumer in &mut consumers {
            let slot = consumer.acquire(0, None).unwrap().expect("frame 41");
            check(consumer.ring(), &slot);
            assert_eq!(slot.meta().seq, 41);
            assert_eq!(consumer.ring().fds_for(FrameAccess::Read).len(), 1, "no descriptor of the frames kept");
            let (ptr, _) = consumer.ring().slot_data(slot.index()).unwrap();
            // SAFETY (test): the page holding the frame, in the consumer's mapping; if the
            // kernel allowed it, nothing would write there.
            let made_writable = unsafe {
                rustix::mm::mprotect(
                    (ptr as usize / page * page) as *mut _,
                    page,
                    MprotectFlags::READ | MprotectFlags::WRITE,
                )
            };
            assert_eq!(made_writable.err(), Some(Errno::ACCESS));
        }
        let given = map.fds_for(FrameAccess::Read)[1];
        // SAFETY (test): a fresh mapping, if the kernel made one; it is not used.
        let writable = unsafe {
            rustix::mm::mmap(std::ptr::null_mut(), page, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, given, 0)
        };
        assert_eq!(writable.err(), Some(Errno::ACCESS));
    }

    #[test]
    fn a_bad_control_block_is_refused() {
        let shm = crate::link::shm::SharedMemory::create("gpuipc-test-bad", 1 << 20).unwrap();
        let fds = RingFds { control: shm.as_fd().try_clone_to_owned().unwrap(), data: None };
        assert!(matches!(RingMap::open(fds, FrameAccess::Write), Err(LinkError::Mismatch { field: "magic", .. })));
    }

    #[test]
    fn claiming_one_number_gives_up_older_frames_and_counts_them_once() {
        let map = ring(2, &[POLICY_BLOCK]);
        let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
        let mut producer = Producer::new(reopen(&map), Waiter::new(0));
        let soon = || Some(Instant::now() + std::time::Duration::from_secs(10));
        for seq in [0, 1] {
            let slot = producer.acquire(soon()).unwrap();
            producer.publish(slot, seq, 0);
        }
        let offer = consumer.offer(0).unwrap();
        assert_eq!((offer.ready(), offer.future_from), (&[0, 1][..], Some(2)));
        let one = consumer.claim_seq(1).unwrap();
        assert_eq!(one.meta.seq, 1);
        assert!(consumer.claim_seq(1).is_none(), "claimed already");
        // Frame 0 was given up on the way: the `block` producer has a slot again.
        let slot = producer.acquire(soon()).unwrap();
        producer.publish(slot, 2, 0);
        // Let go untaken (a fan-in chose another number): counted with the next frame taken.
        drop(one);
        let two = consumer.claim_seq(2).unwrap();
        consumer.take(&two);
        assert_eq!((consumer.dropped(), consumer.next_seq()), (2, 3));
        drop(two);
        assert!(consumer.claim_seq(3).is_none(), "not published yet");
        producer.close();
        let offer = consumer.offer(0).unwrap();
        assert_eq!((offer.ready(), offer.future_from), (&[][..], None));
        assert!(consumer.changed_since(&offer));
        map.abort();
        assert!(matches!(consumer.offer(0), Err(LinkError::Aborted)));
    }

    #[test]
    fn a_wait_for_change_ends_on_a_publish_elsewhere_and_on_abort() {
        let map = ring(2, &[POLICY_LATEST]);
        let consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
        let seen = consumer.offer(0).unwrap();
        assert!(!consumer.changed_since(&seen));
        let deadline = Some(Instant::now() + std::time::Duration::from_millis(20));
        assert!(matches!(consumer.wait_for_change(&seen, deadline, || false), Err(LinkError::TimedOut)));
        consumer.wait_for_change(&seen, None, || true).unwrap();
        let waiting = thread::spawn(move || consumer.wait_for_change(&seen, None, || false));
        map.abort();
        assert!(matches!(waiting.join().unwrap(), Err(LinkError::Aborted)));
    }
}
