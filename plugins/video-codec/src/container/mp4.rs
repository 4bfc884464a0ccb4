//! MP4 and MOV files (ISO BMFF), read with `re_mp4`: the first video track's sample table
//! (progressive and fragmented files), its codec configuration box (avcC, hvcC, vpcC, av1C)
//! and presentation times.

use std::fs::File;
use std::path::Path;

use gpuipc_plugin_api::{Error, Result, bail};
use re_mp4::{Mp4, StsdBoxContent, TrackKind};

use super::params::{self, ParameterSets};
use super::{Chroma, Codec, Index, Packing, Sample, StreamInfo, frame_rate};

/// Box types that start an MP4 or QuickTime file.
const FIRST_BOXES: [&[u8; 4]; 6] = [b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"];

/// Whether a file starting with `head` is an ISO BMFF / QuickTime file.
pub fn looks_like_mp4(head: &[u8]) -> bool {
    head.get(4..8).is_some_and(|kind| FIRST_BOXES.iter().any(|b| b.as_slice() == kind))
}

/// The index of the first video track of the MP4/MOV file `file` of `len` bytes.
pub fn index(file: File, len: u64, path: &Path) -> Result<Index> {
    let what = path.display();
    let mut reader = std::io::BufReader::new(file);
    // A cut file says what is missing better than the parser's error can.
    if let Some(problem) = incomplete(&mut reader, len).map_err(|e| Error::new(format!("cannot read {what}: {e}")))? {
        bail!("{what} {problem}");
    }
    let mp4 = Mp4::read(reader, len).map_err(|e| Error::new(format!("{what} is not a readable MP4/MOV file: {e}")))?;
    // A track is video by its handler ('vide'), whatever its codec (which may be one we do
    // not decode, and so unknown to the crate's own idea of the kind).
    let handler = |t: &re_mp4::Track| t.trak(&mp4).mdia.hdlr.handler_type.to_string();
    let Some(track) = mp4.tracks().values().find(|t| t.kind == Some(TrackKind::Video) || handler(t) == "vide") else {
        let kinds: Vec<String> = mp4
            .tracks()
            .values()
            .map(|t| match handler(t).as_str() {
                "soun" => "audio".to_owned(),
                "text" | "sbtl" | "subt" => "subtitles".to_owned(),
                other => t.kind.map_or_else(|| other.trim().to_owned(), |k| k.to_string().to_lowercase()),
            })
            .collect();
        if kinds.is_empty() {
            bail!("{what} has no track at all: nothing to decode");
        }
        bail!("{what} has no video track (its tracks: {}): nothing to decode", kinds.join(", "));
    };
    let contents = &track.trak(&mp4).mdia.minf.stbl.stsd.contents;
    let (codec, profile, chroma, bit_depth, packing, width, height) = match contents {
        StsdBoxContent::Avc1(avc1) => {
            let avcc = &avc1.avcc.contents;
            let sps = avcc.sequence_parameter_sets.first().map(|n| n.bytes.as_slice());
            let Some(sps) = sps else { bail!("{what}: its H.264 track's avcC box holds no sequence parameter set") };
            let facts = params::h264_sps(sps).map_err(|e| Error::new(format!("{what}: {e}")))?;
            let sets = avcc
                .sequence_parameter_sets
                .iter()
                .chain(&avcc.picture_parameter_sets)
                .map(|n| n.bytes.clone())
                .collect();
            let packing = Packing::LengthPrefixed { length_size: avcc.length_size_minus_one + 1, parameter_sets: sets };
            (Codec::H264, facts.profile, facts.chroma, facts.bit_depth, packing, facts.width, facts.height)
        }
        StsdBoxContent::Hvc1(hevc) | StsdBoxContent::Hev1(hevc) => {
            let hvcc = &hevc.hvcc.contents;
            let sets: ParameterSets = hvcc.arrays.iter().flat_map(|a| a.nalus.iter().map(|n| n.data.clone())).collect();
            let Some(sps) = sets.iter().find(|n| n.first().is_some_and(|b| (b >> 1) & 0x3f == params::HEVC_SPS)) else {
                bail!("{what}: its HEVC track's hvcC box holds no sequence parameter set")
            };
            let facts = params::hevc_sps(sps).map_err(|e| Error::new(format!("{what}: {e}")))?;
            let packing = Packing::LengthPrefixed { length_size: hvcc.length_size_minus_one + 1, parameter_sets: sets };
            (Codec::Hevc, facts.profile, facts.chroma, facts.bit_depth, packing, facts.width, facts.height)
        }
        StsdBoxContent::Vp09(vp09) => {
            let vpcc = &vp09.vpcc.contents;
            let chroma = match vpcc.chroma_subsampling {
                0 | 1 => Chroma::C420,
                2 => Chroma::C422,
                _ => Chroma::C444,
            };
            let profile = format!("Profile {}", vpcc.profile);
            let packing = Packing::Raw { av1_header: Vec::new() };
            (
                Codec::Vp9,
                profile,
                chroma,
                u32::from(vpcc.bit_depth),
                packing,
                u32::from(vp09.width),
                u32::from(vp09.height),
            )
        }
        StsdBoxContent::Av01(av01) => {
            let av1c = &av01.av1c.contents;
            let chroma = match (av1c.monochrome, av1c.chroma_subsampling_x, av1c.chroma_subsampling_y) {
                (true, _, _) => Chroma::Mono,
                (false, 1, 1) => Chroma::C420,
                (false, 1, 0) => Chroma::C422,
                _ => Chroma::C444,
            };
            let profile = match av1c.profile {
                0 => "Main".to_owned(),
                1 => "High".to_owned(),
                2 => "Professional".to_owned(),
                p => format!("profile {p}"),
            };
            // The sequence header the decoders need before the first frame: from the sample
            // entry, for a first sample that brings none of its own.
            let packing = Packing::Raw { av1_header: av1c.config_obus.clone() };
            (
                Codec::Av1,
                profile,
                chroma,
                u32::from(av1c.bit_depth),
                packing,
                u32::from(av01.width),
                u32::from(av01.height),
            )
        }
        StsdBoxContent::Vp08(_) => {
            bail!("{what}: its video track is VP8; the video source decodes H.264, HEVC, VP9 and AV1")
        }
        other => {
            let name = other.codec_string().unwrap_or_else(|| format!("{other:?}"));
            bail!(
                "{what}: its video track's codec ({name}) is not supported; the video source decodes H.264, HEVC, VP9 and AV1"
            )
        }
    };
    let samples: Vec<Sample> = track.samples.iter().map(|s| Sample { offset: s.offset, size: s.size }).collect();
    let mut display_times: Vec<i64> = track.samples.iter().map(|s| s.composition_timestamp).collect();
    display_times.sort_unstable();
    let first = display_times.first().copied().unwrap_or(0);
    for t in &mut display_times {
        *t -= first;
    }
    let last_duration = track.samples.iter().max_by_key(|s| s.composition_timestamp).map_or(0, |s| s.duration as i64);
    let duration = display_times.last().map_or(0, |last| last + last_duration.max(1));
    let rate = typical_frame_duration(&display_times, last_duration).and_then(|d| frame_rate(track.timescale, d));
    let sync: Vec<bool> = track.samples.iter().map(|s| s.is_sync).collect();
    let times: Vec<i64> = track.samples.iter().map(|s| s.composition_timestamp).collect();
    let entries = super::entries(&sync, &times);
    let container = if mp4.ftyp.major_brand.to_string().trim() == "qt" { "MOV" } else { "MP4" };
    Ok(Index {
        info: StreamInfo {
            container,
            codec,
            profile,
            width,
            height,
            bit_depth,
            chroma,
            frame_rate: rate,
            frames: samples.len() as u64,
        },
        samples,
        display_times,
        timescale: track.timescale,
        duration,
        packing,
        entries,
    })
}

/// The most common gap between presentation times (the frame duration of a constant-rate
/// stream), or the last frame's duration for a single frame.
fn typical_frame_duration(times: &[i64], last_duration: i64) -> Option<u64> {
    let mut gaps: Vec<i64> = times.windows(2).map(|w| w[1] - w[0]).filter(|g| *g > 0).collect();
    if gaps.is_empty() {
        return u64::try_from(last_duration).ok().filter(|d| *d > 0);
    }
    gaps.sort_unstable();
    u64::try_from(gaps[gaps.len() / 2]).ok()
}

/// What is missing from a file whose top-level boxes do not add up: a box that runs past the
/// end (the file was cut), or no `moov` box (the index, which ffmpeg writes last unless told
/// `-movflags +faststart`). `None` when the boxes look whole. Leaves `reader` at the start.
fn incomplete(reader: &mut (impl std::io::Read + std::io::Seek), len: u64) -> std::io::Result<Option<String>> {
    use std::io::SeekFrom;
    let (mut at, mut moov) = (0u64, false);
    while at + 8 <= len {
        reader.seek(SeekFrom::Start(at))?;
        let mut header = [0u8; 16];
        reader.read_exact(&mut header[..8])?;
        let kind = String::from_utf8_lossy(&header[4..8]).into_owned();
        let size = match u32::from_be_bytes([header[0], header[1], header[2], header[3]]) {
            // Runs to the end of the file.
            0 => len - at,
            1 if at + 16 <= len => {
                reader.read_exact(&mut header[8..16])?;
                u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"))
            }
            1 => break,
            n => u64::from(n),
        };
        moov |= kind == "moov";
        if size < 8 {
            break;
        }
        if at + size > len {
            reader.seek(SeekFrom::Start(0))?;
            let missing = at + size - len;
            let index = if moov { "" } else { "; its index (the `moov` box) is missing too" };
            return Ok(Some(format!(
                "is truncated: it ends at byte {len}, but its `{kind}` box at byte {at} runs to byte {} ({missing} bytes are missing){index}",
                at + size
            )));
        }
        at += size;
    }
    reader.seek(SeekFrom::Start(0))?;
    if !moov {
        return Ok(Some(
            "has no `moov` box (its index of frames): the file is incomplete, cut short or still being written \
             (ffmpeg writes the index last unless given `-movflags +faststart`)"
                .to_owned(),
        ));
    }
    Ok(None)
}
