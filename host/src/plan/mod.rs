//! The plan: a pipeline file resolved into stages, links and negotiated formats.
//!
//! Everything downstream (validate, graph, run, in-process run) takes a [`Plan`]; nothing after
//! this point sees raw TOML. Building one checks the whole file and reports every problem.

pub mod budget;
mod display;
mod domain;
pub mod hosts;
mod input_transport;
mod resolve;
pub mod ring_size;
pub mod split;
mod supervision;
pub mod tuning;

pub use display::{render_dot, render_text};
pub use domain::{remote_domain, resolve_domain};
pub use resolve::build;
pub use supervision::Supervision;

use std::path::PathBuf;

use gpuipc_plugin_api::{Domain, FrameFormat, FrameLayout};
use petgraph::graph::DiGraph;

use crate::config::{Isolation, MpsScope, OnLoss, Policy, StageName, Transport};

/// Default slots in a stage's output ring.
pub const DEFAULT_DEPTH: u32 = 4;
/// Default slots in a GPU ring when its stages' contexts time-slice the GPU (isolation
/// `process`): a stage runs in slices of its own, so the ring must hold what the producer makes
/// while its consumer waits for its turn. Measured on an H100 at 4K: 5,944–6,196 frames/s with
/// 4 slots, 8,924 with 8 (docs/benchmarks-history.md).
pub const TIME_SLICED_DEPTH: u32 = 8;
/// Default slots in a GPU ring whose frames are at least [`LARGE_FRAME_BYTES`]: cuda stages
/// send wake-ups of sleeping neighbours in batches of up to half a ring (link/wakes.rs,
/// `HeldWakes`), 4 with 8 slots; on an H100 a 4K chain's hosts used 151 % of a core with 8 slots
/// and batches of 4 against 172 % with 4 slots and each wake-up at once (docs/benchmarks-history.md).
pub const LARGE_FRAME_DEPTH: u32 = 8;
/// Frames this large never stay in a GPU's L2 cache (50 MB on an H100) from one stage to the
/// next, so more slots cost nothing but memory; smaller frames get [`SMALL_FRAME_GPU_DEPTH`]
/// (both where the stages share the GPU; where they time-slice it, [`TIME_SLICED_DEPTH`]).
pub const LARGE_FRAME_BYTES: u64 = 16 << 20;
/// Default slots in a GPU ring of smaller frames whose stages share the GPU through MPS (or
/// one context): on an H100, 1080p `generator → rgb-process → yuv420` ran at 91.7–104 % of one
/// process in 7 of 7 rounds with 3 slots, 80.6–96.4 % with 4 and 80.0–87.0 % with 2 (two calls,
/// medians 93.3/94.5 %, 86.2/88.1 %, 82.1 %); 720p and an 8-stage 1080p chain the same with 3
/// or 4 (docs/benchmarks-history.md). Two 1080p rings of 3 slots (37 MB) fit that GPU's 50 MB L2
/// cache, of 4 slots (50 MB) not: the likely reason, not proven. With 3 slots wake-ups go out
/// one at a time (batches are at most half a ring), but that is not it: 4 slots with each
/// wake-up at once ran at 80–87 %.
pub const SMALL_FRAME_GPU_DEPTH: u32 = 3;
/// Most slots a ring may have.
pub const MAX_DEPTH: u32 = 64;
/// Most consumers one link may have (fan-out).
pub const MAX_CONSUMERS: usize = 16;
/// Microseconds a waiting stage in the cpu domain spins before it sleeps: a handoff of small
/// frames between processes in well under a microsecond (docs/benchmarks-history.md).
pub const DEFAULT_SPIN_US: u32 = 20;
/// The same for a stage in the cuda domain: none. Its host runs ahead of its GPU by up to a
/// ring's depth, so a few microseconds of futex wake-up cost no frames, and spinning cost a
/// core per stage (measured on an H100: docs/benchmarks-history.md). 20 µs at 1080p, where consumers
/// poll their frames on the host, moved separate frames/s by −4 to +11 % over eight calls, for
/// the generator's core: not taken ("Spinning and stream priorities" there).
pub const CUDA_SPIN_US: u32 = 0;

/// A checked pipeline, ready to run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The `[[host]]` tables: machines some stages run on (docs/multi-host.md).
    pub hosts: Vec<hosts::HostPlan>,
    pub name: String,
    pub file: PathBuf,
    /// Frames each source emits; `None`: until stopped.
    pub frames: Option<u64>,
    pub isolation: Isolation,
    /// Whose MPS daemon the stages use when `isolation` uses one.
    pub mps: MpsScope,
    /// The file's `spin_us`; `None`: [`DEFAULT_SPIN_US`] or [`CUDA_SPIN_US`] by domain.
    pub spin_us: Option<u32>,
    /// What the run does when a host's agent is lost (docs/multi-host.md).
    pub on_host_loss: crate::config::OnHostLoss,
    /// Where the run serves metrics (`[pipeline] metrics`; `run --metrics` overrides it).
    pub metrics: Option<crate::config::MetricsAddress>,
    /// In topological order: every stage comes after the stages it reads.
    pub stages: Vec<StagePlan>,
    pub links: Vec<LinkPlan>,
    /// Stages as nodes (their index in `stages`), links' consumer edges as edges.
    pub graph: DiGraph<usize, usize>,
}

/// One stage: a process running one plugin.
#[derive(Debug, Clone)]
pub struct StagePlan {
    pub name: StageName,
    pub plugin: PluginRef,
    /// The `params` table as TOML text, handed to the plugin verbatim.
    pub params: String,
    pub domain: Domain,
    /// CUDA device ordinal in the cuda domain (the first replica's, where a list spreads them).
    pub device: Option<u32>,
    /// The `[[host]]` it runs on (an index into [`Plan::hosts`]); `None`: the machine `run`
    /// starts on.
    pub host: Option<usize>,
    /// Why the domain is what it is, when `auto` decided.
    pub domain_note: Option<String>,
    pub inputs: Vec<InputPlan>,
    pub output: Option<OutputPlan>,
    /// Slots in the output ring.
    pub depth: u32,
    pub policy: Policy,
    /// How the output ring is shared when it lives on a GPU.
    pub transport: Transport,
    /// How frames from inputs on other hosts reach this stage.
    pub input_transport: crate::config::InputTransport,
    /// Set where the stage runs as several processes sharing its frames.
    pub replication: Option<Replication>,
    /// Restart policy and watchdog.
    pub supervision: Supervision,
}

/// A stage run as several processes, its replicas, that share its frames: each frame goes to
/// one of them, and their outputs merge in order into one stream (docs/links.md, "Replicas").
#[derive(Debug, Clone, PartialEq)]
pub struct Replication {
    /// Processes (2 or more).
    pub count: u32,
    /// Slots of the output ring each replica writes: replica `r` writes
    /// `r * slots_each .. (r + 1) * slots_each`.
    pub slots_each: u32,
    /// Each replica's device, where `device = [...]` spreads them over GPUs (else empty).
    pub devices: Vec<u32>,
    /// What becomes of a dead replica's frame.
    pub on_loss: OnLoss,
}

impl StagePlan {
    /// Processes running this stage (1: no replicas).
    pub fn replicas(&self) -> u32 {
        self.replication.as_ref().map_or(1, |r| r.count)
    }

    /// Slots of the output ring each process writes (all of them without replicas).
    pub fn slots_each(&self) -> u32 {
        self.replication.as_ref().map_or(self.depth, |r| r.slots_each)
    }

    /// What becomes of a dead replica's frame (the default, for a stage of one process).
    pub fn on_loss(&self) -> OnLoss {
        self.replication.as_ref().map_or_else(OnLoss::default, |r| r.on_loss)
    }

    /// Each replica's device, where they are spread over GPUs (else empty).
    pub fn replica_devices(&self) -> &[u32] {
        self.replication.as_ref().map_or(&[], |r| r.devices.as_slice())
    }

    pub fn is_source(&self) -> bool {
        self.inputs.is_empty()
    }

    pub fn output_format(&self) -> Option<FrameFormat> {
        self.output.as_ref().map(|o| o.format)
    }

    /// The device replica `replica` runs on (`None`: the stage's one process).
    pub fn device_of(&self, replica: Option<u32>) -> Option<u32> {
        match replica {
            Some(r) if !self.replica_devices().is_empty() => self.replica_devices().get(r as usize).copied(),
            _ => self.device,
        }
    }

    /// Every device the stage's processes run on, in replica order, each once (none in the
    /// cpu domain).
    pub fn devices(&self) -> Vec<u32> {
        let mut all: Vec<u32> = if self.replica_devices().is_empty() {
            self.device.into_iter().collect()
        } else {
            self.replica_devices().to_vec()
        };
        let mut seen = Vec::new();
        all.retain(|d| {
            if seen.contains(d) {
                false
            } else {
                seen.push(*d);
                true
            }
        });
        all
    }
}

/// The plugin a stage runs.
#[derive(Debug, Clone)]
pub struct PluginRef {
    pub path: PathBuf,
    pub name: String,
    pub version: String,
}

/// One input of a stage: which link, and which consumer of that link this stage is.
#[derive(Debug, Clone)]
pub struct InputPlan {
    pub link: usize,
    /// This stage's index among the link's consumers.
    pub consumer: usize,
    /// The producing stage.
    pub from: usize,
    pub format: FrameFormat,
    pub policy: Policy,
}

#[derive(Debug, Clone)]
pub struct OutputPlan {
    pub format: FrameFormat,
    pub layout: FrameLayout,
    /// `None`: nobody reads the output; the stage still does its work, into private memory.
    pub link: Option<usize>,
}

/// Where a link's frames live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkMemory {
    /// Host shared memory (memfd), both ends in the cpu domain.
    Host,
    /// Host shared memory with a cuda end: that end copies through pinned staging.
    /// `no_peer`: the ends are all cuda, but device `.0` (a consumer's) cannot reach device
    /// `.1` (the producer's) directly.
    HostStaged { no_peer: Option<(u32, u32)> },
    /// Device memory on GPU `device` shared between processes, zero copies on it: the
    /// producer's GPU, where consumers on the GPUs in `peers` read it over peer access (NVLink
    /// or PCIe); or, `pushed`, the GPU of every consumer, another than the producer's (in
    /// `peers`), whose copy engines push each frame there from a buffer of its own GPU.
    Device { transport: Transport, device: u32, peers: Vec<u32>, pushed: bool },
}

/// Whether a plugin (by name) is the receiving end of a link between hosts, the stage that
/// `split` puts on the consumers' host: its frames come from a sender on another host.
pub fn is_link_receiver(plugin: &str) -> bool {
    matches!(plugin, "tcp-receive" | "nccl-receive")
}

/// A ring of `depth` slots from one producer to its consumers.
#[derive(Debug, Clone)]
pub struct LinkPlan {
    pub producer: usize,
    /// Stage indices, in consumer order.
    pub consumers: Vec<usize>,
    pub policies: Vec<Policy>,
    pub format: FrameFormat,
    pub layout: FrameLayout,
    pub depth: u32,
    pub memory: LinkMemory,
}

/// One process of a run: a stage, or one replica of a stage with `replicas > 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    /// Index in [`Plan::stages`].
    pub stage: usize,
    /// Which replica; `None` for a stage that runs one process.
    pub replica: Option<u32>,
    /// The stage's name, with `#N` for replica N (`yuv#2`): what logs and reports say.
    pub name: String,
}

/// How the pipeline's cpu stages share this machine's cores: a stage whose plugin takes
/// `threads = 0` (a share of the cores) gets `each` threads, so stages side by side do not
/// each take every core and starve one another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuThreads {
    /// Cores this process may use.
    pub cores: usize,
    /// The run's processes in the cpu domain (replicas count one each).
    pub processes: usize,
    /// Threads for each: the cores over the processes, at least 1.
    pub each: usize,
}

impl CpuThreads {
    pub fn new(cores: usize, processes: usize) -> CpuThreads {
        CpuThreads { cores, processes, each: (cores / processes.max(1)).max(1) }
    }
}

impl Plan {
    /// The share of the cores each cpu stage's `threads = 0` takes on this machine; `None`
    /// when no stage runs in the cpu domain here.
    pub fn cpu_threads(&self) -> Option<CpuThreads> {
        let processes = self
            .processes()
            .iter()
            .filter(|p| self.stages[p.stage].domain == Domain::Cpu && self.stages[p.stage].host.is_none())
            .count();
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        (processes > 0).then(|| CpuThreads::new(cores, processes))
    }

    /// Every process a run starts, stage by stage in run order, a stage's replicas together.
    pub fn processes(&self) -> Vec<ProcessPlan> {
        let mut out = Vec::new();
        for (stage, s) in self.stages.iter().enumerate() {
            if s.replicas() == 1 {
                out.push(ProcessPlan { stage, replica: None, name: s.name.to_string() });
            } else {
                out.extend((0..s.replicas()).map(|r| ProcessPlan {
                    stage,
                    replica: Some(r),
                    name: format!("{}#{r}", s.name),
                }));
            }
        }
        out
    }

    /// Why this machine cannot run the plan by itself: a stage on another host, which runs
    /// through that host's agent (docs/multi-host.md). `run` coordinates such a plan; `bench`
    /// measures one machine and refuses it.
    pub fn needs_agents(&self) -> Option<String> {
        let s = self.stages.iter().find(|s| s.host.is_some())?;
        let host = &self.hosts[s.host.expect("found by it")];
        Some(format!(
            "stage '{}' runs on host `{}`: bench measures the stages of one machine; `run` runs a pipeline over several hosts (docs/multi-host.md)",
            s.name, host.name
        ))
    }

    /// One process for each stage, ignoring `replicas`: how a run in one process runs it.
    pub fn one_process_per_stage(&self) -> Vec<ProcessPlan> {
        self.stages
            .iter()
            .enumerate()
            .map(|(stage, s)| ProcessPlan { stage, replica: None, name: s.name.to_string() })
            .collect()
    }

    /// A short name for a link: `producer -> consumer, consumer`.
    pub fn link_name(&self, link: usize) -> String {
        let l = &self.links[link];
        let consumers: Vec<&str> = l.consumers.iter().map(|&c| self.stages[c].name.as_str()).collect();
        format!("{} -> {}", self.stages[l.producer].name, consumers.join(", "))
    }
}
