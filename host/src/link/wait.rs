//! Waiting on shared counters: spin briefly, then sleep on a futex shared between processes.
//! Never a fixed sleep; every wait has a deadline so a dead peer is noticed.
//!
//! The waker bumps the futex word and wakes only if someone sleeps. The sleeper registers in
//! `sleepers` before it reads the futex word and checks its condition one last time, so a
//! wake between check and sleep is never lost (both sides use SeqCst on the pair).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rustix::thread::futex;

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
}

impl Waiter {
    pub fn new(spin_us: u32) -> Waiter {
        Waiter { spin: Duration::from_micros(spin_us as u64), pulse: None, after_wake: Duration::ZERO, idle: Duration::MAX, forward: None }
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
        // Shared futex (no PRIVATE flag): the sleepers are other processes. The kernel reads
        // the count as a signed int: u32::MAX would be -1 and wake only one sleeper.
        let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

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
