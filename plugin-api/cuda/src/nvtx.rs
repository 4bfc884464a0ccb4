//! NVTX ranges, so an Nsight Systems capture shows which stage did what for which frame.
//!
//! Off unless asked for ([`enabled_by`]: `GPUIPC_NVTX=1`, read by the stage): a stage that
//! does not ask never loads the library, and its frame loop pays one branch a frame. Asked
//! for, [`Nvtx::load`] opens NVTX's library itself, as `nccl.rs` opens NCCL's, by the names of
//! [`LIBRARIES`], and looks up the three functions it calls: a missing library or function is
//! [`CudaError::NoNvtx`] (the stage says so and runs without ranges), never a panic. CUDA 13
//! ships no `libnvToolsExt` (NVTX 3 is headers only) but `libnvtx3interop.so.1`, which keeps
//! NVTX 2's C functions for programs built against them (seen on an H100 machine with CUDA
//! 13.0: `nvtxRangePushA`, `nvtxRangePop` and `nvtxNameOsThreadA` among its symbols). Without
//! a tool attached (no `nsys`), NVTX's own calls return at once.
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int};
use std::marker::PhantomData;
use std::sync::OnceLock;

use crate::error::CudaError;

/// The names NVTX's library goes by, tried in this order: NVTX 2's (CUDA toolkits up to 12,
/// the PyPI package nvidia-nvtx-cu12), then CUDA 13's interop library.
pub const LIBRARIES: [&str; 4] =
    ["libnvToolsExt.so.1", "libnvToolsExt.so", "libnvtx3interop.so.1", "libnvtx3interop.so"];

/// Whether the value of `GPUIPC_NVTX` turns ranges on: set, not empty and not `0`.
pub fn enabled_by(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// The name of a stage's range for one frame: `<stage> frame <seq>`.
pub fn frame_range_name(stage: &str, seq: u64) -> String {
    format!("{stage} frame {seq}")
}

/// The three functions of NVTX's C API a stage calls (nvToolsExt.h), and the library that
/// holds them, kept open for the life of the process.
struct Api {
    _lib: libloading::Library,
    range_push: unsafe extern "C" fn(*const c_char) -> c_int,
    range_pop: unsafe extern "C" fn() -> c_int,
    name_os_thread: unsafe extern "C" fn(u32, *const c_char),
}

fn api() -> Result<&'static Api, CudaError> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| LIBRARIES.iter().find_map(|name| open(name))).as_ref().ok_or(CudaError::NoNvtx)
}

/// NVTX's functions in library `name`, if it opens and has all three.
fn open(name: &str) -> Option<Api> {
    // SAFETY: opening a shared library runs its initialisers: NVTX's own, which set up no
    // more than its function table.
    let lib = unsafe { libloading::Library::new(name) }.ok()?;
    // SAFETY: each symbol's type is its C declaration in nvToolsExt.h; the pointers are used
    // only while `lib`, kept beside them, stays open.
    unsafe {
        let range_push = *lib.get::<unsafe extern "C" fn(*const c_char) -> c_int>(b"nvtxRangePushA\0").ok()?;
        let range_pop = *lib.get::<unsafe extern "C" fn() -> c_int>(b"nvtxRangePop\0").ok()?;
        let name_os_thread = *lib.get::<unsafe extern "C" fn(u32, *const c_char)>(b"nvtxNameOsThreadA\0").ok()?;
        Some(Api { _lib: lib, range_push, range_pop, name_os_thread })
    }
}

/// NVTX, loaded and checked: ranges and thread names can be made.
#[derive(Clone, Copy)]
pub struct Nvtx {
    api: &'static Api,
}

impl std::fmt::Debug for Nvtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nvtx")
    }
}

impl Nvtx {
    /// Load NVTX, or say why it cannot be.
    pub fn load() -> Result<Nvtx, CudaError> {
        Ok(Nvtx { api: api()? })
    }

    /// Name the calling OS thread in captures (`gpuipc stage grade`).
    pub fn name_this_thread(&self, name: &str) {
        let Ok(name) = CString::new(name) else { return };
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        // SAFETY: a function `load` found; the name is a NUL-terminated string that outlives
        // the call (NVTX copies it).
        unsafe { (self.api.name_os_thread)(tid, name.as_ptr()) }
    }

    /// A range on the calling thread named `name`, until the returned guard is dropped (on the
    /// same thread: it is neither `Send` nor `Sync`, as NVTX's push and pop are per thread).
    pub fn range(&self, name: &str) -> Range {
        // A name with a NUL byte (none of ours has one) is cut there.
        let name = CString::new(name).unwrap_or_else(|e| {
            let end = e.nul_position();
            CString::new(&e.into_vec()[..end]).expect("no NUL before the first one")
        });
        // SAFETY: as in `name_this_thread`.
        unsafe { (self.api.range_push)(name.as_ptr()) };
        Range { pop: self.api.range_pop, _thread: PhantomData }
    }
}

/// A pushed range; dropping it pops it.
pub struct Range {
    pop: unsafe extern "C" fn() -> c_int,
    _thread: PhantomData<*const ()>,
}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NvtxRange")
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: a function `Nvtx::load` found (its library stays open for the process);
        // pops the range its own thread pushed (a `Range` cannot be sent to another).
        unsafe { (self.pop)() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_switch_is_on_only_for_a_value_other_than_0() {
        assert!(!enabled_by(None));
        assert!(!enabled_by(Some(OsStr::new(""))));
        assert!(!enabled_by(Some(OsStr::new("0"))));
        assert!(enabled_by(Some(OsStr::new("1"))));
        assert!(enabled_by(Some(OsStr::new("yes"))));
    }

    #[test]
    fn a_frames_range_names_its_stage_and_frame() {
        assert_eq!(frame_range_name("grade", 0), "grade frame 0");
        assert_eq!(frame_range_name("yuv#2", 1234), "yuv#2 frame 1234");
    }

    /// The folder holding NVTX's library for [`ranges_reach_a_tool_attached_as_nsight_is`]
    /// (CI: the PyPI package nvidia-nvtx-cu12's), put on the child's `LD_LIBRARY_PATH`.
    const NVTX_DIR_ENV: &str = "GPUIPC_NVTX_DIR";
    /// Set to 1, a missing NVTX library or recorder fails that test rather than skipping it.
    const REQUIRE_NVTX_ENV: &str = "GPUIPC_REQUIRE_NVTX";

    /// A stage's ranges reach a tool attached the way Nsight Systems attaches (NVTX loads the
    /// library `NVTX_INJECTION64_PATH` names, here plugin-api/cuda/nvtx-recorder, which writes
    /// each call to a file): run in a child process, since NVTX reads its environment once.
    #[test]
    fn ranges_reach_a_tool_attached_as_nsight_is() {
        let exe = std::env::current_exe().expect("the test binary's path");
        // target/<profile>/deps/<test binary> -> target/<profile>/, where the workspace's build
        // puts the recorder.
        let recorder = exe.parent().and_then(|deps| deps.parent()).map(|p| p.join("libnvtx_recorder.so"));
        let nvtx_dir = std::env::var_os(NVTX_DIR_ENV);
        let missing = match (&recorder, &nvtx_dir) {
            (Some(r), _) if !r.exists() => Some(format!("no recorder at {} (cargo build --workspace)", r.display())),
            (None, _) => Some("no recorder beside the test binary".to_owned()),
            (_, None) if Nvtx::load().is_err() => Some(format!("no NVTX library here and no {NVTX_DIR_ENV}")),
            _ => None,
        };
        if let Some(why) = missing {
            if std::env::var(REQUIRE_NVTX_ENV).as_deref() == Ok("1") {
                panic!("{REQUIRE_NVTX_ENV}=1 but {why}");
            }
            crate::testing::skip_test(&format!("{why} ({REQUIRE_NVTX_ENV}=1 makes this a failure)"));
            return;
        }
        let record = tempfile::tempdir().expect("a temporary folder");
        let mut child = std::process::Command::new(&exe);
        child
            .args(["--exact", "nvtx::tests::push_ranges_for_the_recorder", "--ignored", "--test-threads=1"])
            .env("NVTX_INJECTION64_PATH", recorder.expect("checked above"))
            .env("GPUIPC_NVTX_RECORD", record.path());
        if let Some(dir) = &nvtx_dir {
            let mut path = std::ffi::OsString::from(dir);
            if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                path.push(":");
                path.push(old);
            }
            child.env("LD_LIBRARY_PATH", path);
        }
        let out = child.output().expect("the child test starts");
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "the child test failed: {said}");
        assert!(said.contains("1 passed"), "the child test did not run: {said}");
        let files: Vec<_> = std::fs::read_dir(record.path()).expect("the record folder").flatten().collect();
        assert_eq!(files.len(), 1, "one process, one record: {files:?}; child said {said}");
        let lines = std::fs::read_to_string(files[0].path()).expect("the record");
        let lines: Vec<&str> = lines.lines().collect();
        let tid = lines.first().and_then(|l| l.split(' ').nth(1)).unwrap_or("?").to_owned();
        let expected = [
            format!("thread {tid} gpuipc test"),
            format!("push {tid} grade frame 7"),
            format!("push {tid} inner"),
            format!("pop {tid}"),
            format!("pop {tid}"),
        ];
        assert_eq!(lines, expected, "what the tool saw");
    }

    /// The child of [`ranges_reach_a_tool_attached_as_nsight_is`], with NVTX's tool set.
    #[test]
    #[ignore = "run in a process of its own by ranges_reach_a_tool_attached_as_nsight_is"]
    fn push_ranges_for_the_recorder() {
        let nvtx = Nvtx::load().expect("NVTX's library loads");
        nvtx.name_this_thread("gpuipc test");
        let outer = nvtx.range(&frame_range_name("grade", 7));
        drop(nvtx.range("inner"));
        drop(outer);
    }

    /// Where the library is missing, loading is an error naming what to install, never a
    /// panic; where it is present, ranges push and pop (no tool attached: no-ops).
    #[test]
    fn loading_is_an_error_or_ranges_work_never_a_panic() {
        match Nvtx::load() {
            Err(e) => {
                assert!(matches!(e, CudaError::NoNvtx), "{e}");
                assert!(e.to_string().contains("libnvToolsExt.so.1"), "{e}");
                assert!(e.to_string().contains("libnvtx3interop.so.1"), "{e}");
                assert!(e.to_string().contains("LD_LIBRARY_PATH"), "{e}");
                // Asked again: the same answer, from the cache.
                assert!(matches!(Nvtx::load(), Err(CudaError::NoNvtx)));
            }
            Ok(nvtx) => {
                nvtx.name_this_thread("gpuipc test");
                let outer = nvtx.range(&frame_range_name("test", 1));
                drop(nvtx.range("inner"));
                drop(outer);
            }
        }
    }
}
