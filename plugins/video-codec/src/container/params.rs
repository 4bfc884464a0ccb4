//! The facts a stream's parameter sets give: picture size after cropping, profile, chroma
//! format, bit depth and frame rate. H.264 sequence parameter sets are read with
//! `h264-reader`, HEVC's with `scuffle-h265`; AV1 needs only a look at its OBU headers.

use super::{Chroma, frame_rate};

/// A sample entry's parameter sets (NAL units without start codes).
pub type ParameterSets = Vec<Vec<u8>>;

/// HEVC's `nal_unit_type` of a sequence parameter set.
pub const HEVC_SPS: u8 = 33;
/// H.264's `nal_unit_type` of a sequence parameter set.
pub const H264_SPS: u8 = 7;

/// What a sequence parameter set says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpsFacts {
    pub profile: String,
    pub width: u32,
    pub height: u32,
    pub chroma: Chroma,
    pub bit_depth: u32,
    /// From the VUI timing information, when present.
    pub frame_rate: Option<(u32, u32)>,
}

/// Read an H.264 SPS NAL unit (header byte included, no start code).
pub fn h264_sps(nal: &[u8]) -> Result<SpsFacts, String> {
    use h264_reader::nal::sps::{ChromaFormat, SeqParameterSet};
    use h264_reader::rbsp::{BitReader, ByteReader};
    let body = nal.get(1..).ok_or("an empty H.264 sequence parameter set")?;
    let sps = SeqParameterSet::from_bits(BitReader::new(ByteReader::without_skip(body)))
        .map_err(|e| format!("cannot read its H.264 sequence parameter set: {e:?}"))?;
    let (width, height) =
        sps.pixel_dimensions().map_err(|e| format!("its H.264 sequence parameter set gives no picture size: {e:?}"))?;
    let chroma = match sps.chroma_info.chroma_format {
        ChromaFormat::Monochrome => Chroma::Mono,
        ChromaFormat::YUV420 => Chroma::C420,
        ChromaFormat::YUV422 => Chroma::C422,
        ChromaFormat::YUV444 => Chroma::C444,
        ChromaFormat::Invalid(v) => return Err(format!("its H.264 sequence parameter set has chroma_format_idc {v}")),
    };
    let idc = u8::from(sps.profile_idc);
    let constrained = u8::from(sps.constraint_flags) & 0x40 != 0;
    let profile = match idc {
        66 if constrained => "Constrained Baseline".to_owned(),
        66 => "Baseline".to_owned(),
        77 => "Main".to_owned(),
        88 => "Extended".to_owned(),
        100 => "High".to_owned(),
        110 => "High 10".to_owned(),
        122 => "High 4:2:2".to_owned(),
        244 => "High 4:4:4 Predictive".to_owned(),
        44 => "CAVLC 4:4:4 Intra".to_owned(),
        other => format!("profile_idc {other}"),
    };
    let frame_rate = sps
        .vui_parameters
        .as_ref()
        .and_then(|v| v.timing_info.as_ref())
        .and_then(|t| frame_rate(u64::from(t.time_scale), 2 * u64::from(t.num_units_in_tick)));
    Ok(SpsFacts {
        profile,
        width,
        height,
        chroma,
        bit_depth: u32::from(sps.chroma_info.bit_depth_luma_minus8) + 8,
        frame_rate,
    })
}

/// The most frames an H.264 decoded picture buffer holds (`MaxDpbFrames`, 16 at any level).
const H264_MAX_DPB_FRAMES: u8 = 16;

/// What NVDEC's parser will report for an H.264 stream with this SPS (NAL unit, header byte
/// included, no start code), so the decoder can be made before the stream's first packet:
/// the coded size in macroblocks, the cropping as the display area, chroma and depths. The
/// parser's own count of decode surfaces is not documented; this asks for the spec's most
/// (a full picture buffer and the picture being decoded), so a conforming stream never needs
/// more. The parser checks it all at the first sequence header and makes the decoder anew
/// where it differs.
pub fn h264_nvdec_sequence(nal: &[u8]) -> Result<gpuipc_nvdec::Sequence, String> {
    use h264_reader::nal::sps::{ChromaFormat, FrameMbsFlags, SeqParameterSet};
    use h264_reader::rbsp::{BitReader, ByteReader};
    let body = nal.get(1..).ok_or("an empty H.264 sequence parameter set")?;
    let sps = SeqParameterSet::from_bits(BitReader::new(ByteReader::without_skip(body)))
        .map_err(|e| format!("cannot read its H.264 sequence parameter set: {e:?}"))?;
    let (width, height) =
        sps.pixel_dimensions().map_err(|e| format!("its H.264 sequence parameter set gives no picture size: {e:?}"))?;
    let too_large = || "its H.264 sequence parameter set gives too large a picture".to_owned();
    let coded_width =
        sps.pic_width_in_mbs_minus1.checked_add(1).and_then(|w| w.checked_mul(16)).ok_or_else(too_large)?;
    let field_pairs = if matches!(sps.frame_mbs_flags, FrameMbsFlags::Frames) { 1 } else { 2 };
    let coded_height = sps
        .pic_height_in_map_units_minus1
        .checked_add(1)
        .and_then(|h| h.checked_mul(16 * field_pairs))
        .ok_or_else(too_large)?;
    let chroma_format = match sps.chroma_info.chroma_format {
        ChromaFormat::Monochrome => 0,
        ChromaFormat::YUV420 => 1,
        ChromaFormat::YUV422 => 2,
        ChromaFormat::YUV444 => 3,
        ChromaFormat::Invalid(v) => return Err(format!("its H.264 sequence parameter set has chroma_format_idc {v}")),
    };
    // The cropped picture's top left, in luma samples (pixel_dimensions gave its size): the
    // crop units of the spec's 7.4.2.1.1, as pixel_dimensions counts them.
    let (unit_x, unit_y) = match chroma_format {
        1 => (2, 2 * field_pairs),
        2 => (2, field_pairs),
        _ => (1, field_pairs),
    };
    let (left, top) = sps
        .frame_cropping
        .as_ref()
        .map_or((Some(0), Some(0)), |c| (c.left_offset.checked_mul(unit_x), c.top_offset.checked_mul(unit_y)));
    let (Some(left), Some(top)) = (left, top) else { return Err(too_large()) };
    let (Some(right), Some(bottom)) = (left.checked_add(width), top.checked_add(height)) else {
        return Err(too_large());
    };
    Ok(gpuipc_nvdec::Sequence {
        codec: gpuipc_nvdec::Codec::H264,
        coded_width,
        coded_height,
        display_area: (left, top, right, bottom),
        chroma_format,
        bit_depth_luma: u32::from(sps.chroma_info.bit_depth_luma_minus8) + 8,
        bit_depth_chroma: u32::from(sps.chroma_info.bit_depth_chroma_minus8) + 8,
        min_decode_surfaces: H264_MAX_DPB_FRAMES + 1,
    })
}

/// Read an HEVC SPS NAL unit (2-byte header included, no start code).
pub fn hevc_sps(nal: &[u8]) -> Result<SpsFacts, String> {
    let sps = scuffle_h265::SpsNALUnit::parse(std::io::Cursor::new(nal))
        .map_err(|e| format!("cannot read its HEVC sequence parameter set: {e}"))?
        .rbsp;
    let chroma = Chroma::from_idc(u32::from(sps.chroma_format_idc))
        .ok_or_else(|| format!("its HEVC sequence parameter set has chroma_format_idc {}", sps.chroma_format_idc))?;
    let idc = sps.profile_tier_level.general_profile.profile_idc;
    let profile = match idc {
        1 => "Main".to_owned(),
        2 => "Main 10".to_owned(),
        3 => "Main Still Picture".to_owned(),
        4 => "Range Extensions".to_owned(),
        5 => "High Throughput".to_owned(),
        9 => "Screen Content Coding".to_owned(),
        other => format!("general_profile_idc {other}"),
    };
    let frame_rate = sps
        .vui_parameters
        .as_ref()
        .and_then(|v| v.vui_timing_info.as_ref())
        .and_then(|t| frame_rate(u64::from(t.time_scale.get()), u64::from(t.num_units_in_tick.get())));
    let size = |v: u64, what: &str| u32::try_from(v).map_err(|_| format!("its HEVC picture {what} {v} is too large"));
    Ok(SpsFacts {
        profile,
        width: size(sps.cropped_width(), "width")?,
        height: size(sps.cropped_height(), "height")?,
        chroma,
        bit_depth: u32::from(sps.bit_depth_y()),
        frame_rate,
    })
}

/// AV1's `obu_type` of a sequence header.
const AV1_SEQUENCE_HEADER: u8 = 1;

/// Whether the AV1 OBUs in `data` (low-overhead format, each with its size field) hold a
/// sequence header. Stops at the first OBU without a size field (the rest cannot be walked).
pub fn av1_has_sequence_header(data: &[u8]) -> bool {
    let mut at = 0;
    while let Some(&header) = data.get(at) {
        let obu_type = (header >> 3) & 0x0f;
        if obu_type == AV1_SEQUENCE_HEADER {
            return true;
        }
        let extension = header & 0x04 != 0;
        let has_size = header & 0x02 != 0;
        if !has_size {
            return false;
        }
        at += 1 + usize::from(extension);
        let Some((size, used)) = leb128(&data[at.min(data.len())..]) else { return false };
        at = at.saturating_add(used).saturating_add(size);
    }
    false
}

/// A LEB128 value and the bytes it took.
fn leb128(data: &[u8]) -> Option<(usize, usize)> {
    let mut value = 0usize;
    for (i, &b) in data.iter().take(8).enumerate() {
        value |= usize::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The SPS NAL units (no start code) at the start of an Annex B stream.
    fn h264_sps_of(stream: &[u8]) -> Vec<u8> {
        let mut at = 0;
        let starts: Vec<usize> = std::iter::from_fn(|| {
            let found = stream[at..].windows(3).position(|w| w == [0, 0, 1])? + at + 3;
            at = found;
            Some(found)
        })
        .collect();
        let start = *starts.iter().find(|&&s| stream[s] & 0x1f == H264_SPS).expect("an SPS");
        let end = starts.iter().find(|&&s| s > start).map_or(stream.len(), |&s| s - 3);
        // A 4-byte start code leaves its zero at the end of the unit before.
        let mut nal = stream[start..end].to_vec();
        while nal.last() == Some(&0) {
            nal.pop();
        }
        nal
    }

    #[test]
    fn h264_sequences_for_nvdec_give_the_coded_size_and_the_cropping() {
        let testdata = concat!(env!("CARGO_MANIFEST_DIR"), "/../../plugin-api/nvdec/testdata/");
        // Coded 80x48 and 48x32 as NVDEC reported them on an H100 (gpuipc-nvdec's tests).
        for (file, coded, shown) in [("h264-66x38.h264", (80, 48), (66, 38)), ("h264-34x18.h264", (48, 32), (34, 18))] {
            let stream = std::fs::read(format!("{testdata}{file}")).unwrap();
            let sequence = h264_nvdec_sequence(&h264_sps_of(&stream)).unwrap();
            assert_eq!(sequence.codec, gpuipc_nvdec::Codec::H264, "{file}");
            assert_eq!((sequence.coded_width, sequence.coded_height), coded, "{file}");
            assert_eq!(sequence.display_area, (0, 0, shown.0, shown.1), "{file}");
            assert_eq!(
                (sequence.chroma_format, sequence.bit_depth_luma, sequence.bit_depth_chroma),
                (1, 8, 8),
                "{file}"
            );
            assert_eq!(sequence.min_decode_surfaces, 17, "{file}");
        }
        assert!(h264_nvdec_sequence(&[]).is_err());
        assert!(h264_nvdec_sequence(&[0x67, 0xff]).is_err());
    }

    #[test]
    fn av1_sequence_headers_are_found_behind_other_obus() {
        // A temporal delimiter (type 2, size 0), then a sequence header (type 1, size 2).
        assert!(av1_has_sequence_header(&[0x12, 0x00, 0x0a, 0x02, 0xaa, 0xbb]));
        // A frame OBU only (type 6).
        assert!(!av1_has_sequence_header(&[0x32, 0x01, 0xff]));
        assert!(!av1_has_sequence_header(&[]));
    }
}
