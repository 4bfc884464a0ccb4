//! The raw types of NVIDIA's `cuviddec.h` and `nvcuvid.h` (Video Codec SDK 13.0, as FFmpeg's
//! nv-codec-headers carry them), only those this crate uses, with the headers' names. C enums
//! are plain integers with constants: a value the driver writes that no constant names must
//! not be undefined behaviour, and status codes cross the boundary as integers.
//! `CUVIDPICPARAMS` stays opaque: the parser hands a pointer to it that goes straight to
//! `cuvidDecodePicture`.
//!
//! Every size, alignment, offset and constant here is checked by a unit test against what gcc
//! printed for the real headers (`layout/layout.c` says how to run it; `layout/asserts.rs` is
//! its output). Linux on 64-bit targets only: `tcu_ulong` is C's `unsigned long`.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]

use std::ffi::{c_int, c_short, c_uint, c_ulong, c_ulonglong, c_void};

/// `CUresult`, as an integer (0 is `CUDA_SUCCESS`).
pub type CUresult = c_uint;
/// `unsigned long`: 64 bits on Linux x86-64 and aarch64.
pub type tcu_ulong = c_ulong;
pub type CUvideotimestamp = i64;
pub type CUvideodecoder = *mut c_void;
pub type CUvideoparser = *mut c_void;
pub type CUvideoctxlock = *mut c_void;
/// A raw `CUstream`.
pub type CUstream = *mut c_void;

pub type cudaVideoCodec = c_int;
pub const cudaVideoCodec_MPEG1: cudaVideoCodec = 0;
pub const cudaVideoCodec_MPEG2: cudaVideoCodec = 1;
pub const cudaVideoCodec_MPEG4: cudaVideoCodec = 2;
pub const cudaVideoCodec_VC1: cudaVideoCodec = 3;
pub const cudaVideoCodec_H264: cudaVideoCodec = 4;
pub const cudaVideoCodec_JPEG: cudaVideoCodec = 5;
pub const cudaVideoCodec_HEVC: cudaVideoCodec = 8;
pub const cudaVideoCodec_VP8: cudaVideoCodec = 9;
pub const cudaVideoCodec_VP9: cudaVideoCodec = 10;
pub const cudaVideoCodec_AV1: cudaVideoCodec = 11;

pub type cudaVideoChromaFormat = c_int;
pub const cudaVideoChromaFormat_Monochrome: cudaVideoChromaFormat = 0;
pub const cudaVideoChromaFormat_420: cudaVideoChromaFormat = 1;
pub const cudaVideoChromaFormat_422: cudaVideoChromaFormat = 2;
pub const cudaVideoChromaFormat_444: cudaVideoChromaFormat = 3;

pub type cudaVideoSurfaceFormat = c_int;
pub const cudaVideoSurfaceFormat_NV12: cudaVideoSurfaceFormat = 0;
/// 16-bit samples; 10-bit content has its 10 bits in the high bits (as `p010`).
pub const cudaVideoSurfaceFormat_P016: cudaVideoSurfaceFormat = 1;
pub const cudaVideoSurfaceFormat_YUV444: cudaVideoSurfaceFormat = 2;
pub const cudaVideoSurfaceFormat_YUV444_16Bit: cudaVideoSurfaceFormat = 3;

pub type cudaVideoDeinterlaceMode = c_int;
pub const cudaVideoDeinterlaceMode_Weave: cudaVideoDeinterlaceMode = 0;
pub const cudaVideoDeinterlaceMode_Bob: cudaVideoDeinterlaceMode = 1;
pub const cudaVideoDeinterlaceMode_Adaptive: cudaVideoDeinterlaceMode = 2;

/// `cudaVideoCreateFlags`, stored in a `tcu_ulong`.
pub const cudaVideoCreate_Default: tcu_ulong = 0x00;
pub const cudaVideoCreate_PreferCUDA: tcu_ulong = 0x01;
pub const cudaVideoCreate_PreferDXVA: tcu_ulong = 0x02;
pub const cudaVideoCreate_PreferCUVID: tcu_ulong = 0x04;

pub type cuvidDecodeStatus = c_int;
pub const cuvidDecodeStatus_Invalid: cuvidDecodeStatus = 0;
pub const cuvidDecodeStatus_InProgress: cuvidDecodeStatus = 1;
pub const cuvidDecodeStatus_Success: cuvidDecodeStatus = 2;
pub const cuvidDecodeStatus_Error: cuvidDecodeStatus = 8;
pub const cuvidDecodeStatus_Error_Concealed: cuvidDecodeStatus = 9;

/// `CUvideopacketflags`, stored in [`CUVIDSOURCEDATAPACKET::flags`].
pub const CUVID_PKT_ENDOFSTREAM: tcu_ulong = 0x01;
pub const CUVID_PKT_TIMESTAMP: tcu_ulong = 0x02;
pub const CUVID_PKT_DISCONTINUITY: tcu_ulong = 0x04;
pub const CUVID_PKT_ENDOFPICTURE: tcu_ulong = 0x08;
pub const CUVID_PKT_NOTIFY_EOS: tcu_ulong = 0x10;

/// A frame rate as the sequence header gives it (0/0: unspecified).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDFRAMERATE {
    pub numerator: c_uint,
    pub denominator: c_uint,
}

/// A rectangle of `int`s (`CUVIDEOFORMAT::display_area`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUVIDRECT {
    pub left: c_int,
    pub top: c_int,
    pub right: c_int,
    pub bottom: c_int,
}

/// A rectangle of `short`s (`CUVIDDECODECREATEINFO::display_area` and `target_rect`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CUVIDSHORTRECT {
    pub left: c_short,
    pub top: c_short,
    pub right: c_short,
    pub bottom: c_short,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDASPECTRATIO {
    pub x: c_int,
    pub y: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDVIDEOSIGNALDESCRIPTION {
    /// The C bitfields `video_format : 3`, `video_full_range_flag : 1`,
    /// `reserved_zero_bits : 4`, in one byte.
    pub bits: u8,
    pub color_primaries: u8,
    pub transfer_characteristics: u8,
    pub matrix_coefficients: u8,
}

/// What the parser's sequence callback is handed.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDEOFORMAT {
    pub codec: cudaVideoCodec,
    pub frame_rate: CUVIDFRAMERATE,
    pub progressive_sequence: u8,
    pub bit_depth_luma_minus8: u8,
    pub bit_depth_chroma_minus8: u8,
    /// What `ulNumDecodeSurfaces` must be at least, and what the sequence callback returns
    /// to the parser when it uses this value.
    pub min_num_decode_surfaces: u8,
    pub coded_width: c_uint,
    pub coded_height: c_uint,
    pub display_area: CUVIDRECT,
    pub chroma_format: cudaVideoChromaFormat,
    pub bitrate: c_uint,
    pub display_aspect_ratio: CUVIDASPECTRATIO,
    pub video_signal_description: CUVIDVIDEOSIGNALDESCRIPTION,
    pub seqhdr_data_length: c_uint,
}

/// `CUVIDPICPARAMS`, opaque: only ever passed by pointer from the parser to
/// `cuvidDecodePicture`.
#[repr(C)]
pub struct CUVIDPICPARAMS {
    _opaque: [u8; 0],
}

/// The parser's callbacks: 0 is failure (propagated by `cuvidParseVideoData`); the sequence
/// callback's value above 1 sets the parser's number of decode surfaces.
pub type PFNVIDSEQUENCECALLBACK = Option<unsafe extern "C" fn(*mut c_void, *mut CUVIDEOFORMAT) -> c_int>;
pub type PFNVIDDECODECALLBACK = Option<unsafe extern "C" fn(*mut c_void, *mut CUVIDPICPARAMS) -> c_int>;
pub type PFNVIDDISPLAYCALLBACK = Option<unsafe extern "C" fn(*mut c_void, *mut CUVIDPARSERDISPINFO) -> c_int>;
/// Takes a `CUVIDOPERATINGPOINTINFO*` (AV1); unused here.
pub type PFNVIDOPPOINTCALLBACK = Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>;
/// Takes a `CUVIDSEIMESSAGEINFO*`; unused here.
pub type PFNVIDSEIMSGCALLBACK = Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int>;

/// `cuvidCreateVideoParser`'s argument.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUVIDPARSERPARAMS {
    pub CodecType: cudaVideoCodec,
    pub ulMaxNumDecodeSurfaces: c_uint,
    pub ulClockRate: c_uint,
    pub ulErrorThreshold: c_uint,
    pub ulMaxDisplayDelay: c_uint,
    /// The C bitfields `bAnnexb : 1`, `bMemoryOptimize : 1`, `uReserved : 30`.
    pub bitfields: c_uint,
    pub uReserved1: [c_uint; 4],
    pub pUserData: *mut c_void,
    pub pfnSequenceCallback: PFNVIDSEQUENCECALLBACK,
    pub pfnDecodePicture: PFNVIDDECODECALLBACK,
    pub pfnDisplayPicture: PFNVIDDISPLAYCALLBACK,
    pub pfnGetOperatingPoint: PFNVIDOPPOINTCALLBACK,
    pub pfnGetSEIMsg: PFNVIDSEIMSGCALLBACK,
    pub pvReserved2: [*mut c_void; 5],
    /// A `CUVIDEOFORMATEX*` (optional sequence header from the container); null here.
    pub pExtVideoInfo: *mut c_void,
}

/// One `cuvidParseVideoData` call's data.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUVIDSOURCEDATAPACKET {
    /// `CUVID_PKT_*`.
    pub flags: tcu_ulong,
    pub payload_size: tcu_ulong,
    pub payload: *const u8,
    /// Valid with `CUVID_PKT_TIMESTAMP`.
    pub timestamp: CUvideotimestamp,
}

/// What the parser's display callback is handed: a decoded picture, in display order.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDPARSERDISPINFO {
    pub picture_index: c_int,
    pub progressive_frame: c_int,
    pub top_field_first: c_int,
    /// Additional fields to show (1 = ivtc, 2 = frame doubling, 4 = tripling, -1 = unpaired).
    pub repeat_first_field: c_int,
    pub timestamp: CUvideotimestamp,
}

/// `cuvidGetDecoderCaps`' argument: the first three fields in, the rest out.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CUVIDDECODECAPS {
    pub eCodecType: cudaVideoCodec,
    pub eChromaFormat: cudaVideoChromaFormat,
    pub nBitDepthMinus8: c_uint,
    pub reserved1: [c_uint; 3],
    pub bIsSupported: u8,
    pub nNumNVDECs: u8,
    /// Bit `n` set: `cudaVideoSurfaceFormat` `n` can be the output format.
    pub nOutputFormatMask: u16,
    pub nMaxWidth: c_uint,
    pub nMaxHeight: c_uint,
    /// coded width x coded height / 256 must not exceed it.
    pub nMaxMBCount: c_uint,
    pub nMinWidth: u16,
    pub nMinHeight: u16,
    pub bIsHistogramSupported: u8,
    pub nCounterBitDepth: u8,
    pub nMaxHistogramBins: u16,
    pub reserved3: [c_uint; 10],
}

/// `cuvidCreateDecoder`'s argument.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUVIDDECODECREATEINFO {
    pub ulWidth: tcu_ulong,
    pub ulHeight: tcu_ulong,
    pub ulNumDecodeSurfaces: tcu_ulong,
    pub CodecType: cudaVideoCodec,
    pub ChromaFormat: cudaVideoChromaFormat,
    /// `cudaVideoCreate_*`.
    pub ulCreationFlags: tcu_ulong,
    pub bitDepthMinus8: tcu_ulong,
    pub ulIntraDecodeOnly: tcu_ulong,
    pub ulMaxWidth: tcu_ulong,
    pub ulMaxHeight: tcu_ulong,
    pub Reserved1: tcu_ulong,
    /// The part of the coded picture that is output (cropping).
    pub display_area: CUVIDSHORTRECT,
    pub OutputFormat: cudaVideoSurfaceFormat,
    pub DeinterlaceMode: cudaVideoDeinterlaceMode,
    pub ulTargetWidth: tcu_ulong,
    pub ulTargetHeight: tcu_ulong,
    pub ulNumOutputSurfaces: tcu_ulong,
    pub vidLock: CUvideoctxlock,
    /// Where in the output the display area goes; all zero: the whole target.
    pub target_rect: CUVIDSHORTRECT,
    pub enableHistogram: tcu_ulong,
    pub Reserved2: [tcu_ulong; 4],
}

/// `cuvidMapVideoFrame64`'s post-processing parameters.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUVIDPROCPARAMS {
    pub progressive_frame: c_int,
    pub second_field: c_int,
    pub top_field_first: c_int,
    pub unpaired_field: c_int,
    pub reserved_flags: c_uint,
    pub reserved_zero: c_uint,
    pub raw_input_dptr: c_ulonglong,
    pub raw_input_pitch: c_uint,
    pub raw_input_format: c_uint,
    pub raw_output_dptr: c_ulonglong,
    pub raw_output_pitch: c_uint,
    pub Reserved1: c_uint,
    /// The stream the post-processing (and so the mapped picture) is ordered on.
    pub output_stream: CUstream,
    pub Reserved: [c_uint; 46],
    pub histogram_dptr: *mut c_ulonglong,
    pub Reserved2: [*mut c_void; 1],
}

impl CUVIDPROCPARAMS {
    /// All fields zero (null pointers), as the SDK asks of everything not set.
    pub fn zeroed() -> CUVIDPROCPARAMS {
        CUVIDPROCPARAMS {
            progressive_frame: 0,
            second_field: 0,
            top_field_first: 0,
            unpaired_field: 0,
            reserved_flags: 0,
            reserved_zero: 0,
            raw_input_dptr: 0,
            raw_input_pitch: 0,
            raw_input_format: 0,
            raw_output_dptr: 0,
            raw_output_pitch: 0,
            Reserved1: 0,
            output_stream: std::ptr::null_mut(),
            Reserved: [0; 46],
            histogram_dptr: std::ptr::null_mut(),
            Reserved2: [std::ptr::null_mut(); 1],
        }
    }
}

/// `cuvidGetDecodeStatus`' answer.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CUVIDGETDECODESTATUS {
    pub decodeStatus: cuvidDecodeStatus,
    pub reserved: [c_uint; 31],
    pub pReserved: [*mut c_void; 8],
}

impl CUVIDGETDECODESTATUS {
    pub fn zeroed() -> CUVIDGETDECODESTATUS {
        CUVIDGETDECODESTATUS { decodeStatus: 0, reserved: [0; 31], pReserved: [std::ptr::null_mut(); 8] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    /// The size of the field `get` borrows.
    fn field_size<S, F>(_get: impl for<'a> Fn(&'a S) -> &'a F) -> usize {
        size_of::<F>()
    }

    /// Every number gcc printed for the real headers (layout/layout.c), against ours.
    #[test]
    #[allow(clippy::identity_op)]
    fn layout_matches_the_c_headers() {
        include!("../layout/asserts.rs");
    }

    #[test]
    fn zeroed_is_all_zero_bytes() {
        // What the SDK asks of every field not set; checked through the fields we set.
        let p = CUVIDPROCPARAMS::zeroed();
        assert!(p.output_stream.is_null() && p.histogram_dptr.is_null());
        assert!(p.Reserved.iter().all(|&w| w == 0));
        let s = CUVIDGETDECODESTATUS::zeroed();
        assert_eq!(s.decodeStatus, cuvidDecodeStatus_Invalid);
    }
}
