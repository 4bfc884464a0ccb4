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
            let at = match phase {
                crate::link::stats::PHASE_PROCESS | crate::link::stats::PHASE_WAITING_OUTPUT => format!(" at frame {seq}"),
                _ => String::new(),
            };
            format!("stalled: no progress for {} ({}{at}); killed by the watchdog", format_duration(timeout), phase_name(phase))
        })
    }
}
