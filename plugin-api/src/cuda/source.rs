//! [`KernelSource`] and [`kernel_source!`](crate::kernel_source): a plugin's kernel file built
//! into its library, and its entry points loaded in one call.

use super::{CudaError, Kernel, Kernels, Target};

/// A kernel source file built into the plugin (with `include_str!`, by
/// [`kernel_source!`](crate::kernel_source)) and the name NVRTC's messages and the kernel
/// cache know it by.
///
/// ```ignore
/// use gpuipc_plugin_api::cuda::{Kernel, KernelSource};
///
/// /// `src/sepia.cu`, compiled with NVRTC when a cuda stage starts.
/// const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("src", "sepia.cu");
///
/// // In `Plugin::create`, in the cuda domain:
/// let [sepia] = SOURCE.load(ctx, ["sepia"])?;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSource {
    /// The file's name in messages and the cache (`kernels/generator.cu`).
    pub file_name: &'static str,
    /// Its CUDA C text.
    pub source: &'static str,
}

impl KernelSource {
    /// Compile the file for the stage's device (or take it from the kernel cache), load it
    /// into the stage's context and return its `entry_points`, in order, each ready to launch
    /// on the stage's stream: [`Kernels::load`] and [`Kernels::get`] in one call.
    pub fn load<const N: usize>(&self, on: &impl Target, entry_points: [&str; N]) -> Result<[Kernel; N], CudaError> {
        let kernels = Kernels::load(on, self.file_name, self.source, &entry_points)?;
        let loaded: Vec<Kernel> = kernels.kernels().to_vec();
        Ok(loaded.try_into().expect("Kernels::load looks up one kernel per entry point, in order"))
    }
}

/// A [`KernelSource`](crate::cuda::KernelSource) built into the plugin:
/// `kernel_source!(dir, file_name)` is the text of the file `file_name` in the folder `dir`
/// (relative to the plugin's `Cargo.toml`), named `file_name` in NVRTC's messages and the kernel
/// cache.
///
/// ```ignore
/// // A plugin in gpuipc's repository: plugins/generator reads kernels/generator.cu.
/// const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("../..", "kernels/generator.cu");
/// // A plugin of its own (the template): src/sepia.cu, next to its Rust.
/// const SOURCE: KernelSource = gpuipc_plugin_api::kernel_source!("src", "sepia.cu");
/// ```
#[macro_export]
macro_rules! kernel_source {
    ($dir:literal, $file_name:literal) => {
        $crate::cuda::KernelSource {
            file_name: $file_name,
            source: ::core::include_str!(::core::concat!(
                ::core::env!("CARGO_MANIFEST_DIR"),
                "/",
                $dir,
                "/",
                $file_name
            )),
        }
    };
}
