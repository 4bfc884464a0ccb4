//! [`SleepEvent`]: a local event a host thread sleeps on (`CU_EVENT_BLOCKING_SYNC`), so a
//! stage can bound how far its host runs ahead of its own GPU without spinning a core.

use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::{Gpu, Stream};
use crate::error::CudaError;
use crate::event::RawEvent;

/// A local event without timing whose [`SleepEvent::synchronize`] puts the calling thread to
/// sleep until the GPU reaches the record (the driver wakes it), where a plain event's would
/// spin.
#[derive(Debug)]
pub struct SleepEvent(RawEvent);

impl SleepEvent {
    pub fn create(gpu: &Arc<Gpu>) -> Result<SleepEvent, CudaError> {
        let flags =
            sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32 | sys::CUevent_flags::CU_EVENT_BLOCKING_SYNC as u32;
        Ok(SleepEvent(RawEvent::create(gpu, flags)?))
    }

    /// Record after everything enqueued on `stream` so far (a stream of this event's context).
    pub fn record(&self, stream: &Stream) -> Result<(), CudaError> {
        self.0.record(stream)
    }

    /// Sleep until the latest record has completed (at once if never recorded).
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.0.synchronize()
    }

    /// Whether the latest record has completed (also true if it was never recorded).
    pub fn query(&self) -> Result<bool, CudaError> {
        self.0.query()
    }
}
