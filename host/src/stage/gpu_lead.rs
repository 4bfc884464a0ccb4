//! How far a cuda stage's host may run ahead of its own GPU, and the sleep that holds it there.
//!
//! Nothing else bounds it: a stage enqueues a frame's work and publishes at once, so when the
//! GPU is the bottleneck the hosts run ahead until the driver blocks them, and the driver
//! blocks by spinning: on an H100 the middle stage of a 4K chain spent 22–28 µs a frame in
//! its record of an interprocess event, whose queue was full, a whole core. With a bound
//! ([`frames`]), every [`CHECK_EVERY`] frames the stage records an event and, if the GPU has
//! not finished the frame `frames` back, sleeps until it has: the host stays between `frames
//! - CHECK_EVERY` and `frames` frames ahead and never fills the queue. Where the host is the
//! bottleneck the GPU is never that far behind and the check costs one event record per
//! `CHECK_EVERY` frames.
//!
//! `GPUIPC_GPU_LEAD` (0: no bound) sets it; docs/benchmarks-history.md has what it was measured to
//! cost and buy. The sleep polls the event: the driver's blocking wait cost more host CPU on an
//! H100 (4K: 136 % against 110 % of a core summed over three stages; removed since).

use std::sync::Arc;

use crate::gpu::{Gpu, GpuError, SleepEvent};

/// Frames between two checks of the lead: each check records one event and may sleep once.
const CHECK_EVERY: usize = 16;

/// One stage's bound: a ring of sleep events, one recorded every `check_every` frames.
pub struct GpuLead {
    gpu: Arc<Gpu>,
    events: Vec<SleepEvent>,
    /// Checks made so far (one per `check_every` frames).
    checks: usize,
    frames: usize,
    check_every: usize,
}

impl GpuLead {
    /// A bound of `frames` (the stage's tuning, `plan::tuning`); `None` where it has none.
    pub fn new(gpu: &Arc<Gpu>, frames: usize) -> Result<Option<GpuLead>, GpuError> {
        if frames == 0 {
            return Ok(None);
        }
        // Events recorded `frames` back must still hold that record: one per check in the
        // window, and one more for the check being made.
        let check_every = CHECK_EVERY.min(frames);
        let count = frames.div_ceil(check_every) + 1;
        let events = (0..count).map(|_| SleepEvent::create(gpu)).collect::<Result<_, _>>()?;
        Ok(Some(GpuLead { gpu: gpu.clone(), events, checks: 0, frames, check_every }))
    }

    /// A frame's work is enqueued (`index`: frames this process enqueued before it). Every
    /// `check_every` frames: mark the stream, then sleep until the mark `frames` back is done.
    /// `before_sleep` runs before it may sleep (the stage sends its held-back wake-ups).
    pub fn frame_enqueued(&mut self, index: u64, before_sleep: impl FnOnce()) -> Result<(), GpuError> {
        if !index.is_multiple_of(self.check_every as u64) {
            return Ok(());
        }
        let n = self.events.len();
        self.events[self.checks % n].record(self.gpu.stream())?;
        self.checks += 1;
        let back = self.frames.div_ceil(self.check_every);
        if self.checks > back {
            let event = &self.events[(self.checks - 1 - back) % n];
            if event.query()? {
                return Ok(());
            }
            before_sleep();
            // Asks for 10 µs; Linux's timer slack makes it about 60.
            while !event.query()? {
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
        }
        Ok(())
    }
}
