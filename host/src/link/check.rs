//! The check of a ring's control block against the plan and against the rules that keep every
//! access to the ring in bounds, and what it leaves: a private, checked [`RingGeometry`].
//!
//! Another process writes that memory and may be buggy or die at any instruction, so each plain
//! header field is read once into a private copy; only the copy is checked, and only the copy is
//! used afterwards (a peer that scribbles the header later cannot move a slot out of bounds).
//! A host ring's slot data is a memfd of its own; [`RingGeometry::check_data`] checks it holds
//! every slot.
#![allow(unsafe_code)]

use std::fmt::Display;
use std::sync::atomic::Ordering;

use gpuipc_plugin_api::format::MAX_PLANES;
use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

use super::error::LinkError;
use super::header::{
    MAGIC, MAX_CONSUMERS, MAX_SLOTS, PAGE, POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST, RingHeader, RingParams,
    VERSION,
};
use super::shm::SharedMemory;

/// A ring's shape as checked when it was created or opened: every value in it holds together,
/// and (for an opened ring) matched the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingGeometry {
    depth: u32,
    n_consumers: u32,
    policies: [u8; MAX_CONSUMERS],
    slot_bytes: u64,
    format: FrameFormat,
    layout: FrameLayout,
    /// Where the last slot's data ends in the data memfd: `slot_bytes * depth`.
    data_bytes: u64,
}

impl RingGeometry {
    /// The geometry of a ring made with `params`; refuses params that do not hold together
    /// (the errors name the header field each value would go to).
    pub fn planned(params: &RingParams, link: &str) -> Result<RingGeometry, LinkError> {
        if params.policies.len() > MAX_CONSUMERS {
            return Err(mismatch(
                link,
                "n_consumers",
                params.policies.len(),
                format!("expected at most {MAX_CONSUMERS}"),
            ));
        }
        let mut policies = [0; MAX_CONSUMERS];
        policies[..params.policies.len()].copy_from_slice(&params.policies);
        let slot_bytes = if params.host_data {
            params.layout.total_bytes.checked_next_multiple_of(PAGE).ok_or_else(|| {
                mismatch(
                    link,
                    "layout.total_bytes",
                    params.layout.total_bytes,
                    "expected a size that fits 64 bits in whole pages",
                )
            })?
        } else {
            0
        };
        let fields = Fields {
            magic: MAGIC,
            version: VERSION,
            depth: params.depth,
            n_consumers: params.policies.len() as u32,
            policies,
            slot_bytes,
            format: params.format,
            layout: params.layout,
        };
        fields.check(link)
    }

    /// Read the header of the ring whose control block is mapped in `shm` once, and check the
    /// copy: against the rules, then against `plan` when there is one.
    pub fn read(shm: &SharedMemory, plan: Option<&RingGeometry>, link: &str) -> Result<RingGeometry, LinkError> {
        let found = Fields::read(shm, link)?;
        if found.magic != MAGIC {
            return Err(mismatch(
                link,
                "magic",
                format_args!("{:#x}", found.magic),
                format!("expected {MAGIC:#x} (\"GPUIPCRG\")"),
            ));
        }
        if found.version != VERSION {
            return Err(mismatch(link, "version", found.version, format!("expected {VERSION}")));
        }
        let geometry = found.check(link)?;
        if let Some(plan) = plan {
            geometry.compare(plan, link)?;
        }
        Ok(geometry)
    }

    /// Check the ring's data memfd, `len` bytes long (`None`: none came with the ring): there is
    /// one exactly when frames live in host memory, and it holds every slot.
    pub fn check_data(&self, len: Option<u64>, link: &str) -> Result<(), LinkError> {
        let problem = |problem: String| Err(LinkError::Data { link: link.to_owned(), problem });
        match (self.slot_bytes, len) {
            (0, None) => Ok(()),
            (0, Some(len)) => {
                problem(format!("its frames live on a GPU, but a data memfd of {len} bytes came with the ring"))
            }
            (_, None) => problem("its frames live in host memory, but no data memfd came with the ring".into()),
            (_, Some(len)) if self.data_bytes > len => Err(mismatch(
                link,
                "slot_bytes * depth",
                self.data_bytes,
                format!("expected at most the {len} bytes of the ring's data memfd"),
            )),
            _ => Ok(()),
        }
    }

    pub fn depth(&self) -> usize {
        self.depth as usize
    }

    pub fn format(&self) -> FrameFormat {
        self.format
    }

    pub fn n_consumers(&self) -> usize {
        self.n_consumers as usize
    }

    /// Consumer `c`'s policy code (`c` below [`RingGeometry::n_consumers`]).
    pub fn policy(&self, c: usize) -> u8 {
        self.policies[c]
    }

    pub fn layout(&self) -> FrameLayout {
        self.layout
    }

    /// (offset from the start of the data memfd, length) of slot `i`'s frame data; `None` for
    /// a slot the ring does not have, or when frames live on a GPU.
    pub fn slot_range(&self, i: usize) -> Option<(u64, u64)> {
        if self.slot_bytes == 0 || i >= self.depth as usize {
            return None;
        }
        let offset = self.slot_bytes.checked_mul(i as u64)?;
        (offset.checked_add(self.slot_bytes)? <= self.data_bytes).then_some((offset, self.slot_bytes))
    }

    /// The first field that differs from `plan`, as an error.
    fn compare(&self, plan: &RingGeometry, link: &str) -> Result<(), LinkError> {
        let differs = |field: &'static str, found: &dyn Display, planned: &dyn Display| {
            Err(mismatch(link, field, found, format!("the plan says {planned}")))
        };
        if self.depth != plan.depth {
            return differs("depth", &self.depth, &plan.depth);
        }
        if self.n_consumers != plan.n_consumers {
            return differs("n_consumers", &self.n_consumers, &plan.n_consumers);
        }
        for (k, (found, planned)) in self.policies.iter().zip(&plan.policies).enumerate() {
            if found != planned {
                return differs(POLICY_FIELDS[k], found, planned);
            }
        }
        if self.format != plan.format {
            return differs("format", &self.format, &plan.format);
        }
        let (layout, planned) = (&self.layout, &plan.layout);
        if layout.n_planes != planned.n_planes {
            return differs("layout.n_planes", &layout.n_planes, &planned.n_planes);
        }
        for (i, (p, q)) in layout.planes.iter().zip(&planned.planes).enumerate() {
            let pairs = [(p.offset, q.offset), (p.pitch, q.pitch), (p.row_bytes, q.row_bytes), (p.rows, q.rows)];
            for (what, (found, planned)) in pairs.into_iter().enumerate() {
                if found != planned {
                    return differs(PLANE_FIELDS[i][what], &found, &planned);
                }
            }
        }
        if layout.total_bytes != planned.total_bytes {
            return differs("layout.total_bytes", &layout.total_bytes, &planned.total_bytes);
        }
        if self.slot_bytes != plan.slot_bytes {
            return differs("slot_bytes", &self.slot_bytes, &plan.slot_bytes);
        }
        debug_assert_eq!(self, plan, "every field was compared");
        Ok(())
    }
}

/// The plain fields of a ring header, copied out of shared memory once.
#[derive(Debug, Clone, Copy)]
struct Fields {
    magic: u64,
    version: u32,
    depth: u32,
    n_consumers: u32,
    policies: [u8; MAX_CONSUMERS],
    slot_bytes: u64,
    format: FrameFormat,
    layout: FrameLayout,
}

impl Fields {
    fn read(shm: &SharedMemory, link: &str) -> Result<Fields, LinkError> {
        if shm.len() < size_of::<RingHeader>() {
            return Err(LinkError::TooShort {
                link: link.to_owned(),
                len: shm.len() as u64,
                needed: size_of::<RingHeader>() as u64,
            });
        }
        let h = shm.as_ptr() as *const RingHeader;
        // SAFETY: the mapping is at least a header long (checked above) and page-aligned, so
        // every field below is in bounds and aligned. Another process may write these bytes at
        // any time: `version` is read through its atomic; every other field is read exactly
        // once, volatile (so the compiler can neither re-read it nor assume it unchanged), into
        // this private copy. Each is integers only (u64, u32, [u8; N] and repr(C) structs of
        // u32 and u64), valid for any bit pattern, so whatever a peer wrote is a value we check.
        unsafe {
            // Acquire: pairs with the creator's Release store of `version` (written last), so
            // the fields read below are at least what it wrote before publishing the header.
            let version = (*h).version.load(Ordering::Acquire);
            Ok(Fields {
                magic: std::ptr::read_volatile(&raw const (*h).magic),
                version,
                depth: std::ptr::read_volatile(&raw const (*h).depth),
                n_consumers: std::ptr::read_volatile(&raw const (*h).n_consumers),
                policies: std::ptr::read_volatile(&raw const (*h).policies),
                slot_bytes: std::ptr::read_volatile(&raw const (*h).slot_bytes),
                format: std::ptr::read_volatile(&raw const (*h).format),
                layout: std::ptr::read_volatile(&raw const (*h).layout),
            })
        }
    }

    /// The rules every ring header keeps, whatever the plan: counts in range, known codes, a
    /// layout that holds the format's planes, slots of whole pages, and sizes whose sums and
    /// products fit 64 bits.
    #[allow(clippy::manual_is_multiple_of, reason = "is_multiple_of needs Rust 1.87; the workspace says 1.85")]
    fn check(&self, link: &str) -> Result<RingGeometry, LinkError> {
        let err = |field, found: &dyn Display, expected: String| Err(mismatch(link, field, found, expected));
        if self.depth == 0 || self.depth as usize > MAX_SLOTS {
            return err("depth", &self.depth, format!("expected 1..={MAX_SLOTS}"));
        }
        if self.n_consumers as usize > MAX_CONSUMERS {
            return err("n_consumers", &self.n_consumers, format!("expected at most {MAX_CONSUMERS}"));
        }
        for (k, &policy) in self.policies[..self.n_consumers as usize].iter().enumerate() {
            if ![POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST].contains(&policy) {
                let expected = format!(
                    "expected a policy code: {POLICY_BLOCK} (block), {POLICY_DROP_OLDEST} (drop_oldest) or {POLICY_LATEST} (latest)"
                );
                return err(POLICY_FIELDS[k], &policy, expected);
            }
        }
        check_layout(self.format, &self.layout, link)?;
        let total = self.layout.total_bytes;
        if self.slot_bytes % PAGE != 0 {
            return err("slot_bytes", &self.slot_bytes, format!("expected a multiple of the page size {PAGE}"));
        }
        if self.slot_bytes != 0 && self.slot_bytes < total {
            let expected =
                format!("expected 0 (frames on a GPU) or at least the frame's {total} bytes (layout.total_bytes)");
            return err("slot_bytes", &self.slot_bytes, expected);
        }
        let Some(data_bytes) = self.slot_bytes.checked_mul(self.depth as u64) else {
            return err(
                "slot_bytes",
                &self.slot_bytes,
                format!("expected slot_bytes * depth {} to fit 64 bits", self.depth),
            );
        };
        Ok(RingGeometry {
            depth: self.depth,
            n_consumers: self.n_consumers,
            policies: self.policies,
            slot_bytes: self.slot_bytes,
            format: self.format,
            layout: self.layout,
            data_bytes,
        })
    }
}

/// A layout fits `format` when it has the format's planes, each with the format's rows of the
/// format's row bytes, at a pitch at least a row long (padded pitches are fine), each ending
/// within `total_bytes`, no two overlapping.
fn check_layout(format: FrameFormat, layout: &FrameLayout, link: &str) -> Result<(), LinkError> {
    let err = |field, found: &dyn Display, expected: String| Err(mismatch(link, field, found, expected));
    if format.width as u64 * format.height as u64 > MAX_PIXELS {
        return err("format", &format, format!("expected at most {MAX_PIXELS} pixels a frame"));
    }
    let Some(canonical) = FrameLayout::for_format(format) else {
        return match format.pixel_format() {
            None => {
                let known: Vec<_> = PixelFormat::ALL.iter().map(|p| format!("{} ({p})", *p as u32)).collect();
                err("format.pixel", &format.pixel, format!("expected a known pixel format code: {}", known.join(", ")))
            }
            Some(_) if format.width == 0 => err("format.width", &format.width, "expected at least 1".into()),
            Some(_) => err("format.height", &format.height, "expected at least 1".into()),
        };
    };
    if layout.n_planes != canonical.n_planes {
        return err("layout.n_planes", &layout.n_planes, format!("expected {} for {format}", canonical.n_planes));
    }
    let mut spans = [(0u64, 0u64); MAX_PLANES];
    for (i, (p, c)) in layout.planes().iter().zip(canonical.planes()).enumerate() {
        let field = &PLANE_FIELDS[i];
        if p.row_bytes != c.row_bytes {
            return err(field[ROW_BYTES], &p.row_bytes, format!("expected {} for {format}", c.row_bytes));
        }
        if p.rows != c.rows {
            return err(field[ROWS], &p.rows, format!("expected {} for {format}", c.rows));
        }
        if p.pitch < p.row_bytes {
            return err(field[PITCH], &p.pitch, format!("expected at least the row's {} bytes", p.row_bytes));
        }
        let Some(size) = p.pitch.checked_mul(p.rows) else {
            return err(field[PITCH], &p.pitch, format!("expected pitch * {} rows to fit 64 bits", p.rows));
        };
        let end = p.offset.checked_add(size).filter(|&end| end <= layout.total_bytes);
        let Some(end) = end else {
            let expected = format!(
                "expected the plane's {size} bytes ({} rows of {}) to end within the frame's {} bytes (layout.total_bytes)",
                p.rows, p.pitch, layout.total_bytes
            );
            return err(field[OFFSET], &p.offset, expected);
        };
        if let Some(j) = spans[..i].iter().position(|&(start, stop)| p.offset < stop && start < end) {
            let (start, stop) = spans[j];
            let expected =
                format!("expected planes apart: bytes {}..{end} overlap plane {j}'s {start}..{stop}", p.offset);
            return err(field[OFFSET], &p.offset, expected);
        }
        spans[i] = (p.offset, end);
    }
    Ok(())
}

fn mismatch(link: &str, field: &'static str, found: impl Display, expected: impl Into<String>) -> LinkError {
    LinkError::Mismatch { link: link.to_owned(), field, found: found.to_string(), expected: expected.into() }
}

/// Far more pixels than a frame the planner allows (4 GiB) can have, and few enough that
/// [`FrameLayout::for_format`]'s unchecked arithmetic cannot overflow on a scribbled format.
const MAX_PIXELS: u64 = 1 << 40;

const OFFSET: usize = 0;
const PITCH: usize = 1;
const ROW_BYTES: usize = 2;
const ROWS: usize = 3;

/// Field names for errors, by plane and by [`OFFSET`], [`PITCH`], [`ROW_BYTES`], [`ROWS`].
const PLANE_FIELDS: [[&str; 4]; MAX_PLANES] = [
    ["layout.planes[0].offset", "layout.planes[0].pitch", "layout.planes[0].row_bytes", "layout.planes[0].rows"],
    ["layout.planes[1].offset", "layout.planes[1].pitch", "layout.planes[1].row_bytes", "layout.planes[1].rows"],
    ["layout.planes[2].offset", "layout.planes[2].pitch", "layout.planes[2].row_bytes", "layout.planes[2].rows"],
    ["layout.planes[3].offset", "layout.planes[3].pitch", "layout.planes[3].row_bytes", "layout.planes[3].rows"],
];

const POLICY_FIELDS: [&str; MAX_CONSUMERS] = [
    "policies[0]",
    "policies[1]",
    "policies[2]",
    "policies[3]",
    "policies[4]",
    "policies[5]",
    "policies[6]",
    "policies[7]",
    "policies[8]",
    "policies[9]",
    "policies[10]",
    "policies[11]",
    "policies[12]",
    "policies[13]",
    "policies[14]",
    "policies[15]",
];

#[cfg(test)]
mod tests {
    //! Each test makes a good ring, scribbles one header field through a second mapping of its
    //! control block (as a buggy peer would), and opens it again.
    use std::os::fd::{AsFd, OwnedFd};

    use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

    use super::*;
    use crate::link::ring::{FrameAccess, RingFds, RingMap};

    const LINK: &str = "gen -> grade";

    /// I420 64 x 48: planes at 0 (3072 bytes), 3072 and 4608 (1536 each), 6144 bytes a frame,
    /// 8192 a slot.
    fn params() -> RingParams {
        let format = FrameFormat::new(PixelFormat::I420, 64, 48);
        let layout = FrameLayout::for_format(format).unwrap();
        RingParams { format, layout, depth: 4, policies: vec![POLICY_BLOCK, POLICY_LATEST], host_data: true }
    }

    fn fd(shm: &SharedMemory) -> OwnedFd {
        shm.as_fd().try_clone_to_owned().unwrap()
    }

    /// Copies of the descriptors the host gives an end of `ring` with `access`.
    fn fds(ring: &RingMap, access: FrameAccess) -> RingFds {
        let mut fds = ring.fds_for(access).into_iter().map(|fd| fd.try_clone_to_owned().unwrap());
        RingFds { control: fds.next().unwrap(), data: fds.next() }
    }

    /// A ring made with `params()`, with `scribble` then applied to its header.
    fn scribbled(scribble: impl FnOnce(*mut RingHeader)) -> RingMap {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let other = SharedMemory::open(fd(ring.control_block())).unwrap();
        scribble(other.as_ptr() as *mut RingHeader);
        ring
    }

    /// Opens `ring` again against `params()`; asserts it is refused naming `LINK` and `field`,
    /// and returns the message.
    fn refused(ring: &RingMap, field: &str) -> String {
        let err = RingMap::open_checked(fds(ring, FrameAccess::Read), &params(), LINK, FrameAccess::Read)
            .err()
            .expect("refused");
        let message = err.to_string();
        match err {
            LinkError::Mismatch { link, field: f, .. } => {
                assert_eq!((link.as_str(), f), (LINK, field), "{message}");
            }
            other => panic!("{other}"),
        }
        assert!(message.starts_with(&format!("link {LINK}: ring header field {field} is ")), "{message}");
        message
    }

    /// As `refused`, for a ring whose header `scribble` changes.
    fn refused_after(field: &str, scribble: impl FnOnce(*mut RingHeader)) -> String {
        refused(&scribbled(scribble), field)
    }

    macro_rules! set {
        ($($field:tt)+) => {
            // SAFETY: (test) the header is a page-aligned mapping a header long; nobody else
            // uses the ring, and a scribbled field is what the test is about.
            |h: *mut RingHeader| unsafe { (*h).$($field)+ }
        };
    }

    #[test]
    fn a_good_ring_opens_with_or_without_a_plan() {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let planned = RingGeometry::planned(&params(), LINK).unwrap();
        let opened = RingMap::open_checked(fds(&ring, FrameAccess::Read), &params(), LINK, FrameAccess::Read).unwrap();
        assert_eq!(opened.depth(), 4);
        assert_eq!(opened.format(), params().format);
        assert_eq!(opened.layout(), params().layout);
        assert_eq!(opened.slot_data(3).unwrap().1, 8192);
        assert!(opened.slot_data(4).is_none());
        let opened = RingMap::open(fds(&ring, FrameAccess::Write), FrameAccess::Write).unwrap();
        assert_eq!(RingGeometry::read(opened.control_block(), Some(&planned), LINK).unwrap(), planned);
    }

    /// The permissions (`rw-s`, `r--s`, ...) of the mapping that holds `addr`, and whether the
    /// kernel would let this process make it writable (`mw`, "may write", among its VmFlags),
    /// from /proc/self/smaps.
    fn mapping_at(addr: usize) -> (String, bool) {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut found = None;
        for line in smaps.lines() {
            match &found {
                Some(perms) => {
                    if let Some(flags) = line.strip_prefix("VmFlags:") {
                        return (String::clone(perms), flags.split_whitespace().any(|f| f == "mw"));
                    }
                }
                // A mapping's first line: `start-end perms offset dev inode path`; its other
                // lines are `Key: value`.
                None => {
                    let mut fields = line.split_whitespace();
                    let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
                    let Some((start, end)) = range.split_once('-') else { continue };
                    let (Ok(start), Ok(end)) = (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16))
                    else {
                        continue;
                    };
                    if (start..end).contains(&addr) {
                        found = Some(perms.to_owned());
                    }
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn a_consumer_maps_frames_read_only_for_good_and_the_control_block_writable() {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let reader = RingMap::open_checked(fds(&ring, FrameAccess::Read), &params(), LINK, FrameAccess::Read).unwrap();
        let writer =
            RingMap::open_checked(fds(&ring, FrameAccess::Write), &params(), LINK, FrameAccess::Write).unwrap();
        let header = |map: &RingMap| mapping_at(map.control_block().as_ptr() as usize);
        let slot = |map: &RingMap, i| mapping_at(map.slot_data(i).unwrap().0 as usize);
        let last_byte = |map: &RingMap| {
            let (ptr, len) = map.slot_data(3).unwrap();
            mapping_at(ptr as usize + len as usize - 1)
        };
        let (rw, ro) = (("rw-s".to_owned(), true), ("r--s".to_owned(), false));
        // The reader's frames are read-only, and the kernel will not make them writable: the
        // descriptor they were mapped through was open for reading only.
        assert_eq!((header(&reader), slot(&reader, 0), last_byte(&reader)), (rw.clone(), ro.clone(), ro));
        assert_eq!((header(&writer), slot(&writer, 0), last_byte(&writer)), (rw.clone(), rw.clone(), rw.clone()));
        assert_eq!(slot(&ring, 2), rw, "the host's own mapping is its own");
    }

    #[test]
    fn a_consumer_refuses_a_writable_data_descriptor() {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let err =
            RingMap::open_checked(fds(&ring, FrameAccess::Write), &params(), LINK, FrameAccess::Read).err().unwrap();
        assert!(matches!(err, LinkError::Map { what: "data memfd for reading", .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "link gen -> grade: cannot map the ring's data memfd for reading: the descriptor is open for writing, not for reading only"
        );
    }

    #[test]
    fn a_missing_or_unexpected_data_memfd_is_refused() {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let control_only = RingFds { control: fd(ring.control_block()), data: None };
        let message =
            RingMap::open_checked(control_only, &params(), LINK, FrameAccess::Read).err().unwrap().to_string();
        assert_eq!(message, "link gen -> grade: its frames live in host memory, but no data memfd came with the ring");
        let mut on_gpu = params();
        on_gpu.host_data = false;
        let device = RingMap::create("gpuipc-test-check", &on_gpu).unwrap();
        let stray = SharedMemory::create("gpuipc-test-check-stray", 8192).unwrap();
        let with_data = RingFds { control: fd(device.control_block()), data: Some(stray.read_only_fd().unwrap()) };
        let message = RingMap::open_checked(with_data, &on_gpu, LINK, FrameAccess::Read).err().unwrap().to_string();
        assert_eq!(
            message,
            "link gen -> grade: its frames live on a GPU, but a data memfd of 8192 bytes came with the ring"
        );
    }

    #[test]
    fn a_device_ring_and_a_padded_layout_open() {
        let mut params = params();
        params.host_data = false;
        params.layout = gpuipc_plugin_api::testing::padded(params.layout, 13);
        let ring = RingMap::create("gpuipc-test-check", &params).unwrap();
        assert_eq!(ring.fds_for(FrameAccess::Read).len(), 1, "a control block and no data memfd");
        let opened = RingMap::open_checked(fds(&ring, FrameAccess::Read), &params, LINK, FrameAccess::Read).unwrap();
        assert_eq!(opened.layout().planes[0].pitch, 64 + 13);
        assert!(opened.slot_data(0).is_none(), "frames live on a GPU");
    }

    #[test]
    fn a_bad_magic_or_version_is_refused() {
        let message = refused_after("magic", set!(magic = 0x1234));
        assert!(message.ends_with("is 0x1234, expected 0x4752435049555047 (\"GPUIPCRG\")"), "{message}");
        let message = refused_after("version", |h| {
            // SAFETY: (test) as in `set!`.
            unsafe { (*h).version.store(VERSION + 1, Ordering::Release) }
        });
        assert!(message.ends_with(&format!("is {}, expected {VERSION}", VERSION + 1)), "{message}");
    }

    #[test]
    fn a_depth_out_of_range_or_not_planned_is_refused() {
        assert!(refused_after("depth", set!(depth = 0)).ends_with("is 0, expected 1..=64"));
        assert!(refused_after("depth", set!(depth = 65)).ends_with("is 65, expected 1..=64"));
        assert_eq!(
            refused_after("depth", set!(depth = 9)),
            "link gen -> grade: ring header field depth is 9, the plan says 4"
        );
    }

    #[test]
    fn a_consumer_count_too_large_or_not_planned_is_refused() {
        assert!(refused_after("n_consumers", set!(n_consumers = 3)).ends_with("is 3, the plan says 2"));
        assert!(refused_after("n_consumers", set!(n_consumers = 17)).ends_with("is 17, expected at most 16"));
    }

    #[test]
    fn an_unknown_or_unplanned_policy_is_refused() {
        let message = refused_after("policies[1]", set!(policies[1] = 9));
        assert!(
            message.ends_with("is 9, expected a policy code: 0 (block), 1 (drop_oldest) or 2 (latest)"),
            "{message}"
        );
        let message = refused_after("policies[1]", set!(policies[1] = POLICY_DROP_OLDEST));
        assert!(message.ends_with("is 1, the plan says 2"), "{message}");
        let message = refused_after("policies[5]", set!(policies[5] = POLICY_LATEST));
        assert!(message.ends_with("is 2, the plan says 0"), "past the consumers too: {message}");
    }

    #[test]
    fn a_format_not_planned_or_unknown_is_refused() {
        // A format whose canonical layout the header's layout does not fit.
        let message =
            refused_after("layout.planes[0].row_bytes", set!(format = FrameFormat::new(PixelFormat::I420, 32, 48)));
        assert!(message.ends_with("is 64, expected 32 for i420 32x48"), "{message}");
        // Another format with its own layout: the header holds together, the plan decides.
        let message = refused_after("format", |h| {
            let format = FrameFormat::new(PixelFormat::I420, 32, 24);
            // SAFETY: (test) as in `set!`.
            unsafe {
                (*h).format = format;
                (*h).layout = FrameLayout::for_format(format).unwrap();
            }
        });
        assert!(message.ends_with("is i420 32x24, the plan says i420 64x48"), "{message}");
        let message = refused_after("format.pixel", set!(format.pixel = 99));
        assert!(message.contains("is 99, expected a known pixel format code: 1 (rgb8), "), "{message}");
        refused_after("format.height", set!(format.height = 0));
        let message = refused_after("format", set!(format = FrameFormat::new(PixelFormat::Rgba8, u32::MAX, u32::MAX)));
        assert!(message.ends_with("expected at most 1099511627776 pixels a frame"), "{message}");
    }

    #[test]
    fn a_plane_past_the_frame_is_refused() {
        let message = refused_after("layout.planes[2].offset", set!(layout.planes[2].offset = 6144));
        assert!(
            message.ends_with("is 6144, expected the plane's 1536 bytes (24 rows of 64) to end within the frame's 6144 bytes (layout.total_bytes)"),
            "{message}"
        );
        refused_after("layout.planes[2].offset", set!(layout.planes[2].offset = u64::MAX - 100));
        refused_after("layout.planes[1].offset", set!(layout.total_bytes = 4000));
    }

    #[test]
    fn a_pitch_shorter_than_a_row_or_overflowing_is_refused() {
        let message = refused_after("layout.planes[0].pitch", set!(layout.planes[0].pitch = 32));
        assert!(message.ends_with("is 32, expected at least the row's 64 bytes"), "{message}");
        let message = refused_after("layout.planes[0].pitch", set!(layout.planes[0].pitch = u64::MAX / 2));
        assert!(message.ends_with("expected pitch * 48 rows to fit 64 bits"), "{message}");
        refused_after("layout.planes[1].rows", set!(layout.planes[1].rows = 25));
        refused_after("layout.n_planes", set!(layout.n_planes = 9));
    }

    #[test]
    fn overlapping_planes_are_refused() {
        let message = refused_after("layout.planes[1].offset", set!(layout.planes[1].offset = 1024));
        assert!(
            message.ends_with("is 1024, expected planes apart: bytes 1024..2560 overlap plane 0's 0..3072"),
            "{message}"
        );
        let message = refused_after("layout.planes[2].offset", set!(layout.planes[2].offset = 3072));
        assert!(message.ends_with("overlap plane 1's 3072..4608"), "{message}");
    }

    #[test]
    fn a_slot_size_off_the_page_too_small_or_overflowing_is_refused() {
        let message = refused_after("slot_bytes", set!(slot_bytes = 8000));
        assert!(message.ends_with("is 8000, expected a multiple of the page size 4096"), "{message}");
        let message = refused_after("slot_bytes", set!(slot_bytes = 4096));
        assert!(
            message.ends_with("expected 0 (frames on a GPU) or at least the frame's 6144 bytes (layout.total_bytes)"),
            "{message}"
        );
        let message = refused_after("slot_bytes", set!(slot_bytes = 1 << 62));
        assert!(message.ends_with("is 4611686018427387904, expected slot_bytes * depth 4 to fit 64 bits"), "{message}");
        // Frames on a GPU in a ring planned with frames in memory.
        assert!(refused_after("slot_bytes", set!(slot_bytes = 0)).ends_with("is 0, the plan says 8192"));
    }

    #[test]
    fn a_data_memfd_shorter_than_the_header_says_is_refused() {
        // Without a plan, a deeper ring than the data memfd holds (4 slots of 8192 bytes).
        let ring = scribbled(set!(depth = 5));
        let message = RingMap::open(fds(&ring, FrameAccess::Read), FrameAccess::Read).err().unwrap().to_string();
        assert_eq!(
            message,
            "link (unnamed): ring header field slot_bytes * depth is 40960, expected at most the 32768 bytes of the ring's data memfd"
        );
        // With the plan, a good header and a data memfd one slot short.
        let good = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let short = SharedMemory::create("gpuipc-test-check-short", 3 * 8192).unwrap();
        let fds = RingFds { control: fd(good.control_block()), data: Some(short.read_only_fd().unwrap()) };
        let message = RingMap::open_checked(fds, &params(), LINK, FrameAccess::Read).err().unwrap().to_string();
        assert_eq!(
            message,
            "link gen -> grade: ring header field slot_bytes * depth is 32768, expected at most the 24576 bytes of the ring's data memfd"
        );
    }

    #[test]
    fn a_control_block_shorter_than_a_header_is_refused() {
        let short = SharedMemory::create("gpuipc-test-check-short", 4096).unwrap();
        let fds = RingFds { control: fd(&short), data: None };
        let message = RingMap::open_checked(fds, &params(), LINK, FrameAccess::Read).err().unwrap().to_string();
        let header = size_of::<RingHeader>();
        assert_eq!(
            message,
            format!(
                "link gen -> grade: the ring's control block is 4096 bytes, smaller than a ring header ({header} bytes)"
            )
        );
    }

    #[test]
    fn a_header_scribbled_after_open_does_not_change_the_ring() {
        let ring = RingMap::create("gpuipc-test-check", &params()).unwrap();
        let opened =
            RingMap::open_checked(fds(&ring, FrameAccess::Write), &params(), LINK, FrameAccess::Write).unwrap();
        let other = SharedMemory::open(fd(ring.control_block())).unwrap();
        let h = other.as_ptr() as *mut RingHeader;
        // SAFETY: (test) as in `set!`.
        unsafe {
            (*h).depth = 200;
            (*h).slot_bytes = 1 << 40;
            (*h).layout.total_bytes = 1;
        }
        for map in [&ring, &opened] {
            assert_eq!(map.depth(), 4);
            assert_eq!(map.layout(), params().layout);
            let (first, len) = map.slot_data(0).unwrap();
            assert_eq!(len, 8192);
            assert_eq!(map.slot_data(3).unwrap().0 as usize - first as usize, 3 * 8192);
            assert!(map.slot_data(4).is_none() && map.slot_data(199).is_none());
        }
    }

    #[test]
    fn bad_params_are_refused_when_the_ring_is_made() {
        let mut bad = params();
        bad.depth = 0;
        assert!(matches!(RingMap::create("gpuipc-test-check", &bad), Err(LinkError::Mismatch { field: "depth", .. })));
        let mut bad = params();
        bad.policies = vec![POLICY_BLOCK; 17];
        assert!(matches!(
            RingMap::create("gpuipc-test-check", &bad),
            Err(LinkError::Mismatch { field: "n_consumers", .. })
        ));
        let mut bad = params();
        bad.layout.planes[0].pitch = 1;
        let err = RingMap::open_checked(
            fds(&RingMap::create("gpuipc-test-check", &params()).unwrap(), FrameAccess::Read),
            &bad,
            LINK,
            FrameAccess::Read,
        );
        assert!(matches!(err, Err(LinkError::Mismatch { field: "layout.planes[0].pitch", .. })));
    }
}
