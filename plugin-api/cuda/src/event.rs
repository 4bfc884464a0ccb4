//! CUDA events: [`RawEvent`], the one owner of an event handle that the event types are made
//! of, and [`IpcEvent`], an event shared between processes, the GPU half of the link protocol
//! (DESIGN.md, "Synchronisation"). An event only means its latest record; the host counters
//! in the ring make sure a record is never replaced before the other side enqueued its wait.
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent};

use crate::context::{Gpu, Stream};
use crate::driver::{check, event_done};
use crate::error::CudaError;
use crate::log;
use crate::memory::{handle_bytes, handle_chars};

/// An event of `gpu`'s context, destroyed on drop: what [`IpcEvent`],
/// [`TimingEvent`](crate::TimingEvent) and [`SleepEvent`](crate::SleepEvent) are made of, each
/// with its own flags. Holds an `Arc<Gpu>` so its context outlives it; every call binds that
/// context first.
#[derive(Debug)]
pub(crate) struct RawEvent {
    gpu: Arc<Gpu>,
    raw: CUevent,
}

// SAFETY: a driver handle; every use binds the context first and the driver is thread-safe.
unsafe impl Send for RawEvent {}
// SAFETY: as above.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// A new event with `flags` (`CUevent_flags`) in `gpu`'s context.
    pub(crate) fn create(gpu: &Arc<Gpu>, flags: u32) -> Result<RawEvent, CudaError> {
        gpu.bind()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: the context is current; writes one CUevent.
        check("cuEventCreate", Some(gpu.ordinal()), unsafe { sys::cuEventCreate(&mut raw, flags) })?;
        Ok(RawEvent { gpu: gpu.clone(), raw })
    }

    /// Record after everything enqueued on `stream` so far (a stream of this event's context).
    pub(crate) fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        if stream.context() != self.gpu.stream().context() {
            return Err(CudaError::Invalid {
                op: "cuEventRecord",
                reason: format!("the stream is not of cuda:{}'s context, the event's", self.gpu.ordinal()),
            });
        }
        self.gpu.bind()?;
        // SAFETY: a live event and a live stream of the same context.
        check("cuEventRecord", Some(self.gpu.ordinal()), unsafe { sys::cuEventRecord(self.raw, stream.raw()) })
    }

    /// Make `stream` wait (on the GPU; the host does not block) until the latest record has
    /// completed. The stream may be of another context.
    pub(crate) fn wait_on(&self, stream: &Stream) -> Result<(), CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event and a live stream; flags 0.
        check("cuStreamWaitEvent", Some(self.gpu.ordinal()), unsafe {
            sys::cuStreamWaitEvent(stream.raw(), self.raw, 0)
        })
    }

    /// Block until the latest record has completed (how, the event's flags say).
    pub(crate) fn synchronize(&self) -> Result<(), CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event.
        check("cuEventSynchronize", Some(self.gpu.ordinal()), unsafe { sys::cuEventSynchronize(self.raw) })
    }

    /// Whether the latest record has completed (also true if it was never recorded).
    pub(crate) fn query(&self) -> Result<bool, CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event.
        event_done(Some(self.gpu.ordinal()), unsafe { sys::cuEventQuery(self.raw) })
    }

    /// Milliseconds of GPU time from this event's latest record to `end`'s, both completed
    /// and both made with timing (flags without `CU_EVENT_DISABLE_TIMING`).
    pub(crate) fn elapsed_ms(&self, end: &RawEvent) -> Result<f32, CudaError> {
        self.gpu.bind()?;
        let mut ms = 0f32;
        // SAFETY: two live events of the same context, both recorded and completed (else the
        // driver returns an error, which is checked); writes one float.
        check("cuEventElapsedTime", Some(self.gpu.ordinal()), unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, self.raw, end.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.bind() {
            log::release_failed(Some("destroying an event"), &e);
        }
        // SAFETY: our live event; waits already enqueued on it stay valid (the driver defers
        // the release until they complete).
        let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
        if let Err(e) = check("cuEventDestroy", Some(self.gpu.ordinal()), r) {
            log::release_failed(None, &e);
        }
    }
}

/// An interprocess event (`CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS`), created here or
/// opened from another process's handle. Holds an `Arc<Gpu>` so its context outlives it.
///
/// The driver leaves using an opened event after its creator destroyed it undefined, so a
/// creator keeps its events while the other processes of the link still use theirs.
#[derive(Debug)]
pub struct IpcEvent(RawEvent);

impl IpcEvent {
    /// A new interprocess event and the 64-byte handle another process opens it with.
    pub fn create(gpu: &Arc<Gpu>) -> Result<(IpcEvent, [u8; 64]), CudaError> {
        if !gpu.supports_ipc_events() {
            return Err(CudaError::Invalid {
                op: "cuEventCreate",
                reason: format!("cuda:{} does not support interprocess events", gpu.ordinal()),
            });
        }
        // Interprocess events must also disable timing.
        let flags =
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32 | sys::CUevent_flags::CU_EVENT_INTERPROCESS as u32;
        let event = RawEvent::create(gpu, flags)?;
        let mut handle = sys::CUipcEventHandle { reserved: [0; 64] };
        // SAFETY: a live interprocess event (its context bound by `create`); writes one
        // handle. On error `event` is destroyed.
        check("cuIpcGetEventHandle", Some(gpu.ordinal()), unsafe { sys::cuIpcGetEventHandle(&mut handle, event.raw) })?;
        Ok((IpcEvent(event), handle_bytes(&handle.reserved)))
    }

    /// Open an event another process made with [`IpcEvent::create`]. It behaves like a local
    /// event without timing; records and waits on either side refer to the same event.
    pub fn open(gpu: &Arc<Gpu>, handle: [u8; 64]) -> Result<IpcEvent, CudaError> {
        gpu.bind()?;
        let mut raw: CUevent = std::ptr::null_mut();
        let handle = sys::CUipcEventHandle { reserved: handle_chars(&handle) };
        // SAFETY: the context is current; writes one CUevent.
        check("cuIpcOpenEventHandle", Some(gpu.ordinal()), unsafe { sys::cuIpcOpenEventHandle(&mut raw, handle) })?;
        Ok(IpcEvent(RawEvent { gpu: gpu.clone(), raw }))
    }

    /// Record the event after everything enqueued on `stream` so far. The stream must belong
    /// to this event's context.
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        self.0.record(stream)
    }

    /// Make `stream` wait (on the GPU; the host does not block) until the event's latest
    /// record has completed. The stream may be of another context.
    pub fn wait_on(&self, stream: &Stream) -> Result<(), CudaError> {
        self.0.wait_on(stream)
    }

    /// Block the calling thread until the event's latest record has completed.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.0.synchronize()
    }

    /// Whether the event's latest record has completed (also true if it was never recorded).
    pub fn query(&self) -> Result<bool, CudaError> {
        self.0.query()
    }
}
