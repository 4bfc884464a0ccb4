//! `rgb-process`: a filter stage applying brightness, contrast, gamma and invert to every
//! colour channel, in the cpu or the cuda domain.
//!
//! Takes one `rgb8`, `rgba8` or `gray8` input and writes the same format and size. R, G and B
//! (or gray) go through one 256-entry lookup table built from the params
//! ([`rgb_process::lut`]); the alpha of `rgba8` is copied unchanged. In the cuda domain the
//! same table is uploaded once when the stage starts and `kernels/rgb_process.cu` (compiled
//! with NVRTC and cached, see [`gpuipc_plugin_api::cuda`]) applies it on the stage's stream,
//! byte for byte what the cpu code does. In the cpu domain the frame is cut into bands of
//! rows, mapped at once by `threads` threads.
//!
//! # Params
//!
//! | key          | type             | default | meaning |
//! |--------------|------------------|---------|---------|
//! | `brightness` | float, -1..=1    | `0.0`   | added after contrast, in units of full scale |
//! | `contrast`   | float, >= 0      | `1.0`   | slope around mid-gray (0.5); 0 makes every value mid-gray |
//! | `gamma`      | float, > 0       | `1.0`   | output = value^(1/gamma); > 1 brightens mid-tones |
//! | `invert`     | bool             | `false` | output = 1 - value, last |
//! | `threads`    | integer, 0..=256 | `0`     | cpu domain: threads mapping each frame, each a band of rows; 0: this stage's share of the cores (the cores over the cpu stage processes of the pipeline, as validate says), at most 8 and at most one per 2^18 pixels (1 for 640x360, 3 for 1280x720, 7 for 1920x1080); ignored in the cuda domain |
//!
//! Integers are accepted for the float params (`contrast = 2`).
//!
//! ```toml
//! [[stage]]
//! name = "grade"
//! plugin = "rgb-process"
//! inputs = ["gen"]
//! params = { brightness = 0.1, contrast = 1.2, gamma = 2.2, invert = false }
//!
//! [[stage]]
//! name = "negative"
//! plugin = "rgb-process"
//! inputs = ["grade"]
//! params = { invert = true, threads = 2 }
//! ```
//!
//! # Table
//!
//! For each code `c` in 0..=255, in f64: `v = c / 255`; `v = (v - 0.5) * contrast + 0.5 +
//! brightness`; clamp `v` to [0, 1]; `v = v^(1 / gamma)`; if `invert`, `v = 1 - v`;
//! `out = round(v * 255)` (halves away from zero).
#![deny(unsafe_code)]

use gpuipc_plugin_api::bands;
pub mod cuda;
pub mod rgb_process;

gpuipc_plugin_api::export_plugin!(rgb_process::RgbProcess);
