//! The host memory a link's ring takes: its control block in whole pages and, for a ring with
//! frames in host memory, every slot's frame in whole pages. The plan's budget counts it and
//! the link makes its rings to it (`crate::link::header::RingParams`). It lives on the plan's
//! floor, below the link, so that the plan need not import the link; `link::header` checks
//! when it compiles that [`CONTROL_BYTES`] is its ring header's size.

/// Each slot of host-memory frame data is a whole number of pages (so a GPU can register the
/// memory as pinned), from the start of the data's memfd.
pub const PAGE: u64 = 4096;

/// The control block's memfd: the ring header (`link::header::RingHeader`) in whole pages.
pub const CONTROL_BYTES: u64 = 5 * PAGE;

/// Bytes per slot of frame data in host memory: a frame of `frame_bytes` in whole pages, or
/// 0 where frames live on a GPU (`host_data` false: the ring has no data memfd).
pub fn slot_bytes(frame_bytes: u64, host_data: bool) -> u64 {
    if host_data { frame_bytes.next_multiple_of(PAGE) } else { 0 }
}

/// Host memory a ring of `depth` slots of `frame_bytes` frames takes, both memfds.
pub fn host_bytes(frame_bytes: u64, depth: u32, host_data: bool) -> u64 {
    CONTROL_BYTES + slot_bytes(frame_bytes, host_data) * depth as u64
}
