//! NVTX ranges, so an Nsight Systems capture shows which stage did what for which frame.
//!
//! Off unless asked for ([`enabled_by`]: `GPUIPC_NVTX=1`, read by the stage): a stage that
//! does not ask never loads the library, and its frame loop pays one branch a frame. Asked
//! for, [`Nvtx::load`] finds `libnvToolsExt` by cudarc's names, as `library.rs` finds the
//! driver, and checks its functions before cudarc's bindings are called: a missing library is
//! [`CudaError::NoNvtx`] (the stage says so and runs without ranges), never cudarc's panic.
//! Without a tool attached (no `nsys`), NVTX's own calls return at once.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::marker::PhantomData;

use cudarc::nvtx::sys;

use crate::error::CudaError;
use crate::library;

/// Whether the value of `GPUIPC_NVTX` turns ranges on: set, not empty and not `0`.
pub fn enabled_by(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty() && v != "0")
}

/// The name of a stage's range for one frame: `<stage> frame <seq>`.
pub fn frame_range_name(stage: &str, seq: u64) -> String {
    format!("{stage} frame {seq}")
}

/// NVTX, loaded and checked: ranges and thread names can be made.
#[derive(Debug, Clone, Copy)]
pub struct Nvtx {
    _checked: (),
}

impl Nvtx {
    /// Load NVTX, or say why it cannot be.
    pub fn load() -> Result<Nvtx, CudaError> {
        library::nvtx()?;
        Ok(Nvtx { _checked: () })
    }

    /// Name the calling OS thread in captures (`gpuipc stage grade`).
    pub fn name_this_thread(&self, name: &str) {
        let Ok(name) = CString::new(name) else { return };
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        // SAFETY: `load` checked the library has the function; the name is a NUL-terminated
        // string that outlives the call (NVTX copies it).
        unsafe { sys::nvtxNameOsThreadA(tid, name.as_ptr()) }
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
        unsafe { sys::nvtxRangePushA(name.as_ptr()) };
        Range { _thread: PhantomData }
    }
}

/// A pushed range; dropping it pops it.
#[derive(Debug)]
pub struct Range {
    _thread: PhantomData<*const ()>,
}

impl Drop for Range {
    fn drop(&mut self) {
        // SAFETY: a `Range` exists only after `Nvtx::load` checked the function, and pops
        // the range its own thread pushed (it cannot be sent to another).
        unsafe { sys::nvtxRangePop() };
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

    /// Where the library is missing, loading is an error naming what to install, never a
    /// panic; where it is present, ranges push and pop (no tool attached: no-ops).
    #[test]
    fn loading_is_an_error_or_ranges_work_never_a_panic() {
        match Nvtx::load() {
            Err(e) => {
                assert!(matches!(e, CudaError::NoNvtx), "{e}");
                assert!(e.to_string().contains("libnvToolsExt.so.1"), "{e}");
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
