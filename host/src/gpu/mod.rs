//! The CUDA driver as gpuipc uses it: small safe wrappers over cudarc's raw `driver::sys`
//! bindings (cudarc's own layering is raw → Result → safe; `driver.rs` is our Result layer,
//! the other files the safe one).
//!
//! - [`driver`]: is there a driver, which version, which devices and what they support;
//! - [`context`]: [`Gpu`], one device's primary context and the stage's one stream;
//! - [`memory`]: [`DeviceMemory`] (frame slots: VMM POSIX-fd or legacy IPC exports and their
//!   imports, private allocations) and [`PinnedHost`] (a host range registered for fast copies);
//! - [`event`]: [`IpcEvent`], an interprocess event (DisableTiming | Interprocess).
//!
//! cudarc is built with dynamic loading: calling any driver function when libcuda cannot be
//! loaded panics inside cudarc, so every entry point here first checks
//! [`driver_available`] and returns [`GpuError::NoDriver`] instead. Every object that needs
//! the context holds an `Arc<Gpu>`, so the context outlives everything created in it.
//!
//! `unsafe` is allowed only in this module's files; each block says why it holds.

mod context;
mod driver;
mod event;
mod memory;

pub use context::Gpu;
pub use driver::{
    ComputeMode, DeviceInfo, GpuError, built_for_cuda, can_access_peer, count_devices, devices, driver_available,
    driver_version, vmm_fd_supported,
};
pub use event::IpcEvent;
pub use memory::{DeviceMemory, MemoryKind, PinnedHost};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// On a machine without libcuda (CI, this one), every entry point answers with a clean
    /// error instead of cudarc's panic.
    #[test]
    fn every_entry_point_fails_cleanly_without_a_driver() {
        if driver_available() {
            eprintln!("a CUDA driver is present; the no-driver paths are not exercised here");
            return;
        }
        assert!(matches!(driver_version(), Err(GpuError::NoDriver)));
        assert!(matches!(devices(), Err(GpuError::NoDriver)));
        assert!(matches!(can_access_peer(0, 1), Err(GpuError::NoDriver)));
        assert!(matches!(count_devices(), Err(GpuError::NoDriver)));
        assert!(matches!(vmm_fd_supported(0), Err(GpuError::NoDriver)));
        let err = Gpu::open(0).expect_err("no driver, no Gpu");
        assert!(matches!(err, GpuError::NoDriver));
        assert!(err.to_string().contains("libcuda.so.1"), "{err}");
        // Nothing else can be reached without a `Gpu`; the type system closes the rest.
        let _: fn(&Arc<Gpu>, usize) -> Result<DeviceMemory, GpuError> = DeviceMemory::private;
    }

    #[test]
    fn availability_is_cached_and_stable() {
        assert_eq!(driver_available(), driver_available());
    }

    #[test]
    fn built_for_matches_the_cudarc_feature() {
        // host/Cargo.toml pins cudarc's `cuda-13000` feature.
        assert_eq!(built_for_cuda(), (13, 0));
    }
}
