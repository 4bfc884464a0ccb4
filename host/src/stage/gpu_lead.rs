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
//! `GPUIPC_GPU_LEAD` (0: no bound) sets it; docs/benchmarks.md has what it was measured to
//! cost and buy. The sleep polls the event: the driver's blocking wait cost more host CPU on an
//! H100 (4K: 136 % against 110 % of a core summed over three stages; removed since).

use std::sync::Arc;

use crate::gpu::{Gpu, GpuError, SleepEvent};

/// Frames between two checks of the lead: each check records one event and may sleep once.
const CHECK_EVERY: usize = 16;
/// The lead, for a stage whose frames (any input or its output) are large
/// ([`crate::plan::LARGE_FRAME_BYTES`], 4K RGB and up): 64 frames is more than a millisecond of
/// GPU work queued there, far more than a sleeping host needs to wake and enqueue the next
/// frames. On an H100 it took a 4K chain's host CPU from 156–171 % to 108 % of a core, for
/// 3–4 % of its frames/s. Smaller frames get no bound: there it cost 5–9 % of the frames/s
/// (1080p, 720p, 256x256) and saved little CPU, except on long chains (an 8-stage 1080p chain:
/// 636 % -> 269 % for 3 % of its frames/s), where `GPUIPC_GPU_LEAD=64` is a choice for a
/// machine short of cores. A tight bound cost more (8 frames checked every 4: 1080p 53,519 ->
/// 42,376 frames/s). docs/benchmarks.md has the figures.
const LARGE_FRAMES_LEAD: usize = 64;

/// The most frames a stage's host runs ahead of its GPU (0: no bound); `GPUIPC_GPU_LEAD` sets
/// it for every stage.
pub fn frames(large_frames: bool) -> usize {
    let default = if large_frames { LARGE_FRAMES_LEAD } else { 0 };
    std::env::var("GPUIPC_GPU_LEAD").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

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
    /// `None` where the lead is unbounded (see [`frames`]).
    pub fn new(gpu: &Arc<Gpu>, large_frames: bool) -> Result<Option<GpuLead>, GpuError> {
        let frames = frames(large_frames);
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
