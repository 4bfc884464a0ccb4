//! Building a [`Plan`] from a parsed pipeline file: names, graph, plugins, domains, formats.
//!
//! Each step collects every problem it finds; later steps run only when the earlier ones left
//! a graph they can trust (no plugin is loaded for a file with a cycle, say).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use gpuipc_plugin_api::{FrameFormat, FrameLayout};
use petgraph::algo::{tarjan_scc, toposort};
use petgraph::graph::{DiGraph, NodeIndex};
use toml::Spanned;

use super::domain::{Driver, link_memory, transport_problem};
use super::{
    DEFAULT_DEPTH, InputPlan, LARGE_FRAME_BYTES, LARGE_FRAME_DEPTH, LinkMemory, LinkPlan, MAX_CONSUMERS, MAX_DEPTH,
    OutputPlan, Plan, PluginRef, Replication, SMALL_FRAME_GPU_DEPTH, StagePlan, Supervision, TIME_SLICED_DEPTH,
};
use crate::config::{DeviceSpec, Diagnostics, PipelineFile, SourceFile, StageName, StageSection};
use crate::plugin::{self, LoadedPlugin};

/// Check a parsed pipeline file and turn it into a plan, loading each plugin to negotiate
/// formats. Returns every problem found.
pub fn build(source: &SourceFile, file: PipelineFile) -> Result<Plan, Diagnostics> {
    let mut diags = Diagnostics::default();
    let settings = pipeline_settings(source, &file, &mut diags);
    let stages: Vec<&Spanned<StageSection>> = file.stages.iter().collect();
    let names = stage_names(source, &stages, &mut diags);
    if stages.is_empty() {
        diags.error_at(source, 0..0, "the pipeline has no stages; add a [[stage]] table");
    }
    let edges = input_edges(source, &stages, &names, &mut diags);
    let depths: Vec<u32> = stages.iter().map(|s| stage_depth(source, s, &mut diags)).collect();
    let defaults = Supervision::defaults(source, &file, &mut diags);
    let supervision: Vec<Supervision> =
        stages.iter().map(|s| defaults.for_stage(source, s.get_ref(), &mut diags)).collect();
    let hosts = super::hosts::plan_hosts(source, &file.hosts, &mut diags);
    let stage_hosts: Vec<Option<usize>> = stages
        .iter()
        .zip(&names)
        .map(|(s, n)| super::hosts::stage_host(source, s.get_ref(), n, &hosts, &mut diags).unwrap_or(None))
        .collect();
    diags.into_result()?;

    let graph = stage_graph(stages.len(), &edges);
    let order = topological_order(source, &stages, &graph)?;
    let position: HashMap<usize, usize> = order.iter().enumerate().map(|(pos, &i)| (i, pos)).collect();
    let wiring = number_links(&edges, &order, &position);

    let mut diags = Diagnostics::default();
    let base_dir = source.path().parent().map(Path::to_owned).unwrap_or_default();
    let plugins = load_plugins(source, &stages, &base_dir, &mut diags);
    let mut planned: Vec<Option<StagePlan>> = vec![None; stages.len()];
    for &i in &order {
        let stage = stages[i].get_ref();
        let Some(plugin) = &plugins[i] else { continue };
        let Some(inputs) = input_formats(source, &stages, &planned, i, &edges[i], &mut diags) else { continue };
        let context = StageContext {
            name: &names[i],
            inputs: &inputs,
            wired: &wiring.inputs[i],
            output_link: wiring.output_link[position[&i]],
            default_device: settings.device,
            host: stage_hosts[i],
            remote: stage_hosts[i].map(|h| hosts[h].name.as_str()),
            depth: depths[i],
            supervision: supervision[i],
        };
        planned[i] = plan_stage(source, stage, plugin, &context, &stages, &mut diags);
    }
    diags.into_result()?;

    // In topological order; their links as numbered before planning.
    let mut stages_out: Vec<StagePlan> =
        order.iter().map(|&i| planned[i].take().expect("every stage planned when no error was found")).collect();
    let mut links = wire_links(&stages_out);
    let replicas_of: Vec<u32> = stages_out.iter().map(StagePlan::replicas).collect();
    // A replicated stage's ring is already sized by its parts.
    let left_to_plan =
        |producer: usize| stages[order[producer]].get_ref().depth.is_none() && replicas_of[producer] == 1;
    size_gpu_links(&mut links, &mut stages_out, &left_to_plan, settings.isolation);
    deepen_links_into_replicas(&mut links, &mut stages_out, left_to_plan);
    let mut diags = Diagnostics::default();
    let sections: Vec<&Spanned<StageSection>> = order.iter().map(|&i| stages[i]).collect();
    super::input_transport::check(source, &sections, &stages_out, &links, &hosts, &mut diags);
    for link in &links {
        if link.consumers.len() > MAX_CONSUMERS {
            let producer = &stages_out[link.producer];
            let span = stages[order[link.producer]].span();
            diags.error_at(
                source,
                span,
                format!(
                    "stage '{}' has {} consumers; a link supports at most {MAX_CONSUMERS}",
                    producer.name,
                    link.consumers.len()
                ),
            );
        }
        for (&consumer, policy) in link.consumers.iter().zip(&link.policies) {
            if link.depth == 1 && *policy != crate::config::Policy::Block {
                let stage = stages[order[consumer]].get_ref();
                let span = stage.policy.as_ref().map_or_else(|| stages[order[consumer]].span(), |p| p.span());
                diags.error_at(source,
                    span,
                    format!(
                        "stage '{}' reads '{}' with policy `{}`, but '{}' has depth = 1: its one slot is always being written or read, so this stage would get almost no frame; give '{}' depth = 2 or more, or use policy = \"block\"",
                        stages_out[consumer].name,
                        stages_out[link.producer].name,
                        policy.name(),
                        stages_out[link.producer].name,
                        stages_out[link.producer].name
                    ),
                );
            }
        }
        if let Some(why) = transport_problem(link, &Driver) {
            let stage = stages[order[link.producer]].get_ref();
            let span = stage.transport.as_ref().map_or_else(|| stages[order[link.producer]].span(), |t| t.span());
            diags.error_at(source, span, format!("stage '{}': {why}", stages_out[link.producer].name));
        }
    }
    diags.into_result()?;
    let mut plan_graph = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..stages_out.len()).map(|i| plan_graph.add_node(i)).collect();
    for (li, link) in links.iter().enumerate() {
        for &c in &link.consumers {
            plan_graph.add_edge(nodes[link.producer], nodes[c], li);
        }
    }
    Ok(Plan {
        hosts,
        name: settings.name,
        file: source.path().to_owned(),
        frames: settings.frames,
        isolation: settings.isolation,
        mps: settings.mps,
        spin_us: settings.spin_us,
        on_host_loss: settings.on_host_loss,
        metrics: settings.metrics,
        stages: stages_out,
        links,
        graph: plan_graph,
    })
}

/// The formats a stage's inputs carry, or `None` when one cannot be known: its producer
/// failed to plan (already reported) or is a sink (reported here).
fn input_formats(
    source: &SourceFile,
    stages: &[&Spanned<StageSection>],
    planned: &[Option<StagePlan>],
    stage: usize,
    edges: &[(usize, std::ops::Range<usize>)],
    diags: &mut Diagnostics,
) -> Option<Vec<(usize, FrameFormat)>> {
    let mut formats = Some(Vec::new());
    for (from, span) in edges {
        let format = match &planned[*from] {
            None => None,
            Some(p) if p.output.is_none() => {
                diags.error_at(
                    source,
                    span.clone(),
                    format!(
                        "stage '{}' has input '{}', but stage '{}' (plugin `{}`) has no output",
                        stages[stage].get_ref().name.get_ref(),
                        p.name,
                        p.name,
                        p.plugin.name
                    ),
                );
                None
            }
            Some(p) => p.output_format(),
        };
        match (format, formats.as_mut()) {
            (Some(f), Some(list)) => list.push((*from, f)),
            _ => formats = None,
        }
    }
    formats
}

struct Settings {
    name: String,
    frames: Option<u64>,
    device: DeviceSpec,
    isolation: crate::config::Isolation,
    mps: crate::config::MpsScope,
    spin_us: Option<u32>,
    on_host_loss: crate::config::OnHostLoss,
    metrics: Option<crate::config::MetricsAddress>,
}

fn pipeline_settings(source: &SourceFile, file: &PipelineFile, diags: &mut Diagnostics) -> Settings {
    let p = &file.pipeline;
    let stem = source.path().file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = p.name.as_ref().map_or(stem, |n| n.get_ref().clone());
    if let Some(n) = &p.name
        && n.get_ref().trim().is_empty()
    {
        diags.error_at(source, n.span(), "pipeline name is empty");
    }
    if let Some(f) = &p.frames
        && *f.get_ref() == 0
    {
        diags.error_at(source, f.span(), "frames must be at least 1 (leave it out to run until stopped)");
    }
    if let Some(s) = &p.spin_us
        && *s.get_ref() > 1_000_000
    {
        diags.error_at(source, s.span(), "spin_us must be at most 1000000 (one second)");
    }
    let metrics = p.metrics.as_ref().and_then(|m| match crate::config::MetricsAddress::parse(m.get_ref()) {
        Ok(address) => Some(address),
        Err(why) => {
            diags.error_at(source, m.span(), why);
            None
        }
    });
    Settings {
        metrics,
        name,
        frames: p.frames.as_ref().map(|f| *f.get_ref()),
        device: p.device.as_ref().map_or(DeviceSpec::Auto, |d| *d.get_ref()),
        isolation: p.isolation.as_ref().map(|i| *i.get_ref()).unwrap_or_default(),
        mps: p.mps.as_ref().map(|m| *m.get_ref()).unwrap_or_default(),
        spin_us: p.spin_us.as_ref().map(|s| *s.get_ref()),
        on_host_loss: p.on_host_loss.as_ref().map(|o| *o.get_ref()).unwrap_or_default(),
    }
}

/// Each stage's name, checked; a bad or duplicate name is reported and stays as written so
/// later messages can still mention it.
fn stage_names(source: &SourceFile, stages: &[&Spanned<StageSection>], diags: &mut Diagnostics) -> Vec<String> {
    let mut first_seen: HashMap<&str, usize> = HashMap::new();
    for s in stages {
        let name = &s.get_ref().name;
        if let Err(message) = StageName::parse(name.get_ref()) {
            diags.error_at(source, name.span(), message);
        }
        match first_seen.get(name.get_ref().as_str()) {
            Some(&at) => {
                let (line, _) = source.line_col(at);
                diags.error_at(
                    source,
                    name.span(),
                    format!("duplicate stage name '{}' (first defined on line {line})", name.get_ref()),
                );
            }
            None => {
                first_seen.insert(name.get_ref(), name.span().start);
            }
        }
    }
    stages.iter().map(|s| s.get_ref().name.get_ref().clone()).collect()
}

/// For each stage, the (stage index, span) of each input.
fn input_edges(
    source: &SourceFile,
    stages: &[&Spanned<StageSection>],
    names: &[String],
    diags: &mut Diagnostics,
) -> Vec<Vec<(usize, std::ops::Range<usize>)>> {
    let index: HashMap<&str, usize> = names.iter().enumerate().rev().map(|(i, n)| (n.as_str(), i)).collect();
    stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let stage = s.get_ref();
            let mut edges = Vec::new();
            for input in stage.inputs.iter().flat_map(|v| v.get_ref()) {
                let name = input.get_ref();
                match index.get(name.as_str()) {
                    None => {
                        diags.error_at(source, input.span(), format!("stage '{}' has unknown input '{name}'", names[i]))
                    }
                    Some(&j) if j == i => {
                        diags.error_at(source, input.span(), format!("stage '{}' lists itself as an input", names[i]))
                    }
                    Some(&j) if edges.iter().any(|&(e, _)| e == j) => {
                        diags.error_at(source, input.span(), format!("stage '{}' lists input '{name}' twice", names[i]))
                    }
                    Some(&j) => edges.push((j, input.span())),
                }
            }
            edges
        })
        .collect()
}

fn stage_depth(source: &SourceFile, stage: &Spanned<StageSection>, diags: &mut Diagnostics) -> u32 {
    let Some(depth) = &stage.get_ref().depth else { return DEFAULT_DEPTH };
    let d = *depth.get_ref();
    if !(1..=MAX_DEPTH).contains(&d) {
        diags.error_at(
            source,
            depth.span(),
            format!("stage '{}': depth must be between 1 and {MAX_DEPTH}, not {d}", stage.get_ref().name.get_ref()),
        );
    }
    d
}

fn stage_graph(n: usize, edges: &[Vec<(usize, std::ops::Range<usize>)>]) -> DiGraph<usize, ()> {
    let mut g = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..n).map(|i| g.add_node(i)).collect();
    for (to, inputs) in edges.iter().enumerate() {
        for &(from, _) in inputs {
            g.add_edge(nodes[from], nodes[to], ());
        }
    }
    g
}

/// Stage indices in an order where producers come first, or an error per cycle naming its
/// stages in order.
fn topological_order(
    source: &SourceFile,
    stages: &[&Spanned<StageSection>],
    graph: &DiGraph<usize, ()>,
) -> Result<Vec<usize>, Diagnostics> {
    if let Ok(order) = toposort(graph, None) {
        return Ok(order.into_iter().map(|n| graph[n]).collect());
    }
    let mut diags = Diagnostics::default();
    for scc in tarjan_scc(graph) {
        if scc.len() < 2 {
            continue;
        }
        let cycle = cycle_path(graph, &scc);
        let first = cycle[0];
        let mut names: Vec<&str> = cycle.iter().map(|&i| stages[i].get_ref().name.get_ref().as_str()).collect();
        names.push(names[0]);
        diags.error_at(
            source,
            stages[first].get_ref().name.span(),
            format!("the stages form a cycle: {}", names.join(" -> ")),
        );
    }
    diags.into_result().map(|_| Vec::new())
}

/// One cycle through a strongly connected set, as stage indices in data-flow order, starting
/// from the stage defined first in the file.
fn cycle_path(graph: &DiGraph<usize, ()>, scc: &[NodeIndex]) -> Vec<usize> {
    let start = *scc.iter().min_by_key(|n| graph[**n]).expect("a cycle has stages");
    let mut path = vec![start];
    let mut current = start;
    loop {
        let next = graph
            .neighbors(current)
            .filter(|n| scc.contains(n))
            .min_by_key(|n| graph[*n])
            .expect("every stage on a cycle has a successor on it");
        if next == start || path.contains(&next) {
            break;
        }
        path.push(next);
        current = next;
    }
    path.into_iter().map(|n| graph[n]).collect()
}

/// Resolve and load every stage's plugin once per file path.
fn load_plugins(
    source: &SourceFile,
    stages: &[&Spanned<StageSection>],
    base_dir: &Path,
    diags: &mut Diagnostics,
) -> Vec<Option<std::rc::Rc<LoadedPlugin>>> {
    let mut cache: HashMap<PathBuf, std::rc::Rc<LoadedPlugin>> = HashMap::new();
    stages
        .iter()
        .map(|s| {
            let stage = s.get_ref();
            let spec = &stage.plugin;
            let located =
                |message: String| source.error_at(spec.span(), format!("stage '{}': {message}", stage.name.get_ref()));
            let path = match plugin::resolve(spec.get_ref(), base_dir) {
                Ok(found) => {
                    if let Some(warning) = found.shadow_warning(spec.get_ref()) {
                        let (line, column) = source.line_col(spec.span().start);
                        tracing::warn!(
                            "{}:{line}:{column}: stage '{}': {warning}",
                            source.path().display(),
                            stage.name.get_ref()
                        );
                    }
                    found.path
                }
                Err(e) => {
                    diags.push(located(e.to_string()));
                    return None;
                }
            };
            if let Some(p) = cache.get(&path) {
                return Some(p.clone());
            }
            match LoadedPlugin::load(&path) {
                Ok(p) => {
                    let p = std::rc::Rc::new(p);
                    cache.insert(path, p.clone());
                    Some(p)
                }
                Err(e) => {
                    diags.push(located(e.to_string()));
                    None
                }
            }
        })
        .collect()
}

/// Check one stage against its plugin and negotiate its output.
/// What planning one stage needs besides its section and plugin.
struct StageContext<'a> {
    name: &'a str,
    /// Each input's producer (file index) and format.
    inputs: &'a [(usize, FrameFormat)],
    /// Each input's place among the links (see [`number_links`]).
    wired: &'a [InputWire],
    /// The link its output feeds, if anyone reads it.
    output_link: Option<usize>,
    default_device: DeviceSpec,
    /// The `[[host]]` it runs on, and that host's name.
    host: Option<usize>,
    remote: Option<&'a str>,
    depth: u32,
    supervision: Supervision,
}

fn plan_stage(
    source: &SourceFile,
    stage: &StageSection,
    plugin: &LoadedPlugin,
    context: &StageContext<'_>,
    stages: &[&Spanned<StageSection>],
    diags: &mut Diagnostics,
) -> Option<StagePlan> {
    let StageContext { name, inputs, default_device, remote, depth, .. } = *context;
    let meta = plugin.meta();
    let at_stage = |message: String| source.error_at(stage.name.span(), message);
    let n = inputs.len() as u32;
    let inputs_span = stage.inputs.as_ref().map_or(stage.name.span(), |i| i.span());
    if meta.max_inputs == 0 && n > 0 {
        diags.error_at(
            source,
            inputs_span,
            format!("stage '{name}' runs plugin `{}`, a source, which takes no inputs; remove `inputs`", meta.name),
        );
        return None;
    }
    if n < meta.min_inputs {
        diags.push(at_stage(format!(
            "stage '{name}' runs plugin `{}`, which needs at least {} input{}; it has {n} (add `inputs = [\"...\"]`)",
            meta.name,
            meta.min_inputs,
            if meta.min_inputs == 1 { "" } else { "s" }
        )));
        return None;
    }
    if n > meta.max_inputs {
        diags.error_at(
            source,
            inputs_span,
            format!(
                "stage '{name}' runs plugin `{}`, which takes at most {} input(s); it has {n}",
                meta.name, meta.max_inputs
            ),
        );
        return None;
    }
    let mut formats_ok = true;
    for (&(from, format), input) in inputs.iter().zip(stage.inputs.iter().flat_map(|v| v.get_ref())) {
        let accepted = format.pixel_format().is_some_and(|p| meta.accepts.contains(&p));
        if !accepted {
            let from_name = stages[from].get_ref().name.get_ref();
            let accepts: Vec<&str> = meta.accepts.iter().map(|p| p.name()).collect();
            diags.error_at(source,
                input.span(),
                format!(
                    "format mismatch: stage '{from_name}' outputs {format}, but stage '{name}' (plugin `{}`) accepts {}",
                    meta.name,
                    accepts.join(", ")
                ),
            );
            formats_ok = false;
        }
    }
    // Problems that do not stop negotiation: report them, and the params' problems too.
    let mut ok = true;
    if let Some(policy) = &stage.policy
        && inputs.is_empty()
    {
        diags.error_at(
            source,
            policy.span(),
            format!("stage '{name}' has no inputs, so `policy` has no effect; remove it"),
        );
        ok = false;
    }
    // Before the devices are asked for: a device list that cannot spread is wrong anywhere.
    let (replicas, on_loss) = stage_replicas(source, stage, meta, name, diags)?;
    if replicas > 1 && inputs.is_empty() {
        // A plugin that can be a filter too (`python`) used as a source.
        let span = stage.replicas.as_ref().map_or(stage.name.span(), |r| r.span());
        diags.error_at(source, span, format!("stage '{name}' is a source (no inputs): each replica would make the whole stream; a source runs as one process"));
        return None;
    }
    let replica_devices = spread_devices(source, stage, name, replicas, diags)?;
    let device_spec = stage.device.as_ref().map_or(default_device, |d| d.get_ref().first());
    // On another host the plan cannot ask the driver: that host's agent checks the device.
    let resolved = match remote {
        None => super::resolve_domain(device_spec, meta, stage.device.is_some()),
        Some(host) => super::remote_domain(device_spec, meta, host),
    };
    let mut domain = match resolved {
        Ok(d) => Some(d),
        Err(message) => {
            let span = stage.device.as_ref().map_or(stage.name.span(), |d| d.span());
            diags.error_at(source, span, format!("stage '{name}': {message}"));
            None
        }
    };
    // The rest of a device list: each GPU must be there too.
    if let Some(device) = &stage.device
        && let crate::config::StageDevice::Spread(list) = device.get_ref()
        && domain.is_some()
        && remote.is_none()
    {
        for &d in &list[1..] {
            if let Err(message) = super::resolve_domain(DeviceSpec::Cuda(d), meta, true) {
                diags.error_at(source, device.span(), format!("stage '{name}': {message}"));
                domain = None;
            }
        }
    }
    let params = match &stage.params {
        Some(p) => toml::to_string(p.get_ref()).expect("a parsed TOML table serialises"),
        None => String::new(),
    };
    let params_span = stage.params.as_ref().map_or(stage.name.span(), |p| p.span());
    if !formats_ok {
        return None;
    }
    let input_formats: Vec<FrameFormat> = inputs.iter().map(|&(_, f)| f).collect();
    let output = match plugin.negotiate(&params, &input_formats) {
        Ok(o) => o,
        Err(e) => {
            let message = format!("stage '{name}': {e}");
            let span = param_key_span(source, &params_span, &message).unwrap_or(params_span);
            diags.error_at(source, span, message);
            return None;
        }
    };
    let output = match output.map(|f| checked_output(meta, f)) {
        None => None,
        Some(Ok(o)) => Some(o),
        Some(Err(message)) => {
            diags.push(at_stage(format!("stage '{name}': plugin `{}` {message}", meta.name)));
            return None;
        }
    };
    let (domain, device, domain_note) = domain?;
    if !ok {
        return None;
    }
    let (depth, replica_slots) = replica_depth(source, stage, name, depth, replicas, diags)?;
    let policy = stage.policy.as_ref().map(|p| *p.get_ref()).unwrap_or_default();
    Some(StagePlan {
        name: StageName::parse(name).expect("names were checked before planning"),
        plugin: PluginRef { path: plugin.path().to_owned(), name: meta.name.clone(), version: meta.version.clone() },
        params,
        domain,
        device,
        host: context.host,
        domain_note,
        inputs: inputs
            .iter()
            .zip(context.wired)
            .map(|(&(_, format), w)| InputPlan { link: w.link, consumer: w.consumer, from: w.from, format, policy })
            .collect(),
        output: output.map(|(format, layout)| OutputPlan { format, layout, link: context.output_link }),
        depth,
        policy,
        transport: stage.transport.as_ref().map(|t| *t.get_ref()).unwrap_or_default(),
        input_transport: stage.input_transport.as_ref().map(|t| *t.get_ref()).unwrap_or_default(),
        replication: (replicas > 1).then_some(Replication {
            count: replicas,
            slots_each: replica_slots,
            devices: replica_devices,
            on_loss,
        }),
        supervision: context.supervision,
    })
}

/// Each replica's device where `device` lists GPUs (replica `r` on the `r % len`-th), else
/// none: a list needs replicas, and no more GPUs than replicas.
fn spread_devices(
    source: &SourceFile,
    stage: &StageSection,
    name: &str,
    replicas: u32,
    diags: &mut Diagnostics,
) -> Option<Vec<u32>> {
    let Some(device) = &stage.device else { return Some(Vec::new()) };
    let crate::config::StageDevice::Spread(list) = device.get_ref() else { return Some(Vec::new()) };
    let problem = if replicas == 1 {
        Some(format!(
            "stage '{name}': a device list spreads a stage's replicas over GPUs, and this stage has none; give it `replicas = {}` or one device",
            list.len().max(2)
        ))
    } else if list.len() > replicas as usize {
        Some(format!("stage '{name}': {} devices for {replicas} replicas; list at most one per replica", list.len()))
    } else {
        None
    };
    if let Some(message) = problem {
        diags.error_at(source, device.span(), message);
        return None;
    }
    Some((0..replicas as usize).map(|r| list[r % list.len()]).collect())
}

/// Most processes one stage may run as replicas.
pub const MAX_REPLICAS: u32 = 64;

/// The output ring's slots and each replica's part of them: with replicas, `depth` is each
/// replica's (by default as many as fit, at most the usual 4), and the ring has them all.
fn replica_depth(
    source: &SourceFile,
    stage: &StageSection,
    name: &str,
    depth: u32,
    replicas: u32,
    diags: &mut Diagnostics,
) -> Option<(u32, u32)> {
    if replicas == 1 {
        return Some((depth, depth));
    }
    let each = match &stage.depth {
        Some(_) => depth,
        None => (MAX_DEPTH / replicas).clamp(1, DEFAULT_DEPTH),
    };
    if each * replicas > MAX_DEPTH {
        let span = stage.depth.as_ref().map_or(stage.name.span(), |d| d.span());
        diags.error_at(
            source,
            span,
            format!(
                "stage '{name}': {replicas} replicas with depth = {each} each need {} output slots; a ring has at most {MAX_DEPTH} (lower depth to {} or less)",
                each * replicas,
                MAX_DEPTH / replicas
            ),
        );
        return None;
    }
    Some((each * replicas, each))
}

/// The stage's `replicas` and `on_loss`, checked against its plugin.
fn stage_replicas(
    source: &SourceFile,
    stage: &StageSection,
    meta: &crate::plugin::PluginMeta,
    name: &str,
    diags: &mut Diagnostics,
) -> Option<(u32, crate::config::OnLoss)> {
    let on_loss = stage.on_loss.as_ref().map(|o| *o.get_ref()).unwrap_or_default();
    let Some(replicas) = &stage.replicas else {
        if let Some(o) = &stage.on_loss {
            diags.error_at(
                source,
                o.span(),
                format!("stage '{name}' runs one process, so `on_loss` has no effect; remove it, or set `replicas`"),
            );
            return None;
        }
        return Some((1, on_loss));
    };
    let n = *replicas.get_ref();
    let mut refuse = |why: String| {
        diags.error_at(source, replicas.span(), format!("stage '{name}': {why}"));
        None
    };
    if !(1..=MAX_REPLICAS).contains(&n) {
        return refuse(format!("replicas must be between 1 and {MAX_REPLICAS}, not {n}"));
    }
    if n > 1 && meta.max_inputs == 0 {
        return refuse(format!(
            "plugin `{}` is a source: each replica would make the whole stream; a source runs as one process",
            meta.name
        ));
    }
    if n > 1 && !meta.replicable {
        let why = if meta.abi < (1, 2) {
            format!(
                "it was built for plugin ABI {}.{}, which cannot say that its instances may run as replicas",
                meta.abi.0, meta.abi.1
            )
        } else {
            "it does not allow replicas (an instance may keep state from one frame to the next: `Plugin::REPLICABLE` is false)".to_owned()
        };
        return refuse(format!("replicas = {n}, but plugin `{}` runs as one process only: {why}", meta.name));
    }
    Some((n, on_loss))
}

/// A negotiated output must be a format the plugin declared, with a non-empty size.
fn checked_output(meta: &crate::plugin::PluginMeta, format: FrameFormat) -> Result<(FrameFormat, FrameLayout), String> {
    let Some(pixel) = format.pixel_format() else {
        return Err(format!("negotiated an unknown pixel format code {}", format.pixel));
    };
    if !meta.produces.contains(&pixel) {
        return Err(format!("negotiated {pixel}, which it does not declare in `produces`"));
    }
    let layout = FrameLayout::for_format(format)
        .ok_or_else(|| format!("negotiated an empty frame ({}x{})", format.width, format.height))?;
    if layout.total_bytes > (1 << 32) {
        return Err(format!("negotiated a frame of {} bytes; the limit is 4 GiB", layout.total_bytes));
    }
    Ok((format, layout))
}

/// Slots of each GPU ring whose depth the file leaves to the plan: [`TIME_SLICED_DEPTH`] when
/// its stages will run as separate contexts time-slicing the GPU (isolation `process`, or
/// `auto` where MPS is not installed), else [`LARGE_FRAME_DEPTH`] for frames of
/// [`LARGE_FRAME_BYTES`] or more and [`SMALL_FRAME_GPU_DEPTH`] for smaller ones. Host rings
/// keep [`DEFAULT_DEPTH`].
fn size_gpu_links(
    links: &mut [LinkPlan],
    stages: &mut [StagePlan],
    depth_left_to_plan: &impl Fn(usize) -> bool,
    isolation: crate::config::Isolation,
) {
    use crate::config::Isolation;
    let time_sliced = match isolation {
        Isolation::Process => true,
        Isolation::Mps => false,
        Isolation::Auto => !crate::gpu::mps_installed(),
    };
    for link in links.iter_mut() {
        if !matches!(link.memory, LinkMemory::Device { .. }) || !depth_left_to_plan(link.producer) {
            continue;
        }
        link.depth = if time_sliced {
            TIME_SLICED_DEPTH
        } else if link.layout.total_bytes >= LARGE_FRAME_BYTES {
            LARGE_FRAME_DEPTH
        } else {
            SMALL_FRAME_GPU_DEPTH
        };
        stages[link.producer].depth = link.depth;
    }
}

/// A ring read by a stage with replicas: each replica holds a frame while it works on it, so
/// with fewer slots than replicas some would always wait (measured on an H100: 8 replicas of
/// a GPU-bound stage behind a 4-slot ring ran no faster than 4). Such a ring gets a slot per
/// replica and two more (one being written, one ready), unless its depth was set.
fn deepen_links_into_replicas(
    links: &mut [LinkPlan],
    stages: &mut [StagePlan],
    depth_left_to_plan: impl Fn(usize) -> bool,
) {
    for link in links.iter_mut() {
        let replicas = link.consumers.iter().map(|&c| stages[c].replicas()).max().unwrap_or(1);
        if replicas > 1 && depth_left_to_plan(link.producer) {
            let depth = link.depth.max((replicas + 2).min(MAX_DEPTH));
            link.depth = depth;
            stages[link.producer].depth = depth;
        }
    }
}

/// Where one input of a stage comes from: its producer's place in plan order, the link, and
/// which of the link's consumers it is.
#[derive(Debug, Clone, Copy)]
struct InputWire {
    from: usize,
    link: usize,
    consumer: usize,
}

/// The links, numbered before any stage is planned (they depend on the graph alone): one per
/// stage whose output somebody reads, in the plan order of their producers' first readers;
/// each link's consumers in plan order. So a stage plan is built whole, its inputs and output
/// already pointing at their links.
struct Wiring {
    /// By file index: each input's place.
    inputs: Vec<Vec<InputWire>>,
    /// By plan position: the link the stage's output feeds.
    output_link: Vec<Option<usize>>,
}

fn number_links(
    edges: &[Vec<(usize, std::ops::Range<usize>)>],
    order: &[usize],
    position: &HashMap<usize, usize>,
) -> Wiring {
    let mut inputs = vec![Vec::new(); edges.len()];
    let mut output_link = vec![None; order.len()];
    let mut consumers: Vec<usize> = Vec::new();
    for &file_index in order {
        for &(from_file, _) in &edges[file_index] {
            let from = position[&from_file];
            let link = *output_link[from].get_or_insert_with(|| {
                consumers.push(0);
                consumers.len() - 1
            });
            inputs[file_index].push(InputWire { from, link, consumer: consumers[link] });
            consumers[link] += 1;
        }
    }
    Wiring { inputs, output_link }
}

/// The links of stages planned with [`number_links`]' numbering, with their memory.
fn wire_links(stages: &[StagePlan]) -> Vec<LinkPlan> {
    let mut producers: Vec<(usize, usize)> = stages
        .iter()
        .enumerate()
        .filter_map(|(producer, s)| s.output.as_ref().and_then(|o| o.link).map(|link| (link, producer)))
        .collect();
    producers.sort_unstable();
    let mut links: Vec<LinkPlan> = Vec::new();
    for (link, producer) in producers {
        debug_assert_eq!(link, links.len(), "links are numbered 0, 1, 2...");
        let (s, out) = (&stages[producer], stages[producer].output.as_ref().expect("found by its output"));
        links.push(LinkPlan {
            producer,
            consumers: Vec::new(),
            policies: Vec::new(),
            format: out.format,
            layout: out.layout,
            depth: s.depth,
            memory: LinkMemory::Host,
        });
    }
    for (pos, s) in stages.iter().enumerate() {
        for input in &s.inputs {
            debug_assert_eq!(links[input.link].consumers.len(), input.consumer);
            links[input.link].consumers.push(pos);
            links[input.link].policies.push(input.policy);
        }
    }
    // From which frame size a ring on another GPU than its producer's is pushed into.
    let push_min_bytes = super::tuning::Overrides::from_env(None).peer_push_min_bytes();
    for link in links.iter_mut() {
        // Every process is an end: replicas spread over GPUs read and write from each of them.
        let ends = |s: usize| -> Vec<(gpuipc_plugin_api::Domain, Option<u32>)> {
            match stages[s].devices() {
                devices if devices.is_empty() => vec![(stages[s].domain, stages[s].device)],
                devices => devices.into_iter().map(|d| (stages[s].domain, Some(d))).collect(),
            }
        };
        // Consumers on other hosts read what a sender on the producer's host takes from the
        // ring (docs/multi-host.md): a tcp sender is a cpu end (the ring is in host memory), an
        // nccl sender a cuda end on the producer's GPU (the ring stays in device memory).
        let home = stages[link.producer].host;
        let mut consumers: Vec<_> =
            link.consumers.iter().filter(|&&c| stages[c].host == home).flat_map(|&c| ends(c)).collect();
        let remote = || link.consumers.iter().filter(|&&c| stages[c].host != home);
        if remote().any(|&c| stages[c].input_transport == crate::config::InputTransport::Tcp) {
            consumers.push((gpuipc_plugin_api::Domain::Cpu, None));
        }
        if remote().any(|&c| stages[c].input_transport == crate::config::InputTransport::Nccl) {
            consumers.push((stages[link.producer].domain, stages[link.producer].device));
        }
        let push = link.layout.total_bytes >= push_min_bytes;
        link.memory = link_memory(&ends(link.producer), &consumers, stages[link.producer].transport, push, &Driver);
    }
    links
}

/// Where, inside a stage's inline `params = { ... }` table at `span`, the key sits that a
/// plugin's message names (``param `path` ...``, serde's ``unknown field `pathh` ...``), so the
/// caret points at the key rather than at the brace.
fn param_key_span(source: &SourceFile, span: &std::ops::Range<usize>, message: &str) -> Option<std::ops::Range<usize>> {
    let named = ["param `", "field `"].iter().find_map(|marker| {
        let rest = &message[message.find(marker)? + marker.len()..];
        Some(&rest[..rest.find('`')?])
    })?;
    let table = source.text().get(span.clone())?;
    if !table.trim_start().starts_with('{') {
        return None;
    }
    // Parse the inline table alone, as the value of a key of known length, and shift its
    // keys' spans back to where they are in the file.
    const PREFIX: &str = "p = ";
    let text = format!("{PREFIX}{table}");
    let doc = toml::de::DeTable::parse(&text).ok()?;
    let toml::de::DeValue::Table(inline) = doc.get_ref().get("p")?.get_ref() else { return None };
    let key = inline.keys().find(|k| k.get_ref().as_ref() == named)?;
    let at = |offset: usize| span.start + offset - PREFIX.len();
    Some(at(key.span().start)..at(key.span().end))
}

#[cfg(test)]
mod tests {
    use crate::plan::split::tests::{HOSTS, plan_of};

    /// A cuda chain on host b (planned here without a GPU): `size` frames, `depth` set on
    /// the generator or left to the plan. The slots of each link, in plan order.
    fn slots(size: &str, gen_depth: &str) -> Vec<u32> {
        let text = format!(
            r#"{HOSTS}
[[stage]]
name = "gen"
plugin = "generator.so"
host = "b"
device = "cuda:0"
{gen_depth}params = {{ {size} }}

[[stage]]
name = "grade"
plugin = "rgb_process.so"
host = "b"
device = "cuda:0"
inputs = ["gen"]

[[stage]]
name = "yuv"
plugin = "yuv420.so"
host = "b"
device = "cuda:0"
inputs = ["grade"]
"#
        );
        let (plan, _) = plan_of(&text.replace("device = \"cpu\"\n", "isolation = \"mps\"\n"));
        plan.links.iter().map(|l| l.depth).collect()
    }

    /// GPU rings of 4K frames get 8 slots, of 1080p 3; a depth in the file stays.
    #[test]
    fn device_rings_are_sized_by_their_frames() {
        assert_eq!(slots("width = 3840, height = 2160", ""), [8, 8]);
        assert_eq!(slots("width = 1920, height = 1080", ""), [3, 3]);
        assert_eq!(slots("width = 3840, height = 2160", "depth = 3\n"), [3, 8]);
    }
}
