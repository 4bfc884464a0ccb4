//! What travels between the coordinator and the agents over Zenoh: the session's
//! configuration, the key expressions, and the agent's description of its machine.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use zenoh::Wait;

/// What an agent says of itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentInfo {
    pub name: String,
    /// The gpuipc version it runs: a coordinator and its agents must agree.
    pub version: String,
    /// CUDA devices the agent's driver sees (0 without a driver).
    pub cuda_devices: u32,
    pub hostname: String,
}

impl AgentInfo {
    pub fn of_this_machine(name: &str) -> AgentInfo {
        AgentInfo {
            name: name.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            cuda_devices: crate::gpu::count_devices().unwrap_or(0),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
        }
    }
}

/// The liveliness token of agent `name`.
pub fn liveliness_key(name: &str) -> String {
    format!("gpuipc/agent/{name}")
}

/// Where agent `name` answers what it is.
pub fn info_key(name: &str) -> String {
    format!("gpuipc/agent/{name}/info")
}

/// A peer session listening on `listen` (an agent) and connecting to `connect` (a
/// coordinator), with no multicast or gossip discovery: every peer is named in a pipeline file.
pub fn config(listen: Option<&str>, connect: &[&str]) -> Result<zenoh::Config, String> {
    let mut config = zenoh::Config::default();
    let listen: Vec<&str> = listen.into_iter().collect();
    let settings = [
        ("mode", json(&"peer")),
        ("scouting/multicast/enabled", "false".to_owned()),
        ("scouting/gossip/enabled", "false".to_owned()),
        ("listen/endpoints", json(&listen)),
        ("connect/endpoints", json(&connect)),
    ];
    for (key, value) in settings {
        config.insert_json5(key, &value).map_err(|e| format!("Zenoh setting {key} = {value}: {e}"))?;
    }
    Ok(config)
}

/// JSON text of a value, as Zenoh's JSON5 settings take it.
fn json<T: Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("plain strings and lists serialise")
}

/// Ask each host's agent what it is, waiting at most `timeout` for each: one answer or the
/// reason there is none, per host, in order.
pub fn ask(hosts: &[crate::plan::hosts::HostPlan], timeout: Duration) -> Vec<Result<AgentInfo, String>> {
    let endpoints: Vec<&str> = hosts.iter().map(|h| h.control.as_str()).collect();
    let session = match zenoh::open(match config(None, &endpoints) {
        Ok(c) => c,
        Err(e) => return hosts.iter().map(|_| Err(e.clone())).collect(),
    })
    .wait()
    {
        Ok(s) => s,
        Err(e) => return hosts.iter().map(|_| Err(format!("cannot open a Zenoh session: {e}"))).collect(),
    };
    let answers = hosts
        .iter()
        .map(|h| {
            let replies = session.get(info_key(&h.name)).timeout(timeout).wait().map_err(|e| e.to_string())?;
            match replies.recv() {
                Ok(reply) => match reply.result() {
                    Ok(sample) => {
                        let text = sample.payload().try_to_string().map_err(|e| e.to_string())?;
                        serde_json::from_str(&text).map_err(|e| format!("an answer that is not an agent's: {e}"))
                    }
                    Err(e) => Err(format!("the agent answered an error: {:?}", e.payload().try_to_string())),
                },
                Err(_) => Err(format!("no agent answered within {:.1} s", timeout.as_secs_f64())),
            }
        })
        .collect();
    let _ = session.close().wait();
    answers
}

/// Where agent `name` takes a part of a run ([`StartRequest`], answered with [`StartReply`]).
pub fn start_key(name: &str) -> String {
    format!("gpuipc/agent/{name}/start")
}

/// The liveliness token of run `run`'s coordinator: an agent drains its part when it vanishes.
pub fn coordinator_key(run: &str) -> String {
    format!("gpuipc/run/{run}/coordinator")
}

/// Published by the coordinator: every host drains its part of run `run` (its sources stop,
/// the frames in flight finish).
pub fn stop_key(run: &str) -> String {
    format!("gpuipc/run/{run}/stop")
}

/// Published by the coordinator: every host ends its part of run `run` now.
pub fn abort_key(run: &str) -> String {
    format!("gpuipc/run/{run}/abort")
}

/// Where host `host` publishes how its part of run `run` ended ([`Outcome`]).
pub fn outcome_key(run: &str, host: &str) -> String {
    format!("gpuipc/run/{run}/outcome/{host}")
}

/// Where host `host` publishes its part's samples of run `run` (a [`crate::metrics::Sample`],
/// its rows labelled with the host), every [`super::part::SAMPLE_EVERY`].
pub fn sample_key(run: &str, host: &str) -> String {
    format!("gpuipc/run/{run}/sample/{host}")
}

/// Where agent `host` says whether it still runs its part of run `run` (a coordinator asks
/// when the agent's token comes back).
pub fn status_key(run: &str, host: &str) -> String {
    format!("gpuipc/run/{run}/status/{host}")
}

/// The run a `gpuipc/run/RUN/...` key is about.
pub fn run_of_key(key: &str) -> Option<&str> {
    key.strip_prefix("gpuipc/run/")?.split('/').next()
}

/// A coordinator's request that an agent run its part of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    /// The run's id: its keys are `gpuipc/run/RUN/...`.
    pub run: String,
    /// The host this part is for (the agent checks it is its own name).
    pub host: String,
    /// The coordinator's gpuipc version: the agent refuses another.
    pub version: String,
    /// The part, a pipeline file (plan/split.rs).
    pub pipeline: String,
    /// `run --frames`, where the coordinator was given it.
    pub frames: Option<u64>,
    /// `run --checksums`: the folder, on the agent's machine, for this host's checksum files.
    pub checksums: Option<std::path::PathBuf>,
    /// What to do when the coordinator's token vanishes: `stop` drains at once; `wait` gives
    /// it [`super::part::COORDINATOR_GRACE`] to come back first.
    pub on_host_loss: crate::config::OnHostLoss,
    /// Whether the part sends its run's samples (`gpuipc/run/RUN/sample/HOST`): the
    /// coordinator shows a live table or serves metrics.
    #[serde(default)]
    pub samples: bool,
}

/// An agent's answer to a [`StartRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartReply {
    /// The part's run started, with this pid on the agent's machine.
    Started { pid: u32 },
    /// It did not: why (a plan error of the part, a version mismatch, a busy run id).
    Refused { error: String },
}

/// How a host's part of a run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub host: String,
    /// The part's `run` exit code; `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<String>,
    /// Its run report, when it wrote one.
    pub report: Option<serde_json::Value>,
    /// The last lines it wrote to stderr.
    pub stderr_tail: Vec<String>,
    /// Its run's last sample (its final figures), its rows labelled with the host, when the
    /// part was asked for samples.
    #[serde(default)]
    pub sample: Option<Box<crate::metrics::Sample>>,
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        self.code == Some(0)
    }

    /// Why the part failed, naming its stage where its report does.
    pub fn failure(&self) -> String {
        let report: Option<crate::supervisor::RunReport> =
            self.report.clone().and_then(|r| serde_json::from_value(r).ok());
        let how = match (&self.code, &self.signal) {
            (Some(code), _) => format!("its run exited with code {code}"),
            (None, Some(signal)) => format!("its run was ended by {signal}"),
            (None, None) => "its run ended for an unknown reason".to_owned(),
        };
        match report.and_then(|r| r.failure) {
            Some((who, why)) if who == "host" => format!("host `{}`: {why} ({how})", self.host),
            Some((stage, why)) => format!("host `{}`: stage '{stage}' {why} ({how})", self.host),
            None => {
                let last: Vec<&str> = self.stderr_tail.iter().rev().take(3).rev().map(String::as_str).collect();
                format!(
                    "host `{}`: {how}; its last lines: {}",
                    self.host,
                    if last.is_empty() { "none".to_owned() } else { last.join(" | ") }
                )
            }
        }
    }
}
