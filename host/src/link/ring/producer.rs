//! The producing end of a ring: it takes a free slot (or, past non-blocking consumers, the
//! oldest frame's), writes the frame into it and publishes it; the slot is held through a
//! guard ([`WriteSlot`]) that gives it back unpublished if dropped.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::RingMap;
use crate::link::error::LinkError;
use crate::link::header::{self, END_OF_STREAM, FrameMeta, OPEN, POLICY_BLOCK, RingHeader, SlotMeta, WRITING};
use crate::link::wakes::{HeldWakes, RingSides, Side, Waiter, wake_side};

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
    /// (see [`crate::link::wait::Waiter::waking_ahead`]).
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
        let index = self.waiter.wait_quick(&r.release_futex, &r.producer_sleeping, deadline, |thorough| {
            if self.ring.is_aborted() {
                return Some(Err(LinkError::Aborted));
            }
            // The slots are taken in turn and read in order, so the preferred one, holding the
            // oldest frame, is the one to be freed next; a scan of every slot reads lines the
            // consumers are writing (each read costs them a miss), so a quick poll of a spin
            // looks at the preferred slot only (a slot freed out of turn waits for the next
            // thorough poll, a few polls on).
            let pick = if thorough {
                pick_write_slot(h, self.slots.clone(), preferred, block_mask)?
            } else {
                let st = h.slots[preferred].0.state.load(Ordering::Relaxed);
                (st & WRITING == 0 && header::claims(st) == 0 && header::pendings(st) == 0)
                    .then_some((preferred, st))?
            };
            let slot = &h.slots[pick.0].0;
            // Acquire: pairs with consumers' release of their claim, so their reads of the
            // old frame happen before we overwrite it.
            slot.state.compare_exchange(pick.1, WRITING, Ordering::Acquire, Ordering::Relaxed).ok().map(|_| Ok(pick.0))
        })??;
        Ok(WriteSlot { ring: self.ring.clone(), index, armed: true })
    }

    /// Publish the frame written into `slot` with sequence number `seq`, born at its stamp.
    #[cfg(test)]
    pub fn publish(&mut self, slot: WriteSlot, seq: u64, timestamp_ns: u64) {
        self.publish_born(slot, seq, timestamp_ns, timestamp_ns);
    }

    /// Publish the frame written into `slot` with sequence number `seq`; its source began it
    /// at `born_ns` (`SlotMeta::born_ns`).
    pub fn publish_born(&mut self, mut slot: WriteSlot, seq: u64, timestamp_ns: u64, born_ns: u64) {
        let h = self.ring.header();
        let s = &h.slots[slot.index].0;
        let p = &h.producer.0;
        // Producers taking turns (a stage's replicas) publish one at a time, so the shared
        // count is this publish's ordinal (Relaxed: the turn's hand-over orders it after the
        // previous publish); for a lone producer it equals its own count.
        self.published = self.published.max(p.published.load(Ordering::Relaxed));
        let frame = FrameMeta { seq, ordinal: self.published, timestamp_ns, born_ns, flags: self.generation };
        // SAFETY: the slot is ours (state WRITING): no consumer can claim it, so nobody reads
        // the metadata while we write it.
        unsafe { SlotMeta::write_frame(s.meta.get(), frame) };
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
        // Release: every publish above happens before a consumer sees the stream closed.
        let closed = &self.ring.header().stream.0.closed;
        let _ = closed.compare_exchange(OPEN, END_OF_STREAM, Ordering::Release, Ordering::Relaxed);
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
