//! `png`: a sink stage writing frames as PNG files, one file per frame or every Nth (cpu
//! domain for now).
//!
//! Takes one `rgb8`, `rgba8` or `gray8` input and writes 8-bit RGB, RGBA or grayscale PNGs
//! that any image viewer, browser or ffmpeg reads. For `i420` or `nv12` frames, put a
//! `yuv-to-rgb` stage in front.
//!
//! `path` is a pattern: `{seq}` is replaced by the frame's sequence number, `{seq:0N}` by the
//! number padded with zeros to N digits (N in 1..=20), so `"out/frame-{seq:06}.png"` writes
//! `out/frame-000000.png`, `out/frame-000001.png`, ... A pattern without `{seq}` is refused
//! (every frame would overwrite one file), and so is any other `{...}`. The folders in the
//! path are made as needed. Frames whose `seq` is a multiple of `every` are written (`seq`,
//! not a count of frames seen, so a restarted stage or a policy that drops frames writes
//! the same names); the others are taken and dropped.
//!
//! The encoder is gpuipc's own ([`encode`]): one IDAT chunk holding a zlib stream, either of
//! stored deflate blocks (`compression = "none"`: fastest, about the size of the raw frame)
//! or of one block of fixed Huffman codes over greedy LZ77 matches, each row with the PNG
//! filter that suits it (`"fast"`: the generator's bars, gradient and box at 1280x720 take
//! 19 KB for 2.7 MB of pixels; data that does not compress, such as its noise, is stored
//! rather than grow). Files are written whole when the frame arrives.
//!
//! # Params
//!
//! | key           | type                    | default  | meaning |
//! |---------------|-------------------------|----------|---------|
//! | `path`        | string, a pattern       | required | the file of each frame, with {seq} or {seq:0N} (zero-padded to N digits); folders are made as needed |
//! | `every`       | integer, >= 1           | `1`      | write the frames whose seq is a multiple of this (1: all of them) |
//! | `compression` | `"fast"` \| `"none"`    | `"fast"` | fast: LZ77 with fixed Huffman codes and row filters; none: stored blocks |
//!
//! ```toml
//! [[stage]]
//! name = "frames"
//! plugin = "png"
//! inputs = ["gen"]
//! params = { path = "out/frame-{seq:06}.png" }
//!
//! [[stage]]
//! name = "thumbnails"
//! plugin = "png"
//! inputs = ["rgb"]
//! params = { path = "out/every-second/{seq}.png", every = 60, compression = "none" }
//! ```
#![deny(unsafe_code)]

pub mod encode;
pub mod png;

gpuipc_plugin_api::export_plugin!(png::Png);
