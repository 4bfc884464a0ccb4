//! `python`: a stage whose work is a Python class (docs/writing-python-stages.md).
//!
//! The class mirrors the Rust `Plugin` trait: an optional static `negotiate(params,
//! input_formats)` (default: the output is the first input's format), `__init__(self, params,
//! input_formats, output_format, ctx)`, `process(self, inputs, output, ctx)` and an optional
//! `flush(self)`; a source (no inputs) must define `negotiate` and ends its stream with
//! `output.end_stream()`. Frames come without copies: on the cpu each plane is a NumPy array viewing
//! its ring slot (inputs read-only); on the GPU each plane supports DLPack (`__dlpack__`) and
//! the CUDA array interface, for PyTorch, CuPy and Numba, and `ctx.cuda_stream` is the stage's
//! stream. It runs in its own stage process like every stage: an exception (shown with its
//! traceback), a crash or a hang is that stage's failure alone.
//!
//! # Params
//!
//! | key      | type   | default  | meaning |
//! |----------|--------|----------|---------|
//! | `script` | string | none     | a Python file defining the class (relative to the folder gpuipc-host runs in); this or `module` |
//! | `module` | string | none     | an importable module defining the class; this or `script` |
//! | `class`  | string | required | the class in it |
//! | any other key | any | | passed to the class in its `params` dict |
//!
//! The interpreter is `$GPUIPC_PYTHON`, else `python3` on `PATH`; it needs a shared libpython
//! (the usual build) and, for the cpu domain, NumPy.
//!
//! ```toml
//! [[stage]]
//! name = "invert"
//! plugin = "python"
//! inputs = ["gen"]
//! params = { script = "pipelines/python/invert.py", class = "Invert", strength = 1.0 }
//! ```

mod classes;
mod dlpack;
mod frames;
mod runtime;
pub mod stage;

gpuipc_plugin_api::export_plugin!(stage::PythonStage);
