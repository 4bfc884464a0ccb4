//! Watching a run: one poll loop over every stage's pidfd and control socket and the signal
//! pipe. It starts the stages together once all are ready, turns Ctrl-C or SIGTERM into a
//! drain, restarts a failed stage by its policy (or turns the failure into an abort of the
//! whole run), kills a stage that stalls, and stops a run in which no frame moves any more,
//! or a drain that does not finish ([`super::standstill`]).

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use rustix::event::{PollFd, PollFlags};

use super::report::{Live, RunReport, StageOutcome};
use super::restart::{self, Budget};
use super::spawn::{Launch, Stages};
use super::standstill::{self, Standstill};
use super::watchdog::StallWatch;
use std::os::fd::OwnedFd;

use crate::control::{Export, FromStage, GpuFailure, ToStage};
use crate::link::stats;

/// How long stages get to stop on their own after an abort before they are killed.
const ABORT_GRACE: Duration = Duration::from_secs(5);
/// How often live statistics are redrawn.
const TICK: Duration = Duration::from_millis(200);

/// The signals that drain a run: Ctrl-C, SIGTERM, and SIGHUP (a closed terminal or a lost
/// ssh session ends the run as cleanly as Ctrl-C would).
pub const STOP_SIGNALS: [i32; 3] =
    [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP];

/// The stop signals, delivered to the watch loop through a socket pair.
pub struct Shutdown {
    read: UnixStream,
    ids: Vec<signal_hook::SigId>,
    claimed: Option<Claimed>,
}

impl Shutdown {
    pub fn install() -> std::io::Result<Shutdown> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let (ids, claimed) = Shutdown::claim(|| {
            STOP_SIGNALS
                .iter()
                .map(|&signal| signal_hook::low_level::pipe::register(signal, write.try_clone()?))
                .collect()
        })?;
        Ok(Shutdown { read, ids, claimed: Some(claimed) })
    }

    /// Install this process's handler of the stop signals, standing in for their disposition
    /// (the default, which ends the process, or an ignore it inherited) until a run claims
    /// them ([`Shutdown::claim`]). Call it first in `main`, before any thread starts.
    ///
    /// Why: signal-hook installs its handler with `sigaction` and only then publishes what
    /// the handler is to do, so a signal in between runs its handler with nothing to do, and
    /// is lost (issue 25: a Ctrl-C 1.7 ms into a run was, and the endless run went on). The
    /// stop signals are blocked on this thread until the handler is complete, so one that
    /// arrives meanwhile waits and reaches it. Blocking them on one thread keeps them from
    /// others only while no other thread exists: later, a blocked signal goes to any thread
    /// that does not block it (cuInit starts one that blocks none, measured on an H100), and
    /// that is why this runs before anything else. Once installed, the handlers of a run are
    /// added to it, which signal-hook publishes at once with no `sigaction`, so they have no
    /// such window whatever threads exist then. Idempotent.
    pub fn take_over() -> std::io::Result<()> {
        stand_in().map(drop)
    }

    /// Register a run's own handling of the stop signals with `register` (signal-hook flags,
    /// pipes, iterators); from then until the returned [`Claimed`] drops, a stop signal is
    /// the run's alone, no longer ending the process.
    pub fn claim<T>(register: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<(T, Claimed)> {
        let stand_in = stand_in()?;
        // Registered first: until the claim below, a signal still ends the process, never
        // falling between the two.
        let registered = register()?;
        let mut claims = CLAIMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *claims += 1;
        stand_in.store(false, Ordering::SeqCst);
        Ok((registered, Claimed(())))
    }

    /// Wait until a stop signal comes or `timeout` passes; whether one came.
    pub fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.take() > 0 {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut fds = [PollFd::new(&self.read, PollFlags::IN)];
            let wait = left.min(Duration::from_secs(1));
            let timeout = rustix::time::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: wait.subsec_nanos() as i64 };
            // EINTR is a signal: looked at next.
            let _ = rustix::event::poll(&mut fds, Some(&timeout));
        }
    }

    /// Signals received since the last call.
    fn take(&self) -> usize {
        let mut buf = [0u8; 64];
        let mut n = 0;
        while let Ok(k) = (&self.read).read(&mut buf) {
            if k == 0 {
                break;
            }
            n += k;
        }
        n
    }
}

impl Drop for Shutdown {
    fn drop(&mut self) {
        // The stand-in first: a signal between the two ends the process rather than nothing.
        drop(self.claimed.take());
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// A run's claim on the stop signals ([`Shutdown::claim`]); when the last one drops, the
/// stand-in acts again.
pub struct Claimed(());

impl Drop for Claimed {
    fn drop(&mut self) {
        let mut claims = CLAIMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *claims -= 1;
        if *claims == 0
            && let Some(Ok(stand_in)) = STAND_IN.get()
        {
            stand_in.store(true, Ordering::SeqCst);
        }
    }
}

/// Whether the stand-in acts (no run claims the stop signals), once installed.
static STAND_IN: std::sync::OnceLock<Result<Arc<AtomicBool>, String>> = std::sync::OnceLock::new();
/// Live [`Claimed`]s.
static CLAIMS: std::sync::Mutex<usize> = std::sync::Mutex::new(0);

/// [`Shutdown::take_over`]: install the stand-in once; its switch.
fn stand_in() -> std::io::Result<&'static Arc<AtomicBool>> {
    STAND_IN
        .get_or_init(|| install_stand_in().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| std::io::Error::other(e.clone()))
}

fn install_stand_in() -> std::io::Result<Arc<AtomicBool>> {
    let mut stop = SigSet::empty();
    for signal in STOP_SIGNALS {
        stop.add(Signal::try_from(signal).expect("a stop signal is a signal"));
    }
    let ignored = ignored_signals();
    stop.thread_block()?;
    let acting = Arc::new(AtomicBool::new(true));
    let registered = STOP_SIGNALS.iter().try_for_each(|&signal| {
        if ignored.contains(&signal) {
            // Ignored it stays, but through the handler, so a run's own is added to it.
            signal_hook::flag::register(signal, Arc::new(AtomicBool::new(false))).map(drop)
        } else {
            signal_hook::flag::register_conditional_default(signal, acting.clone()).map(drop)
        }
    });
    // Unblocked even where they came blocked (a mask is inherited across exec): a pending
    // one now reaches the handler, complete, and a run hears them. Whatever the outcome of
    // the registration, which leaves any handler it installed complete.
    stop.thread_unblock()?;
    registered.map(|()| acting)
}

/// The stop signals this process was started with ignored (`nohup` ignores SIGHUP), from
/// its `SigIgn` mask; none where it cannot be read.
fn ignored_signals() -> Vec<i32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    STOP_SIGNALS.into_iter().filter(|&s| mask & (1 << (s - 1)) != 0).collect()
}

struct Track {
    ready: bool,
    socket_open: bool,
    last_message: Option<FromStage>,
}

impl Track {
    /// A new process: not ready, its socket open, nothing said yet.
    fn new() -> Track {
        Track { ready: false, socket_open: true, last_message: None }
    }
}

/// The least time a stage's setup is given before the watchdog ends it, whatever its
/// `stall_timeout`: a process start, a plugin load and a CUDA context take a while on a busy
/// machine (a kernel compiled for the first time, seconds), and a short `stall_timeout` is about frames.
const SETUP_AT_LEAST: Duration = Duration::from_secs(10);

/// Where one stage stands.
enum Life {
    /// Its process runs; `started` once it was told to begin its frame loop.
    Alive { started: bool, watch: Option<StallWatch> },
    /// Killed by the host (the watchdog, or to restart with its group); `why` is the cause
    /// when the host itself judged it failed.
    Killed { why: Option<String> },
    /// Dead and taken back; started again at `at`.
    Restarting { at: Instant },
    /// Over for this run.
    Ended,
}

/// One stage across its processes.
struct Slot {
    track: Track,
    life: Life,
    incarnation: u32,
    /// Whether any of its processes got to run.
    ran: bool,
    budget: Budget,
    outcome: Option<StageOutcome>,
    /// When its group's last failure was seen: the restart says how long recovery took.
    failed_at: Option<Instant>,
    /// The stages it restarts with, itself first ([`restart::group`]), chosen when the
    /// failure that restarts it was seen.
    group: Vec<usize>,
    /// When its current process was started: its setup is timed from here.
    spawned: Instant,
    /// Its current process's pid (a replica's take lock names its holder by it).
    pid: u32,
}

/// Why the run is ending early, if it is.
enum Ending {
    Running,
    /// Sources were told to stop; the pipeline drains.
    Draining {
        signal: &'static str,
    },
    /// A stage failed (or a second signal came); everything stops now.
    Aborting {
        since: Instant,
    },
}

/// The watch loop's state.
struct Watch<'a, 'l> {
    launch: &'a Launch<'l>,
    slots: Vec<Slot>,
    first_failure: Option<(usize, String)>,
    ending: Ending,
    started: Option<Instant>,
    killed_all: bool,
    broker: super::broker::Broker,
    /// The run's watch over its links, from the start; `None` without links or watchdogs.
    links: Option<Standstill>,
    /// Whether frames flow, for the metrics endpoint's readiness.
    flow: super::sample::Flow,
    /// When every stage was first told to run, in ns since the Unix epoch.
    started_at_ns: Option<u64>,
}

pub fn watch(launch: &Launch<'_>, stages: &mut Stages, shutdown: &Shutdown) -> RunReport {
    let plan = launch.plan;
    let slots = stages
        .0
        .iter()
        .map(|p| Slot {
            track: Track::new(),
            life: Life::Alive { started: false, watch: None },
            incarnation: 0,
            ran: false,
            budget: Budget::default(),
            outcome: None,
            failed_at: None,
            group: Vec::new(),
            spawned: Instant::now(),
            pid: p.child.id(),
        })
        .collect();
    let mut w = Watch {
        launch,
        slots,
        first_failure: None,
        ending: Ending::Running,
        started: None,
        killed_all: false,
        broker: super::broker::Broker::default(),
        links: None,
        flow: super::sample::Flow::new(),
        started_at_ns: None,
    };
    let live = Live::new(launch.procs, launch.options.live);
    while !w.slots.iter().all(|s| matches!(s.life, Life::Ended)) {
        poll_once(stages, &w.slots, shutdown, w.next_restart());
        w.take_signals(shutdown.take());
        for i in 0..stages.0.len() {
            w.serve(stages, i);
        }
        w.start_when_ready(stages);
        w.restart_due(stages);
        w.watch_stalls(stages);
        w.watch_links();
        w.abort_stragglers(stages);
        live.update(launch.stats);
        w.post();
    }
    live.finish();
    let interrupted = match w.ending {
        Ending::Draining { signal } => Some(signal),
        _ => None,
    };
    final_drops(launch);
    let board = launch.options.metrics.clone();
    let mut flow = std::mem::replace(&mut w.flow, super::sample::Flow::new());
    let started_at_ns = w.started_at_ns;
    let gone: Vec<bool> = w.slots.iter().map(|s| matches!(s.outcome, Some(StageOutcome::Gone(_)))).collect();
    let outcomes = w.slots.into_iter().map(|s| s.outcome).collect();
    let report = RunReport::new(
        plan,
        launch.procs,
        launch.stats,
        outcomes,
        w.first_failure,
        interrupted,
        w.started.map(|s| s.elapsed()),
    )
    .with_links(plan, launch.procs, launch.rings)
    .with_tuning(plan, launch.procs, launch.options.spin_us);
    // The endpoint's last word is the report's figures, for a scrape after the run.
    if let Some(board) = board {
        let state = match (report.succeeded(), &report.interrupted) {
            (true, None) => crate::metrics::RunState::Finished,
            (true, Some(_)) => crate::metrics::RunState::Stopped,
            (false, _) => crate::metrics::RunState::Failed,
        };
        let up = vec![false; launch.procs.len()];
        let elapsed = Some(Duration::from_secs_f64(report.seconds));
        let standing = super::sample::Standing { state, up: &up, gone: &gone, elapsed, started_at_ns };
        board.post(super::sample::take(launch, &standing, &mut flow));
    }
    report
}

/// What the broker reaches the processes through.
fn reach<'s>(launch: &'s Launch<'_>, stages: &'s Stages) -> super::broker::Reach<'s> {
    super::broker::Reach { stages: &stages.0, stats: launch.stats, procs: launch.procs, rings: launch.rings }
}

/// Why a process failed: the words for people, and the CUDA driver's failure it came from, if
/// it did (as the stage said it in types: `FromStage::Failed`).
struct Failure {
    cause: String,
    gpu: Option<GpuFailure>,
}

impl Watch<'_, '_> {
    /// Post the run's sample on its metrics board, if it has one.
    fn post(&mut self) {
        let Some(board) = &self.launch.options.metrics else { return };
        let state = match self.ending {
            _ if self.started.is_none() && self.first_failure.is_none() => crate::metrics::RunState::Starting,
            Ending::Running => crate::metrics::RunState::Running,
            Ending::Draining { .. } => crate::metrics::RunState::Draining,
            Ending::Aborting { .. } => crate::metrics::RunState::Stopping,
        };
        let up: Vec<bool> = self.slots.iter().map(|s| matches!(s.life, Life::Alive { started: true, .. })).collect();
        let gone: Vec<bool> = self.slots.iter().map(|s| matches!(s.outcome, Some(StageOutcome::Gone(_)))).collect();
        let standing = super::sample::Standing {
            state,
            up: &up,
            gone: &gone,
            elapsed: self.started.map(|s| s.elapsed()),
            started_at_ns: self.started_at_ns,
        };
        board.post(super::sample::take(self.launch, &standing, &mut self.flow));
    }

    fn abort(&mut self) {
        if !matches!(self.ending, Ending::Aborting { .. }) {
            for r in self.launch.rings {
                r.abort();
            }
            for s in self.launch.stats {
                s.get().stop.store(stats::DRAIN, Ordering::Relaxed);
            }
            self.ending = Ending::Aborting { since: Instant::now() };
        }
        // Nothing restarts once the run is aborted.
        for slot in &mut self.slots {
            if let Life::Restarting { .. } = slot.life {
                slot.life = Life::Ended;
                slot.outcome.get_or_insert(StageOutcome::Stopped);
            }
        }
    }

    fn fail(&mut self, i: usize, why: String) {
        if self.first_failure.is_none() {
            self.first_failure = Some((i, why));
        }
        self.abort();
    }

    fn take_signals(&mut self, signals: usize) {
        if signals == 0 {
            return;
        }
        match self.ending {
            // One signal while running: drain. A second one, or one before the stages
            // started: abort.
            Ending::Running if self.started.is_some() && signals == 1 => {
                for (p, s) in self.launch.stats.iter().enumerate() {
                    if self.launch.options.part && crate::plan::is_link_receiver(&self.launch.stage(p).plugin.name) {
                        continue;
                    }
                    s.get().stop.store(stats::DRAIN, Ordering::Relaxed);
                }
                self.ending = Ending::Draining { signal: "a stop signal" };
                tracing::info!("stopping: sources end their streams and the pipeline drains; signal again to abort");
            }
            _ => self.fail(usize::MAX, "interrupted".to_owned()),
        }
    }

    /// Messages from stage `i`, and its exit.
    fn serve(&mut self, stages: &mut Stages, i: usize) {
        let plan = self.launch.plan;
        for (export, fds) in drain_messages(&stages.0[i], &mut self.slots[i].track) {
            if let Err(e) = self.broker.export(plan, &reach(self.launch, stages), i, export, fds) {
                self.fail(i, e);
            }
        }
        let p = &mut stages.0[i];
        if p.exit.is_some() {
            return;
        }
        let Ok(Some(status)) = p.child.try_wait() else { return };
        p.exit = Some(status);
        // The stage's last message was sent before it exited.
        drain_messages(p, &mut self.slots[i].track);
        let slot = &mut self.slots[i];
        let judged = StageOutcome::judge(status, slot.track.last_message.as_ref(), self.first_failure.is_some());
        let said_gpu = match &slot.track.last_message {
            Some(FromStage::Failed { gpu, .. }) => *gpu,
            _ => None,
        };
        let (outcome, gpu) = match std::mem::replace(&mut slot.life, Life::Ended) {
            Life::Killed { why: Some(why) } => (StageOutcome::Failed(why), None),
            // Killed to restart with its group: not a failure of its own.
            Life::Killed { why: None } if !matches!(self.ending, Ending::Aborting { .. }) => {
                self.reclaim_and_schedule(stages, i, None);
                return;
            }
            _ => (judged, said_gpu),
        };
        match outcome {
            StageOutcome::Failed(cause) => self.after_failure(stages, i, Failure { cause, gpu }),
            other => {
                // Its link objects died with it: a neighbour restarted later must not get them.
                self.broker.forget(plan, &reach(self.launch, stages), i, true);
                self.slots[i].outcome = Some(other);
            }
        }
    }

    /// Stage `i` failed: restart it (and its group) by its policy, or stop the run.
    fn after_failure(&mut self, stages: &mut Stages, i: usize, failure: Failure) {
        let supervision = self.launch.stage(i).supervision;
        let slot = &mut self.slots[i];
        let restartable =
            !matches!(self.ending, Ending::Aborting { .. }) && restart::wants_restart(supervision.restart, slot.ran);
        if !restartable {
            self.lose(stages, i, failure);
            return;
        }
        let wait = match slot.budget.take(&supervision, Instant::now()) {
            Ok(wait) => wait,
            Err(gave_up) => {
                self.lose(stages, i, Failure { cause: format!("{}; {gave_up}", failure.cause), ..failure });
                return;
            }
        };
        let mut group = self.restart_group(failure.gpu.is_some(), i);
        // A member that already finished its stream has nothing left to do: it is not
        // started again, and the group does not wait for it to die (it never would).
        group.retain(|&m| m == i || !matches!(self.slots[m].life, Life::Ended));
        self.explain_mps_fault(i, &failure);
        let cause = failure.cause;
        let now = Instant::now();
        for &m in &group {
            self.slots[m].failed_at = Some(now);
            self.slots[m].group = group.clone();
        }
        tracing::warn!(
            "stage '{}' {cause}; restarting it{} in {}",
            self.launch.name(i),
            if group.len() > 1 { format!(" with {}", names(self.launch, &group[1..])) } else { String::new() },
            crate::config::format_duration(wait)
        );
        for &m in &group[1..] {
            if let Life::Alive { .. } = self.slots[m].life {
                let _ = stages.0[m].child.kill();
                self.slots[m].life = Life::Killed { why: None };
            }
        }
        self.reclaim_and_schedule(stages, i, Some(wait));
    }

    /// Under MPS a fatal GPU fault ends every client of the GPU: each reports the fault,
    /// and the MPS server's log names the first client that saw it, not the one that caused
    /// it (measured: it named the source when the stage after it faulted). Say so.
    fn explain_mps_fault(&self, i: usize, failure: &Failure) {
        if let Some(text) = self.mps_fault(i, failure) {
            tracing::warn!("stage '{}' {text}", self.launch.name(i));
        }
    }

    /// What a GPU fault stage `i` reported (`failure`) means under MPS, where the stage that
    /// reports a fault first is not the one that caused it: which stages it ended, and that
    /// any of them may be the culprit. `None` when the run does not use MPS, or `cause` is not
    /// a GPU fault.
    fn mps_fault(&self, i: usize, failure: &Failure) -> Option<String> {
        let plan = self.launch.plan;
        let stage = self.launch.stage(i);
        let fatal = failure.gpu.is_some_and(|g| g.fatal);
        if !(self.launch.mps() && stage.domain == gpuipc_plugin_api::Domain::Cuda && fatal) {
            return None;
        }
        let cause = &failure.cause;
        let device = stage.device.unwrap_or(0);
        let sharing: Vec<String> = plan
            .stages
            .iter()
            .filter(|s| s.domain == gpuipc_plugin_api::Domain::Cuda && s.device.unwrap_or(0) == device)
            .map(|s| format!("'{}'", s.name))
            .collect();
        let others = match plan.mps {
            crate::config::MpsScope::Shared => {
                ", or a stage of another run of this user sharing its MPS daemon (mps = \"private\" keeps other runs' faults out)"
            }
            crate::config::MpsScope::Private => "",
        };
        Some(format!(
            "reported a fatal GPU fault on cuda:{device} under MPS ({cause}); a fault there ends every client of the GPU, so the stage that reports it first is not known to have caused it: any of {}{others} may have (with isolation = \"process\" only the stage that faults fails, and is named)",
            sharing.join(", ")
        ))
    }

    /// Take back the link ends of process `i`, replica `replica` of stage `stage`, which died.
    fn reclaim_replica(&self, i: usize, stage: usize, replica: u32, queue: &crate::link::queue::QueueMap) -> u64 {
        let (plan, stats, rings) = (self.launch.plan, &self.launch.stats[i], self.launch.rings);
        super::reclaim::reclaim_replica(plan, stage, replica, self.slots[i].pid, stats, queue, rings)
    }

    /// After a GPU fault in process `i`, the stages it shares a GPU ring with (under MPS,
    /// every cuda stage on its GPU) cannot stop by themselves: their streams wait on events the
    /// faulted context will never record, or their own context faulted too. Waiting out the
    /// abort's grace for them made a stop take 6.3-6.8 s; they are killed now, as a restart
    /// would (their frames are lost with the run anyway).
    fn kill_stalled_by_fault(&mut self, stages: &mut Stages, i: usize) {
        for m in self.restart_group(true, i).into_iter().skip(1) {
            if let Life::Alive { .. } = self.slots[m].life {
                tracing::debug!(
                    "stage '{}' shares a GPU ring (or an MPS server) with '{}', which faulted: killed",
                    self.launch.name(m),
                    self.launch.name(i)
                );
                let _ = stages.0[m].child.kill();
                self.slots[m].life = Life::Killed { why: None };
            }
        }
    }

    /// Process `i` failed and will not run again: the run stops, unless it is a replica with
    /// siblings still running, whose stage goes on without it.
    fn lose(&mut self, stages: &mut Stages, i: usize, failure: Failure) {
        let why = self.mps_fault(i, &failure).unwrap_or_else(|| failure.cause.clone());
        let cause = failure.cause;
        self.slots[i].outcome = Some(StageOutcome::Failed(cause.clone()));
        let stage = self.launch.procs[i].stage;
        let siblings_left =
            self.launch.processes_of(stage).filter(|&p| p != i && !matches!(self.slots[p].life, Life::Ended)).count();
        let queue = self.launch.queues.get(stage).and_then(Option::as_ref);
        let (Some(queue), true) = (queue, siblings_left > 0 && !matches!(self.ending, Ending::Aborting { .. })) else {
            if failure.gpu.is_some_and(|g| g.fatal) {
                self.kill_stalled_by_fault(stages, i);
            }
            self.fail(i, why);
            return;
        };
        let replica = self.launch.procs[i].replica.expect("a stage with a queue block runs replicas");
        self.slots[i].outcome = Some(StageOutcome::Gone(cause.clone()));
        let plan = self.launch.plan;
        self.reclaim_replica(i, stage, replica, queue);
        super::reclaim::replica_gone(plan, stage, replica, queue, self.launch.rings);
        self.broker.forget(plan, &reach(self.launch, stages), i, true);
        self.slots[i].life = Life::Ended;
        tracing::warn!(
            "stage '{}' {cause}; stage '{}' goes on with {siblings_left} replica{}",
            self.launch.name(i),
            plan.stages[stage].name,
            if siblings_left == 1 { "" } else { "s" }
        );
    }

    /// The processes that restart with process `i` (itself first): its stage's restart group
    /// ([`restart::group`]), each stage of it with all its processes, except that a replica
    /// that fails other than by a GPU fault restarts alone.
    fn restart_group(&self, gpu_fault: bool, i: usize) -> Vec<usize> {
        if self.launch.procs[i].replica.is_some() && !gpu_fault {
            return vec![i];
        }
        let stages = restart::group(self.launch.plan, self.launch.mps(), gpu_fault, self.launch.procs[i].stage);
        let mut group = vec![i];
        if stages.len() > 1 {
            group.extend(stages.iter().flat_map(|&s| self.launch.processes_of(s)).filter(|&p| p != i));
        }
        group
    }

    /// A dead member of a restart group: take back its link ends, and start it again with
    /// its group, after `wait` (the failed stage's backoff; `None` for the members killed to
    /// restart with it, which take the group's time).
    fn reclaim_and_schedule(&mut self, stages: &Stages, i: usize, wait: Option<Duration>) {
        let plan = self.launch.plan;
        let group = self.slots[i].group.clone();
        let taps = self.launch.options.checksums.as_deref();
        let stage = self.launch.procs[i].stage;
        let group_stages: Vec<usize> = group.iter().map(|&m| self.launch.procs[m].stage).collect();
        let lost = match (self.launch.procs[i].replica, self.launch.queues.get(stage).and_then(Option::as_ref)) {
            (Some(replica), Some(queue)) => {
                // Given up, not lost: counted dropped on the input links by `on_loss = "drop"`.
                self.reclaim_replica(i, stage, replica, queue);
                0
            }
            _ => super::reclaim::reclaim_stage(
                plan,
                stage,
                &group_stages,
                &self.launch.stats[i],
                self.launch.rings,
                taps,
            ),
        };
        if lost > 0 {
            tracing::info!("stage '{}': {lost} frame(s) lost with its process", self.launch.name(i));
        }
        self.broker.forget(plan, &reach(self.launch, stages), i, false);
        let group_at = group.iter().filter_map(|&m| match self.slots[m].life {
            Life::Restarting { at } => Some(at),
            _ => None,
        });
        let at = group_at.chain([Instant::now() + wait.unwrap_or_default()]).max().expect("one at least");
        for &m in &group {
            if let Life::Restarting { at: theirs } = &mut self.slots[m].life {
                *theirs = at;
            }
        }
        self.slots[i].life = Life::Restarting { at };
    }

    /// Start the groups whose restart is due: all members at once, once every one is dead.
    fn restart_due(&mut self, stages: &mut Stages) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let Life::Restarting { at } = self.slots[i].life else { continue };
            let group = self.slots[i].group.clone();
            let group_dead = group.iter().all(|&m| matches!(self.slots[m].life, Life::Restarting { .. }));
            if at > now || !group_dead {
                continue;
            }
            for m in group {
                self.start_again(stages, m);
            }
        }
    }

    fn start_again(&mut self, stages: &mut Stages, i: usize) {
        let slot = &mut self.slots[i];
        slot.incarnation += 1;
        match self.launch.start(i, slot.incarnation) {
            Ok(process) => {
                slot.pid = process.child.id();
                stages.0[i] = process;
                slot.track = Track::new();
                slot.life = Life::Alive { started: false, watch: None };
                slot.spawned = Instant::now();
                self.launch.stats[i].get().restarts.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                slot.outcome = Some(StageOutcome::Failed(e.clone()));
                slot.life = Life::Ended;
                self.fail(i, e);
            }
        }
    }

    /// The first time, every stage starts together once all are ready; a restarted stage
    /// starts as soon as it is.
    fn start_when_ready(&mut self, stages: &Stages) {
        if self.first_failure.is_some() {
            return;
        }
        let all_ready = self.slots.iter().all(|s| s.track.ready);
        if self.started.is_none() && !all_ready {
            return;
        }
        let now = Instant::now();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if let Life::Alive { started: started @ false, watch } = &mut slot.life
                && slot.track.ready
            {
                if let Err(e) = stages.0[i].socket.send(&ToStage::Start, &[]) {
                    tracing::debug!("start for stage '{}' not delivered: {e}", stages.0[i].name);
                }
                *started = true;
                *watch = Some(StallWatch::new(&self.launch.stats[i], now));
                slot.ran = true;
                if slot.incarnation > 0 {
                    let after = slot.failed_at.map_or(String::new(), |t| {
                        format!(", running {} after the failure", crate::config::format_duration(now.duration_since(t)))
                    });
                    tracing::info!("stage '{}' restarted (restart {}){after}", stages.0[i].name, slot.incarnation);
                }
            }
        }
        if self.started.is_none() {
            self.started = Some(now);
            self.started_at_ns = Some(crate::stage::measure::now_ns());
            self.links = Standstill::timeout_of(self.launch.plan).map(|timeout| Standstill::new(timeout, now));
            tracing::info!("all {} stages ready; running", stages.0.len());
        }
    }

    /// Kill every started stage that has made no progress for its stall timeout, and every
    /// stage whose setup (plugin, CUDA context, link objects) has taken longer than that: a
    /// setup that waits for ever would otherwise hold the run for ever.
    fn watch_stalls(&mut self, stages: &mut Stages) {
        let now = Instant::now();
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(timeout) = self.launch.stage(i).supervision.stall_timeout else { continue };
            let why = match &mut slot.life {
                Life::Alive { started: true, watch: Some(watch) } => watch.check(&self.launch.stats[i], timeout, now),
                Life::Alive { started: false, .. }
                    if !slot.track.ready && now.duration_since(slot.spawned) >= timeout.max(SETUP_AT_LEAST) =>
                {
                    Some(format!(
                        "stalled: not ready {} after its process started (loading the plugin, creating its instance, a CUDA context, link objects); killed by the watchdog",
                        crate::config::format_duration(timeout.max(SETUP_AT_LEAST))
                    ))
                }
                _ => None,
            };
            if let Some(why) = why {
                let _ = stages.0[i].child.kill();
                slot.life = Life::Killed { why: Some(why) };
            }
        }
    }

    /// Stop the run when no frame moves on any link while every stage waits for one, or a
    /// drain moves nothing, for the run's stall timeout ([`super::standstill`]): nothing
    /// else would end either, and no stage's own watchdog fires (their waits pulse). A
    /// drain given up this way is aborted like a second signal, saying why.
    fn watch_links(&mut self) {
        let draining = match self.ending {
            Ending::Running => None,
            Ending::Draining { signal } => Some(signal),
            Ending::Aborting { .. } => return,
        };
        let Some(links) = &mut self.links else { return };
        let launch = self.launch;
        let processes: Vec<standstill::Process> = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, slot)| match slot.life {
                Life::Ended => standstill::Process::Ended,
                Life::Alive { started: true, .. } => {
                    let s = launch.stats[i].get();
                    standstill::Process::Running {
                        phase: s.phase.load(Ordering::Relaxed),
                        heartbeat: s.heartbeat.load(Ordering::Relaxed),
                        watchdog: launch.stage(i).supervision.stall_timeout.is_some(),
                    }
                }
                _ => standstill::Process::Changing,
            })
            .collect();
        let words = standstill::words(launch.rings, launch.stats);
        let Some(verdict) = links.look(&words, &processes, draining.is_some(), Instant::now()) else { return };
        let run = standstill::Run {
            plan: launch.plan,
            procs: launch.procs,
            rings: launch.rings,
            stats: launch.stats,
            processes: &processes,
        };
        let why = standstill::explain(verdict, links.timeout(), draining.unwrap_or("a stop signal"), run);
        tracing::warn!("stopping the run: {why}");
        self.fail(usize::MAX, why);
    }

    /// After an abort: stages still waiting for their start learn of it from a closed socket;
    /// those that do not stop within the grace period are killed.
    fn abort_stragglers(&mut self, stages: &mut Stages) {
        let Ending::Aborting { since } = self.ending else { return };
        for (p, slot) in stages.0.iter().zip(&self.slots) {
            if p.exit.is_none() && matches!(slot.life, Life::Alive { started: false, .. }) {
                p.socket.shutdown();
            }
        }
        if since.elapsed() > ABORT_GRACE && !self.killed_all {
            for p in stages.0.iter_mut().filter(|p| p.exit.is_none()) {
                tracing::warn!("stage '{}' did not stop within {ABORT_GRACE:?}; killing it", p.name);
                let _ = p.child.kill();
            }
            self.killed_all = true;
        }
    }

    /// When the next restart is due, so the poll wakes for it.
    fn next_restart(&self) -> Option<Instant> {
        self.slots.iter().filter_map(|s| if let Life::Restarting { at } = s.life { Some(at) } else { None }).min()
    }
}

/// Each stage's drops as its input links' counts stand at the end, which the host adds to
/// too (a dead replica's frame given up) after the stage's last look: the most any one input
/// missed (a join's number missed on every input counts once, as the stage counts it), in the
/// row of its first process (replicas share their inputs' counts).
fn final_drops(launch: &Launch<'_>) {
    for (stage, s) in launch.plan.stages.iter().enumerate().filter(|(_, s)| !s.inputs.is_empty()) {
        let dropped = s.inputs.iter().map(|input| launch.rings[input.link].dropped(input.consumer)).max().unwrap_or(0);
        if let Some(first) = launch.processes_of(stage).next() {
            launch.stats[first].get().dropped.store(dropped, Ordering::Relaxed);
        }
    }
}

fn names(launch: &Launch<'_>, processes: &[usize]) -> String {
    processes.iter().map(|&p| format!("'{}'", launch.name(p))).collect::<Vec<_>>().join(", ")
}

/// Wait until a pidfd or socket is readable, a signal arrives, a restart is due, or a tick
/// passes.
fn poll_once(stages: &Stages, slots: &[Slot], shutdown: &Shutdown, next_restart: Option<Instant>) {
    let mut fds: Vec<PollFd<'_>> = vec![PollFd::new(&shutdown.read, PollFlags::IN)];
    for (p, slot) in stages.0.iter().zip(slots) {
        if p.exit.is_none() {
            fds.push(PollFd::new(&p.pidfd, PollFlags::IN));
        }
        if slot.track.socket_open && p.exit.is_none() {
            fds.push(PollFd::from_borrowed_fd(p.socket.as_fd(), PollFlags::IN));
        }
    }
    let wait = next_restart.map_or(TICK, |at| at.saturating_duration_since(Instant::now()).min(TICK));
    let timeout = rustix::time::Timespec { tv_sec: 0, tv_nsec: wait.as_nanos() as i64 };
    // EINTR is a signal: the loop looks at the signal pipe next.
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
}

/// Read every message a stage has sent so far; return the GPU link exports among them.
fn drain_messages(p: &super::spawn::StageProcess, track: &mut Track) -> Vec<(Export, Vec<OwnedFd>)> {
    let mut exports = Vec::new();
    while track.socket_open {
        match p.socket.try_recv::<FromStage>() {
            Ok(Some((message, fds))) => match message {
                FromStage::Ready => track.ready = true,
                FromStage::Exported(export) => exports.push((*export, fds)),
                other => track.last_message = Some(other),
            },
            Ok(None) => break,
            Err(crate::control::SocketError::Closed) => track.socket_open = false,
            Err(e) => {
                // Nothing more is read from it: its end is judged by its exit status alone.
                tracing::warn!("stage '{}': its control socket: {e}; not read any further", p.name);
                track.socket_open = false;
            }
        }
    }
    exports
}
