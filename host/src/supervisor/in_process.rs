//! `run --in-process`: every stage as a thread of this one process, over the same rings and
//! the same frame loop as separate stage processes (only the process boundary is gone), so the
//! reference the multi-process run is checked against exercises the same policies and fan-in
//! alignment. Both must write the same checksums.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::Domain;

use super::report::{RunReport, StageOutcome};
use super::spawn::Launch;
use super::{RunOptions, create_links};
use crate::link::stats;
use crate::plan::Plan;
use crate::stage::StageError;

/// How often the run looks at the stop flag while stages run.
const TICK: Duration = Duration::from_millis(50);

/// Run `plan` in this process. Sources emit `frames` frames (or run until `stop` is set).
/// With a cuda stage, every stage runs on one context in plan order instead
/// ([`super::one_context`]).
pub fn run(plan: &Plan, frames: Option<u64>, checksums: Option<&Path>, stop: &AtomicBool) -> Result<RunReport, String> {
    if plan.stages.iter().any(|s| s.domain != Domain::Cpu) {
        let probe = super::one_context::Probe::default();
        return super::one_context::run(plan, frames, checksums, stop, probe).map(|(report, _)| report);
    }
    // One thread per stage, replicas or not: the reference a run with replicas must equal.
    let procs = plan.one_process_per_stage();
    let (stats, rings) = create_links(plan, &procs).map_err(|e| e.to_string())?;
    let options = RunOptions {
        frames,
        stage_exe: PathBuf::new(),
        live: false,
        spin_us: None,
        checksums: checksums.map(Path::to_owned),
        latency: None,
        pace_fps: None,
        metrics: None,
        part: false,
    };
    let launch =
        Launch { plan, procs: &procs, queues: &[], options: &options, frames, stats: &stats, rings: &rings, env: &[] };
    let started = Instant::now();
    let mut outcomes: Vec<Option<StageOutcome>> = vec![None; plan.stages.len()];
    let mut failure: Option<(usize, String)> = None;
    let mut interrupted = false;
    std::thread::scope(|scope| -> Result<(), String> {
        let (done, ended) = mpsc::channel();
        for i in 0..plan.stages.len() {
            let setup = launch.setup(i, 0);
            let fds = owned(launch.fds(i)).map_err(|e| format!("stage '{}': {e}", setup.stage))?;
            let done = done.clone();
            scope.spawn(move || {
                let result = crate::stage::run_in_thread(&setup, fds);
                let _ = done.send((i, result));
            });
        }
        drop(done);
        loop {
            match ended.recv_timeout(TICK) {
                Ok((i, result)) => {
                    let outcome = judge(result, failure.is_some());
                    if let StageOutcome::Failed(why) = &outcome
                        && failure.is_none()
                    {
                        failure = Some((i, why.clone()));
                        for r in &rings {
                            r.abort();
                        }
                    }
                    outcomes[i] = Some(outcome);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(()),
            }
            if !interrupted && stop.load(Ordering::Relaxed) {
                // Sources end their streams; the pipeline drains.
                interrupted = true;
                for s in &stats {
                    s.get().stop.store(stats::DRAIN, Ordering::Relaxed);
                }
            }
        }
    })?;
    let interrupted = (interrupted && failure.is_none()).then_some("a stop signal");
    Ok(RunReport::new(plan, &procs, &stats, outcomes, failure, interrupted, Some(started.elapsed()))
        .with_links(plan, &procs, &rings))
}

/// A stage thread's end as an outcome, as the supervisor judges a stage process.
fn judge(result: Result<(), StageError>, after_failure: bool) -> StageOutcome {
    match result {
        Ok(()) => StageOutcome::Finished,
        Err(StageError::Aborted) => StageOutcome::Stopped,
        Err(_) if after_failure => StageOutcome::Stopped,
        Err(e) => StageOutcome::Failed(e.to_string()),
    }
}

/// A stage thread maps its own copies of the descriptors, as a stage process would.
fn owned(fds: Vec<BorrowedFd<'_>>) -> std::io::Result<Vec<OwnedFd>> {
    fds.into_iter().map(|fd| fd.try_clone_to_owned()).collect()
}
