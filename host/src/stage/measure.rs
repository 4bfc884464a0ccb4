//! What a stage measures of itself besides its counters: the CPU time it uses, and for
//! `gpuipc-host bench`, how long after its source stamped a frame the stage's work on it was
//! done.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustix::time::{ClockId, clock_gettime};

use crate::gpu::{Gpu, TimingEvent};
use crate::link::StatsMap;

use super::StageError;
use super::frame_loop::now_ns;

/// The CPU time of a stage since its first frame, stored in its statistics block every
/// `EVERY` frames and at the end (a clock read is a system call: not every frame).
pub struct CpuClock {
    clock: ClockId,
    base: Option<u64>,
    frames: u64,
}

const EVERY: u64 = 64;

impl CpuClock {
    /// The whole process's CPU time (a stage process: the driver's threads count too).
    pub fn process() -> CpuClock {
        CpuClock { clock: ClockId::ProcessCPUTime, base: None, frames: 0 }
    }

    /// This thread's (a stage of `run --in-process`, one thread among the others).
    pub fn thread() -> CpuClock {
        CpuClock { clock: ClockId::ThreadCPUTime, base: None, frames: 0 }
    }

    fn now(&self) -> u64 {
        let t = clock_gettime(self.clock);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    }

    /// A frame is about to start.
    pub fn frame(&mut self, stats: &StatsMap) {
        if self.base.is_none() {
            self.base = Some(self.now());
        }
        self.frames += 1;
        if self.frames.is_multiple_of(EVERY) {
            self.store(stats);
        }
    }

    pub fn store(&self, stats: &StatsMap) {
        if let Some(base) = self.base {
            stats.get().cpu_ns.store(self.now().saturating_sub(base), Ordering::Relaxed);
        }
    }
}

/// Per-frame latencies of a stage whose output nobody reads, written at the end as one
/// number of nanoseconds a line to `<dir>/<stage>.latency`.
pub struct LatencyLog {
    path: PathBuf,
    samples: Vec<u64>,
    /// A cuda stage's work is done when the GPU has run it: an event after it, waited for.
    done: Option<(Arc<Gpu>, TimingEvent)>,
}

pub fn latency_path(dir: &Path, stage: &str) -> PathBuf {
    dir.join(format!("{stage}.latency"))
}

impl LatencyLog {
    pub fn new(dir: &Path, stage: &str, gpu: Option<&Arc<Gpu>>) -> Result<LatencyLog, StageError> {
        let done = match gpu {
            Some(g) => Some((g.clone(), TimingEvent::create(g)?)),
            None => None,
        };
        Ok(LatencyLog { path: latency_path(dir, stage), samples: Vec::new(), done })
    }

    /// The frame stamped `timestamp_ns` by its source is enqueued (or, cpu, done).
    pub fn frame_done(&mut self, timestamp_ns: u64) -> Result<(), StageError> {
        if let Some((gpu, event)) = &self.done {
            event.record(gpu.stream())?;
            event.synchronize()?;
        }
        self.samples.push(now_ns().saturating_sub(timestamp_ns));
        Ok(())
    }

    pub fn finish(&self) -> Result<(), StageError> {
        let text: String = self.samples.iter().map(|ns| format!("{ns}\n")).collect();
        std::fs::write(&self.path, text).map_err(|e| StageError::Setup(format!("cannot write {}: {e}", self.path.display())))
    }
}

/// A source's frames at most `fps` a second: frame k starts no sooner than k / fps after the
/// first. Sleeps, then spins the last stretch (a sleep overshoots by tens of microseconds).
pub struct Pace {
    fps: f64,
    start: Option<std::time::Instant>,
    frames: u64,
}

impl Pace {
    pub fn new(fps: f64) -> Pace {
        Pace { fps, start: None, frames: 0 }
    }

    pub fn wait_for_turn(&mut self) {
        use std::time::{Duration, Instant};
        const SPIN: Duration = Duration::from_micros(100);
        let start = *self.start.get_or_insert_with(Instant::now);
        let due = start + Duration::from_secs_f64(self.frames as f64 / self.fps);
        self.frames += 1;
        let now = Instant::now();
        if due > now + SPIN {
            std::thread::sleep(due - now - SPIN);
        }
        while Instant::now() < due {
            std::hint::spin_loop();
        }
    }
}

/// Where a stage's host time goes, phase by phase of its frames (`GPUIPC_PROFILE=1` in the
/// environment): logged when the stage ends. Off, each lap is one branch.
pub struct PhaseClock {
    last: Option<std::time::Instant>,
    totals: [u64; PHASES.len()],
    frames: u64,
}

/// A frame's phases, in the order the frame loop goes through them.
#[derive(Debug, Clone, Copy)]
pub enum Phase {
    /// Taking the inputs' next frames (ring waits).
    WaitInput,
    /// Reaching the inputs' frames (a GPU link: the stream waits for the producer's event).
    OpenInput,
    /// Taking an output slot (ring waits).
    WaitOutput,
    /// Making the slot writable (a GPU link: the stream waits for the consumers' events).
    PrepareOutput,
    /// The plugin's `process`.
    Process,
    /// Handing the inputs back (a GPU link: recording this consumer's event).
    CloseInput,
    /// Finishing the output (a GPU link: recording the slot's event).
    FinishOutput,
    /// Publishing it (and its checksum line).
    Publish,
    /// Counting the frame and releasing its input slots.
    Release,
}

const PHASES: [&str; 9] =
    ["wait input", "open input", "wait output", "prepare output", "process", "close input", "finish output", "publish", "release"];

impl PhaseClock {
    pub fn from_env() -> PhaseClock {
        let on = std::env::var_os("GPUIPC_PROFILE").is_some_and(|v| v != "0");
        PhaseClock { last: on.then(std::time::Instant::now), totals: [0; PHASES.len()], frames: 0 }
    }

    /// The time since the last lap was spent in `phase`.
    #[inline]
    pub fn lap(&mut self, phase: Phase) {
        if let Some(last) = &mut self.last {
            let now = std::time::Instant::now();
            self.totals[phase as usize] += (now - *last).as_nanos() as u64;
            *last = now;
        }
    }

    pub fn frame_done(&mut self) {
        self.frames += 1;
    }

    /// One log line: microseconds per frame in each phase.
    pub fn log(&self) {
        if self.last.is_none() || self.frames == 0 {
            return;
        }
        let per_frame: Vec<String> = PHASES
            .iter()
            .zip(self.totals)
            .map(|(name, ns)| format!("{name} {:.2}", ns as f64 / 1000.0 / self.frames as f64))
            .collect();
        let (sleeps, wakes, before_due) = crate::link::wait::futex_calls();
        let per = |n: u64| n as f64 / self.frames as f64;
        tracing::info!(
            "host time per frame (µs) over {} frames: {}; futex sleeps {:.2}, wake calls {:.2}, woken before due {:.2} a frame",
            self.frames,
            per_frame.join(", "),
            per(sleeps),
            per(wakes),
            per(before_due)
        );
    }
}

/// The samples a [`LatencyLog`] wrote.
pub fn read_latencies(dir: &Path, stage: &str) -> Vec<u64> {
    std::fs::read_to_string(latency_path(dir, stage))
        .map(|text| text.lines().filter_map(|l| l.parse().ok()).collect())
        .unwrap_or_default()
}
