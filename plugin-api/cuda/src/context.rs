//! [`Gpu`]: one device's primary context, retained for the life of the value, and the one
//! non-blocking stream a stage does all its work on. Also the stream-ordered copies and
//! fills that stages enqueue on that stream, and [`RawStream`]: a context and stream someone
//! else owns, as a plugin is handed them.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUevent, CUstream};

use crate::driver::{self, check};
use crate::error::CudaError;
use crate::library;
use crate::log;

/// A CUDA stream owned by a [`Gpu`]. Only a `Gpu` makes one, so a `&Stream` always names a
/// live stream of a live context.
#[derive(Debug)]
pub struct Stream {
    raw: CUstream,
    /// The context the stream belongs to; events recorded on it must be of the same one.
    context: CUcontext,
}

impl Stream {
    /// The raw `CUstream`, for plugins (the ABI passes it as a pointer).
    pub fn as_ptr(&self) -> *mut c_void {
        self.raw as *mut c_void
    }

    pub(crate) fn raw(&self) -> CUstream {
        self.raw
    }

    pub(crate) fn context(&self) -> CUcontext {
        self.context
    }
}

/// One device's primary context and a non-blocking stream on it.
///
/// Every method makes the context current on the calling thread first (a thread-local
/// compare when it already is), so a `Gpu` may be used from any thread. Everything created
/// in the context ([`DeviceMemory`](crate::DeviceMemory), [`IpcEvent`](crate::IpcEvent),
/// [`PinnedHost`](crate::PinnedHost)) holds an `Arc<Gpu>`, so the context is released only
/// after all of them are gone.
#[derive(Debug)]
pub struct Gpu {
    ordinal: u32,
    device: CUdevice,
    context: CUcontext,
    stream: Stream,
    compute_capability: (u32, u32),
    vmm_posix_fd: bool,
    legacy_ipc: bool,
    ipc_events: bool,
}

// SAFETY: the driver API is thread-safe, and every method binds the context to the calling
// thread before using it (`bind`), so neither the context nor the stream depends on the
// thread that opened them.
unsafe impl Send for Gpu {}
// SAFETY: as above; `&Gpu` methods only enqueue work or query, which the driver serialises.
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Initialise the driver, retain the primary context of device `ordinal`, make it current
    /// on this thread and create one non-blocking stream (`CU_STREAM_NON_BLOCKING`: it does
    /// not synchronise with the legacy default stream that a plugin might use by mistake).
    pub fn open(ordinal: u32) -> Result<Gpu, CudaError> {
        let device = driver::device(ordinal)?;
        let support = driver::support(device, ordinal)?;
        let mut context: CUcontext = std::ptr::null_mut();
        // SAFETY: initialised (by `driver::device`); `device` came from cuDeviceGet; writes one
        // CUcontext. Balanced by cuDevicePrimaryCtxRelease in `Drop` or just below.
        check("cuDevicePrimaryCtxRetain", Some(ordinal), unsafe {
            sys::cuDevicePrimaryCtxRetain(&mut context, device)
        })?;
        let release = |e: CudaError| {
            // SAFETY: balances the retain above; nothing was created in the context yet.
            let r = unsafe { sys::cuDevicePrimaryCtxRelease_v2(device) };
            if let Err(r) = check("cuDevicePrimaryCtxRelease", Some(ordinal), r) {
                log::release_failed(None, &r);
            }
            e
        };
        // SAFETY: `context` is the retained primary context, valid until released.
        check("cuCtxSetCurrent", Some(ordinal), unsafe { sys::cuCtxSetCurrent(context) }).map_err(release)?;
        let mut stream: CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: the context is current; writes one CUstream.
        check("cuStreamCreate", Some(ordinal), unsafe { sys::cuStreamCreate(&mut stream, flags) }).map_err(release)?;
        Ok(Gpu {
            ordinal,
            device,
            context,
            stream: Stream { raw: stream, context },
            compute_capability: support.compute_capability,
            vmm_posix_fd: support.vmm_posix_fd,
            legacy_ipc: support.legacy_ipc,
            ipc_events: support.ipc_events,
        })
    }

    /// Make this context current on the calling thread if it is not already. Every method
    /// does this itself; call it before handing the raw context to code that expects it
    /// current (a plugin's `create`).
    pub fn bind(&self) -> Result<(), CudaError> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null if none is current).
        check("cuCtxGetCurrent", Some(self.ordinal), unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if current != self.context {
            // SAFETY: our retained context, valid while `self` lives.
            check("cuCtxSetCurrent", Some(self.ordinal), unsafe { sys::cuCtxSetCurrent(self.context) })?;
        }
        Ok(())
    }

    /// Whether the device can pin host memory that is mapped read-only
    /// (`CU_MEMHOSTREGISTER_READ_ONLY`).
    pub fn pins_read_only_memory(&self) -> Result<bool, CudaError> {
        use sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED as ATTR;
        Ok(driver::attribute(self.device, Some(self.ordinal), ATTR)? != 0)
    }

    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// (major, minor), e.g. (9, 0) for an H100.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.compute_capability
    }

    /// Whether the device shares memory through VMM POSIX file descriptors (the preferred
    /// transport); otherwise links fall back to legacy IPC handles.
    pub fn supports_vmm_fd(&self) -> bool {
        self.vmm_posix_fd
    }

    /// Whether the device shares memory through legacy `cuIpcGetMemHandle` handles.
    pub fn supports_legacy_ipc(&self) -> bool {
        self.legacy_ipc
    }

    /// Whether the device supports interprocess events.
    pub fn supports_ipc_events(&self) -> bool {
        self.ipc_events
    }

    /// The raw `CUcontext`, for plugins (the ABI passes it as a pointer).
    pub fn context_ptr(&self) -> *mut c_void {
        self.context as *mut c_void
    }

    /// The stage's stream.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The raw `CUstream` of [`Gpu::stream`], for plugins.
    pub fn stream_ptr(&self) -> *mut c_void {
        self.stream.as_ptr()
    }

    /// A fatal fault of this context (under MPS, of any client on its GPU), found without
    /// waiting: the stream's query answers with the fault's sticky error; done, still
    /// running, or any other answer is `None`. Callable from any thread.
    pub fn fault(&self) -> Option<CudaError> {
        if let Err(e) = self.bind() {
            return e.is_fatal_fault().then_some(e);
        }
        // SAFETY: our live stream; the query only reads its state.
        let r = unsafe { sys::cuStreamQuery(self.stream.raw) };
        crate::driver::event_done(Some(self.ordinal), r).err().filter(CudaError::is_fatal_fault)
    }

    /// Block until everything enqueued on the stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.bind()?;
        // SAFETY: our live stream.
        check("cuStreamSynchronize", Some(self.ordinal), unsafe { sys::cuStreamSynchronize(self.stream.raw) })
    }

    /// Enqueue a copy of `bytes` bytes from host memory at `src` to device address `dst`.
    ///
    /// Used through [`PinnedHost::upload`](crate::PinnedHost::upload), which checks the range.
    /// From pageable memory the driver stages the bytes before returning; from registered
    /// (pinned) memory the copy is truly asynchronous.
    ///
    /// # Safety
    /// `src..src+bytes` is readable host memory that stays valid and unchanged until the copy
    /// has run on the stream (synchronize, or wait for an event recorded after it).
    pub(crate) unsafe fn copy_htod_async(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        non_null("cuMemcpyHtoDAsync", src)?;
        self.bind()?;
        // SAFETY: the caller's contract covers the host range; a bad device address is
        // reported by the driver (or faults the GPU context), never touches host memory.
        check("cuMemcpyHtoDAsync", Some(self.ordinal), unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes, self.stream.raw)
        })
    }

    /// Enqueue a copy of `bytes` bytes from device address `src` to host memory at `dst`.
    ///
    /// Used through [`PinnedHost::download`](crate::PinnedHost::download), which checks the
    /// range, and [`Gpu::download`].
    ///
    /// # Safety
    /// `dst..dst+bytes` is writable host memory that nothing else reads or writes until the
    /// copy has run on the stream.
    pub(crate) unsafe fn copy_dtoh_async(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        non_null("cuMemcpyDtoHAsync", dst)?;
        self.bind()?;
        // SAFETY: the caller's contract covers the host range.
        check("cuMemcpyDtoHAsync", Some(self.ordinal), unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes, self.stream.raw)
        })
    }

    /// Copy `dst.len()` bytes from device address `src` into `dst`, after the work already on
    /// the stream, and wait for it. Not for the steady state: it blocks on the GPU.
    pub fn download(&self, src: u64, dst: &mut [u8]) -> Result<(), CudaError> {
        // SAFETY: `dst` is borrowed mutably until we return, and we return only after the
        // stream (and so the copy) is done. If synchronising fails the context has hit a
        // sticky error and runs nothing more, so the copy cannot land later.
        unsafe { self.copy_dtoh_async(dst.as_mut_ptr(), src, dst.len())? };
        self.synchronize()
    }

    /// Copy `src` to device address `dst`, after the work already on the stream, and wait for
    /// it. Not for the steady state: it blocks on the GPU.
    pub fn upload(&self, dst: u64, src: &[u8]) -> Result<(), CudaError> {
        // SAFETY: `src` is borrowed (so unchanged) until we return, and we return only after
        // the stream (and so the copy) is done. If synchronising fails the context has hit a
        // sticky error and runs nothing more, so the copy cannot read `src` later.
        unsafe { self.copy_htod_async(dst, src.as_ptr(), src.len())? };
        self.synchronize()
    }

    /// Enqueue a device-to-device copy of `bytes` bytes. Device addresses are not checked here
    /// (an invalid one is a driver error or a GPU fault, never host memory corruption).
    pub fn copy_dtod_async(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: device addresses only; no host memory is involved.
        check("cuMemcpyDtoDAsync", Some(self.ordinal), unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.stream.raw)
        })
    }

    /// Enqueue setting `bytes` bytes at device address `dst` to `value`.
    pub fn memset_d8_async(&self, dst: u64, value: u8, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: device addresses only.
        check("cuMemsetD8Async", Some(self.ordinal), unsafe {
            sys::cuMemsetD8Async(dst, value, bytes, self.stream.raw)
        })
    }

    /// Enqueue setting `words` 32-bit words at device address `dst` (a multiple of 4) to
    /// `value`.
    pub fn memset_d32_async(&self, dst: u64, value: u32, words: usize) -> Result<(), CudaError> {
        if words == 0 {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: device addresses only.
        check("cuMemsetD32Async", Some(self.ordinal), unsafe {
            sys::cuMemsetD32Async(dst, value, words, self.stream.raw)
        })
    }

    /// The device's streaming multiprocessors (`CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`).
    pub fn multiprocessor_count(&self) -> Result<u32, CudaError> {
        let n = driver::attribute(
            self.device,
            Some(self.ordinal),
            sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )?;
        Ok(n.max(1) as u32)
    }
}

fn non_null<T>(op: &'static str, p: *const T) -> Result<(), CudaError> {
    if p.is_null() { Err(CudaError::Invalid { op, reason: "null host pointer".into() }) } else { Ok(()) }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if let Err(e) = self.bind() {
            log::release_failed(Some(&format!("cannot make cuda:{}'s context current to close it", self.ordinal)), &e);
        }
        // SAFETY: our stream; nothing created in the context outlives `self` (they hold an
        // Arc<Gpu>), so nothing uses the stream after this. Work still queued completes first.
        let r = unsafe { sys::cuStreamDestroy_v2(self.stream.raw) };
        if let Err(e) = check("cuStreamDestroy", Some(self.ordinal), r) {
            log::release_failed(None, &e);
        }
        // SAFETY: balances the retain in `open`.
        let r = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
        if let Err(e) = check("cuDevicePrimaryCtxRelease", Some(self.ordinal), r) {
            log::release_failed(None, &e);
        }
    }
}

/// A context and one of its streams as raw handles (`CUcontext`, `CUstream`), owned by someone
/// else: the stage runner hands them to a plugin, which passes them (as a
/// [`Target`](crate::Target)) to [`Kernels::load`](crate::Kernels::load),
/// [`DeviceTable::upload`](crate::DeviceTable::upload) and
/// [`ScratchBuffer::zeroed`](crate::ScratchBuffer::zeroed).
/// Whether the handles are live cannot be checked (the runner vouches for that); what is
/// checked is that `context` is the one current on the calling thread before it is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawStream {
    pub context: usize,
    pub stream: usize,
}

impl Gpu {
    /// This `Gpu`'s context and stream as a plugin receives them.
    pub fn raw_stream(&self) -> RawStream {
        RawStream { context: self.context as usize, stream: self.stream.raw as usize }
    }
}

/// Wait on the host until everything enqueued on `stream` (a raw `CUstream` of the current
/// context, or 1 for the legacy default stream, 2 for the per-thread one) is done.
pub fn synchronize_stream(stream: usize) -> Result<(), CudaError> {
    library::driver()?;
    // SAFETY: cuStreamSynchronize reads only the handle; an invalid one is an error it returns.
    check("cuStreamSynchronize", None, unsafe { sys::cuStreamSynchronize(stream as CUstream) })
}

/// A second non-blocking stream of a [`Gpu`]'s context, destroyed on drop: work that runs
/// beside the stage's own stream (a link's copies of the next frames while the stage's
/// kernels work on this one). Holds an `Arc<Gpu>`, so the context outlives it.
#[derive(Debug)]
pub struct SideStream {
    gpu: Arc<Gpu>,
    stream: Stream,
}

// SAFETY: as for `Gpu`: the driver is thread-safe and every use binds the context first.
unsafe impl Send for SideStream {}
// SAFETY: as above.
unsafe impl Sync for SideStream {}

impl SideStream {
    pub fn new(gpu: &Arc<Gpu>) -> Result<SideStream, CudaError> {
        gpu.bind()?;
        let mut raw: CUstream = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: the context is current; writes one CUstream, destroyed in `Drop`.
        check("cuStreamCreate", Some(gpu.ordinal), unsafe { sys::cuStreamCreate(&mut raw, flags) })?;
        Ok(SideStream { gpu: gpu.clone(), stream: Stream { raw, context: gpu.context } })
    }

    /// The stream, for events to be recorded on or waited for.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// Enqueue a device-to-device copy of `bytes` bytes on this stream (either end may be
    /// another device's memory this context can reach). Addresses are not checked here (an
    /// invalid one is a driver error or a GPU fault, never host memory corruption).
    pub fn copy_dtod_async(&self, dst: u64, src: u64, bytes: usize) -> Result<(), CudaError> {
        if bytes == 0 {
            return Ok(());
        }
        self.gpu.bind()?;
        // SAFETY: device addresses only; no host memory is involved.
        check("cuMemcpyDtoDAsync", Some(self.gpu.ordinal), unsafe {
            sys::cuMemcpyDtoDAsync_v2(dst, src, bytes, self.stream.raw)
        })
    }

    /// Block until everything enqueued on this stream has finished.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.gpu.bind()?;
        // SAFETY: our live stream.
        check("cuStreamSynchronize", Some(self.gpu.ordinal), unsafe { sys::cuStreamSynchronize(self.stream.raw) })
    }
}

impl Drop for SideStream {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.bind() {
            log::release_failed(Some("destroying a side stream"), &e);
        }
        // SAFETY: our stream; work still queued on it completes first.
        let r = unsafe { sys::cuStreamDestroy_v2(self.stream.raw) };
        if let Err(e) = check("cuStreamDestroy", Some(self.gpu.ordinal), r) {
            log::release_failed(None, &e);
        }
    }
}

/// Orders work on one raw stream after another's, on the GPU: the host never blocks. For a
/// plugin that hands its frames to a library with a stream of its own (a Python stage's DLPack
/// consumer on another stream): that stream waits for the stage's before it reads, and the
/// stage's waits for it before the frame is passed on. One event of the context current when
/// it is made, destroyed on drop; each [`StreamOrder::order`] records it anew (a wait enqueued
/// before keeps the record it was enqueued on).
#[derive(Debug)]
pub struct StreamOrder {
    event: CUevent,
}

// SAFETY: a driver handle; the driver is thread-safe, and every use names its streams.
unsafe impl Send for StreamOrder {}
// SAFETY: as above.
unsafe impl Sync for StreamOrder {}

impl StreamOrder {
    /// An event of the context current on this thread; an error if none is.
    pub fn new() -> Result<StreamOrder, CudaError> {
        library::driver()?;
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null if none is current).
        check("cuCtxGetCurrent", None, unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if current.is_null() {
            return Err(CudaError::Invalid {
                op: "cuEventCreate",
                reason: "no CUDA context is current on this thread".to_owned(),
            });
        }
        let mut event: CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: a context is current; writes one CUevent.
        check("cuEventCreate", None, unsafe { sys::cuEventCreate(&mut event, flags) })?;
        Ok(StreamOrder { event })
    }

    /// Make `then` wait (on the GPU) for everything enqueued on `first` so far. Both are raw
    /// `CUstream`s of the event's context, or 1 for the legacy default stream, 2 for the
    /// per-thread one.
    pub fn order(&self, first: usize, then: usize) -> Result<(), CudaError> {
        // SAFETY: a live event; the driver checks the stream handle and returns an error for
        // one of another context.
        check("cuEventRecord", None, unsafe { sys::cuEventRecord(self.event, first as CUstream) })?;
        // SAFETY: as above; flags 0.
        check("cuStreamWaitEvent", None, unsafe { sys::cuStreamWaitEvent(then as CUstream, self.event, 0) })
    }
}

impl Drop for StreamOrder {
    fn drop(&mut self) {
        // SAFETY: our live event; waits already enqueued on it stay valid (the driver defers
        // the release until they complete).
        let r = unsafe { sys::cuEventDestroy_v2(self.event) };
        if let Err(e) = check("cuEventDestroy", None, r) {
            log::release_failed(None, &e);
        }
    }
}

impl RawStream {
    /// `Ok` with the context's device when `self.context` is current on this thread.
    pub(crate) fn require_current(&self) -> Result<CUdevice, CudaError> {
        library::driver()?;
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null if none is current).
        check("cuCtxGetCurrent", None, unsafe { sys::cuCtxGetCurrent(&mut current) })?;
        if self.context == 0 || current as usize != self.context {
            return Err(CudaError::NotCurrent { expected: self.context, current: current as usize });
        }
        let mut device: CUdevice = 0;
        // SAFETY: a context is current; writes its device.
        check("cuCtxGetDevice", None, unsafe { sys::cuCtxGetDevice(&mut device) })?;
        Ok(device)
    }
}
