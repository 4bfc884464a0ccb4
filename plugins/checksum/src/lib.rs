//! `checksum`: a sink stage writing one hash of every frame's pixels to a text file (cpu
//! domain for now).
//!
//! Accepts every pixel format, from 1 to 8 inputs (aligned by sequence number). For each
//! frame it writes a line `{seq} {hash:016x}` (with several inputs, one hash per input in
//! order: `{seq} {hash0:016x} {hash1:016x}`), where
//! `hash` is xxh3-64 (seed 0) of the pixel bytes of every plane in order, row by row, padding
//! excluded: the same pixels give the same hash whatever the pitch and plane offsets, so two
//! runs, a CPU and a GPU stage, or two layouts can be compared with `diff`
//! ([`checksum::frame_hash`]). A `p010` frame's samples are hashed as they lie, two bytes
//! each, little-endian.
//!
//! # Params
//!
//! | key    | type   | default  | meaning |
//! |--------|--------|----------|---------|
//! | `path` | string | required | the file to write, created or truncated when the stage starts (with its folder if missing); relative to the folder `gpuipc-host` runs in |
//!
//! `validate` refuses a `path` that is empty, a folder, or under a file; one that cannot be
//! created for another reason (permissions) fails when the stage starts.
//!
//! ```toml
//! [[stage]]
//! name = "hashes"
//! plugin = "checksum"
//! inputs = ["yuv"]
//! params = { path = "out/yuv.xxh3" }
//! ```
//!
//! Each line reaches the file as it is written. A stage started again after a failure
//! (`restart = "on-failure"`) goes on with the file its earlier processes wrote, cutting off a
//! line one of them left half written: the file holds every frame delivered to the stage once,
//! in order (and may hold a frame a killed process wrote just before it died, which the run
//! counts lost).
#![deny(unsafe_code)]

pub mod checksum;

gpuipc_plugin_api::export_plugin!(checksum::Checksum);
