//! A test RTSP server in a child process (`scripts/rtsp-test-server.py`, GStreamer's, or
//! `scripts/rtsp-file-server.py`, pure Python): its first line of standard output says its port
//! (`port N`), the lines after it what it does (`client K` at each PLAY, `paused`, ...), read
//! on a thread of their own. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a test waits for a line the server should say.
const WAIT: Duration = Duration::from_secs(60);

pub struct RtspServer {
    child: Child,
    lines: mpsc::Receiver<String>,
    pub port: u16,
}

impl RtspServer {
    /// Start `command` (the server script and its arguments) and wait for its port.
    pub fn start(mut command: Command) -> RtspServer {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let line = lines.recv_timeout(WAIT).expect("the RTSP test server says its port");
        let port = line.strip_prefix("port ").unwrap_or_else(|| panic!("not a port: {line}")).trim().parse().unwrap();
        RtspServer { child, lines, port }
    }

    /// The first line from now on that starts with `needle`.
    pub fn wait_for(&self, needle: &str) -> String {
        loop {
            match self.lines.recv_timeout(WAIT) {
                Ok(line) if line.starts_with(needle) => return line,
                Ok(_) => {}
                Err(e) => panic!("the RTSP test server said no `{needle}`: {e}"),
            }
        }
    }

    /// The lines it says from now on up to and including the first that is `needle`.
    pub fn lines_until(&self, needle: &str) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let line = self.lines.recv_timeout(WAIT).unwrap_or_else(|e| panic!("the server said no `{needle}`: {e}"));
            seen.push(line);
            if seen.last().unwrap() == needle {
                return seen;
            }
        }
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), signal).unwrap();
    }

    /// Its first mount, `/cam0`, with `credentials` (`user:password@`, or empty).
    pub fn url(&self, credentials: &str) -> String {
        format!("rtsp://{credentials}127.0.0.1:{}/cam0", self.port)
    }
}

impl Drop for RtspServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
