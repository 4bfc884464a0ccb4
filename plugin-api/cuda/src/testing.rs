//! For tests that need NVRTC or a GPU: they skip (return early, saying why) where this machine
//! has neither, unless an environment variable says the machine must have it, which is how CI
//! (NVRTC) and the GPU check (both) make sure such tests really ran.
//!
//! cargo test counts a skipped test as passed, so each skip says so: `skipped <test>: <why>` on
//! standard error (shown by `cargo test -- --nocapture`), and a line in the file named by
//! `GPUIPC_SKIP_LOG`, which `scripts/test.sh` sets and sums up at its end.

use std::io::Write;
use std::sync::Arc;

use crate::context::Gpu;
use crate::library;

/// The environment variable that turns a missing GPU into a test failure.
pub const REQUIRE_GPU_ENV: &str = "GPUIPC_REQUIRE_GPU";
/// The environment variable that turns a missing NVRTC into a test failure.
pub const REQUIRE_NVRTC_ENV: &str = "GPUIPC_REQUIRE_NVRTC";

/// The environment variable naming a file that each skipped test appends a line to:
/// `<why>\t<test>`.
pub const SKIP_LOG_ENV: &str = "GPUIPC_SKIP_LOG";

fn required(env: &str) -> bool {
    std::env::var(env).as_deref() == Ok("1")
}

/// The running test's name: libtest runs each test on a thread named after it (`tests::gpu_x`),
/// prefixed with the test binary's crate (`gpuipc_cuda::tests::gpu_x`).
fn test_name() -> String {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("(a test's helper thread)");
    let binary = std::env::current_exe().ok().and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()));
    // Cargo names test binaries `<crate>-<16 hex digits>`.
    let krate = binary.map(|b| match b.rsplit_once('-') {
        Some((krate, hash)) if hash.len() == 16 && hash.bytes().all(|c| c.is_ascii_hexdigit()) => krate.to_owned(),
        _ => b,
    });
    match krate {
        Some(krate) => format!("{krate}::{test}"),
        None => test.to_owned(),
    }
}

/// Say that the running test is skipped, and why: `skipped <test>: <why>` on standard error,
/// and a line appended to the file `GPUIPC_SKIP_LOG` names, if it does. For a test's own skip
/// conditions too (a missing NVDEC, say), so that every skip is counted the same way.
pub fn skip_test(why: &str) {
    let test = test_name();
    let why = why.replace(['\n', '\t'], " ");
    eprintln!("skipped {test}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG_ENV) {
        // One write of the whole line to a file opened for appending: tests running at once
        // in several threads or processes do not interleave their lines.
        let line = format!("{why}\t{test}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot append to {} ({SKIP_LOG_ENV}): {e}", std::path::Path::new(&path).display());
        }
    }
}

/// `true` when NVRTC loads; `false` (skip) when it does not, unless `GPUIPC_REQUIRE_NVRTC=1`,
/// when a missing NVRTC panics, so CI cannot skip silently.
pub fn nvrtc_for_test() -> bool {
    match library::nvrtc() {
        Ok(()) => true,
        Err(e) if required(REQUIRE_NVRTC_ENV) => panic!("{REQUIRE_NVRTC_ENV}=1 but {e}"),
        Err(e) => {
            skip_test(&format!("needs NVRTC: {e} ({REQUIRE_NVRTC_ENV}=1 makes this a failure)"));
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
    skip_test(&format!("needs a GPU: {why} ({REQUIRE_GPU_ENV}=1 makes this a failure)"));
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
            skip_test(&format!("needs NCCL: {e} ({REQUIRE_NCCL_ENV}=1 makes this a failure)"));
            false
        }
    }
}
