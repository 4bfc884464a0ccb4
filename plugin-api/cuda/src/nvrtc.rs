//! NVRTC: CUDA C++ source to a CUBIN for one architecture, with the full log on failure.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int};

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use crate::error::CudaError;
use crate::{library, log};

/// The options every kernel is compiled with, besides `--gpu-architecture=sm_XX`; the same as
/// CI's `.ci/compile-kernels.py`.
pub const NVRTC_OPTIONS: &[&str] = &["--std=c++17"];

/// The loaded NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    library::nvrtc()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: NVRTC is loaded with every function we call; writes two ints.
    check("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// NVRTC's name for `result` (`NVRTC_ERROR_COMPILATION`). Only called once the library is
/// loaded (a status other than success only comes from it).
fn error_name(result: nvrtcResult) -> String {
    // SAFETY: returns a static NUL-terminated string for any status (NVRTC's contract).
    let text = unsafe { sys::nvrtcGetErrorString(result) };
    if text.is_null() {
        return format!("{result:?}");
    }
    // SAFETY: non-null, static, NUL-terminated.
    unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

fn check(op: &'static str, result: nvrtcResult) -> Result<(), CudaError> {
    match result {
        nvrtcResult::NVRTC_SUCCESS => Ok(()),
        other => Err(CudaError::Nvrtc { op, code: other as i32, name: error_name(other) }),
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from nvrtcCreateProgram and is destroyed once, here.
        let result = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        if let Err(e) = check("nvrtcDestroyProgram", result) {
            log::warn(&e.to_string());
        }
    }
}

/// One of a program's outputs: the functions that give its size and its bytes.
struct Output {
    size_op: &'static str,
    size: unsafe fn(nvrtcProgram, *mut usize) -> nvrtcResult,
    get_op: &'static str,
    get: unsafe fn(nvrtcProgram, *mut c_char) -> nvrtcResult,
}

const LOG: Output = Output {
    size_op: "nvrtcGetProgramLogSize",
    size: sys::nvrtcGetProgramLogSize,
    get_op: "nvrtcGetProgramLog",
    get: sys::nvrtcGetProgramLog,
};

const CUBIN: Output = Output {
    size_op: "nvrtcGetCUBINSize",
    size: sys::nvrtcGetCUBINSize,
    get_op: "nvrtcGetCUBIN",
    get: sys::nvrtcGetCUBIN,
};

impl Program {
    /// Size, then bytes, of one of the program's outputs.
    fn output(&self, what: &Output) -> Result<Vec<u8>, CudaError> {
        let mut len = 0usize;
        // SAFETY: `self.0` is a live program; writes one size.
        check(what.size_op, unsafe { (what.size)(self.0, &mut len) })?;
        let mut bytes = vec![0u8; len];
        // SAFETY: NVRTC writes exactly the `len` bytes it just reported into `bytes`.
        check(what.get_op, unsafe { (what.get)(self.0, bytes.as_mut_ptr().cast()) })?;
        Ok(bytes)
    }

    /// The compile log, without its terminating NUL.
    fn log(&self) -> String {
        match self.output(&LOG) {
            Ok(mut bytes) => {
                while bytes.last() == Some(&0) {
                    bytes.pop();
                }
                String::from_utf8_lossy(&bytes).trim_end().to_owned()
            }
            Err(e) => format!("(no log: {e})"),
        }
    }
}

/// A successful compile: the CUBIN, and NVRTC's log (warnings; usually empty).
pub(crate) struct Compiled {
    pub cubin: Vec<u8>,
    pub log: String,
}

/// The architectures this NVRTC can compile for, as `sm_XX`.
fn supported_archs() -> Result<Vec<String>, CudaError> {
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    check("nvrtcGetNumSupportedArchs", unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) })?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    // SAFETY: NVRTC writes the `n` ints it just reported.
    check("nvrtcGetSupportedArchs", unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) })?;
    Ok(archs.into_iter().map(|a| format!("sm_{a}")).collect())
}

/// Compile `source` (called `file_name` in NVRTC's messages) with `options`. A failure is a
/// [`CudaError::Compile`] with the file name, the architecture, NVRTC's status and the log.
pub(crate) fn compile(file_name: &str, source: &str, arch: &str, options: &[String]) -> Result<Compiled, CudaError> {
    library::nvrtc()?;
    let failed = |code: Option<i32>, reason: String, log: String| CudaError::Compile {
        file: file_name.to_owned(),
        arch: arch.to_owned(),
        code,
        reason,
        log,
    };
    let nul = |what: &str| failed(None, format!("{what} contains a NUL byte"), String::new());
    let c_source = CString::new(source).map_err(|_| nul("the source"))?;
    let c_name = CString::new(file_name).map_err(|_| nul("the file name"))?;
    let c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| nul("an option"))?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

    let mut handle: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: source and name are NUL-terminated and outlive the call (NVRTC copies them); no
    // headers; writes the new program into `handle`.
    let created = unsafe {
        sys::nvrtcCreateProgram(&mut handle, c_source.as_ptr(), c_name.as_ptr(), 0, std::ptr::null(), std::ptr::null())
    };
    check("nvrtcCreateProgram", created).map_err(|e| failed(Some(created as i32), e.to_string(), String::new()))?;
    let program = Program(handle);

    // SAFETY: a live program; `option_ptrs` holds `len` NUL-terminated strings that outlive
    // the call.
    let compiled = unsafe { sys::nvrtcCompileProgram(program.0, option_ptrs.len() as c_int, option_ptrs.as_ptr()) };
    if compiled != nvrtcResult::NVRTC_SUCCESS {
        let mut reason = format!("{} ({})", error_name(compiled), compiled as i32);
        match compiled {
            nvrtcResult::NVRTC_ERROR_INVALID_OPTION => {
                if let Ok(archs) = supported_archs() {
                    reason += &format!(" (options {options:?}; this NVRTC supports {})", archs.join(" "));
                }
            }
            nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE => {
                reason += " (libnvrtc-builtins.so.13.* must be loadable too, e.g. from the same directory on \
                           LD_LIBRARY_PATH)";
            }
            _ => {}
        }
        return Err(failed(Some(compiled as i32), reason, program.log()));
    }
    let log = program.log();
    let cubin = program.output(&CUBIN).map_err(|e| failed(None, e.to_string(), String::new()))?;
    Ok(Compiled { cubin, log })
}

/// The options of one architecture: `--gpu-architecture={arch}` and [`NVRTC_OPTIONS`].
pub(crate) fn options_for(arch: &str) -> Vec<String> {
    std::iter::once(format!("--gpu-architecture={arch}")).chain(NVRTC_OPTIONS.iter().map(|o| o.to_string())).collect()
}

/// Compile `source` to a CUBIN for `arch` (`sm_80`, `sm_90`, ...) with the options the stages
/// use, exactly as [`Kernels::load`](crate::Kernels::load) does on a cache miss. Needs NVRTC,
/// not a GPU.
pub fn compile_cubin(file_name: &str, source: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    compile(file_name, source, arch, &options_for(arch)).map(|c| c.cubin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::nvrtc_for_test;

    #[test]
    fn a_compile_error_names_the_file_and_carries_the_whole_log() {
        if !nvrtc_for_test() {
            return;
        }
        let source = "extern \"C\" __global__ void k(int* p) {\n  *p = undefined_one;\n  *p = undefined_two;\n}\n";
        let e = compile_cubin("kernels/broken.cu", source, "sm_90").unwrap_err();
        let CudaError::Compile { code, log, .. } = &e else { panic!("not a compile error: {e}") };
        assert_eq!(*code, Some(nvrtcResult::NVRTC_ERROR_COMPILATION as i32));
        assert!(log.contains("undefined_one") && log.contains("undefined_two"), "{log}");
        let text = e.to_string();
        assert!(
            text.starts_with("kernels/broken.cu: NVRTC compile for sm_90 failed: NVRTC_ERROR_COMPILATION (6)"),
            "{text}"
        );
        assert!(text.contains("---- NVRTC log ----"), "{text}");
        assert!(text.contains("kernels/broken.cu(2): error"), "{text}");
        eprintln!("{text}");
    }

    #[test]
    fn an_unknown_architecture_lists_the_supported_ones() {
        if !nvrtc_for_test() {
            return;
        }
        let e = compile_cubin("kernels/k.cu", "extern \"C\" __global__ void k() {}", "sm_1").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("this NVRTC supports") && text.contains("sm_90"), "{text}");
    }

    #[test]
    fn a_nul_byte_is_refused_before_nvrtc() {
        if !nvrtc_for_test() {
            return;
        }
        let e = compile_cubin("kernels/k.cu", "a\0b", "sm_90").unwrap_err();
        assert_eq!(e.to_string(), "kernels/k.cu: NVRTC compile for sm_90 failed: the source contains a NUL byte");
    }

    #[test]
    fn options_name_the_architecture_first() {
        assert_eq!(options_for("sm_90"), ["--gpu-architecture=sm_90", "--std=c++17"]);
    }
}
