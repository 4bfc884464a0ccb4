//! Starting a stage process: the host binary re-executed with `__stage`, its control socket
//! mapped to fd 3, in its own process group (so a terminal's Ctrl-C reaches only the host,
//! which drains the pipeline in order), watched through a pidfd. It starts with no signal
//! blocked (std's spawn empties the mask, which exec would pass on), and makes fd 3 and
//! whatever else it inherited close-on-exec itself (`stage::main`), so that processes its
//! plugin starts get none of them.
//!
//! A source stage (no inputs) gets the host's standard input, so that a source plugin can
//! read a stream piped into `gpuipc-host run` (the `y4m` source's `path = "-"`); every other
//! stage gets /dev/null. A source that reads a terminal is stopped by SIGTTIN (its process
//! group is in the background), so such a plugin should refuse a terminal, as `y4m` does.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use command_fds::{CommandFdExt, FdMapping};

use std::os::fd::{AsFd, BorrowedFd};

use super::{RunOptions, wire_memory};
use std::io::ErrorKind;

use crate::control::{ControlSocket, InputSetup, OutputSetup, RingWire, SocketError, StageSetup, ToStage};
use crate::link::queue::QueueMap;
use crate::link::{FrameAccess, RingMap, StatsMap};
use crate::plan::{Plan, ProcessPlan, StagePlan};
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

/// Start stage `name`'s process; `source`: it has no inputs, and gets the host's standard input.
pub fn spawn_stage(exe: &Path, name: &str, source: bool, env: &[(String, String)]) -> std::io::Result<StageProcess> {
    let (ours, theirs) = ControlSocket::pair().map_err(std::io::Error::other)?;
    let mut command = Command::new(exe);
    command
        .arg("__stage")
        .arg(name)
        .env(HOST_PID_ENV, std::process::id().to_string())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(if source { Stdio::inherit() } else { Stdio::null() })
        .process_group(0);
    command
        .fd_mappings(vec![FdMapping { parent_fd: theirs.into_fd(), child_fd: CONTROL_FD }])
        .map_err(std::io::Error::other)?;
    let child = command.spawn()?;
    let pid = rustix::process::Pid::from_child(&child);
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
    Ok(StageProcess { name: name.to_owned(), child, pidfd, socket: ours, exit: None })
}

/// Everything needed to start a stage's process, the first time or again.
pub struct Launch<'a> {
    pub plan: &'a Plan,
    /// The run's processes ([`Plan::processes`]); the supervisor's indices are into this.
    pub procs: &'a [ProcessPlan],
    pub options: &'a RunOptions,
    /// Frames each source emits.
    pub frames: Option<u64>,
    pub stats: &'a [StatsMap],
    pub rings: &'a [RingMap],
    /// By stage: the queue block its replicas share.
    pub queues: &'a [Option<QueueMap>],
    /// Extra environment (the MPS daemon's directories).
    pub env: &'a [(String, String)],
}

impl Launch<'_> {
    /// The stage process `p` runs.
    pub fn stage(&self, p: usize) -> &StagePlan {
        &self.plan.stages[self.procs[p].stage]
    }

    /// Process `p`'s name: the stage's, with `#N` for a replica.
    pub fn name(&self, p: usize) -> &str {
        &self.procs[p].name
    }

    /// The processes of stage `stage` (one, or its replicas).
    pub fn processes_of(&self, stage: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.procs.len()).filter(move |&p| self.procs[p].stage == stage)
    }

    /// Whether the run's cuda stages are clients of a private MPS daemon.
    pub fn mps(&self) -> bool {
        self.env.iter().any(|(k, _)| k == "CUDA_MPS_PIPE_DIRECTORY")
    }
}

impl Launch<'_> {
    /// Start incarnation `incarnation` of process `p` and send it its setup.
    pub fn start(&self, p: usize, incarnation: u32) -> Result<StageProcess, String> {
        let stage = self.stage(p);
        let name = self.name(p);
        let fds = self.fds(p);
        let setup = self.setup(p, incarnation);
        let mut env = self.env.to_vec();
        // A process started again after its stage failed says so to its plugin, so a sink
        // goes on with the file its earlier processes wrote (plugin-api `restarted`).
        if incarnation > 0 {
            env.push((gpuipc_plugin_api::RESTART_ENV.to_owned(), incarnation.to_string()));
        }
        // The plugin's own copy of plugin-api shapes its launches (`cuda::row_grid`); the
        // environment is what reaches it, as the cpu threads' share does.
        if stage.domain == gpuipc_plugin_api::Domain::Cuda {
            env.push((gpuipc_plugin_api::cuda::KERNEL_ROWS_ENV.to_owned(), setup.tuning.kernel_rows.to_string()));
        }
        let child = spawn_stage(&self.options.stage_exe, name, stage.is_source(), &env)
            .map_err(|e| format!("cannot start stage '{name}': {e}"))?;
        match child.socket.send(&ToStage::Setup(Box::new(setup)), &fds) {
            Ok(()) => Ok(child),
            // A stage that died before reading its setup shows up in the watch loop.
            Err(SocketError::Io(e)) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                tracing::debug!("setup of stage '{name}' not delivered: {e}");
                Ok(child)
            }
            // Anything else would leave the stage waiting for its setup, and the run for it.
            Err(e) => Err(format!("cannot send stage '{name}' its setup: {e}")),
        }
    }

    /// The descriptors process `p` gets, in the order its setup says: its stats block, one ring
    /// per input, its output ring. A ring is its control block and, where its frames live in
    /// host memory, its data memfd: read-only for an input, so no code in a consumer can write
    /// the frames its link's other consumers read ([`RingMap::fds_for`]).
    pub fn fds(&self, p: usize) -> Vec<BorrowedFd<'_>> {
        let stage = self.stage(p);
        let mut fds = vec![self.stats[p].shared_memory().as_fd()];
        fds.extend(stage.inputs.iter().flat_map(|inp| self.rings[inp.link].fds_for(FrameAccess::Read)));
        if let Some(link) = stage.output.as_ref().and_then(|o| o.link) {
            fds.extend(self.rings[link].fds_for(FrameAccess::Write));
        }
        if self.procs[p].replica.is_some()
            && let Some(queue) = &self.queues[self.procs[p].stage]
        {
            fds.push(queue.shared_memory().as_fd());
        }
        fds
    }

    pub fn setup(&self, p: usize, incarnation: u32) -> StageSetup {
        let plan = self.plan;
        let stage = self.stage(p);
        StageSetup {
            stage: self.name(p).to_owned(),
            plugin_path: stage.plugin.path.clone(),
            params: stage.params.clone(),
            domain: stage.domain.name().to_owned(),
            device: stage.device_of(self.procs[p].replica),
            frames: if stage.is_source() { self.frames } else { None },
            inputs: stage
                .inputs
                .iter()
                .map(|inp| InputSetup {
                    link: inp.link,
                    ring: ring_wire(plan, inp.link),
                    from: plan.stages[inp.from].name.to_string(),
                    consumer: inp.consumer,
                    policy: inp.policy,
                    memory: wire_memory(&plan.links[inp.link].memory),
                })
                .collect(),
            output: stage.output.as_ref().map(|o| OutputSetup {
                format: o.format.into(),
                link: o.link,
                ring: o.link.map(|l| ring_wire(plan, l)),
                memory: o.link.map_or(crate::control::LinkMemoryWire::Host, |l| wire_memory(&plan.links[l].memory)),
            }),
            tuning: crate::plan::tuning::Tuning::resolve(
                plan,
                self.procs[p].stage,
                &crate::plan::tuning::Overrides::from_env(self.options.spin_us),
            ),
            checksums: self.options.checksums.clone(),
            latency: self.options.latency.clone(),
            pace_fps: self.options.pace_fps,
            incarnation,
            replica: self.procs[p].replica.map(|index| crate::control::ReplicaSetup {
                index,
                count: stage.replicas(),
                slots_each: stage.slots_each(),
            }),
        }
    }
}

fn ring_wire(plan: &Plan, link: usize) -> RingWire {
    let params = super::ring_params(plan, link);
    RingWire {
        name: plan.link_name(link),
        format: params.format.into(),
        depth: params.depth,
        policies: params.policies,
    }
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
