//! `y4m`: a sink stage writing `i420` frames to a YUV4MPEG2 (.y4m) file, or, in a stage
//! without inputs, a source reading them from one or from standard input (cpu domain for now).
//!
//! # Sink
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
//! Each frame reaches the file as it is written. A sink started again after a failure
//! (`restart = "on-failure"`) goes on with the stream its earlier processes wrote, cutting off
//! a frame one of them left half written, so the file stays one valid stream holding every
//! frame delivered to the stage once (and may hold a frame a killed process wrote just before
//! it died, which the run counts lost).
//!
//! # Source
//!
//! A y4m stage with no `inputs` reads a YUV4MPEG2 stream and makes `i420` frames of the size
//! its header gives, so any video reaches a pipeline through ffmpeg:
//!
//! ```text
//! ffmpeg -i any.mp4 -f yuv4mpegpipe -pix_fmt yuv420p - | gpuipc-host run from-stdin.toml
//! ```
//!
//! The header's `W` and `H` are required; `F` (rate), `I` (interlacing: interlaced frames are
//! read whole, as stored), `A` (pixel aspect) and `X` tags are read and ignored, and so are
//! tags of other letters. `C` must be 8-bit 4:2:0 (`C420jpeg`, `C420mpeg2`, `C420paldv`,
//! `C420`, or absent, which means `C420jpeg`); anything else (`C444`, `C422`, `C420p10`,
//! `Cmono`, ...) is refused at validation with an error naming the file and the tag (with
//! ffmpeg, add `-pix_fmt yuv420p`). The `C` variants differ in where chroma sits, which
//! `yuv-to-rgb` ignores (one chroma sample per 2x2 block). `FRAME` lines may carry tags of
//! their own; they are ignored.
//!
//! The stream ends at the end of the file (the source ends its stream, the pipeline drains
//! and the run finishes), or at the pipeline's `frames`, whichever comes first; with `loop`,
//! the file plays again from its first frame instead, until `frames` or Ctrl-C. A last frame
//! cut short is an error naming it (`in.y4m: frame 9 is truncated: the stream ends after
//! 1000 of its 115200 bytes`; frames count from 0, as `seq` does). Frames carry `seq` 0, 1,
//! 2, ...: frame `seq` of the file (modulo its length when looping); a restarted stage
//! skips to the frame its `seq` says.
//!
//! `path = "-"` reads standard input. The header is read when the pipeline is planned, by the
//! host (`validate` too), one byte at a time so that nothing after it is taken; a source
//! stage's process gets the host's standard input and reads the frames from there. Standard
//! input is read once: `loop` needs a file, a restarted stage goes on with whatever frame
//! comes next (the frames its earlier process had taken are lost), and one stage at most
//! should read it. A terminal is refused: pipe a stream in.
//!
//! # Params
//!
//! | key       | type              | default  | meaning |
//! |-----------|-------------------|----------|---------|
//! | `path`    | string            | required | sink: the file to write, created or truncated when the stage starts; source: the file to read, or "-" for standard input |
//! | `fps`     | integer, >= 1     | `none`   | sink only: frame rate numerator written in the header; 30 when not given |
//! | `fps_den` | integer, >= 1     | `none`   | sink only: frame rate denominator (fps = 30000, fps_den = 1001 is 29.97); 1 when not given |
//! | `loop`    | bool              | `false`  | source only: play the file again from its first frame when it ends (not with "-") |
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
//!
//! [[stage]]
//! name = "video"
//! plugin = "y4m"
//! params = { path = "in/clip.y4m", loop = true }
//!
//! [[stage]]
//! name = "piped"
//! plugin = "y4m"
//! params = { path = "-" }
//! ```
#![deny(unsafe_code)]

pub mod header;
pub mod source;
pub mod y4m;

gpuipc_plugin_api::export_plugin!(y4m::Y4m);
