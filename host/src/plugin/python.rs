//! The interpreter of the built-in `python` plugin. Its library is built against Python's
//! stable ABI and linked to no libpython (one build serves every Python from 3.9), so before
//! a process loads it, it loads the shared libpython of `$GPUIPC_PYTHON` (else `python3` on
//! `PATH`) for every library to see: the plugin's calls into Python resolve to it.
#![allow(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What `inspect python` says of the class a python stage runs (docs/writing-python-stages.md
/// says it at length).
pub const INTERFACE: &str = r#"the class (from `script` or `module`):
  @staticmethod
  negotiate(params, input_formats) -> gpuipc.Format | (pixel, width, height) | None
      optional; the output format (None: a sink). Default: the first input's format.
  __init__(self, params, input_formats, output_format, ctx)
      params: a dict of every other key of `params`; formats: gpuipc.Format (pixel, width,
      height); output_format None for a sink.
  process(self, inputs, output, ctx)
      inputs: a list of frames, one per input, aligned by sequence number; output: the frame
      to write, None for a sink. A frame has .planes (one array per plane) and .info (seq,
      timestamp_ns, format, width, height, layout). cpu: each plane is a NumPy uint8 array
      viewing the ring slot (rows x columns x channels, inputs read-only). cuda: each plane
      has __dlpack__ / __dlpack_device__ and __cuda_array_interface__ (torch.from_dlpack,
      cupy.from_dlpack, numba). Planes are valid for the call only.
      ctx: frame_index, stage, domain, device, cuda_stream (a raw CUstream: queue GPU work on
      it, e.g. `with torch.cuda.stream(torch.cuda.ExternalStream(ctx.cuda_stream))`).
      A source (no inputs) must define negotiate; it ends its stream with
      output.end_stream() (that frame is not passed on).
  flush(self)
      optional; no more frames will come.
An exception fails the stage (its traceback in the report), sys.exit too; the interpreter is
$GPUIPC_PYTHON, else python3 on PATH (3.9 or later, a shared libpython; NumPy for the cpu).
"#;

/// The `python` plugin's file name.
const LIBRARY: &str = "libgpuipc_python.so";

/// Whether the plugin at `path` needs a libpython loaded first.
pub fn needs_python(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == LIBRARY)
}

/// The interpreter stages use, as its name is given.
pub fn python_exe() -> String {
    std::env::var("GPUIPC_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".to_owned())
}

/// Load the interpreter's shared libpython into this process, once; `Err` says why not.
pub fn preload() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let library = locate()?;
            let flags = libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL;
            // SAFETY: loading libpython runs no Python code (nothing initialises the
            // interpreter until the plugin does); it stays loaded for the process's life.
            let loaded = unsafe { libloading::os::unix::Library::open(Some(&library), flags) }
                .map_err(|e| format!("cannot load {} for {}: {e}", library.display(), python_exe()))?;
            std::mem::forget(loaded);
            Ok(())
        })
        .clone()
}

/// The shared libpython of the interpreter, as it reports it.
fn locate() -> Result<PathBuf, String> {
    let exe = python_exe();
    let script = "import sys, sysconfig, json; v = sysconfig.get_config_var; \
                  print(json.dumps([sys.version_info[:2], v('Py_ENABLE_SHARED'), v('LIBDIR'), v('INSTSONAME'), v('LDLIBRARY')]))";
    let out = std::process::Command::new(&exe).args(["-c", script]).output().map_err(|e| {
        format!("cannot run `{exe}`: {e}; install Python 3.9 or later, or set GPUIPC_PYTHON to the interpreter to use")
    })?;
    if !out.status.success() {
        return Err(format!("`{exe}` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    type Facts = ((u32, u32), Option<i64>, Option<String>, Option<String>, Option<String>);
    let ((major, minor), shared, libdir, soname, ldlibrary): Facts =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("`{exe}` did not say where its library is: {e}"))?;
    if (major, minor) < (3, 9) {
        return Err(format!("`{exe}` is Python {major}.{minor}; python stages need 3.9 or later"));
    }
    if shared != Some(1) {
        return Err(format!(
            "`{exe}` (Python {major}.{minor}) was built without a shared libpython (--enable-shared), which a python stage loads; give GPUIPC_PYTHON an interpreter that has one"
        ));
    }
    let names = [soname, ldlibrary].into_iter().flatten();
    let candidates: Vec<PathBuf> = names
        .flat_map(|n| [libdir.as_ref().map(|d| Path::new(d).join(&n)), Some(PathBuf::from(n))])
        .flatten()
        .collect();
    // The folder the interpreter names first; else a bare name, which the loader's search finds.
    candidates
        .iter()
        .find(|p| p.is_absolute() && p.exists())
        .or(candidates.iter().find(|p| !p.is_absolute()))
        .cloned()
        .ok_or_else(|| format!("`{exe}` names no libpython"))
}
