//! Waking the sleepers of a ring, over the futex primitive of `super::wait`: a ring's two
//! [`Side`]s, each a futex word with its sleeper count ([`RingSides`], which the ring map
//! implements), and the wake-ups a stage holds back and sends in batches ([`HeldWakes`]).
//! [`Waiter`] is the waiter of a ring end, holding its stage's wake-ups back.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use super::wait::{HeldBack, wake_all};

/// The waiter of a ring end: its stage's held-back wake-ups ([`HeldWakes`]) go out before it
/// spins or sleeps, and the ends' wake-ups go through them ([`wake_side`]).
pub type Waiter = super::wait::Waiter<HeldWakes>;

/// Which sleepers of a ring: its consumers (woken by a publish, a close) or its producer
/// (woken by a release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Consumers,
    Producer,
}

/// What waking needs of a ring: the futex word and sleeper count of each side, and its depth
/// (a batch of held wake-ups is at most half of it).
pub trait RingSides: Send + Sync {
    /// The futex word and sleeper count of one side of the ring.
    fn futex(&self, side: Side) -> (&AtomicU32, &AtomicU32);

    /// Slots in the ring.
    fn depth(&self) -> usize;

    /// Tell every waiter on one side of the ring that something changed ([`wake_all`]).
    fn wake(&self, side: Side) {
        let (word, sleepers) = self.futex(side);
        wake_all(word, sleepers);
    }
}

/// Wake one side of `ring`: through `held` where the stage holds wake-ups back, else at once.
pub fn wake_side<R: RingSides + 'static>(held: Option<&Arc<HeldWakes>>, ring: &Arc<R>, side: Side) {
    match held {
        Some(held) => held.wake(ring, side),
        None => ring.wake(side),
    }
}

/// Wake-ups of sleeping neighbours that a stage holds back and sends in batches.
///
/// A futex wake-up costs both processes a system call and the sleeper a context switch, a few
/// µs of host time each. When the GPU is the bottleneck every stage's host runs ahead of it,
/// and the faster neighbours of the slowest host sleep and are woken once per frame, for
/// nothing: their GPU has frames queued anyway. Held back until `batch` of them are due (or
/// until this stage is about to sleep or spin itself: every [`Waiter`] of the stage sends them
/// first), a neighbour wakes once per `batch` frames and finds that many to do. A ring gets
/// at most half its slots' worth at a time, so the woken side never finds the ring drained.
///
/// A wake-up is never lost: the futex word still moves at once (a sleeper about to sleep
/// looks again), and a held one is sent before the holder waits for anything. The holder's
/// other waits are bounded: its driver calls wait only for GPU work already enqueued, which
/// does not depend on any host. Only stages whose `process` returns quickly may hold wake-ups
/// (cuda stages enqueue work; a cpu stage would hold its neighbours for a whole frame's work).
pub struct HeldWakes {
    batch: usize,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// The ring sides to wake, each once, with the wake-ups due there since the last batch.
    sides: Vec<(Arc<dyn RingSides>, Side, usize)>,
}

impl HeldWakes {
    /// Wake-ups sent `batch` at a time (at least 1: each at once), and at most half a ring's
    /// slots at a time on one ring.
    pub fn new(batch: usize) -> Arc<HeldWakes> {
        Arc::new(HeldWakes { batch: batch.max(1), held: Mutex::new(Held::default()) })
    }

    /// As [`wake_all`] on one side of `ring`, the system call held back until `batch` are due
    /// on one side; then every side's go out.
    pub fn wake<R: RingSides + 'static>(&self, ring: &Arc<R>, side: Side) {
        let (word, sleepers) = ring.futex(side);
        word.fetch_add(1, Ordering::SeqCst);
        if sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        // The same ring is the same address (a held one is a `dyn RingSides`).
        let this_side = |(r, s, _): &(Arc<dyn RingSides>, Side, usize)| {
            std::ptr::addr_eq(Arc::as_ptr(r), Arc::as_ptr(ring)) && *s == side
        };
        let at = match held.sides.iter().position(this_side) {
            Some(at) => at,
            None => {
                held.sides.push((ring.clone(), side, 0));
                held.sides.len() - 1
            }
        };
        held.sides[at].2 += 1;
        // At most half a ring's slots: the woken side then still has the other half to work on
        // (a producer woken with only free slots left, or a consumer woken with a full ring,
        // would find the holder stopped behind it).
        let ring_batch = (ring.depth() / 2).clamp(1, self.batch);
        if held.sides[at].2 >= ring_batch {
            Self::send(&mut held);
        }
    }

    /// Send every held wake-up now.
    pub fn flush(&self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        Self::send(&mut held);
    }

    fn send(held: &mut Held) {
        for (ring, side, _) in held.sides.drain(..) {
            ring.wake(side);
        }
    }
}

impl HeldBack for HeldWakes {
    fn flush(&self) {
        HeldWakes::flush(self);
    }
}

#[cfg(test)]
impl HeldWakes {
    /// Wake-ups due and not sent.
    fn due(&self) -> usize {
        self.held.lock().unwrap().sides.iter().map(|(_, _, due)| due).sum()
    }
}

impl Drop for HeldWakes {
    fn drop(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::RingMap;

    fn ring() -> Arc<RingMap> {
        use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};
        let format = FrameFormat::new(PixelFormat::Gray8, 8, 8);
        let layout = FrameLayout::for_format(format).unwrap();
        let policies = vec![crate::link::header::POLICY_BLOCK];
        let params = crate::link::RingParams { format, layout, depth: 8, policies, host_data: false };
        Arc::new(RingMap::create("gpuipc-test-held-wakes", &params).unwrap())
    }

    /// A wake-up with nobody asleep is no wake-up to hold; with a sleeper, wake-ups are held
    /// until a batch is due, and each side is woken once per batch. The futex word moves at
    /// once either way.
    #[test]
    fn held_wakes_go_out_in_batches() {
        let ring = ring();
        let held = HeldWakes::new(3);
        let (word, sleepers) = ring.futex(Side::Consumers);
        let (release_word, producer_sleeping) = ring.futex(Side::Producer);
        held.wake(&ring, Side::Consumers);
        assert_eq!((held.due(), word.load(Ordering::SeqCst)), (0, 1), "nobody sleeps: nothing held");
        sleepers.fetch_add(1, Ordering::SeqCst);
        producer_sleeping.fetch_add(1, Ordering::SeqCst);
        held.wake(&ring, Side::Consumers);
        held.wake(&ring, Side::Producer);
        assert_eq!(held.due(), 2, "sleepers: held");
        assert_eq!((word.load(Ordering::SeqCst), release_word.load(Ordering::SeqCst)), (2, 1));
        held.wake(&ring, Side::Consumers);
        assert_eq!(held.due(), 3, "a batch is counted per side");
        held.wake(&ring, Side::Consumers);
        assert_eq!(held.due(), 0, "the consumers' third is a batch: every side's go out");
        // Sending moved each side's word once more: a sleeper about to sleep looks again.
        assert_eq!((word.load(Ordering::SeqCst), release_word.load(Ordering::SeqCst)), (5, 2));
        held.wake(&ring, Side::Consumers);
        assert_eq!(held.due(), 1);
        held.flush();
        assert_eq!((held.due(), word.load(Ordering::SeqCst)), (0, 7));

        // A ring of 2 slots: one wake-up at a time, whatever the batch.
        let small = {
            let h = ring.header();
            let params = crate::link::RingParams {
                format: h.format,
                layout: h.layout,
                depth: 2,
                policies: vec![h.policies[0]],
                host_data: false,
            };
            Arc::new(RingMap::create("gpuipc-test-held-wakes-2", &params).unwrap())
        };
        small.futex(Side::Consumers).1.fetch_add(1, Ordering::SeqCst);
        held.wake(&small, Side::Consumers);
        assert_eq!(held.due(), 0);
    }

    /// A waiter that must wait sends its stage's held wake-ups first; one whose value is there
    /// at once leaves them held.
    #[test]
    fn a_waiter_sends_held_wakes_before_it_waits() {
        let ring = ring();
        let held = HeldWakes::new(8);
        let waiter = Waiter::new(0).holding_wakes(held.clone());
        ring.futex(Side::Producer).1.fetch_add(1, Ordering::SeqCst);
        wake_side(waiter.held_wakes(), &ring, Side::Producer);
        assert_eq!(held.due(), 1);
        let (word, sleepers) = ring.futex(Side::Consumers);
        assert_eq!(waiter.wait(word, sleepers, None, || Some(1)), Ok(1));
        assert_eq!(held.due(), 1, "no wait: still held");
        let mut polls = 0;
        let got = waiter.wait(word, sleepers, None, || {
            polls += 1;
            (polls > 1).then_some(2)
        });
        assert_eq!((got, held.due()), (Ok(2), 0));
    }
}
