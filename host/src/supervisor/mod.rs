//! Running a plan: create the links' shared memory, spawn one process per stage, hand each its
//! descriptors, start them together, watch them, and report.
//!
//! - [`spawn`]: starting a stage process and its control socket.
//! - [`watch`]: the event loop over pidfds, control sockets and signals; failure and shutdown.
//! - [`report`]: the end-of-run table and JSON.
//! - [`in_process`]: the same stages in one process, no links (`run --in-process`).

pub mod in_process;
pub mod report;
mod spawn;
mod watch;

use std::os::fd::AsFd;
use std::path::PathBuf;

use crate::config::Policy;
use crate::control::{InputSetup, OutputSetup, StageSetup, ToStage};
use crate::link::header::{POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST};
use crate::link::{RingMap, RingParams, StatsMap};
use crate::plan::{LinkMemory, Plan};

pub use report::RunReport;
pub use watch::Shutdown;

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
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot set up the run: {0}")]
    Setup(String),
}

fn policy_code(p: Policy) -> u8 {
    match p {
        Policy::Block => POLICY_BLOCK,
        Policy::DropOldest => POLICY_DROP_OLDEST,
        Policy::Latest => POLICY_LATEST,
    }
}

/// Run `plan` with one process per stage. Returns the report, whether the run succeeded or not
/// (see [`RunReport::succeeded`]); `Err` only when the run could not be set up at all.
pub fn run(plan: &Plan, options: &RunOptions, shutdown: &Shutdown) -> Result<RunReport, RunError> {
    let stats: Vec<StatsMap> = plan
        .stages
        .iter()
        .map(|s| StatsMap::create(&format!("gpuipc-{}-stats-{}", std::process::id(), s.name)))
        .collect::<Result<_, _>>()
        .map_err(|e| RunError::Setup(format!("stats memory: {e}")))?;
    let rings: Vec<RingMap> = plan
        .links
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let params = RingParams {
                format: l.format,
                layout: l.layout,
                depth: l.depth,
                policies: l.policies.iter().map(|&p| policy_code(p)).collect(),
                host_data: !matches!(l.memory, LinkMemory::Device { .. }),
            };
            RingMap::create(&format!("gpuipc-{}-ring-{}", std::process::id(), plan.stages[l.producer].name), &params)
                .map_err(|e| RunError::Setup(format!("link {}: {e}", plan.link_name(i))))
        })
        .collect::<Result<_, _>>()?;
    let frames = options.frames.or(plan.frames);
    let mut stages = spawn::Stages::default();
    for (i, stage) in plan.stages.iter().enumerate() {
        let setup = StageSetup {
            stage: stage.name.to_string(),
            plugin_path: stage.plugin.path.clone(),
            params: stage.params.clone(),
            domain: stage.domain.name().to_owned(),
            device: stage.device,
            frames: if stage.is_source() { frames } else { None },
            inputs: stage
                .inputs
                .iter()
                .map(|inp| InputSetup { from: plan.stages[inp.from].name.to_string(), consumer: inp.consumer, policy: inp.policy })
                .collect(),
            output: stage.output.as_ref().map(|o| OutputSetup { format: o.format.into(), linked: o.link.is_some() }),
            spin_us: options.spin_us.unwrap_or(plan.spin_us),
            checksums: options.checksums.clone(),
        };
        let mut fds = vec![stats[i].shared_memory().as_fd()];
        fds.extend(stage.inputs.iter().map(|inp| rings[inp.link].shared_memory().as_fd()));
        if let Some(link) = stage.output.as_ref().and_then(|o| o.link) {
            fds.push(rings[link].shared_memory().as_fd());
        }
        let child = spawn::spawn_stage(&options.stage_exe, stage.name.as_str())
            .map_err(|e| RunError::Setup(format!("cannot start stage '{}': {e}", stage.name)))?;
        // A stage that dies before reading its setup shows up in the watch loop.
        if let Err(e) = child.socket.send(&ToStage::Setup(Box::new(setup)), &fds) {
            tracing::debug!("setup of stage '{}' not delivered: {e}", stage.name);
        }
        stages.push(child);
    }
    Ok(watch::watch(plan, &mut stages, &stats, &rings, options, shutdown))
}
