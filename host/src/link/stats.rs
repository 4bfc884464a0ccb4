//! A stage's statistics block: counters the stage writes and the host reads for live
//! statistics and the report, and the flag the host sets to make a source stop.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::shm::SharedMemory;

const MAGIC: u64 = u64::from_le_bytes(*b"GPUIPCST");
const VERSION: u32 = 2;

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
        }
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
}

impl StatsSnapshot {
    /// Frames per second between the first frame's start and the last frame's end.
    pub fn fps(&self) -> f64 {
        let span = self.last_ns.saturating_sub(self.first_ns);
        if self.frames == 0 || span == 0 { 0.0 } else { self.frames as f64 * 1e9 / span as f64 }
    }
}
