//! How far a cuda stage's host may run ahead of its own GPU, and the sleep that holds it there.
//!
//! Nothing else bounds it: a stage enqueues a frame's work and publishes at once, so when the
//! GPU is the bottleneck the hosts run ahead until the driver blocks them, and the driver
//! blocks by spinning: on an H100 the middle stage of a 4K chain spends 22–28 µs a frame in
//! its record of an interprocess event, whose queue is full (more events per slot, tried, did
//! not change it). With a bound set (`GPUIPC_GPU_LEAD`), every [`CHECK_EVERY`] frames the stage
//! records a blocking-sync event and sleeps until the GPU has finished the frame [`frames`]
//! back, so the host stays between `frames - CHECK_EVERY` and `frames` frames ahead and never
//! fills the queue. It is off by default: see [`DEFAULT_FRAMES`] for what it was measured to
//! cost and buy.

use std::sync::Arc;

use crate::gpu::{Gpu, GpuError, SleepEvent};

/// Frames between two checks of the lead: each check records one event and may sleep once.
pub const CHECK_EVERY: usize = 4;
/// Off by default: bounding the lead cost frames/s where host work per frame is the limit
/// (H100, lead 8: 1080p 53,519 -> 42,376 frames/s, an 8-stage chain 16,961 -> 14,332) and did
/// not lower the host CPU of a 4K chain (158 % -> 151-176 %), because the driver's own calls,
/// not spinning, are most of it. It does lower the CPU of a long chain (8 stages: 647 % ->
/// about 400 %), a trade a CPU-bound machine may want. docs/benchmarks.md has the figures.
const DEFAULT_FRAMES: usize = 0;

/// The most frames a stage's host runs ahead of its GPU (0: no bound, the default);
/// `GPUIPC_GPU_LEAD` sets it.
pub fn frames() -> usize {
    std::env::var("GPUIPC_GPU_LEAD").ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_FRAMES)
}

/// One stage's bound: a ring of sleep events, one recorded every [`CHECK_EVERY`] frames.
pub struct GpuLead {
    gpu: Arc<Gpu>,
    events: Vec<SleepEvent>,
    /// Checks made so far (one per `CHECK_EVERY` frames).
    checks: usize,
    frames: usize,
    /// `GPUIPC_GPU_LEAD_WAIT=poll`: query and sleep 10 µs between queries instead of the
    /// driver's blocking wait (for measurements).
    poll: bool,
}

impl GpuLead {
    /// `None` where the lead is unbounded (`GPUIPC_GPU_LEAD=0`).
    pub fn new(gpu: &Arc<Gpu>) -> Result<Option<GpuLead>, GpuError> {
        let frames = frames();
        if frames == 0 {
            return Ok(None);
        }
        // Events recorded `frames` back must still hold that record: one per check in the
        // window, and one more for the check being made.
        let count = frames.div_ceil(CHECK_EVERY) + 1;
        let events = (0..count).map(|_| SleepEvent::create(gpu)).collect::<Result<_, _>>()?;
        let poll = std::env::var("GPUIPC_GPU_LEAD_WAIT").is_ok_and(|v| v == "poll");
        Ok(Some(GpuLead { gpu: gpu.clone(), events, checks: 0, frames, poll }))
    }

    /// A frame's work is enqueued (`index`: frames this process enqueued before it). Every
    /// `CHECK_EVERY` frames: mark the stream, then sleep until the mark `frames` back is done.
    pub fn frame_enqueued(&mut self, index: u64) -> Result<(), GpuError> {
        if !index.is_multiple_of(CHECK_EVERY as u64) {
            return Ok(());
        }
        let n = self.events.len();
        self.events[self.checks % n].record(self.gpu.stream())?;
        self.checks += 1;
        let back = self.frames.div_ceil(CHECK_EVERY);
        if self.checks > back {
            let event = &self.events[(self.checks - 1 - back) % n];
            if self.poll {
                while !event.query()? {
                    std::thread::sleep(std::time::Duration::from_micros(10));
                }
            } else {
                event.synchronize()?;
            }
        }
        Ok(())
    }
}
