//! The pipeline file's serde types. Unknown keys are errors; every value keeps its span so the
//! planner can point at it.

use std::fmt;

use serde::Deserialize;
use toml::Spanned;

pub use super::supervision::{DurationSpec, RestartPolicy};

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    #[serde(default)]
    pub pipeline: PipelineSection,
    #[serde(default, rename = "host")]
    pub hosts: Vec<Spanned<HostSection>>,
    #[serde(default, rename = "stage")]
    pub stages: Vec<Spanned<StageSection>>,
}

/// `[[host]]`: a machine some stages run on, reached through the agent running there
/// (docs/multi-host.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// What stages' `host` keys name.
    pub name: Spanned<String>,
    /// The agent's endpoint, as Zenoh writes one: `tcp/10.0.0.3:7447`.
    pub control: Spanned<String>,
    /// Where frames for this host's stages are sent, `ADDRESS:PORT` (default: the control
    /// endpoint's address, its port + 1).
    pub data: Option<Spanned<String>>,
    /// The network link's speed to this host, gigabits per second: the plan says how many
    /// frames a second each link that crosses it can carry.
    pub link_gbps: Option<Spanned<f64>>,
}

/// `[pipeline]`: defaults for the whole run.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSection {
    /// Shown in plans and reports; defaults to the file's stem.
    pub name: Option<Spanned<String>>,
    /// Frames each source emits; none: run until stopped.
    pub frames: Option<Spanned<u64>>,
    /// Default device of stages.
    pub device: Option<Spanned<DeviceSpec>>,
    pub isolation: Option<Spanned<Isolation>>,
    /// Whether this run's MPS daemon is shared with the user's other runs (default) or its own.
    pub mps: Option<Spanned<MpsScope>>,
    /// Microseconds a waiting stage spins before it sleeps on a futex (default 20).
    pub spin_us: Option<Spanned<u32>>,
    // Defaults of every stage's supervision keys (docs/reliability.md).
    /// When a failed stage is started again (default `never`).
    pub restart: Option<Spanned<RestartPolicy>>,
    /// Restarts allowed within `restart_window` before the host gives up (default 5).
    pub max_restarts: Option<Spanned<u32>>,
    pub restart_window: Option<Spanned<DurationSpec>>,
    /// Wait before the first restart; doubles for each further one in the window.
    pub restart_backoff: Option<Spanned<DurationSpec>>,
    /// A stage that makes no progress for this long is killed and handled as a failure.
    pub stall_timeout: Option<Spanned<DurationSpec>>,
    /// What a run does when the agent of a host it uses is lost (docs/multi-host.md).
    pub on_host_loss: Option<Spanned<OnHostLoss>>,
    /// Where the run serves Prometheus metrics and health checks (docs/metrics.md).
    pub metrics: Option<Spanned<String>>,
}

/// `[[stage]]`: one process running one plugin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageSection {
    pub name: Spanned<String>,
    /// A built-in plugin name, or a path to a plugin cdylib (relative to the pipeline file).
    pub plugin: Spanned<String>,
    /// Names of the stages whose output this stage reads.
    #[serde(default)]
    pub inputs: Option<Spanned<Vec<Spanned<String>>>>,
    /// Slots in this stage's output ring (default 4).
    pub depth: Option<Spanned<u32>>,
    /// Overrides `[pipeline] device`; a list of GPUs spreads the stage's replicas over them.
    pub device: Option<Spanned<StageDevice>>,
    /// The `[[host]]` this stage runs on (default: the machine `run` is started on).
    pub host: Option<Spanned<String>>,
    /// How this stage takes frames from its input links (default `block`).
    pub policy: Option<Spanned<Policy>>,
    /// How this stage's output ring is shared on the GPU (default `auto`).
    pub transport: Option<Spanned<Transport>>,
    /// How frames from this stage's inputs on other hosts reach it (default `tcp`).
    pub input_transport: Option<Spanned<InputTransport>>,
    /// Processes running this stage, sharing its frames (default 1).
    pub replicas: Option<Spanned<u32>>,
    /// What becomes of the frame a replica held when it died (default `retry`).
    pub on_loss: Option<Spanned<OnLoss>>,
    /// The plugin's own settings.
    pub params: Option<Spanned<toml::Table>>,
    // What the host does when this stage fails or stalls; each overrides `[pipeline]`'s.
    /// When a failed stage is started again (default `never`).
    pub restart: Option<Spanned<RestartPolicy>>,
    /// Restarts allowed within `restart_window` before the host gives up (default 5).
    pub max_restarts: Option<Spanned<u32>>,
    pub restart_window: Option<Spanned<DurationSpec>>,
    /// Wait before the first restart; doubles for each further one in the window.
    pub restart_backoff: Option<Spanned<DurationSpec>>,
    /// A stage that makes no progress for this long is killed and handled as a failure.
    pub stall_timeout: Option<Spanned<DurationSpec>>,
}

/// Where a stage runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceSpec {
    Auto,
    Cpu,
    /// `cuda` (device 0) or `cuda:N`.
    Cuda(u32),
}

impl<'de> Deserialize<'de> for DeviceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DeviceSpec::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid device `{text}`, expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""
            ))
        })
    }
}

impl DeviceSpec {
    pub fn parse(text: &str) -> Option<DeviceSpec> {
        match text {
            "auto" => Some(DeviceSpec::Auto),
            "cpu" => Some(DeviceSpec::Cpu),
            "cuda" => Some(DeviceSpec::Cuda(0)),
            _ => text.strip_prefix("cuda:")?.parse().ok().map(DeviceSpec::Cuda),
        }
    }
}

/// A stage's `device`: one, or a list of GPUs its replicas are spread over (replica `r` on
/// the list's `r % len`-th).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StageDevice {
    One(DeviceSpec),
    Spread(Vec<u32>),
}

impl<'de> Deserialize<'de> for StageDevice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            One(String),
            List(Vec<String>),
        }
        let raw = Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a device (\"cuda:0\") or a list of GPUs ([\"cuda:0\", \"cuda:1\"])")
        })?;
        match raw {
            Raw::One(text) => DeviceSpec::parse(&text).map(StageDevice::One).ok_or_else(|| {
                serde::de::Error::custom(format!("invalid device `{text}`, expected \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""))
            }),
            Raw::List(list) if list.is_empty() => Err(serde::de::Error::custom("an empty device list; name one GPU or more")),
            Raw::List(list) => list
                .iter()
                .map(|text| match DeviceSpec::parse(text) {
                    Some(DeviceSpec::Cuda(n)) => Ok(n),
                    _ => Err(serde::de::Error::custom(format!(
                        "`{text}` in a device list: a list spreads replicas over GPUs, so each entry is \"cuda\" or \"cuda:N\""
                    ))),
                })
                .collect::<Result<_, _>>()
                .map(StageDevice::Spread),
        }
    }
}

impl StageDevice {
    /// The device the stage plans with: its own, or the list's first.
    pub fn first(&self) -> DeviceSpec {
        match self {
            StageDevice::One(d) => *d,
            StageDevice::Spread(list) => DeviceSpec::Cuda(list[0]),
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Auto => f.write_str("auto"),
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// How stages on one GPU share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    #[default]
    Auto,
    Mps,
    Process,
}

impl Isolation {
    /// As the pipeline file writes it.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::Auto => "auto",
            Isolation::Mps => "mps",
            Isolation::Process => "process",
        }
    }
}

/// What becomes of the frame a replica was working on when it died.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnLoss {
    /// A sibling takes it again, in its place in the output order.
    #[default]
    Retry,
    /// It is counted as dropped; the output goes on without it.
    Drop,
}

impl OnLoss {
    /// As the pipeline file writes it.
    pub fn name(self) -> &'static str {
        match self {
            OnLoss::Retry => "retry",
            OnLoss::Drop => "drop",
        }
    }
}

/// What a run does when the agent of one of its hosts is lost (its liveliness token vanishes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnHostLoss {
    /// The run stops: every other host's part is ended and the run fails, naming the host.
    #[default]
    Stop,
    /// The other hosts keep running (their link stages reconnect by themselves) until the
    /// agent is back.
    Wait,
}

impl OnHostLoss {
    /// As the pipeline file writes it.
    pub fn name(self) -> &'static str {
        match self {
            OnHostLoss::Stop => "stop",
            OnHostLoss::Wait => "wait",
        }
    }
}

/// Whose MPS daemon a run's stages use, when isolation uses MPS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MpsScope {
    /// One daemon for all of this user's runs on the machine: their kernels run side by side
    /// instead of time-slicing between daemons; a fatal GPU fault reaches every run on that GPU.
    #[default]
    Shared,
    /// A daemon for this run alone: another run's GPU fault cannot reach its stages.
    Private,
}

impl MpsScope {
    /// As the pipeline file writes it.
    pub fn name(self) -> &'static str {
        match self {
            MpsScope::Shared => "shared",
            MpsScope::Private => "private",
        }
    }
}

/// What a consumer does when it falls behind its producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Policy {
    /// The producer waits for this consumer: nothing is lost.
    #[default]
    Block,
    /// The producer never waits; when the ring is full the oldest unread frame is overwritten.
    /// The consumer reads in order.
    DropOldest,
    /// The producer never waits; the consumer always takes the newest frame.
    Latest,
}

impl Policy {
    pub fn name(self) -> &'static str {
        match self {
            Policy::Block => "block",
            Policy::DropOldest => "drop_oldest",
            Policy::Latest => "latest",
        }
    }
}

/// How frames cross from a stage on one host to a consumer on another (docs/multi-host.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InputTransport {
    /// Over TCP, from and into host memory (`tcp-send`, `tcp-receive`).
    #[default]
    Tcp,
    /// GPU to GPU over NCCL (`nccl-send`, `nccl-receive`): both ends in the cuda domain.
    Nccl,
}

impl InputTransport {
    pub fn name(self) -> &'static str {
        match self {
            InputTransport::Tcp => "tcp",
            InputTransport::Nccl => "nccl",
        }
    }
}

/// How a GPU ring's memory is shared between processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// VMM with POSIX file-descriptor handles where the device supports it, else legacy.
    #[default]
    Auto,
    /// `cuMemCreate` + file descriptors passed with SCM_RIGHTS.
    Vmm,
    /// `cuIpcGetMemHandle`.
    Legacy,
}
