//! The doctor's side of the IPC self-test: start the exporter and importer peers (on one
//! device, or on two with peer access), joined by a socketpair, bound their run with a deadline, and turn what they
//! printed (or how they died) into one outcome per check. The doctor itself never touches
//! CUDA here: a fault in a peer cannot take it down.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use command_fds::{CommandFdExt, FdMapping};
use rustix::event::{PollFd, PollFlags};

use super::peer::{Outcome, PEER_FD, PeerOutput, PeerRole};
use crate::control::ControlSocket;

/// What the self-test found on one device.
#[derive(Debug, Clone)]
pub struct SelfTest {
    /// Memory through a VMM POSIX fd, ordered by the exporter's `ready` event.
    pub vmm: Outcome,
    /// Memory through a legacy IPC handle, ordered by the same event.
    pub legacy: Outcome,
    /// The importer's `released` event, waited on by the exporter.
    pub released: Outcome,
}

impl SelfTest {
    fn failed(reason: String) -> SelfTest {
        SelfTest {
            vmm: Outcome::Fail(reason.clone()),
            legacy: Outcome::Fail(reason.clone()),
            released: Outcome::Fail(reason),
        }
    }

    pub fn passed(&self) -> bool {
        [&self.vmm, &self.legacy, &self.released].iter().all(|o| !matches!(o, Outcome::Fail(_)))
    }
}

/// A peer process and the threads collecting its output.
struct Peer {
    role: &'static str,
    child: Child,
    pidfd: Option<OwnedFd>,
    stdout: std::thread::JoinHandle<Vec<u8>>,
    stderr: std::thread::JoinHandle<Vec<u8>>,
}

fn spawn(exe: &Path, role: PeerRole, ordinal: u32, socket: ControlSocket) -> std::io::Result<Peer> {
    // The Command holds our copy of the socket end; it is dropped when this returns, so each
    // peer's end is open only in that peer and it sees the other one go.
    let mut command = Command::new(exe);
    command
        .arg("__doctor-peer")
        .arg(match role {
            PeerRole::Exporter => "exporter",
            PeerRole::Importer => "importer",
        })
        .arg(ordinal.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
        .fd_mappings(vec![FdMapping { parent_fd: socket.into_fd(), child_fd: PEER_FD }])
        .map_err(std::io::Error::other)?;
    let mut child = command.spawn()?;
    let pidfd =
        rustix::process::pidfd_open(rustix::process::Pid::from_child(&child), rustix::process::PidfdFlags::empty())
            .ok();
    let collect = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = r.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = collect(Box::new(child.stdout.take().expect("piped")));
    let stderr = collect(Box::new(child.stderr.take().expect("piped")));
    let role = match role {
        PeerRole::Exporter => "exporter",
        PeerRole::Importer => "importer",
    };
    Ok(Peer { role, child, pidfd, stdout, stderr })
}

/// Run the two-process test with the exporter on device `from` and the importer on `to`
/// (the same device, or one that reads `from`'s memory by peer access), using `exe` (this
/// binary) for the peers.
pub fn run(exe: &Path, from: u32, to: u32, timeout: Duration) -> SelfTest {
    let (a, b) = match ControlSocket::pair() {
        Ok(pair) => pair,
        Err(e) => return SelfTest::failed(format!("cannot create a socketpair: {e}")),
    };
    let exporter = match spawn(exe, PeerRole::Exporter, from, a) {
        Ok(p) => p,
        Err(e) => return SelfTest::failed(format!("cannot start {}: {e}", exe.display())),
    };
    let importer = match spawn(exe, PeerRole::Importer, to, b) {
        Ok(p) => p,
        Err(e) => {
            let mut peers = [exporter];
            wait_all(&mut peers, Instant::now());
            return SelfTest::failed(format!("cannot start {}: {e}", exe.display()));
        }
    };
    let mut peers = [exporter, importer];
    let statuses = wait_all(&mut peers, Instant::now() + timeout);
    let [exporter, importer] = peers;
    let exporter = finish(exporter, &statuses[0]);
    let importer = finish(importer, &statuses[1]);
    combine(&exporter, &importer)
}

/// What a peer left behind: its last JSON line, or why there is none.
struct Ended {
    output: Option<PeerOutput>,
    /// How it ended and its last words on stderr, for when `output` says nothing.
    story: String,
}

fn finish(peer: Peer, status: &Result<ExitStatus, String>) -> Ended {
    let stdout = peer.stdout.join().unwrap_or_default();
    let stderr = peer.stderr.join().unwrap_or_default();
    let output = String::from_utf8_lossy(&stdout)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str::<PeerOutput>(l).ok());
    let how = match status {
        Ok(s) => format!("the {} process exited ({s})", peer.role),
        Err(e) => format!("the {} process {e}", peer.role),
    };
    let stderr = String::from_utf8_lossy(&stderr);
    let last =
        stderr.lines().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().chars().take(300).collect::<String>());
    let story = match last {
        Some(line) => format!("{how}: {line}"),
        None => how,
    };
    Ended { output, story }
}

fn combine(exporter: &Ended, importer: &Ended) -> SelfTest {
    let fatal = |e: &Ended| match &e.output {
        Some(PeerOutput::Fatal(why)) => Some(why.clone()),
        _ => None,
    };
    // The first cause is the best explanation: the exporter fails first if the device does.
    let reason = || {
        fatal(exporter)
            .map(|w| format!("exporter: {w}"))
            .or_else(|| fatal(importer).map(|w| format!("importer: {w}")))
            .unwrap_or_else(|| if exporter.output.is_none() { exporter.story.clone() } else { importer.story.clone() })
    };
    let (vmm, legacy) = match &importer.output {
        Some(PeerOutput::Importer { vmm, legacy }) => (vmm.clone(), legacy.clone()),
        _ => (Outcome::Fail(reason()), Outcome::Fail(reason())),
    };
    let released = match &exporter.output {
        Some(PeerOutput::Exporter { released }) => released.clone(),
        _ => Outcome::Fail(reason()),
    };
    SelfTest { vmm, legacy, released }
}

/// Wait for every peer until `deadline`, then kill what still runs. Polls the pidfds, so it
/// wakes as soon as one exits.
fn wait_all(peers: &mut [Peer], deadline: Instant) -> Vec<Result<ExitStatus, String>> {
    let mut statuses: Vec<Option<Result<ExitStatus, String>>> = peers.iter().map(|_| None).collect();
    loop {
        for (p, s) in peers.iter_mut().zip(statuses.iter_mut()) {
            if s.is_none()
                && let Ok(Some(status)) = p.child.try_wait()
            {
                *s = Some(Ok(status));
            }
        }
        if statuses.iter().all(Option::is_some) {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            for (p, s) in peers.iter_mut().zip(statuses.iter_mut()) {
                if s.is_none() {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                    *s = Some(Err("did not finish in time and was killed".into()));
                }
            }
            break;
        }
        // Without a pidfd (an old kernel) fall back to a short tick.
        let tick = if peers.iter().all(|p| p.pidfd.is_some()) {
            left.min(Duration::from_secs(1))
        } else {
            left.min(Duration::from_millis(20))
        };
        let mut fds: Vec<PollFd<'_>> = peers
            .iter()
            .zip(&statuses)
            .filter(|(_, s)| s.is_none())
            .filter_map(|(p, _)| p.pidfd.as_ref().map(|fd| PollFd::new(fd, PollFlags::IN)))
            .collect();
        let timeout = rustix::time::Timespec { tv_sec: tick.as_secs() as i64, tv_nsec: tick.subsec_nanos() as i64 };
        let _ = rustix::event::poll(&mut fds, Some(&timeout));
    }
    statuses.into_iter().map(|s| s.expect("every peer has ended")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(output: Option<PeerOutput>, story: &str) -> Ended {
        Ended { output, story: story.into() }
    }

    #[test]
    fn a_fatal_exporter_explains_every_check() {
        let e = ended(
            Some(PeerOutput::Fatal("cuDevicePrimaryCtxRetain on cuda:0: CUDA_ERROR_OUT_OF_MEMORY (2)".into())),
            "exited 1",
        );
        let i = ended(Some(PeerOutput::Fatal("no offer from the exporter: closed".into())), "exited 1");
        let t = combine(&e, &i);
        assert!(!t.passed());
        for o in [&t.vmm, &t.legacy, &t.released] {
            assert!(matches!(o, Outcome::Fail(w) if w.starts_with("exporter: cuDevicePrimaryCtxRetain")), "{o:?}");
        }
    }

    #[test]
    fn a_crashed_peer_is_described_by_its_exit() {
        let e = ended(Some(PeerOutput::Exporter { released: Outcome::Fail("the importer did not answer".into()) }), "");
        let i = ended(None, "the importer process exited (signal: 11 (SIGSEGV))");
        let t = combine(&e, &i);
        assert!(matches!(&t.vmm, Outcome::Fail(w) if w.contains("SIGSEGV")), "{:?}", t.vmm);
    }

    #[test]
    fn skipped_checks_do_not_fail_the_test() {
        let e = ended(Some(PeerOutput::Exporter { released: Outcome::Pass("ok".into()) }), "");
        let i = ended(
            Some(PeerOutput::Importer { vmm: Outcome::Skipped("no VMM".into()), legacy: Outcome::Pass("ok".into()) }),
            "",
        );
        assert!(combine(&e, &i).passed());
    }

    /// The real peers on a machine without a driver: both start, both report why they cannot
    /// take part, and every check fails with the exporter's reason.
    #[test]
    fn real_peers_without_a_driver_report_why() {
        if crate::gpu::driver_available() {
            return;
        }
        // target/debug/deps/<test binary> → target/debug/gpuipc-host, built for the
        // integration tests; skip if this build has none.
        let exe = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().join("gpuipc-host");
        if !exe.is_file() {
            return;
        }
        let t = run(&exe, 0, 0, Duration::from_secs(20));
        for o in [&t.vmm, &t.legacy, &t.released] {
            assert!(matches!(o, Outcome::Fail(w) if w.starts_with("exporter: no CUDA driver found")), "{o:?}");
        }
    }

    /// The machinery without CUDA: a peer binary that is not there, and one that is not a
    /// peer, end as failures with a reason instead of hanging.
    #[test]
    fn peers_that_cannot_run_fail_cleanly() {
        let t = run(Path::new("/nonexistent/gpuipc-host"), 0, 0, Duration::from_secs(5));
        assert!(matches!(&t.vmm, Outcome::Fail(w) if w.contains("cannot start")), "{:?}", t.vmm);
        let t = run(Path::new("/bin/true"), 0, 0, Duration::from_secs(5));
        assert!(matches!(&t.released, Outcome::Fail(w) if w.contains("exited")), "{:?}", t.released);
    }
}
