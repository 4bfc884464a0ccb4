//! A plan with stages on several hosts, split into one ordinary pipeline file per host (a
//! *part*, docs/multi-host.md): that host's stages as the file wrote them, the `[pipeline]`
//! settings, and for every link that crosses hosts a `tcp-send` stage on the producer's host
//! and a `tcp-receive` stage, named like the producer, on each consumer's host (`nccl-send`
//! and `nccl-receive`, each on its end's GPU, where those consumers ask for
//! `input_transport = "nccl"`). Each part is then run by a plain `gpuipc-host run` on its
//! host, so nothing of a run is re-implemented.

use std::collections::BTreeSet;

use toml::{Table, Value};

use super::Plan;
use crate::config::{InputTransport, Policy, StageName};

/// The host name of the machine `run` starts on (stages without `host`).
pub const LOCAL: &str = "local";

/// One host's share of a plan.
#[derive(Debug, Clone)]
pub struct Part {
    /// Index into [`Plan::hosts`]; `None`: the machine `run` starts on.
    pub host: Option<usize>,
    /// The host's name ([`LOCAL`] for the machine `run` starts on).
    pub host_name: String,
    /// The part as a pipeline file.
    pub toml: String,
    /// Its stages' names, as its run reports them (bridge stages included).
    pub stages: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SplitError {
    #[error("{file}: cannot read it again to split it into hosts' parts: {why}")]
    Source { file: String, why: String },
    #[error(
        "link {link} goes from host `{from}` into stage '{stage}' on the machine `run` starts on, which has no data address for frames: put '{stage}' on a [[host]] (an agent can run on this machine too: gpuipc-host agent --name NAME --listen tcp/ADDRESS:PORT)"
    )]
    IntoLocal { link: String, from: String, stage: String },
    #[error(
        "link {link} into host `{host}`: data address `{data}` has no port {k} ports above it for its {nth} crossing link"
    )]
    NoPort { link: String, host: String, data: String, k: u32, nth: u32 },
    #[error("link {link}: no valid free name for its sender stage on host `{host}` ({why})")]
    SenderName { link: String, host: String, why: String },
    #[error(
        "{first} and {second} both use {endpoint}; give host `{change}` a `{key}` address on another port (hosts on one address need ports of their own)"
    )]
    PortTaken { endpoint: String, first: String, second: String, change: String, key: &'static str },
}

/// One port a host's agent listens on, and what for.
struct Listening {
    host: usize,
    address: String,
    port: u16,
    /// "host `b`'s control endpoint", "frames into host `a` (its 2nd crossing link)".
    what: String,
    /// The `[[host]]` key that moves it.
    key: &'static str,
}

/// Every port the hosts' agents will listen on: each control endpoint, and the data ports of
/// the crossing links into each host (its `data` port and the next ones, `into[h]` of them).
/// Two hosts on one address must not share a port: the second agent could not bind it, or
/// frames would reach the wrong one.
fn check_ports(plan: &Plan, into: &[u32]) -> Result<(), SplitError> {
    let mut listening: Vec<Listening> = Vec::new();
    for (h, host) in plan.hosts.iter().enumerate() {
        let control = host.control.split_once('/').map_or(host.control.as_str(), |(_, a)| a);
        if let Some((address, port)) = address_port(control) {
            let what = format!("host `{}`'s control endpoint", host.name);
            listening.push(Listening { host: h, address, port, what, key: "control" });
        }
        for k in 0..into[h] {
            if let Some((address, port)) = port_above(&host.data, k).as_deref().and_then(address_port) {
                let what = format!("frames into host `{}` (its {} crossing link)", host.name, ordinal(k + 1));
                listening.push(Listening { host: h, address, port, what, key: "data" });
            }
        }
    }
    for (i, a) in listening.iter().enumerate() {
        if let Some(b) =
            listening[..i].iter().find(|b| b.host != a.host && b.port == a.port && same_address(&b.address, &a.address))
        {
            // The data ports are the ones to move: a control endpoint is where the agent runs.
            let (change, key) = if a.key == "data" { (a.host, a.key) } else { (b.host, b.key) };
            return Err(SplitError::PortTaken {
                endpoint: format!("{}:{}", a.address, a.port),
                first: b.what.clone(),
                second: a.what.clone(),
                change: plan.hosts[change].name.clone(),
                key,
            });
        }
    }
    Ok(())
}

/// `ADDRESS:PORT` as its address and port.
fn address_port(text: &str) -> Option<(String, u16)> {
    let (address, port) = text.rsplit_once(':')?;
    Some((address.to_owned(), port.parse().ok()?))
}

/// Whether two addresses name one machine's interface: the same text, or two names of the
/// loopback interface.
fn same_address(a: &str, b: &str) -> bool {
    let loopback = |x: &str| matches!(x, "localhost" | "127.0.0.1" | "[::1]");
    a == b || (loopback(a) && loopback(b))
}

/// "1st", "2nd", "3rd", "4th", ...
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// Split `plan`, read from the pipeline file text `text`, into one part per host that has
/// stages, the machine `run` starts on first.
pub fn split(plan: &Plan, text: &str) -> Result<Vec<Part>, SplitError> {
    let file = plan.file.display().to_string();
    let document: Table = text
        .parse()
        .map_err(|e: toml::de::Error| SplitError::Source { file: file.clone(), why: e.message().to_owned() })?;
    let tables = stage_tables(&document);
    let host_name = |h: Option<usize>| h.map_or(LOCAL.to_owned(), |i| plan.hosts[i].name.clone());

    // Which hosts run something, in the order a person reads them: this machine, then the
    // [[host]] tables' order.
    let mut used: Vec<Option<usize>> = Vec::new();
    for h in std::iter::once(None).chain((0..plan.hosts.len()).map(Some)) {
        if plan.stages.iter().any(|s| s.host == h) {
            used.push(h);
        }
    }
    let mut parts: Vec<(Option<usize>, Vec<Table>)> = used.iter().map(|&h| (h, Vec::new())).collect();
    let mut taken: BTreeSet<String> = plan.stages.iter().map(|s| s.name.to_string()).collect();
    // The k-th crossing link into a host uses its data port + k.
    let mut into_host = vec![0u32; plan.hosts.len()];
    let mut bridges: Vec<(Option<usize>, Table)> = Vec::new();

    for (li, link) in plan.links.iter().enumerate() {
        let producer = &plan.stages[link.producer];
        let home = producer.host;
        let mut targets: Vec<usize> = Vec::new();
        for &c in &link.consumers {
            match plan.stages[c].host {
                h if h == home => {}
                None => {
                    return Err(SplitError::IntoLocal {
                        link: plan.link_name(li),
                        from: host_name(home),
                        stage: plan.stages[c].name.to_string(),
                    });
                }
                Some(h) if !targets.contains(&h) => targets.push(h),
                Some(_) => {}
            }
        }
        for h in targets {
            let host = &plan.hosts[h];
            let k = into_host[h];
            into_host[h] += 1;
            let address = port_above(&host.data, k).ok_or_else(|| SplitError::NoPort {
                link: plan.link_name(li),
                host: host.name.clone(),
                data: host.data.clone(),
                k,
                nth: k + 1,
            })?;
            let tag = format!("{}->{}", producer.name, host.name);
            let sender = free_name(&format!("{}-to-{}", producer.name, host.name), &taken)
                .map_err(|why| SplitError::SenderName { link: plan.link_name(li), host: host_name(home), why })?;
            taken.insert(sender.clone());
            // Drops happen on the sending host, whole frames, never on the wire: the sender
            // takes the ring with the first dropping policy among that host's consumers.
            let policy = link
                .consumers
                .iter()
                .zip(&link.policies)
                .filter(|(c, _)| plan.stages[**c].host == Some(h))
                .map(|(_, p)| *p)
                .find(|p| *p != Policy::Block);
            // The consumers on one host agree on the transport (checked when planning).
            let first_there = link.consumers.iter().map(|&c| &plan.stages[c]).find(|c| c.host == Some(h));
            let bridge = match first_there {
                Some(c) if c.input_transport == InputTransport::Nccl => {
                    Bridge::Nccl { from_gpu: producer.device.unwrap_or(0), to_gpu: c.device.unwrap_or(0) }
                }
                _ => Bridge::Tcp,
            };
            bridges.push((home, sender_table(&sender, producer.name.as_str(), &address, &tag, policy, bridge)));
            let format = link.format;
            let pixel = format.pixel_format().map_or("unknown", |p| p.name());
            bridges.push((
                Some(h),
                receiver_table(producer.name.as_str(), &address, &tag, pixel, format.width, format.height, bridge),
            ));
        }
    }

    check_ports(plan, &into_host)?;

    for (h, stages) in &mut parts {
        // Receivers first: they are the part's sources.
        stages.extend(bridges.iter().filter(|(b, t)| b == h && is_receiver(t)).map(|(_, t)| t.clone()));
        for s in plan.stages.iter().filter(|s| s.host == *h) {
            let mut table = tables
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some(s.name.as_str()))
                .cloned()
                .unwrap_or_default();
            table.remove("host");
            // The part's inputs are its receivers, on the same host: how frames crossed is the
            // bridges' business now.
            table.remove("input_transport");
            // A plugin given as a path was resolved against the pipeline file's folder: the
            // part, written elsewhere, names the same absolute path (the same on every host).
            if table.get("plugin").and_then(Value::as_str).is_some_and(crate::plugin::is_path) {
                table.insert("plugin".into(), Value::String(s.plugin.path.display().to_string()));
            }
            stages.push(table);
        }
        stages.extend(bridges.iter().filter(|(b, t)| b == h && !is_receiver(t)).map(|(_, t)| t.clone()));
    }

    let mut pipeline = document.get("pipeline").and_then(Value::as_table).cloned().unwrap_or_default();
    pipeline.insert("name".into(), Value::String(plan.name.clone()));
    // The part runs on one machine: what to do when another is lost is the coordinator's.
    pipeline.remove("on_host_loss");
    // The coordinator serves the run's metrics, every host's stages in them; an agent serves
    // its own where its command line says (docs/metrics.md).
    pipeline.remove("metrics");
    Ok(parts
        .into_iter()
        .map(|(h, stages)| {
            let names =
                stages.iter().filter_map(|t| t.get("name").and_then(Value::as_str)).map(str::to_owned).collect();
            let mut part = Table::new();
            part.insert("pipeline".into(), Value::Table(pipeline.clone()));
            part.insert("stage".into(), Value::Array(stages.into_iter().map(Value::Table).collect()));
            let toml = format!(
                "# The part of pipeline '{}' that runs on host `{}` (docs/multi-host.md).\n{}",
                plan.name,
                host_name(h),
                toml::to_string(&part).expect("a TOML table serialises")
            );
            Part { host: h, host_name: host_name(h), toml, stages: names }
        })
        .collect())
}

/// The `[[stage]]` tables of the file, as written.
fn stage_tables(document: &Table) -> Vec<Table> {
    document
        .get("stage")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_table).cloned().collect())
        .unwrap_or_default()
}

fn is_receiver(table: &Table) -> bool {
    table.get("plugin").and_then(Value::as_str).is_some_and(super::is_link_receiver)
}

/// The stages that carry one link into one host.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Bridge {
    /// `tcp-send` and `tcp-receive`, in the cpu domain.
    Tcp,
    /// `nccl-send` on the producer's GPU, `nccl-receive` on the (first) consumer's.
    Nccl { from_gpu: u32, to_gpu: u32 },
}

/// `ADDRESS:PORT` with the port `k` higher.
fn port_above(data: &str, k: u32) -> Option<String> {
    let (address, port) = data.rsplit_once(':')?;
    let port = u16::try_from(port.parse::<u32>().ok()? + k).ok()?;
    Some(format!("{address}:{port}"))
}

/// `wanted`, or `wanted-2`, `wanted-3`... : the first that is a valid stage name no stage has.
fn free_name(wanted: &str, taken: &BTreeSet<String>) -> Result<String, String> {
    StageName::parse(wanted)?;
    (1..=taken.len() + 1)
        .map(|n| if n == 1 { wanted.to_owned() } else { format!("{wanted}-{n}") })
        .find(|name| !taken.contains(name) && StageName::parse(name).is_ok())
        .ok_or_else(|| format!("`{wanted}` and its numbered variants are taken"))
}

fn sender_table(name: &str, producer: &str, to: &str, link: &str, policy: Option<Policy>, bridge: Bridge) -> Table {
    let mut t = Table::new();
    t.insert("name".into(), name.into());
    match bridge {
        Bridge::Tcp => t.insert("plugin".into(), "tcp-send".into()),
        Bridge::Nccl { from_gpu, .. } => {
            t.insert("device".into(), format!("cuda:{from_gpu}").into());
            t.insert("plugin".into(), "nccl-send".into())
        }
    };
    t.insert("inputs".into(), Value::Array(vec![producer.into()]));
    if let Some(p) = policy {
        t.insert("policy".into(), p.name().into());
    }
    t.insert("restart".into(), "on-failure".into());
    let mut params = Table::new();
    params.insert("to".into(), to.into());
    params.insert("link".into(), link.into());
    t.insert("params".into(), Value::Table(params));
    t
}

fn receiver_table(
    producer: &str,
    listen: &str,
    link: &str,
    format: &str,
    width: u32,
    height: u32,
    bridge: Bridge,
) -> Table {
    let mut t = Table::new();
    t.insert("name".into(), producer.into());
    match bridge {
        Bridge::Tcp => t.insert("plugin".into(), "tcp-receive".into()),
        Bridge::Nccl { to_gpu, .. } => {
            t.insert("device".into(), format!("cuda:{to_gpu}").into());
            t.insert("plugin".into(), "nccl-receive".into())
        }
    };
    t.insert("restart".into(), "on-failure".into());
    let mut params = Table::new();
    params.insert("listen".into(), listen.into());
    params.insert("link".into(), link.into());
    params.insert("format".into(), format.into());
    params.insert("width".into(), Value::Integer(width.into()));
    params.insert("height".into(), Value::Integer(height.into()));
    t.insert("params".into(), Value::Table(params));
    t
}

#[cfg(test)]
pub(crate) mod tests;
