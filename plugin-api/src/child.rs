//! A helper program a stage runs beside it (ffmpeg decoding or encoding for it): started so
//! that it dies with the stage, its standard error kept for messages, and never left behind.
//!
//! A stage can be killed at any instruction (SIGKILL from outside, a GPU fault, the host
//! gone). A child it started would then live on, holding files and CPU, so every child is
//! started with the parent-death signal set to SIGKILL: the kernel kills it when the thread
//! that started it ends. Start children from the thread that calls the plugin (`create` and
//! `process` run on one thread for the life of the stage), never from a short-lived thread.
//! A [`ChildProcess`] dropped before [`ChildProcess::finish`] kills and reaps its child.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How many of the child's last lines of standard error a message quotes.
const STDERR_LINES: usize = 12;

/// A running helper program. Its standard error is read by a thread of its own and its last
/// lines kept; standard input and output are the caller's (set them on the `Command`).
#[derive(Debug)]
pub struct ChildProcess {
    /// What the child is, for messages (`ffmpeg (decoding in.mp4)`).
    what: String,
    child: Option<Child>,
    stderr: Arc<Mutex<StderrLines>>,
    reader: Option<JoinHandle<()>>,
}

/// What the child wrote to standard error: its last lines, and how many in all.
#[derive(Debug, Default)]
struct StderrLines {
    last: VecDeque<String>,
    count: u64,
}

impl ChildProcess {
    /// Start `command` (its standard error is taken over; set standard input and output as
    /// the caller needs them). The child is killed when the calling thread ends.
    pub fn spawn(what: impl Into<String>, mut command: Command) -> Result<ChildProcess> {
        let what = what.into();
        command.stderr(Stdio::piped());
        let parent = rustix::process::getpid();
        // SAFETY: the closure runs in the child between fork and exec and only makes two
        // async-signal-safe system calls (prctl, getppid); it allocates nothing and takes no
        // lock.
        unsafe {
            command.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
                // The parent may have died before the signal was armed: then nobody would
                // ever kill us.
                if rustix::process::getppid() != Some(parent) {
                    return Err(std::io::Error::other("the stage process is gone"));
                }
                Ok(())
            });
        }
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::new(format!("cannot start {what}: `{program}` is not installed (not found on PATH)"))
            }
            _ => Error::new(format!("cannot start {what} (`{program}`): {e}")),
        })?;
        let stderr = Arc::new(Mutex::new(StderrLines::default()));
        let reader = child.stderr.take().map(|pipe| {
            let lines = Arc::clone(&stderr);
            std::thread::spawn(move || keep_last_lines(pipe, &lines))
        });
        Ok(ChildProcess { what, child: Some(child), stderr, reader })
    }

    /// The child's standard input, if the command piped it and it was not closed.
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.child.as_mut()?.stdin.as_mut()
    }

    /// Take the child's standard input (to write it from another thread, or to close it).
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut()?.stdin.take()
    }

    /// The child's standard output, if the command piped it.
    pub fn stdout(&mut self) -> Option<&mut ChildStdout> {
        self.child.as_mut()?.stdout.as_mut()
    }

    /// Take the child's standard output (to read it on another thread).
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    /// The last lines the child wrote to standard error, joined by "; " (empty if none).
    pub fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|e| e.into_inner());
        lines.last.iter().map(String::as_str).collect::<Vec<_>>().join("; ")
    }

    /// How many lines (not empty) the child has written to standard error so far: a decoder's
    /// errors, say, each logged on a line of its own.
    pub fn stderr_lines(&self) -> u64 {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).count
    }

    /// An error about the child: `context`, then what it said last on standard error. Use it
    /// when writing to or reading from the child failed: its own message says why. A pipe
    /// breaks while the child is still exiting, so this waits a moment for it to end.
    pub fn error(&mut self, context: impl std::fmt::Display) -> Error {
        let status = self.child.as_mut().and_then(|c| wait_a_moment(c, EXIT_WAIT));
        if status.is_some() {
            // A child that ended has said all it will once its standard error is read out.
            self.join_reader(EXIT_WAIT);
        }
        let said = self.stderr_tail();
        let status = status.map(|s| format!(" ({} {})", self.what, describe(s))).unwrap_or_default();
        if said.is_empty() {
            Error::new(format!("{context}{status}"))
        } else {
            Error::new(format!("{context}{status}: {}", said))
        }
    }

    /// Close the child's standard input and wait for it to exit. An exit other than 0 is an
    /// error quoting what it wrote to standard error.
    pub fn finish(mut self) -> Result<()> {
        let mut child = self.child.take().expect("a ChildProcess holds its child until finish or drop");
        drop(child.stdin.take());
        let status = child.wait().map_err(|e| Error::new(format!("cannot wait for {}: {e}", self.what)))?;
        self.join_reader(EXIT_WAIT);
        if status.success() {
            return Ok(());
        }
        let said = self.stderr_tail();
        Err(Error::new(format!(
            "{} {}{}",
            self.what,
            describe(status),
            if said.is_empty() { String::new() } else { format!(": {said}") }
        )))
    }

    /// Wait up to `bound` for the thread reading standard error to read it out. A process the
    /// child started may hold the pipe open after the child ended: the thread is then left to
    /// end with it, and what it has read so far is all a message quotes.
    fn join_reader(&mut self, bound: Duration) {
        let deadline = Instant::now() + bound;
        if let Some(reader) = self.reader.take() {
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(POLL);
            }
            if reader.is_finished() {
                // The thread only reads a pipe; a panic there loses lines, nothing else.
                let _ = reader.join();
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Already exited is fine; anything else we can only report.
            let _ = child.kill();
            if let Err(e) = child.wait() {
                crate::log::warn(&format!("cannot reap {}: {e}", self.what));
            }
        }
        self.join_reader(EXIT_WAIT);
    }
}

/// How long a child that broke its pipes gets to exit, and its standard error to be read out.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// How often those waits look.
const POLL: Duration = Duration::from_millis(5);

/// The child's exit status if it exits within `bound`.
fn wait_a_moment(child: &mut Child, bound: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + bound;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(POLL),
            _ => return None,
        }
    }
}

/// "exited with code 1", "was killed by signal 9".
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        _ => "ended".to_owned(),
    }
}

fn keep_last_lines(pipe: impl std::io::Read, lines: &Mutex<StderrLines>) {
    for line in BufReader::new(pipe).lines() {
        let Ok(line) = line else { break };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut kept = lines.lock().unwrap_or_else(|e| e.into_inner());
        if kept.last.len() == STDERR_LINES {
            kept.last.pop_front();
        }
        kept.last.push_back(line.to_owned());
        kept.count += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(script);
        c
    }

    #[test]
    fn a_failing_child_is_an_error_quoting_its_last_words() {
        let child = ChildProcess::spawn("the test tool", sh("echo one >&2; echo two >&2; exit 3")).unwrap();
        let e = child.finish().unwrap_err();
        assert_eq!(e.message(), "the test tool exited with code 3: one; two");
    }

    #[test]
    fn a_missing_program_names_itself() {
        let e = ChildProcess::spawn("ffmpeg (test)", Command::new("gpuipc-no-such-program")).unwrap_err();
        assert_eq!(
            e.message(),
            "cannot start ffmpeg (test): `gpuipc-no-such-program` is not installed (not found on PATH)"
        );
    }

    #[test]
    fn a_dropped_child_is_killed_and_reaped() {
        let mut command = sh("sleep 600");
        command.stdin(Stdio::null());
        let child = ChildProcess::spawn("sleeper", command).unwrap();
        let pid = child.child.as_ref().unwrap().id();
        drop(child);
        // Killed and reaped: no process has its pid any more.
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        assert_eq!(rustix::process::test_kill_process(pid), Err(rustix::io::Errno::SRCH));
    }

    #[test]
    fn a_grandchild_holding_standard_error_does_not_hold_up_the_end() {
        // The shell's background sleep keeps the pipe open after the shell exits.
        let child = ChildProcess::spawn("a shell", sh("sleep 3 & echo started >&2; exit 4")).unwrap();
        let e = child.finish().unwrap_err();
        assert!(e.message().starts_with("a shell exited with code 4"), "{e}");
    }

    #[test]
    fn a_child_reads_its_input_and_finishes() {
        use std::io::{Read, Write};
        let mut command = sh("cat");
        command.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = ChildProcess::spawn("cat", command).unwrap();
        child.stdin().unwrap().write_all(b"frame").unwrap();
        drop(child.take_stdin());
        let mut out = String::new();
        child.stdout().unwrap().read_to_string(&mut out).unwrap();
        assert_eq!(out, "frame");
        child.finish().unwrap();
    }
}
