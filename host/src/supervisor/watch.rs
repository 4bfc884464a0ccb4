//! Watching a run: one poll loop over every stage's pidfd and control socket and the signal
//! pipe. It starts the stages together once all are ready, turns Ctrl-C or SIGTERM into a
//! drain, and turns the first failure into an abort of the whole run.

use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::RunOptions;
use super::report::{Live, RunReport, StageOutcome};
use super::spawn::Stages;
use std::os::fd::OwnedFd;

use crate::control::{Export, FromStage, ToStage};
use crate::link::{RingMap, StatsMap, stats};
use crate::plan::Plan;

/// How long stages get to stop on their own after an abort before they are killed.
const ABORT_GRACE: Duration = Duration::from_secs(5);
/// How often live statistics are redrawn.
const TICK: Duration = Duration::from_millis(200);

/// Ctrl-C and SIGTERM, delivered to the watch loop through a socket pair.
pub struct Shutdown {
    read: UnixStream,
    ids: Vec<signal_hook::SigId>,
}

impl Shutdown {
    pub fn install() -> std::io::Result<Shutdown> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        let mut ids = Vec::new();
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            ids.push(signal_hook::low_level::pipe::register(signal, write.try_clone()?)?);
        }
        Ok(Shutdown { read, ids })
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
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

struct Track {
    ready: bool,
    socket_open: bool,
    last_message: Option<FromStage>,
}

/// Why the run is ending early, if it is.
enum Ending {
    Running,
    /// Sources were told to stop; the pipeline drains.
    Draining { signal: &'static str },
    /// A stage failed (or a second signal came); everything stops now.
    Aborting { since: Instant },
}

pub fn watch(
    plan: &Plan,
    stages: &mut Stages,
    stats: &[StatsMap],
    rings: &[RingMap],
    options: &RunOptions,
    shutdown: &Shutdown,
) -> RunReport {
    let mut tracks: Vec<Track> =
        stages.0.iter().map(|_| Track { ready: false, socket_open: true, last_message: None }).collect();
    let mut outcomes: Vec<Option<StageOutcome>> = vec![None; stages.0.len()];
    let mut first_failure: Option<(usize, String)> = None;
    let mut ending = Ending::Running;
    let mut started: Option<Instant> = None;
    let mut killed = false;
    let mut broker = super::broker::Broker::default();
    let live = Live::new(plan, options.live);
    let abort = |ending: &mut Ending| {
        if !matches!(ending, Ending::Aborting { .. }) {
            for r in rings {
                r.abort();
            }
            for s in stats {
                s.get().stop.store(stats::DRAIN, Ordering::Relaxed);
            }
            *ending = Ending::Aborting { since: Instant::now() };
        }
    };
    loop {
        if stages.0.iter().all(|p| p.exit.is_some()) {
            break;
        }
        poll_once(stages, &tracks, shutdown);

        let signals = shutdown.take();
        if signals > 0 {
            match ending {
                // One signal while running: drain. A second one, or one before the stages
                // started: abort.
                Ending::Running if started.is_some() && signals == 1 => {
                    for s in stats {
                        s.get().stop.store(stats::DRAIN, Ordering::Relaxed);
                    }
                    ending = Ending::Draining { signal: "a stop signal" };
                    tracing::info!("stopping: sources end their streams and the pipeline drains; signal again to abort");
                }
                _ => {
                    if first_failure.is_none() {
                        first_failure = Some((usize::MAX, "interrupted".to_owned()));
                    }
                    abort(&mut ending);
                }
            }
        }

        for i in 0..stages.0.len() {
            for (export, fds) in drain_messages(&stages.0[i], &mut tracks[i]) {
                if let Err(e) = broker.export(plan, &stages.0, i, export, fds)
                    && first_failure.is_none()
                {
                    first_failure = Some((i, e));
                    abort(&mut ending);
                }
            }
            let p = &mut stages.0[i];
            if p.exit.is_some() {
                continue;
            }
            let Ok(Some(status)) = p.child.try_wait() else { continue };
            p.exit = Some(status);
            // The stage's last message was sent before it exited.
            drain_messages(p, &mut tracks[i]);
            let outcome = StageOutcome::judge(status, tracks[i].last_message.as_ref(), first_failure.is_some());
            if let StageOutcome::Failed(cause) = &outcome
                && first_failure.is_none()
            {
                first_failure = Some((i, cause.clone()));
                abort(&mut ending);
            }
            outcomes[i] = Some(outcome);
        }

        if started.is_none() && tracks.iter().all(|t| t.ready) && first_failure.is_none() {
            for p in &stages.0 {
                if let Err(e) = p.socket.send(&ToStage::Start, &[]) {
                    tracing::debug!("start for stage '{}' not delivered: {e}", p.name);
                }
            }
            started = Some(Instant::now());
            tracing::info!("all {} stages ready; running", stages.0.len());
        }
        if let Ending::Aborting { since } = ending {
            // Stages still waiting for their start learn of the abort from a closed socket.
            if started.is_none() {
                for p in stages.0.iter().filter(|p| p.exit.is_none()) {
                    p.socket.shutdown();
                }
            }
            if since.elapsed() > ABORT_GRACE && !killed {
                for p in stages.0.iter_mut().filter(|p| p.exit.is_none()) {
                    tracing::warn!("stage '{}' did not stop within {ABORT_GRACE:?}; killing it", p.name);
                    let _ = p.child.kill();
                }
                killed = true;
            }
        }
        live.update(stats);
    }
    live.finish();
    let interrupted = match ending {
        Ending::Draining { signal } => Some(signal),
        _ => None,
    };
    RunReport::new(plan, stats, outcomes, first_failure, interrupted, started.map(|s| s.elapsed()))
}

/// Wait until a pidfd or socket is readable, a signal arrives, or a tick passes.
fn poll_once(stages: &Stages, tracks: &[Track], shutdown: &Shutdown) {
    let mut fds: Vec<PollFd<'_>> = vec![PollFd::new(&shutdown.read, PollFlags::IN)];
    for (p, t) in stages.0.iter().zip(tracks) {
        if p.exit.is_none() {
            fds.push(PollFd::new(&p.pidfd, PollFlags::IN));
        }
        if t.socket_open {
            fds.push(PollFd::from_borrowed_fd(p.socket.as_fd(), PollFlags::IN));
        }
    }
    let timeout = rustix::time::Timespec { tv_sec: 0, tv_nsec: TICK.as_nanos() as i64 };
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
            Err(_) => track.socket_open = false,
        }
    }
    exports
}
