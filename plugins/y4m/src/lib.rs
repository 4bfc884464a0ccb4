//! `y4m`: a sink stage writing `i420` frames to a YUV4MPEG2 file (cpu domain for now).
//!
//! The file plays in ffmpeg, mpv and VLC and feeds encoders as is. It starts with the header
//! `YUV4MPEG2 W{width} H{height} F{fps}:{fps_den} Ip A1:1 C420jpeg`, written when the stage
//! starts, then each frame is `FRAME` and a newline followed by the Y, U and V planes packed
//! (no row padding; chroma planes are `ceil(w/2)` x `ceil(h/2)`, so odd sizes work).
//! `C420jpeg` says chroma is centred in its 2x2 block, which is what `yuv420` produces.
//! y4m carries no colour matrix or range; remember what the `yuv420` stage used.
//!
//! Only `i420` is accepted: put a `yuv420` stage with `layout = "i420"` in front.
//!
//! # Params
//!
//! | key       | type              | default  | meaning |
//! |-----------|-------------------|----------|---------|
//! | `path`    | string, a path    | required | the file to write, created or truncated when the stage starts |
//! | `fps`     | integer >= 1      | `30`     | frame rate numerator written in the header |
//! | `fps_den` | integer >= 1      | `1`      | frame rate denominator (`fps = 30000, fps_den = 1001` is 29.97) |
//!
//! ```toml
//! [[stage]]
//! name = "file"
//! plugin = "y4m"
//! inputs = ["yuv"]
//! params = { path = "out/video.y4m", fps = 60 }
//!
//! [[stage]]
//! name = "ntsc"
//! plugin = "y4m"
//! inputs = ["yuv"]
//! params = { path = "out/ntsc.y4m", fps = 30000, fps_den = 1001 }
//! ```
//!
//! Frames are buffered and flushed at end of stream; a stage that is killed may leave the
//! last frames unwritten.
#![deny(unsafe_code)]

pub mod y4m;

gpuipc_plugin_api::export_plugin!(y4m::Y4m);
