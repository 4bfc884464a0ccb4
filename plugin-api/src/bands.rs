//! A host frame's rows cut into bands of whole rows, and the bands worked on by threads: how a
//! cpu stage with a `threads` param (generator, rgb-process, yuv420) spreads a frame over
//! cores without `unsafe`. Split an output's planes with [`planes_mut`] and
//! [`RowsMut::split`], size the work with [`thread_count`] and [`band_count`], and hand the
//! bands to [`run`]; check the param with [`check_threads_param`].

use std::num::NonZeroUsize;
use std::panic;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::thread;

use crate::{Error, FrameDataMut, OutputFrame, PlaneLayout, Result};

/// Most threads the default (`threads = 0`) gives a stage.
pub const DEFAULT_MAX_THREADS: usize = 8;

/// Largest `threads` param accepted.
pub const MAX_THREADS: u32 = 256;

/// The `threads` param as a stage's `Plugin::PARAMS` declares it: type, default and range are
/// those [`check_threads_param`] and [`thread_count`] apply; `description` says what the
/// threads do in that stage.
pub const fn threads_param(description: &'static str) -> crate::ParamInfo {
    crate::ParamInfo { name: "threads", kind: "integer", default: "0", range: "0..=256", description }
}

/// The check of a `threads` param, as the stages' `validate` words it.
pub fn check_threads_param(threads: u32, problems: &mut Vec<String>) {
    if threads > MAX_THREADS {
        problems.push(format!("param `threads` must be 0 (a share of the cores) or 1..={MAX_THREADS}, got {threads}"));
    }
}

/// Set by the host for every stage process: the threads a cpu stage's `threads = 0` may take,
/// its share of the cores among the pipeline's cpu stages (the plan decides and `validate`
/// says it). Without it, the cores this process may use.
pub const THREADS_ENV: &str = "GPUIPC_CPU_THREADS";

/// How many threads work on a frame: `requested` (the `threads` param), or for 0 this stage's
/// share of the cores ([`THREADS_ENV`], else the cores this process may use), at most
/// [`DEFAULT_MAX_THREADS`] and at most `worth` (bands big enough to pay for a thread); never
/// more than `bands` (the most bands the frame can be cut into), never less than 1.
pub fn thread_count(requested: u32, worth: usize, bands: usize) -> usize {
    let wanted = match requested {
        0 => cores().min(DEFAULT_MAX_THREADS).min(worth),
        n => n as usize,
    };
    wanted.min(bands).max(1)
}

/// The cores this stage may use, asked once: the answer takes system calls and reads of
/// cgroup files (40 us, measured), as long as drawing a small frame.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| {
        let available = thread::available_parallelism().map_or(1, NonZeroUsize::get);
        share_of(std::env::var(THREADS_ENV).ok().as_deref(), available)
    })
}

/// The host's share for this stage ([`THREADS_ENV`]), if it gave a number from 1 to the cores
/// there are, else every core there is.
fn share_of(host_says: Option<&str>, available: usize) -> usize {
    host_says.and_then(|v| v.parse::<usize>().ok()).filter(|n| (1..=available).contains(n)).unwrap_or(available)
}

/// `total` cut into `parts` counts that add up to it, as even as can be (the first ones one
/// larger), in order.
pub fn even_counts(total: usize, parts: usize) -> impl Iterator<Item = usize> {
    let parts = parts.max(1);
    (0..parts).map(move |i| total / parts + usize::from(i < total % parts))
}

/// Where each of consecutive runs of `counts` starts, from 0.
pub fn starts(counts: &[usize]) -> impl Iterator<Item = usize> + '_ {
    counts.iter().scan(0, |start, &count| {
        *start += count;
        Some(*start - count)
    })
}

/// Writable rows of one plane of a host frame: `rows` rows of `row_bytes` bytes, `pitch`
/// bytes apart. The padding after each row is never handed out.
#[derive(Debug)]
pub struct RowsMut<'a> {
    bytes: &'a mut [u8],
    pitch: usize,
    row_bytes: usize,
    rows: usize,
}

impl<'a> RowsMut<'a> {
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes of pixels in a row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Row `y`, pixels only.
    pub fn row_mut(&mut self, y: usize) -> &mut [u8] {
        let start = y * self.pitch;
        &mut self.bytes[start..start + self.row_bytes]
    }

    /// Every row, top to bottom, pixels only.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        let row_bytes = self.row_bytes;
        // A plane's last row may end at its pixels, short of a whole pitch.
        self.bytes.chunks_mut(self.pitch).map(move |row| &mut row[..row_bytes])
    }

    /// Cut into consecutive runs of rows, one per count, from the top. The counts must add
    /// up to [`RowsMut::rows`].
    pub fn split(self, counts: impl IntoIterator<Item = usize>) -> Vec<RowsMut<'a>> {
        let RowsMut { mut bytes, pitch, row_bytes, mut rows } = self;
        let mut parts = Vec::new();
        for count in counts {
            assert!(count <= rows, "bands of {count} rows cut from {rows}");
            let (head, tail) = bytes.split_at_mut((count * pitch).min(bytes.len()));
            parts.push(RowsMut { bytes: head, pitch, row_bytes, rows: count });
            (bytes, rows) = (tail, rows - count);
        }
        assert_eq!(rows, 0, "bands leave rows over");
        parts
    }
}

/// Every plane of a host output frame, writable at once, or `None` in the cuda domain. An
/// error if the layout's planes overlap or do not fit in the frame (the host never makes such
/// a layout).
pub fn planes_mut<'a>(output: &'a mut OutputFrame<'_>) -> Option<Result<Vec<RowsMut<'a>>>> {
    let layout = output.info().layout;
    let FrameDataMut::Host(bytes) = output.data() else { return None };
    let mut rest: &'a mut [u8] = bytes;
    let mut consumed = 0usize;
    let mut planes = Vec::new();
    for (i, plane) in layout.planes().iter().enumerate() {
        let (rows, after, end) = match cut_plane(rest, consumed, i, plane) {
            Ok(cut) => cut,
            Err(e) => return Some(Err(e)),
        };
        planes.push(rows);
        (rest, consumed) = (after, end);
    }
    Some(Ok(planes))
}

/// The first plane of a host output frame (all of a packed format's), writable, as
/// [`planes_mut`] has it, or `None` in the cuda domain; the other planes are not looked at.
/// No list, and no copy of the whole layout: a tiny frame's whole drawing costs about what
/// those do.
pub fn first_plane_mut<'a>(output: &'a mut OutputFrame<'_>) -> Option<Result<RowsMut<'a>>> {
    let first = output.info().layout.planes().first().copied();
    let FrameDataMut::Host(bytes) = output.data() else { return None };
    let Some(plane) = first else { return Some(Err(Error::new("the output frame has no plane"))) };
    Some(cut_plane(bytes, 0, 0, &plane).map(|(rows, _, _)| rows))
}

/// Plane `i` cut from `rest`, the frame's bytes from offset `consumed` on: its rows, the
/// bytes after it, and the offset where those begin. An error if it overlaps the planes
/// before it or ends past the frame.
fn cut_plane<'a>(
    rest: &'a mut [u8],
    consumed: usize,
    i: usize,
    plane: &PlaneLayout,
) -> Result<(RowsMut<'a>, &'a mut [u8], usize)> {
    let (offset, pitch, row_bytes, rows) =
        (plane.offset as usize, plane.pitch as usize, plane.row_bytes as usize, plane.rows as usize);
    let span = if rows == 0 { 0 } else { pitch * (rows - 1) + row_bytes };
    let fits = offset >= consumed && pitch >= row_bytes.max(1) && offset - consumed + span <= rest.len();
    if !fits {
        return Err(Error::new(format!(
            "plane {i} of the output frame's layout (offset {offset}, pitch {pitch}, \
             {rows} rows of {row_bytes} bytes) overlaps another or ends past the frame"
        )));
    }
    let (bytes, after) = rest[offset - consumed..].split_at_mut(span);
    Ok((RowsMut { bytes, pitch, row_bytes, rows }, after, offset + span))
}

/// Bands a thread gets when there are several: more bands than threads, so that a thread
/// that starts late (a new thread took 1 ms and more to run in a stage on a 2-core VM, while
/// its band was as long) finds bands left, and the first to finish takes more.
pub const BANDS_PER_THREAD: usize = 4;

/// How many bands to cut `units` (rows, or row pairs) into for `threads` threads: 1 for one
/// thread, else [`BANDS_PER_THREAD`] a thread, but no more than `units`.
pub fn band_count(threads: usize, units: usize) -> usize {
    if threads <= 1 { 1 } else { (threads * BANDS_PER_THREAD).min(units).max(1) }
}

/// `work` on every band, by this thread and `threads - 1` others started for the call, all
/// done before this returns. Each thread takes the next band not yet taken until there are
/// none, so a thread slow to start does less, and one that cannot be started none. The first
/// error is returned (a thread stops at its own); a panic in a thread is resumed here.
pub fn run<T: Send>(bands: Vec<T>, threads: usize, work: impl Fn(T) -> Result<()> + Sync) -> Result<()> {
    let helpers = threads.min(bands.len()).saturating_sub(1);
    if helpers == 0 {
        return bands.into_iter().try_for_each(work);
    }
    let slots: Vec<Mutex<Option<T>>> = bands.into_iter().map(|b| Mutex::new(Some(b))).collect();
    let next = AtomicUsize::new(0);
    let worker = || -> Result<()> {
        // The counter hands each band out once, in order; the lock only moves it out.
        while let Some(slot) = slots.get(next.fetch_add(1, Ordering::Relaxed)) {
            let band = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
            work(band.expect("the counter hands each band out once"))?;
        }
        Ok(())
    };
    let worker = &worker;
    thread::scope(|scope| {
        let handles: Vec<_> = (1..=helpers)
            .filter_map(|i| {
                let spawned = thread::Builder::new().name(format!("band worker {i}")).spawn_scoped(scope, worker);
                spawned.ok()
            })
            .collect();
        let mine = worker();
        let theirs: Vec<Result<()>> =
            handles.into_iter().map(|h| h.join().unwrap_or_else(|p| panic::resume_unwind(p))).collect();
        mine.and(theirs.into_iter().collect())
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_hosts_share_of_the_cores_bounds_auto_threads() {
        assert_eq!(share_of(Some("1"), 16), 1);
        assert_eq!(share_of(Some("5"), 16), 5);
        // Nonsense, or more than there are, is every core.
        assert_eq!(share_of(Some("0"), 16), 16);
        assert_eq!(share_of(Some("99"), 16), 16);
        assert_eq!(share_of(Some("two"), 2), 2);
        assert_eq!(share_of(None, 2), 2);
    }

    #[test]
    fn the_declared_threads_param_has_the_checked_range() {
        let declared = threads_param("");
        assert_eq!(declared.range, format!("0..={MAX_THREADS}"));
        let mut problems = Vec::new();
        check_threads_param(MAX_THREADS, &mut problems);
        check_threads_param(0, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        check_threads_param(MAX_THREADS + 1, &mut problems);
        assert_eq!(problems.len(), 1);
    }
    use crate::testing::padded;
    use crate::{FrameFormat, FrameInfo, PixelFormat};

    use super::*;

    #[test]
    fn counts_are_even_and_add_up() {
        assert_eq!(even_counts(10, 3).collect::<Vec<_>>(), [4, 3, 3]);
        assert_eq!(even_counts(2, 4).collect::<Vec<_>>(), [1, 1, 0, 0]);
        assert_eq!(even_counts(7, 0).collect::<Vec<_>>(), [7]);
        assert_eq!(starts(&[4, 3, 0, 3]).collect::<Vec<_>>(), [0, 4, 7, 7]);
        for total in 0..40 {
            for parts in 1..9 {
                let counts: Vec<usize> = even_counts(total, parts).collect();
                assert_eq!(counts.iter().sum::<usize>(), total);
                assert!(counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1);
            }
        }
    }

    #[test]
    fn thread_counts() {
        assert_eq!(thread_count(1, 100, 100), 1);
        assert_eq!(thread_count(5, 0, 100), 5, "a number asked for is not cut to the work");
        assert_eq!(thread_count(5, 100, 3), 3, "but to the bands there are");
        assert_eq!(thread_count(7, 100, 0), 1);
        assert_eq!(thread_count(0, 0, 100), 1);
        let cores = thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(thread_count(0, 100, 100), cores.min(DEFAULT_MAX_THREADS));
        assert_eq!(thread_count(0, 1, 100), 1);
        let mut problems = Vec::new();
        check_threads_param(MAX_THREADS, &mut problems);
        assert!(problems.is_empty());
        check_threads_param(MAX_THREADS + 1, &mut problems);
        assert_eq!(problems.len(), 1);
    }

    #[test]
    fn planes_split_into_bands_of_rows_without_their_padding() {
        let mut info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 5, 7), 0, 0).unwrap();
        info.layout = padded(info.layout, 3);
        let mut bytes = vec![0u8; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let planes = planes_mut(&mut out).unwrap().unwrap();
        assert_eq!(planes.iter().map(RowsMut::rows).collect::<Vec<_>>(), [7, 4, 4]);
        let mut value = 0u8;
        for plane in planes {
            let rows = plane.rows();
            for mut band in plane.split(even_counts(rows, 3)) {
                for row in band.iter_mut() {
                    value += 1;
                    row.fill(value);
                }
            }
        }
        let input = crate::InputFrame::host(info, &bytes).unwrap();
        let (y, u) = (input.plane(0).unwrap(), input.plane(1).unwrap());
        assert_eq!(y.row(0), [1; 5]);
        assert_eq!(y.row(6), [7; 5]);
        assert_eq!(u.row(3), [11; 3]);
        // Padding after each row is untouched.
        let y_layout = info.layout.planes[0];
        let pad = y_layout.row_bytes as usize..y_layout.pitch as usize;
        assert!(bytes[pad].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_first_plane_alone_is_the_first_of_every_plane() {
        let mut info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 5, 7), 0, 0).unwrap();
        info.layout = padded(info.layout, 3);
        let mut bytes = vec![0u8; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let mut first = first_plane_mut(&mut out).unwrap().unwrap();
        assert_eq!((first.rows(), first.row_bytes()), (7, 5));
        for row in first.iter_mut() {
            row.fill(9);
        }
        let mut again = vec![0u8; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut again).unwrap();
        for row in planes_mut(&mut out).unwrap().unwrap().swap_remove(0).iter_mut() {
            row.fill(9);
        }
        assert!(bytes == again);
    }

    #[test]
    fn a_layout_with_overlapping_planes_is_an_error() {
        let mut info = FrameInfo::new(FrameFormat::new(PixelFormat::Nv12, 4, 4), 0, 0).unwrap();
        info.layout.planes[1].offset = 8;
        let mut bytes = vec![0u8; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        let e = planes_mut(&mut out).unwrap().unwrap_err();
        assert!(e.message().contains("plane 1"), "{e}");
        let buffer = crate::DeviceBuffer { addr: 0x1000, len: 1 << 12 };
        assert!(planes_mut(&mut OutputFrame::device(info, buffer)).is_none());
    }

    #[test]
    fn every_band_is_worked_on_once_and_errors_and_panics_come_back() {
        for n in [0, 1, 2, 3, 9, 17] {
            for threads in [1, 2, 3, 8, 40] {
                let done = AtomicUsize::new(0);
                run((0..n).collect(), threads, |i: usize| {
                    done.fetch_add(1 << (3 * i), Ordering::Relaxed);
                    Ok(())
                })
                .unwrap();
                let want = (0..n).map(|i| 1usize << (3 * i)).sum::<usize>();
                assert_eq!(done.into_inner(), want, "{n} bands, {threads} threads");
            }
        }
        for threads in [1, 3] {
            let e = run((0..4).collect(), threads, |i: usize| match i {
                2 => Err(Error::new("band 2 failed")),
                _ => Ok(()),
            })
            .unwrap_err();
            assert_eq!(e.message(), "band 2 failed");
            let panicked = panic::catch_unwind(|| {
                run((0..3).collect(), threads, |i| if i == 1 { panic!("band 1") } else { Ok(()) })
            });
            assert!(panicked.is_err());
        }
        assert_eq!((band_count(1, 100), band_count(2, 100), band_count(8, 10)), (1, 8, 10));
        assert_eq!(band_count(3, 0), 1);
    }
}
