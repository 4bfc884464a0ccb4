//! Deciding where each stage runs: cpu or a CUDA device.

use gpuipc_plugin_api::{Domain, abi};

use crate::config::{DeviceSpec, Transport};
use crate::plugin::PluginMeta;

use super::LinkMemory;

/// How many CUDA devices the driver sees, or why it sees none. Asked once per process; it
/// initialises the driver in the host, which creates no context.
fn cuda_device_count() -> Result<u32, String> {
    static COUNT: std::sync::OnceLock<Result<u32, String>> = std::sync::OnceLock::new();
    COUNT.get_or_init(|| crate::gpu::count_devices().map_err(|e| e.to_string())).clone()
}

/// Whether `auto` can pick cuda:0, or why not. Asks the driver only when the library loads.
fn usable_cuda() -> Result<(), String> {
    if std::env::var_os("GPUIPC_NO_CUDA").is_some() {
        return Err("CUDA is disabled by GPUIPC_NO_CUDA".into());
    }
    if !crate::gpu::driver_available() {
        return Err("no CUDA driver was found (libcuda.so.1 could not be loaded)".into());
    }
    match cuda_device_count() {
        Ok(0) => Err("the CUDA driver sees no device".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("the CUDA driver cannot be used: {e}")),
    }
}

/// The domain and device for a stage asking for `spec`, or why it cannot have it. The note
/// says what `auto` decided and why. A device that is only the pipeline's default (`explicit`
/// false) yields to a plugin without a cuda implementation, which then runs on the cpu.
pub fn resolve_domain(
    spec: DeviceSpec,
    plugin: &PluginMeta,
    explicit: bool,
) -> Result<(Domain, Option<u32>, Option<String>), String> {
    let supports_cuda = plugin.supports(abi::DOMAIN_CUDA);
    let supports_cpu = plugin.supports(abi::DOMAIN_CPU);
    match spec {
        DeviceSpec::Cuda(n) if !explicit && !supports_cuda && supports_cpu => Ok((
            Domain::Cpu,
            None,
            Some(format!("pipeline default cuda:{n}, but the plugin has no cuda implementation")),
        )),
        DeviceSpec::Cpu if supports_cpu => Ok((Domain::Cpu, None, None)),
        DeviceSpec::Cpu => Err(format!("plugin `{}` has no cpu implementation", plugin.name)),
        DeviceSpec::Cuda(n) if !supports_cuda => {
            Err(format!("device cuda:{n} requested, but plugin `{}` has no cuda implementation", plugin.name))
        }
        DeviceSpec::Cuda(n) if !crate::gpu::driver_available() => Err(format!(
            "device cuda:{n} requested, but no CUDA driver was found (libcuda.so.1 could not be loaded); use device = \"cpu\" or \"auto\""
        )),
        DeviceSpec::Cuda(n) => match cuda_device_count() {
            Ok(count) if n < count => Ok((Domain::Cuda, Some(n), None)),
            Ok(0) => Err(format!("device cuda:{n} requested, but the CUDA driver sees no device")),
            Ok(1) => Err(format!("device cuda:{n} requested, but the CUDA driver sees 1 device (cuda:0)")),
            Ok(count) => Err(format!(
                "device cuda:{n} requested, but the CUDA driver sees {count} devices (cuda:0 to cuda:{})",
                count - 1
            )),
            Err(e) => Err(format!("device cuda:{n} requested, but the CUDA driver cannot be used: {e}")),
        },
        DeviceSpec::Auto => {
            // Without a usable driver that is the reason for every stage, cuda plugin or not.
            let cuda =
                usable_cuda().and_then(|()| if supports_cuda { Ok(()) } else { Err(AUTO_NO_CUDA_PLUGIN.to_owned()) });
            match cuda {
                Ok(()) => Ok((Domain::Cuda, Some(0), None)),
                Err(why) if supports_cpu => Ok((Domain::Cpu, None, Some(format!("device auto: {why}")))),
                Err(why) => Err(format!("plugin `{}` runs only on cuda, and {why}", plugin.name)),
            }
        }
    }
}

/// The note `auto` leaves on a stage whose plugin has no cuda implementation.
const AUTO_NO_CUDA_PLUGIN: &str = "plugin has no cuda implementation";

impl super::Plan {
    /// One line per reason why stages of this machine run in the cpu domain though the file
    /// did not ask for it (`auto` without a usable CUDA driver, or a plugin without a cuda
    /// implementation), for `run` to log: the plan shows it at validate, a run must say it too.
    pub fn cpu_fallbacks(&self) -> Vec<String> {
        let stages: Vec<(&str, Option<&str>)> = self
            .stages
            .iter()
            .filter(|s| s.host.is_none())
            .map(|s| (s.name.as_str(), s.domain_note.as_deref()))
            .collect();
        cpu_fallbacks(&stages)
    }
}

/// [`super::Plan::cpu_fallbacks`] of stages given as (name, domain note).
fn cpu_fallbacks(stages: &[(&str, Option<&str>)]) -> Vec<String> {
    let mut notes: Vec<&str> = stages.iter().filter_map(|&(_, n)| n).collect();
    notes.sort_unstable();
    notes.dedup();
    notes
        .into_iter()
        .map(|note| {
            let names: Vec<String> =
                stages.iter().filter(|&&(_, n)| n == Some(note)).map(|(name, _)| format!("'{name}'")).collect();
            let who = if names.len() == stages.len() {
                "every stage runs".to_owned()
            } else if names.len() == 1 {
                format!("stage {} runs", names[0])
            } else {
                format!("stages {} run", names.join(", "))
            };
            match note.strip_prefix("device auto: ") {
                Some(AUTO_NO_CUDA_PLUGIN) => {
                    format!("device \"auto\": {who} in the cpu domain: no cuda implementation in the plugin")
                }
                Some(why) => format!("device \"auto\": {why}, so {who} in the cpu domain"),
                None => format!("{who} in the cpu domain: {note}"),
            }
        })
        .collect()
}

/// The domain and device of a stage on another host (`host`): as asked, without this
/// machine's driver (that host's agent checks its devices when the run starts); `auto`,
/// which only a driver can decide, is refused.
pub fn remote_domain(
    spec: DeviceSpec,
    plugin: &PluginMeta,
    host: &str,
) -> Result<(Domain, Option<u32>, Option<String>), String> {
    match spec {
        DeviceSpec::Cpu if plugin.supports(abi::DOMAIN_CPU) => Ok((Domain::Cpu, None, None)),
        DeviceSpec::Cpu => Err(format!("plugin `{}` has no cpu implementation", plugin.name)),
        DeviceSpec::Cuda(n) if plugin.supports(abi::DOMAIN_CUDA) => Ok((Domain::Cuda, Some(n), None)),
        DeviceSpec::Cuda(n) => {
            Err(format!("device cuda:{n} requested, but plugin `{}` has no cuda implementation", plugin.name))
        }
        DeviceSpec::Auto => Err(format!(
            "it runs on host `{host}`, whose devices this machine cannot ask; give it device = \"cpu\" or \"cuda:N\""
        )),
    }
}

/// What the planner asks the CUDA driver about devices (a trait, so tests can answer).
pub trait DeviceFacts {
    /// Whether device `a` can read and write memory on device `b`.
    fn peer_access(&self, a: u32, b: u32) -> bool;
    /// Whether the device shares VMM memory as POSIX fds (else: legacy IPC handles).
    fn vmm_fd(&self, device: u32) -> bool;
}

/// The driver's answers. Initialises the driver in the host (no context); an error counts as
/// "no", and the stage that needs the device reports it.
pub struct Driver;

impl DeviceFacts for Driver {
    fn peer_access(&self, a: u32, b: u32) -> bool {
        crate::gpu::can_access_peer(a, b).unwrap_or_else(|e| {
            tracing::debug!("peer access cuda:{a} -> cuda:{b}: {e}");
            false
        })
    }

    fn vmm_fd(&self, device: u32) -> bool {
        crate::gpu::vmm_fd_supported(device).unwrap_or_else(|e| {
            tracing::debug!("VMM fd support of cuda:{device}: {e}");
            false
        })
    }
}

/// Where a link's frames live, given its producer's and consumers' (domain, device), one per
/// device their processes run on (replicas spread over GPUs give several):
/// host memory when every end is cpu; GPU memory shared between processes when every end is
/// cuda and every consumer's device can read every producer's (the same device, or peer
/// access); otherwise host memory with copies on the cuda ends. `transport = "auto"` becomes
/// VMM fds when every device on the link supports them, else legacy IPC handles. `device` is
/// the (first) producer's, `peers` every other device on the link; except where `push` and
/// every producer is on one GPU and every consumer on one other it reaches, with VMM memory:
/// then the ring is on the consumers' GPU, `pushed` into by the producer's copy engines.
pub fn link_memory(
    producers: &[(Domain, Option<u32>)],
    consumers: &[(Domain, Option<u32>)],
    transport: Transport,
    push: bool,
    facts: &dyn DeviceFacts,
) -> LinkMemory {
    let ends = || producers.iter().chain(consumers);
    if ends().all(|(d, _)| *d == Domain::Cpu) {
        return LinkMemory::Host;
    }
    if ends().any(|(d, _)| *d != Domain::Cuda) {
        return LinkMemory::HostStaged { no_peer: None };
    }
    let homes: Vec<u32> = producers.iter().map(|&(_, d)| d.unwrap_or(0)).collect();
    for &(_, device) in consumers {
        let device = device.unwrap_or(0);
        if let Some(&home) = homes.iter().find(|&&home| home != device && !facts.peer_access(device, home)) {
            return LinkMemory::HostStaged { no_peer: Some((device, home)) };
        }
    }
    let home = homes[0];
    let mut peers = Vec::new();
    for device in homes.iter().copied().chain(consumers.iter().map(|&(_, d)| d.unwrap_or(0))) {
        if device != home && !peers.contains(&device) {
            peers.push(device);
        }
    }
    let transport = match transport {
        Transport::Auto if std::iter::once(&home).chain(&peers).all(|&d| facts.vmm_fd(d)) => Transport::Vmm,
        Transport::Auto => Transport::Legacy,
        chosen => chosen,
    };
    // Every producer on one GPU, every consumer on one other that it reaches, VMM memory
    // (which a process can make on another GPU than its own): the ring lives on the
    // consumers' GPU and the producer pushes its frames there (`push`: frames of `peer_push_min_bytes` or more).
    let theirs = consumers.first().map(|&(_, d)| d.unwrap_or(0));
    if let Some(theirs) = theirs
        && push
        && transport == Transport::Vmm
        && theirs != home
        && homes.iter().all(|&h| h == home)
        && consumers.iter().all(|&(_, d)| d.unwrap_or(0) == theirs)
        && facts.peer_access(home, theirs)
    {
        return LinkMemory::Device { transport, device: theirs, peers: vec![home], pushed: true };
    }
    LinkMemory::Device { transport, device: home, peers, pushed: false }
}

/// Why a GPU link cannot use the transport its producer asked for, if it cannot: `vmm` needs
/// VMM fd support on every device that maps the memory. (`auto` was decided from the same
/// facts; `legacy` needs nothing more than the driver checks at stage start.)
pub fn transport_problem(link: &super::LinkPlan, facts: &dyn DeviceFacts) -> Option<String> {
    let LinkMemory::Device { transport: Transport::Vmm, device, peers, .. } = &link.memory else { return None };
    let lacking: Vec<String> =
        std::iter::once(device).chain(peers).filter(|&&d| !facts.vmm_fd(d)).map(|d| format!("cuda:{d}")).collect();
    (!lacking.is_empty()).then(|| {
        format!(
            "transport = \"vmm\", but {} cannot share VMM memory as file descriptors; use \"auto\" or \"legacy\"",
            lacking.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: (Domain, Option<u32>) = (Domain::Cpu, None);
    const fn cuda(n: u32) -> (Domain, Option<u32>) {
        (Domain::Cuda, Some(n))
    }
    /// Devices that reach each other where `peer` says so, with VMM fd support where `vmm` does.
    struct Facts {
        peer: fn(u32, u32) -> bool,
        vmm: fn(u32) -> bool,
    }
    impl DeviceFacts for Facts {
        fn peer_access(&self, a: u32, b: u32) -> bool {
            (self.peer)(a, b)
        }
        fn vmm_fd(&self, device: u32) -> bool {
            (self.vmm)(device)
        }
    }
    const NO_PEERS: Facts = Facts { peer: |_, _| false, vmm: |_| true };
    const ALL_PEERS: Facts = Facts { peer: |_, _| true, vmm: |_| true };

    #[test]
    fn a_run_says_why_stages_fell_back_to_the_cpu() {
        let no_driver = Some("device auto: CUDA is disabled by GPUIPC_NO_CUDA");
        assert_eq!(
            cpu_fallbacks(&[("gen", no_driver), ("yuv", no_driver)]),
            ["device \"auto\": CUDA is disabled by GPUIPC_NO_CUDA, so every stage runs in the cpu domain"]
        );
        // A stage that asked for the cpu is not said to have fallen back.
        assert_eq!(
            cpu_fallbacks(&[("gen", no_driver), ("grade", no_driver), ("sink", None)]),
            ["device \"auto\": CUDA is disabled by GPUIPC_NO_CUDA, so stages 'gen', 'grade' run in the cpu domain"]
        );
        let default = Some("pipeline default cuda:0, but the plugin has no cuda implementation");
        assert_eq!(
            cpu_fallbacks(&[
                ("gen", None),
                ("py", Some("device auto: plugin has no cuda implementation")),
                ("sink", default)
            ]),
            [
                "device \"auto\": stage 'py' runs in the cpu domain: no cuda implementation in the plugin",
                "stage 'sink' runs in the cpu domain: pipeline default cuda:0, but the plugin has no cuda implementation",
            ]
        );
        assert!(cpu_fallbacks(&[("gen", None)]).is_empty());
    }

    #[test]
    fn cpu_ends_share_host_memory() {
        assert_eq!(link_memory(&[CPU], &[CPU, CPU], Transport::Auto, true, &ALL_PEERS), LinkMemory::Host);
    }

    #[test]
    fn a_cpu_end_on_a_gpu_link_means_staging() {
        let staged = LinkMemory::HostStaged { no_peer: None };
        assert_eq!(link_memory(&[cuda(0)], &[cuda(0), CPU], Transport::Auto, true, &ALL_PEERS), staged);
        assert_eq!(link_memory(&[CPU], &[cuda(0)], Transport::Auto, true, &ALL_PEERS), staged);
    }

    #[test]
    fn one_gpu_shares_device_memory() {
        assert_eq!(
            link_memory(&[cuda(1)], &[cuda(1), cuda(1)], Transport::Legacy, true, &NO_PEERS),
            LinkMemory::Device { transport: Transport::Legacy, device: 1, peers: vec![], pushed: false }
        );
    }

    #[test]
    fn two_gpus_use_peer_access_only_where_the_driver_allows_it() {
        assert_eq!(
            link_memory(&[cuda(0)], &[cuda(1), cuda(0), cuda(1)], Transport::Auto, false, &ALL_PEERS),
            LinkMemory::Device { transport: Transport::Vmm, device: 0, peers: vec![1], pushed: false }
        );
        assert_eq!(
            link_memory(&[cuda(0)], &[cuda(0), cuda(1)], Transport::Auto, true, &NO_PEERS),
            LinkMemory::HostStaged { no_peer: Some((1, 0)) }
        );
        // The direction matters: the consumer's device reads the producer's.
        let only_1_reads_0 = Facts { peer: |a, b| (a, b) == (1, 0), vmm: |_| true };
        assert!(matches!(
            link_memory(&[cuda(0)], &[cuda(1)], Transport::Auto, true, &only_1_reads_0),
            LinkMemory::Device { .. }
        ));
        assert_eq!(
            link_memory(&[cuda(1)], &[cuda(0)], Transport::Auto, true, &only_1_reads_0),
            LinkMemory::HostStaged { no_peer: Some((0, 1)) }
        );
    }

    #[test]
    fn a_ring_whose_consumers_are_all_on_one_other_gpu_lives_there_and_is_pushed_into() {
        let pushed =
            |device, from| LinkMemory::Device { transport: Transport::Vmm, device, peers: vec![from], pushed: true };
        assert_eq!(link_memory(&[cuda(0)], &[cuda(1)], Transport::Auto, true, &ALL_PEERS), pushed(1, 0));
        assert_eq!(link_memory(&[cuda(1)], &[cuda(0), cuda(0)], Transport::Vmm, true, &ALL_PEERS), pushed(0, 1));
        // Not asked for (frames under peer_push_min_bytes): on the producer's GPU.
        assert_eq!(
            link_memory(&[cuda(0)], &[cuda(1)], Transport::Auto, false, &ALL_PEERS),
            LinkMemory::Device { transport: Transport::Vmm, device: 0, peers: vec![1], pushed: false }
        );
        let not_pushed = |m: LinkMemory| matches!(m, LinkMemory::Device { device: 0, pushed: false, .. });
        // Consumers on two GPUs, producers on two, legacy memory, or no way from the
        // producer's GPU to the consumers': not pushed.
        assert!(not_pushed(link_memory(&[cuda(0)], &[cuda(1), cuda(2)], Transport::Auto, true, &ALL_PEERS)));
        assert!(not_pushed(link_memory(&[cuda(0), cuda(1)], &[cuda(1)], Transport::Auto, true, &ALL_PEERS)));
        assert!(not_pushed(link_memory(&[cuda(0)], &[cuda(1)], Transport::Legacy, true, &ALL_PEERS)));
        let only_1_reads_0 = Facts { peer: |a, b| (a, b) == (1, 0), vmm: |_| true };
        assert!(not_pushed(link_memory(&[cuda(0)], &[cuda(1)], Transport::Auto, true, &only_1_reads_0)));
    }

    #[test]
    fn replicas_spread_over_gpus_share_device_memory_only_where_every_consumer_reaches_every_part() {
        // A producer stage's replicas on cuda:0 and cuda:1, its consumer on cuda:1.
        assert_eq!(
            link_memory(&[cuda(0), cuda(1)], &[cuda(1)], Transport::Auto, true, &ALL_PEERS),
            LinkMemory::Device { transport: Transport::Vmm, device: 0, peers: vec![1], pushed: false }
        );
        let only_1_reads_0 = Facts { peer: |a, b| (a, b) == (1, 0), vmm: |_| true };
        assert!(matches!(
            link_memory(&[cuda(0), cuda(1)], &[cuda(1)], Transport::Auto, true, &only_1_reads_0),
            LinkMemory::Device { .. }
        ));
        // A consumer on cuda:0 cannot read the part on cuda:1.
        assert_eq!(
            link_memory(&[cuda(0), cuda(1)], &[cuda(0)], Transport::Auto, true, &only_1_reads_0),
            LinkMemory::HostStaged { no_peer: Some((0, 1)) }
        );
        // Consumer replicas spread the same way: each of their devices must reach the part.
        assert_eq!(
            link_memory(&[cuda(0)], &[cuda(0), cuda(2)], Transport::Auto, true, &NO_PEERS),
            LinkMemory::HostStaged { no_peer: Some((2, 0)) }
        );
    }

    #[test]
    fn an_explicit_vmm_transport_needs_it_on_every_device() {
        use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 4);
        let link = |transport, peers| super::super::LinkPlan {
            producer: 0,
            consumers: vec![1],
            policies: vec![crate::config::Policy::Block],
            format,
            layout: FrameLayout::for_format(format).unwrap(),
            depth: 4,
            memory: LinkMemory::Device { transport, device: 0, peers, pushed: false },
        };
        let vmm_on_0 = Facts { peer: |_, _| true, vmm: |d| d == 0 };
        assert_eq!(transport_problem(&link(Transport::Vmm, vec![]), &vmm_on_0), None);
        assert_eq!(transport_problem(&link(Transport::Legacy, vec![1]), &vmm_on_0), None);
        let why = transport_problem(&link(Transport::Vmm, vec![1]), &vmm_on_0).expect("cuda:1 has no VMM fds");
        assert_eq!(
            why,
            "transport = \"vmm\", but cuda:1 cannot share VMM memory as file descriptors; use \"auto\" or \"legacy\""
        );
    }

    #[test]
    fn auto_transport_is_vmm_only_where_every_device_on_the_link_has_it() {
        let vmm_on_0 = Facts { peer: |_, _| true, vmm: |d| d == 0 };
        let device = |t| LinkMemory::Device { transport: t, device: 0, peers: vec![], pushed: false };
        assert_eq!(link_memory(&[cuda(0)], &[cuda(0)], Transport::Auto, true, &vmm_on_0), device(Transport::Vmm));
        assert_eq!(link_memory(&[cuda(0)], &[cuda(0)], Transport::Legacy, true, &vmm_on_0), device(Transport::Legacy));
        assert_eq!(
            link_memory(&[cuda(0)], &[cuda(1)], Transport::Auto, true, &vmm_on_0),
            LinkMemory::Device { transport: Transport::Legacy, device: 0, peers: vec![1], pushed: false }
        );
    }
}
