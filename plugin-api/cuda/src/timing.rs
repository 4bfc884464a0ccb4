//! [`TimingEvent`]: a plain CUDA event that keeps its completion time, to measure GPU work
//! between two of them (`gpuipc-host bench`); `LocalEvent`, what it shares with
//! [`crate::SleepEvent`]; and [`memory_in_use`].
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent};

use crate::context::{Gpu, Stream};
use crate::driver::{check, event_done};
use crate::error::CudaError;
use crate::library;
use crate::log;

/// A local event (not interprocess) with the given flags: what [`TimingEvent`] and
/// [`crate::SleepEvent`] share. Holds an `Arc<Gpu>` so its context outlives it.
#[derive(Debug)]
pub(crate) struct LocalEvent {
    gpu: Arc<Gpu>,
    raw: CUevent,
}

// SAFETY: a driver handle; every use binds the context first and the driver is thread-safe.
unsafe impl Send for LocalEvent {}
// SAFETY: as above.
unsafe impl Sync for LocalEvent {}

impl LocalEvent {
    pub(crate) fn create(gpu: &Arc<Gpu>, flags: u32) -> Result<LocalEvent, CudaError> {
        gpu.bind()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: the context is current; writes one CUevent.
        check("cuEventCreate", Some(gpu.ordinal()), unsafe { sys::cuEventCreate(&mut raw, flags) })?;
        Ok(LocalEvent { gpu: gpu.clone(), raw })
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
}

impl Drop for LocalEvent {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.bind() {
            log::release_failed(Some("destroying an event"), &e);
        }
        // SAFETY: our live event.
        let r = unsafe { sys::cuEventDestroy_v2(self.raw) };
        if let Err(e) = check("cuEventDestroy", Some(self.gpu.ordinal()), r) {
            log::release_failed(None, &e);
        }
    }
}

/// A local event with timing (flags 0).
#[derive(Debug)]
pub struct TimingEvent(LocalEvent);

impl TimingEvent {
    pub fn create(gpu: &Arc<Gpu>) -> Result<TimingEvent, CudaError> {
        library::timing()?;
        Ok(TimingEvent(LocalEvent::create(gpu, 0)?))
    }

    /// Record after everything enqueued on `stream` so far (a stream of this event's context).
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        self.0.record(stream)
    }

    /// Block until the latest record has completed.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.0.synchronize()
    }

    /// Milliseconds of GPU time from `self`'s latest record to `end`'s, both completed (the
    /// driver's resolution is about half a microsecond).
    pub fn elapsed_ms(&self, end: &TimingEvent) -> Result<f32, CudaError> {
        self.0.gpu.bind()?;
        let mut ms = 0f32;
        // SAFETY: two live events of the same context, both recorded and completed (else the
        // driver returns an error, which is checked); writes one float.
        check("cuEventElapsedTime", Some(self.0.gpu.ordinal()), unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, self.0.raw, end.0.raw)
        })?;
        Ok(ms)
    }
}

/// Bytes of `gpu`'s device memory in use now, by every process (total less free).
pub fn memory_in_use(gpu: &Gpu) -> Result<u64, CudaError> {
    library::timing()?;
    gpu.bind()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: the context is current; writes two integers.
    check("cuMemGetInfo", Some(gpu.ordinal()), unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok(total.saturating_sub(free) as u64)
}
