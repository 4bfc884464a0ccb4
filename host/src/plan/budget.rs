//! What a plan needs in memory, against what the machine has: host shared memory for the rings
//! in host memory and the statistics blocks, host memory for private cpu outputs, and per GPU
//! the rings in its memory, private outputs and staging buffers. A plan that cannot fit is
//! refused before any process starts, with the numbers and what to change.

use std::collections::BTreeMap;
use std::fmt::Write;

use gpuipc_plugin_api::Domain;

use super::{LinkMemory, Plan, ring_size};

/// VMM allocations come in 2 MiB granules.
const GPU_GRANULE: u64 = 2 << 20;

/// The memory a plan needs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Needs {
    /// Host memory: rings in host memory, statistics blocks, private cpu outputs.
    pub host: u64,
    /// GPU memory per device ordinal.
    pub gpu: BTreeMap<u32, u64>,
    /// The stage whose output ring is the largest, for the message.
    pub largest: Option<(String, u64)>,
}

pub fn needs(plan: &Plan) -> Needs {
    let mut n = Needs { host: 4096 * plan.stages.len() as u64, ..Needs::default() };
    let overrides = super::tuning::Overrides::from_env(None);
    // Only what this machine holds: another host's agent checks its own.
    for link in plan.links.iter().filter(|l| plan.stages[l.producer].host.is_none()) {
        let frame = link.layout.total_bytes;
        let (host_data, bytes) = match &link.memory {
            LinkMemory::Device { device, peers, pushed, .. } => {
                let slot = frame.next_multiple_of(GPU_GRANULE);
                let producer = &plan.stages[link.producer];
                // A pushed ring's producer makes each frame in a buffer of its own GPU first.
                if *pushed && let Some(&from) = peers.first() {
                    *n.gpu.entry(from).or_default() += frame * link.depth as u64;
                }
                // A consumer on another GPU copies each frame into a buffer of its own GPU, one a
                // slot, where its tuning says a copy wins (`link::backing::device::CopyIn`).
                if !*pushed {
                    for &c in &link.consumers {
                        let consumer = &plan.stages[c];
                        if consumer.host.is_some() || !super::tuning::copies_in(plan, link, c, &overrides) {
                            continue;
                        }
                        for r in 0..consumer.replicas() {
                            let d = consumer.device_of(Some(r)).unwrap_or(0);
                            if consumer.domain == Domain::Cuda && d != *device {
                                *n.gpu.entry(d).or_default() += frame * link.depth as u64;
                            }
                        }
                    }
                }
                // Each replica's part of the ring on the GPU that replica runs on.
                match producer.replica_devices() {
                    [] => *n.gpu.entry(*device).or_default() += slot * link.depth as u64,
                    spread => {
                        for &d in spread {
                            *n.gpu.entry(d).or_default() += slot * producer.slots_each() as u64;
                        }
                    }
                }
                (false, slot * link.depth as u64)
            }
            _ => (true, ring_size::slot_bytes(frame, true) * link.depth as u64),
        };
        n.host += ring_size::host_bytes(frame, link.depth, host_data);
        if n.largest.as_ref().is_none_or(|(_, b)| bytes > *b) {
            n.largest = Some((plan.stages[link.producer].name.to_string(), bytes));
        }
        // A cuda end of a host ring copies through one device frame of its own.
        if !matches!(link.memory, LinkMemory::Device { .. }) {
            for &s in std::iter::once(&link.producer).chain(&link.consumers) {
                if plan.stages[s].domain == Domain::Cuda && plan.stages[s].host.is_none() {
                    for r in 0..plan.stages[s].replicas() {
                        *n.gpu.entry(plan.stages[s].device_of(Some(r)).unwrap_or(0)).or_default() += frame;
                    }
                }
            }
        }
    }
    for s in plan.stages.iter().filter(|s| s.host.is_none()) {
        if let Some(out) = s.output.as_ref().filter(|o| o.link.is_none()) {
            match s.domain {
                Domain::Cuda => *n.gpu.entry(s.device.unwrap_or(0)).or_default() += out.layout.total_bytes,
                _ => n.host += out.layout.total_bytes,
            }
        }
    }
    n
}

/// What the machine has: available host memory (the smaller of MemAvailable and what the
/// cgroup still allows), and each GPU's total memory as the driver reports it (the host makes
/// no CUDA context, so it cannot ask for the free memory).
#[derive(Debug, Clone, Default)]
pub struct Has {
    pub host: Option<(u64, &'static str)>,
    pub gpu: BTreeMap<u32, u64>,
}

pub fn has() -> Has {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    });
    let cgroup = || -> Option<u64> {
        let max = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?.trim().parse::<u64>().ok()?;
        let current = std::fs::read_to_string("/sys/fs/cgroup/memory.current").ok()?.trim().parse::<u64>().ok()?;
        Some(max.saturating_sub(current))
    };
    let host = match (meminfo.map(|k| k * 1024), cgroup()) {
        (Some(m), Some(c)) if c < m => Some((c, "the cgroup's memory.max")),
        (Some(m), _) => Some((m, "MemAvailable")),
        (None, Some(c)) => Some((c, "the cgroup's memory.max")),
        (None, None) => None,
    };
    let gpu = if crate::gpu::driver_available() {
        crate::gpu::devices().unwrap_or_default().into_iter().map(|d| (d.ordinal, d.total_memory)).collect()
    } else {
        BTreeMap::new()
    };
    Has { host, gpu }
}

pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The budget as `validate` prints it.
pub fn render(needs: &Needs, has: &Has) -> String {
    let mut out = String::from("memory:\n");
    let host_has = has.host.map_or("unknown".to_owned(), |(b, from)| format!("{} available ({from})", gib(b)));
    let _ = writeln!(out, "  host    {} needed, {host_has}", gib(needs.host));
    for (device, bytes) in &needs.gpu {
        let total = has.gpu.get(device).map_or("no driver to ask".to_owned(), |t| format!("{} on the device", gib(*t)));
        let _ = writeln!(out, "  cuda:{device}  {} needed, {total}", gib(*bytes));
    }
    out
}

/// `Err(why)` when the plan cannot fit.
pub fn check(needs: &Needs, has: &Has) -> Result<(), String> {
    let hint = match &needs.largest {
        Some((stage, bytes)) => {
            format!("stage '{stage}''s output ring takes {}; lower its `depth` or the frame size", gib(*bytes))
        }
        None => "lower the frame size".to_owned(),
    };
    if let Some((available, from)) = has.host
        && needs.host > available
    {
        return Err(format!(
            "the pipeline needs {} of host memory for its rings and buffers, but {} is available ({from}); {hint}, or pass --no-budget-check",
            gib(needs.host),
            gib(available)
        ));
    }
    for (device, bytes) in &needs.gpu {
        if let Some(total) = has.gpu.get(device)
            && bytes > total
        {
            return Err(format!(
                "the pipeline needs {} of GPU memory on cuda:{device}, which has {}; {hint}, or pass --no-budget-check",
                gib(*bytes),
                gib(*total)
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_crossing_between_gpus_count_their_buffers_on_both() {
        use crate::config::Transport;
        // gen on cuda:0 -> grade on cuda:1, 4K rgb8, 8 slots.
        let (mut plan, _) = crate::plan::split::tests::plan_of(
            "[pipeline]\ndevice = \"cpu\"\n[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\nparams = { width = 3840, height = 2160 }\n[[stage]]\nname = \"grade\"\nplugin = \"rgb_process.so\"\ninputs = [\"gen\"]\n",
        );
        for (d, s) in plan.stages.iter_mut().enumerate() {
            (s.domain, s.device) = (Domain::Cuda, Some(d as u32));
        }
        let (frame, depth) = (plan.links[0].layout.total_bytes, plan.links[0].depth as u64);
        let ring = frame.next_multiple_of(GPU_GRANULE) * depth;
        let private_output = plan.stages[1].output.as_ref().map_or(0, |o| o.layout.total_bytes);
        // The ring on cuda:0; grade copies each frame into cuda:1 first.
        plan.links[0].memory =
            LinkMemory::Device { transport: Transport::Vmm, device: 0, peers: vec![1], pushed: false };
        assert_eq!(needs(&plan).gpu, BTreeMap::from([(0, ring), (1, frame * depth + private_output)]));
        // Pushed: the ring on cuda:1, gen's frames made on cuda:0 first.
        plan.links[0].memory =
            LinkMemory::Device { transport: Transport::Vmm, device: 1, peers: vec![0], pushed: true };
        assert_eq!(needs(&plan).gpu, BTreeMap::from([(0, frame * depth), (1, ring + private_output)]));
    }

    #[test]
    fn a_plan_beyond_the_machine_is_refused_with_the_numbers() {
        let needs =
            Needs { host: 275 << 30, gpu: BTreeMap::from([(0, 10 << 30)]), largest: Some(("gen".into(), 275 << 30)) };
        let has = Has { host: Some((23 << 30, "MemAvailable")), gpu: BTreeMap::from([(0, 80 << 30)]) };
        let why = check(&needs, &has).unwrap_err();
        assert!(why.contains("needs 275.00 GiB of host memory"), "{why}");
        assert!(why.contains("23.00 GiB is available (MemAvailable)"), "{why}");
        assert!(why.contains("stage 'gen''s output ring takes 275.00 GiB; lower its `depth`"), "{why}");
        assert!(why.ends_with("or pass --no-budget-check"), "{why}");
        let gpu_heavy = Needs { host: 1 << 20, gpu: BTreeMap::from([(0, 90 << 30)]), largest: None };
        assert!(check(&gpu_heavy, &has).unwrap_err().contains("on cuda:0, which has 80.00 GiB"));
        let fits = Needs { host: 1 << 30, gpu: BTreeMap::from([(0, 1 << 30)]), largest: None };
        assert_eq!(check(&fits, &has), Ok(()));
    }
}
