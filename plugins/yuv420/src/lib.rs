//! `yuv420`: a filter stage converting RGB to 4:2:0 YUV, `i420` or `nv12`, in the cpu or the
//! cuda domain.
//!
//! Takes one `rgb8` or `rgba8` input (alpha is ignored) and writes the same width and height.
//! Odd sizes are allowed: the chroma planes are `ceil(w/2)` x `ceil(h/2)`, and each chroma
//! sample comes from the average of the pixels of its 2x2 block that lie inside the frame: 4
//! inside, 2 on the last column or row of an odd size, 1 in the corner of an odd-by-odd frame.
//! Chroma sits at the centre of its block (JPEG/MPEG-1 siting, the `C420jpeg` of y4m).
//!
//! In the cuda domain `kernels/yuv420.cu` (compiled with NVRTC when the stage starts and
//! cached, see [`gpuipc_plugin_api::cuda`]) converts on the stage's stream with the same
//! fixed-point [`yuv420::Coefficients`], byte for byte what the cpu code does.
//!
//! In the cpu domain ([`cpu`]) the frame is cut into bands of whole row pairs (a chroma row
//! and its two luma rows), converted at once by `threads` threads: the same bytes whatever
//! the count, and the same as the per-pixel reference [`yuv420::convert`].
//!
//! # Params
//!
//! | key       | type                       | default     | meaning |
//! |-----------|----------------------------|-------------|---------|
//! | `matrix`  | `"bt709"` \| `"bt601"`     | `"bt709"`   | luma weights: BT.709 Kr = 0.2126, Kb = 0.0722; BT.601 Kr = 0.299, Kb = 0.114 |
//! | `range`   | `"limited"` \| `"full"`    | `"limited"` | limited: Y 16..=235, U, V 16..=240; full: 0..=255 |
//! | `layout`  | `"i420"` \| `"nv12"`       | `"i420"`    | i420: Y, U, V planes; nv12: Y plane, then U, V pairs interleaved (U first) |
//! | `threads` | integer, 0..=256           | `0`         | cpu domain: threads converting each frame, each a band of row pairs; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain |
//!
//! ```toml
//! [[stage]]
//! name = "yuv"
//! plugin = "yuv420"
//! inputs = ["gen"]
//! params = { matrix = "bt709", range = "limited", layout = "i420" }
//!
//! [[stage]]
//! name = "jpeg-like"
//! plugin = "yuv420"
//! inputs = ["gen"]
//! params = { matrix = "bt601", range = "full", layout = "nv12" }
//!
//! [[stage]]
//! name = "one-core"
//! plugin = "yuv420"
//! inputs = ["gen"]
//! params = { threads = 1 }
//! ```
//!
//! # Arithmetic
//!
//! Fixed point with 16 fractional bits, so a GPU kernel reproduces it byte for byte. The
//! coefficients ([`yuv420::Coefficients`]) come from the float equations, with R, G, B in
//! 0..=255 and `Kg = 1 - Kr - Kb`:
//!
//! ```text
//! Y' = Kr R + Kg G + Kb B      Cb = (B - Y') / (2 (1 - Kb))      Cr = (R - Y') / (2 (1 - Kr))
//! full:    Y = Y'              U = 128 + Cb                  V = 128 + Cr
//! limited: Y = 16 + Y' 219/255 U = 128 + Cb 224/255          V = 128 + Cr 224/255
//! ```
//!
//! Each multiplier of R, G and B is scaled by 65536 and rounded to the nearest i32 on its
//! own. Then, for a pixel and for a block of `n` pixels with channel sums `Rs, Gs, Bs`:
//!
//! ```text
//! Y = clamp(((y_offset << 16) + y_r R + y_g G + y_b B + 32768) >> 16, 0, 255)
//! U = clamp(max(0, (128 n << 16) + u_r Rs + u_g Gs + u_b Bs + (n << 15)) / (n << 16), 0, 255)
//! V = the same with v_r, v_g, v_b
//! ```
//!
//! that is, the value rounded half up. A negative numerator is clamped to 0 before the
//! division, so the truncating integer division of Rust and CUDA equals the floor that the
//! clamp to 0 needs. With the standard matrices the numerator is never negative anyway (the
//! lowest exact chroma value is 0.5 in full range, 16 in limited). Every intermediate fits in
//! an i32 (|numerator| < 2^27); the code uses i64 for margin.
#![deny(unsafe_code)]

use gpuipc_plugin_api::bands;
pub mod cpu;
pub mod cuda;
pub mod yuv420;

gpuipc_plugin_api::export_plugin!(yuv420::Yuv420);
