//! Deciding where each stage runs: cpu or a CUDA device.

use gpuipc_plugin_api::{Domain, abi};

use crate::config::DeviceSpec;
use crate::plugin::PluginMeta;

/// Whether the CUDA driver library can be loaded. Loading it creates no context.
pub fn cuda_driver_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if std::env::var_os("GPUIPC_NO_CUDA").is_some() {
            return false;
        }
        #[allow(unsafe_code)]
        // SAFETY: libcuda's initialisers only register the library; no context is created
        // until cuInit and cuCtxCreate, which the host never calls.
        let lib = unsafe { libloading::Library::new("libcuda.so.1") };
        lib.is_ok()
    })
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
