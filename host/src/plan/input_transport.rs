//! `input_transport`: how frames from a stage's inputs on other hosts reach it, checked once
//! the stages' hosts and domains are known. `nccl` (GPU to GPU, docs/multi-host.md) needs an
//! input that crosses hosts, both ends in the cuda domain, and the same answer from every
//! consumer of that input on one host (one bridge carries a link into a host).

use gpuipc_plugin_api::Domain;
use toml::Spanned;

use super::hosts::HostPlan;
use super::{LinkPlan, StagePlan};
use crate::config::{Diagnostics, InputTransport, SourceFile, StageSection};

/// Report every misuse of `input_transport`. `sections[i]` is the file's table of planned
/// stage `i`.
pub fn check(
    source: &SourceFile,
    sections: &[&Spanned<StageSection>],
    stages: &[StagePlan],
    links: &[LinkPlan],
    hosts: &[HostPlan],
    diags: &mut Diagnostics,
) {
    let host_name = |h: Option<usize>| h.map_or_else(|| "local".to_owned(), |i| hosts[i].name.clone());
    for (i, stage) in stages.iter().enumerate() {
        let Some(key) = &sections[i].get_ref().input_transport else { continue };
        if *key.get_ref() != InputTransport::Nccl {
            continue;
        }
        let crossing: Vec<&StagePlan> =
            stage.inputs.iter().map(|input| &stages[input.from]).filter(|p| p.host != stage.host).collect();
        if crossing.is_empty() {
            let why = if stage.inputs.is_empty() {
                "it has no inputs".to_owned()
            } else {
                format!("all its inputs run on host `{}` too", host_name(stage.host))
            };
            diags.error_at(
                source,
                key.span(),
                format!("stage '{}': input_transport = \"nccl\" carries frames from stages on other hosts, and {why}; remove it (frames between stages of one host never leave its memory)", stage.name),
            );
            continue;
        }
        if stage.domain == Domain::Cpu {
            diags.error_at(
                source,
                key.span(),
                format!("stage '{}' runs in the cpu domain, and input_transport = \"nccl\" receives frames into GPU memory; give it device = \"cuda:N\", or use input_transport = \"tcp\"", stage.name),
            );
        }
        for producer in crossing.iter().filter(|p| p.domain == Domain::Cpu) {
            diags.error_at(
                source,
                key.span(),
                format!(
                    "stage '{}': input_transport = \"nccl\" sends from GPU memory, and its input '{}' on host `{}` runs in the cpu domain; give '{}' device = \"cuda:N\", or use input_transport = \"tcp\"",
                    stage.name,
                    producer.name,
                    host_name(producer.host),
                    producer.name
                ),
            );
        }
    }
    // One bridge per (link, consumer host): its consumers there must agree.
    for link in links {
        let home = stages[link.producer].host;
        let mut seen: Vec<(Option<usize>, usize)> = Vec::new();
        for &c in &link.consumers {
            let host = stages[c].host;
            if host == home {
                continue;
            }
            match seen.iter().find(|(h, _)| *h == host) {
                None => seen.push((host, c)),
                Some(&(_, first)) if stages[first].input_transport != stages[c].input_transport => {
                    let span =
                        sections[c].get_ref().input_transport.as_ref().map_or_else(|| sections[c].span(), |k| k.span());
                    diags.error_at(
                        source,
                        span,
                        format!(
                            "stages '{}' and '{}' on host `{}` both read '{}' from host `{}`, one with input_transport = \"{}\", the other \"{}\": one bridge carries a link into a host, so give them the same input_transport",
                            stages[first].name,
                            stages[c].name,
                            host_name(host),
                            stages[link.producer].name,
                            host_name(home),
                            stages[first].input_transport.name(),
                            stages[c].input_transport.name()
                        ),
                    );
                }
                Some(_) => {}
            }
        }
    }
}
