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

    #[test]
    fn av1_sequence_headers_are_found_behind_other_obus() {
        // A temporal delimiter (type 2, size 0), then a sequence header (type 1, size 2).
        assert!(av1_has_sequence_header(&[0x12, 0x00, 0x0a, 0x02, 0xaa, 0xbb]));
        // A frame OBU only (type 6).
        assert!(!av1_has_sequence_header(&[0x32, 0x01, 0xff]));
        assert!(!av1_has_sequence_header(&[]));
    }
}
