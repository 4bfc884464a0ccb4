//! `test-no-entry`: a shared library that is not a gpuipc plugin.
// It exports a function by hand, as no plugin would.
#![allow(unsafe_code)]

/// Some unrelated exported function.
#[unsafe(no_mangle)]
pub extern "C" fn not_a_gpuipc_plugin() -> u32 {
    42
}
