//! What a Python stage sees: frames whose planes view the ring slots they are in, their
//! info, formats, and the call's context. Nothing is copied: a plane hands Python the address
//! of its first row, its shape and strides (NumPy's array interface on the CPU; the CUDA array
//! interface and DLPack on the GPU). The views are valid for the call they are given to.

use std::sync::{Arc, Mutex};

use gpuipc_plugin_api::cuda::{CudaError, StreamOrder};
use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat, PlaneLayout};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// A frame format: `Format("rgb8", 1920, 1080)`.
#[pyclass(module = "gpuipc", frozen, eq)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    /// `rgb8`, `rgba8`, `gray8`, `i420`, `nv12` or `p010`.
    #[pyo3(get)]
    pub pixel: String,
    #[pyo3(get)]
    pub width: u32,
    #[pyo3(get)]
    pub height: u32,
}

#[pymethods]
impl Format {
    #[new]
    fn py_new(pixel: String, width: u32, height: u32) -> PyResult<Format> {
        if PixelFormat::from_name(&pixel).is_none() {
            return Err(PyValueError::new_err(format!(
                "unknown pixel format `{pixel}`; one of {}",
                PixelFormat::ALL.map(PixelFormat::name).join(", ")
            )));
        }
        Ok(Format { pixel, width, height })
    }

    fn __repr__(&self) -> String {
        format!("Format('{}', {}, {})", self.pixel, self.width, self.height)
    }
}

impl Format {
    pub fn of(f: FrameFormat) -> Format {
        let pixel = f.pixel_format().map_or("unknown", PixelFormat::name).to_owned();
        Format { pixel, width: f.width, height: f.height }
    }

    pub fn to_frame_format(&self) -> Result<FrameFormat, String> {
        let pixel =
            PixelFormat::from_name(&self.pixel).ok_or_else(|| format!("unknown pixel format `{}`", self.pixel))?;
        Ok(FrameFormat::new(pixel, self.width, self.height))
    }
}

/// What a frame is: its number, stamp, format and plane layouts. The format and the layout
/// are made into Python objects when read, so a stage that never reads them does not pay for
/// them on every frame.
#[pyclass(module = "gpuipc", frozen)]
pub struct FrameInfo {
    /// The sequence number the source gave it.
    #[pyo3(get)]
    seq: u64,
    /// When the source made it, nanoseconds since the Unix epoch.
    #[pyo3(get)]
    timestamp_ns: u64,
    frame_format: FrameFormat,
    frame_layout: FrameLayout,
}

#[pymethods]
impl FrameInfo {
    #[getter]
    fn format(&self) -> Format {
        Format::of(self.frame_format)
    }

    #[getter]
    fn width(&self) -> u32 {
        self.frame_format.width
    }

    #[getter]
    fn height(&self) -> u32 {
        self.frame_format.height
    }

    /// One dict per plane: `offset`, `pitch`, `row_bytes`, `rows` (bytes; rows).
    #[getter]
    fn layout<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let mut layouts = Vec::new();
        for plane in self.frame_layout.planes() {
            let d = PyDict::new(py);
            d.set_item("offset", plane.offset)?;
            d.set_item("pitch", plane.pitch)?;
            d.set_item("row_bytes", plane.row_bytes)?;
            d.set_item("rows", plane.rows)?;
            layouts.push(d);
        }
        PyList::new(py, layouts)
    }

    fn __repr__(&self) -> String {
        format!("FrameInfo(seq={}, format={})", self.seq, self.format().__repr__())
    }
}

/// One frame: `planes` (a tuple with an array per plane) and `info`; a source's output frame
/// also has `end_stream()`.
#[pyclass(module = "gpuipc", frozen)]
pub struct Frame {
    #[pyo3(get)]
    planes: Py<PyTuple>,
    #[pyo3(get)]
    info: Py<FrameInfo>,
    /// Set by `end_stream()`: this frame is not made, and the stream ends.
    pub ends_stream: std::sync::atomic::AtomicBool,
}

#[pymethods]
impl Frame {
    /// A source has no more frames: this one is not passed on, and its stream ends (only an
    /// output frame, and only a source's, may end the stream).
    fn end_stream(&self) {
        self.ends_stream.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Frame {
    /// A frame of `info` whose planes are `planes` ([`planes`]).
    pub fn new(py: Python<'_>, info: &gpuipc_plugin_api::FrameInfo, planes: Py<PyTuple>) -> PyResult<Frame> {
        let info = FrameInfo {
            seq: info.seq,
            timestamp_ns: info.timestamp_ns,
            frame_format: info.format,
            frame_layout: info.layout,
        };
        Ok(Frame { planes, info: Py::new(py, info)?, ends_stream: std::sync::atomic::AtomicBool::new(false) })
    }
}

/// Where a frame's bytes are, as the plugin API hands them over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bytes {
    Host { addr: usize, writable: bool },
    Device { addr: u64, device: i32, stream: usize, writable: bool },
}

/// The planes of a frame of `format` laid out as `layout` in `bytes`, a view each: NumPy
/// arrays on the host (`asarray`: NumPy's `asarray`), [`GpuPlane`]s on the GPU. They depend on
/// nothing else, so a stage keeps them for the slot they view ([`crate::stage`]).
pub fn planes(
    py: Python<'_>,
    format: FrameFormat,
    layout: &FrameLayout,
    bytes: &Bytes,
    asarray: Option<&Bound<'_, PyAny>>,
    streams: &Arc<ForeignStreams>,
) -> PyResult<Py<PyTuple>> {
    let pixel = format.pixel_format().ok_or_else(|| PyValueError::new_err("a frame of unknown pixel format"))?;
    let dtype = Dtype::of(pixel);
    let mut planes = Vec::new();
    for (index, plane) in layout.planes().iter().enumerate() {
        let (shape, strides) = plane_view(pixel, index, plane);
        let view: Py<PyAny> = match *bytes {
            Bytes::Host { addr, writable } => {
                let plane = HostPlane { addr: addr + plane.offset as usize, shape, strides, dtype, writable };
                let plane = Bound::new(py, plane)?.into_any();
                match asarray {
                    Some(asarray) => asarray.call1((plane,))?.unbind(),
                    None => plane.unbind(),
                }
            }
            Bytes::Device { addr, device, stream, writable } => Py::new(
                py,
                GpuPlane {
                    addr: addr + plane.offset,
                    shape,
                    strides,
                    dtype,
                    writable,
                    device,
                    stream,
                    streams: streams.clone(),
                },
            )?
            .into_any(),
        };
        planes.push(view);
    }
    Ok(PyTuple::new(py, planes)?.unbind())
}

/// The streams other than the stage's that its GPU planes were handed to during a call, and
/// the event that orders them with the stage's stream on the GPU (made at the first such
/// hand-over, in the stage's context).
#[derive(Debug, Default)]
pub struct ForeignStreams {
    order: Mutex<(Option<StreamOrder>, Vec<usize>)>,
}

impl ForeignStreams {
    /// `theirs` is to read or write a plane: it waits for what `ours` has enqueued so far (the
    /// wait for the frame), and `ours` will wait for it at the end of the call.
    fn hand_over(&self, ours: usize, theirs: usize) -> Result<(), CudaError> {
        let mut guard = self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (order, seen) = &mut *guard;
        let order = match order {
            Some(order) => order,
            None => order.insert(StreamOrder::new()?),
        };
        order.order(ours, theirs)?;
        if !seen.contains(&theirs) {
            seen.push(theirs);
        }
        Ok(())
    }

    /// The end of a call: `ours` waits for every stream a plane was handed to, so the frame
    /// is passed on (and the inputs released) after their work.
    pub fn take_back(&self, ours: usize) -> Result<(), CudaError> {
        let mut guard = self.order.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (order, seen) = &mut *guard;
        if let Some(order) = order {
            for theirs in seen.drain(..) {
                order.order(theirs, ours)?;
            }
        }
        Ok(())
    }
}

/// The shape and strides (in bytes) of the array viewing plane `index` of a `pixel` frame laid
/// out as `plane`: `rows × columns × channels` for interleaved planes, `rows × columns` for
/// single-channel ones, in elements of [`Dtype::of`] `pixel`.
fn plane_view(pixel: PixelFormat, index: usize, plane: &PlaneLayout) -> (Vec<u64>, Vec<u64>) {
    let channels = u64::from(channels(pixel, index));
    let item = Dtype::of(pixel).bytes;
    if channels > 1 {
        (vec![plane.rows, plane.row_bytes / (channels * item), channels], vec![plane.pitch, channels * item, item])
    } else {
        (vec![plane.rows, plane.row_bytes / item], vec![plane.pitch, item])
    }
}

/// Samples per pixel of plane `index` of a `pixel` frame: the last axis of its array when
/// more than 1.
fn channels(pixel: PixelFormat, index: usize) -> u32 {
    match (pixel, index) {
        (PixelFormat::Rgb8, _) => 3,
        (PixelFormat::Rgba8, _) => 4,
        (PixelFormat::Nv12 | PixelFormat::P010, 1) => 2,
        _ => 1,
    }
}

/// The element type of a frame's planes: `uint8`, or for `p010` little-endian `uint16` (each
/// sample's 10-bit value in its high bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dtype {
    /// Bytes of one element.
    bytes: u64,
    /// The array interface's `typestr`.
    typestr: &'static str,
}

impl Dtype {
    const U8: Dtype = Dtype { bytes: 1, typestr: "|u1" };
    const U16_LE: Dtype = Dtype { bytes: 2, typestr: "<u2" };

    fn of(pixel: PixelFormat) -> Dtype {
        match pixel {
            PixelFormat::P010 => Dtype::U16_LE,
            PixelFormat::Rgb8 | PixelFormat::Rgba8 | PixelFormat::Gray8 | PixelFormat::I420 | PixelFormat::Nv12 => {
                Dtype::U8
            }
        }
    }
}

/// The array interface both kinds of plane give (version 3; elements of `dtype`, read-only
/// unless `writable`): NumPy's on the CPU, the CUDA one on the GPU, which adds the stream.
fn array_interface<'py>(
    py: Python<'py>,
    addr: u64,
    shape: &[u64],
    strides: &[u64],
    dtype: Dtype,
    writable: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("version", 3)?;
    d.set_item("shape", PyTuple::new(py, shape)?)?;
    d.set_item("strides", PyTuple::new(py, strides)?)?;
    d.set_item("typestr", dtype.typestr)?;
    d.set_item("data", (addr, !writable))?;
    Ok(d)
}

/// A plane in host memory, for `numpy.asarray`: NumPy's array interface (version 3).
#[pyclass(module = "gpuipc", frozen)]
pub struct HostPlane {
    addr: usize,
    shape: Vec<u64>,
    /// In bytes.
    strides: Vec<u64>,
    dtype: Dtype,
    writable: bool,
}

#[pymethods]
impl HostPlane {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        array_interface(py, self.addr as u64, &self.shape, &self.strides, self.dtype, self.writable)
    }
}

/// A plane in GPU memory: the CUDA array interface (version 3) and DLPack, for PyTorch, CuPy,
/// Numba and anything else that takes either. Work on it belongs on the stage's stream
/// (`ctx.cuda_stream`); a consumer that asks for it on another stream gets the frame after the
/// stage's stream is done with what it had, and the stage's stream waits for that stream after
/// the call (both on the GPU, with an event).
#[pyclass(module = "gpuipc", frozen)]
pub struct GpuPlane {
    addr: u64,
    shape: Vec<u64>,
    /// In bytes.
    strides: Vec<u64>,
    dtype: Dtype,
    writable: bool,
    device: i32,
    stream: usize,
    streams: Arc<ForeignStreams>,
}

#[pymethods]
impl GpuPlane {
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = array_interface(py, self.addr, &self.shape, &self.strides, self.dtype, self.writable)?;
        // The consumer makes its stream wait for ours.
        d.set_item("stream", self.stream)?;
        Ok(d)
    }

    #[pyo3(signature = (stream = None, **_kwargs))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<usize>,
        _kwargs: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        if let Some(theirs) = stream.filter(|&s| s != self.stream) {
            // Another stream: it waits on the GPU for ours (the wait for the frame), and
            // ours for it at the end of the call; the host never blocks.
            self.streams.hand_over(self.stream, theirs).map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        let shape: Vec<i64> = self.shape.iter().map(|&v| v as i64).collect();
        // DLPack counts strides in elements: a pitch that is no whole number of them (never
        // in a ring's layout, whose pitches are multiples of 64) cannot be described.
        let item = self.dtype.bytes;
        if let Some(odd) = self.strides.iter().find(|&&s| s % item != 0) {
            return Err(PyValueError::new_err(format!(
                "a stride of {odd} bytes is no whole number of {item}-byte elements"
            )));
        }
        let strides: Vec<i64> = self.strides.iter().map(|&v| (v / item) as i64).collect();
        crate::dlpack::capsule(py, self.addr, &shape, &strides, self.device, (item * 8) as u8)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (crate::dlpack::DEVICE_CUDA, self.device)
    }
}

/// The call's context: `frame_index`, `stage`, `domain`, `device` and `cuda_stream` (a raw
/// `CUstream`: `torch.cuda.ExternalStream(ctx.cuda_stream)`, `cupy.cuda.ExternalStream(...)`).
#[pyclass(module = "gpuipc", frozen)]
pub struct Context {
    /// Frames this instance processed before this call (0 in `__init__`).
    #[pyo3(get)]
    pub frame_index: u64,
    #[pyo3(get)]
    pub stage: Py<pyo3::types::PyString>,
    /// `cpu` or `cuda`.
    #[pyo3(get)]
    pub domain: &'static str,
    /// The CUDA device ordinal, `None` on the cpu.
    #[pyo3(get)]
    pub device: Option<u32>,
    /// The stage's CUDA stream as an integer, 0 on the cpu.
    #[pyo3(get)]
    pub cuda_stream: usize,
}
