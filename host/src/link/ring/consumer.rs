//! A consuming end of a ring: it claims the frame it wants next (the oldest, or the newest
//! for `latest`), holds it through a guard ([`ReadSlot`]) that releases it when dropped, and
//! counts the frames it missed. For fan-in it can also survey what the ring can still deliver
//! ([`Offer`]) and claim one exact sequence number; replicas of one stage share one consumer.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::RingMap;
use crate::link::error::LinkError;
use crate::link::header::{self, ABORTED, END_OF_STREAM, FrameMeta, MAX_SLOTS, OPEN, POLICY_LATEST, SlotMeta, WRITING};
use crate::link::queue::QueueMap;
use crate::link::wakes::{HeldWakes, RingSides, Side, Waiter, wake_side};

/// A frame a consumer holds. Dropping the guard releases it: the slot may be reused once
/// every `block` consumer released it too.
pub struct ReadSlot {
    ring: Arc<RingMap>,
    consumer: usize,
    index: usize,
    meta: FrameMeta,
    /// Whether letting go of it also says the frame was read (its pending bit goes).
    read: bool,
    /// The consumer's held-back wake-ups, which the producer's wake-up goes through.
    held: Option<Arc<HeldWakes>>,
}

impl ReadSlot {
    pub fn index(&self) -> usize {
        self.index
    }

    /// The frame's metadata, copied when it was claimed (its format and layout are the ring's:
    /// `RingMap::format`, `RingMap::layout`).
    pub fn meta(&self) -> &FrameMeta {
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
    queue: Option<Arc<QueueMap>>,
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
        queue: Option<Arc<QueueMap>>,
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

    /// Count a frame taken from this link as lost (made by a producer process that died).
    pub fn count_lost(&self) {
        self.ring.count_lost(self.index);
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
        let found = self.waiter.wait_quick(&p.publish_futex, &p.consumers_sleeping, deadline, |thorough| {
            match h.stream.0.closed.load(Ordering::Acquire) {
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
            // The full scan reads every slot's line and the producer's, lines the producer is
            // writing: each read costs it a miss at its next store. At full speed the frame
            // wanted comes where the producer puts it, so a quick poll of a spin looks there
            // only; what only the scan finds (a frame after a gap, given-up frames, the
            // newest for `latest`) waits for the next thorough poll, a few polls on.
            if !thorough && !self.latest {
                return self.claim_in_place(want).map(|slot| Ok(Some(slot)));
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
        if let Some(slot) = self.claim_in_place(want) {
            return Scan::Claimed(slot);
        }
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

    /// The frame numbered exactly `want`, claimed where a lone producer puts it (slot `want`
    /// modulo the depth: `Producer::acquire` prefers it) if it is there, published and pending
    /// for us; `None` sends the caller to the full scan. It is the frame the scan would claim
    /// (the oldest at or after `want`, published before any scan began), so an in-order
    /// consumer at full speed reads one slot's state line instead of every slot's, which the
    /// producer is rewriting. Frames older than `want` that are still pending for us are
    /// given up by the next full scan instead of this one: one comes whenever this misses,
    /// at the latest when the producer waits for a slot they hold. Not for `latest`, which
    /// wants the newest frame.
    fn claim_in_place(&self, want: u64) -> Option<ReadSlot> {
        if self.latest {
            return None;
        }
        let i = (want % self.ring.depth() as u64) as usize;
        let slot = &self.ring.header().slots[i].0;
        let st = slot.state.load(Ordering::Acquire);
        // A sibling replica's claim under our index: that frame is its, not ours.
        let siblings = if self.shared { header::claim_bit(self.index) } else { 0 };
        let ours = st & WRITING == 0 && st & header::pending_bit(self.index) != 0 && st & siblings == 0;
        if !ours || !same_frame(st, want) || slot.seq.load(Ordering::Relaxed) != want {
            return None;
        }
        self.claim(i, st)
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
        let meta = unsafe { SlotMeta::read_frame(slot.meta.get()) };
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
        let closed = match h.stream.0.closed.load(Ordering::Acquire) {
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
                        tracing::debug!("claiming frame {seq}: frame {s} passed over, given up");
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
        // (Most frames follow the last one taken: no locked add of nothing.)
        let missed = slot.meta.ordinal.saturating_sub(self.next_ordinal);
        if missed > 0 {
            tracing::debug!(
                "frame {} (ordinal {}) taken: {missed} missed since ordinal {}",
                slot.meta.seq,
                slot.meta.ordinal,
                self.next_ordinal
            );
            c.dropped.fetch_add(missed, Ordering::Relaxed);
        }
        // One writer at a time (this process, or the replica holding the take lock; the host
        // only reads it): a load and a store, no locked add.
        c.received.store(c.received.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
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
        if published > before {
            tracing::debug!("stream ended: {} frames published after ordinal {before} never taken", published - before);
        }
        c.dropped.fetch_add(published.saturating_sub(before), Ordering::Relaxed);
    }

    /// Whether the ring published a frame or closed since `seen` was taken.
    pub fn changed_since(&self, seen: &Offer) -> bool {
        let p = &self.ring.header().producer.0;
        seen.future_from.is_none()
            || self.ring.header().stream.0.closed.load(Ordering::Acquire) != OPEN
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
