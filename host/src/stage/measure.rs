//! What a stage measures of itself besides its counters: the CPU time it uses, its GPU's
//! memory, and for `gpuipc-host bench`, how long after its source stamped a frame the stage's
//! work on it was done (every run keeps a histogram of that in the statistics block:
//! `StatsMap::frame_timed`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustix::time::{ClockId, clock_gettime};

use crate::gpu::{Gpu, TimingEvent};
use crate::link::StatsMap;

use super::StageError;

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

/// A cuda stage's reading of its device's memory (device-wide, every process's), stored in its
/// statistics block on its first frame and every `EVERY` frames after: the host has no CUDA
/// context of its own to ask (the metrics endpoint shows it per device).
pub struct GpuMemory {
    gpu: Arc<Gpu>,
    frames: u64,
}

impl GpuMemory {
    pub fn new(gpu: Arc<Gpu>) -> GpuMemory {
        GpuMemory { gpu, frames: 0 }
    }

    /// A frame is about to start.
    pub fn frame(&mut self, stats: &StatsMap) {
        if self.frames.is_multiple_of(EVERY) {
            // A failed reading leaves the last one: the figure is for people, not for the run.
            if let Ok((used, total)) = crate::gpu::memory_info(&self.gpu) {
                stats.set_gpu_memory(self.gpu.ordinal(), used, total);
            }
        }
        self.frames += 1;
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
        std::fs::write(&self.path, text)
            .map_err(|e| StageError::Setup(format!("cannot write {}: {e}", self.path.display())))
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
/// environment): logged when the stage ends. With `GPUIPC_TRACE=DIR` it writes when each
/// frame ended each phase, one line a frame, to `DIR/<stage>.<pid>.trace` (times since the
/// epoch, comparable between the stages' processes) when the frame loop ends, however it
/// ends, for `scripts/trace-hops.py` to find which step of which stage a slow frame waited in.
/// Off, each lap is one branch.
pub struct PhaseClock {
    last: Option<std::time::Instant>,
    /// `GPUIPC_PROFILE`: log the totals.
    profile: bool,
    totals: [u64; PHASES.len()],
    frames: u64,
    trace: Option<FrameTrace>,
}

/// Per-frame phase ends (`GPUIPC_TRACE`).
struct FrameTrace {
    path: PathBuf,
    /// The frame being made: its sequence number, its source's stamp, the CPU the stage ran
    /// on when it got the frame, when each phase ended, and when its publish began (before
    /// the wake-up of its consumers, which the publish phase includes).
    seq: u64,
    stamp_ns: u64,
    cpu: usize,
    ends: [u64; PHASES.len()],
    publish_ns: u64,
    /// Each frame's line, written when the loop ends.
    rows: Vec<(u64, u64, usize, [u64; PHASES.len()], u64)>,
}

impl FrameTrace {
    fn write(&self) {
        use std::fmt::Write;
        // The release phase's end is the frame's start: it ends the frame before.
        let phases = PHASES.map(|p| if p == "release" { "start" } else { p });
        let mut text =
            format!("# seq stamp_ns cpu, then when each ended (ns): {}, publish begins\n", phases.join(", "));
        for (seq, stamp_ns, cpu, ends, publish_ns) in &self.rows {
            let _ = write!(text, "{seq} {stamp_ns} {cpu}");
            for end in ends {
                let _ = write!(text, " {end}");
            }
            let _ = writeln!(text, " {publish_ns}");
        }
        // How long the thread waited to run once runnable, and how often it was preempted:
        // the scheduler's side of a frame that waited.
        let sched = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap_or_default();
        let switches: Vec<&str> = status.lines().filter(|l| l.contains("ctxt_switches")).collect();
        let _ = writeln!(text, "# schedstat (run ns, runqueue wait ns, slices): {}", sched.trim());
        let _ = writeln!(text, "# {}", switches.join(", "));
        if let Err(e) = std::fs::write(&self.path, text) {
            tracing::warn!("cannot write the frame trace {}: {e}", self.path.display());
        }
    }
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
    /// `gpuipc-host bench`, at a stage nobody reads: waiting for the frame's GPU work to end.
    Measure,
    /// Counting the frame and releasing its input slots.
    Release,
}

/// `GPUIPC_NVTX=1`: a cuda stage's NVTX ranges for Nsight Systems, one per frame around its
/// plugin's call, named `<stage> frame <seq>`, on the stage's thread, which is named
/// `gpuipc stage <stage>` (docs/metrics.md). Off, the frame loop pays one branch a frame.
pub struct FrameRanges {
    nvtx: crate::gpu::Nvtx,
    stage: String,
}

impl FrameRanges {
    /// Ranges for a stage in the cuda domain where `GPUIPC_NVTX` asks for them. Without the
    /// NVTX library the stage says so and runs without them.
    pub fn from_env(stage: &str, cuda: bool) -> Option<FrameRanges> {
        Self::asked(stage, cuda, std::env::var_os("GPUIPC_NVTX").as_deref())
    }

    fn asked(stage: &str, cuda: bool, value: Option<&std::ffi::OsStr>) -> Option<FrameRanges> {
        if !cuda || !crate::gpu::nvtx_enabled_by(value) {
            return None;
        }
        match crate::gpu::Nvtx::load() {
            Ok(nvtx) => {
                nvtx.name_this_thread(&format!("gpuipc stage {stage}"));
                Some(FrameRanges { nvtx, stage: stage.to_owned() })
            }
            Err(e) => {
                tracing::warn!("stage '{stage}': GPUIPC_NVTX is set, but {e}; no NVTX ranges");
                None
            }
        }
    }

    /// The range of frame `seq`, until dropped.
    pub fn frame(&self, seq: u64) -> crate::gpu::NvtxRange {
        self.nvtx.range(&crate::gpu::frame_range_name(&self.stage, seq))
    }
}

const PHASES: [&str; 10] = [
    "wait input",
    "open input",
    "wait output",
    "prepare output",
    "process",
    "close input",
    "finish output",
    "publish",
    "measure",
    "release",
];

impl PhaseClock {
    pub fn from_env(stage: &str) -> PhaseClock {
        let on = std::env::var_os("GPUIPC_PROFILE").is_some_and(|v| v != "0");
        let trace = std::env::var_os("GPUIPC_TRACE").filter(|d| !d.is_empty()).map(|dir| FrameTrace {
            path: Path::new(&dir).join(format!("{stage}.{}.trace", std::process::id())),
            seq: 0,
            stamp_ns: 0,
            cpu: 0,
            ends: [0; PHASES.len()],
            publish_ns: 0,
            rows: Vec::new(),
        });
        let last = (on || trace.is_some()).then(std::time::Instant::now);
        PhaseClock { last, profile: on, totals: [0; PHASES.len()], frames: 0, trace }
    }

    /// The time since the last lap was spent in `phase`.
    #[inline]
    pub fn lap(&mut self, phase: Phase) {
        if let Some(last) = &mut self.last {
            let now = std::time::Instant::now();
            self.totals[phase as usize] += (now - *last).as_nanos() as u64;
            *last = now;
            if let Some(trace) = &mut self.trace {
                trace.ends[phase as usize] = now_ns();
                if let Phase::WaitInput = phase {
                    trace.cpu = rustix::thread::sched_getcpu();
                }
            }
        }
    }

    /// The frame in the making is `seq`, stamped `stamp_ns` by its source.
    #[inline]
    pub fn frame_is(&mut self, seq: u64, stamp_ns: u64) {
        if let Some(trace) = &mut self.trace {
            (trace.seq, trace.stamp_ns) = (seq, stamp_ns);
        }
    }

    /// The frame's publish begins (a trace's mark: a consumer may hold the frame before the
    /// publish phase ends).
    #[inline]
    pub fn publishing(&mut self) {
        if let Some(trace) = &mut self.trace {
            trace.publish_ns = now_ns();
        }
    }

    pub fn frame_done(&mut self) {
        self.frames += 1;
        if let Some(t) = &mut self.trace {
            t.rows.push((t.seq, t.stamp_ns, t.cpu, t.ends, t.publish_ns));
            t.ends = [0; PHASES.len()];
        }
    }

    /// Write the frame trace, if one was asked for.
    pub fn write_trace(&self) {
        if let Some(t) = &self.trace {
            t.write();
        }
    }

    /// One log line: microseconds per frame in each phase.
    pub fn log(&self) {
        if !self.profile || self.frames == 0 {
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

/// The wall clock in nanoseconds since the Unix epoch (0 if the clock is before it). Read
/// straight (the vDSO's CLOCK_REALTIME, about 25 ns here), not through `SystemTime`, whose
/// checked difference from the epoch in 128 bits added half as much again: a stage reads it
/// twice a frame.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Realtime);
    u64::try_from(t.tv_sec).map_or(0, |s| s.wrapping_mul(1_000_000_000).wrapping_add(t.tv_nsec as u64))
}

#[cfg(test)]
mod nvtx_tests {
    use super::FrameRanges;
    use std::ffi::OsStr;

    #[test]
    fn ranges_are_made_only_for_a_cuda_stage_that_asks_and_never_panic_without_the_library() {
        assert!(FrameRanges::asked("s", true, None).is_none());
        assert!(FrameRanges::asked("s", true, Some(OsStr::new("0"))).is_none());
        assert!(FrameRanges::asked("s", false, Some(OsStr::new("1"))).is_none());
        // Asked in a cuda stage: ranges where NVTX loads, none (and a warning) where it does not.
        let ranges = FrameRanges::asked("s", true, Some(OsStr::new("1")));
        assert_eq!(ranges.is_some(), crate::gpu::Nvtx::load().is_ok());
        if let Some(r) = ranges {
            drop(r.frame(7));
        }
    }
}
