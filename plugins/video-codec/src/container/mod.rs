//! What a video file holds, whatever its container: the stream's facts ([`StreamInfo`]), the
//! coded samples in decode order with where they lie in the file, the presentation times in
//! display order, and how a sample's bytes become what the decoders take ([`Packing`]).
//!
//! Both decoders (NVDEC and ffmpeg) are fed the same bytes from the same [`Index`], so their
//! frames can be compared byte for byte. Frame `k` in display order gets the `k`-th
//! presentation time, whichever decoder made it.

pub mod annexb;
pub mod mp4;
pub mod params;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use gpuipc_plugin_api::{Error, Result, bail};

/// The codecs the video source decodes: NVDEC's, whose names the cpu decoder shares.
pub use gpuipc_nvdec::Codec;

/// How chroma is sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Chroma {
    Mono,
    C420,
    C422,
    C444,
}

impl Chroma {
    pub fn name(self) -> &'static str {
        match self {
            Chroma::Mono => "4:0:0 (monochrome)",
            Chroma::C420 => "4:2:0",
            Chroma::C422 => "4:2:2",
            Chroma::C444 => "4:4:4",
        }
    }

    /// From a `chroma_format_idc` (H.264, HEVC).
    pub fn from_idc(idc: u32) -> Option<Chroma> {
        Some(match idc {
            0 => Chroma::Mono,
            1 => Chroma::C420,
            2 => Chroma::C422,
            3 => Chroma::C444,
            _ => return None,
        })
    }
}

/// What `validate` prints about a file, and what decides the stage's output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// "MP4", "H.264 elementary stream", ...
    pub container: &'static str,
    pub codec: Codec,
    /// The profile as its standard names it ("High", "Main 10", "Profile 0").
    pub profile: String,
    /// The picture as displayed (cropping applied).
    pub width: u32,
    pub height: u32,
    pub bit_depth: u32,
    pub chroma: Chroma,
    /// Frames per second as a fraction, if the file says.
    pub frame_rate: Option<(u32, u32)>,
    pub frames: u64,
}

impl std::fmt::Display for StreamInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} in {}, {}x{}, {}-bit {}, ",
            self.codec.name(),
            self.profile,
            self.container,
            self.width,
            self.height,
            self.bit_depth,
            self.chroma.name()
        )?;
        match self.frame_rate {
            Some((num, 1)) => write!(f, "{num} frames/s, ")?,
            Some((num, den)) => write!(f, "{:.3} frames/s ({num}/{den}), ", f64::from(num) / f64::from(den))?,
            None => write!(f, "frame rate unknown, ")?,
        }
        write!(f, "{} frames", self.frames)
    }
}

/// One coded sample (an access unit, a VP9 frame, an AV1 temporal unit), in decode order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Where its bytes start in the file.
    pub offset: u64,
    pub size: u64,
}

/// How a sample's bytes become a decoder's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packing {
    /// Annex-B with start codes already (an elementary stream): as stored.
    AnnexB,
    /// NAL units with big-endian length prefixes of `length_size` bytes (MP4's avc1, hvc1):
    /// each gets a start code instead, and the parameter sets of the sample entry go first in
    /// every sample that starts a pass (the decoders need them before the first slice; a
    /// file's samples may carry none).
    LengthPrefixed { length_size: u8, parameter_sets: Vec<Vec<u8>> },
    /// VP9 frames and AV1 temporal units as stored; `av1_header` (AV1's sequence header, from
    /// the sample entry) goes before the first sample of a pass when that sample has none of
    /// its own.
    Raw { av1_header: Vec<u8> },
}

/// A sample decoding can start at (a key frame that nothing after it reaches behind): the
/// frames from it on come out of a decoder started there exactly as from one started at the
/// file's first sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The sample, in decode order.
    pub sample: usize,
    /// The display number of the first frame a decoder started there gives.
    pub display: usize,
}

/// Everything known about a file before decoding it.
#[derive(Debug, Clone)]
pub struct Index {
    pub info: StreamInfo,
    /// Decode order.
    pub samples: Vec<Sample>,
    /// Presentation times in display order, from 0, in `timescale` units.
    pub display_times: Vec<i64>,
    pub timescale: u64,
    /// From the first frame's presentation to the end of the last one: where a second pass
    /// of a looping source starts on the time line.
    pub duration: i64,
    pub packing: Packing,
    /// Where decoding may start, by display number, the first at sample 0.
    pub entries: Vec<Entry>,
}

impl Index {
    /// Read what `path` holds (plan time and stage start). Errors name the file.
    pub fn open(path: &Path) -> Result<Index> {
        let what = path.display();
        let mut file = File::open(path).map_err(|e| Error::new(format!("param `path`: cannot open {what}: {e}")))?;
        let len = file.metadata().map_err(|e| Error::new(format!("cannot read {what}: {e}")))?.len();
        let mut head = [0u8; 16];
        let n = read_up_to(&mut file, &mut head).map_err(|e| Error::new(format!("cannot read {what}: {e}")))?;
        let head = &head[..n];
        file.seek(SeekFrom::Start(0)).map_err(|e| Error::new(format!("cannot read {what}: {e}")))?;
        let index = if mp4::looks_like_mp4(head) {
            mp4::index(file, len, path)?
        } else if let Some(codec) = annexb::codec_of(path, head) {
            annexb::index(file, len, codec, path)?
        } else if len == 0 {
            bail!("{what} is empty: not a video file")
        } else {
            bail!(
                "{what} is not a video file the video source reads: neither MP4/MOV (no `ftyp` box at its start) \
                 nor an H.264 or HEVC elementary stream (no start code at its start)"
            )
        };
        if index.info.frames == 0 {
            bail!("{what} holds no frame: its {} stream is empty", index.info.codec.name());
        }
        for (n, sample) in index.samples.iter().enumerate() {
            let end = sample.offset.saturating_add(sample.size);
            if end > len {
                bail!(
                    "{what} is truncated: it ends at byte {len}, but sample {n} of {} (in decode order) lies at bytes {}..{end}",
                    index.samples.len(),
                    sample.offset
                );
            }
        }
        Ok(index)
    }

    /// The last entry at or before display frame `k`: where to start decoding to reach it.
    pub fn entry_for(&self, k: usize) -> Entry {
        let at = self.entries.partition_point(|e| e.display <= k);
        self.entries.get(at.wrapping_sub(1)).copied().unwrap_or(Entry { sample: 0, display: 0 })
    }

    /// Presentation time of display frame `k` of pass `pass` (looping), in nanoseconds.
    pub fn time_ns(&self, pass: u64, k: usize) -> u64 {
        let ticks = i128::from(self.display_times[k]) + i128::from(pass) * i128::from(self.duration);
        u64::try_from(ticks * 1_000_000_000 / i128::from(self.timescale.max(1))).unwrap_or(0)
    }
}

/// A file's samples, read and packed for a decoder, from an entry on.
#[derive(Debug)]
pub struct Packets {
    file: File,
    next: usize,
    /// The sample decoding starts at: it gets what a decoder needs first.
    start: usize,
    /// How the file's name reads in errors.
    what: String,
}

impl Packets {
    pub fn open(path: &Path) -> Result<Packets> {
        let file =
            File::open(path).map_err(|e| Error::new(format!("param `path`: cannot open {}: {e}", path.display())))?;
        Ok(Packets { file, next: 0, start: 0, what: path.display().to_string() })
    }

    /// Start (again) at `sample`, an entry's.
    pub fn start_at(&mut self, sample: usize) {
        self.next = sample;
        self.start = sample;
    }

    /// The next sample as decoder input, or `None` after the last. `buf` is reused.
    pub fn next(&mut self, index: &Index, buf: &mut Vec<u8>) -> Result<Option<usize>> {
        let Some(sample) = index.samples.get(self.next) else { return Ok(None) };
        let n = self.next;
        let mut raw = vec![0u8; sample.size as usize];
        self.file.seek(SeekFrom::Start(sample.offset)).and_then(|_| self.file.read_exact(&mut raw)).map_err(|e| {
            Error::new(format!(
                "{}: cannot read sample {n} (bytes {}..{}): {e}",
                self.what,
                sample.offset,
                sample.offset + sample.size
            ))
        })?;
        buf.clear();
        match &index.packing {
            Packing::AnnexB => buf.extend_from_slice(&raw),
            Packing::LengthPrefixed { length_size, parameter_sets } => {
                if n == self.start {
                    for set in parameter_sets {
                        buf.extend_from_slice(&[0, 0, 0, 1]);
                        buf.extend_from_slice(set);
                    }
                }
                length_prefixed_to_annexb(&raw, *length_size, buf)
                    .map_err(|e| Error::new(format!("{}: sample {n} at byte {}: {e}", self.what, sample.offset)))?;
            }
            Packing::Raw { av1_header } => {
                if n == self.start && !av1_header.is_empty() && !params::av1_has_sequence_header(&raw) {
                    buf.extend_from_slice(av1_header);
                }
                buf.extend_from_slice(&raw);
            }
        }
        self.next += 1;
        Ok(Some(n))
    }
}

/// Append the NAL units of `sample` (each after a `length_size`-byte big-endian length) to
/// `out`, each after a 4-byte start code.
pub fn length_prefixed_to_annexb(sample: &[u8], length_size: u8, out: &mut Vec<u8>) -> std::result::Result<(), String> {
    let size = usize::from(length_size);
    if !(1..=4).contains(&size) {
        return Err(format!("NAL length fields of {size} bytes are not valid (1 to 4)"));
    }
    let mut at = 0;
    while at < sample.len() {
        let Some(field) = sample.get(at..at + size) else {
            return Err(format!("a NAL length field is cut off at byte {at} of {}", sample.len()));
        };
        let len = field.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        at += size;
        let Some(nal) = sample.get(at..at + len) else {
            return Err(format!(
                "a NAL unit of {len} bytes at byte {at} runs past the sample's {} bytes",
                sample.len()
            ));
        };
        out.extend_from_slice(&[0, 0, 0, 1]);
        out.extend_from_slice(nal);
        at += len;
    }
    Ok(())
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// The entries of a file whose samples, in decode order, are key frames where `sync` says and
/// are shown at `times` (any unit): a key frame is an entry when every sample before it is
/// shown before it and none after it is. Its display number is its rank among the times.
pub fn entries(sync: &[bool], times: &[i64]) -> Vec<Entry> {
    let mut order: Vec<usize> = (0..times.len()).collect();
    order.sort_by_key(|&i| (times[i], i));
    let mut rank = vec![0; times.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r;
    }
    let mut later_min = vec![i64::MAX; times.len() + 1];
    for i in (0..times.len()).rev() {
        later_min[i] = later_min[i + 1].min(times[i]);
    }
    let mut entries = vec![Entry { sample: 0, display: 0 }];
    let mut earlier_max = i64::MIN;
    for i in 0..times.len() {
        if i > 0 && sync[i] && earlier_max < times[i] && later_min[i] >= times[i] {
            entries.push(Entry { sample: i, display: rank[i] });
        }
        earlier_max = earlier_max.max(times[i]);
    }
    entries
}

/// `a / b` in lowest terms.
pub fn reduce(a: u64, b: u64) -> (u64, u64) {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 { a } else { gcd(b, a % b) }
    }
    let g = gcd(a, b).max(1);
    (a / g, b / g)
}

/// A frame rate `num / den` that fits the ffmpeg and y4m style of two u32s.
pub fn frame_rate(num: u64, den: u64) -> Option<(u32, u32)> {
    if num == 0 || den == 0 {
        return None;
    }
    let (n, d) = reduce(num, den);
    Some((u32::try_from(n).ok()?, u32::try_from(d).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn length_prefixed_nal_units_get_start_codes() {
        let mut out = Vec::new();
        length_prefixed_to_annexb(&[0, 0, 0, 2, 0x65, 0x88, 0, 0, 0, 1, 0x41], 4, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 1, 0x65, 0x88, 0, 0, 0, 1, 0x41]);
        let e = length_prefixed_to_annexb(&[0, 0, 0, 9, 0x65], 4, &mut Vec::new()).unwrap_err();
        assert_eq!(e, "a NAL unit of 9 bytes at byte 4 runs past the sample's 5 bytes");
        let e = length_prefixed_to_annexb(&[0, 0], 4, &mut Vec::new()).unwrap_err();
        assert_eq!(e, "a NAL length field is cut off at byte 0 of 2");
    }

    #[test]
    fn entries_are_key_frames_nothing_reaches_behind() {
        // Decode order I0 P3 B1 B2 | I4 P7 B5 B6 | I8 (closed groups), and a key frame whose
        // B-frames after it show before it (open group: not an entry).
        let times = [0, 3, 1, 2, 4, 7, 5, 6, 10, 8, 9];
        let sync = [true, false, false, false, true, false, false, false, true, false, false];
        let e = entries(&sync, &times);
        assert_eq!(e, [Entry { sample: 0, display: 0 }, Entry { sample: 4, display: 4 }]);
    }

    #[test]
    fn frame_rates_are_reduced() {
        assert_eq!(frame_rate(15360, 512), Some((30, 1)));
        assert_eq!(frame_rate(30000, 1001), Some((30000, 1001)));
        assert_eq!(frame_rate(0, 1), None);
    }
}
