//! `yuv-to-rgb`: a filter stage converting 4:2:0 YUV, `i420`, `nv12` or 10-bit `p010`, to RGB,
//! the inverse of `yuv420`, in the cpu or the cuda domain.
//!
//! Takes one `i420`, `nv12` or `p010` input and writes `rgb8` or `rgba8` (alpha 255) of the
//! same width and height. Odd sizes are allowed. Every pixel takes the U and V of the 2x2
//! block it lies in (sample `(x / 2, y / 2)`, nearest neighbour): the inverse of `yuv420`'s
//! block mean, exact for a block of one colour, and blind to where a stream says chroma sits
//! (`C420jpeg` centred, `C420mpeg2` left). Set `matrix` and `range` to what made the frames:
//! y4m files carry neither (ffmpeg's default for `yuv420p` of unknown origin is `bt601`,
//! `limited`).
//!
//! `p010` (what a 10-bit video decoder makes, ffmpeg's `p010le`) is `nv12` with 10-bit
//! samples, each in the high bits of a little-endian u16; the low 6 bits are ignored. Its
//! levels are the 8-bit ones scaled as H.273 says (limited: Y 64..=940, U, V 64..=960 around
//! 512; full: 0..=1023, around 512), and the same `matrix` and `range` params apply: the
//! output is 8-bit RGB, the 10-bit value rounded. (ffmpeg 5.1's swscale takes full-range
//! 10-bit levels as the 8-bit ones times 4, white at 1020 rather than 1023, so its full-range
//! results differ from these by 1 in many places; limited range agrees but for rounding.)
//!
//! In the cuda domain `kernels/yuv_to_rgb.cu` (compiled with NVRTC when the stage starts and
//! cached, see [`gpuipc_plugin_api::cuda`]) converts on the stage's stream with the same
//! fixed-point [`yuv_to_rgb::Coefficients`], byte for byte what the cpu code does, for every
//! input format.
//!
//! # Params
//!
//! | key      | type                       | default     | meaning |
//! |----------|----------------------------|-------------|---------|
//! | `matrix` | `"bt709"` \| `"bt601"`     | `"bt709"`   | luma weights the frames were made with: BT.709 Kr = 0.2126, Kb = 0.0722; BT.601 Kr = 0.299, Kb = 0.114 |
//! | `range`  | `"limited"` \| `"full"`    | `"limited"` | limited: Y 16..=235, U, V 16..=240 (p010: 64..=940, 64..=960; values beyond clamp); full: 0..=255 (p010: 0..=1023) |
//! | `format` | `"rgb8"` \| `"rgba8"`      | `"rgb8"`    | output pixel format; rgba8 has alpha 255 |
//! | `threads` | integer, 0..=256 | `0` | cpu domain: threads converting each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain |
//!
//! ```toml
//! [[stage]]
//! name = "rgb"
//! plugin = "yuv-to-rgb"
//! inputs = ["video"]
//! params = { matrix = "bt709", range = "limited" }
//!
//! [[stage]]
//! name = "jpeg-like"
//! plugin = "yuv-to-rgb"
//! inputs = ["yuv"]
//! params = { matrix = "bt601", range = "full", format = "rgba8" }
//! ```
//!
//! # Arithmetic
//!
//! The inverse of `yuv420`'s float equations, with `Kg = 1 - Kr - Kb`:
//!
//! ```text
//! full:    Y' = Y                Cb = U - 128                 Cr = V - 128
//! limited: Y' = (Y - 16) 255/219 Cb = (U - 128) 255/224       Cr = (V - 128) 255/224
//! R = Y' + 2 (1 - Kr) Cr    B = Y' + 2 (1 - Kb) Cb    G = (Y' - Kr R - Kb B) / Kg
//! ```
//!
//! in fixed point with 16 fractional bits: each multiplier of `Y - y_offset`, `U - 128` and
//! `V - 128` is scaled by 65536 and rounded to the nearest i32 on its own
//! ([`yuv_to_rgb::Coefficients`]: `y_mul`, `r_v`, `g_u`, `g_v`, `b_u`), then
//!
//! ```text
//! t = y_mul (Y - y_offset) + 32768
//! R = clamp(max(t + r_v (V - 128), 0) >> 16, 0, 255)
//! G = clamp(max(t + g_u (U - 128) + g_v (V - 128), 0) >> 16, 0, 255)
//! B = clamp(max(t + b_u (U - 128), 0) >> 16, 0, 255)
//! ```
//!
//! that is, the value rounded half up, in 32 bits (every sum is below 2^27 in size). Against
//! the float equations rounded, every result is within 1 (and equal for over 99.9% of Y, U, V
//! triples). A round trip RGB → `yuv420` → `yuv-to-rgb` of a 2x2 block of one colour gives
//! each channel back within 1 in full range and 2 in limited range (219 and 224 levels for
//! 256), both matrices, measured over all 2^24 colours; where a block's four pixels differ,
//! their chroma was averaged and comes back as the mean.
//!
//! `p010`'s 10-bit samples take the same equations at their own levels, with `k = 4`:
//!
//! ```text
//! full:    Y' = Y 255/1023           Cb = (U - 512) 255/1023         Cr = (V - 512) 255/1023
//! limited: Y' = (Y - 16k) 255/(219k) Cb = (U - 128k) 255/(224k)      Cr = (V - 128k) 255/(224k)
//! ```
//!
//! in fixed point with 18 fractional bits (2 more, for samples 4 times finer:
//! [`yuv_to_rgb::Coefficients::for_bits`], `frac_bits`), so each multiplier keeps the
//! precision of the 8-bit ones. With `y_offset` 64 (limited) or 0 (full) and `c_offset` 512:
//!
//! ```text
//! t = y_mul (Y - y_offset) + 131072
//! R = clamp(max(t + r_v (V - 512), 0) >> 18, 0, 255)
//! G = clamp(max(t + g_u (U - 512) + g_v (V - 512), 0) >> 18, 0, 255)
//! B = clamp(max(t + b_u (U - 512), 0) >> 18, 0, 255)
//! ```
//!
//! Every sum is below 2^29 in size. Limited range's multipliers are the 8-bit integers
//! (255/876 2^18 = 255/219 2^16), so a 10-bit frame of 8-bit levels times 4 gives the 8-bit
//! frame's bytes exactly; full range's are 1020/1023 of full 8-bit's. Against the float
//! equations rounded, every result is within 1, and equal for over 99.9% of triples.
#![deny(unsafe_code)]

pub mod cuda;
pub mod yuv_to_rgb;

gpuipc_plugin_api::export_plugin!(yuv_to_rgb::YuvToRgb);
