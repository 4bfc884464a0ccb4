//! H.264 and HEVC elementary streams (Annex B: NAL units after start codes), as
//! `ffmpeg -c:v libx264 -f h264 out.h264` writes them. One pass over the file finds every NAL
//! unit and groups them into access units by the rules of H.264 7.4.1.2.3 and HEVC 7.4.2.4.4
//! (a picture's first slice, and the parameter sets, delimiters and SEI before it, start one),
//! so each decoder is fed one picture at a time. Nothing gives an elementary stream
//! timestamps: frame `k` is shown at `k` frame durations, from the VUI's timing information,
//! or 25 frames/s (what ffmpeg assumes) when the stream has none.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use gpuipc_plugin_api::{Error, Result, bail};

use super::params::{self, H264_SPS, HEVC_SPS};
use super::{Codec, Entry, Index, Packing, Sample, StreamInfo};

/// The rate of a stream that does not say.
const DEFAULT_RATE: (u32, u32) = (25, 1);
/// The most of a sequence parameter set kept for reading it.
const MAX_SPS_BYTES: usize = 4096;

/// The codec of an elementary stream starting with `head`, by the file's extension or, for
/// another name, by its first NAL unit's header; `None` if it does not start with a start code.
pub fn codec_of(path: &Path, head: &[u8]) -> Option<Codec> {
    let zeros = head.iter().take_while(|&&b| b == 0).count();
    if zeros < 2 || head.get(zeros) != Some(&1) {
        return None;
    }
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("h264" | "264" | "avc" | "26l" | "jsv") => return Some(Codec::H264),
        Some("h265" | "265" | "hevc") => return Some(Codec::Hevc),
        _ => {}
    }
    let (a, b) = (*head.get(zeros + 1)?, head.get(zeros + 2).copied().unwrap_or(0));
    let hevc_type = (a >> 1) & 0x3f;
    if a & 0x81 == 0 && b == 1 && matches!(hevc_type, 32..=35 | 39) {
        return Some(Codec::Hevc);
    }
    if a & 0x80 == 0 && matches!(a & 0x1f, 1 | 5..=9) {
        return Some(Codec::H264);
    }
    None
}

/// A NAL unit found by the scan: where its start code begins and its first header bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Nal {
    at: u64,
    header: [u8; 3],
}

/// Every NAL unit of a stream, and the first sequence parameter set's bytes.
#[derive(Debug, Default)]
struct Scan {
    nals: Vec<Nal>,
    sps: Option<Vec<u8>>,
}

/// Find every start code in `reader`. A start code is two or more zero bytes and a one; up to
/// three of the zeros count as the start code's (`00 00 00 01`), any more as the end of the
/// NAL unit before it.
fn scan(reader: &mut impl Read, codec: Codec) -> std::io::Result<Scan> {
    let mut out = Scan::default();
    let mut block = vec![0u8; 1 << 16];
    let (mut pos, mut zeros) = (0u64, 0u64);
    // The NAL unit being read: how many of its header bytes are in, and whether it is kept.
    let mut filled = 3usize;
    let mut capture: Option<Vec<u8>> = None;
    loop {
        let n = match reader.read(&mut block) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        for &byte in &block[..n] {
            if byte == 1 && zeros >= 2 {
                if let Some(mut sps) = capture.take() {
                    sps.truncate(sps.len().saturating_sub(zeros as usize));
                    out.sps = Some(sps);
                }
                out.nals.push(Nal { at: pos - zeros.min(3), header: [0; 3] });
                filled = 0;
                zeros = 0;
                pos += 1;
                continue;
            }
            if let Some(nal) = out.nals.last_mut().filter(|_| filled < 3) {
                nal.header[filled] = byte;
                filled += 1;
                if filled == 1
                    && out.sps.is_none()
                    && capture.is_none()
                    && nal_type(codec, nal.header) == sps_type(codec)
                {
                    capture = Some(Vec::new());
                }
            }
            if let Some(sps) = capture.as_mut().filter(|sps| sps.len() < MAX_SPS_BYTES) {
                sps.push(byte);
            }
            zeros = if byte == 0 { zeros + 1 } else { 0 };
            pos += 1;
        }
    }
    if let Some(sps) = capture.take() {
        out.sps = Some(sps);
    }
    Ok(out)
}

fn sps_type(codec: Codec) -> u8 {
    if codec == Codec::Hevc { HEVC_SPS } else { H264_SPS }
}

fn nal_type(codec: Codec, header: [u8; 3]) -> u8 {
    match codec {
        Codec::Hevc => (header[0] >> 1) & 0x3f,
        _ => header[0] & 0x1f,
    }
}

/// Whether a NAL unit holds a slice (of a picture), and whether it is its picture's first.
fn slice(codec: Codec, header: [u8; 3]) -> Option<bool> {
    let t = nal_type(codec, header);
    match codec {
        // first_mb_in_slice is the slice header's first field, ue(v): 0 is the single bit 1.
        Codec::H264 if (1..=5).contains(&t) => Some(header[1] & 0x80 != 0),
        // first_slice_segment_in_pic_flag is the first bit after the 2-byte header.
        Codec::Hevc if t <= 31 => Some(header[2] & 0x80 != 0),
        _ => None,
    }
}

/// Whether a NAL unit of this type, after a picture's slices, begins the next access unit.
fn starts_access_unit(codec: Codec, header: [u8; 3]) -> bool {
    let t = nal_type(codec, header);
    match codec {
        Codec::Hevc => matches!(t, 32..=35 | 39 | 41..=44 | 48..=55),
        _ => matches!(t, 6..=9 | 14..=18),
    }
}

/// An access unit: where it starts, whether it holds a picture, whether that picture is an
/// IDR picture (nothing after it refers to anything before it), and which parameter sets it
/// carries ([`param_bit`]; with every one, [`all_params`], a decoder can start at it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AccessUnit {
    at: u64,
    picture: bool,
    idr: bool,
    params: u8,
}

/// The parameter sets a decoder needs before a picture, each a bit: H.264's sequence and
/// picture parameter sets; HEVC's video, sequence and picture parameter sets.
fn param_bit(codec: Codec, header: [u8; 3]) -> u8 {
    match (codec, nal_type(codec, header)) {
        (Codec::Hevc, 32) => 4,
        (Codec::Hevc, 33) | (Codec::H264, 7) => 1,
        (Codec::Hevc, 34) | (Codec::H264, 8) => 2,
        _ => 0,
    }
}

/// Every parameter set a codec's pictures need: an access unit with all of them is an entry.
fn all_params(codec: Codec) -> u8 {
    if codec == Codec::Hevc { 7 } else { 3 }
}

fn is_idr(codec: Codec, header: [u8; 3]) -> bool {
    let t = nal_type(codec, header);
    match codec {
        Codec::Hevc => matches!(t, 19 | 20),
        _ => t == 5,
    }
}

/// Group `nals` into access units.
fn access_units(codec: Codec, nals: &[Nal]) -> Vec<AccessUnit> {
    let mut units: Vec<AccessUnit> = Vec::new();
    // Where the next unit starts if a first slice follows: the first NAL unit that may begin
    // one after the current unit's slices, and the parameter sets from there on.
    let mut next_start: Option<(u64, u8)> = None;
    let unit = |at, params| AccessUnit { at, picture: false, idr: false, params };
    for nal in nals {
        let param = param_bit(codec, nal.header);
        match slice(codec, nal.header) {
            Some(first) => {
                let current_has_picture = units.last().is_some_and(|u| u.picture);
                if units.is_empty() || (first && current_has_picture) {
                    let (at, params) = next_start.unwrap_or((nal.at, 0));
                    units.push(unit(at, params));
                }
                let last = units.last_mut().expect("a unit was pushed");
                if !last.picture {
                    last.idr = is_idr(codec, nal.header);
                }
                last.picture = true;
                next_start = None;
            }
            None if units.is_empty() => units.push(unit(nal.at, param)),
            None => {
                let after_picture = units.last().is_some_and(|u| u.picture);
                match next_start.as_mut() {
                    Some((_, seen)) => *seen |= param,
                    None if after_picture && starts_access_unit(codec, nal.header) => {
                        next_start = Some((nal.at, param))
                    }
                    None => {
                        if let Some(last) = units.last_mut() {
                            last.params |= param;
                        }
                    }
                }
            }
        }
    }
    units
}

/// The index of the elementary stream `file` of `len` bytes.
pub fn index(mut file: File, len: u64, codec: Codec, path: &Path) -> Result<Index> {
    let what = path.display();
    let scan = scan(&mut std::io::BufReader::with_capacity(1 << 16, &mut file), codec)
        .map_err(|e| Error::new(format!("cannot read {what}: {e}")))?;
    let Some(sps) = scan.sps else {
        bail!("{what}: this {} elementary stream has no sequence parameter set: nothing can be decoded", codec.name())
    };
    let facts = match codec {
        Codec::Hevc => params::hevc_sps(&sps),
        _ => params::h264_sps(&sps),
    }
    .map_err(|e| Error::new(format!("{what}: {e}")))?;
    let units = access_units(codec, &scan.nals);
    let samples: Vec<Sample> = units
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let end = units.get(i + 1).map_or(len, |next| next.at);
            Sample { offset: u.at, size: end - u.at }
        })
        .collect();
    let frames = units.iter().filter(|u| u.picture).count() as u64;
    // An IDR picture with every parameter set in its unit: every picture before it is shown
    // before it, every one after it after it, and a decoder needs nothing from before it.
    let mut entries = vec![Entry { sample: 0, display: 0 }];
    let mut pictures = 0;
    for (i, u) in units.iter().enumerate() {
        if i > 0 && u.picture && u.idr && u.params == all_params(codec) {
            entries.push(Entry { sample: i, display: pictures });
        }
        pictures += usize::from(u.picture);
    }
    let (num, den) = facts.frame_rate.unwrap_or(DEFAULT_RATE);
    let display_times = (0..frames as i64).map(|k| k * i64::from(den)).collect();
    let container = if codec == Codec::Hevc { "an HEVC elementary stream" } else { "an H.264 elementary stream" };
    Ok(Index {
        info: StreamInfo {
            container,
            codec,
            profile: facts.profile,
            width: facts.width,
            height: facts.height,
            bit_depth: facts.bit_depth,
            chroma: facts.chroma,
            frame_rate: facts.frame_rate,
            frames,
        },
        samples,
        display_times,
        timescale: u64::from(num),
        duration: frames as i64 * i64::from(den),
        packing: Packing::AnnexB,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nals_of(bytes: &[u8], codec: Codec) -> Scan {
        scan(&mut &bytes[..], codec).unwrap()
    }

    #[test]
    fn start_codes_of_three_and_four_bytes_are_found() {
        // SPS (4-byte start code), PPS (3-byte), an IDR slice, a trailing zero, a P slice.
        let stream =
            [0, 0, 0, 1, 0x67, 0x42, 0xaa, 0, 0, 1, 0x68, 0xce, 0, 0, 1, 0x65, 0x88, 0x80, 0, 0, 0, 0, 1, 0x41, 0x9a];
        let scan = nals_of(&stream, Codec::H264);
        let at: Vec<u64> = scan.nals.iter().map(|n| n.at).collect();
        assert_eq!(at, [0, 7, 12, 19]);
        assert_eq!(scan.sps, Some(vec![0x67, 0x42, 0xaa]));
        assert_eq!(scan.nals[2].header, [0x65, 0x88, 0x80]);
    }

    #[test]
    fn access_units_start_at_what_comes_before_a_first_slice() {
        let nal = |at, header| Nal { at, header };
        // AUD, SPS, PPS, IDR slice (first), IDR slice (not first), SEI, P slice (first), P slice (first).
        let nals = [
            nal(0, [0x09, 0, 0]),
            nal(5, [0x67, 0, 0]),
            nal(20, [0x68, 0, 0]),
            nal(30, [0x65, 0x80, 0]),
            nal(90, [0x65, 0x40, 0]),
            nal(150, [0x06, 0, 0]),
            nal(160, [0x41, 0x80, 0]),
            nal(200, [0x41, 0x80, 0]),
        ];
        let au = |at, idr, params| AccessUnit { at, picture: true, idr, params };
        assert_eq!(access_units(Codec::H264, &nals), [au(0, true, 3), au(150, false, 0), au(200, false, 0)]);
        // HEVC: VPS, SPS, PPS, IDR (first), TRAIL (not first), suffix SEI (40: stays), TRAIL (first).
        let nals = [
            nal(0, [0x40, 1, 0]),
            nal(10, [0x42, 1, 0]),
            nal(30, [0x44, 1, 0]),
            nal(40, [0x26, 1, 0x80]),
            nal(90, [0x02, 1, 0x00]),
            nal(95, [0x50, 1, 0]),
            nal(99, [0x02, 1, 0x80]),
        ];
        assert_eq!(access_units(Codec::Hevc, &nals), [au(0, true, 7), au(99, false, 0)]);
    }

    #[test]
    fn the_codec_comes_from_the_name_or_the_first_nal_unit() {
        let h264 = [0, 0, 0, 1, 0x67, 0x64];
        let hevc = [0, 0, 0, 1, 0x40, 0x01];
        assert_eq!(codec_of(Path::new("a.h264"), &hevc), Some(Codec::H264));
        assert_eq!(codec_of(Path::new("a.hevc"), &h264), Some(Codec::Hevc));
        assert_eq!(codec_of(Path::new("a.bin"), &h264), Some(Codec::H264));
        assert_eq!(codec_of(Path::new("a.bin"), &hevc), Some(Codec::Hevc));
        assert_eq!(codec_of(Path::new("a.h264"), b"ftypisom"), None);
    }
}
