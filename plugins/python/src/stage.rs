//! The python stage: a Python class named by `params` does the work; this side loads it,
//! hands it each frame without a copy and turns its exceptions into the stage's errors.

use std::sync::Arc;

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameData, FrameDataMut, FrameFormat, InputFrame, OutputFrame, ParamInfo,
    PixelFormat, Plugin, PluginInfo, ProcessContext, Result, bail,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::frames::{Bytes, Context, ForeignStreams, Format, Frame};
use crate::{classes, runtime};

/// Most inputs a Python stage may have.
pub const MAX_INPUTS: u32 = 8;

/// The keys this side reads; every other key of `params` is the class's.
const OWN_KEYS: [&str; 3] = ["script", "module", "class"];

/// Most sets of planes a stage keeps ([`PythonStage::planes`]): a ring's slots per input and
/// output, with room for rings made anew after a restart.
const KEPT_PLANES: usize = 64;

/// A python stage instance: the Python object, and what each call needs.
pub struct PythonStage {
    instance: Py<PyAny>,
    /// The stage's name, made into a Python string once.
    stage: Py<PyString>,
    domain: Domain,
    device: Option<u32>,
    /// `numpy.asarray`, in the cpu domain.
    asarray: Option<Py<PyAny>>,
    /// Streams other than the stage's that a GPU plane was handed to in this call.
    foreign_streams: Arc<ForeignStreams>,
    /// The planes of the slots seen so far: a slot's planes depend only on where its bytes
    /// are and how they are laid out, so each is made once, not on every frame (most of a
    /// no-op stage's cost otherwise; docs/benchmarks.md, "What a Python stage costs a frame").
    planes: Vec<(PlaneKey, Py<PyTuple>)>,
    /// Where the calls' time went, logged at debug level at the end of the stream.
    times: CallTimes,
}

/// The time of every `process` call, in its parts (nanoseconds, summed over the calls): the
/// breakdown `scripts/bench-python.sh` shows with `GPUIPC_LOG=info,plugin=debug`. Four clock
/// reads a call (about 0.1 µs).
#[derive(Debug, Default)]
struct CallTimes {
    calls: u64,
    /// Taking the GIL (`Python::attach`).
    gil: u64,
    /// Making the call's frames, their infos, its context and arguments.
    frames: u64,
    /// The class's `process`, with whatever it calls back (`__dlpack__` included).
    python: u64,
    /// Ordering the stage's stream after the streams planes were handed to, and letting go
    /// of the GIL.
    after: u64,
}

impl CallTimes {
    fn report(&self) -> String {
        let per = |ns: u64| ns as f64 / 1000.0 / self.calls.max(1) as f64;
        format!(
            "{} calls; µs a call: {:.2} GIL, {:.2} frames and arguments, {:.2} the class's process, {:.2} stream order and release; {:.2} in all",
            self.calls,
            per(self.gil),
            per(self.frames),
            per(self.python),
            per(self.after),
            per(self.gil + self.frames + self.python + self.after),
        )
    }
}

/// What a set of planes views: a slot's bytes, their format and layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PlaneKey {
    bytes: Bytes,
    format: FrameFormat,
    layout: gpuipc_plugin_api::FrameLayout,
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
            let stage = PyString::new(py, ctx.stage).unbind();
            let context = context(py, &stage, ctx.domain, ctx.device_ordinal, cuda_stream, 0);
            let args = (class_params(py, &params)?, formats, output.map(Format::of), context);
            let instance = class.call1(args).map_err(|e| classes::describe(py, e))?.unbind();
            if !instance.bind(py).hasattr("process").map_err(|e| classes::describe(py, e))? {
                bail!("class `{}` has no `process(self, inputs, output, ctx)` method", classes::class_name(&params));
            }
            Ok(PythonStage {
                instance,
                stage,
                domain: ctx.domain,
                device: ctx.device_ordinal,
                asarray,
                foreign_streams: Arc::new(ForeignStreams::default()),
                planes: Vec::new(),
                times: CallTimes::default(),
            })
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        mut output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let entered = std::time::Instant::now();
        let mut marks = [entered; 3];
        let result = Python::attach(|py| -> Result<()> {
            marks[0] = std::time::Instant::now();
            let mut frames = Vec::with_capacity(inputs.len());
            for input in inputs {
                let bytes = match input.data() {
                    FrameData::Host(b) => Bytes::Host { addr: b.as_ptr() as usize, writable: false },
                    FrameData::Device(d) => self.device_bytes(d.addr, ctx.cuda_stream, false),
                };
                frames.push(self.frame(py, &input.info, bytes)?);
            }
            let out = match output.as_deref_mut() {
                None => None,
                Some(o) => {
                    let info = *o.info();
                    let bytes = match o.data() {
                        FrameDataMut::Host(b) => Bytes::Host { addr: b.as_mut_ptr() as usize, writable: true },
                        FrameDataMut::Device(d) => self.device_bytes(d.addr, ctx.cuda_stream, true),
                    };
                    Some(self.frame(py, &info, bytes)?)
                }
            };
            let frames = PyList::new(py, frames).map_err(|e| classes::describe(py, e))?;
            let context = context(py, &self.stage, self.domain, self.device, ctx.cuda_stream, ctx.frame_index);
            let args = (frames, out.as_ref().map(|o| o.clone_ref(py)), context);
            marks[1] = std::time::Instant::now();
            let called = self.instance.bind(py).call_method1(pyo3::intern!(py, "process"), args);
            marks[2] = std::time::Instant::now();
            called.map_err(|e| classes::describe(py, e))?;
            if let (Some(out), Some(o)) = (out, output)
                && out.get().ends_stream.load(std::sync::atomic::Ordering::Relaxed)
            {
                o.end_stream();
            }
            Ok(())
        });
        // Work a consumer put on a stream of its own is done before the frame is passed on:
        // the stage's stream waits for it (on the GPU).
        let ordered = self.foreign_streams.take_back(ctx.cuda_stream);
        let t = &mut self.times;
        t.calls += 1;
        t.gil += (marks[0] - entered).as_nanos() as u64;
        t.frames += (marks[1].max(marks[0]) - marks[0]).as_nanos() as u64;
        t.python += (marks[2].max(marks[1]) - marks[1]).as_nanos() as u64;
        t.after += marks[2].elapsed().as_nanos() as u64;
        ordered?;
        result
    }

    fn flush(&mut self) -> Result<()> {
        gpuipc_plugin_api::debug!("python stage: {}", self.times.report());
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

    /// The frame of `info` in `bytes`, with the planes kept for that slot (made on its first
    /// frame).
    fn frame(&mut self, py: Python<'_>, info: &gpuipc_plugin_api::FrameInfo, bytes: Bytes) -> Result<Py<Frame>> {
        let key = PlaneKey { bytes, format: info.format, layout: info.layout };
        let planes = match self.planes.iter().find(|(k, _)| *k == key) {
            Some((_, planes)) => planes.clone_ref(py),
            None => {
                let asarray = self.asarray.as_ref().map(|a| a.bind(py));
                let planes =
                    crate::frames::planes(py, info.format, &info.layout, &bytes, asarray, &self.foreign_streams)
                        .map_err(|e| classes::describe(py, e))?;
                if self.planes.len() == KEPT_PLANES {
                    self.planes.clear();
                }
                self.planes.push((key, planes.clone_ref(py)));
                planes
            }
        };
        let frame = Frame::new(py, info, planes).map_err(|e| classes::describe(py, e))?;
        Py::new(py, frame).map_err(|e| classes::describe(py, e))
    }
}

fn context(
    py: Python<'_>,
    stage: &Py<PyString>,
    domain: Domain,
    device: Option<u32>,
    cuda_stream: usize,
    frame_index: u64,
) -> Context {
    let domain = match domain {
        Domain::Cpu => "cpu",
        Domain::Cuda => "cuda",
    };
    Context { frame_index, stage: stage.clone_ref(py), domain, device, cuda_stream }
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
