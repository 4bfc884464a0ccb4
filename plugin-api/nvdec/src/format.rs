//! The vocabulary of decoding ([`Codec`], [`VideoFormat`], [`Caps`], [`DecodeStatus`]) and the
//! decisions that need no GPU, each tested here: what a sequence header's format is, whether
//! the GPU's caps allow it, the output surface's geometry and format, how many decode
//! surfaces, which packet flags, and how many bytes a copy moves.

use std::ffi::c_int;
use std::fmt;

use crate::error::NvdecError;
use crate::ffi::{self, CUVIDDECODECAPS, CUVIDEOFORMAT, CUVIDRECT, CUVIDSHORTRECT, tcu_ulong};

/// A codec NVDEC decodes and this crate drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    H264,
    Hevc,
    Vp9,
    Av1,
}

impl Codec {
    /// The `cudaVideoCodec` value.
    pub(crate) fn raw(self) -> ffi::cudaVideoCodec {
        match self {
            Codec::H264 => ffi::cudaVideoCodec_H264,
            Codec::Hevc => ffi::cudaVideoCodec_HEVC,
            Codec::Vp9 => ffi::cudaVideoCodec_VP9,
            Codec::Av1 => ffi::cudaVideoCodec_AV1,
        }
    }

    pub(crate) fn from_raw(raw: ffi::cudaVideoCodec) -> Option<Codec> {
        [Codec::H264, Codec::Hevc, Codec::Vp9, Codec::Av1].into_iter().find(|c| c.raw() == raw)
    }

    /// "H.264", "HEVC", "VP9", "AV1".
    pub fn name(self) -> &'static str {
        match self {
            Codec::H264 => "H.264",
            Codec::Hevc => "HEVC",
            Codec::Vp9 => "VP9",
            Codec::Av1 => "AV1",
        }
    }
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What this GPU's NVDEC can do for one codec, chroma format and bit depth
/// (`cuvidGetDecoderCaps`). Sizes are of the coded picture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    pub supported: bool,
    pub min_width: u32,
    pub min_height: u32,
    pub max_width: u32,
    pub max_height: u32,
    /// coded width x coded height / 256 must not exceed it.
    pub max_macroblocks: u32,
}

impl Caps {
    pub(crate) fn from_raw(raw: &CUVIDDECODECAPS) -> Caps {
        Caps {
            supported: raw.bIsSupported != 0,
            min_width: raw.nMinWidth.into(),
            min_height: raw.nMinHeight.into(),
            max_width: raw.nMaxWidth,
            max_height: raw.nMaxHeight,
            max_macroblocks: raw.nMaxMBCount,
        }
    }
}

/// How the decoder says a displayed picture came out (`cuvidGetDecodeStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeStatus {
    /// Decoded without error.
    Ok,
    /// Decoded with errors, which were concealed.
    Concealed,
    /// Decoded with errors that were not concealed: the picture is damaged.
    Error,
    /// The decoder would not say: still in progress when asked, a codec or GPU for which
    /// `cuvidGetDecodeStatus` is not supported (it is for H.264 and HEVC), or the query failed.
    Unknown,
}

impl DecodeStatus {
    pub(crate) fn from_raw(status: ffi::cuvidDecodeStatus) -> DecodeStatus {
        match status {
            ffi::cuvidDecodeStatus_Success => DecodeStatus::Ok,
            ffi::cuvidDecodeStatus_Error_Concealed => DecodeStatus::Concealed,
            ffi::cuvidDecodeStatus_Error => DecodeStatus::Error,
            _ => DecodeStatus::Unknown,
        }
    }
}

/// A stream's format, from its sequence header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VideoFormat {
    pub codec: Codec,
    /// The decoded picture's size (a multiple of the codec's block size, often).
    pub coded_width: u32,
    pub coded_height: u32,
    /// The display area's size: what a [`DecodedFrame`](crate::DecodedFrame) holds.
    pub width: u32,
    pub height: u32,
    /// Bits per sample (of luma; this crate refuses chroma of another depth).
    pub bit_depth: u32,
    /// 0 monochrome, 1 4:2:0, 2 4:2:2, 3 4:4:4 (`cudaVideoChromaFormat`).
    pub chroma_format: u32,
}

impl VideoFormat {
    /// 1 for 8-bit content (NV12), 2 for more (P016).
    pub fn bytes_per_sample(&self) -> u32 {
        if self.bit_depth > 8 { 2 } else { 1 }
    }
}

/// "4:2:0", or the number where it is not one of the four.
fn chroma_name(chroma_format: u32) -> String {
    match chroma_format {
        0 => "4:0:0".into(),
        1 => "4:2:0".into(),
        2 => "4:2:2".into(),
        3 => "4:4:4".into(),
        n => format!("chroma format {n}"),
    }
}

impl fmt::Display for VideoFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}-bit {}x{} (coded {}x{})",
            self.codec,
            chroma_name(self.chroma_format),
            self.bit_depth,
            self.width,
            self.height,
            self.coded_width,
            self.coded_height
        )
    }
}

/// What a stream's sequence header will tell the parser, known before its first packet (from a
/// description's parameter sets), so [`Decoder::prepare`](crate::Decoder::prepare) can make
/// the decoder ahead. The parser's own format decides in the end: a decoder made for another
/// is made anew at the first sequence header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequence {
    pub codec: Codec,
    /// The decoded picture's size, as the parser reports it (H.264: macroblocks times 16).
    pub coded_width: u32,
    pub coded_height: u32,
    /// The display area inside the coded picture (the SPS's cropping): left, top, right, bottom.
    pub display_area: (u32, u32, u32, u32),
    /// `cudaVideoChromaFormat`: 0 monochrome, 1 4:2:0, 2 4:2:2, 3 4:4:4.
    pub chroma_format: u32,
    pub bit_depth_luma: u32,
    pub bit_depth_chroma: u32,
    /// The decode surfaces the stream needs at least (a bound: the parser's own
    /// `min_num_decode_surfaces` must not be above it for the decoder to be kept).
    pub min_decode_surfaces: u8,
}

/// The `CUVIDEOFORMAT` the parser's sequence callback would be handed for `sequence` (the
/// fields the decoder's making reads; the rest zero).
pub(crate) fn sequence_format(sequence: &Sequence) -> Result<CUVIDEOFORMAT, NvdecError> {
    let invalid = |reason: String| NvdecError::Invalid { op: "Decoder::prepare", reason };
    let int = |v: u32| c_int::try_from(v).map_err(|_| invalid(format!("a display area coordinate of {v}")));
    let depth = |bits: u32| {
        bits.checked_sub(8).and_then(|d| u8::try_from(d).ok()).ok_or_else(|| invalid(format!("a bit depth of {bits}")))
    };
    let (left, top, right, bottom) = sequence.display_area;
    Ok(CUVIDEOFORMAT {
        codec: sequence.codec.raw(),
        bit_depth_luma_minus8: depth(sequence.bit_depth_luma)?,
        bit_depth_chroma_minus8: depth(sequence.bit_depth_chroma)?,
        min_num_decode_surfaces: sequence.min_decode_surfaces,
        coded_width: sequence.coded_width,
        coded_height: sequence.coded_height,
        display_area: CUVIDRECT { left: int(left)?, top: int(top)?, right: int(right)?, bottom: int(bottom)? },
        chroma_format: sequence.chroma_format as ffi::cudaVideoChromaFormat,
        progressive_sequence: 1,
        ..CUVIDEOFORMAT::default()
    })
}

/// The output surfaces a decoder is made with, from the first sequence header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Surface {
    /// The display area's size (what the consumer gets).
    pub width: u32,
    pub height: u32,
    /// The target size: the display area, widened to even sizes where the coded picture
    /// has the room, so that 4:2:0 chroma covers every luma column and row. Equal to the
    /// display area's size except for odd display sizes. No scaling: the decoder's display
    /// area is exactly this big.
    pub target_width: u32,
    pub target_height: u32,
    /// `CUVIDDECODECREATEINFO::display_area`.
    pub display_area: CUVIDSHORTRECT,
    /// NV12 for 8-bit, P016 for more.
    pub surface_format: ffi::cudaVideoSurfaceFormat,
    pub bytes_per_sample: u32,
}

impl Surface {
    /// Bytes from a mapped surface's start to its chroma plane.
    pub fn chroma_offset(&self, pitch: u64) -> u64 {
        // The SDK's samples put the chroma plane after the luma rows of the target height
        // rounded up to even (NvDecoder.cpp: srcPitch * ((nSurfaceHeight + 1) & ~1)).
        pitch * u64::from(self.target_height.next_multiple_of(2))
    }
}

/// The format the sequence header describes, checked: a display area inside the coded
/// picture, luma and chroma of the same depth, a codec this decoder was made for.
pub(crate) fn video_format(codec: Codec, raw: &CUVIDEOFORMAT) -> Result<VideoFormat, NvdecError> {
    let area = raw.display_area;
    let inside = |lo: c_int, hi: c_int, size: u32| lo >= 0 && hi > lo && (hi as u32) <= size;
    if !inside(area.left, area.right, raw.coded_width) || !inside(area.top, area.bottom, raw.coded_height) {
        return Err(NvdecError::Invalid {
            op: "the sequence header",
            reason: format!(
                "its display area (left {}, top {}, right {}, bottom {}) is not inside the coded {}x{} picture",
                area.left, area.top, area.right, area.bottom, raw.coded_width, raw.coded_height
            ),
        });
    }
    Ok(VideoFormat {
        codec,
        coded_width: raw.coded_width,
        coded_height: raw.coded_height,
        width: (area.right - area.left) as u32,
        height: (area.bottom - area.top) as u32,
        bit_depth: 8 + u32::from(raw.bit_depth_luma_minus8),
        chroma_format: raw.chroma_format as u32,
    })
}

/// The output surface for `format` (whose display area `raw` gives), or why this crate
/// cannot output it: NV12 and P016 are 4:2:0 formats of one depth.
pub(crate) fn plan_surface(format: &VideoFormat, raw: &CUVIDEOFORMAT) -> Result<Surface, NvdecError> {
    let unsupported = |reason: String| Err(NvdecError::Unsupported { format: *format, reason });
    if format.chroma_format != ffi::cudaVideoChromaFormat_420 as u32 {
        return unsupported("gpuipc-nvdec outputs 4:2:0 only (NV12 or P016)".into());
    }
    let chroma_depth = 8 + u32::from(raw.bit_depth_chroma_minus8);
    if chroma_depth != format.bit_depth {
        return unsupported(format!("luma is {}-bit but chroma {chroma_depth}-bit", format.bit_depth));
    }
    if format.bit_depth > 16 {
        return unsupported("more than 16 bits per sample".into());
    }
    let area = raw.display_area;
    // Even where the coded picture has the room (it nearly always has: coded sizes are
    // multiples of 8 or 16), else the display size itself.
    let widen = |lo: c_int, size: u32, coded: u32| {
        let even = size.next_multiple_of(2);
        if lo as u32 + even <= coded { even } else { size }
    };
    let target_width = widen(area.left, format.width, format.coded_width);
    let target_height = widen(area.top, format.height, format.coded_height);
    let short = |v: i64| {
        i16::try_from(v).map_err(|_| NvdecError::Unsupported {
            format: *format,
            reason: format!("a display area coordinate of {v} does not fit the decoder's 16 bits"),
        })
    };
    let display_area = CUVIDSHORTRECT {
        left: short(area.left.into())?,
        top: short(area.top.into())?,
        right: short(i64::from(area.left) + i64::from(target_width))?,
        bottom: short(i64::from(area.top) + i64::from(target_height))?,
    };
    let (surface_format, bytes_per_sample) = if format.bit_depth > 8 {
        (ffi::cudaVideoSurfaceFormat_P016, 2)
    } else {
        (ffi::cudaVideoSurfaceFormat_NV12, 1)
    };
    Ok(Surface {
        width: format.width,
        height: format.height,
        target_width,
        target_height,
        display_area,
        surface_format,
        bytes_per_sample,
    })
}

/// `format` is within what `caps` (for its codec, chroma format and bit depth) allow, and the
/// decoder can output `surface_format`; else an error naming the stream and the limits.
pub(crate) fn check_caps(
    format: &VideoFormat,
    caps: &Caps,
    output_format_mask: u16,
    surface_format: ffi::cudaVideoSurfaceFormat,
) -> Result<(), NvdecError> {
    let unsupported = |reason: String| Err(NvdecError::Unsupported { format: *format, reason });
    if !caps.supported {
        return unsupported(format!(
            "its NVDEC does not decode {} {} {}-bit at all",
            format.codec,
            chroma_name(format.chroma_format),
            format.bit_depth
        ));
    }
    let (w, h) = (format.coded_width, format.coded_height);
    if w < caps.min_width || h < caps.min_height {
        return unsupported(format!(
            "the coded size {w}x{h} is below the smallest it decodes, {}x{}",
            caps.min_width, caps.min_height
        ));
    }
    if w > caps.max_width || h > caps.max_height {
        return unsupported(format!(
            "the coded size {w}x{h} is above the largest it decodes, {}x{}",
            caps.max_width, caps.max_height
        ));
    }
    // cuviddec.h: CodedWidth*CodedHeight/256 must be <= nMaxMBCount.
    let macroblocks = u64::from(w) * u64::from(h) / 256;
    if macroblocks > u64::from(caps.max_macroblocks) {
        return unsupported(format!(
            "the coded size {w}x{h} is {macroblocks} macroblocks, above the {} it decodes",
            caps.max_macroblocks
        ));
    }
    if output_format_mask & (1 << surface_format) == 0 {
        let name = if surface_format == ffi::cudaVideoSurfaceFormat_P016 { "P016" } else { "NV12" };
        return unsupported(format!("it cannot output {name} (output format mask {output_format_mask:#x})"));
    }
    Ok(())
}

/// The most decode surfaces a decoder may have (the picture indices the parser hands out).
pub(crate) const MAX_DECODE_SURFACES: u32 = 32;
/// Decode surfaces beyond the stream's minimum, so the engine has pictures in flight while
/// earlier ones are still referenced or being displayed.
pub(crate) const EXTRA_DECODE_SURFACES: u32 = 4;
/// Output surfaces: one mapped at a time here, one more so the next map need not wait.
pub(crate) const OUTPUT_SURFACES: u32 = 2;

/// `ulNumDecodeSurfaces` for a stream that needs at least `min` (`min_num_decode_surfaces`),
/// displayed `display_delay` pictures behind its decoding: a few more, one more for each
/// picture held back, within the decoder's limit, never fewer than `min`.
pub(crate) fn decode_surfaces(min: u8, display_delay: u32) -> u32 {
    let min = u32::from(min).max(1);
    (min + EXTRA_DECODE_SURFACES + display_delay).min(MAX_DECODE_SURFACES).max(min)
}

/// `CUVIDSOURCEDATAPACKET::flags` for a packet: its timestamp is always valid when it has
/// data; `one_picture`: it holds exactly one whole picture, so the parser need not wait for
/// the next packet's start to know the picture is complete.
pub(crate) fn packet_flags(has_data: bool, end_of_stream: bool, one_picture: bool) -> tcu_ulong {
    let mut flags = 0;
    if has_data {
        flags |= ffi::CUVID_PKT_TIMESTAMP;
        if one_picture {
            flags |= ffi::CUVID_PKT_ENDOFPICTURE;
        }
    }
    if end_of_stream {
        flags |= ffi::CUVID_PKT_ENDOFSTREAM;
    }
    flags
}

/// What [`DecodedFrame::copy_to`](crate::DecodedFrame::copy_to) moves: (bytes per row, rows)
/// of luma, then of interleaved chroma, for a `width` x `height` picture. Chroma rows hold
/// ceil(width/2) pairs, as gpuipc's `nv12` does for odd widths.
pub fn copy_extents(width: u32, height: u32, bytes_per_sample: u32) -> ((u64, u64), (u64, u64)) {
    let bps = u64::from(bytes_per_sample);
    let (w, h) = (u64::from(width), u64::from(height));
    ((w * bps, h), (w.div_ceil(2) * 2 * bps, h.div_ceil(2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::CUVIDRECT;

    /// A sequence header as the parser would hand it.
    fn header(coded: (u32, u32), area: (i32, i32, i32, i32), depth_minus8: u8) -> CUVIDEOFORMAT {
        CUVIDEOFORMAT {
            codec: ffi::cudaVideoCodec_H264,
            bit_depth_luma_minus8: depth_minus8,
            bit_depth_chroma_minus8: depth_minus8,
            min_num_decode_surfaces: 5,
            coded_width: coded.0,
            coded_height: coded.1,
            display_area: CUVIDRECT { left: area.0, top: area.1, right: area.2, bottom: area.3 },
            chroma_format: ffi::cudaVideoChromaFormat_420,
            ..Default::default()
        }
    }

    fn caps() -> Caps {
        // An H100's H.264 caps, as NVIDIA's support matrix gives them.
        Caps {
            supported: true,
            min_width: 48,
            min_height: 16,
            max_width: 4096,
            max_height: 4096,
            max_macroblocks: 65536,
        }
    }

    #[test]
    fn a_sequence_known_ahead_gives_the_format_the_parser_reports() {
        // h264-66x38.h264 as the parser reported it on an H100 (the gpu_ tests).
        let sequence = crate::tests::H264_66X38;
        let raw = sequence_format(&sequence).unwrap();
        let format = video_format(Codec::H264, &raw).unwrap();
        let want = crate::tests::H264_66X38_FORMAT;
        assert_eq!(format, want);
        assert_eq!(
            plan_surface(&format, &raw).unwrap(),
            plan_surface(&want, &header((80, 48), (0, 0, 66, 38), 0)).unwrap()
        );
        assert_eq!(raw.min_num_decode_surfaces, 17);
        assert!(sequence_format(&Sequence { bit_depth_luma: 7, ..sequence }).is_err());
        assert!(sequence_format(&Sequence { display_area: (0, 0, u32::MAX, 38), ..sequence }).is_err());
    }

    #[test]
    fn codecs_map_to_cuviddec_values_and_back() {
        for codec in [Codec::H264, Codec::Hevc, Codec::Vp9, Codec::Av1] {
            assert_eq!(Codec::from_raw(codec.raw()), Some(codec));
        }
        assert_eq!(Codec::H264.raw(), 4);
        assert_eq!(Codec::Av1.raw(), 11);
        assert_eq!(Codec::from_raw(ffi::cudaVideoCodec_MPEG2), None);
        assert_eq!(Codec::Hevc.to_string(), "HEVC");
    }

    #[test]
    fn the_display_area_is_the_format_and_the_target() {
        // 1080p H.264: coded 1920x1088, cropped to 1080 rows.
        let raw = header((1920, 1088), (0, 0, 1920, 1080), 0);
        let format = video_format(Codec::H264, &raw).unwrap();
        assert_eq!((format.width, format.height, format.bit_depth, format.chroma_format), (1920, 1080, 8, 1));
        assert_eq!(format.to_string(), "H.264 4:2:0 8-bit 1920x1080 (coded 1920x1088)");
        let s = plan_surface(&format, &raw).unwrap();
        assert_eq!((s.target_width, s.target_height), (1920, 1080));
        assert_eq!(s.display_area, CUVIDSHORTRECT { left: 0, top: 0, right: 1920, bottom: 1080 });
        assert_eq!((s.surface_format, s.bytes_per_sample), (ffi::cudaVideoSurfaceFormat_NV12, 1));
        assert_eq!(s.chroma_offset(2048), 2048 * 1080);
    }

    #[test]
    fn ten_bit_goes_to_p016() {
        let raw = header((3840, 2160), (0, 0, 3840, 2160), 2);
        let format = video_format(Codec::Hevc, &raw).unwrap();
        assert_eq!(format.bit_depth, 10);
        assert_eq!(format.bytes_per_sample(), 2);
        let s = plan_surface(&format, &raw).unwrap();
        assert_eq!((s.surface_format, s.bytes_per_sample), (ffi::cudaVideoSurfaceFormat_P016, 2));
    }

    #[test]
    fn odd_display_sizes_widen_to_even_targets_where_there_is_room() {
        // A VP9-like 65x33 picture with an offset display area inside a 80x48 coded one.
        let raw = header((80, 48), (2, 4, 67, 37), 0);
        let format = video_format(Codec::Vp9, &raw).unwrap();
        assert_eq!((format.width, format.height), (65, 33));
        let s = plan_surface(&format, &raw).unwrap();
        assert_eq!((s.width, s.height, s.target_width, s.target_height), (65, 33, 66, 34));
        assert_eq!(s.display_area, CUVIDSHORTRECT { left: 2, top: 4, right: 68, bottom: 38 });
        assert_eq!(s.chroma_offset(128), 128 * 34);
        // No room: the coded picture ends at the display area's edge.
        let raw = header((65, 33), (0, 0, 65, 33), 0);
        let s = plan_surface(&video_format(Codec::Vp9, &raw).unwrap(), &raw).unwrap();
        assert_eq!((s.target_width, s.target_height), (65, 33));
        assert_eq!(s.chroma_offset(128), 128 * 34);
    }

    #[test]
    fn a_display_area_outside_the_picture_is_refused() {
        for area in [(0, 0, 1921, 1080), (-2, 0, 100, 100), (0, 0, 0, 1080), (10, 10, 5, 20)] {
            let raw = header((1920, 1088), area, 0);
            let e = video_format(Codec::H264, &raw).unwrap_err();
            assert!(e.to_string().contains("is not inside the coded 1920x1088 picture"), "{e}");
        }
    }

    #[test]
    fn only_4_2_0_of_one_depth_is_output() {
        let mut raw = header((1920, 1088), (0, 0, 1920, 1080), 0);
        raw.chroma_format = ffi::cudaVideoChromaFormat_422;
        let format = video_format(Codec::Hevc, &raw).unwrap();
        let e = plan_surface(&format, &raw).unwrap_err();
        assert_eq!(
            e.to_string(),
            "NVDEC on this GPU cannot decode HEVC 4:2:2 8-bit 1920x1080 (coded 1920x1088): gpuipc-nvdec outputs \
             4:2:0 only (NV12 or P016)"
        );
        let mut raw = header((1920, 1088), (0, 0, 1920, 1080), 2);
        raw.bit_depth_chroma_minus8 = 0;
        let e = plan_surface(&video_format(Codec::Hevc, &raw).unwrap(), &raw).unwrap_err();
        assert!(e.to_string().ends_with("luma is 10-bit but chroma 8-bit"), "{e}");
    }

    #[test]
    fn caps_limits_are_checked_and_named() {
        let ok = |w: u32, h: u32| {
            let raw = header((w, h), (0, 0, w as i32, h as i32), 0);
            let format = video_format(Codec::H264, &raw).unwrap();
            check_caps(&format, &caps(), 0b11, ffi::cudaVideoSurfaceFormat_NV12)
        };
        ok(1920, 1088).unwrap();
        ok(48, 16).unwrap();
        ok(4096, 4096).unwrap();
        let e = ok(32, 32).unwrap_err().to_string();
        assert!(e.ends_with("the coded size 32x32 is below the smallest it decodes, 48x16"), "{e}");
        let e = ok(8192, 4320).unwrap_err().to_string();
        assert!(e.starts_with("NVDEC on this GPU cannot decode H.264 4:2:0 8-bit 8192x4320"), "{e}");
        assert!(e.ends_with("the coded size 8192x4320 is above the largest it decodes, 4096x4096"), "{e}");
        let small_mb = Caps { max_macroblocks: 8192, ..caps() };
        let raw = header((4096, 2304), (0, 0, 4096, 2304), 0);
        let format = video_format(Codec::H264, &raw).unwrap();
        let e = check_caps(&format, &small_mb, 1, 0).unwrap_err().to_string();
        assert!(e.ends_with("the coded size 4096x2304 is 36864 macroblocks, above the 8192 it decodes"), "{e}");
        let none = Caps { supported: false, ..caps() };
        let e = check_caps(&format, &none, 1, 0).unwrap_err().to_string();
        assert!(e.ends_with("its NVDEC does not decode H.264 4:2:0 8-bit at all"), "{e}");
        let e = check_caps(&format, &caps(), 0b01, ffi::cudaVideoSurfaceFormat_P016).unwrap_err().to_string();
        assert!(e.ends_with("it cannot output P016 (output format mask 0x1)"), "{e}");
    }

    #[test]
    fn decode_surfaces_are_the_minimum_and_a_few_within_the_limit() {
        assert_eq!(decode_surfaces(5, 0), 9);
        assert_eq!(decode_surfaces(0, 0), 5);
        assert_eq!(decode_surfaces(5, 4), 13);
        assert_eq!(decode_surfaces(28, 0), 32);
        assert_eq!(decode_surfaces(31, 4), 32);
        // A stream needing more than the usual limit still gets its minimum.
        assert_eq!(decode_surfaces(33, 0), 33);
    }

    #[test]
    fn packets_carry_their_timestamp_and_end() {
        use ffi::{CUVID_PKT_ENDOFPICTURE as PIC, CUVID_PKT_ENDOFSTREAM as EOS, CUVID_PKT_TIMESTAMP as TS};
        assert_eq!(packet_flags(true, false, false), TS);
        assert_eq!(packet_flags(true, false, true), TS | PIC);
        assert_eq!(packet_flags(true, true, false), TS | EOS);
        // An empty end-of-stream packet is a flush: no data, no timestamp.
        assert_eq!(packet_flags(false, true, true), EOS);
        assert_eq!(packet_flags(false, false, false), 0);
    }

    #[test]
    fn copies_cover_odd_sizes_like_gpuipcs_nv12() {
        assert_eq!(copy_extents(66, 38, 1), ((66, 38), (66, 19)));
        assert_eq!(copy_extents(65, 33, 1), ((65, 33), (66, 17)));
        assert_eq!(copy_extents(146, 146, 2), ((292, 146), (292, 73)));
    }

    #[test]
    fn decode_statuses_follow_cuviddec() {
        assert_eq!(DecodeStatus::from_raw(ffi::cuvidDecodeStatus_Success), DecodeStatus::Ok);
        assert_eq!(DecodeStatus::from_raw(ffi::cuvidDecodeStatus_Error_Concealed), DecodeStatus::Concealed);
        assert_eq!(DecodeStatus::from_raw(ffi::cuvidDecodeStatus_Error), DecodeStatus::Error);
        assert_eq!(DecodeStatus::from_raw(ffi::cuvidDecodeStatus_InProgress), DecodeStatus::Unknown);
        assert_eq!(DecodeStatus::from_raw(77), DecodeStatus::Unknown);
    }
}
