//! The stall watchdog: a stage whose frame count and heartbeat stand still for its
//! `stall_timeout` is stuck (a plugin in an endless loop, a process stopped by SIGSTOP). A
//! stage waiting for its neighbours is not: its waits pulse the heartbeat every sleep slice.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::format_duration;
use crate::link::StatsMap;
use crate::link::stats::phase_name;

#[derive(Debug)]
pub struct StallWatch {
    seen: (u64, u64),
    since: Instant,
}

impl StallWatch {
    pub fn new(stats: &StatsMap, now: Instant) -> StallWatch {
        StallWatch { seen: stats.progress(), since: now }
    }

    /// `Some(why)` when the stage has made no progress for `timeout`.
    pub fn check(&mut self, stats: &StatsMap, timeout: Duration, now: Instant) -> Option<String> {
        let progress = stats.progress();
        if progress != self.seen {
            self.seen = progress;
            self.since = now;
            return None;
        }
        let still = now.duration_since(self.since);
        (still >= timeout).then(|| {
            let s = stats.get();
            let phase = s.phase.load(Ordering::Relaxed);
            let seq = s.phase_seq.load(Ordering::Relaxed);
            use crate::link::stats::{PHASE_PROCESS, PHASE_WAITING_INPUT, PHASE_WAITING_OUTPUT};
            let at = match phase {
                PHASE_PROCESS | PHASE_WAITING_OUTPUT => format!(" at frame {seq}"),
                _ => String::new(),
            };
            // A wait pulses the heartbeat: one that stood still is this stage's own (stopped by
            // a signal, or stuck in its code), not its neighbour's slowness.
            let own = match phase {
                PHASE_WAITING_INPUT | PHASE_WAITING_OUTPUT => {
                    ", but its wait stood still too: this stage itself stopped, not its neighbours"
                }
                _ => "",
            };
            format!(
                "stalled: no progress for {} ({}{at}{own}); killed by the watchdog",
                format_duration(timeout),
                phase_name(phase)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::stats::{PHASE_PROCESS, PHASE_WAITING_INPUT};

    #[test]
    fn a_stalled_wait_is_the_stages_own_and_says_so() {
        let stats = StatsMap::create("gpuipc-test-watchdog").unwrap();
        let t0 = Instant::now();
        let timeout = Duration::from_millis(300);
        stats.set_phase(PHASE_WAITING_INPUT, 0);
        let mut watch = StallWatch::new(&stats, t0);
        assert_eq!(watch.check(&stats, timeout, t0 + Duration::from_millis(100)), None);
        let why = watch.check(&stats, timeout, t0 + timeout).unwrap();
        assert_eq!(
            why,
            "stalled: no progress for 300 ms (waiting for input, but its wait stood still too: this stage itself stopped, \
             not its neighbours); killed by the watchdog"
        );
        // A pulse is progress.
        stats.pulse();
        assert_eq!(watch.check(&stats, timeout, t0 + timeout * 2), None);
        stats.set_phase(PHASE_PROCESS, 7);
        let why = watch.check(&stats, timeout, t0 + timeout * 3).unwrap();
        assert_eq!(why, "stalled: no progress for 300 ms (in the plugin's process at frame 7); killed by the watchdog");
    }
}
