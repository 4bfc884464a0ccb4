//! The python stage: a Python class named by `params` does the work; this side loads it,
//! hands it each frame without a copy and turns its exceptions into the stage's errors.

use std::sync::{Arc, Mutex};

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameData, FrameDataMut, FrameFormat, InputFrame, OutputFrame, ParamInfo,
    PixelFormat, Plugin, PluginInfo, ProcessContext, Result, bail,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::frames::{Bytes, Context, Format, Frame};
use crate::{classes, runtime};

/// Most inputs a Python stage may have.
pub const MAX_INPUTS: u32 = 8;

/// The keys this side reads; every other key of `params` is the class's.
const OWN_KEYS: [&str; 3] = ["script", "module", "class"];

/// A python stage instance: the Python object, and what each call needs.
pub struct PythonStage {
    instance: Py<PyAny>,
    stage: String,
    domain: Domain,
    device: Option<u32>,
    /// `numpy.asarray`, in the cpu domain.
    asarray: Option<Py<PyAny>>,
    /// Streams other than the stage's that a GPU plane was handed to in this call.
    foreign_streams: Arc<Mutex<Vec<usize>>>,
}

impl Plugin for PythonStage {
    /// The whole table: `script` or `module`, `class`, and the class's own keys.
    type Params = toml::Table;

    // Allowed (a filter's or a sink's; never a source's, which the host refuses): whether a
    // class keeps state from one frame to the next is its author's to know
    // (docs/writing-python-stages.md says so).
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "python",
        version: env!("CARGO_PKG_VERSION"),
        description: "runs a Python class on every frame: NumPy arrays on the cpu, DLPack / CUDA array interface on the GPU, no copies (docs/writing-python-stages.md)",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 0,
        max_inputs: MAX_INPUTS,
        accepts: &PixelFormat::ALL,
        produces: &PixelFormat::ALL,
    };

    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "script",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "a Python file defining the class (relative to the folder gpuipc-host runs in); its folder is put first on the module path. This or `module`",
        },
        ParamInfo {
            name: "module",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "an importable module defining the class (`package.module`). This or `script`",
        },
        ParamInfo {
            name: "class",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "",
            description: "the class: optional static `negotiate(params, input_formats)`, `__init__(self, params, input_formats, output_format, ctx)`, `process(self, inputs, output, ctx)`, optional `flush(self)`. Every other key of `params` is passed to it in `params`",
        },
    ];

    fn check(params: &toml::Table, _inputs: &[FrameFormat]) -> Result<()> {
        classes::Source::from_params(params).map(|_| ())
    }

    fn negotiate(params: &toml::Table, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        runtime::ensure().map_err(Error::new)?;
        Python::attach(|py| {
            let class = classes::load(py, params)?;
            if !class.hasattr("negotiate").map_err(|e| classes::describe(py, e))? {
                if inputs.is_empty() {
                    bail!(
                        "class `{}` is a source (no inputs), so it needs a static `negotiate(params, input_formats)` that returns its output format",
                        classes::class_name(params)
                    );
                }
                return Ok(inputs.first().copied());
            }
            let formats =
                PyList::new(py, inputs.iter().map(|f| Format::of(*f))).map_err(|e| classes::describe(py, e))?;
            let own = class_params(py, params)?;
            let result = class.call_method1("negotiate", (own, formats)).map_err(|e| classes::describe(py, e))?;
            format_from_python(&result).map_err(|e| Error::new(format!("negotiate returned {e}")))
        })
    }

    fn create(
        params: toml::Table,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<PythonStage> {
        runtime::ensure().map_err(Error::new)?;
        let cuda_stream = if ctx.domain == Domain::Cuda { ctx.cuda_stream } else { 0 };
        Python::attach(|py| {
            let class = classes::load(py, &params)?;
            let asarray = match ctx.domain {
                Domain::Cpu => Some(numpy_asarray(py)?),
                Domain::Cuda => None,
            };
            let formats =
                PyList::new(py, inputs.iter().map(|f| Format::of(*f))).map_err(|e| classes::describe(py, e))?;
            let context = context(ctx.stage, ctx.domain, ctx.device_ordinal, cuda_stream, 0);
            let args = (class_params(py, &params)?, formats, output.map(Format::of), context);
            let instance = class.call1(args).map_err(|e| classes::describe(py, e))?.unbind();
            if !instance.bind(py).hasattr("process").map_err(|e| classes::describe(py, e))? {
                bail!("class `{}` has no `process(self, inputs, output, ctx)` method", classes::class_name(&params));
            }
            Ok(PythonStage {
                instance,
                stage: ctx.stage.to_owned(),
                domain: ctx.domain,
                device: ctx.device_ordinal,
                asarray,
                foreign_streams: Arc::new(Mutex::new(Vec::new())),
            })
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        mut output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let result = Python::attach(|py| -> Result<()> {
            let asarray = self.asarray.as_ref().map(|a| a.bind(py).clone());
            let mut frames = Vec::with_capacity(inputs.len());
            for input in inputs {
                let bytes = match input.data() {
                    FrameData::Host(b) => Bytes::Host { addr: b.as_ptr() as usize, writable: false },
                    FrameData::Device(d) => self.device_bytes(d.addr, ctx.cuda_stream, false),
                };
                frames.push(self.frame(py, &input.info, &bytes, asarray.as_ref())?);
            }
            let out = match output.as_deref_mut() {
                None => None,
                Some(o) => {
                    let info = *o.info();
                    let bytes = match o.data() {
                        FrameDataMut::Host(b) => Bytes::Host { addr: b.as_mut_ptr() as usize, writable: true },
                        FrameDataMut::Device(d) => self.device_bytes(d.addr, ctx.cuda_stream, true),
                    };
                    Some(self.frame(py, &info, &bytes, asarray.as_ref())?)
                }
            };
            let frames = PyList::new(py, frames).map_err(|e| classes::describe(py, e))?;
            let context = context(&self.stage, self.domain, self.device, ctx.cuda_stream, ctx.frame_index);
            let args = (frames, out.as_ref().map(|o| o.clone_ref(py)), context);
            self.instance.bind(py).call_method1("process", args).map_err(|e| classes::describe(py, e))?;
            if let (Some(out), Some(o)) = (out, output)
                && out.get().ends_stream.load(std::sync::atomic::Ordering::Relaxed)
            {
                o.end_stream();
            }
            Ok(())
        });
        // Work a consumer put on a stream of its own is done before the frame is passed on.
        let foreign: Vec<usize> =
            std::mem::take(&mut *self.foreign_streams.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        for stream in foreign {
            gpuipc_plugin_api::cuda::synchronize_stream(stream)?;
        }
        result
    }

    fn flush(&mut self) -> Result<()> {
        Python::attach(|py| {
            let instance = self.instance.bind(py);
            if instance.hasattr("flush").map_err(|e| classes::describe(py, e))? {
                instance.call_method0("flush").map_err(|e| classes::describe(py, e))?;
            }
            Ok(())
        })
    }
}

impl PythonStage {
    fn device_bytes(&self, addr: u64, stream: usize, writable: bool) -> Bytes {
        Bytes::Device { addr, device: self.device.unwrap_or(0) as i32, stream, writable }
    }

    fn frame(
        &self,
        py: Python<'_>,
        info: &gpuipc_plugin_api::FrameInfo,
        bytes: &Bytes,
        asarray: Option<&Bound<'_, PyAny>>,
    ) -> Result<Py<Frame>> {
        let frame =
            Frame::new(py, info, bytes, asarray, &self.foreign_streams).map_err(|e| classes::describe(py, e))?;
        Py::new(py, frame).map_err(|e| classes::describe(py, e))
    }
}

fn context(stage: &str, domain: Domain, device: Option<u32>, cuda_stream: usize, frame_index: u64) -> Context {
    let domain = match domain {
        Domain::Cpu => "cpu",
        Domain::Cuda => "cuda",
    };
    Context { frame_index, stage: stage.to_owned(), domain, device, cuda_stream }
}

/// `numpy.asarray`, or why the cpu domain cannot run.
fn numpy_asarray(py: Python<'_>) -> Result<Py<PyAny>> {
    let numpy = py.import("numpy").map_err(|e| {
        Error::new(format!(
            "a python stage on the cpu hands frames as NumPy arrays, but `import numpy` failed for {}: {e} (install it for that interpreter, or set GPUIPC_PYTHON)",
            runtime::python_exe()
        ))
    })?;
    Ok(numpy.getattr("asarray").map_err(|e| classes::describe(py, e))?.unbind())
}

/// The class's own params: every key but `script`, `module` and `class`, as Python values.
fn class_params<'py>(py: Python<'py>, params: &toml::Table) -> Result<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in params.iter().filter(|(k, _)| !OWN_KEYS.contains(&k.as_str())) {
        dict.set_item(key, toml_to_python(py, value).map_err(|e| classes::describe(py, e))?)
            .map_err(|e| classes::describe(py, e))?;
    }
    Ok(dict)
}

fn toml_to_python<'py>(py: Python<'py>, value: &toml::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        toml::Value::String(s) => s.into_pyobject(py)?.into_any(),
        toml::Value::Integer(i) => i.into_pyobject(py)?.into_any(),
        toml::Value::Float(f) => f.into_pyobject(py)?.into_any(),
        toml::Value::Boolean(b) => b.into_pyobject(py)?.to_owned().into_any(),
        toml::Value::Datetime(d) => d.to_string().into_pyobject(py)?.into_any(),
        toml::Value::Array(items) => {
            PyList::new(py, items.iter().map(|v| toml_to_python(py, v)).collect::<PyResult<Vec<_>>>()?)?.into_any()
        }
        toml::Value::Table(t) => {
            let d = PyDict::new(py);
            for (k, v) in t {
                d.set_item(k, toml_to_python(py, v)?)?;
            }
            d.into_any()
        }
    })
}

/// What `negotiate` returned: a `Format`, a `(pixel, width, height)` tuple, or `None` (a sink).
fn format_from_python(value: &Bound<'_, PyAny>) -> std::result::Result<Option<FrameFormat>, String> {
    if value.is_none() {
        return Ok(None);
    }
    if let Ok(f) = value.extract::<Format>() {
        return f.to_frame_format().map(Some);
    }
    if let Ok(t) = value.cast::<PyTuple>()
        && let Ok((pixel, width, height)) = t.extract::<(String, u32, u32)>()
    {
        return Format { pixel, width, height }.to_frame_format().map(Some);
    }
    Err(format!("{value}; expected a gpuipc.Format, a (pixel, width, height) tuple, or None for a sink"))
}
