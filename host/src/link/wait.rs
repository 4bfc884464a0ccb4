//! Waiting on shared counters: spin briefly, then sleep on a futex shared between processes.
//! Never a fixed sleep; every wait has a deadline so a dead peer is noticed.
//!
//! The waker bumps the futex word and wakes only if someone sleeps. The sleeper registers in
//! `sleepers` before it reads the futex word and checks its condition one last time, so a
//! wake between check and sleep is never lost (both sides use SeqCst on the pair).
//!
//! It knows no ring: which side of a ring to wake, and wake-ups a stage holds back and sends
//! in batches, are `super::wakes`, over this.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::thread::futex;

/// How long a sleeping waiter sleeps before it looks again (at the abort flag, the deadline).
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// Polls a spinning waiter makes between two looks at the clock: a spin overshoots by at most
/// this many polls (a poll that misses its cache takes about 0.1 µs). One of them is thorough
/// ([`Waiter::wait_quick`]).
const POLLS_PER_CLOCK_READ: u32 = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timed out")]
pub struct TimedOut;

/// What a waiting thread holds back, sent before it spins or sleeps: nobody may wait on a
/// thread that waits itself. A stage's wake-ups of its neighbours (`super::wakes::HeldWakes`);
/// `()` holds nothing back.
pub trait HeldBack: Send + Sync {
    /// Send whatever is held back, now.
    fn flush(&self);
}

impl HeldBack for () {
    fn flush(&self) {}
}

/// Spin-then-sleep policy of one waiting thread, holding back `H` (see [`HeldBack`]).
pub struct Waiter<H> {
    pub spin: Duration,
    /// Told of every sleep slice, so the host's watchdog sees a waiting stage alive.
    pulse: Option<Arc<super::StatsMap>>,
    /// Early wake-ups (see [`Waiter::waking_ahead`]): how long to spin after being woken from
    /// a sleep of at least `idle`.
    after_wake: Duration,
    idle: Duration,
    /// Called when this waiter is woken from a sleep: wakes the stage's own consumers ahead.
    forward: Option<Arc<dyn Fn() + Send + Sync>>,
    /// What the thread holds back (the stage's wake-ups of its neighbours), sent before this
    /// waiter spins or sleeps.
    held: Option<Arc<H>>,
    /// When the next value is due where values come at a steady, idle pace (see
    /// [`Waiter::waking_before_due`]).
    cadence: Option<Cadence>,
}

impl<H> Clone for Waiter<H> {
    /// Shares what is held back (`held` is one per thread's stage, not per waiter).
    fn clone(&self) -> Waiter<H> {
        Waiter {
            spin: self.spin,
            pulse: self.pulse.clone(),
            after_wake: self.after_wake,
            idle: self.idle,
            forward: self.forward.clone(),
            held: self.held.clone(),
            cadence: self.cadence.clone(),
        }
    }
}

impl<H: HeldBack> Waiter<H> {
    pub fn new(spin_us: u32) -> Waiter<H> {
        Waiter {
            spin: Duration::from_micros(spin_us as u64),
            pulse: None,
            after_wake: Duration::ZERO,
            idle: Duration::MAX,
            forward: None,
            held: None,
            cadence: None,
        }
    }

    /// Wake-ups of sleeping neighbours go through `held` (`super::wakes::HeldWakes`), which
    /// this waiter sends before it sleeps or spins.
    pub fn holding_wakes(self, held: Arc<H>) -> Waiter<H> {
        Waiter { held: Some(held), ..self }
    }

    /// The held-back wake-ups this waiter sends before it sleeps, if any.
    pub fn held_wakes(&self) -> Option<&Arc<H>> {
        self.held.as_ref()
    }

    /// Wake-ups ahead of the frame: a wait woken from a sleep of at least `idle` (the stage was
    /// idle, not just between two frames at full speed) first calls `forward` (which wakes the
    /// stage's own consumers, so a chain of sleeping stages wakes in parallel with the frame's
    /// work instead of one hop after another), then spins up to `after_wake` for what it waits
    /// for before it sleeps again. A producer wakes its consumers ahead when it starts a frame
    /// after being idle ([`super::Producer::wake_ahead`]).
    pub fn waking_ahead(
        self,
        after_wake: Duration,
        idle: Duration,
        forward: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> Waiter<H> {
        Waiter { after_wake, idle, forward, ..self }
    }

    /// Waking before a value is due: where values come at a steady pace with idle gaps of at
    /// least the idle mark of [`Waiter::waking_ahead`] between them (a paced source), the
    /// waiter sleeps until `margin` before the next is due, then spins for it (up to `margin`
    /// and the wake-ahead spin) instead of sleeping until a futex wake-up: a wake-up of a
    /// sleeping thread takes tens of microseconds, at times hundreds, which the frame would
    /// wait for at every hop. A value that comes sooner wakes the waiter as before, so a
    /// wrong guess costs CPU, never time.
    pub fn waking_before_due(self, margin: Duration) -> Waiter<H> {
        let cadence = (!margin.is_zero()).then(|| Cadence::new(margin));
        Waiter { cadence, ..self }
    }

    /// As [`Waiter::new`], pulsing `stats` while it sleeps.
    pub fn with_pulse(spin_us: u32, stats: Arc<super::StatsMap>) -> Waiter<H> {
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
        self.wait_quick(word, sleepers, deadline, |_| poll())
    }

    /// As [`Waiter::wait`], telling `poll` whether to look thoroughly: `false` for the polls
    /// of a spin between two looks at the clock ([`POLLS_PER_CLOCK_READ`]), where a poll may
    /// look only where the value comes when all goes in order; `true` for the first poll,
    /// one in every few of a spin and every poll around a sleep, so a value only a thorough
    /// look finds waits at most a few polls, and the waiter never sleeps without one.
    pub fn wait_quick<T>(
        &self,
        word: &AtomicU32,
        sleepers: &AtomicU32,
        deadline: Option<Instant>,
        poll: impl FnMut(bool) -> Option<T>,
    ) -> Result<T, TimedOut> {
        let got = self.wait_for(word, sleepers, deadline, poll);
        if got.is_ok()
            && let Some(cadence) = &self.cadence
        {
            cadence.arrived(Instant::now());
        }
        got
    }

    /// How long to sleep from `now`: a slice, less where the deadline comes sooner or the
    /// waiter wakes before a value is due (then also when).
    fn sleep_slice(&self, now: Instant, deadline: Option<Instant>) -> (Duration, Option<Instant>) {
        let mut slice = match deadline {
            Some(d) => d.saturating_duration_since(now).min(SLEEP_SLICE),
            None => SLEEP_SLICE,
        };
        let wake_at = self.cadence.as_ref().and_then(|c| c.wake_at(self.idle)).filter(|&at| at > now);
        if let Some(at) = wake_at {
            slice = slice.min(at - now);
        }
        (slice, wake_at)
    }

    fn wait_for<T>(
        &self,
        word: &AtomicU32,
        sleepers: &AtomicU32,
        deadline: Option<Instant>,
        mut poll: impl FnMut(bool) -> Option<T>,
    ) -> Result<T, TimedOut> {
        if let Some(v) = poll(true) {
            return Ok(v);
        }
        // About to spin or sleep: neighbours this stage has not woken yet must not wait on it.
        if let Some(held) = &self.held {
            held.flush();
        }
        if !self.spin.is_zero() {
            // The clock is read once every few polls, the first time after them (the spin ends
            // that much later): a read costs as much as a poll of a ring (20 to 30 ns), and at
            // full speed most waits end within a few polls.
            let mut spin_until = None;
            loop {
                for i in 0..POLLS_PER_CLOCK_READ {
                    std::hint::spin_loop();
                    if let Some(v) = poll(i == 0) {
                        return Ok(v);
                    }
                }
                let now = Instant::now();
                if now >= *spin_until.get_or_insert(now + self.spin) {
                    break;
                }
            }
        }
        // Idle is measured from the first sleep of this wait, not per slice: a waiter that woke
        // before its value was due and slept again is still idle when the value comes.
        let idle_since = (self.forward.is_some() || !self.after_wake.is_zero()).then(Instant::now);
        let mut forwarded = false;
        loop {
            sleepers.fetch_add(1, Ordering::SeqCst);
            let seen = word.load(Ordering::SeqCst);
            if let Some(v) = poll(true) {
                sleepers.fetch_sub(1, Ordering::SeqCst);
                return Ok(v);
            }
            let (slice, wake_at) = self.sleep_slice(Instant::now(), deadline);
            let timeout = rustix::fs::Timespec { tv_sec: slice.as_secs() as i64, tv_nsec: slice.subsec_nanos() as i64 };
            // Not FUTEX_PRIVATE: the word lives in memory shared with other processes. EAGAIN
            // (word changed), EINTR and ETIMEDOUT all mean "look again".
            SLEEPS.fetch_add(1, Ordering::Relaxed);
            let woken = futex::wait(word, futex::Flags::empty(), seen, Some(&timeout)).is_ok();
            sleepers.fetch_sub(1, Ordering::SeqCst);
            if let Some(stats) = &self.pulse {
                stats.pulse();
            }
            let woken_from_idle = woken && idle_since.is_some_and(|t| t.elapsed() >= self.idle);
            if woken_from_idle
                && !forwarded
                && let Some(forward) = &self.forward
            {
                forward();
                forwarded = true;
            }
            if let Some(v) = poll(true) {
                return Ok(v);
            }
            // (However the sleep ended: a timeout, a signal, the word moving for something else.)
            let woken_before_due = !woken && wake_at.is_some_and(|at| Instant::now() >= at);
            if woken_before_due {
                PREWAKES.fetch_add(1, Ordering::Relaxed);
            }
            let spin_after = match (&self.cadence, woken_before_due) {
                (Some(cadence), true) => cadence.margin + self.after_wake,
                _ if woken_from_idle => self.after_wake,
                _ => Duration::ZERO,
            };
            if !spin_after.is_zero() {
                let spin_until = deadline.map_or(Instant::now() + spin_after, |d| d.min(Instant::now() + spin_after));
                while Instant::now() < spin_until {
                    std::hint::spin_loop();
                    if let Some(v) = poll(true) {
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

/// Futex sleeps and wake calls this process made (`GPUIPC_PROFILE=1` logs them per frame).
static SLEEPS: AtomicU64 = AtomicU64::new(0);
static WAKES: AtomicU64 = AtomicU64::new(0);
static PREWAKES: AtomicU64 = AtomicU64::new(0);

/// (futex sleeps, futex wake calls, sleeps ended before a value was due) of this process so
/// far.
pub fn futex_calls() -> (u64, u64, u64) {
    (SLEEPS.load(Ordering::Relaxed), WAKES.load(Ordering::Relaxed), PREWAKES.load(Ordering::Relaxed))
}

/// The pace of values a waiter gets: when the last came and, smoothed, the time between two.
/// Behind a mutex only so that a shared `&Waiter` can keep it: one thread uses each waiter.
struct Cadence {
    margin: Duration,
    pace: Mutex<Pace>,
}

#[derive(Default, Clone, Copy)]
struct Pace {
    last: Option<Instant>,
    /// Mean time between two values (zero: not known yet).
    period: Duration,
}

impl Clone for Cadence {
    /// A clone starts afresh: it waits on another ring, at its own pace.
    fn clone(&self) -> Cadence {
        Cadence::new(self.margin)
    }
}

impl Cadence {
    /// Weight of the newest gap in the mean: a few frames of a new pace move it.
    const NEWEST_GAP_WEIGHT: u32 = 8;

    fn new(margin: Duration) -> Cadence {
        Cadence { margin, pace: Mutex::new(Pace::default()) }
    }

    fn pace(&self) -> std::sync::MutexGuard<'_, Pace> {
        self.pace.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A value came at `at`.
    fn arrived(&self, at: Instant) {
        let mut pace = self.pace();
        if let Some(last) = pace.last.replace(at) {
            let gap = at.saturating_duration_since(last);
            pace.period = if pace.period.is_zero() {
                gap
            } else {
                // A stall (a pause, a restart) counts as at most twice the mean, so one long
                // gap does not throw the guess far off; a lasting slower pace still moves it.
                let gap = gap.min(pace.period * 2);
                pace.period - pace.period / Self::NEWEST_GAP_WEIGHT + gap / Self::NEWEST_GAP_WEIGHT
            };
        }
    }

    /// When to wake for the next value: `margin` before it is due, where values come with gaps
    /// of at least `idle` between them; `None` where they come faster (the waiter then sleeps
    /// until woken) or no pace is known yet.
    fn wake_at(&self, idle: Duration) -> Option<Instant> {
        let pace = *self.pace();
        let last = pace.last?;
        if pace.period.is_zero() || pace.period < idle {
            return None;
        }
        (last + pace.period).checked_sub(self.margin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    /// A waiter that holds nothing back.
    type Waiter = super::Waiter<()>;

    /// The first poll is thorough, a spin has a thorough poll in every `POLLS_PER_CLOCK_READ`,
    /// and a waiter that sleeps polls thoroughly around each sleep: a value only a thorough
    /// look finds is found within that many polls, and never slept through.
    #[test]
    fn quick_polls_come_only_between_thorough_ones_of_a_spin() {
        let (word, sleepers) = (AtomicU32::new(0), AtomicU32::new(0));
        let mut seen = Vec::new();
        let got = Waiter::new(10_000).wait_quick(&word, &sleepers, None, |thorough| {
            seen.push(thorough);
            (seen.len() > 40 && thorough).then_some(seen.len())
        });
        assert!(seen[0], "the first poll is thorough");
        let most_quick_in_a_row = seen.split(|&t| t).map(<[bool]>::len).max().unwrap();
        assert!(most_quick_in_a_row < POLLS_PER_CLOCK_READ as usize, "{seen:?}");
        assert!(got.unwrap() <= 41 + POLLS_PER_CLOCK_READ as usize);
        // No spin: every poll is thorough (each sleep slice ends with one; woken by the
        // deadline here).
        let mut polls = 0;
        let got = Waiter::new(0).wait_quick(&word, &sleepers, Some(Instant::now() + Duration::from_millis(5)), |t| {
            assert!(t, "a poll around a sleep is thorough");
            polls += 1;
            None::<()>
        });
        assert_eq!(got, Err(TimedOut));
        assert!(polls >= 2);
    }

    /// Values at a steady pace of 1 ms: the waiter sleeps until 150 µs before the next is due;
    /// at a pace under the idle mark, or before two values have come, until woken.
    #[test]
    fn a_waiter_at_an_idle_pace_wakes_before_the_next_value_is_due() {
        let margin = Duration::from_micros(150);
        let waiter = Waiter::new(0)
            .waking_ahead(Duration::from_micros(200), Duration::from_micros(500), None)
            .waking_before_due(margin);
        let cadence = waiter.cadence.as_ref().unwrap();
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        cadence.arrived(t0);
        assert_eq!(waiter.sleep_slice(t0, None), (SLEEP_SLICE, None), "one value: no pace yet");
        for k in 1..=4 {
            cadence.arrived(t0 + ms * k);
        }
        let last = t0 + ms * 4;
        let now = last + Duration::from_micros(50);
        let due = last + ms - margin;
        assert_eq!(waiter.sleep_slice(now, None), (due - now, Some(due)));
        // A deadline sooner than that still ends the sleep first.
        let deadline = now + Duration::from_micros(100);
        assert_eq!(waiter.sleep_slice(now, Some(deadline)), (Duration::from_micros(100), Some(due)));
        // Past the time to wake: sleep until woken.
        assert_eq!(waiter.sleep_slice(due + Duration::from_micros(1), None), (SLEEP_SLICE, None));

        // One stall of a second counts as 2 ms: the mean moves to 1.125 ms, not to 126 ms.
        cadence.arrived(last + Duration::from_secs(1));
        assert_eq!(cadence.pace().period, Duration::from_micros(1125));

        // At full speed (20 µs between values) no sleep is shortened; a clone starts afresh.
        let fast = Waiter::new(0)
            .waking_ahead(Duration::from_micros(200), Duration::from_micros(500), None)
            .waking_before_due(margin);
        for k in 0..20 {
            fast.cadence.as_ref().unwrap().arrived(t0 + Duration::from_micros(20) * k);
        }
        assert_eq!(fast.sleep_slice(t0 + Duration::from_micros(390), None), (SLEEP_SLICE, None));
        assert_eq!(waiter.clone().sleep_slice(now, None), (SLEEP_SLICE, None));
    }

    /// Values at an idle pace, each published with a wake-up: a waiter that wakes before
    /// they are due (and sleeps again when one is late) gets every one, in order.
    #[test]
    fn a_waiter_waking_before_due_gets_every_value() {
        let word = Arc::new(AtomicU32::new(0));
        let sleepers = Arc::new(AtomicU32::new(0));
        let value = Arc::new(AtomicU64::new(0));
        let waiter = Waiter::new(0)
            .waking_ahead(Duration::from_micros(50), Duration::from_micros(300), Some(Arc::new(|| {})))
            .waking_before_due(Duration::from_micros(100));
        let (w, s, v) = (word.clone(), sleepers.clone(), value.clone());
        let reader = std::thread::spawn(move || {
            let deadline = Some(Instant::now() + Duration::from_secs(30));
            (1..=12u64)
                .map(|want| waiter.wait(&w, &s, deadline, || (v.load(Ordering::SeqCst) >= want).then_some(want)))
                .collect::<Result<Vec<_>, _>>()
        });
        for n in 1..=12u64 {
            // An idle pace of about a millisecond, some values late (2 ms).
            let gap = Duration::from_micros(if n % 4 == 0 { 2000 } else { 1000 });
            let at = Instant::now() + gap;
            while Instant::now() < at {
                std::hint::spin_loop();
            }
            value.store(n, Ordering::SeqCst);
            wake_all(&word, &sleepers);
        }
        assert_eq!(reader.join().unwrap(), Ok((1..=12).collect::<Vec<_>>()));
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
        let waiter = Waiter::new(0).waking_ahead(
            Duration::from_micros(200),
            idle,
            Some(Arc::new(move || {
                f.fetch_add(1, Ordering::SeqCst);
            })),
        );
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
