//! Running a plan: create the links' shared memory, spawn one process per stage, hand each its
//! descriptors, start them together, watch them, and report.
//!
//! - [`spawn`]: starting a stage process and its control socket.
//! - [`watch`]: the event loop over pidfds, control sockets and signals; failure and shutdown.
//! - [`report`]: the end-of-run table and JSON.
//! - [`sample`]: the run as the metrics endpoint shows it (`crate::metrics`).
//! - [`in_process`]: the same stages in one process, no links (`run --in-process`).

mod broker;
pub mod in_process;
mod mps;
pub mod one_context;
pub mod private_dir;
mod reclaim;
pub mod report;
mod restart;
mod sample;
mod spawn;
mod standstill;
mod watch;
mod watchdog;

use std::path::PathBuf;

use crate::config::Policy;
use crate::control::LinkMemoryWire;
use crate::link::header::{POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST};
use crate::link::queue::QueueMap;
use crate::link::{RingMap, RingParams, StatsMap};
use crate::plan::{LinkMemory, Plan, ProcessPlan};

pub use report::RunReport;
pub use watch::{STOP_SIGNALS, Shutdown};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Overrides the file's `frames`.
    pub frames: Option<u64>,
    /// The executable to start stages with (`gpuipc-host` itself).
    pub stage_exe: PathBuf,
    /// Draw live per-stage statistics on the terminal.
    pub live: bool,
    /// Overrides the file's `spin_us`.
    pub spin_us: Option<u32>,
    /// Write a checksum file of every stage's output into this folder.
    pub checksums: Option<PathBuf>,
    /// Sinks write per-frame latencies into this folder (`gpuipc-host bench`).
    pub latency: Option<PathBuf>,
    /// Sources make this many frames a second at most (`gpuipc-host bench`).
    pub pace_fps: Option<f64>,
    /// Where the run posts what the metrics endpoint shows (`run --metrics`).
    pub metrics: Option<std::sync::Arc<crate::metrics::Board>>,
    /// A part of a run over several hosts (`run --part`, from its agent): on a stop signal,
    /// which every host's part gets, its link receivers are not told to end their streams:
    /// each ends when its sender's does, as the sending host's part drains, so the frames
    /// in flight between the hosts are delivered rather than refused.
    pub part: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot set up the run: {0}")]
    Setup(String),
}

fn wire_memory(memory: &LinkMemory) -> LinkMemoryWire {
    match memory {
        LinkMemory::Host | LinkMemory::HostStaged { .. } => LinkMemoryWire::Host,
        LinkMemory::Device { transport, device, pushed, .. } => {
            LinkMemoryWire::Device { transport: *transport, device: *device, pushed: *pushed }
        }
    }
}

fn policy_code(p: Policy) -> u8 {
    match p {
        Policy::Block => POLICY_BLOCK,
        Policy::DropOldest => POLICY_DROP_OLDEST,
        Policy::Latest => POLICY_LATEST,
    }
}

/// The shape of link `link`'s ring: what the host creates it with, and what each stage checks
/// the ring it maps against.
fn ring_params(plan: &Plan, link: usize) -> RingParams {
    let l = &plan.links[link];
    RingParams {
        format: l.format,
        layout: l.layout,
        depth: l.depth,
        policies: l.policies.iter().map(|&p| policy_code(p)).collect(),
        host_data: !matches!(l.memory, LinkMemory::Device { .. }),
    }
}

/// Run `plan` with one process per stage. Returns the report, whether the run succeeded or not
/// (see [`RunReport::succeeded`]); `Err` only when the run could not be set up at all.
pub fn run(plan: &Plan, options: &RunOptions, shutdown: &Shutdown) -> Result<RunReport, RunError> {
    let procs = plan.processes();
    let (stats, rings) = create_links(plan, &procs)?;
    let queues = create_queues(plan)?;
    let frames = options.frames.or(plan.frames);
    let mps = start_isolation(plan)?;
    let mut env = mps.as_ref().map(|d| d.env()).unwrap_or_default();
    // cpu stages share the cores: a plugin's `threads = 0` takes this many (plan::CpuThreads).
    if let Some(share) = plan.cpu_threads() {
        env.push((gpuipc_plugin_api::bands::THREADS_ENV.to_owned(), share.each.to_string()));
    }
    let launch = spawn::Launch {
        plan,
        procs: &procs,
        options,
        frames,
        stats: &stats,
        rings: &rings,
        queues: &queues,
        env: &env,
    };
    let mut stages = spawn::Stages::default();
    for p in 0..procs.len() {
        stages.push(launch.start(p, 0).map_err(RunError::Setup)?);
    }
    let report = watch::watch(&launch, &mut stages, shutdown);
    // Every stage has exited (the watch loop returns only then); the daemon can go.
    drop(stages);
    drop(mps);
    Ok(report)
}

/// The queue block of each stage with replicas (`None` for the others).
fn create_queues(plan: &Plan) -> Result<Vec<Option<QueueMap>>, RunError> {
    plan.stages
        .iter()
        .map(|s| {
            (s.replicas() > 1)
                .then(|| QueueMap::create(&format!("gpuipc-{}-queue-{}", std::process::id(), s.name), s.replicas()))
                .transpose()
                .map_err(|e| RunError::Setup(format!("stage '{}': queue block: {e}", s.name)))
        })
        .collect()
}

/// Every process's statistics block and every link's ring, made before any stage starts.
fn create_links(plan: &Plan, procs: &[ProcessPlan]) -> Result<(Vec<StatsMap>, Vec<RingMap>), RunError> {
    let stats: Vec<StatsMap> = procs
        .iter()
        .map(|p| StatsMap::create(&format!("gpuipc-{}-stats-{}", std::process::id(), p.name)))
        .collect::<Result<_, _>>()
        .map_err(|e| RunError::Setup(format!("stats memory: {e}")))?;
    let rings: Vec<RingMap> = plan
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let name = format!("gpuipc-{}-ring-{}", std::process::id(), plan.stages[l.producer].name);
            RingMap::create(&name, &ring_params(plan, i))
                .map_err(|e| RunError::Setup(format!("link {}: {e}", plan.link_name(i))))
        })
        .collect::<Result<_, _>>()?;
    Ok((stats, rings))
}

/// Start or join an MPS daemon when the plan's isolation asks for one. `auto` does when two or
/// more stages share a GPU and MPS is installed: without it the driver time-slices their
/// contexts, four times slower for three 4K stages.
fn start_isolation(plan: &Plan) -> Result<Option<mps::MpsDaemon>, RunError> {
    use crate::config::Isolation;
    let mut per_device = std::collections::HashMap::new();
    for s in plan.stages.iter().filter(|s| s.domain == gpuipc_plugin_api::Domain::Cuda) {
        for r in 0..s.replicas() {
            *per_device.entry(s.device_of(Some(r))).or_insert(0) += 1;
        }
    }
    let shared_gpu = per_device.values().any(|&n| n >= 2);
    let wanted = match plan.isolation {
        Isolation::Mps => true,
        Isolation::Process => false,
        Isolation::Auto => shared_gpu && crate::gpu::mps_installed(),
    };
    if !wanted || per_device.is_empty() {
        return Ok(None);
    }
    mps::MpsDaemon::start(plan.mps).map(Some).map_err(RunError::Setup)
}
