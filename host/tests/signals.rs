//! A stop signal at any moment of the host's start stops it (issue 25, item 9). strace's
//! fault injection delivers SIGINT, SIGTERM or SIGHUP exactly at the `rt_sigaction` call that
//! installs the host's handler of that signal: there signal-hook's handler, already in place
//! but not yet told what to do, used to run with nothing to do, and the endless run went on.
//! Every such call of `run`, `run --in-process` and `agent` is hit in turn.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use rustix::process::{Pid, Signal};

/// A pipeline that runs until it is stopped.
const ENDLESS: &str = r#"
[pipeline]
name = "endless"
[[stage]]
name = "gen"
plugin = "generator"
depth = 2
params = { width = 48, height = 32, fps = 200.0 }
[[stage]]
name = "sink"
plugin = "null"
inputs = ["gen"]
"#;

/// `gpuipc-host` under strace: strace is the child, the host strace's.
struct Traced {
    strace: Option<Running>,
    /// The host's pid, unless it was over before it could be read.
    host: Option<Pid>,
}

impl Traced {
    /// Start `strace STRACE_ARGS gpuipc-host ARGS` in `dir` and find the host's pid.
    fn start(dir: &Path, strace_args: &[&str], args: &[&str]) -> Traced {
        let wrap: Vec<&str> = ["strace", "-qq", "-e", "trace=rt_sigaction", "-e", "signal=none"]
            .iter()
            .chain(strace_args)
            .copied()
            .collect();
        let strace = start_wrapped(dir, &wrap, args, Stdio::null());
        let children = format!("/proc/{0}/task/{0}/children", strace.pid());
        let deadline = Instant::now() + Duration::from_secs(30);
        // strace may start a short-lived child of its own first: the host is the child that
        // runs the host binary (after its exec; the pid stays the one strace forked).
        let is_host = |pid: &str| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).next().is_some_and(|arg0| arg0.ends_with(host_bin().as_bytes())))
        };
        let host = loop {
            let listed = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = listed.split_whitespace().find(|pid| is_host(pid)) {
                break Pid::from_raw(pid.parse().unwrap());
            }
            // Already over: strace ends once the host has.
            if ended(&strace, Duration::ZERO) {
                break None;
            }
            assert!(Instant::now() < deadline, "strace started no host within 30 s:\n{}", strace.stderr_so_far());
            std::thread::sleep(Duration::from_millis(5));
        };
        Traced { strace: Some(strace), host }
    }

    fn strace(&mut self) -> &mut Running {
        self.strace.as_mut().expect("strace until finished")
    }

    /// Wait for the host (and so strace) to end, at most `timeout`; past it, the host is
    /// killed (strace's death would leave it running) and the test fails with `why`.
    fn finish(mut self, timeout: Duration, why: &str) -> Finished {
        if !ended(self.strace(), timeout) {
            self.kill_host();
            let strace = self.strace.take().expect("strace until finished");
            let stderr = strace.stderr_so_far();
            drop(strace.finish(Duration::from_secs(30)));
            panic!("{why}: still running {timeout:?} later\n{stderr}");
        }
        let host = self.host.take();
        let finished = self.strace.take().expect("strace until finished").finish(Duration::from_secs(30));
        if let Some(host) = host {
            assert_nothing_left(host.as_raw_nonzero().get() as u32);
        }
        finished
    }

    fn kill_host(&mut self) {
        if let Some(host) = self.host.take() {
            let _ = rustix::process::kill_process(host, Signal::KILL);
        }
    }
}

impl Drop for Traced {
    /// A failing test leaves no endless host behind.
    fn drop(&mut self) {
        self.kill_host();
    }
}

/// Whether `process` exits within `timeout` (left unreaped, for [`Running::finish`]).
fn ended(process: &Running, timeout: Duration) -> bool {
    let pid = Pid::from_raw(process.pid() as i32).expect("a child's pid");
    // A pidfd is readable once its process has exited, reaped or not.
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).unwrap();
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(n) if n > 0 => return true,
            Err(rustix::io::Errno::INTR) => continue,
            _ if left.is_zero() => return false,
            _ => continue,
        }
    }
}

/// The host's `rt_sigaction` calls that install a handler of a stop signal, as strace counts
/// them (from 1), with the signal's name: found by tracing the same command, which `stop`
/// then ends.
fn installs_of_stop_handlers(dir: &Path, args: &[&str], stop: impl FnOnce(&mut Traced)) -> Vec<(usize, String)> {
    let trace = dir.join("trace.txt");
    let mut traced = Traced::start(dir, &["-o", trace.to_str().unwrap()], args);
    stop(&mut traced);
    traced.finish(RUN_TIMEOUT, "the traced command that finds the calls to inject at");
    let text = std::fs::read_to_string(&trace).unwrap();
    let installs: Vec<(usize, String)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let signal = line.strip_prefix("rt_sigaction(")?.split(',').next()?;
            let installs = line.strip_prefix(&format!("rt_sigaction({signal}, {{")).is_some();
            (installs && ["SIGINT", "SIGTERM", "SIGHUP"].contains(&signal)).then(|| (i + 1, signal.to_owned()))
        })
        .collect();
    let names: Vec<&str> = installs.iter().map(|(_, s)| s.as_str()).collect();
    for signal in ["SIGINT", "SIGTERM", "SIGHUP"] {
        assert!(
            names.contains(&signal),
            "no handler of {signal} installed by `gpuipc-host {}`:\n{text}",
            args.join(" ")
        );
    }
    installs
}

/// Each stop signal, delivered as its handler is installed, ends `gpuipc-host ARGS`. The
/// calls are found by tracing `gpuipc-host FIND_ARGS` (`args` or a finite twin), which `stop`
/// ends.
fn every_install_hit(dir: &Path, args: &[&str], find_args: &[&str], stop: impl FnOnce(&mut Traced)) {
    for (call, signal) in installs_of_stop_handlers(dir, find_args, stop) {
        let inject = format!("inject=rt_sigaction:signal={signal}:when={call}");
        let traced = Traced::start(dir, &["-e", &inject, "-o", "/dev/null"], args);
        let why = format!(
            "{signal} at rt_sigaction call {call} (its handler's install) of `gpuipc-host {}` was lost",
            args.join(" ")
        );
        let finished = traced.finish(RUN_TIMEOUT, &why);
        assert!(!finished.stderr.contains("panicked"), "{why}:\n{}", finished.output());
    }
}

/// A folder holding `endless.toml`, and that file's path.
fn endless(name: &str) -> (PathBuf, String) {
    let dir = scratch(name);
    let path = pipeline(&dir, "endless.toml", ENDLESS);
    (dir, path.to_str().unwrap().to_owned())
}

#[test]
fn a_stop_signal_as_its_handler_is_installed_ends_a_run() {
    if !strace_for_test("a_stop_signal_as_its_handler_is_installed_ends_a_run") {
        return;
    }
    let (dir, file) = endless("signals-run");
    every_install_hit(&dir, &["run", &file, "-q"], &["run", &file, "-q", "--frames", "3"], |_| {});
}

#[test]
fn a_stop_signal_as_its_handler_is_installed_ends_an_in_process_run() {
    if !strace_for_test("a_stop_signal_as_its_handler_is_installed_ends_an_in_process_run") {
        return;
    }
    let (dir, file) = endless("signals-in-process");
    every_install_hit(
        &dir,
        &["run", &file, "-q", "--in-process"],
        &["run", &file, "-q", "--in-process", "--frames", "3"],
        |_| {},
    );
}

#[test]
fn a_stop_signal_as_its_handler_is_installed_ends_an_agent() {
    if !strace_for_test("a_stop_signal_as_its_handler_is_installed_ends_an_agent") {
        return;
    }
    let dir = scratch("signals-agent");
    let listen = format!("tcp/127.0.0.1:{}", free_ports(1));
    let args = ["agent", "--name", "a", "--listen", &listen];
    every_install_hit(&dir, &args, &args, |traced| {
        traced.strace().wait_for_stderr("listening on", Duration::from_secs(60));
        rustix::process::kill_process(traced.host.expect("a listening agent"), Signal::TERM).unwrap();
    });
}
