//! [`SleepEvent`]: a local event a host thread sleeps on (`CU_EVENT_BLOCKING_SYNC`), so a
//! stage can bound how far its host runs ahead of its own GPU without spinning a core.
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent, CUresult};

use crate::context::{Gpu, Stream};
use crate::driver::check;
use crate::error::CudaError;
use crate::log;

/// A local event without timing whose [`SleepEvent::synchronize`] puts the calling thread to
/// sleep until the GPU reaches the record (the driver wakes it), where a plain event's would
/// spin. Holds an `Arc<Gpu>` so its context outlives it.
#[derive(Debug)]
pub struct SleepEvent {
    gpu: Arc<Gpu>,
    raw: CUevent,
}

// SAFETY: a driver handle; every use binds the context first and the driver is thread-safe.
unsafe impl Send for SleepEvent {}
// SAFETY: as above.
unsafe impl Sync for SleepEvent {}

impl SleepEvent {
    pub fn create(gpu: &Arc<Gpu>) -> Result<SleepEvent, CudaError> {
        gpu.bind()?;
        let flags =
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32 | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: the context is current; writes one CUevent.
        check("cuEventCreate", Some(gpu.ordinal()), unsafe { sys::cuEventCreate(&mut raw, flags) })?;
        Ok(SleepEvent { gpu: gpu.clone(), raw })
    }

    /// Record after everything enqueued on `stream` so far (a stream of this event's context).
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
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

    /// Sleep until the latest record has completed (at once if never recorded).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event.
        check("cuEventSynchronize", Some(self.gpu.ordinal()), unsafe { sys::cuEventSynchronize(self.raw) })
    }

    /// Whether the latest record has completed (also true if it was never recorded).
    pub fn query(&self) -> Result<bool, CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event.
        match unsafe { sys::cuEventQuery(self.raw) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => check("cuEventQuery", Some(self.gpu.ordinal()), other).map(|()| true),
        }
    }
}

impl Drop for SleepEvent {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.bind() {
            log::warn(&format!("destroying an event: {e}"));
        }
        // SAFETY: our live event.
        let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
        if let Err(e) = check("cuEventDestroy", Some(self.gpu.ordinal()), r) {
            log::warn(&e.to_string());
        }
    }
}
