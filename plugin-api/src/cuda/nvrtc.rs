//! NVRTC: CUDA C++ source to a CUBIN for one architecture, with the full log on failure.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::OnceLock;

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use crate::error::{Error, Result};

/// Every NVRTC function called here, checked once before the first call (cudarc panics on a
/// missing symbol).
const SYMBOLS: &[&str] = &[
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
];

fn ensure_loaded() -> Result<()> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // SAFETY: loading libnvrtc runs its initialisers, as any NVRTC user does; cudarc
            // tries only its fixed list of names.
            if !unsafe { sys::is_culib_present() } {
                return Err(format!(
                    "NVRTC cannot be loaded (tried {:?} through the dynamic loader; put the \
                     directory holding libnvrtc.so.13 and libnvrtc-builtins.so.13.0, e.g. \
                     site-packages/nvidia/cu13/lib of the PyPI package nvidia-cuda-nvrtc, on \
                     LD_LIBRARY_PATH)",
                    cudarc::get_lib_name_candidates("nvrtc")
                ));
            }
            // SAFETY: present, checked just above; `culib` loads the same first candidate.
            let lib = unsafe { sys::culib() };
            for name in SYMBOLS {
                // SAFETY: the symbol is only looked up, never called through this type.
                if unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err() {
                    return Err(format!("the NVRTC library found has no `{name}` (too old)"));
                }
            }
            Ok(())
        })
        .clone()
        .map_err(Error::new)
}

/// Whether NVRTC can be loaded in this process (from `LD_LIBRARY_PATH` or the system's paths).
pub fn nvrtc_available() -> bool {
    ensure_loaded().is_ok()
}

/// The loaded NVRTC's (major, minor) version.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    ensure_loaded()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: writes two ints.
    check("nvrtcVersion", unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })?;
    Ok((major, minor))
}

fn error_text(result: nvrtcResult) -> String {
    // SAFETY: returns a static NUL-terminated string for any status (NVRTC's contract).
    let text = unsafe { sys::nvrtcGetErrorString(result) };
    let text = if text.is_null() {
        "unknown NVRTC error".into()
    } else {
        // SAFETY: non-null, static, NUL-terminated.
        unsafe { CStr::from_ptr(text) }.to_string_lossy()
    };
    format!("{text} ({})", result as i32)
}

fn check(call: &str, result: nvrtcResult) -> Result<()> {
    match result {
        nvrtcResult::NVRTC_SUCCESS => Ok(()),
        other => Err(Error::new(format!("{call} failed: {}", error_text(other)))),
    }
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from nvrtcCreateProgram and is destroyed once, here.
        let result = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        if result != nvrtcResult::NVRTC_SUCCESS {
            crate::log::warn(&format!(
                "nvrtcDestroyProgram failed: {}",
                error_text(result)
            ));
        }
    }
}

impl Program {
    /// Size, then bytes, of one of the program's outputs.
    fn output(
        &self,
        what: &str,
        size: unsafe fn(nvrtcProgram, *mut usize) -> nvrtcResult,
        get: unsafe fn(nvrtcProgram, *mut c_char) -> nvrtcResult,
    ) -> Result<Vec<u8>> {
        let mut len = 0usize;
        // SAFETY: `self.0` is a live program; writes one size.
        check(&format!("nvrtcGet{what}Size"), unsafe {
            size(self.0, &mut len)
        })?;
        let mut bytes = vec![0u8; len];
        // SAFETY: NVRTC writes exactly the `len` bytes it just reported into `bytes`.
        check(&format!("nvrtcGet{what}"), unsafe {
            get(self.0, bytes.as_mut_ptr().cast())
        })?;
        Ok(bytes)
    }

    /// The compile log, without its terminating NUL.
    fn log(&self) -> String {
        match self.output(
            "ProgramLog",
            sys::nvrtcGetProgramLogSize,
            sys::nvrtcGetProgramLog,
        ) {
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
fn supported_archs() -> Result<Vec<String>> {
    let mut n: c_int = 0;
    // SAFETY: writes one int.
    check("nvrtcGetNumSupportedArchs", unsafe {
        sys::nvrtcGetNumSupportedArchs(&mut n)
    })?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    // SAFETY: NVRTC writes the `n` ints it just reported.
    check("nvrtcGetSupportedArchs", unsafe {
        sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
    })?;
    Ok(archs.into_iter().map(|a| format!("sm_{a}")).collect())
}

/// Compile `source` (called `file_name` in NVRTC's messages) with `options`. A failure returns
/// an error with the file name, the architecture, NVRTC's status and the full log.
pub(crate) fn compile(
    file_name: &str,
    source: &str,
    arch: &str,
    options: &[String],
) -> Result<Compiled> {
    ensure_loaded()?;
    let failed = |what: String| {
        Error::new(format!(
            "{file_name}: NVRTC compile for {arch} failed: {what}"
        ))
    };
    let c_source =
        CString::new(source).map_err(|_| failed("the source contains a NUL byte".into()))?;
    let c_name =
        CString::new(file_name).map_err(|_| failed("the file name contains a NUL byte".into()))?;
    let c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| failed("an option contains a NUL byte".into()))?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

    let mut handle: nvrtcProgram = std::ptr::null_mut();
    // SAFETY: source and name are NUL-terminated and outlive the call (NVRTC copies them); no
    // headers; writes the new program into `handle`.
    let created = unsafe {
        sys::nvrtcCreateProgram(
            &mut handle,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    check("nvrtcCreateProgram", created).map_err(|e| failed(e.to_string()))?;
    let program = Program(handle);

    // SAFETY: a live program; `option_ptrs` holds `len` NUL-terminated strings that outlive
    // the call.
    let compiled = unsafe {
        sys::nvrtcCompileProgram(program.0, option_ptrs.len() as c_int, option_ptrs.as_ptr())
    };
    if compiled != nvrtcResult::NVRTC_SUCCESS {
        let mut what = error_text(compiled);
        match compiled {
            nvrtcResult::NVRTC_ERROR_INVALID_OPTION => {
                if let Ok(archs) = supported_archs() {
                    what += &format!(
                        " (options {options:?}; this NVRTC supports {})",
                        archs.join(" ")
                    );
                }
            }
            nvrtcResult::NVRTC_ERROR_BUILTIN_OPERATION_FAILURE => {
                what += " (libnvrtc-builtins.so.13.* must be loadable too, e.g. from the same \
                         directory on LD_LIBRARY_PATH)";
            }
            _ => {}
        }
        let log = program.log();
        return Err(failed(if log.is_empty() {
            what
        } else {
            format!("{what}\n---- NVRTC log ----\n{log}\n----")
        }));
    }
    let log = program.log();
    let cubin = program
        .output("CUBIN", sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN)
        .map_err(|e| failed(e.to_string()))?;
    Ok(Compiled { cubin, log })
}

/// The options of one architecture: `--gpu-architecture={arch}` and [`super::NVRTC_OPTIONS`].
pub(crate) fn options_for(arch: &str) -> Vec<String> {
    std::iter::once(format!("--gpu-architecture={arch}"))
        .chain(super::NVRTC_OPTIONS.iter().map(|o| o.to_string()))
        .collect()
}

/// Compile `source` to a CUBIN for `arch` (`sm_80`, `sm_90`, ...) with the options the stages
/// use, exactly as [`super::Kernels::load`] does on a cache miss. Needs NVRTC, not a GPU.
pub fn compile_cubin(file_name: &str, source: &str, arch: &str) -> Result<Vec<u8>> {
    compile(file_name, source, arch, &options_for(arch)).map(|c| c.cubin)
}

/// For tests that need NVRTC: `true` when it loads; `false` (skip) when it does not, unless
/// `GPUIPC_REQUIRE_NVRTC=1`, when a missing NVRTC fails the test, so CI cannot skip silently.
#[cfg(test)]
pub(crate) fn nvrtc_for_test() -> bool {
    match ensure_loaded() {
        Ok(()) => true,
        Err(e) if std::env::var("GPUIPC_REQUIRE_NVRTC").as_deref() == Ok("1") => {
            panic!("GPUIPC_REQUIRE_NVRTC=1 but {e}")
        }
        Err(e) => {
            eprintln!("NVRTC test skipped: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry names a kernel file's opening `//` comment documents, as
    /// `extern "C" __global__ void NAME(`.
    fn documented_entries(source: &str) -> Vec<String> {
        let header: String = source
            .lines()
            .map_while(|l| l.strip_prefix("//"))
            .collect::<Vec<_>>()
            .join(" ");
        header
            .split("__global__ void")
            .skip(1)
            .filter_map(|rest| {
                rest.trim_start()
                    .split(|c: char| c == '(' || c.is_whitespace())
                    .next()
            })
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_kernel_compiles_for_sm_80_and_sm_90() {
        if !nvrtc_for_test() {
            return;
        }
        let (major, minor) = nvrtc_version().unwrap();
        eprintln!("NVRTC {major}.{minor}");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no .cu files in {}", dir.display());
        for path in files {
            let name = format!("kernels/{}", path.file_name().unwrap().to_string_lossy());
            let source = std::fs::read_to_string(&path).unwrap();
            let entries = documented_entries(&source);
            assert!(
                !entries.is_empty(),
                "{name}: the header documents no entry point"
            );
            for arch in ["sm_80", "sm_90"] {
                let cubin = compile_cubin(&name, &source, arch).unwrap_or_else(|e| panic!("{e}"));
                assert!(
                    super::super::cache::looks_like_cubin(&cubin),
                    "{name} {arch}: not ELF"
                );
                for entry in &entries {
                    let found = cubin.windows(entry.len()).any(|w| w == entry.as_bytes());
                    assert!(
                        found,
                        "{name} {arch}: documented entry `{entry}` is not in the CUBIN"
                    );
                }
                eprintln!(
                    "ok {name} {arch}: {} bytes, entries {entries:?}",
                    cubin.len()
                );
            }
        }
    }

    #[test]
    fn a_compile_error_names_the_file_and_carries_the_whole_log() {
        if !nvrtc_for_test() {
            return;
        }
        let source = "extern \"C\" __global__ void k(int* p) {\n  *p = undefined_one;\n  *p = undefined_two;\n}\n";
        let e = compile_cubin("kernels/broken.cu", source, "sm_90").unwrap_err();
        let text = e.message();
        assert!(
            text.starts_with(
                "kernels/broken.cu: NVRTC compile for sm_90 failed: NVRTC_ERROR_COMPILATION (6)"
            ),
            "{text}"
        );
        assert!(text.contains("---- NVRTC log ----"), "{text}");
        assert!(text.contains("kernels/broken.cu(2): error"), "{text}");
        assert!(
            text.contains("undefined_one") && text.contains("undefined_two"),
            "{text}"
        );
        eprintln!("{text}");
    }

    #[test]
    fn an_unknown_architecture_lists_the_supported_ones() {
        if !nvrtc_for_test() {
            return;
        }
        let e = compile_cubin(
            "kernels/k.cu",
            "extern \"C\" __global__ void k() {}",
            "sm_1",
        )
        .unwrap_err();
        assert!(
            e.message().contains("this NVRTC supports") && e.message().contains("sm_90"),
            "{e}"
        );
    }

    #[test]
    fn documented_entries_are_read_from_the_header() {
        let src = "// a\n//   extern \"C\" __global__ void gen_a(u8* out)\n//   extern \"C\" __global__ void gen_b(... same ...)\ncode\n// extern \"C\" __global__ void not_header(\n";
        assert_eq!(documented_entries(src), ["gen_a", "gen_b"]);
    }
}
