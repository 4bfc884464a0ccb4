//! Frames in the ring's shared memory with a cuda end: that end copies each frame through a
//! device buffer of its own, over the ring registered as pinned memory, and waits for the copy
//! before it publishes or releases, since the cpu end cannot wait on the GPU.

use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, device_frame};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent, PinnedHost};
use crate::link::wakes::HeldWakes;
use crate::link::{ReadSlot, RingMap};

/// The cuda end of a host ring: a device buffer, an event to wait for its copies, and the
/// ring's slot data registered as pinned memory.
pub struct Staged {
    gpu: Arc<Gpu>,
    staging: DeviceMemory,
    copied: IpcEvent,
    pinned: PinnedHost,
}

impl Staged {
    /// The cuda end of a ring this stage produces into: copies download into its slots.
    /// Declared after the ring's owner where it is held, or dropped first: it unregisters
    /// pinned memory of the ring, which must still be mapped then.
    pub fn writer(gpu: &Arc<Gpu>, ring: &RingMap) -> Result<Staged, GpuError> {
        let (first, bytes) = slots(ring);
        #[allow(unsafe_code)]
        // SAFETY: the ring's mapping outlives this end: the frame loop and `Output::Ring`
        // declare the end before the ring's owner, so it drops first. Slot data is only ever
        // touched through raw pointers handed to plugins for a taken slot, after the copies
        // into it are waited for.
        let pinned = unsafe { PinnedHost::register(gpu, first, bytes)? };
        Staged::with(gpu, ring, pinned)
    }

    /// The cuda end of a ring this stage consumes: copies upload from its slots, which this
    /// stage maps read-only. Dropped before the ring's mapping, as [`Staged::writer`].
    pub fn reader(gpu: &Arc<Gpu>, ring: &RingMap) -> Result<Staged, GpuError> {
        let (first, bytes) = slots(ring);
        #[allow(unsafe_code)]
        // SAFETY: as in `writer`; the GPU only reads this range.
        let pinned = unsafe { PinnedHost::register_for_upload(gpu, first, bytes)? };
        if !pinned.is_pinned() {
            tracing::debug!("the GPU cannot pin read-only memory: uploads copy from pageable memory");
        }
        Staged::with(gpu, ring, pinned)
    }

    fn with(gpu: &Arc<Gpu>, ring: &RingMap, pinned: PinnedHost) -> Result<Staged, GpuError> {
        let staging = DeviceMemory::private(gpu, ring.layout().total_bytes as usize)?;
        let (copied, _) = IpcEvent::create(gpu)?;
        Ok(Staged { gpu: gpu.clone(), staging, copied, pinned })
    }

    /// Enqueue a copy, record the event and wait for it: the host slot is released or
    /// published right after, and the other end cannot wait on the GPU.
    fn copy_and_wait(&self, copy: impl FnOnce() -> Result<(), GpuError>) -> Result<(), GpuError> {
        copy()?;
        self.copied.record(self.gpu.stream())?;
        self.copied.synchronize()
    }
}

/// Where the ring's slot data starts, and how many bytes all slots take.
fn slots(ring: &RingMap) -> (*mut u8, usize) {
    let (first, slot_bytes) = ring.slot_data(0).expect("host rings carry frame data");
    (first, slot_bytes as usize * ring.depth())
}

/// Where `slot`'s frame data starts in the range registered for the ring.
fn slot_offset(ring: &RingMap, slot: usize) -> usize {
    let (first, _) = ring.slot_data(0).expect("host rings carry frame data");
    let (ptr, _) = ring.slot_data(slot).expect("host rings carry frame data");
    ptr as usize - first as usize
}

impl ReadEnd for Staged {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot, _held: Option<&Arc<HeldWakes>>) -> Result<RawFrame, GpuError> {
        let bytes = ring.layout().total_bytes as usize;
        self.copy_and_wait(|| self.pinned.upload(self.staging.addr(), slot_offset(ring, slot.index()), bytes))?;
        Ok(device_frame(ring, &self.staging, slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, _slot: usize) -> Result<(), GpuError> {
        Ok(())
    }
}

impl WriteEnd for Staged {
    fn prepare(&self, _slot: usize) -> Result<(), GpuError> {
        Ok(())
    }

    fn frame(&self, ring: &RingMap, _slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        device_frame(ring, &self.staging, seq, timestamp_ns)
    }

    fn finish(&self, ring: &RingMap, slot: usize) -> Result<(), GpuError> {
        let bytes = ring.layout().total_bytes as usize;
        self.copy_and_wait(|| self.pinned.download(slot_offset(ring, slot), self.staging.addr(), bytes))
    }
}
