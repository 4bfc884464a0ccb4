//! The CUDA driver library: checked loading, error text, and the queries that take no handle.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUresult};

use crate::error::{Error, Result};

/// Every driver function this module family calls. Checked once before the first call, since
/// cudarc panics on a missing symbol. `cuFuncGetParamInfo` needs a CUDA 12.4 driver.
const SYMBOLS: &[&str] = &[
    "cuGetErrorName",
    "cuGetErrorString",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuDeviceGetAttribute",
    "cuModuleLoadData",
    "cuModuleGetFunction",
    "cuModuleUnload",
    "cuFuncGetParamInfo",
    "cuLaunchKernel",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuStreamSynchronize",
];

/// Make sure the driver library and every symbol used here can be loaded; `Err` says what is
/// missing. Cheap after the first call.
pub(crate) fn ensure_loaded() -> Result<()> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: loading the system's CUDA driver runs its initialisers, which is what any
            // CUDA program does; cudarc tries only its fixed list of library names.
            if !unsafe { sys::is_culib_present() } {
                return Err(format!(
                    "the CUDA driver library cannot be loaded (tried {:?})",
                    cudarc::get_lib_name_candidates("cuda")
                ));
            }
            // SAFETY: present, checked just above; `culib` loads the same first candidate.
            let lib = unsafe { sys::culib() };
            for name in SYMBOLS {
                // SAFETY: the symbol is only looked up, never called through this type.
                if unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err() {
                    return Err(format!(
                        "the CUDA driver has no `{name}`: a driver for CUDA 12.4 or newer is needed"
                    ));
                }
            }
            Ok(())
        })
        .clone()
        .map_err(Error::new)
}

/// `call failed: CUDA_ERROR_X (code): description`.
pub(crate) fn describe(result: CUresult) -> String {
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: both functions only write a pointer to a static string into the out-parameter;
    // only called once `ensure_loaded` succeeded, so the symbols exist.
    let (name_ok, text_ok) = unsafe {
        (
            sys::cuGetErrorName(result, &mut name) == CUresult::CUDA_SUCCESS,
            sys::cuGetErrorString(result, &mut text) == CUresult::CUDA_SUCCESS,
        )
    };
    let read = |ok: bool, p: *const c_char| {
        // SAFETY: on success the driver gave a NUL-terminated static string.
        (ok && !p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let code = result as i32;
    match (read(name_ok, name), read(text_ok, text)) {
        (Some(name), Some(text)) => format!("{name} ({code}): {text}"),
        (Some(name), None) => format!("{name} ({code})"),
        _ => format!("CUDA error {code}"),
    }
}

/// `Ok` for `CUDA_SUCCESS`, else an error naming the call and the driver's code and text.
pub(crate) fn check(call: &str, result: CUresult) -> Result<()> {
    match result {
        CUresult::CUDA_SUCCESS => Ok(()),
        other => Err(Error::new(format!("{call} failed: {}", describe(other)))),
    }
}

/// The context current on this thread (0: none).
pub(crate) fn current_context() -> Result<usize> {
    ensure_loaded()?;
    let mut ctx: sys::CUcontext = std::ptr::null_mut();
    // SAFETY: writes the thread's current context handle into `ctx`, nothing else.
    check("cuCtxGetCurrent", unsafe { sys::cuCtxGetCurrent(&mut ctx) })?;
    Ok(ctx as usize)
}

/// (major, minor) compute capability of the device of the current context.
pub(crate) fn compute_capability() -> Result<(i32, i32)> {
    ensure_loaded()?;
    let mut device: sys::CUdevice = 0;
    // SAFETY: writes the current context's device ordinal into `device`; an error without one.
    check("cuCtxGetDevice", unsafe {
        sys::cuCtxGetDevice(&mut device)
    })?;
    let attribute = |attribute, what| {
        let mut value: c_int = 0;
        // SAFETY: writes one int; `device` came from the driver.
        check(what, unsafe {
            sys::cuDeviceGetAttribute(&mut value, attribute, device)
        })?;
        Ok::<_, Error>(value)
    };
    use sys::CUdevice_attribute_enum::{
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
    };
    Ok((
        attribute(MAJOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)")?,
        attribute(MINOR, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)")?,
    ))
}
