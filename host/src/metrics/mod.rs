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

impl Sample {
    /// This sample as host `host` shows it: every row labelled with the host (a part's run
    /// labels its own rows `local`).
    pub fn on_host(mut self, host: &str) -> Sample {
        for p in &mut self.processes {
            p.host = host.to_owned();
        }
        for l in &mut self.links {
            l.host = host.to_owned();
        }
        for g in &mut self.gpus {
            g.host = host.to_owned();
        }
        self
    }

    /// The run over several hosts as one sample: every host's rows, in the order of `parts`
    /// (each already labelled with its host, or `None` where it has sent no figures yet). The
    /// run is as far along as its least advanced part, failed if any part failed; it is ready
    /// when every part is.
    pub fn merge(pipeline: &str, parts: &[(&str, Option<&Sample>)]) -> Sample {
        let mut merged = Sample { pipeline: pipeline.to_owned(), ..Sample::default() };
        let mut states = Vec::with_capacity(parts.len());
        for (host, sample) in parts {
            let Some(s) = sample else {
                states.push(RunState::Starting);
                merged.not_ready.get_or_insert_with(|| format!("starting: host `{host}` has sent no figures yet"));
                continue;
            };
            states.push(s.state);
            if s.state == RunState::Running
                && let Some(why) = &s.not_ready
            {
                merged.not_ready.get_or_insert_with(|| format!("host `{host}`: {why}"));
            }
            merged.started_at = match (merged.started_at, s.started_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            merged.processes.extend(s.processes.iter().cloned());
            merged.links.extend(s.links.iter().cloned());
            merged.gpus.extend(s.gpus.iter().cloned());
        }
        merged.state = merged_state(&states);
        if !matches!(merged.state, RunState::Running | RunState::Starting) {
            merged.not_ready = None;
        }
        merged
    }
}

/// The state of a run whose parts are in `states`.
fn merged_state(states: &[RunState]) -> RunState {
    use RunState::*;
    let any = |s: RunState| states.contains(&s);
    if states.is_empty() || any(Starting) && !any(Failed) && !any(Stopping) {
        return Starting;
    }
    let ended = |s: &RunState| matches!(s, Finished | Stopped | Failed);
    if states.iter().all(ended) {
        return if any(Failed) {
            Failed
        } else if any(Stopped) {
            Stopped
        } else {
            Finished
        };
    }
    if any(Failed) || any(Stopping) {
        Stopping
    } else if any(Draining) || any(Stopped) {
        Draining
    } else {
        Running
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
        // A run over several hosts says which one it waits for.
        RunState::Starting => {
            Err(sample.not_ready.clone().unwrap_or_else(|| "starting: not every stage is running yet".to_owned()))
        }
        other => Err(format!("the run is {}", other.name())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(state: RunState, stage: &str, not_ready: Option<&str>) -> Sample {
        let process = ProcessSample {
            stage: stage.to_owned(),
            replica: 0,
            host: "local".to_owned(),
            plugin: "null".to_owned(),
            domain: "cpu".to_owned(),
            device: "cpu".to_owned(),
            up: true,
            stats: StatsSnapshot::default(),
        };
        Sample {
            pipeline: "p".to_owned(),
            state,
            not_ready: not_ready.map(str::to_owned),
            started_at: Some(if stage == "a" { 2.0 } else { 1.0 }),
            processes: vec![process],
            links: Vec::new(),
            gpus: vec![GpuSample { host: "local".to_owned(), device: 0, used_bytes: 1, total_bytes: 2 }],
        }
    }

    #[test]
    fn a_merge_labels_every_row_with_its_host_and_keeps_every_host() {
        let a = part(RunState::Running, "a", None).on_host("a");
        let b = part(RunState::Running, "b", None).on_host("local");
        let merged = Sample::merge("run", &[("a", Some(&a)), ("local", Some(&b))]);
        assert_eq!(merged.pipeline, "run");
        let rows: Vec<(&str, &str)> = merged.processes.iter().map(|p| (p.host.as_str(), p.stage.as_str())).collect();
        assert_eq!(rows, [("a", "a"), ("local", "b")]);
        assert_eq!(merged.gpus.iter().map(|g| g.host.as_str()).collect::<Vec<_>>(), ["a", "local"]);
        assert_eq!((merged.state, merged.not_ready, merged.started_at), (RunState::Running, None, Some(1.0)));
    }

    #[test]
    fn a_merged_run_is_as_far_along_as_its_least_advanced_part() {
        use RunState::*;
        let state = |states: &[RunState]| {
            let parts: Vec<Sample> = states.iter().map(|&s| part(s, "x", None)).collect();
            let named: Vec<(&str, Option<&Sample>)> = parts.iter().map(|p| ("h", Some(p))).collect();
            Sample::merge("p", &named).state
        };
        assert_eq!(state(&[Running, Starting]), Starting);
        assert_eq!(state(&[Running, Running]), Running);
        assert_eq!(state(&[Running, Finished]), Running);
        assert_eq!(state(&[Running, Draining]), Draining);
        assert_eq!(state(&[Running, Failed]), Stopping);
        assert_eq!(state(&[Starting, Failed]), Stopping);
        assert_eq!(state(&[Finished, Finished]), Finished);
        assert_eq!(state(&[Finished, Stopped]), Stopped);
        assert_eq!(state(&[Stopped, Failed]), Failed);
        assert_eq!(state(&[]), Starting);
    }

    #[test]
    fn a_host_without_figures_or_not_ready_makes_the_run_not_ready_naming_it() {
        let a = part(RunState::Running, "a", None);
        let merged = Sample::merge("p", &[("a", Some(&a)), ("b", None)]);
        assert_eq!(merged.state, RunState::Starting);
        assert_eq!(readiness(&merged), Err("starting: host `b` has sent no figures yet".to_owned()));
        let b = part(RunState::Running, "b", Some("stage 'b' has done no frame yet"));
        let merged = Sample::merge("p", &[("a", Some(&a)), ("b", Some(&b))]);
        assert_eq!(readiness(&merged), Err("host `b`: stage 'b' has done no frame yet".to_owned()));
    }
}
