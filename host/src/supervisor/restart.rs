//! Whether a stage that ended is started again, when, and with which other stages.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::Domain;

use crate::config::{RestartPolicy, format_duration};
use crate::plan::{LinkMemory, Plan, Supervision};

/// Whether `policy` restarts a stage that failed. `ran`: it had been started (it got past
/// loading its plugin, creating its instance and setting up its links).
pub fn wants_restart(policy: RestartPolicy, ran: bool) -> bool {
    match policy {
        RestartPolicy::Never => false,
        RestartPolicy::OnFailure => ran,
        RestartPolicy::Always => true,
    }
}

/// A stage's restarts within its window.
#[derive(Debug, Default)]
pub struct Budget {
    recent: VecDeque<Instant>,
}

impl Budget {
    /// Take one restart now: the wait before it, or why none is left.
    pub fn take(&mut self, s: &Supervision, now: Instant) -> Result<Duration, String> {
        while self.recent.front().is_some_and(|&t| now.duration_since(t) > s.window) {
            self.recent.pop_front();
        }
        if self.recent.len() >= s.max_restarts as usize {
            return Err(format!(
                "gave up after {} restart{} within {}",
                self.recent.len(),
                if self.recent.len() == 1 { "" } else { "s" },
                format_duration(s.window)
            ));
        }
        self.recent.push_back(now);
        Ok(s.backoff_before(self.recent.len() as u32))
    }
}

/// The stages that must restart with stage `i`, `i` included; `gpu_fault`: it failed with a
/// fatal CUDA error.
///
/// A stage that dies restarts alone: its host links are taken back by the host, and the live
/// ends of its GPU links take its new memory and events (`broker`, `stage::follow`): measured
/// on an H100, 20 random SIGKILLs of the stages of a GPU chain, each restarted alone, lost only
/// the frames counted. A fatal GPU fault is different: the faulted context never records the
/// events it had queued, so a neighbour whose stream waits on one stalls for good (measured:
/// the source stalled until the watchdog killed it, 30 s). So after a GPU fault every stage it
/// shares a GPU ring with restarts with it, and theirs in turn. Under MPS a fatal fault ends
/// every client of that GPU, so with a private MPS daemon running (`mps`) every cuda stage on
/// the device restarts with a cuda stage that failed.
pub fn group(plan: &Plan, mps: bool, gpu_fault: bool, i: usize) -> Vec<usize> {
    let stage = &plan.stages[i];
    if stage.domain != Domain::Cuda || !(mps || gpu_fault) {
        return vec![i];
    }
    let mut members = vec![i];
    if mps {
        members.extend((0..plan.stages.len()).filter(|&j| {
            j != i
                && plan.stages[j].domain == Domain::Cuda
                && plan.stages[j].devices().iter().any(|d| stage.devices().contains(d))
        }));
    }
    let mut k = 0;
    while k < members.len() {
        let m = members[k];
        for link in plan.links.iter().filter(|l| matches!(l.memory, LinkMemory::Device { .. })) {
            let ends = std::iter::once(link.producer).chain(link.consumers.iter().copied());
            if ends.clone().any(|e| e == m) {
                for e in ends {
                    if !members.contains(&e) {
                        members.push(e);
                    }
                }
            }
        }
        k += 1;
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_allows_max_restarts_per_window_with_doubling_waits() {
        let s = Supervision {
            restart: RestartPolicy::OnFailure,
            max_restarts: 3,
            window: Duration::from_secs(10),
            backoff: Duration::from_millis(100),
            stall_timeout: None,
        };
        let mut b = Budget::default();
        let t0 = Instant::now();
        assert_eq!(b.take(&s, t0), Ok(Duration::from_millis(100)));
        assert_eq!(b.take(&s, t0 + Duration::from_secs(1)), Ok(Duration::from_millis(200)));
        assert_eq!(b.take(&s, t0 + Duration::from_secs(2)), Ok(Duration::from_millis(400)));
        assert_eq!(b.take(&s, t0 + Duration::from_secs(3)), Err("gave up after 3 restarts within 10.0 s".into()));
        // The first restart left the window: one more is allowed, at the doubled wait.
        assert_eq!(b.take(&s, t0 + Duration::from_millis(10_500)), Ok(Duration::from_millis(400)));
    }

    #[test]
    fn policies_decide_by_whether_the_stage_had_run() {
        assert!(!wants_restart(RestartPolicy::Never, true));
        assert!(wants_restart(RestartPolicy::OnFailure, true));
        assert!(!wants_restart(RestartPolicy::OnFailure, false));
        assert!(wants_restart(RestartPolicy::Always, false));
    }
}
