//! What a run shows to monitoring (docs/metrics.md): Prometheus metrics, `/healthz` and
//! `/readyz` over HTTP, on a thread of their own.
//!
//! The supervisor's loop reads its stages' statistics blocks and rings as it does for the
//! live view and posts a [`Sample`] of the run on a [`Board`] (a copy under a mutex, held for
//! the copy only); the server thread answers from the latest one. A scrape never touches a
//! stage's memory and never waits for the loop, and the loop never waits for a scrape.
//!
//! - [`exposition`]: a sample in Prometheus's text format (the `prometheus-client` crate).
//! - [`server`]: binding, the HTTP endpoints, and stopping.

pub mod exposition;
pub mod server;

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::link::stats::StatsSnapshot;

/// Where a run stands, as `gpuipc_run_state` and `/readyz` tell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    /// Stage processes are being started and set up.
    #[default]
    Starting,
    /// Every stage was told to run.
    Running,
    /// Sources were told to stop (a stop signal); the pipeline drains.
    Draining,
    /// A stage failed or a second signal came: every stage is being stopped.
    Stopping,
    /// Every stage finished its stream.
    Finished,
    /// A stop signal ended the run and it drained.
    Stopped,
    /// A stage failed, or the run was stopped before it drained.
    Failed,
}

impl RunState {
    pub const ALL: [RunState; 7] = [
        RunState::Starting,
        RunState::Running,
        RunState::Draining,
        RunState::Stopping,
        RunState::Finished,
        RunState::Stopped,
        RunState::Failed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Draining => "draining",
            RunState::Stopping => "stopping",
            RunState::Finished => "finished",
            RunState::Stopped => "stopped",
            RunState::Failed => "failed",
        }
    }
}

/// One process of a stage (a stage, or one of its replicas).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessSample {
    pub stage: String,
    /// The replica's index; 0 for a stage without replicas.
    pub replica: u32,
    /// The `[[host]]` it runs on; `local` for the machine `run` started on.
    pub host: String,
    pub plugin: String,
    pub domain: String,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Its process runs its frame loop now (not starting, restarting or ended).
    pub up: bool,
    pub stats: StatsSnapshot,
}

/// One link at one of its consumers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSample {
    /// `producer -> consumers`, as the plan names the link.
    pub link: String,
    pub producer: String,
    pub consumer: String,
    pub host: String,
    /// Slots in the ring, and the frames in it this consumer has yet to read or is reading.
    pub capacity: u64,
    pub queued: u64,
    pub dropped: u64,
    pub lost: u64,
}

/// A GPU's memory, device-wide (every process's), as a stage on it last read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSample {
    pub host: String,
    pub device: u32,
    pub used_bytes: u64,
    pub total_bytes: u64,
}

/// The run at one moment, as the supervisor saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub pipeline: String,
    pub state: RunState,
    /// Why the run is not ready (`/readyz`); `None`: every stage runs and frames flow.
    pub not_ready: Option<String>,
    /// When every stage was first told to run, in seconds since the Unix epoch.
    pub started_at: Option<f64>,
    pub processes: Vec<ProcessSample>,
    pub links: Vec<LinkSample>,
    pub gpus: Vec<GpuSample>,
}

impl Sample {
    /// The GPUs of `processes`, each once (the reading of the stage that last read it: any of
    /// them, they read the same device).
    pub fn gpus_of(processes: &[ProcessSample], memory: &[Option<(u32, u64, u64)>]) -> Vec<GpuSample> {
        let mut gpus: Vec<GpuSample> = Vec::new();
        for (p, m) in processes.iter().zip(memory) {
            let Some((device, used, total)) = *m else { continue };
            if !gpus.iter().any(|g| g.host == p.host && g.device == device) {
                gpus.push(GpuSample { host: p.host.clone(), device, used_bytes: used, total_bytes: total });
            }
        }
        gpus
    }
}

/// The latest sample of a run, posted by its supervisor, read by the server.
#[derive(Debug, Default)]
pub struct Board {
    latest: Mutex<Posted>,
}

#[derive(Debug, Default)]
struct Posted {
    sample: Sample,
    at: Option<Instant>,
}

/// A run whose loop has posted nothing for this long while it runs is not alive
/// (`/healthz`): the loop posts at least five times a second.
pub const LOOP_SILENT_AT_MOST: Duration = Duration::from_secs(10);

impl Board {
    pub fn post(&self, sample: Sample) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        *latest = Posted { sample, at: Some(Instant::now()) };
    }

    /// Only the run's state changed (a run that ends before its stages start).
    pub fn set_state(&self, state: RunState) {
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.sample.state = state;
        latest.at = Some(Instant::now());
    }

    /// A copy of the latest sample, and how long ago it was posted.
    pub fn latest(&self) -> (Sample, Option<Duration>) {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        (latest.sample.clone(), latest.at.map(|t| t.elapsed()))
    }
}

/// `/healthz`: `Ok` while the host is alive, its loop posting while the run runs.
pub fn health(sample: &Sample, since_post: Option<Duration>) -> Result<(), String> {
    match (sample.state, since_post) {
        (RunState::Running | RunState::Draining | RunState::Stopping, Some(ago)) if ago > LOOP_SILENT_AT_MOST => {
            Err(format!("the host's supervisor loop has not looked at the run for {:.0} s", ago.as_secs_f64()))
        }
        _ => Ok(()),
    }
}

/// `/readyz`: `Ok` while every stage runs and frames flow; else why not.
pub fn readiness(sample: &Sample) -> Result<(), String> {
    match sample.state {
        RunState::Running => sample.not_ready.clone().map_or(Ok(()), Err),
        RunState::Starting => Err("starting: not every stage is running yet".to_owned()),
        other => Err(format!("the run is {}", other.name())),
    }
}
