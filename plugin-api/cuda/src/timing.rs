//! [`TimingEvent`]: a plain CUDA event that keeps its completion time, to measure GPU work
//! between two of them (`gpuipc-host bench`); and [`memory_in_use`].
#![allow(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::{Gpu, Stream};
use crate::driver::check;
use crate::error::CudaError;
use crate::event::RawEvent;
use crate::library;

/// A local event with timing (flags 0).
#[derive(Debug)]
pub struct TimingEvent(RawEvent);

impl TimingEvent {
    pub fn create(gpu: &Arc<Gpu>) -> Result<TimingEvent, CudaError> {
        library::timing()?;
        Ok(TimingEvent(RawEvent::create(gpu, 0)?))
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
        self.0.elapsed_ms(&end.0)
    }
}

/// Bytes of `gpu`'s device memory in use now, by every process (total less free).
pub fn memory_in_use(gpu: &Gpu) -> Result<u64, CudaError> {
    memory_info(gpu).map(|(used, _)| used)
}

/// Bytes of `gpu`'s device memory in use now, by every process, and in all: `(used, total)`.
pub fn memory_info(gpu: &Gpu) -> Result<(u64, u64), CudaError> {
    library::timing()?;
    gpu.bind()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: the context is current; writes two integers.
    check("cuMemGetInfo", Some(gpu.ordinal()), unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) })?;
    Ok((total.saturating_sub(free) as u64, total as u64))
}
