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
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_default(),
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
