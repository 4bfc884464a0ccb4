//! Frames in the ring's own shared memory, read and written by cpu stages in place.

use std::sync::Arc;

use gpuipc_plugin_api::abi::RawFrame;

use super::{ReadEnd, WriteEnd, host_frame};
use crate::gpu::GpuError;
use crate::link::wakes::HeldWakes;
use crate::link::{ReadSlot, RingMap};

/// Both ends of a host ring: the memory is there, and the ring's ordering is all it needs.
pub struct Host;

impl ReadEnd for Host {
    fn frame(&self, ring: &RingMap, slot: &ReadSlot, _held: Option<&Arc<HeldWakes>>) -> Result<RawFrame, GpuError> {
        Ok(host_frame(ring, slot.index(), slot.meta().seq, slot.meta().timestamp_ns))
    }

    fn done(&self, _slot: usize) -> Result<(), GpuError> {
        Ok(())
    }
}

impl WriteEnd for Host {
    fn prepare(&self, _slot: usize) -> Result<(), GpuError> {
        Ok(())
    }

    fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        host_frame(ring, slot, seq, timestamp_ns)
    }

    fn finish(&self, _ring: &RingMap, _slot: usize) -> Result<(), GpuError> {
        Ok(())
    }
}
