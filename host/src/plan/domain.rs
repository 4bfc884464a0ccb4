//! Deciding where each stage runs: cpu or a CUDA device.

use gpuipc_plugin_api::{Domain, abi};

use crate::config::{DeviceSpec, Transport};
use crate::plugin::PluginMeta;

use super::LinkMemory;

/// Whether the CUDA driver library can be loaded. Loading it creates no context.
pub fn cuda_driver_available() -> bool {
    crate::gpu::driver_available()
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
        DeviceSpec::Cuda(n) if !explicit && !supports_cuda && supports_cpu => {
            Ok((Domain::Cpu, None, Some(format!("pipeline default cuda:{n}, but the plugin has no cuda implementation"))))
        }
        DeviceSpec::Cpu if supports_cpu => Ok((Domain::Cpu, None, None)),
        DeviceSpec::Cpu => Err(format!("plugin `{}` has no cpu implementation", plugin.name)),
        DeviceSpec::Cuda(n) if !supports_cuda => {
            Err(format!("device cuda:{n} requested, but plugin `{}` has no cuda implementation", plugin.name))
        }
        DeviceSpec::Cuda(n) if !cuda_driver_available() => Err(format!(
            "device cuda:{n} requested, but no CUDA driver was found (libcuda.so.1 could not be loaded); use device = \"cpu\" or \"auto\""
        )),
        DeviceSpec::Cuda(n) => Ok((Domain::Cuda, Some(n), None)),
        DeviceSpec::Auto if supports_cuda && cuda_driver_available() => Ok((Domain::Cuda, Some(0), None)),
        DeviceSpec::Auto if supports_cpu => {
            let why = if !supports_cuda { "plugin has no cuda implementation" } else { "no CUDA driver found" };
            Ok((Domain::Cpu, None, Some(format!("auto: cpu ({why})"))))
        }
        DeviceSpec::Auto => Err(format!(
            "plugin `{}` runs only on cuda, and no CUDA driver was found (libcuda.so.1 could not be loaded)",
            plugin.name
        )),
    }
}

/// Where a link's frames live, given its producer's and consumers' (domain, device):
/// host memory when every end is cpu; GPU memory shared between processes when every end is
/// cuda and every consumer's device can read the producer's (the same device, or peer access
/// as `peer(consumer, producer)` reports); otherwise host memory with copies on the cuda ends.
pub fn link_memory(
    producer: (Domain, Option<u32>),
    consumers: &[(Domain, Option<u32>)],
    transport: Transport,
    peer: &dyn Fn(u32, u32) -> bool,
) -> LinkMemory {
    let ends = || std::iter::once(&producer).chain(consumers);
    if ends().all(|(d, _)| *d == Domain::Cpu) {
        return LinkMemory::Host;
    }
    if ends().any(|(d, _)| *d != Domain::Cuda) {
        return LinkMemory::HostStaged;
    }
    let home = producer.1.unwrap_or(0);
    let mut peers = Vec::new();
    for &(_, device) in consumers {
        let device = device.unwrap_or(0);
        if device == home || peers.contains(&device) {
            continue;
        }
        if !peer(device, home) {
            return LinkMemory::HostStaged;
        }
        peers.push(device);
    }
    LinkMemory::Device { transport, device: home, peers }
}

/// Whether the driver says device `a` can read and write memory on device `b`. Initialises
/// the driver (no context); any error counts as no.
pub fn driver_peer_access(a: u32, b: u32) -> bool {
    match crate::gpu::can_access_peer(a, b) {
        Ok(can) => can,
        Err(e) => {
            tracing::debug!("peer access cuda:{a} -> cuda:{b}: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPU: (Domain, Option<u32>) = (Domain::Cpu, None);
    const fn cuda(n: u32) -> (Domain, Option<u32>) {
        (Domain::Cuda, Some(n))
    }
    fn no_peers(_: u32, _: u32) -> bool {
        false
    }
    fn all_peers(_: u32, _: u32) -> bool {
        true
    }

    #[test]
    fn cpu_ends_share_host_memory() {
        assert_eq!(link_memory(CPU, &[CPU, CPU], Transport::Auto, &all_peers), LinkMemory::Host);
    }

    #[test]
    fn a_cpu_end_on_a_gpu_link_means_staging() {
        assert_eq!(link_memory(cuda(0), &[cuda(0), CPU], Transport::Auto, &all_peers), LinkMemory::HostStaged);
        assert_eq!(link_memory(CPU, &[cuda(0)], Transport::Auto, &all_peers), LinkMemory::HostStaged);
    }

    #[test]
    fn one_gpu_shares_device_memory() {
        assert_eq!(
            link_memory(cuda(1), &[cuda(1), cuda(1)], Transport::Legacy, &no_peers),
            LinkMemory::Device { transport: Transport::Legacy, device: 1, peers: vec![] }
        );
    }

    #[test]
    fn two_gpus_use_peer_access_only_where_the_driver_allows_it() {
        assert_eq!(
            link_memory(cuda(0), &[cuda(1), cuda(0), cuda(1)], Transport::Auto, &all_peers),
            LinkMemory::Device { transport: Transport::Auto, device: 0, peers: vec![1] }
        );
        assert_eq!(link_memory(cuda(0), &[cuda(1)], Transport::Auto, &no_peers), LinkMemory::HostStaged);
        // The direction matters: the consumer's device reads the producer's.
        let only_1_reads_0 = |a: u32, b: u32| (a, b) == (1, 0);
        assert!(matches!(link_memory(cuda(0), &[cuda(1)], Transport::Auto, &only_1_reads_0), LinkMemory::Device { .. }));
        assert_eq!(link_memory(cuda(1), &[cuda(0)], Transport::Auto, &only_1_reads_0), LinkMemory::HostStaged);
    }
}
