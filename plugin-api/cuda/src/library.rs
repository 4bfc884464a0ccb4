//! The one rule for finding the CUDA driver and NVRTC, and checking them before first use.
//!
//! cudarc is built with dynamic loading: its first call into a library opens the first of
//! its candidate names (`cudarc::get_lib_name_candidates`: `libcuda.so`, ..., `libcuda.so.1`;
//! `libnvrtc.so`, ..., `libnvrtc.so.13`, ...) that the dynamic loader opens, so
//! `LD_LIBRARY_PATH` and the system's paths apply, and it panics if none opens or a function
//! is missing. Before anything here calls into a library, [`driver`], [`modules`] or
//! [`nvrtc`] does the same search (same names, same order, so the same file), then asks
//! cudarc for the library and looks up every function this crate calls from it; the answer
//! is cached. A missing library or function is a [`CudaError`], never cudarc's panic.
//! `GPUIPC_NO_CUDA` set in the environment makes the driver count as missing (tests and
//! users force the cpu domain with it). Loading either library creates no CUDA context.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fmt;
use std::sync::OnceLock;

use crate::error::CudaError;

/// A library this crate loads at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// The CUDA driver, `libcuda`.
    Driver,
    /// The runtime compiler, `libnvrtc`.
    Nvrtc,
    /// NCCL, `libnccl` (the `nccl` links between hosts only; see `nccl.rs`).
    Nccl,
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Library::Driver => "the CUDA driver",
            Library::Nvrtc => "NVRTC",
            Library::Nccl => "NCCL",
        })
    }
}

impl Library {
    /// The names cudarc tries, in its order (the driver's under both of its base names).
    /// NCCL's first: cudarc's list lacks `libnccl.so.2`, the name NCCL's runtime packages
    /// (the `libnccl2` deb, the PyPI wheel `nvidia-nccl-cu13`) ship; `libnccl.so` comes only
    /// with the development package.
    pub(crate) fn candidates(self) -> Vec<String> {
        let bases: &[&str] = match self {
            Library::Driver => &["cuda", "nvcuda"],
            Library::Nvrtc => &["nvrtc"],
            Library::Nccl => &["nccl"],
        };
        let first = match self {
            Library::Nccl => vec!["libnccl.so.2".to_owned()],
            _ => Vec::new(),
        };
        first.into_iter().chain(bases.iter().flat_map(|b| cudarc::get_lib_name_candidates(b))).collect()
    }

    fn missing(self, disabled: bool) -> CudaError {
        match self {
            Library::Driver => CudaError::NoDriver { disabled },
            Library::Nvrtc => CudaError::NoNvrtc,
            Library::Nccl => CudaError::NoNccl,
        }
    }

    /// The file name (as asked of the dynamic loader) cudarc loads, found once. For NCCL,
    /// the name this crate loads itself (`nccl.rs`).
    pub(crate) fn file(self) -> Result<&'static str, CudaError> {
        static DRIVER: OnceLock<Result<String, CudaError>> = OnceLock::new();
        static NVRTC: OnceLock<Result<String, CudaError>> = OnceLock::new();
        static NCCL: OnceLock<Result<String, CudaError>> = OnceLock::new();
        let cell = match self {
            Library::Driver => &DRIVER,
            Library::Nvrtc => &NVRTC,
            Library::Nccl => &NCCL,
        };
        let found = cell.get_or_init(|| {
            if self == Library::Driver && std::env::var_os("GPUIPC_NO_CUDA").is_some() {
                return Err(self.missing(true));
            }
            self.candidates()
                .into_iter()
                .find(|name| {
                    // SAFETY: opening the library runs its initialisers, as any CUDA program
                    // does; they create no context. Our handle is closed again right away:
                    // cudarc opens the same name for itself.
                    unsafe { libloading::Library::new(name) }.is_ok()
                })
                .ok_or_else(|| self.missing(false))
        });
        found.as_deref().map_err(Clone::clone)
    }
}

/// A set of functions checked together: what one part of this crate calls.
struct Symbols {
    library: Library,
    names: &'static [&'static str],
    /// What an installation lacking one of them must be upgraded to.
    needs: &'static str,
}

/// Every driver function the context, memory, event, device-query and table code calls.
const DRIVER: Symbols = Symbols {
    library: Library::Driver,
    needs: "a driver for CUDA 11.0 or newer",
    names: &[
        "cuGetErrorName",
        "cuGetErrorString",
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
        "cuDeviceGet",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDeviceGetPCIBusId",
        "cuDeviceTotalMem_v2",
        "cuDeviceCanAccessPeer",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease_v2",
        "cuCtxGetCurrent",
        "cuCtxSetCurrent",
        "cuCtxGetDevice",
        "cuStreamCreate",
        "cuStreamDestroy_v2",
        "cuStreamSynchronize",
        "cuStreamQuery",
        "cuStreamWaitEvent",
        "cuMemGetAllocationGranularity",
        "cuMemCreate",
        "cuMemRelease",
        "cuMemExportToShareableHandle",
        "cuMemImportFromShareableHandle",
        "cuMemGetAllocationPropertiesFromHandle",
        "cuMemAddressReserve",
        "cuMemAddressFree",
        "cuMemMap",
        "cuMemUnmap",
        "cuMemSetAccess",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemGetAddressRange_v2",
        "cuIpcGetMemHandle",
        "cuIpcOpenMemHandle_v2",
        "cuIpcCloseMemHandle",
        "cuMemHostRegister_v2",
        "cuMemHostUnregister",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoDAsync_v2",
        "cuMemsetD8Async",
        "cuMemsetD32Async",
        "cuEventCreate",
        "cuEventDestroy_v2",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventQuery",
        "cuIpcGetEventHandle",
        "cuIpcOpenEventHandle",
    ],
};

/// The driver functions of modules and launches, on top of [`DRIVER`]'s.
const MODULES: Symbols = Symbols {
    library: Library::Driver,
    needs: "a driver for CUDA 12.4 or newer to load kernels",
    names: &["cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload", "cuFuncGetParamInfo", "cuLaunchKernel"],
};

/// The driver functions that time GPU work and read its memory use (`gpuipc-host bench`).
const TIMING: Symbols = Symbols {
    library: Library::Driver,
    needs: "a driver for CUDA 12.8 or newer to time GPU work",
    names: &["cuEventElapsedTime_v2", "cuMemGetInfo_v2"],
};

/// Every NVRTC function the compiler code calls.
const NVRTC: Symbols = Symbols {
    library: Library::Nvrtc,
    needs: "NVRTC 11.2 or newer",
    names: &[
        "nvrtcVersion",
        "nvrtcGetErrorString",
        "nvrtcCreateProgram",
        "nvrtcCompileProgram",
        "nvrtcDestroyProgram",
        "nvrtcGetProgramLogSize",
        "nvrtcGetProgramLog",
        "nvrtcGetCUBINSize",
        "nvrtcGetCUBIN",
        "nvrtcGetNumSupportedArchs",
        "nvrtcGetSupportedArchs",
    ],
};

impl Symbols {
    /// The library is found and has every one of these functions.
    fn check(&self, cell: &OnceLock<Result<(), CudaError>>) -> Result<(), CudaError> {
        let file = self.library.file()?;
        cell.get_or_init(|| {
            let lib = match self.library {
                // SAFETY: `file` just found a candidate that opens, and cudarc tries the same
                // names in the same order, so it finds a library instead of panicking.
                Library::Driver => unsafe { cudarc::driver::sys::culib() },
                // SAFETY: as above, for NVRTC.
                Library::Nvrtc => unsafe { cudarc::nvrtc::sys::culib() },
                // NCCL's functions are looked up by `nccl.rs` in the library it opens itself.
                Library::Nccl => {
                    return Err(CudaError::Invalid {
                        op: "checking NCCL",
                        reason: "NCCL is checked by nccl.rs".into(),
                    });
                }
            };
            for &symbol in self.names {
                // SAFETY: only a dlsym lookup; the pointer is never called through this type.
                if unsafe { lib.get::<*const c_void>(symbol.as_bytes()) }.is_err() {
                    return Err(CudaError::MissingSymbol {
                        library: self.library,
                        file: file.to_owned(),
                        symbol,
                        needs: self.needs,
                    });
                }
            }
            Ok(())
        })
        .clone()
    }
}

/// Whether the CUDA driver library can be loaded by the rule above (and `GPUIPC_NO_CUDA` is
/// unset). Cheap after the first call. A library that loads may still be unusable: too old
/// (a missing function), or the toolkit's stub, whose `cuInit` fails with
/// `CUDA_ERROR_STUB_LIBRARY`; the first call that needs it says so.
pub fn driver_available() -> bool {
    Library::Driver.file().is_ok()
}

/// Whether NVRTC can be loaded by the rule above and has every function this crate calls.
pub fn nvrtc_available() -> bool {
    nvrtc().is_ok()
}

/// The driver is loaded and has every function of the context, memory and event code.
pub(crate) fn driver() -> Result<(), CudaError> {
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    DRIVER.check(&CHECKED)
}

/// As [`driver`], and the driver also has the module and launch functions.
pub(crate) fn modules() -> Result<(), CudaError> {
    driver()?;
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    MODULES.check(&CHECKED)
}

/// As [`driver`], and the driver also has the timing functions.
pub(crate) fn timing() -> Result<(), CudaError> {
    driver()?;
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    TIMING.check(&CHECKED)
}

/// NVRTC is loaded and has every function the compiler code calls.
pub(crate) fn nvrtc() -> Result<(), CudaError> {
    static CHECKED: OnceLock<Result<(), CudaError>> = OnceLock::new();
    NVRTC.check(&CHECKED)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source file of the crate that calls into a library.
    const SOURCES: &[(&str, &str)] = &[
        ("context.rs", include_str!("context.rs")),
        ("driver.rs", include_str!("driver.rs")),
        ("event.rs", include_str!("event.rs")),
        ("memory.rs", include_str!("memory.rs")),
        ("pinned.rs", include_str!("pinned.rs")),
        ("module.rs", include_str!("module.rs")),
        ("table.rs", include_str!("table.rs")),
        ("nvrtc.rs", include_str!("nvrtc.rs")),
        ("timing.rs", include_str!("timing.rs")),
        ("nccl.rs", include_str!("nccl.rs")),
    ];

    /// The functions named as `sys::cuX` or `sys::nvrtcX` (called, or passed as a pointer).
    fn called(source: &str) -> Vec<&str> {
        source
            .split("sys::")
            .skip(1)
            .map(|rest| rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or(""))
            .filter(|name| {
                let function = |prefix: &str| {
                    name.strip_prefix(prefix).is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))
                };
                function("cu") || (function("nvrtc") && !["nvrtcProgram", "nvrtcResult"].contains(name))
            })
            .collect()
    }

    /// cudarc panics on a missing function, so every one this crate calls must be checked
    /// up front: a function called but in no list would reach that panic on an old driver.
    #[test]
    fn every_function_called_is_checked_first() {
        let mut seen = 0;
        for (file, source) in SOURCES {
            for name in called(source) {
                let listed = [&DRIVER, &MODULES, &TIMING, &NVRTC].iter().any(|s| s.names.contains(&name));
                assert!(listed, "{file} calls {name}, which no symbol list of library.rs checks");
                seen += 1;
            }
        }
        assert!(seen > 50, "found only {seen} calls; is the scan still right?");
    }

    #[test]
    fn the_scan_finds_calls_and_skips_types() {
        let text = "sys::cuInit(0); sys::CUresult::X; sys::nvrtcProgram; text(sys::cuGetErrorName); sys::nvrtcVersion(";
        assert_eq!(called(text), ["cuInit", "cuGetErrorName", "nvrtcVersion"]);
    }

    #[test]
    fn nccls_runtime_name_comes_first_then_cudarcs() {
        let names = Library::Nccl.candidates();
        assert_eq!(names[0], "libnccl.so.2");
        assert!(names.contains(&"libnccl.so".to_owned()));
    }

    #[test]
    fn the_candidates_are_cudarcs() {
        let names = Library::Driver.candidates();
        assert_eq!(names[0], "libcuda.so");
        assert!(names.contains(&"libcuda.so.1".to_owned()));
        assert!(Library::Nvrtc.candidates().contains(&"libnvrtc.so.13".to_owned()));
    }

    #[test]
    fn availability_is_cached_and_stable() {
        assert_eq!(driver_available(), driver_available());
        assert_eq!(nvrtc_available(), nvrtc_available());
    }
}
