//! Showing a plan: the text `validate` prints and the Graphviz `graph` prints.

use std::fmt::Write;

use super::{LinkMemory, Plan};
use crate::config::{Transport, format_duration};

fn megabytes(bytes: u64) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

/// A stage's restart policy and watchdog, where they differ from the defaults.
fn supervision(s: &super::Supervision) -> String {
    let mut parts = Vec::new();
    if s.restart != crate::config::RestartPolicy::Never {
        parts.push(format!(
            "restart {} (at most {} within {}, first after {})",
            s.restart.name(),
            s.max_restarts,
            format_duration(s.window),
            format_duration(s.backoff)
        ));
    }
    if s.stall_timeout != super::Supervision::default().stall_timeout {
        parts.push(match s.stall_timeout {
            Some(t) => format!("stall timeout {}", format_duration(t)),
            None => "no stall timeout".to_owned(),
        });
    }
    if parts.is_empty() { String::new() } else { format!("  [{}]", parts.join(", ")) }
}

/// How a stage with replicas runs: its processes, their work queue and the merge.
fn replicas(s: &super::StagePlan, device: &str) -> String {
    let merge = if s.output.as_ref().is_some_and(|o| o.link.is_some()) {
        "; their outputs merge into its one output ring in sequence order"
    } else {
        ""
    };
    let lost = match s.on_loss() {
        crate::config::OnLoss::Retry => "a sibling takes it again",
        crate::config::OnLoss::Drop => "it is counted as dropped",
    };
    let on = if s.replica_devices().is_empty() {
        format!("each on {device}")
    } else {
        let each: Vec<String> =
            s.replica_devices().iter().enumerate().map(|(r, d)| format!("#{r} on cuda:{d}")).collect();
        each.join(", ")
    };
    format!(
        "x{} replicas (processes {}#0..{}#{}, {on}): each frame goes to the first free one{merge}; the frame of a replica that dies: {lost} (on_loss = \"{}\")",
        s.replicas(),
        s.name.as_str(),
        s.name.as_str(),
        s.replicas() - 1,
        s.on_loss().name()
    )
}

/// `, mps = "…"` where the run may start an MPS daemon: whose daemon it would be.
fn mps_scope(plan: &Plan) -> String {
    let cuda = plan.stages.iter().any(|s| s.domain == gpuipc_plugin_api::Domain::Cuda);
    if plan.isolation == crate::config::Isolation::Process || !cuda {
        return String::new();
    }
    format!(", mps = \"{}\"", plan.mps.name())
}

/// The plan as a person reads it: stages in run order, then links.
pub fn render_text(plan: &Plan) -> String {
    let mut out = String::new();
    let frames = plan.frames.map_or("until stopped".to_owned(), |n| format!("{n} frames per source"));
    let _ = writeln!(
        out,
        "pipeline '{}' ({}): {}, {}, {frames}, isolation = \"{}\"{}",
        plan.name,
        plan.file.display(),
        count(plan.stages.len(), "stage"),
        count(plan.links.len(), "link"),
        plan.isolation.name(),
        mps_scope(plan)
    );
    // A reason several stages share (no CUDA driver) is said once, below them.
    let shared_notes: Vec<&String> = {
        let mut notes: Vec<&String> = plan.stages.iter().filter_map(|s| s.domain_note.as_ref()).collect();
        notes.sort();
        notes.dedup();
        notes
            .into_iter()
            .filter(|n| plan.stages.iter().filter(|s| s.domain_note.as_ref() == Some(*n)).count() > 1)
            .collect()
    };
    let _ = writeln!(out, "stages (in run order):");
    let width = plan.stages.iter().map(|s| s.name.as_str().len()).max().unwrap_or(0);
    for s in &plan.stages {
        let device = match s.device {
            Some(n) => format!("{}:{n}", s.domain.name()),
            None => s.domain.name().to_owned(),
        };
        let device = match s.host {
            Some(h) => format!("{device} on host {}", plan.hosts[h].name),
            None => device,
        };
        let inputs = if s.inputs.is_empty() {
            "source".to_owned()
        } else {
            let from: Vec<String> =
                s.inputs.iter().map(|i| format!("{} ({})", plan.stages[i.from].name, i.format)).collect();
            format!("reads {} [{}]", from.join(", "), s.policy.name())
        };
        let output = match &s.output {
            None => "sink".to_owned(),
            Some(o) if o.link.is_none() => format!("-> {} (no consumer: private output)", o.format),
            Some(o) => format!("-> {}", o.format),
        };
        let note = match &s.domain_note {
            Some(n) if shared_notes.contains(&n) => " (device auto, see below)".to_owned(),
            Some(n) => format!(" ({n})"),
            None => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:width$}  {} {}  {device}{note}  {inputs}  {output}{}",
            s.name.as_str(),
            s.plugin.name,
            s.plugin.version,
            supervision(&s.supervision)
        );
        if s.replicas() > 1 {
            let _ = writeln!(out, "  {:width$}  {}", "", replicas(s, &device));
        }
    }
    for note in &shared_notes {
        let names: Vec<&str> =
            plan.stages.iter().filter(|s| s.domain_note.as_ref() == Some(*note)).map(|s| s.name.as_str()).collect();
        let why = note.strip_prefix("device auto: ").unwrap_or(note);
        let _ = writeln!(out, "note: {} run on cpu (device auto): {why}", names.join(", "));
    }
    if let Some(share) = plan.cpu_threads() {
        let _ = writeln!(out, "{}", cpu_threads_line(&share));
    }
    let overrides = super::tuning::Overrides::from_env(None);
    if let Some(line) = tuning_line(plan.spin_us, &overrides) {
        let _ = writeln!(out, "{line}");
    }
    let rows: Vec<u32> =
        (0..plan.stages.len()).map(|s| super::tuning::Tuning::resolve(plan, s, &overrides).kernel_rows).collect();
    let paced: Vec<&str> =
        plan.stages.iter().zip(&rows).filter(|(_, r)| **r > 0).map(|(s, _)| s.name.as_str()).collect();
    if let Some(line) = paced_kernels_line(&paced, rows.iter().copied().max().unwrap_or(0)) {
        let _ = writeln!(out, "{line}");
    }
    if !plan.hosts.is_empty() {
        let _ = writeln!(out, "hosts (each runs an agent: docs/multi-host.md):");
        for h in &plan.hosts {
            let speed = h.link_gbps.map_or("link speed not given".to_owned(), |g| format!("{g} Gb/s link"));
            let _ = writeln!(
                out,
                "  {}  control {}, frames to {}, {speed}; its devices are checked there when the run starts",
                h.name, h.control, h.data
            );
        }
    }
    if !plan.links.is_empty() {
        let _ = writeln!(out, "links:");
    }
    for (i, l) in plan.links.iter().enumerate() {
        let memory = link_memory(plan, i);
        let producer = &plan.stages[l.producer];
        let parts = match (&l.memory, producer.replicas() > 1) {
            (LinkMemory::Device { .. }, true) => {
                format!(" ({} per replica, each in that replica's own GPU memory)", producer.slots_each())
            }
            (_, true) => format!(" ({} per replica)", producer.slots_each()),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {}  {}, {} slots{parts} x {}, {memory}",
            plan.link_name(i),
            l.format,
            l.depth,
            megabytes(l.layout.total_bytes)
        );
        for line in crossings(plan, i) {
            let _ = writeln!(out, "    {line}");
        }
    }
    out
}

/// The knobs set away from their defaults (`plan::tuning`): the file's `spin_us` and the
/// environment's variables; `None` when nothing is.
pub fn tuning_line(file_spin_us: Option<u32>, overrides: &super::tuning::Overrides) -> Option<String> {
    let mut set: Vec<String> = file_spin_us.map(|us| format!("spin_us = {us} (pipeline file)")).into_iter().collect();
    set.extend(overrides.describe());
    (!set.is_empty())
        .then(|| format!("tuning, for every stage: {} (docs/pipeline-file.md, \"Tuning\")", set.join(", ")))
}

/// The cuda stages whose row kernels work on at most `rows` rows at once
/// (`Tuning::kernel_rows`: the same for every stage paced), in words; `None` when none are.
pub fn paced_kernels_line(stages: &[&str], rows: u32) -> Option<String> {
    let names: Vec<String> = stages.iter().map(|name| format!("'{name}'")).collect();
    (!names.is_empty()).then(|| {
        format!(
            "paced kernels: {} launch their row kernels over at most {rows} rows at once, leaving memory bandwidth \
             to the copies between GPUs ({}; docs/gpu.md)",
            names.join(", "),
            gpuipc_plugin_api::cuda::KERNEL_ROWS_ENV
        )
    })
}

/// How the cpu stages share the cores, in words.
pub fn cpu_threads_line(share: &super::CpuThreads) -> String {
    format!(
        "cpu threads: {} in the cpu domain on {}: a cpu stage's `threads = 0` takes {} (at most {})",
        if share.processes == 1 {
            "1 stage process".to_owned()
        } else {
            format!("{} stage processes", share.processes)
        },
        count(share.cores, "core"),
        count(share.each, "thread"),
        gpuipc_plugin_api::bands::DEFAULT_MAX_THREADS
    )
}

/// For each host other than the producer's that a link's consumers are on: how frames get
/// there and how many a second the network link allows.
fn crossings(plan: &Plan, link: usize) -> Vec<String> {
    let l = &plan.links[link];
    let home = plan.stages[l.producer].host;
    let host_name = |h: Option<usize>| h.map_or("local".to_owned(), |h| plan.hosts[h].name.clone());
    let mut to: Vec<Option<usize>> = l.consumers.iter().map(|&c| plan.stages[c].host).filter(|&h| h != home).collect();
    to.dedup();
    to.sort();
    to.dedup();
    to.into_iter()
        .map(|h| {
            let bytes = l.layout.total_bytes;
            // The slower end's link bounds it; the local machine's is not declared.
            let speed = [home, h].into_iter().flatten().filter_map(|i| plan.hosts[i].link_gbps).reduce(f64::min);
            let bound = match speed {
                Some(g) => {
                    format!("at most {:.1} frames/s on the {g} Gb/s link", super::hosts::frames_per_second(g, bytes))
                }
                None => "give the hosts' link_gbps for the frames/s it allows".to_owned(),
            };
            let address = h.map_or("the machine run starts on".to_owned(), |i| plan.hosts[i].data.clone());
            let nccl = l.consumers.iter().any(|&c| {
                plan.stages[c].host == h && plan.stages[c].input_transport == crate::config::InputTransport::Nccl
            });
            let how = if nccl {
                format!("NCCL GPU to GPU (control over TCP to {address})")
            } else {
                format!("TCP to {address}")
            };
            format!(
                "crosses hosts {} -> {}: {how}, {} a frame; {bound}",
                host_name(home),
                host_name(h),
                megabytes(bytes)
            )
        })
        .collect()
}

/// Where a link's frames live and who copies, in words.
fn link_memory(plan: &Plan, link: usize) -> String {
    let l = &plan.links[link];
    match &l.memory {
        LinkMemory::Host => "host shared memory".to_owned(),
        LinkMemory::HostStaged { no_peer: None } => {
            "host shared memory, copied to/from the GPU on the cuda side".to_owned()
        }
        LinkMemory::HostStaged { no_peer: Some((from, to)) } => format!(
            "host shared memory, copied to/from the GPU on each end (cuda:{from} has no peer access to cuda:{to})"
        ),
        LinkMemory::Device { transport, device, peers, pushed } => {
            let shared = match transport {
                Transport::Auto => "VMM fds where supported, else legacy IPC",
                Transport::Vmm => "VMM fds",
                Transport::Legacy => "legacy IPC handles",
            };
            let mut text = format!("GPU memory on cuda:{device} shared between processes ({shared})");
            if peers.is_empty() {
                text.push_str(", zero copies");
                return text;
            }
            if *pushed {
                let from: Vec<String> = peers.iter().map(|p| format!("cuda:{p}")).collect();
                text.push_str(&format!(
                    ", zero copies on cuda:{device}; written on {} and pushed into it by its copy engines (peer_push_min_bytes)",
                    from.join(", ")
                ));
                return text;
            }
            // A consumer on another GPU copies the frames in, or its kernels read them in place,
            // as the tuning says for frames of this size (the same for every stage).
            let overrides = super::tuning::Overrides::from_env(None);
            let copied = l.consumers.first().is_some_and(|&c| super::tuning::copies_in(plan, l, c, &overrides));
            let peers: Vec<String> = peers.iter().map(|p| format!("cuda:{p}")).collect();
            if copied {
                text.push_str(&format!(
                    ", zero copies on cuda:{device}; on {} copied into the GPU's own memory by its copy engines (peer_copy_min_bytes)",
                    peers.join(", ")
                ));
            } else {
                text.push_str(&format!(", zero copies; read from {} over peer access", peers.join(", ")));
            }
            text
        }
    }
}

fn dot_id(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\\\""))
}

/// The plan as Graphviz dot: stages as boxes, links as edges labelled with format and policy.
pub fn render_dot(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_id(&plan.name));
    let _ = writeln!(out, "  rankdir=LR;");
    let _ = writeln!(out, "  node [shape=box, fontname=\"monospace\"];");
    for s in &plan.stages {
        let _ = writeln!(
            out,
            "  {} [label=\"{}\\n{} ({})\"];",
            dot_id(s.name.as_str()),
            s.name,
            s.plugin.name,
            s.domain.name()
        );
    }
    for edge in plan.graph.edge_indices() {
        let (from, to) = plan.graph.edge_endpoints(edge).expect("the edge exists");
        let (producer, consumer) = (&plan.stages[plan.graph[from]], &plan.stages[plan.graph[to]]);
        let link = &plan.links[plan.graph[edge]];
        let policy = consumer.policy.name();
        let _ = writeln!(
            out,
            "  {} -> {} [label=\"{}\\n{} slots, {policy}\"];",
            dot_id(producer.name.as_str()),
            dot_id(consumer.name.as_str()),
            link.format,
            link.depth,
        );
    }
    let _ = writeln!(out, "}}");
    out
}

/// "1 stage", "3 stages".
fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::CpuThreads;

    #[test]
    fn cpu_stages_share_the_cores_and_validate_says_how() {
        // The case: three cpu stages on two cores each take one thread, not two.
        assert_eq!(CpuThreads::new(2, 3).each, 1);
        assert_eq!(CpuThreads::new(16, 3).each, 5);
        assert_eq!(CpuThreads::new(16, 1).each, 16);
        assert_eq!(CpuThreads::new(1, 0).each, 1);
        assert_eq!(
            cpu_threads_line(&CpuThreads::new(2, 3)),
            "cpu threads: 3 stage processes in the cpu domain on 2 cores: a cpu stage's `threads = 0` takes 1 thread (at most 8)"
        );
    }

    #[test]
    fn validate_names_the_paced_stages_and_their_rows() {
        assert_eq!(paced_kernels_line(&[], 64), None);
        assert_eq!(
            paced_kernels_line(&["gen", "grade"], 64).unwrap(),
            "paced kernels: 'gen', 'grade' launch their row kernels over at most 64 rows at once, leaving memory \
             bandwidth to the copies between GPUs (GPUIPC_KERNEL_ROWS; docs/gpu.md)"
        );
    }
}
