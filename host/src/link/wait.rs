//! Waiting on shared counters: spin briefly, then sleep on a futex shared between processes.
//! Never a fixed sleep; every wait has a deadline so a dead peer is noticed.
//!
//! The waker bumps the futex word and wakes only if someone sleeps. The sleeper registers in
//! `sleepers` before it reads the futex word and checks its condition one last time, so a
//! wake between check and sleep is never lost (both sides use SeqCst on the pair).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::thread::futex;

use super::ring::RingMap;

/// How long a sleeping waiter sleeps before it looks again (at the abort flag, the deadline).
const SLEEP_SLICE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out")]
pub struct TimedOut;

/// Spin-then-sleep policy of one waiting thread.
#[derive(Clone)]
pub struct Waiter {
    pub spin: Duration,
    /// Told of every sleep slice, so the host's watchdog sees a waiting stage alive.
    pulse: Option<Arc<super::StatsMap>>,
    /// Early wake-ups (see [`Waiter::waking_ahead`]): how long to spin after being woken from
    /// a sleep of at least `idle`.
    after_wake: Duration,
    idle: Duration,
    /// Called when this waiter is woken from a sleep: wakes the stage's own consumers ahead.
    forward: Option<Arc<dyn Fn() + Send + Sync>>,
    /// The stage's held-back wake-ups of its neighbours, sent before this waiter sleeps.
    held: Option<Arc<HeldWakes>>,
}

impl Waiter {
    pub fn new(spin_us: u32) -> Waiter {
        Waiter {
            spin: Duration::from_micros(spin_us as u64),
            pulse: None,
            after_wake: Duration::ZERO,
            idle: Duration::MAX,
            forward: None,
            held: None,
        }
    }

    /// Wake-ups of sleeping neighbours go through `held` (see [`HeldWakes`]), which this
    /// waiter sends before it sleeps or spins.
    pub fn holding_wakes(self, held: Arc<HeldWakes>) -> Waiter {
        Waiter { held: Some(held), ..self }
    }

    /// The held-back wake-ups this waiter sends before it sleeps, if any.
    pub fn held_wakes(&self) -> Option<&Arc<HeldWakes>> {
        self.held.as_ref()
    }

    /// Tell the sleepers on one side of `ring` that something changed there: now, or with
    /// the next batch where wake-ups are held ([`HeldWakes`]).
    pub fn wake(&self, ring: &Arc<RingMap>, side: Side) {
        wake_side(self.held.as_ref(), ring, side);
    }

    /// Wake-ups ahead of the frame: a wait woken from a sleep of at least `idle` (the stage was
    /// idle, not just between two frames at full speed) first calls `forward` (which wakes the
    /// stage's own consumers, so a chain of sleeping stages wakes in parallel with the frame's
    /// work instead of one hop after another), then spins up to `after_wake` for what it waits
    /// for before it sleeps again. A producer wakes its consumers ahead when it starts a frame
    /// after being idle ([`super::Producer::wake_ahead`]).
    pub fn waking_ahead(self, after_wake: Duration, idle: Duration, forward: Option<Arc<dyn Fn() + Send + Sync>>) -> Waiter {
        Waiter { after_wake, idle, forward, ..self }
    }

    /// As [`Waiter::new`], pulsing `stats` while it sleeps.
    pub fn with_pulse(spin_us: u32, stats: Arc<super::StatsMap>) -> Waiter {
        Waiter { pulse: Some(stats), ..Waiter::new(spin_us) }
    }

    /// Call `poll` until it returns `Some`, spinning for `self.spin`, then sleeping on `word`
    /// (registered in `sleepers`) until woken or `deadline`.
    pub fn wait<T>(
        &self,
        word: &AtomicU32,
        sleepers: &AtomicU32,
        deadline: Option<Instant>,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T, TimedOut> {
        if let Some(v) = poll() {
            return Ok(v);
        }
        // About to spin or sleep: neighbours this stage has not woken yet must not wait on it.
        if let Some(held) = &self.held {
            held.flush();
        }
        if !self.spin.is_zero() {
            let spin_until = Instant::now() + self.spin;
            while Instant::now() < spin_until {
                std::hint::spin_loop();
                if let Some(v) = poll() {
                    return Ok(v);
                }
            }
        }
        loop {
            sleepers.fetch_add(1, Ordering::SeqCst);
            let seen = word.load(Ordering::SeqCst);
            if let Some(v) = poll() {
                sleepers.fetch_sub(1, Ordering::SeqCst);
                return Ok(v);
            }
            let slice = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()).min(SLEEP_SLICE),
                None => SLEEP_SLICE,
            };
            let timeout = rustix::fs::Timespec { tv_sec: slice.as_secs() as i64, tv_nsec: slice.subsec_nanos() as i64 };
            // Not FUTEX_PRIVATE: the word lives in memory shared with other processes. EAGAIN
            // (word changed), EINTR and ETIMEDOUT all mean "look again".
            let slept_from = (self.forward.is_some() || !self.after_wake.is_zero()).then(Instant::now);
            SLEEPS.fetch_add(1, Ordering::Relaxed);
            let woken = futex::wait(word, futex::Flags::empty(), seen, Some(&timeout)).is_ok();
            sleepers.fetch_sub(1, Ordering::SeqCst);
            if let Some(stats) = &self.pulse {
                stats.pulse();
            }
            let woken_from_idle = woken && slept_from.is_some_and(|t| t.elapsed() >= self.idle);
            if woken_from_idle && let Some(forward) = &self.forward {
                forward();
            }
            if let Some(v) = poll() {
                return Ok(v);
            }
            if woken_from_idle && !self.after_wake.is_zero() {
                let spin_until = Instant::now() + self.after_wake;
                while Instant::now() < spin_until {
                    std::hint::spin_loop();
                    if let Some(v) = poll() {
                        return Ok(v);
                    }
                }
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(TimedOut);
            }
        }
    }
}

/// Tell every waiter on `word` that something changed.
pub fn wake_all(word: &AtomicU32, sleepers: &AtomicU32) {
    word.fetch_add(1, Ordering::SeqCst);
    if sleepers.load(Ordering::SeqCst) > 0 {
        WAKES.fetch_add(1, Ordering::Relaxed);
        // Shared futex (no PRIVATE flag): the sleepers are other processes. The kernel reads
        // the count as a signed int: u32::MAX would be -1 and wake only one sleeper.
        let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
    }
}

/// Wake one side of `ring`: through `held` where the stage holds wake-ups back, else at once.
pub fn wake_side(held: Option<&Arc<HeldWakes>>, ring: &Arc<RingMap>, side: Side) {
    match held {
        Some(held) => held.wake(ring, side),
        None => ring.wake(side),
    }
}

/// Futex sleeps and wake calls this process made (`GPUIPC_PROFILE=1` logs them per frame).
static SLEEPS: AtomicU64 = AtomicU64::new(0);
static WAKES: AtomicU64 = AtomicU64::new(0);

/// (futex sleeps, futex wake calls) of this process so far.
pub fn futex_calls() -> (u64, u64) {
    (SLEEPS.load(Ordering::Relaxed), WAKES.load(Ordering::Relaxed))
}

/// Which sleepers of a ring: its consumers (woken by a publish, a close) or its producer
/// (woken by a release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Consumers,
    Producer,
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
    sides: Vec<(Arc<RingMap>, Side, usize)>,
}

impl HeldWakes {
    /// Wake-ups sent `batch` at a time (at least 1: each at once), and at most half a ring's
    /// slots at a time on one ring.
    pub fn new(batch: usize) -> Arc<HeldWakes> {
        Arc::new(HeldWakes { batch: batch.max(1), held: Mutex::new(Held::default()) })
    }

    /// As [`wake_all`] on one side of `ring`, the system call held back until `batch` are due
    /// on one side; then every side's go out.
    pub fn wake(&self, ring: &Arc<RingMap>, side: Side) {
        let (word, sleepers) = ring.futex(side);
        word.fetch_add(1, Ordering::SeqCst);
        if sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let at = match held.sides.iter().position(|(r, s, _)| Arc::ptr_eq(r, ring) && *s == side) {
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
    use std::sync::atomic::AtomicU64;

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
            let params = crate::link::RingParams { format: h.format, layout: h.layout, depth: 2, policies: vec![h.policies[0]], host_data: false };
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
        waiter.wake(&ring, Side::Producer);
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

    /// A waiter that was asleep (idle) when woken forwards the wake-up once, then finds its
    /// value; one woken at once (the value was there) forwards nothing.
    #[test]
    fn a_waiter_woken_from_idle_wakes_ahead() {
        let word = Arc::new(AtomicU32::new(0));
        let sleepers = Arc::new(AtomicU32::new(0));
        let value = Arc::new(AtomicU64::new(0));
        let forwarded = Arc::new(AtomicU32::new(0));
        let f = forwarded.clone();
        let idle = Duration::from_micros(100);
        let waiter = Waiter::new(0).waking_ahead(Duration::from_micros(200), idle, Some(Arc::new(move || {
            f.fetch_add(1, Ordering::SeqCst);
        })));
        let (w, s, v) = (word.clone(), sleepers.clone(), value.clone());
        let thread = std::thread::spawn(move || {
            let deadline = Some(Instant::now() + Duration::from_secs(10));
            let got = waiter.wait(&w, &s, deadline, || match v.load(Ordering::SeqCst) {
                0 => None,
                n => Some(n),
            });
            // Already there: no sleep, nothing forwarded.
            let again = waiter.wait(&w, &s, deadline, || Some(7));
            (got, again)
        });
        // Wait until it sleeps, then let it stay idle past `idle` before waking it.
        let give_up = Instant::now() + Duration::from_secs(10);
        while sleepers.load(Ordering::SeqCst) == 0 && Instant::now() < give_up {
            std::hint::spin_loop();
        }
        let idle_until = Instant::now() + idle * 3;
        while Instant::now() < idle_until {
            std::hint::spin_loop();
        }
        value.store(42, Ordering::SeqCst);
        wake_all(&word, &sleepers);
        let (got, again) = thread.join().unwrap();
        assert_eq!((got, again), (Ok(42), Ok(7)));
        assert_eq!(forwarded.load(Ordering::SeqCst), 1);
    }
}
