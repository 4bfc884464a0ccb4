//! Safe views of the frames a plugin reads and writes.
//!
//! In the cpu domain a frame is a byte slice cut into planes by its [`FrameLayout`]. In the
//! cuda domain it is a device address the plugin hands to its kernels.

use crate::format::{FrameFormat, FrameLayout, PixelFormat, PlaneLayout};

/// A frame in GPU memory: the device address of byte 0 and how many bytes follow (the CUDA
/// crate's type, which its copies take).
pub use gpuipc_cuda::DeviceBuffer;

/// Where a frame's bytes are.
#[derive(Debug)]
pub enum FrameData<'a> {
    Host(&'a [u8]),
    Device(DeviceBuffer),
}

/// Where an output frame's bytes are.
#[derive(Debug)]
pub enum FrameDataMut<'a> {
    Host(&'a mut [u8]),
    Device(DeviceBuffer),
}

/// What every frame carries besides its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    pub format: FrameFormat,
    pub layout: FrameLayout,
    /// Sequence number given by the source; passed on unchanged by other stages.
    pub seq: u64,
    /// When the source made the frame, nanoseconds since the Unix epoch.
    pub timestamp_ns: u64,
}

impl FrameInfo {
    pub fn new(format: FrameFormat, seq: u64, timestamp_ns: u64) -> Option<FrameInfo> {
        Some(FrameInfo { format, layout: FrameLayout::for_format(format)?, seq, timestamp_ns })
    }

    pub fn pixel(&self) -> PixelFormat {
        self.format.pixel_format().expect("frames only carry pixel formats the host validated")
    }

    pub fn width(&self) -> u32 {
        self.format.width
    }

    pub fn height(&self) -> u32 {
        self.format.height
    }
}

/// Bytes a frame needs so that every plane's last row fits.
fn bytes_needed(layout: &FrameLayout) -> u64 {
    layout.planes().iter().map(plane_span).max().unwrap_or(0)
}

fn plane_span(p: &PlaneLayout) -> u64 {
    p.offset + p.pitch * p.rows.saturating_sub(1) + p.row_bytes
}

fn plane_range(p: &PlaneLayout) -> std::ops::Range<usize> {
    p.offset as usize..plane_span(p) as usize
}

/// xxh3-64 (seed 0) of a frame's pixel bytes in host memory: every plane in order, row by
/// row, padding excluded, so the same pixels give the same hash whatever the pitch. Equal to
/// `xxh3_64` of the planes packed one after another. `None` if `bytes` is too short.
pub fn pixel_hash(layout: &FrameLayout, bytes: &[u8]) -> Option<u64> {
    if (bytes.len() as u64) < bytes_needed(layout) {
        return None;
    }
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for p in layout.planes() {
        for y in 0..p.rows as usize {
            let start = p.offset as usize + y * p.pitch as usize;
            hasher.update(&bytes[start..start + p.row_bytes as usize]);
        }
    }
    Some(hasher.digest())
}

/// A frame given to a plugin to read. A stage with several inputs gets one per input, all with
/// the same `seq`, in the order of the stage's `inputs` list in the pipeline file.
#[derive(Debug)]
pub struct InputFrame<'a> {
    pub info: FrameInfo,
    data: FrameData<'a>,
}

impl<'a> InputFrame<'a> {
    /// A frame in host memory. `None` if `bytes` is too short for `info.layout`.
    #[inline]
    pub fn host(info: FrameInfo, bytes: &'a [u8]) -> Option<InputFrame<'a>> {
        (bytes.len() as u64 >= bytes_needed(&info.layout)).then_some(InputFrame { info, data: FrameData::Host(bytes) })
    }

    /// A frame in device memory.
    pub fn device(info: FrameInfo, buffer: DeviceBuffer) -> InputFrame<'a> {
        InputFrame { info, data: FrameData::Device(buffer) }
    }

    pub fn data(&self) -> &FrameData<'a> {
        &self.data
    }

    /// The whole frame in host memory, or `None` in the cuda domain.
    pub fn host_bytes(&self) -> Option<&'a [u8]> {
        match self.data {
            FrameData::Host(b) => Some(b),
            FrameData::Device(_) => None,
        }
    }

    pub fn device_buffer(&self) -> Option<DeviceBuffer> {
        match self.data {
            FrameData::Device(d) => Some(d),
            FrameData::Host(_) => None,
        }
    }

    /// [`pixel_hash`] of the frame, or `None` in the cuda domain.
    pub fn pixel_hash(&self) -> Option<u64> {
        pixel_hash(&self.info.layout, self.host_bytes()?)
    }

    /// Plane `index` in host memory.
    pub fn plane(&self, index: usize) -> Option<Plane<'a>> {
        let layout = *self.info.layout.planes().get(index)?;
        let bytes = &self.host_bytes()?[plane_range(&layout)];
        Some(Plane { bytes, layout })
    }
}

/// The frame a plugin writes: its bytes, and what it is ([`OutputFrame::info`], read-only:
/// the format, layout, `seq` and timestamp are the runner's, decided before `process`; a
/// source that passes on frames made elsewhere gives them their own with
/// [`OutputFrame::relay`]).
#[derive(Debug)]
pub struct OutputFrame<'a> {
    info: FrameInfo,
    data: FrameDataMut<'a>,
    /// Set by [`OutputFrame::end_stream`].
    end_of_stream: bool,
    /// Set by [`OutputFrame::relay`].
    relayed: bool,
    /// Set by [`OutputFrame::mark_damaged`].
    damaged: bool,
    /// Set by [`OutputFrame::no_frame_yet`].
    no_frame: bool,
}

impl<'a> OutputFrame<'a> {
    /// A frame in host memory. `None` if `bytes` is too short for `info.layout`.
    #[inline]
    pub fn host(info: FrameInfo, bytes: &'a mut [u8]) -> Option<OutputFrame<'a>> {
        (bytes.len() as u64 >= bytes_needed(&info.layout)).then_some(OutputFrame {
            info,
            data: FrameDataMut::Host(bytes),
            end_of_stream: false,
            relayed: false,
            damaged: false,
            no_frame: false,
        })
    }

    pub fn device(info: FrameInfo, buffer: DeviceBuffer) -> OutputFrame<'a> {
        OutputFrame {
            info,
            data: FrameDataMut::Device(buffer),
            end_of_stream: false,
            relayed: false,
            damaged: false,
            no_frame: false,
        }
    }

    /// A source has no frame to give any more (its file ran out): call this instead of
    /// writing the frame, and return `Ok(())` from `process`. Nothing is published for the
    /// call, `process` is not called again, and the stage ends its stream as if it had
    /// emitted the pipeline's `frames`: every stage after it gets the frames before this
    /// one, then end of stream, and the run finishes. Only a source may end its stream: a
    /// stage with inputs that calls this fails. (Crosses the ABI as
    /// [`crate::abi::STATUS_END_OF_STREAM`].)
    pub fn end_stream(&mut self) {
        self.end_of_stream = true;
    }

    /// A source that passes on frames made elsewhere (received from another host, read from a
    /// recording that carries their numbers) gives this frame its original sequence number and
    /// timestamp instead of the ones the runner chose. The runner publishes the frame under
    /// them and numbers the source's next frame from `seq + 1`.
    ///
    /// `seq` may skip numbers (frames lost before they reached this source stay lost; they are
    /// counted where they were lost), but it may not go back: a `seq` lower than
    /// `info().seq` (the next number the runner expects) fails the stage, naming both. Only a
    /// source may relay: the runner ignores it in a stage with inputs, which passes on its
    /// inputs' numbers. (Crosses the ABI as the output `RawFrame`'s `seq` and `timestamp_ns`,
    /// read back by hosts of plugin ABI 1.3 or later.)
    pub fn relay(&mut self, seq: u64, timestamp_ns: u64) {
        self.info.seq = seq;
        self.info.timestamp_ns = timestamp_ns;
        self.relayed = true;
    }

    /// The frame is written, but from damaged data: a decoder concealed errors in it (a
    /// corrupt slice, a missing reference). It is handed on as usual and counted in the
    /// stage's `damaged` frames, which the run's table and report show. (Crosses the ABI as
    /// [`crate::abi::STATUS_DAMAGED`], since 1.4.)
    pub fn mark_damaged(&mut self) {
        self.damaged = true;
    }

    /// A live source (`Plugin::LIVE`) had no frame to give in the short while it waited (its
    /// camera is away, reconnecting): call this instead of writing the frame, and return
    /// `Ok(())` from `process`. Nothing is published, the number stays unused, and `process` is
    /// called again; the host takes the call as a sign of life, so the stage's stall watchdog
    /// does not kill a camera that is away for longer than `stall_timeout`, while a `process`
    /// that never returns still is. Wait well under a second in each call (the `rtsp` source
    /// waits 0.1 s). (Crosses the ABI as [`crate::abi::STATUS_NO_FRAME`], since 1.5.)
    pub fn no_frame_yet(&mut self) {
        self.no_frame = true;
    }

    /// Whether [`OutputFrame::no_frame_yet`] was called.
    pub fn has_no_frame(&self) -> bool {
        self.no_frame
    }

    /// Whether [`OutputFrame::mark_damaged`] was called.
    pub fn is_damaged(&self) -> bool {
        self.damaged
    }

    /// Whether [`OutputFrame::relay`] was called.
    pub fn relays(&self) -> bool {
        self.relayed
    }

    /// Whether [`OutputFrame::end_stream`] was called.
    pub fn ends_stream(&self) -> bool {
        self.end_of_stream
    }

    /// What the frame is: format, layout, sequence number and timestamp. A source makes its
    /// content from `info().seq`; the runner has set all of it and passes it on as is.
    pub fn info(&self) -> &FrameInfo {
        &self.info
    }

    pub fn data(&mut self) -> &mut FrameDataMut<'a> {
        &mut self.data
    }

    pub fn device_buffer(&self) -> Option<DeviceBuffer> {
        match self.data {
            FrameDataMut::Device(d) => Some(d),
            FrameDataMut::Host(_) => None,
        }
    }

    /// Every plane, writable at once (host memory only).
    pub fn planes_mut(&mut self) -> Option<Vec<PlaneMut<'_>>> {
        let FrameDataMut::Host(bytes) = &mut self.data else {
            return None;
        };
        let mut rest: &mut [u8] = bytes;
        let mut consumed = 0usize;
        let mut planes = Vec::with_capacity(self.info.layout.n_planes as usize);
        for layout in self.info.layout.planes() {
            let range = plane_range(layout);
            let tail = std::mem::take(&mut rest).split_at_mut(range.start - consumed).1;
            let (bytes, after) = tail.split_at_mut(range.len());
            planes.push(PlaneMut { bytes, layout: *layout });
            rest = after;
            consumed = range.end;
        }
        Some(planes)
    }

    /// Plane `index`, writable (host memory only).
    pub fn plane_mut(&mut self, index: usize) -> Option<PlaneMut<'_>> {
        let layout = *self.info.layout.planes().get(index)?;
        let FrameDataMut::Host(bytes) = &mut self.data else {
            return None;
        };
        Some(PlaneMut { bytes: &mut bytes[plane_range(&layout)], layout })
    }
}

/// One plane of a frame in host memory, read-only.
#[derive(Debug, Clone, Copy)]
pub struct Plane<'a> {
    bytes: &'a [u8],
    pub layout: PlaneLayout,
}

impl<'a> Plane<'a> {
    pub fn rows(&self) -> usize {
        self.layout.rows as usize
    }

    /// Row `y`, pixels only (no padding).
    pub fn row(&self, y: usize) -> &'a [u8] {
        let start = y * self.layout.pitch as usize;
        &self.bytes[start..start + self.layout.row_bytes as usize]
    }
}

/// One plane of a frame in host memory, writable.
#[derive(Debug)]
pub struct PlaneMut<'a> {
    bytes: &'a mut [u8],
    pub layout: PlaneLayout,
}

impl PlaneMut<'_> {
    pub fn rows(&self) -> usize {
        self.layout.rows as usize
    }

    /// Row `y`, pixels only (no padding).
    pub fn row_mut(&mut self, y: usize) -> &mut [u8] {
        let start = y * self.layout.pitch as usize;
        &mut self.bytes[start..start + self.layout.row_bytes as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_mut_splits_a_frame_into_its_planes() {
        let info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 3, 3), 0, 0).unwrap();
        let mut bytes = vec![0u8; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        for (i, mut plane) in out.planes_mut().unwrap().into_iter().enumerate() {
            for y in 0..plane.rows() {
                plane.row_mut(y).fill(i as u8 + 1);
            }
        }
        let input = InputFrame::host(info, &bytes).unwrap();
        assert_eq!(input.plane(0).unwrap().row(2), &[1, 1, 1]);
        assert_eq!(input.plane(1).unwrap().row(1), &[2, 2]);
        assert_eq!(input.plane(2).unwrap().row(0), &[3, 3]);
        assert!(input.plane(3).is_none());
    }

    #[test]
    fn a_short_buffer_is_refused() {
        let info = FrameInfo::new(FrameFormat::new(PixelFormat::Rgb8, 4, 4), 0, 0).unwrap();
        let bytes = vec![0u8; 100];
        assert!(InputFrame::host(info, &bytes).is_none());
    }
}
