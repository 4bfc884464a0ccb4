//! One host's part of a run, run as a child `gpuipc-host run part.toml`: the same code for an
//! agent's part and for the coordinator's own, so rings, stage processes, restarts and MPS are
//! exactly a one-machine run's. The child's stderr is passed on with a `[run RUN host NAME]`
//! prefix, its last lines kept for the outcome. Asked to, the child also writes its run's
//! [`Sample`] as a JSON line on its stdout every [`SAMPLE_EVERY`] ([`write_samples`]), which
//! the part passes on as they come (an agent publishes them to the coordinator) and keeps the
//! last of for the outcome.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::Signal;

use super::control::Outcome;
use crate::metrics::{Board, Sample};

/// Lines of a part's stderr an outcome carries.
pub const TAIL_LINES: usize = 50;
/// How long a part is given to drain, once told to, before it is killed; and how long an agent
/// waits for a lost coordinator (`on_host_loss = "wait"`) before it drains.
pub const COORDINATOR_GRACE: Duration = Duration::from_secs(30);
/// How long checking a part (`validate`, which loads its plugins) may take.
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(60);
/// The environment variable that tells a `run` it is a part, and whose child: it ends with
/// that process (docs/multi-host.md), so a killed agent or coordinator leaves no run behind.
pub const PARENT_ENV: &str = "GPUIPC_PART_OF";
/// How often a part's run writes its sample, when asked to (`run --part-samples`).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What a part needs to start.
#[derive(Debug, Clone)]
pub struct PartSpec {
    pub run: String,
    pub host: String,
    pub pipeline: String,
    pub frames: Option<u64>,
    pub checksums: Option<PathBuf>,
    /// Whether the part's run sends its samples (for a coordinator's live table or metrics,
    /// or the agent's metrics).
    pub samples: bool,
}

/// A part's run, started; its outcome goes to the callback given to [`PartRun::start`].
pub struct PartRun {
    pidfd: OwnedFd,
    pub pid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum PartError {
    #[error("host `{host}`: cannot prepare its part: {why}")]
    Prepare { host: String, why: String },
    #[error("host `{host}`: its part is not a valid pipeline:\n{errors}")]
    Invalid { host: String, errors: String },
    #[error("host `{host}`: cannot start its part's run: {why}")]
    Spawn { host: String, why: String },
}

impl PartRun {
    /// Write the part into a private folder, check it with this binary's `validate`, and start
    /// `run` on it. `on_sample` gets each sample the run sends (with `spec.samples`), its rows
    /// labelled with the part's host; `on_exit` gets the outcome once the run has exited and its
    /// last sample was passed on (from a thread of its own, which also outlives the child, as
    /// its parent-death signal needs).
    pub fn start(
        spec: PartSpec,
        on_sample: impl Fn(Sample) + Send + 'static,
        on_exit: impl FnOnce(Outcome) + Send + 'static,
    ) -> Result<PartRun, PartError> {
        let prepare = |why: String| PartError::Prepare { host: spec.host.clone(), why };
        let exe =
            std::env::current_exe().map_err(|e| prepare(format!("cannot find the gpuipc-host executable: {e}")))?;
        let dir = crate::supervisor::private_dir::create("gpuipc-part").map_err(|e| prepare(e.to_string()))?;
        let file = dir.join("part.toml");
        std::fs::write(&file, &spec.pipeline).map_err(|e| prepare(format!("cannot write {}: {e}", file.display())))?;
        if let Err(errors) = validate(&exe, &file) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(PartError::Invalid { host: spec.host.clone(), errors });
        }
        let (tx, rx) = mpsc::channel();
        let host = spec.host.clone();
        std::thread::Builder::new()
            .name(format!("part-{}", spec.run))
            .spawn(move || supervise(&exe, &dir, &spec, tx, on_sample, on_exit))
            .map_err(|e| PartError::Spawn { host: host.clone(), why: e.to_string() })?;
        match rx.recv() {
            Ok(Ok((pid, pidfd))) => Ok(PartRun { pidfd, pid }),
            Ok(Err(why)) => Err(PartError::Spawn { host, why }),
            Err(_) => Err(PartError::Spawn { host, why: "its supervising thread ended".into() }),
        }
    }

    /// Drain the part (SIGTERM: its run stops its sources and lets frames in flight finish).
    pub fn drain(&self) {
        self.signal(Signal::TERM);
    }

    /// End the part now (SIGKILL: its stages die with it, by their parent-death signal).
    pub fn kill(&self) {
        self.signal(Signal::KILL);
    }

    fn signal(&self, signal: Signal) {
        // A pidfd never reaches another process that got the same pid after this one ended.
        if let Err(e) = rustix::process::pidfd_send_signal(&self.pidfd, signal)
            && e != rustix::io::Errno::SRCH
        {
            tracing::warn!("cannot signal the part's run (pid {}): {e}", self.pid);
        }
    }
}

/// `gpuipc-host validate FILE`: its errors, on failure.
fn validate(exe: &Path, file: &Path) -> Result<(), String> {
    let mut child = Command::new(exe)
        .arg("validate")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {} validate: {e}", exe.display()))?;
    let pipe = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || std::io::read_to_string(pipe).unwrap_or_default());
    let status = wait_bounded(&mut child, VALIDATE_TIMEOUT);
    let errors = reader.join().unwrap_or_default();
    match status {
        Some(s) if s.success() => Ok(()),
        Some(_) => Err(errors.trim_end().to_owned()),
        None => Err(format!("checking it took longer than {} s", VALIDATE_TIMEOUT.as_secs())),
    }
}

/// Wait for `child` at most `timeout`; kill it past that.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    let pidfd =
        rustix::process::pidfd_open(rustix::process::Pid::from_child(child), rustix::process::PidfdFlags::empty()).ok();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        match &pidfd {
            Some(fd) => {
                let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
                let _ = rustix::event::poll(&mut fds, Some(&ts));
            }
            // Without a pidfd (an old kernel), look again shortly.
            None => std::thread::sleep(Duration::from_millis(20).min(left)),
        }
    }
}

/// The part's thread: start the run, pass on its stderr, wait, and say how it ended.
fn supervise(
    exe: &Path,
    dir: &Path,
    spec: &PartSpec,
    started: mpsc::Sender<Result<(u32, OwnedFd), String>>,
    on_sample: impl Fn(Sample) + Send + 'static,
    on_exit: impl FnOnce(Outcome),
) {
    let report = dir.join("part-report.json");
    let mut command = Command::new(exe);
    command.arg("run").arg(dir.join("part.toml")).arg("--quiet").arg("--part").arg("--report").arg(&report);
    if let Some(frames) = spec.frames {
        command.arg("--frames").arg(frames.to_string());
    }
    if let Some(sums) = &spec.checksums {
        command.arg("--checksums").arg(sums);
    }
    if spec.samples {
        command.arg("--part-samples");
    }
    // Its own process group: a Ctrl-C at the terminal reaches the coordinator alone, which
    // drains every host's part the same way.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command
        .env(PARENT_ENV, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(if spec.samples { Stdio::piped() } else { Stdio::null() })
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = started.send(Err(format!("cannot start {} run: {e}", exe.display())));
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
    };
    match rustix::process::pidfd_open(rustix::process::Pid::from_child(&child), rustix::process::PidfdFlags::empty()) {
        Ok(fd) => {
            let _ = started.send(Ok((child.id(), fd)));
        }
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = started.send(Err(format!("cannot watch its run: {e}")));
            let _ = std::fs::remove_dir_all(dir);
            return;
        }
    }
    let samples = child.stdout.take().map(|pipe| {
        let host = spec.host.clone();
        std::thread::spawn(move || read_samples(pipe, &host, on_sample))
    });
    let prefix = format!("[run {} host {}] ", spec.run, spec.host);
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL_LINES);
    if let Some(pipe) = child.stderr.take() {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let _ = writeln!(std::io::stderr(), "{prefix}{line}");
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
    let status = child.wait();
    // The child has exited: its stdout ends, and its last sample is in.
    let sample = samples.and_then(|t| t.join().ok()).flatten().map(Box::new);
    let report = std::fs::read_to_string(&report).ok().and_then(|text| serde_json::from_str(&text).ok());
    let _ = std::fs::remove_dir_all(dir);
    let (code, signal) = match status {
        Ok(s) => (s.code(), std::os::unix::process::ExitStatusExt::signal(&s).map(signal_name)),
        Err(e) => (None, Some(format!("an unknown end (cannot wait for it: {e})"))),
    };
    on_exit(Outcome { host: spec.host.clone(), code, signal, report, stderr_tail: tail.into(), sample });
}

/// Pass on each sample a part's run writes, labelled with its host; the last one.
fn read_samples(pipe: impl std::io::Read, host: &str, on_sample: impl Fn(Sample)) -> Option<Sample> {
    let mut last = None;
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Sample>(&line) {
            Ok(sample) => {
                let sample = sample.on_host(host);
                on_sample(sample.clone());
                last = Some(sample);
            }
            Err(e) => tracing::debug!("host `{host}`: a line of its run's samples that is not one: {e}"),
        }
    }
    last
}

/// In a `run --part-samples`: write the board's latest sample as a JSON line on stdout every
/// [`SAMPLE_EVERY`] until `stop`, then the last one. On a thread of its own: a part that does
/// not read holds up this thread, never the run's loop.
pub fn write_samples(board: std::sync::Arc<Board>, stop: mpsc::Receiver<()>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        loop {
            let done = !matches!(stop.recv_timeout(SAMPLE_EVERY), Err(mpsc::RecvTimeoutError::Timeout));
            let text = serde_json::to_string(&board.latest().0).expect("a sample serialises");
            // Its reader gone, the part is ending: nothing to tell.
            if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() || done {
                break;
            }
        }
    })
}

fn signal_name(signal: i32) -> String {
    match signal {
        9 => "SIGKILL".into(),
        15 => "SIGTERM".into(),
        2 => "SIGINT".into(),
        n => format!("signal {n}"),
    }
}

/// In a `run` started as a part: end with the process that started it (its agent, or the
/// coordinator), as stages end with their run.
pub fn adopt_parent_death() {
    let Some(parent) = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse::<i32>().ok()) else { return };
    if let Err(e) = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)) {
        tracing::warn!("cannot ask to end with the agent that started this part: {e}");
    }
    // The parent may have gone before the request took effect.
    if rustix::process::getppid().map(|p| p.as_raw_nonzero().get()) != Some(parent) {
        std::process::exit(1);
    }
}
