//! `video`: a source stage decoding a compressed video file into `nv12` (8-bit) or `p010`
//! (10-bit) frames: with NVDEC, straight into GPU memory, in the cuda domain; with ffmpeg in
//! the cpu domain. Both decoders are bit-exact by their standards and are fed the same bytes,
//! so the two domains give byte-identical frames.
//!
//! ```text
//! ffmpeg -f lavfi -i testsrc2=size=1280x720:rate=30 -t 10 -c:v libx264 -pix_fmt yuv420p clip.mp4
//! ```
//!
//! # What it reads
//!
//! - MP4 and MOV files (progressive or fragmented, read with `re_mp4`): the first video track,
//!   H.264 (avc1), HEVC (hvc1, hev1), VP9 (vp09) or AV1 (av01).
//! - H.264 and HEVC elementary streams (Annex B: `.h264`, `.264`, `.h265`, `.hevc`, or any name
//!   when the first NAL unit tells), split into access units here.
//!
//! 4:2:0 at 8 bits (`nv12`) or 10 bits (`p010`: each sample a little-endian u16, the value in
//! its 10 high bits) only; other chroma formats (4:4:4, 4:2:2, monochrome) and bit depths (12)
//! are refused when the pipeline is planned, naming the file. What this GPU's NVDEC cannot
//! decode (H.264 High 10 on NVIDIA's decoders, a size beyond its limits) is refused when the
//! stage starts, naming the file and the decoder's limits. MKV/WebM and IVF files are not
//! read; `ffmpeg -i in.mkv -c copy out.mp4` rewraps one.
//!
//! # Frames
//!
//! Display order (B-frames reordered), one frame per picture. Frame `seq` is the file's
//! display frame `seq` (modulo its length when looping), so a restarted stage goes on from
//! the frame after the last it delivered, decoding up to it again. Each frame's
//! `timestamp_ns` is its presentation time in the file (the first frame's is 0; a looping
//! source's second pass continues from the file's duration), not the wall clock. An
//! elementary stream has no timestamps: frame `k` is at `k` frame durations of its VUI timing,
//! or of 25 frames/s. The stream ends at the end of the file (the run finishes), at the
//! pipeline's `frames`, or never with `loop`.
//!
//! When the pipeline is planned (`validate` too), the file is opened and a line is logged:
//! codec, profile, container, size, bit depth and chroma, frame rate and frame count. A
//! missing file, a file that is not video, one with no video track or no frames, an
//! unsupported codec or format, and a truncated MP4 (a sample past the end of the file) are
//! errors there, naming the file.
//!
//! A frame the decoder made from damaged data (it concealed errors: NVDEC says so per picture,
//! ffmpeg by logging errors while making it) is handed on and counted as damaged: the run's
//! table and report show it, and the stage logs the count when it ends. Frames a decoder
//! could not make at all end the stream early, with a warning.
//!
//! # Decoders
//!
//! - cuda: NVDEC through the driver's `libnvcuvid.so.1`, loaded when the stage starts (nothing
//!   is needed to build), on the stage's CUDA context and stream. Each picture is copied from
//!   the decoder's output surface into the ring slot on the stage's stream and the surface is
//!   given back at once.
//! - cpu: ffmpeg as a child process (`ffmpeg` on PATH, `$GPUIPC_FFMPEG`, or the `ffmpeg`
//!   param), fed the packets on its standard input and giving raw planar frames on its
//!   standard output; it dies with the stage.
//!
//! # Params
//!
//! | key        | type   | default  | meaning |
//! |------------|--------|----------|---------|
//! | `path`     | string | required | the file to decode: MP4 or MOV (H.264, HEVC, VP9, AV1), or an H.264 or HEVC elementary stream (.h264, .264, .h265, .hevc) |
//! | `loop`     | bool   | `false`  | start again at the first frame after the last, until the pipeline's `frames` or Ctrl-C |
//! | `realtime` | bool   | `false`  | hand frames on at the pace of their timestamps, as a camera would; otherwise as fast as the pipeline takes them |
//! | `ffmpeg`   | string | `none`   | cpu domain: the ffmpeg program that decodes; $GPUIPC_FFMPEG when not given, else `ffmpeg` on PATH |
//!
//! ```toml
//! [[stage]]
//! name = "decode"
//! plugin = "video"
//! params = { path = "clip.mp4" }
//!
//! [[stage]]
//! name = "camera"
//! plugin = "video"
//! params = { path = "recording.h264", loop = true, realtime = true }
//! ```
//!
//! More: [video.md](video.md).
#![deny(unsafe_code)]

pub mod video;

pub use gpuipc_video_codec::{container, decode};

gpuipc_plugin_api::export_plugin!(video::Video);
