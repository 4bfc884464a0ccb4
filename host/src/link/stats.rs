//! A stage's statistics block: counters the stage writes and the host reads for live
//! statistics, the report and the metrics endpoint, two histograms of its frames' times
//! ([`Histogram`]), and the flag the host sets to make a source stop.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::shm::SharedMemory;

const MAGIC: u64 = u64::from_le_bytes(*b"GPUIPCST");
const VERSION: u32 = 5;

/// `stop` values.
pub const RUN: u32 = 0;
/// Sources end their stream after the current frame; the pipeline drains.
pub const DRAIN: u32 = 1;

#[repr(C)]
pub struct StageStats {
    magic: u64,
    version: AtomicU32,
    /// Set by the host; read by the stage before each frame.
    pub stop: AtomicU32,
    /// Frames processed.
    pub frames: AtomicU64,
    /// Frames missed on inputs (policies, alignment).
    pub dropped: AtomicU64,
    /// Nanoseconds spent inside the plugin's `process`.
    pub busy_ns: AtomicU64,
    /// Wall clock (ns since the Unix epoch) when the first frame started and the last ended.
    pub first_ns: AtomicU64,
    pub last_ns: AtomicU64,
    /// Sequence number of the last frame done, plus one (0: none yet). Stored after the
    /// frame's output is published (and its tap line written), before its inputs are
    /// released: the host tells a frame a dead stage finished from one it lost by it.
    pub last_seq_plus_one: AtomicU64,
    /// Bumped while the stage waits (each sleep slice), so the watchdog tells a stage that
    /// waits for its neighbours from one that is stuck.
    pub heartbeat: AtomicU64,
    /// What the stage is doing now (`PHASE_*`) and on which frame: for the watchdog's message.
    pub phase: AtomicU32,
    pub phase_seq: AtomicU64,
    /// Written by the host: processes of this stage started again, and frames lost inside
    /// processes that died (taken from an input, never done).
    pub restarts: AtomicU64,
    pub lost: AtomicU64,
    /// Written by the host: frames numbered below this were counted lost or done already.
    pub lost_below: AtomicU64,
    /// Bumped by the host after it sent the stage new objects for a GPU link whose other end
    /// was restarted (see `supervisor::broker`).
    pub updates: AtomicU32,
    /// CPU time the stage's process (in-process: its thread) used since its first frame.
    pub cpu_ns: AtomicU64,
    /// Frames made from damaged data (a decoder concealed errors in them): published, and
    /// counted in `frames` too.
    pub damaged: AtomicU64,
    /// The frame being marked done (its sequence number plus one) and the count `frames` has
    /// once it is: written before `last_seq_plus_one` and `frames`, so the host can finish a
    /// count a kill cut in two ([`StatsMap::settle_after_death`]).
    pub pending_seq_plus_one: AtomicU64,
    pub pending_frames: AtomicU64,
    /// Per frame: the time inside the plugin's `process`, and the time from its source's
    /// stamp to the end of this stage's work on it (see [`StatsMap::frame_timed`]).
    pub process_hist: HistogramWords,
    pub latency_hist: HistogramWords,
    /// A cuda stage's device (its ordinal plus one; 0: none) and that device's memory in use
    /// and in all, device-wide, as the stage last read them (every few frames).
    pub gpu_device_plus_one: AtomicU32,
    pub gpu_memory_used: AtomicU64,
    pub gpu_memory_total: AtomicU64,
}

// The block is one page (`StatsMap::create`).
const _: () = assert!(size_of::<StageStats>() <= 4096, "the statistics block outgrew its page");

/// The upper bounds of a histogram's buckets, in nanoseconds (Prometheus's `le`, inclusive),
/// from 1 µs to 10 s in steps of 1, 2.5, 5; a last bucket takes every longer time.
pub const BUCKET_BOUNDS_NS: [u64; 22] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// A histogram's words in the block: frames per bucket (not cumulative; the last one past
/// every bound) and the sum of their times. Written by the stage's process alone, one at a
/// time (a restarted process carries on with the same words), so a frame costs two plain
/// loads and stores, no read-modify-write.
#[repr(C)]
pub struct HistogramWords {
    pub buckets: [AtomicU64; BUCKET_BOUNDS_NS.len() + 1],
    pub sum_ns: AtomicU64,
}

impl HistogramWords {
    fn record(&self, ns: u64) {
        // Most times of a tiny frame are in the first bucket: no search for those.
        let bucket = if ns <= BUCKET_BOUNDS_NS[0] { 0 } else { BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns) };
        let b = &self.buckets[bucket];
        // One writer: see the type's comment.
        b.store(b.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        self.sum_ns.store(self.sum_ns.load(Ordering::Relaxed).wrapping_add(ns), Ordering::Relaxed);
    }

    fn snapshot(&self) -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
        }
    }
}

/// A copy of a histogram ([`HistogramWords`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Histogram {
    pub buckets: [u64; BUCKET_BOUNDS_NS.len() + 1],
    pub sum_ns: u64,
}

impl Histogram {
    pub fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |a, &b| a.saturating_add(b))
    }

    /// The `q` quantile (0 to 1) in nanoseconds, estimated as Prometheus's
    /// `histogram_quantile` does: linearly inside the bucket it falls in (the last bucket's
    /// answer is the highest bound). `None` without frames.
    pub fn quantile_ns(&self, q: f64) -> Option<f64> {
        let count = self.count();
        if count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * count as f64;
        let mut below = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            if n > 0 && (below + n) as f64 >= rank {
                let Some(&upper) = BUCKET_BOUNDS_NS.get(i) else {
                    return Some(BUCKET_BOUNDS_NS[BUCKET_BOUNDS_NS.len() - 1] as f64);
                };
                let lower = if i == 0 { 0 } else { BUCKET_BOUNDS_NS[i - 1] };
                let inside = (rank - below as f64) / n as f64;
                return Some(lower as f64 + (upper - lower) as f64 * inside);
            }
            below += n;
        }
        Some(BUCKET_BOUNDS_NS[BUCKET_BOUNDS_NS.len() - 1] as f64)
    }

    /// The mean in nanoseconds (exact: the sum over the count); `None` without frames.
    pub fn mean_ns(&self) -> Option<f64> {
        let count = self.count();
        (count > 0).then(|| self.sum_ns as f64 / count as f64)
    }
}

/// `phase` values.
pub const PHASE_STARTING: u32 = 0;
pub const PHASE_WAITING_INPUT: u32 = 1;
pub const PHASE_WAITING_OUTPUT: u32 = 2;
pub const PHASE_PROCESS: u32 = 3;
pub const PHASE_FLUSH: u32 = 4;

/// How a phase reads in a message.
pub fn phase_name(phase: u32) -> &'static str {
    match phase {
        PHASE_WAITING_INPUT => "waiting for input",
        PHASE_WAITING_OUTPUT => "waiting for an output slot",
        PHASE_PROCESS => "in the plugin's process",
        PHASE_FLUSH => "in the plugin's flush",
        PHASE_STARTING => "starting",
        _ => "in an unknown phase",
    }
}

/// A mapped statistics block.
pub struct StatsMap {
    shm: SharedMemory,
}

impl StatsMap {
    pub fn create(name: &str) -> std::io::Result<StatsMap> {
        let shm = SharedMemory::create(name, 4096)?;
        let stats = shm.as_ptr() as *mut StageStats;
        // SAFETY: fresh zeroed page, not shared yet.
        unsafe {
            (*stats).magic = MAGIC;
            // Written last; pairs with the Acquire load in `open`.
            (*stats).version.store(VERSION, Ordering::Release);
        }
        Ok(StatsMap { shm })
    }

    pub fn open(fd: OwnedFd) -> std::io::Result<StatsMap> {
        let shm = SharedMemory::open(fd)?;
        if shm.len() < size_of::<StageStats>() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "stats block too small"));
        }
        let map = StatsMap { shm };
        // Acquire: pairs with the creator's Release store of `version`.
        if map.get().magic != MAGIC || map.get().version.load(Ordering::Acquire) != VERSION {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not a stats block"));
        }
        Ok(map)
    }

    pub fn get(&self) -> &StageStats {
        // SAFETY: page-aligned mapping at least one StageStats long; mutated only via atomics.
        unsafe { &*(self.shm.as_ptr() as *const StageStats) }
    }

    pub fn shared_memory(&self) -> &SharedMemory {
        &self.shm
    }

    /// The stage is alive and waiting.
    pub fn pulse(&self) {
        self.get().heartbeat.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_phase(&self, phase: u32, seq: u64) {
        let s = self.get();
        s.phase_seq.store(seq, Ordering::Relaxed);
        s.phase.store(phase, Ordering::Relaxed);
    }

    /// The plugin was called on a frame from `started_ns` to `ended_ns` (wall clock, ns since
    /// the epoch): the first call marks the stage's first frame, every call adds busy time.
    pub fn plugin_called(&self, started_ns: u64, ended_ns: u64) {
        let s = self.get();
        if s.first_ns.load(Ordering::Relaxed) == 0 {
            s.first_ns.store(started_ns, Ordering::Relaxed);
        }
        // A wall clock stepped backwards counts as no time, not as a huge one. One writer (the
        // stage's process; the host reads): a load and a store, no locked add.
        let busy = s.busy_ns.load(Ordering::Relaxed);
        s.busy_ns.store(busy.wrapping_add(ended_ns.saturating_sub(started_ns)), Ordering::Relaxed);
    }

    /// A frame's times: its plugin call took `process_ns`, and its work here ended
    /// `latency_ns` after its source stamped it. Two histogram records, a handful of plain
    /// loads and stores.
    pub fn frame_timed(&self, process_ns: u64, latency_ns: u64) {
        let s = self.get();
        s.process_hist.record(process_ns);
        s.latency_hist.record(latency_ns);
    }

    /// Frame `seq` is done (its output published), at `ended_ns`. The host reads
    /// `last_seq_plus_one` to tell a frame a dead stage finished from one it lost; `frames`
    /// must agree with it whenever the process dies, so the pair is announced first (only
    /// this process writes `frames` while it lives; Release keeps the stores in this order).
    pub fn frame_done(&self, seq: u64, ended_ns: u64) {
        let s = self.get();
        let frames = s.frames.load(Ordering::Relaxed) + 1;
        s.pending_seq_plus_one.store(seq + 1, Ordering::Release);
        s.pending_frames.store(frames, Ordering::Release);
        s.last_seq_plus_one.store(seq + 1, Ordering::Release);
        s.frames.store(frames, Ordering::Release);
        s.last_ns.store(ended_ns, Ordering::Relaxed);
    }

    /// The host, after the stage's process died (nothing writes the block now): a process
    /// killed between marking a frame done and counting it gets the count it was making.
    pub fn settle_after_death(&self) {
        let s = self.get();
        let pending = s.pending_seq_plus_one.load(Ordering::Acquire);
        // Equal only once `last_seq_plus_one` was stored for the pending frame: the frame is
        // done, and `frames` holds the count before it or after it.
        if pending != 0 && pending == s.last_seq_plus_one.load(Ordering::Acquire) {
            s.frames.fetch_max(s.pending_frames.load(Ordering::Acquire), Ordering::AcqRel);
        }
    }

    /// The host, after the stage's process died: frame `seq` was done (its output published,
    /// or its tap line written) though the process died before it counted it.
    pub fn count_done_by_host(&self, seq: u64) {
        let s = self.get();
        s.frames.fetch_add(1, Ordering::AcqRel);
        s.last_seq_plus_one.store(seq + 1, Ordering::Release);
    }

    /// Whether frame `seq` is counted done or lost already.
    pub fn settled(&self, seq: u64) -> bool {
        let s = self.get();
        seq < s.last_seq_plus_one.load(Ordering::Acquire).max(s.lost_below.load(Ordering::Acquire))
    }

    /// Whatever moved since the last look: the watchdog compares these.
    pub fn progress(&self) -> (u64, u64) {
        let s = self.get();
        (s.frames.load(Ordering::Relaxed), s.heartbeat.load(Ordering::Relaxed))
    }

    /// A copy of the counters at one moment.
    pub fn snapshot(&self) -> StatsSnapshot {
        let s = self.get();
        StatsSnapshot {
            frames: s.frames.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            busy_ns: s.busy_ns.load(Ordering::Relaxed),
            first_ns: s.first_ns.load(Ordering::Relaxed),
            last_ns: s.last_ns.load(Ordering::Relaxed),
            restarts: s.restarts.load(Ordering::Relaxed),
            lost: s.lost.load(Ordering::Relaxed),
            cpu_ns: s.cpu_ns.load(Ordering::Relaxed),
            damaged: s.damaged.load(Ordering::Relaxed),
            process: s.process_hist.snapshot(),
            latency: s.latency_hist.snapshot(),
        }
    }

    /// A cuda stage's device and its memory, as the stage last read them: `(ordinal, used,
    /// total)` in bytes; `None` for a stage on no GPU or before its first reading.
    pub fn gpu_memory(&self) -> Option<(u32, u64, u64)> {
        let s = self.get();
        let device = s.gpu_device_plus_one.load(Ordering::Acquire).checked_sub(1)?;
        let total = s.gpu_memory_total.load(Ordering::Relaxed);
        (total > 0).then(|| (device, s.gpu_memory_used.load(Ordering::Relaxed).min(total), total))
    }

    /// The stage's reading of its device's memory (`gpu_memory`).
    pub fn set_gpu_memory(&self, device: u32, used: u64, total: u64) {
        let s = self.get();
        s.gpu_memory_used.store(used, Ordering::Relaxed);
        s.gpu_memory_total.store(total, Ordering::Relaxed);
        // Release: a reader that sees the device sees a reading of it.
        s.gpu_device_plus_one.store(device + 1, Ordering::Release);
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatsSnapshot {
    pub frames: u64,
    pub dropped: u64,
    pub busy_ns: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub restarts: u64,
    pub lost: u64,
    #[serde(default)]
    pub cpu_ns: u64,
    #[serde(default)]
    pub damaged: u64,
    /// Per-frame time in the plugin, and from the source's stamp to this stage's end.
    #[serde(default)]
    pub process: Histogram,
    #[serde(default)]
    pub latency: Histogram,
}

/// What a run could have done in the time it ran: the bounds a stage's own counters must keep.
/// The stage writes its statistics block and the host only reads it, so a buggy or hostile
/// stage could write anything there; the host shows no count these rule out.
#[derive(Debug, Clone, Copy)]
pub struct Plausible {
    /// Wall clock (ns since the Unix epoch) when the run started and when it was looked at.
    pub start_ns: u64,
    pub now_ns: u64,
}

/// No stage does a frame in less than this: a count above one per this many nanoseconds of the
/// run is written over, not counted.
const FASTEST_FRAME_NS: u64 = 10;
/// Slack for clocks read in different processes.
const CLOCK_SLACK_NS: u64 = 1_000_000_000;
/// More threads than any stage runs: CPU time above this many times the run's length is
/// written over.
const MOST_THREADS: u64 = 4096;

impl Plausible {
    /// The snapshot with every counter these bounds rule out set to 0, and for each, its name
    /// and the value found.
    pub fn check(&self, mut snap: StatsSnapshot) -> (StatsSnapshot, Vec<(&'static str, u64)>) {
        let mut bad = Vec::new();
        let span = self.now_ns.saturating_sub(self.start_ns) + CLOCK_SLACK_NS;
        let most_frames = span / FASTEST_FRAME_NS;
        let earliest = self.start_ns.saturating_sub(CLOCK_SLACK_NS);
        let latest = self.now_ns.saturating_add(CLOCK_SLACK_NS);
        let mut keep = |name, value: &mut u64, ok: bool| {
            if !ok {
                bad.push((name, *value));
                *value = 0;
            }
        };
        let (frames_ok, dropped_ok) = (snap.frames <= most_frames, snap.dropped <= most_frames);
        // Damaged frames are frames made: never more of them.
        let damaged_ok = snap.damaged <= snap.frames;
        keep("frames", &mut snap.frames, frames_ok);
        keep("dropped", &mut snap.dropped, dropped_ok);
        keep("damaged", &mut snap.damaged, damaged_ok);
        // No call yet; a first call that never finished a frame (it failed: no `last_ns`); or
        // a first and a last frame inside the run.
        let times_ok = snap.first_ns == 0 && snap.last_ns == 0
            || (earliest..=latest).contains(&snap.first_ns)
                && (snap.last_ns == 0 || (snap.first_ns..=latest).contains(&snap.last_ns));
        let first = snap.first_ns;
        keep("first_ns", &mut snap.first_ns, times_ok);
        keep("last_ns", &mut snap.last_ns, times_ok);
        let most_busy = if times_ok && snap.last_ns != 0 { snap.last_ns - first + CLOCK_SLACK_NS } else { span };
        let busy_ok = snap.busy_ns <= most_busy;
        keep("busy_ns", &mut snap.busy_ns, busy_ok);
        let cpu_ok = snap.cpu_ns <= span.saturating_mul(MOST_THREADS);
        keep("cpu_ns", &mut snap.cpu_ns, cpu_ok);
        // A histogram counts the frames the stage timed: never more than the run could make.
        for (name, hist) in [("process histogram", &mut snap.process), ("latency histogram", &mut snap.latency)] {
            let count = hist.count();
            if count > most_frames {
                bad.push((name, count));
                *hist = Histogram::default();
            }
        }
        (snap, bad)
    }
}

impl StatsSnapshot {
    /// CPU time used per unit of wall time between the first frame and the last (1.0: one
    /// core busy all the time).
    pub fn cpu_share(&self) -> f64 {
        let span = self.last_ns.saturating_sub(self.first_ns);
        if span == 0 { 0.0 } else { self.cpu_ns as f64 / span as f64 }
    }

    /// Frames per second between the first frame's start and the last frame's end.
    pub fn fps(&self) -> f64 {
        let span = self.last_ns.saturating_sub(self.first_ns);
        if self.frames == 0 || span == 0 { 0.0 } else { self.frames as f64 * 1e9 / span as f64 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn run_of_two_seconds() -> Plausible {
        Plausible { start_ns: 1_700_000_000 * SECOND, now_ns: 1_700_000_002 * SECOND }
    }

    fn honest() -> StatsSnapshot {
        let start = run_of_two_seconds().start_ns;
        StatsSnapshot {
            frames: 48_000,
            dropped: 12,
            busy_ns: SECOND,
            first_ns: start + 1000,
            last_ns: start + 2 * SECOND,
            restarts: 1,
            lost: 3,
            cpu_ns: SECOND / 2,
            damaged: 5,
            ..StatsSnapshot::default()
        }
    }

    /// `frame_done`'s stores for frame `seq`, cut after the first `stores` of them (a kill).
    fn frame_done_cut(stats: &StatsMap, seq: u64, stores: usize) {
        let s = stats.get();
        let frames = s.frames.load(Ordering::Relaxed) + 1;
        let steps: [&dyn Fn(); 4] = [
            &|| s.pending_seq_plus_one.store(seq + 1, Ordering::Release),
            &|| s.pending_frames.store(frames, Ordering::Release),
            &|| s.last_seq_plus_one.store(seq + 1, Ordering::Release),
            &|| s.frames.store(frames, Ordering::Release),
        ];
        steps.iter().take(stores).for_each(|step| step());
    }

    #[test]
    fn a_count_cut_by_a_kill_at_any_store_is_finished_once_by_the_host() {
        for stores in 0..=4 {
            let stats = StatsMap::create("gpuipc-test-stats-cut").unwrap();
            for seq in 0..5 {
                stats.frame_done(seq, 1);
            }
            // Frame 7 (6 was lost upstream), cut after `stores` stores; the host settles twice.
            frame_done_cut(&stats, 7, stores);
            stats.settle_after_death();
            stats.settle_after_death();
            let done = stores >= 3;
            assert_eq!(
                stats.get().frames.load(Ordering::Relaxed),
                if done { 6 } else { 5 },
                "cut after {stores} stores"
            );
            assert_eq!(stats.settled(7), done, "cut after {stores} stores");
            assert!(stats.settled(4));
            // The next process counts on from there.
            stats.frame_done(8, 2);
            assert_eq!(stats.get().frames.load(Ordering::Relaxed), if done { 7 } else { 6 });
        }
    }

    #[test]
    fn a_histogram_puts_each_time_in_the_first_bucket_at_or_above_it() {
        let stats = StatsMap::create("gpuipc-test-stats-hist").unwrap();
        // At a bound: that bucket (Prometheus's `le` is inclusive); past the last: the last.
        for ns in [0, 1_000, 1_001, 10_000_000_000, 10_000_000_001, u64::MAX / 2] {
            stats.frame_timed(ns, ns);
        }
        let h = stats.snapshot().latency;
        assert_eq!(&h.buckets[..3], &[2, 1, 0]);
        assert_eq!(h.buckets[BUCKET_BOUNDS_NS.len() - 1], 1);
        assert_eq!(h.buckets[BUCKET_BOUNDS_NS.len()], 2);
        assert_eq!(h.count(), 6);
        assert_eq!(stats.snapshot().process, h);
    }

    #[test]
    fn quantiles_are_interpolated_inside_their_bucket() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_ns(0.5), None);
        // 100 frames in (1 ms, 2.5 ms]: the median is half way through.
        h.buckets[10] = 100;
        h.sum_ns = 150_000_000;
        assert_eq!(h.quantile_ns(0.5), Some(1_750_000.0));
        assert_eq!(h.quantile_ns(1.0), Some(2_500_000.0));
        assert_eq!(h.mean_ns(), Some(1_500_000.0));
        // A frame past every bound: the highest bound, as histogram_quantile says.
        h.buckets[BUCKET_BOUNDS_NS.len()] = 900;
        assert_eq!(h.quantile_ns(0.99), Some(10e9));
    }

    #[test]
    fn a_histogram_counting_more_frames_than_the_run_could_make_is_not_shown() {
        let mut garbage = honest();
        garbage.latency.buckets[3] = u64::MAX / 2;
        let (snap, bad) = run_of_two_seconds().check(garbage);
        assert_eq!(bad, vec![("latency histogram", u64::MAX / 2)]);
        assert_eq!(snap, honest());
    }

    #[test]
    fn more_damaged_frames_than_frames_are_written_over() {
        let (snap, bad) = run_of_two_seconds().check(StatsSnapshot { damaged: 48_001, ..honest() });
        assert_eq!(snap, StatsSnapshot { damaged: 0, ..honest() });
        assert_eq!(bad, [("damaged", 48_001)]);
    }

    #[test]
    fn honest_counters_pass_unchanged() {
        let (snap, bad) = run_of_two_seconds().check(honest());
        assert_eq!(snap, honest());
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn a_stage_that_never_started_passes() {
        let idle = StatsSnapshot::default();
        assert_eq!(run_of_two_seconds().check(idle), (idle, vec![]));
    }

    #[test]
    fn a_stage_whose_first_call_failed_passes() {
        // The plugin was called once and failed: a first call, no frame done.
        let failed = StatsSnapshot {
            frames: 0,
            first_ns: honest().first_ns,
            last_ns: 0,
            busy_ns: 5_000,
            ..StatsSnapshot::default()
        };
        assert_eq!(run_of_two_seconds().check(failed), (failed, vec![]));
    }

    #[test]
    fn garbage_counts_are_named_and_not_shown() {
        let garbage = StatsSnapshot { dropped: 18_359_816_903_119_042_546, ..honest() };
        let (snap, bad) = run_of_two_seconds().check(garbage);
        assert_eq!(bad, vec![("dropped", 18_359_816_903_119_042_546)]);
        assert_eq!(snap, StatsSnapshot { dropped: 0, ..honest() });
    }

    #[test]
    fn more_frames_than_the_run_had_time_for_are_refused() {
        // Three seconds of frames at one per 10 ns, in a run of two.
        let (_, bad) = run_of_two_seconds().check(StatsSnapshot { frames: 300_000_001, ..honest() });
        assert_eq!(bad, vec![("frames", 300_000_001)]);
    }

    #[test]
    fn times_outside_the_run_are_refused_with_the_busy_time_they_would_excuse() {
        let start = run_of_two_seconds().start_ns;
        let (snap, bad) =
            run_of_two_seconds().check(StatsSnapshot { first_ns: 5, busy_ns: 4 * SECOND, last_ns: start, ..honest() });
        assert_eq!(bad, vec![("first_ns", 5), ("last_ns", start), ("busy_ns", 4 * SECOND)]);
        assert_eq!((snap.first_ns, snap.last_ns, snap.busy_ns, snap.frames), (0, 0, 0, 48_000));
        let (_, bad) = run_of_two_seconds().check(StatsSnapshot { last_ns: start + 9 * SECOND, ..honest() });
        assert_eq!(bad.len(), 2, "{bad:?}");
    }
}
