//! The Python interpreter of a process: started once, with the module search path of the
//! interpreter it belongs to, and the `gpuipc` module scripts import their types from.
//!
//! The library is not linked to a libpython: whoever loads it (the host's plugin loader, in
//! `gpuipc-host` and in every stage process) loads the shared libpython of `$GPUIPC_PYTHON` (or
//! `python3` on `PATH`) first, for every process to see. So one build serves any Python from 3.9.

use std::sync::OnceLock;

use pyo3::prelude::*;
use pyo3::types::{PyList, PyModule};

use crate::frames::{Context, Format, Frame, FrameInfo, GpuPlane, HostPlane};

/// The interpreter whose packages stages see: `$GPUIPC_PYTHON`, else `python3` on `PATH`.
pub fn python_exe() -> String {
    std::env::var("GPUIPC_PYTHON").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "python3".to_owned())
}

/// Start the interpreter once for this process. `Err` says why it cannot run.
pub fn ensure() -> Result<(), String> {
    static READY: OnceLock<Result<(), String>> = OnceLock::new();
    READY.get_or_init(start).clone()
}

fn start() -> Result<(), String> {
    let paths = interpreter_path()?;
    Python::initialize();
    Python::attach(|py| -> PyResult<()> {
        let sys = py.import("sys")?;
        // The embedded interpreter finds its standard library by itself; a virtual
        // environment's packages (and anything else on the real interpreter's path) it
        // would not.
        let path = sys.getattr("path")?.cast_into::<PyList>()?;
        for p in paths {
            if !path.contains(&p)? {
                path.append(p)?;
            }
        }
        let module = PyModule::new(py, "gpuipc")?;
        module.add_class::<Format>()?;
        module.add_class::<FrameInfo>()?;
        module.add_class::<Frame>()?;
        module.add_class::<HostPlane>()?;
        module.add_class::<GpuPlane>()?;
        module.add_class::<Context>()?;
        sys.getattr("modules")?.set_item("gpuipc", module)?;
        Ok(())
    })
    .map_err(|e| format!("cannot set up the Python interpreter: {e}"))
}

/// The module search path of the interpreter, without its first entry (the folder of the
/// script it runs).
fn interpreter_path() -> Result<Vec<String>, String> {
    let exe = python_exe();
    let out = std::process::Command::new(&exe)
        .args(["-c", "import sys, json; print(json.dumps(sys.path[1:]))"])
        .output()
        .map_err(|e| format!("cannot run `{exe}` (set GPUIPC_PYTHON to the interpreter to use): {e}"))?;
    if !out.status.success() {
        return Err(format!("`{exe}` failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("`{exe}` printed no module path: {e}"))
}
