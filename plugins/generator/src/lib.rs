//! `generator`: a source stage drawing synthetic test frames, in the cpu or the cuda domain.
//!
//! A frame's pixels are a pure function of the params and the frame's sequence number `seq`,
//! never of wall time or of how many frames this instance made, so a rerun or a restarted
//! stage draws the same frames and a GPU version can be checked against this one byte for byte.
//! Every formula is integer-only for that reason.
//!
//! In the cuda domain the frame is drawn straight into device memory by
//! `kernels/generator.cu` (compiled with NVRTC for the device when the stage starts and cached,
//! see [`gpuipc_plugin_api::cuda`]) on the stage's stream, byte for byte what the cpu code here
//! draws; the per-frame values (noise hash state, box corner) come from
//! [`generator::PatternFrame`].
//!
//! # Params
//!
//! | key       | type                                           | default  | meaning |
//! |-----------|------------------------------------------------|----------|---------|
//! | `width`   | integer, 1..=32768                             | `1280`   | frame width in pixels |
//! | `height`  | integer, 1..=32768                             | `720`    | frame height in pixels |
//! | `pattern` | `"bars"` \| `"gradient"` \| `"noise"` \| `"box"` | `"bars"` | what to draw: eight colour bars, colour ramps, hashed noise, or a white box moving over gray |
//! | `format`  | `"rgb8"` \| `"rgba8"` \| `"gray8"`             | `"rgb8"` | output pixel format |
//! | `fps`     | float, >= 0.001                                | none     | pace output to this rate; none: as fast as the pipeline takes frames |
//! | `seed`    | integer, 0..=2^63-1                            | `0`      | seed of the `noise` pattern |
//! | `threads` | integer, 0..=256                               | `0`      | cpu domain: threads drawing each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^16 pixels for `noise`, per 2^20 for the others (whose rows are copies or nearly); ignored in the cuda domain |
//!
//! In the cpu domain the frame is cut into bands of rows, drawn at once by `threads` threads,
//! from what every row shares (the bars row, the box pattern's two rows, the gradient's red of
//! each column and green of each row, the noise hash state after each column), made once a
//! frame, or once a run where it does not depend on `seq` (the bars row, the gradient's red
//! and green): the bytes of the per-pixel formulas below, whatever the count. A small frame
//! of a pattern that repeats (`bars`: every frame the same; `gradient`: every 64 frames, its
//! blue moving 4 a frame mod 256), up to 4 KiB of pixels for the gradient, is kept as first
//! drawn and copied after.
//!
//! Pacing only delays: frame `i` of this instance (counted from its first `process` call, which
//! takes the start instant) is handed on no earlier than `start + i / fps`. What a frame shows
//! still depends on its `seq` alone.
//!
//! ```toml
//! [[stage]]
//! name = "gen"
//! plugin = "generator"
//! params = { width = 1920, height = 1080, pattern = "gradient", format = "rgba8", fps = 60.0 }
//!
//! [[stage]]
//! name = "noise"
//! plugin = "generator"
//! params = { width = 641, height = 479, pattern = "noise", format = "gray8", seed = 7 }
//!
//! [[stage]]
//! name = "one-core"
//! plugin = "generator"
//! params = { width = 3840, height = 2160, pattern = "noise", threads = 1 }
//! ```
//!
//! # Patterns
//!
//! Each pattern gives an RGB triple for pixel `(x, y)` of a `w` x `h` frame with sequence
//! number `seq`; all arithmetic is on unsigned integers, `/` truncates.
//!
//! - `bars`: eight vertical 100% bars, `i = x * 8 / w` picks white (255,255,255),
//!   yellow (255,255,0), cyan (0,255,255), green (0,255,0), magenta (255,0,255), red (255,0,0),
//!   blue (0,0,255), black (0,0,0). The same in every frame.
//! - `gradient`: `R = x * 255 / max(w - 1, 1)`, `G = y * 255 / max(h - 1, 1)`,
//!   `B = (x + y + 4 * seq) mod 256` (any wrapping width of 8 bits or more gives the same B).
//! - `noise`: channel `c` (0 = R, 1 = G, 2 = B) is the low 8 bits of MurmurHash3_x86_32 with
//!   hash seed 0 over the 28-byte message of seven little-endian u32 words
//!   `[seed mod 2^32, seed >> 32, seq mod 2^32, seq >> 32, x, y, c]`. The state after the
//!   first four words is the same for the whole frame ([`generator::noise_state`]).
//! - `box`: background gray (64, 64, 64) and a white (255, 255, 255) box of
//!   `bw = max(w / 8, 1)` by `bh = max(h / 8, 1)` whose top-left corner is
//!   `x0 = (4 * seq) mod w`, `y0 = (4 * seq) mod h` and which wraps around the edges:
//!   `(x, y)` is white when `(x + w - x0) mod w < bw` and `(y + h - y0) mod h < bh`.
//!
//! `rgb8` writes R, G, B; `rgba8` adds alpha 255; `gray8` writes the integer luma
//! `(77 R + 150 G + 29 B + 128) >> 8` of the same triple ([`generator::luma`]).
#![deny(unsafe_code)]

use gpuipc_plugin_api::bands;
pub mod cpu;
pub mod cuda;
pub mod generator;

gpuipc_plugin_api::export_plugin!(generator::Generator);
