//! `sepia`: a filter stage toning `rgb8` and `rgba8` frames sepia, in the cpu or the cuda
//! domain. (gpuipc's plugin template: rename it, keep the shape.)
//!
//! Takes one `rgb8` or `rgba8` input and writes the same format and size; alpha is copied.
//! Each pixel's sepia colour comes from the classic matrix, in integers so that the cuda path
//! (`src/sepia.cu`, compiled with NVRTC when the stage starts) writes the cpu path's bytes:
//!
//! ```text
//! S_r = min(255, (393 R + 769 G + 189 B + 500) / 1000)
//! S_g = min(255, (349 R + 686 G + 168 B + 500) / 1000)
//! S_b = min(255, (272 R + 534 G + 131 B + 500) / 1000)
//! out = (in (256 - k) + S k + 128) / 256,  k = round(strength * 256)
//! ```
//!
//! # Params
//!
//! | key        | type         | default | meaning |
//! |------------|--------------|---------|---------|
//! | `strength` | float, 0..=1 | `1.0`   | 0 leaves frames as they are, 1 is full sepia |
//!
//! ```toml
//! [[stage]]
//! name = "tone"
//! plugin = "sepia"
//! inputs = ["gen"]
//! params = { strength = 0.8 }
//! ```
//!
//! `lib.rs` only exports: the stage's logic and params are in [`sepia`], its cuda path in
//! [`cuda`] next to its kernel `sepia.cu`.
#![deny(unsafe_code)]

pub mod cuda;
pub mod sepia;

gpuipc_plugin_api::export_plugin!(sepia::Sepia);
