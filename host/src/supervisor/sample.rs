//! The run as the metrics endpoint shows it: each tick of the watch loop, a
//! [`Sample`](crate::metrics::Sample) of every stage process's statistics block (with the
//! same bounds the report keeps), every link's queue at each consumer, the GPUs' memory and
//! whether the run is ready, posted on the run's board (`crate::metrics`).

use std::time::{Duration, Instant};

use crate::metrics::{LinkSample, ProcessSample, RunState, Sample};

use super::report::plausible_since;
use super::spawn::Launch;

/// The host label of a stage on this machine.
pub const LOCAL: &str = "local";

/// Whether frames flow: when the frames of all stages last grew, and what they were.
pub struct Flow {
    total: u64,
    moved_at: Instant,
}

impl Flow {
    pub fn new() -> Flow {
        Flow { total: 0, moved_at: Instant::now() }
    }
}

/// Where each process stands, for the sample.
pub struct Standing<'a> {
    pub state: RunState,
    /// Each process runs its frame loop.
    pub up: &'a [bool],
    /// Each process has ended for good while its stage goes on (a replica gone).
    pub gone: &'a [bool],
    pub elapsed: Option<Duration>,
    /// When every stage was first told to run (ns since the Unix epoch).
    pub started_at_ns: Option<u64>,
}

/// The host label of a process's stage.
fn host_of(launch: &Launch<'_>, p: usize) -> String {
    let plan = launch.plan;
    match launch.stage(p).host {
        Some(h) => plan.hosts.get(h).map_or(LOCAL.to_owned(), |h| h.name.clone()),
        None => LOCAL.to_owned(),
    }
}

pub fn take(launch: &Launch<'_>, standing: &Standing<'_>, flow: &mut Flow) -> Sample {
    let plan = launch.plan;
    let plausible = plausible_since(standing.elapsed.unwrap_or_default());
    let mut memory = Vec::with_capacity(launch.procs.len());
    let processes: Vec<ProcessSample> = launch
        .procs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let s = &plan.stages[p.stage];
            let (stats, _) = plausible.check(launch.stats[i].snapshot());
            memory.push(launch.stats[i].gpu_memory());
            ProcessSample {
                stage: s.name.to_string(),
                replica: p.replica.unwrap_or(0),
                host: host_of(launch, i),
                plugin: s.plugin.name.clone(),
                domain: s.domain.name().to_owned(),
                device: s.device_of(p.replica).map_or("cpu".to_owned(), |d| format!("cuda:{d}")),
                up: standing.up[i],
                stats,
            }
        })
        .collect();
    let mut links = Vec::new();
    for (l, (link, ring)) in plan.links.iter().zip(launch.rings).enumerate() {
        for (c, &consumer) in link.consumers.iter().enumerate() {
            let host = launch.processes_of(consumer).next().map_or(LOCAL.to_owned(), |p| host_of(launch, p));
            links.push(LinkSample {
                link: plan.link_name(l),
                producer: plan.stages[link.producer].name.to_string(),
                consumer: plan.stages[consumer].name.to_string(),
                host,
                capacity: ring.depth() as u64,
                queued: ring.queued(c),
                dropped: ring.dropped(c),
                lost: ring.lost(c),
            });
        }
    }
    let not_ready = not_ready(launch, standing, &processes, flow);
    Sample {
        pipeline: plan.name.clone(),
        state: standing.state,
        not_ready,
        started_at: standing.started_at_ns.map(|ns| ns as f64 / 1e9),
        gpus: Sample::gpus_of(&processes, &memory),
        processes,
        links,
    }
}

/// Why the run is not ready: a process that does not run its frame loop (its stage is not
/// served), a stage that has done no frame yet, or no frame done anywhere for the run's
/// stall timeout (30 s where it is off).
fn not_ready(
    launch: &Launch<'_>,
    standing: &Standing<'_>,
    processes: &[ProcessSample],
    flow: &mut Flow,
) -> Option<String> {
    let total: u64 = processes.iter().map(|p| p.stats.frames).sum();
    if total != flow.total {
        flow.total = total;
        flow.moved_at = Instant::now();
    }
    if standing.state != RunState::Running {
        return None;
    }
    for i in 0..processes.len() {
        if !standing.up[i] && !standing.gone[i] {
            return Some(format!(
                "stage '{}' is not running (starting, or restarting after a failure)",
                launch.name(i)
            ));
        }
    }
    for (stage, s) in launch.plan.stages.iter().enumerate() {
        let frames: u64 = launch.processes_of(stage).map(|p| processes[p].stats.frames).sum();
        if frames == 0 {
            return Some(format!("stage '{}' has done no frame yet", s.name));
        }
    }
    let window = super::standstill::Standstill::timeout_of(launch.plan).unwrap_or(Duration::from_secs(30));
    let still = flow.moved_at.elapsed();
    (still > window)
        .then(|| format!("no frame done for {} (the run's stall timeout)", crate::config::format_duration(still)))
}
