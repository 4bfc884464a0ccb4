//! `null`: a sink stage that takes every frame and does nothing with it (cpu domain for now).
//!
//! Useful to measure the stages before it, or to end a branch of a graph. It accepts every
//! pixel format (`rgb8`, `rgba8`, `gray8`, `i420`, `nv12`, `p010`) and has no params.
//!
//! # Params
//!
//! None; any key is an error.
//!
//! ```toml
//! [[stage]]
//! name = "sink"
//! plugin = "null"
//! inputs = ["yuv"]
//! ```
#![deny(unsafe_code)]

pub mod null;

gpuipc_plugin_api::export_plugin!(null::Null);
