//! For tests that need NVRTC or a GPU: they skip (return early, saying why) where this machine
//! has neither, unless an environment variable says the machine must have it, which is how CI
//! (NVRTC) and the GPU check (both) make sure such tests really ran.

use std::sync::Arc;

use crate::context::Gpu;
use crate::library;

/// The environment variable that turns a missing GPU into a test failure.
pub const REQUIRE_GPU_ENV: &str = "GPUIPC_REQUIRE_GPU";
/// The environment variable that turns a missing NVRTC into a test failure.
pub const REQUIRE_NVRTC_ENV: &str = "GPUIPC_REQUIRE_NVRTC";

fn required(env: &str) -> bool {
    std::env::var(env).as_deref() == Ok("1")
}

/// `true` when NVRTC loads; `false` (skip) when it does not, unless `GPUIPC_REQUIRE_NVRTC=1`,
/// when a missing NVRTC panics, so CI cannot skip silently.
pub fn nvrtc_for_test() -> bool {
    match library::nvrtc() {
        Ok(()) => true,
        Err(e) if required(REQUIRE_NVRTC_ENV) => panic!("{REQUIRE_NVRTC_ENV}=1 but {e}"),
        Err(e) => {
            eprintln!("NVRTC test skipped: {e}");
            false
        }
    }
}

/// Device 0 opened (its context current on this thread), or `None` where there is no CUDA
/// driver or device, or the context cannot be made (printed). Panics instead of returning
/// `None` when `GPUIPC_REQUIRE_GPU=1`.
pub fn gpu_for_test() -> Option<Arc<Gpu>> {
    let why = match Gpu::open(0) {
        Ok(gpu) => return Some(Arc::new(gpu)),
        Err(e) if e.no_device() => format!("no CUDA device here: {e}"),
        Err(e) => e.to_string(),
    };
    if required(REQUIRE_GPU_ENV) {
        panic!("{REQUIRE_GPU_ENV}=1 but {why}");
    }
    eprintln!("GPU test skipped: {why}");
    None
}

/// The environment variable that turns a missing NCCL into a test failure.
pub const REQUIRE_NCCL_ENV: &str = "GPUIPC_REQUIRE_NCCL";

/// `true` when `libnccl.so.2` loads; `false` (skip, printed) when not, unless
/// `GPUIPC_REQUIRE_NCCL=1`, when a missing NCCL panics.
pub fn nccl_for_test() -> bool {
    match crate::nccl::nccl_version() {
        Ok(_) => true,
        Err(e) if required(REQUIRE_NCCL_ENV) => panic!("{REQUIRE_NCCL_ENV}=1 but {e}"),
        Err(e) => {
            eprintln!("NCCL test skipped: {e}");
            false
        }
    }
}
