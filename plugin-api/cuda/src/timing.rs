//! [`TimingEvent`]: a plain CUDA event that keeps its completion time, to measure GPU work
//! between two of them (`gpuipc-host bench`), and [`memory_in_use`].
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::sys::{self, CUevent};

use crate::context::{Gpu, Stream};
use crate::driver::check;
use crate::error::CudaError;
use crate::library;
use crate::log;

/// A local event with timing (flags 0). Holds an `Arc<Gpu>` so its context outlives it.
#[derive(Debug)]
pub struct TimingEvent {
    gpu: Arc<Gpu>,
    raw: CUevent,
}

// SAFETY: a driver handle; every use binds the context first and the driver is thread-safe.
unsafe impl Send for TimingEvent {}
// SAFETY: as above.
unsafe impl Sync for TimingEvent {}

impl TimingEvent {
    pub fn create(gpu: &Arc<Gpu>) -> Result<TimingEvent, CudaError> {
        library::timing()?;
        gpu.bind()?;
        let mut raw: CUevent = std::ptr::null_mut();
        // SAFETY: the context is current; writes one CUevent.
        check("cuEventCreate", Some(gpu.ordinal()), unsafe { sys::cuEventCreate(&mut raw, 0) })?;
        Ok(TimingEvent { gpu: gpu.clone(), raw })
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

    /// Block until the latest record has completed.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.gpu.bind()?;
        // SAFETY: a live event.
        check("cuEventSynchronize", Some(self.gpu.ordinal()), unsafe { sys::cuEventSynchronize(self.raw) })
    }

    /// Milliseconds of GPU time from `self`'s latest record to `end`'s, both completed (the
    /// driver's resolution is about half a microsecond).
    pub fn elapsed_ms(&self, end: &TimingEvent) -> Result<f32, CudaError> {
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

impl Drop for TimingEvent {
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

/// Bytes of `gpu`'s device memory in use now, by every process (total less free).
pub fn memory_in_use(gpu: &Gpu) -> Result<u64, CudaError> {
    library::timing()?;
    gpu.bind()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: the context is current; writes two integers.
    check("cuMemGetInfo", Some(gpu.ordinal()), unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok(total.saturating_sub(free) as u64)
}
