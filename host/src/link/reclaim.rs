//! Taking back a ring's slots from an end that died. The host does this, once the dead
//! process is reaped (its pidfd said so), while the live ends keep using the ring: every
//! change is a compare-and-swap on a slot's state word, as the live ends make them, and every
//! sleeper is woken after.
//!
//! - a dead producer: the slot it was writing is emptied (nothing was published from it) and
//!   `seq_end` / `published` are repaired in case it died between its publish stores, so a
//!   restarted producer continues after the last frame consumers can see;
//! - a dead consumer: its claims are dropped, and the frames it held are returned so the host
//!   can tell which were lost with it; frames it had not taken yet stay pending for it, and a
//!   restarted consumer takes them;
//! - both ends of a GPU ring dead (they restart as a group): every slot is emptied, since a
//!   frame published on a GPU may never have been written; consumers count the frames they
//!   missed by the gap in publish ordinals, as for any drop.
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;

use super::header::{self, WRITING};
use super::ring::RingMap;
use super::wait::wake_all;

impl RingMap {
    /// The producer died.
    pub fn reclaim_producer(&self) {
        self.reclaim_producer_slots(0..self.depth());
    }

    /// A producer writing `slots` of the ring died (a replica, its own part): the slot it was
    /// writing is emptied; its siblings' are theirs.
    pub fn reclaim_producer_slots(&self, slots: std::ops::Range<usize>) {
        let h = self.header();
        for i in slots {
            let slot = &h.slots[i].0;
            // Only the dead producer sets WRITING, so nobody else changes this word now.
            let _ = slot.state.compare_exchange(WRITING, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
        self.repair_publish_counters();
        self.bump_epoch_and_wake();
    }

    /// Consumer `c` died: drop its claims. A frame it had taken (numbered below its
    /// `next_seq`) is done with; one it had only claimed (a fan-in waiting for its other
    /// inputs) stays pending for the restarted consumer.
    pub fn reclaim_consumer(&self, c: usize) {
        let h = self.header();
        let next_seq = h.consumers[c].0.next_seq.load(Ordering::Acquire);
        for i in 0..self.depth() {
            let slot = &h.slots[i].0;
            let mut st = slot.state.load(Ordering::Acquire);
            while header::claims(st) & header::claim_bit(c) != 0 {
                let seq = slot.seq.load(Ordering::Relaxed);
                let taken = seq < next_seq;
                let bits = if taken { header::claim_bit(c) | header::pending_bit(c) } else { header::claim_bit(c) };
                match slot.state.compare_exchange(st, st & !bits, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(now) => st = now,
                }
            }
        }
        self.consumers_changed();
    }

    /// The ring's consumer processes changed: one died (its `released` events went with it)
    /// or a new one is about to read. A GPU ring's producer waits, before it reuses a slot,
    /// for the objects the host sends it for the new set.
    pub fn consumers_changed(&self) {
        self.header().producer.0.consumer_epoch.fetch_add(1, Ordering::AcqRel);
        self.bump_epoch_and_wake();
    }

    /// See [`RingMap::consumers_changed`].
    pub fn consumer_epoch(&self) -> u32 {
        self.header().producer.0.consumer_epoch.load(Ordering::Acquire)
    }

    /// Give up the frame numbered `seq` for consumer `c`, unclaimed: nobody will read it.
    pub fn give_up_pending(&self, c: usize, seq: u64) {
        let h = self.header();
        for i in 0..self.depth() {
            let slot = &h.slots[i].0;
            let mut st = slot.state.load(Ordering::Acquire);
            while st & header::pending_bit(c) != 0
                && st & header::claim_bit(c) == 0
                && slot.seq.load(Ordering::Relaxed) == seq
            {
                match slot.state.compare_exchange(st, st & !header::pending_bit(c), Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => break,
                    Err(now) => st = now,
                }
            }
        }
        self.bump_epoch_and_wake();
    }

    /// Sequence numbers of the frames claimed under consumer index `c`.
    pub fn claimed_seqs(&self, c: usize) -> Vec<u64> {
        let h = self.header();
        (0..self.depth())
            .filter(|&i| h.slots[i].0.state.load(Ordering::Acquire) & header::claim_bit(c) != 0)
            .map(|i| h.slots[i].0.seq.load(Ordering::Relaxed))
            .collect()
    }

    /// Count `n` frames dropped for consumer `c` (the host giving up a dead replica's frame).
    pub fn count_dropped(&self, c: usize, n: u64) {
        self.header().consumers[c].0.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// End the stream as its producer would (the host, for replicas that all died for good).
    pub fn close_for_producer(&self) {
        let p = &self.header().producer.0;
        let closed = &self.header().stream.0.closed;
        let _ = closed.compare_exchange(header::OPEN, header::END_OF_STREAM, Ordering::Release, Ordering::Relaxed);
        wake_all(&p.publish_futex, &p.consumers_sleeping);
    }

    /// A replica sharing consumer index `c` died holding the frame numbered `seq`: its claim
    /// goes, and with `keep_pending` the frame stays for a sibling to take again (owed), else
    /// it is given up (dropped). Siblings' claims under the same index stay.
    pub fn release_replica_claim(&self, c: usize, seq: u64, keep_pending: bool) {
        let h = self.header();
        let bits = header::claim_bit(c) | if keep_pending { 0 } else { header::pending_bit(c) };
        for i in 0..self.depth() {
            let slot = &h.slots[i].0;
            let mut st = slot.state.load(Ordering::Acquire);
            while st & header::claim_bit(c) != 0 && slot.seq.load(Ordering::Relaxed) == seq {
                match slot.state.compare_exchange(st, st & !bits, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(now) => st = now,
                }
            }
        }
        self.bump_epoch_and_wake();
    }

    /// The producer of a GPU ring died while its consumers live: a frame it published may
    /// never have been written (its GPU work dies with it), so every frame no consumer holds
    /// yet is given up; consumers count them as dropped by the gap in publish ordinals.
    pub fn discard_unclaimed(&self) {
        self.discard_unclaimed_slots(0..self.depth());
    }

    /// As [`RingMap::discard_unclaimed`], for a producer that wrote `slots` (a replica's part).
    pub fn discard_unclaimed_slots(&self, slots: std::ops::Range<usize>) {
        let h = self.header();
        for i in slots {
            let slot = &h.slots[i].0;
            let mut st = slot.state.load(Ordering::Acquire);
            while header::holds_frame(st) && header::claims(st) == 0 && header::pendings(st) != 0 {
                match slot.state.compare_exchange(st, st & !(0xffff << 16), Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => break,
                    Err(now) => st = now,
                }
            }
        }
        self.bump_epoch_and_wake();
    }

    /// Every end of the ring died: empty every slot. The counters stay, so the restarted
    /// ends carry on from them.
    pub fn reset_slots(&self) {
        self.repair_publish_counters();
        let h = self.header();
        for i in 0..self.depth() {
            h.slots[i].0.state.store(0, Ordering::Release);
        }
        self.bump_epoch_and_wake();
    }

    /// `seq_end` and `published` cover every frame a slot shows as published: a producer
    /// killed between its slot store and its counter stores leaves them one frame behind.
    fn repair_publish_counters(&self) {
        let h = self.header();
        let p = &h.producer.0;
        for i in 0..self.depth() {
            let slot = &h.slots[i].0;
            if !header::holds_frame(slot.state.load(Ordering::Acquire)) {
                continue;
            }
            // SAFETY: a published slot's metadata is written only by a producer that holds
            // it WRITING; the producer is dead, so nothing writes it now.
            let meta = unsafe { *slot.meta.get() };
            p.seq_end.fetch_max(meta.seq + 1, Ordering::AcqRel);
            p.published.fetch_max(meta.ordinal + 1, Ordering::AcqRel);
        }
    }

    fn bump_epoch_and_wake(&self) {
        let h = self.header();
        h.producer.0.epoch.fetch_add(1, Ordering::AcqRel);
        wake_all(&h.producer.0.publish_futex, &h.producer.0.consumers_sleeping);
        wake_all(&h.release.0.release_futex, &h.release.0.producer_sleeping);
    }
}
