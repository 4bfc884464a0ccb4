//! `test-no-entry`: a shared library that is not a gpuipc plugin.

/// Some unrelated exported function.
#[unsafe(no_mangle)]
pub extern "C" fn not_a_gpuipc_plugin() -> u32 {
    42
}
