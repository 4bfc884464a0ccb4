//! A mapped ring: the control block in shared memory and, for a ring with frames in host
//! memory, the slots' frame data. Such a ring is two memfds: the control block, which every
//! end maps read-write (consumers write their claims and counters there), and the slots'
//! frame data, which only the producer can write: each consumer gets a descriptor of it open
//! for reading only, maps it read-only and closes it ([`RingMap::fds_for`],
//! [`Mapping::read_only`]).
#![allow(unsafe_code)]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use gpuipc_plugin_api::{FrameFormat, FrameLayout};

use crate::link::check::RingGeometry;
use crate::link::error::LinkError;
use crate::link::header::{
    ABORTED, MAGIC, MAX_SLOTS, RingHeader, RingParams, VERSION, claim_bit, holds_frame, pending_bit,
};
use crate::link::shm::{Mapping, SharedMemory};
use crate::link::wakes::{RingSides, Side};

/// What a stage does with the frames of a ring it maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAccess {
    /// A consumer: slot data comes through a descriptor open for reading only, mapped
    /// read-only and closed, so a stray write faults in this stage, and no code in it can
    /// make the mapping writable or map the data again writable: the frame other consumers
    /// read stays as the producer wrote it. The control block stays writable.
    Read,
    /// The producer.
    Write,
}

/// The descriptors one end of a ring gets: the control block's, and for a ring whose frames
/// live in host memory the data memfd's (read-write for the producer, read-only for a
/// consumer).
#[derive(Debug)]
pub struct RingFds {
    pub control: OwnedFd,
    pub data: Option<OwnedFd>,
}

/// A host ring's slot data as this end holds it.
enum SlotData {
    /// The host's, which made it: the memory, read-write, and the read-only descriptor its
    /// consumers are given (made once, at create).
    Created { memory: SharedMemory, read_only: OwnedFd },
    /// The producer's: read-write.
    Write(SharedMemory),
    /// A consumer's: a read-only mapping, no descriptor.
    Read(Mapping),
}

impl SlotData {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            SlotData::Created { memory, .. } | SlotData::Write(memory) => memory.as_ptr(),
            SlotData::Read(mapping) => mapping.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            SlotData::Created { memory, .. } | SlotData::Write(memory) => memory.len(),
            SlotData::Read(mapping) => mapping.len(),
        }
    }
}

/// A mapped ring: control block plus, for host rings, the slots' frame data.
pub struct RingMap {
    control: SharedMemory,
    /// `None` when frames live on a GPU.
    data: Option<SlotData>,
    /// The header's plain fields as checked at create or open. Accessors answer from this copy,
    /// so a peer that scribbles the shared header later cannot move a slot out of bounds.
    checked: RingGeometry,
}

impl RingMap {
    /// Create and initialise a ring (the host does this, before any stage starts): the control
    /// block in memfd `name`, frame data in host memory in memfd `<name>-data`.
    pub fn create(name: &str, params: &RingParams) -> Result<RingMap, LinkError> {
        let checked = RingGeometry::planned(params, name)?;
        let shm = SharedMemory::create(name, RingParams::control_bytes() as usize)?;
        let data = match params.data_bytes() {
            0 => None,
            bytes => {
                let memory = SharedMemory::create(&format!("{name}-data"), bytes as usize)?;
                let read_only = memory.read_only_fd()?;
                Some(SlotData::Created { memory, read_only })
            }
        };
        let header = shm.as_ptr() as *mut RingHeader;
        // SAFETY: the memory is fresh, zeroed, at least a header long, page-aligned, and not
        // yet shared with anyone; zero is a valid value for every field.
        unsafe {
            (*header).magic = MAGIC;
            (*header).depth = params.depth;
            (*header).n_consumers = params.policies.len() as u32;
            for (k, &policy) in params.policies.iter().enumerate() {
                (*header).policies[k] = policy;
            }
            (*header).slot_bytes = params.slot_bytes();
            (*header).format = params.format;
            (*header).layout = params.layout;
            // Every slot's frames have the ring's format and layout: written here once, not
            // by the producer per frame (see `SlotMeta`).
            for slot in (*header).slots.iter_mut() {
                let meta = slot.0.meta.get_mut();
                meta.format = params.format;
                meta.layout = params.layout;
            }
            // Written last: pairs with the Acquire load in `open`, publishing every field above.
            (*header).version.store(VERSION, Ordering::Release);
        }
        Ok(RingMap { control: shm, data, checked })
    }

    /// The descriptors an end of this ring is given (see [`RingFds`]), in that order: the
    /// control block's, then the data memfd's, read-write for [`FrameAccess::Write`] and open
    /// for reading only for [`FrameAccess::Read`]. The host's ring ([`RingMap::create`]) has
    /// both; a stage's has none to give for reading.
    pub fn fds_for(&self, access: FrameAccess) -> Vec<BorrowedFd<'_>> {
        let data = match (&self.data, access) {
            (Some(SlotData::Created { memory, .. } | SlotData::Write(memory)), FrameAccess::Write) => {
                Some(memory.as_fd())
            }
            (Some(SlotData::Created { read_only, .. }), FrameAccess::Read) => Some(read_only.as_fd()),
            _ => None,
        };
        std::iter::once(self.control.as_fd()).chain(data).collect()
    }

    /// Map a ring received as descriptors and check its header against the rules every ring
    /// keeps (see [`check`](super::check)); without a plan, errors name the link "(unnamed)".
    #[cfg(test)]
    pub fn open(fds: RingFds, access: FrameAccess) -> Result<RingMap, LinkError> {
        RingMap::map_checked(fds, None, "(unnamed)", access)
    }

    /// This ring opened again by another end, through copies of the descriptors that end is
    /// given, as a stage process maps them.
    #[cfg(test)]
    pub fn reopen(&self, access: FrameAccess) -> RingMap {
        let mut fds = self.fds_for(access).into_iter().map(|fd| fd.try_clone_to_owned().unwrap());
        let fds = RingFds { control: fds.next().unwrap(), data: fds.next() };
        RingMap::open(fds, access).unwrap()
    }

    /// Map a ring received as descriptors and check every header field against the rules and
    /// against `expected`, the plan's params for `link` ("gen -> grade"), and the data memfd
    /// against the header; a mismatch is refused with an error naming the link and the field.
    /// With [`FrameAccess::Read`], the data memfd's descriptor must be open for reading only,
    /// and is closed once mapped.
    pub fn open_checked(
        fds: RingFds,
        expected: &RingParams,
        link: &str,
        access: FrameAccess,
    ) -> Result<RingMap, LinkError> {
        let plan = RingGeometry::planned(expected, link)?;
        RingMap::map_checked(fds, Some(&plan), link, access)
    }

    fn map_checked(
        fds: RingFds,
        plan: Option<&RingGeometry>,
        link: &str,
        access: FrameAccess,
    ) -> Result<RingMap, LinkError> {
        let map_error = |what| move |source| LinkError::Map { link: link.to_owned(), what, source };
        let control = SharedMemory::open(fds.control).map_err(map_error("control block"))?;
        let checked = RingGeometry::read(&control, plan, link)?;
        let data = match (fds.data, access) {
            (None, _) => None,
            (Some(fd), FrameAccess::Write) => {
                Some(SlotData::Write(SharedMemory::open(fd).map_err(map_error("data memfd"))?))
            }
            (Some(fd), FrameAccess::Read) => {
                Some(SlotData::Read(Mapping::read_only(fd).map_err(map_error("data memfd for reading"))?))
            }
        };
        checked.check_data(data.as_ref().map(|d| d.len() as u64), link)?;
        Ok(RingMap { control, data, checked })
    }

    pub fn header(&self) -> &RingHeader {
        // SAFETY: the mapping is page-aligned and at least a header long (checked in `open`,
        // sized in `create`); the header is only mutated through atomics and UnsafeCells.
        unsafe { &*(self.control.as_ptr() as *const RingHeader) }
    }

    /// The control block's memory.
    #[cfg(test)]
    pub fn control_block(&self) -> &SharedMemory {
        &self.control
    }

    pub fn depth(&self) -> usize {
        self.checked.depth()
    }

    pub fn n_consumers(&self) -> usize {
        self.checked.n_consumers()
    }

    /// Consumer `c`'s policy code.
    pub fn policy(&self, c: usize) -> u8 {
        self.checked.policy(c)
    }

    pub fn format(&self) -> FrameFormat {
        self.checked.format()
    }

    pub fn layout(&self) -> FrameLayout {
        self.checked.layout()
    }

    /// Host address of slot `i`'s frame data, or `None` when frames live on a GPU (or the ring
    /// has no slot `i`). Opened with [`FrameAccess::Read`], the memory is read-only.
    pub fn slot_data(&self, i: usize) -> Option<(*mut u8, u64)> {
        let (offset, len) = self.checked.slot_range(i)?;
        let data = self.data.as_ref()?;
        (offset.checked_add(len)? <= data.len() as u64).then(|| {
            // SAFETY: offset..offset + len lies within the data mapping (checked just above),
            // from the private checked copy, not from the shared header.
            let ptr = unsafe { data.as_ptr().add(offset as usize) };
            (ptr, len)
        })
    }

    /// End the run for everyone on this ring: waiters wake and see `Aborted`.
    pub fn abort(&self) {
        self.header().stream.0.closed.store(ABORTED, Ordering::Release);
        self.wake(Side::Consumers);
        self.wake(Side::Producer);
    }

    pub fn is_aborted(&self) -> bool {
        self.header().stream.0.closed.load(Ordering::Acquire) == ABORTED
    }

    /// Frames consumer `c` missed.
    pub fn dropped(&self, c: usize) -> u64 {
        self.header().consumers[c].0.dropped.load(Ordering::Relaxed)
    }

    /// Frames in the ring that consumer `c` has yet to read or is reading: its queue, up to
    /// the ring's depth (the metrics endpoint's occupancy). A look at each slot's state word,
    /// not one moment's: a frame may move while it counts.
    pub fn queued(&self, c: usize) -> u64 {
        let mine = pending_bit(c) | claim_bit(c);
        let slots = &self.header().slots[..self.depth().min(MAX_SLOTS)];
        slots
            .iter()
            .map(|slot| slot.0.state.load(Ordering::Relaxed))
            .filter(|&state| holds_frame(state) && state & mine != 0)
            .count() as u64
    }

    /// Frames consumer `c` took from this link and lost (see `ConsumerState::lost`).
    pub fn lost(&self, c: usize) -> u64 {
        self.header().consumers[c].0.lost.load(Ordering::Relaxed)
    }

    /// Count one frame consumer `c` took from this link as lost.
    pub fn count_lost(&self, c: usize) {
        self.header().consumers[c].0.lost.fetch_add(1, Ordering::Relaxed);
    }
}

impl RingSides for RingMap {
    fn futex(&self, side: Side) -> (&std::sync::atomic::AtomicU32, &std::sync::atomic::AtomicU32) {
        match side {
            Side::Consumers => {
                let p = &self.header().producer.0;
                (&p.publish_futex, &p.consumers_sleeping)
            }
            Side::Producer => {
                let r = &self.header().release.0;
                (&r.release_futex, &r.producer_sleeping)
            }
        }
    }

    fn depth(&self) -> usize {
        RingMap::depth(self)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_bad_control_block_is_refused() {
        let shm = crate::link::shm::SharedMemory::create("gpuipc-test-bad", 1 << 20).unwrap();
        let fds = RingFds { control: shm.as_fd().try_clone_to_owned().unwrap(), data: None };
        assert!(matches!(RingMap::open(fds, FrameAccess::Write), Err(LinkError::Mismatch { field: "magic", .. })));
    }
}
