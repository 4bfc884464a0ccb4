//! The control block of a ring, as laid out in shared memory. A host ring's slot data is a
//! memfd of its own (`ring::RingMap`), so that consumers can be given it for reading only while
//! the control block, whose words they write, stays writable.
//!
//! The creator (the host) fills it in, then stores `version` last with Release; whoever opens
//! it loads `version` with Acquire and checks it and the magic before reading anything else.
//! After that, the plain fields are read-only and all traffic goes through the atomics.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU32, AtomicU64};

use gpuipc_plugin_api::{FrameFormat, FrameLayout};

pub use crate::plan::ring_size::PAGE;
use crate::plan::ring_size::{self, CONTROL_BYTES};

pub const MAGIC: u64 = u64::from_le_bytes(*b"GPUIPCRG");
/// 4: slot data moved out of the control block's memfd into one of its own (`data_offset` gone).
/// 6: a frame's birth time in its slot (`born_ns`). 7: the stream's `closed` word on a line
/// of its own, a slot's format and layout written once by the ring's creator.
pub const VERSION: u32 = 7;
/// Most slots a ring can have.
pub const MAX_SLOTS: usize = 64;
/// Most consumers a ring can have: claim and pending masks are 16 bits each.
pub const MAX_CONSUMERS: usize = 16;

/// `closed` values.
pub const OPEN: u32 = 0;
pub const END_OF_STREAM: u32 = 1;
pub const ABORTED: u32 = 2;

/// Consumer policy codes, one byte per consumer.
pub const POLICY_BLOCK: u8 = 0;
pub const POLICY_DROP_OLDEST: u8 = 1;
pub const POLICY_LATEST: u8 = 2;

/// Keeps hot counters of different writers on different cache lines.
#[repr(C, align(64))]
pub struct CacheLine<T>(pub T);

/// Written by the producer.
#[repr(C)]
pub struct ProducerState {
    /// Frames published so far.
    pub published: AtomicU64,
    /// Sequence number of the newest frame published, plus one (sequence numbers only grow).
    pub seq_end: AtomicU64,
    /// Bumped on every publish and on close; consumers sleep on it.
    pub publish_futex: AtomicU32,
    pub consumers_sleeping: AtomicU32,
    /// Bumped by the host each time it takes back the slots of an end that died.
    pub epoch: AtomicU32,
    /// Bumped by the host each time the consumer processes of the ring change (one died, or a
    /// new one is about to get the producer's objects): on a GPU ring a producer then waits
    /// for their current `released` events before it reuses a slot (`stage::follow`).
    pub consumer_epoch: AtomicU32,
}

/// Whether the stream goes on: written once or twice a run (close, abort), read on every poll
/// of every end. On a line of its own, apart from the producer's counters that change with
/// every frame: a consumer polling it keeps it in its cache instead of pulling the producer's
/// line across at every publish.
#[repr(C)]
pub struct StreamState {
    /// `OPEN`, `END_OF_STREAM` or `ABORTED`. Stored after the last publish (Release).
    pub closed: AtomicU32,
}

/// Written by consumers; the producer sleeps on `release_futex` when the ring is full.
#[repr(C)]
pub struct ReleaseState {
    pub release_futex: AtomicU32,
    pub producer_sleeping: AtomicU32,
}

/// Written by one consumer.
#[repr(C)]
pub struct ConsumerState {
    /// The sequence number this consumer expects next, and the publish ordinal: a restarted
    /// consumer carries on from both (see `ring::Consumer::new`).
    pub next_seq: AtomicU64,
    pub next_ordinal: AtomicU64,
    pub received: AtomicU64,
    pub dropped: AtomicU64,
    /// Frames this consumer took from this link and lost inside a process that died (the
    /// host's count, or the consumer's for a frame a dead producer made): a join killed
    /// between its inputs' takes lost the frame on the links it had taken it from only.
    pub lost: AtomicU64,
}

/// A slot's frame metadata; written by the producer while it owns the slot (state WRITING),
/// read by consumers while they hold a claim. Only the fields of [`FrameMeta`] are written
/// and read per frame (they share the slot's first cache line with its state word); `format`
/// and `layout` are the ring's, written once by its creator (`RingMap::create`), and a
/// consumer takes them from its checked private copy, never from here: 112 bytes less to
/// move between the two processes' caches per frame, two cache lines out of three.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SlotMeta {
    pub seq: u64,
    /// How many frames the producer published before this one: gaps in it are frames this
    /// consumer missed (gaps in `seq` may be upstream drops, not ours).
    pub ordinal: u64,
    pub timestamp_ns: u64,
    /// Wall clock (ns since the Unix epoch) when the frame's source on this host began it,
    /// passed on by every stage: what its latency is counted from (`timestamp_ns` may be a
    /// media time, a video file's presentation time).
    pub born_ns: u64,
    /// The generation of the producer process that published it (`ring::Producer`).
    pub flags: u32,
    pub format: FrameFormat,
    pub layout: FrameLayout,
}

/// What changes from frame to frame in a slot's metadata ([`SlotMeta`]), as a consumer
/// copies it when it claims the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameMeta {
    pub seq: u64,
    /// See [`SlotMeta::ordinal`].
    pub ordinal: u64,
    pub timestamp_ns: u64,
    /// See [`SlotMeta::born_ns`].
    pub born_ns: u64,
    /// See [`SlotMeta::flags`].
    pub flags: u32,
}

impl SlotMeta {
    /// Write the per-frame fields of the metadata at `meta`.
    ///
    /// # Safety
    /// `meta` points to a slot's metadata that nobody else reads or writes for the call (the
    /// producer holds the slot WRITING).
    pub unsafe fn write_frame(meta: *mut SlotMeta, frame: FrameMeta) {
        // SAFETY: forwarded from the caller; field by field, so `format` and `layout` are
        // left as the creator wrote them.
        unsafe {
            (&raw mut (*meta).seq).write(frame.seq);
            (&raw mut (*meta).ordinal).write(frame.ordinal);
            (&raw mut (*meta).timestamp_ns).write(frame.timestamp_ns);
            (&raw mut (*meta).born_ns).write(frame.born_ns);
            (&raw mut (*meta).flags).write(frame.flags);
        }
    }

    /// Read the per-frame fields of the metadata at `meta`.
    ///
    /// # Safety
    /// `meta` points to a slot's metadata that nobody writes for the call (the caller holds a
    /// claim on the slot, which keeps the producer out).
    pub unsafe fn read_frame(meta: *const SlotMeta) -> FrameMeta {
        // SAFETY: forwarded from the caller.
        unsafe {
            FrameMeta {
                seq: (&raw const (*meta).seq).read(),
                ordinal: (&raw const (*meta).ordinal).read(),
                timestamp_ns: (&raw const (*meta).timestamp_ns).read(),
                born_ns: (&raw const (*meta).born_ns).read(),
                flags: (&raw const (*meta).flags).read(),
            }
        }
    }
}

/// One slot's synchronisation word and metadata.
#[repr(C)]
pub struct SlotState {
    /// Bits 0-15: consumers reading it now (claims). Bits 16-31: consumers that have yet to
    /// read it (pending). Bit 32: the producer is writing it. Bits 33-63: low bits of seq + 1,
    /// so a slot rewritten with another frame never compares equal (no ABA).
    pub state: AtomicU64,
    /// Full sequence number of the frame in the slot.
    pub seq: AtomicU64,
    pub meta: UnsafeCell<SlotMeta>,
}

pub const WRITING: u64 = 1 << 32;
const GEN_SHIFT: u32 = 33;

/// Whether the slot holds a published frame (read or not): it was written once, and is not
/// being written now. A consumer's release keeps these bits.
pub fn holds_frame(state: u64) -> bool {
    state & WRITING == 0 && state >> GEN_SHIFT != 0
}

pub fn claim_bit(consumer: usize) -> u64 {
    1 << consumer
}

pub fn pending_bit(consumer: usize) -> u64 {
    1 << (16 + consumer)
}

pub fn claims(state: u64) -> u64 {
    state & 0xffff
}

pub fn pendings(state: u64) -> u64 {
    (state >> 16) & 0xffff
}

/// The state word of a slot just published with `seq`, pending for `consumers` (a mask).
pub fn published_state(seq: u64, consumers: u64) -> u64 {
    ((seq.wrapping_add(1)) << GEN_SHIFT) | (consumers << 16)
}

/// The whole control block.
#[repr(C)]
pub struct RingHeader {
    pub magic: u64,
    pub version: AtomicU32,
    pub depth: u32,
    pub n_consumers: u32,
    pub policies: [u8; MAX_CONSUMERS],
    /// Bytes per slot of frame data in the ring's data memfd, slot `i` at `i * slot_bytes`
    /// (0 when frames live on a GPU and there is no data memfd).
    pub slot_bytes: u64,
    pub format: FrameFormat,
    pub layout: FrameLayout,
    pub producer: CacheLine<ProducerState>,
    pub stream: CacheLine<StreamState>,
    pub release: CacheLine<ReleaseState>,
    pub consumers: [CacheLine<ConsumerState>; MAX_CONSUMERS],
    pub slots: [CacheLine<SlotState>; MAX_SLOTS],
}

// SAFETY: shared between threads only through atomics, and through `SlotMeta` cells whose
// access is serialised by each slot's state word (see `ring`).
unsafe impl Sync for RingHeader {}

// The plan budgets a ring's control block without importing the link (plan/ring_size.rs).
const _: () = assert!(
    (size_of::<RingHeader>() as u64).next_multiple_of(PAGE) == CONTROL_BYTES,
    "the ring header in whole pages is no longer plan::ring_size::CONTROL_BYTES: change that"
);

/// What a ring is made with.
#[derive(Debug, Clone)]
pub struct RingParams {
    pub format: FrameFormat,
    pub layout: FrameLayout,
    pub depth: u32,
    /// One policy code per consumer.
    pub policies: Vec<u8>,
    /// Whether frame data lives in the ring's own memory (a data memfd beside the control
    /// block).
    pub host_data: bool,
}

/// Its sizes are the plan's arithmetic ([`ring_size`]): the plan's budget counts a ring's host
/// memory there (`ring_size::host_bytes`).
impl RingParams {
    pub fn slot_bytes(&self) -> u64 {
        ring_size::slot_bytes(self.layout.total_bytes, self.host_data)
    }

    /// The control block's memfd: the header, in whole pages.
    pub fn control_bytes() -> u64 {
        CONTROL_BYTES
    }

    /// The data memfd: every slot's frame data (0: no data memfd).
    pub fn data_bytes(&self) -> u64 {
        self.slot_bytes() * self.depth as u64
    }
}
