//! Starting a stage process: the host binary re-executed with `__stage`, its control socket
//! mapped to fd 3, in its own process group (so a terminal's Ctrl-C reaches only the host,
//! which drains the pipeline in order), watched through a pidfd.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use command_fds::{CommandFdExt, FdMapping};

use crate::control::ControlSocket;
use crate::stage::{CONTROL_FD, HOST_PID_ENV};

/// A running stage process.
pub struct StageProcess {
    pub name: String,
    pub child: Child,
    pub pidfd: OwnedFd,
    pub socket: ControlSocket,
    /// How it ended, once reaped.
    pub exit: Option<std::process::ExitStatus>,
}

pub fn spawn_stage(exe: &Path, name: &str, env: &[(String, String)]) -> std::io::Result<StageProcess> {
    let (ours, theirs) = ControlSocket::pair().map_err(std::io::Error::other)?;
    let mut command = Command::new(exe);
    command
        .arg("__stage")
        .arg(name)
        .env(HOST_PID_ENV, std::process::id().to_string())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .process_group(0);
    command
        .fd_mappings(vec![FdMapping { parent_fd: theirs.into_fd(), child_fd: CONTROL_FD }])
        .map_err(std::io::Error::other)?;
    let child = command.spawn()?;
    let pid = rustix::process::Pid::from_child(&child);
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
    Ok(StageProcess { name: name.to_owned(), child, pidfd, socket: ours, exit: None })
}

/// Every stage process of a run. Dropping it kills and reaps whatever still runs, so no
/// path out of the supervisor (an error, a panic) leaves a process behind.
#[derive(Default)]
pub struct Stages(pub Vec<StageProcess>);

impl Stages {
    pub fn push(&mut self, p: StageProcess) {
        self.0.push(p);
    }
}

impl Drop for Stages {
    fn drop(&mut self) {
        for p in &mut self.0 {
            if p.exit.is_none() {
                let _ = p.child.kill();
                if let Ok(status) = p.child.wait() {
                    p.exit = Some(status);
                }
            }
        }
    }
}
