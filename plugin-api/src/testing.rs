//! Helpers for plugin tests (the built-in plugins' unit tests use them): padded layouts,
//! frames packed into them and unpacked from them, a cpu [`CreateContext`], temporary paths,
//! and a check of the ```toml examples in a plugin's docs. Not part of the plugin API.
//!
//! For testing on a GPU, see [`crate::cuda::testing`].

use std::path::PathBuf;

use crate::format::FrameLayout;
use crate::frame::FrameInfo;
use crate::plugin::{CreateContext, Domain};

/// What the runner hands `Plugin::create` for a cpu stage named "test".
pub fn cpu_context() -> CreateContext<'static> {
    CreateContext {
        stage: "test",
        domain: Domain::Cpu,
        device_ordinal: None,
        cuda_context: 0,
        cuda_stream: 0,
        kernel_cache_dir: None,
    }
}

/// `layout` with `extra` more bytes of padding after every row.
pub fn padded(layout: FrameLayout, extra: u64) -> FrameLayout {
    let mut padded = layout;
    let mut offset = 0;
    for plane in &mut padded.planes[..layout.n_planes as usize] {
        plane.pitch += extra;
        plane.offset = offset;
        offset = (offset + plane.pitch * plane.rows).next_multiple_of(256);
    }
    padded.total_bytes = offset;
    padded
}

/// A frame of `info`'s layout whose packed pixels are `packed`, padding filled with `fill`.
pub fn frame_bytes(info: &FrameInfo, packed: &[u8], fill: u8) -> Vec<u8> {
    let mut bytes = vec![fill; info.layout.total_bytes as usize];
    let mut rest = packed;
    for plane in info.layout.planes() {
        for y in 0..plane.rows {
            let start = (plane.offset + y * plane.pitch) as usize;
            let (row, tail) = rest.split_at(plane.row_bytes as usize);
            bytes[start..start + row.len()].copy_from_slice(row);
            rest = tail;
        }
    }
    assert!(rest.is_empty());
    bytes
}

/// The packed pixels of each plane of a frame of `layout`, after checking that every row's
/// padding still holds `fill` (that the stage did not write it).
pub fn packed_planes(layout: &FrameLayout, bytes: &[u8], fill: u8) -> Vec<Vec<u8>> {
    let mut planes = Vec::new();
    for (i, plane) in layout.planes().iter().enumerate() {
        let mut packed = Vec::new();
        for y in 0..plane.rows {
            let start = (plane.offset + y * plane.pitch) as usize;
            let row = &bytes[start..start + plane.pitch as usize];
            let (pixels, padding) = row.split_at(plane.row_bytes as usize);
            assert!(padding.iter().all(|&b| b == fill), "plane {i} row {y} padding written");
            packed.extend_from_slice(pixels);
        }
        planes.push(packed);
    }
    planes
}

/// A path in the temporary folder, distinct per plugin, process and `name`.
pub fn temp_path(plugin: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("gpuipc-{plugin}-{}-{name}", std::process::id()))
}

/// Calls `check` with the params (as TOML text) of every stage in the ```toml examples of
/// `lib_rs` (a crate's `lib.rs`, whose `//!` docs hold them), after checking that the stage's
/// plugin is `plugin`. Panics if there is no example.
pub fn check_doc_examples(lib_rs: &str, plugin: &str, mut check: impl FnMut(&str)) {
    let docs: Vec<&str> = lib_rs
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    let docs = docs.join("\n");
    let mut checked = 0;
    for block in docs.split("```toml").skip(1) {
        let doc: toml::Table = block.split("```").next().unwrap().parse().unwrap();
        for stage in doc["stage"].as_array().unwrap() {
            assert_eq!(stage["plugin"].as_str(), Some(plugin));
            let table = stage.get("params").and_then(|p| p.as_table()).cloned();
            let text = toml::to_string(&table.unwrap_or_default()).unwrap();
            check(&text);
            checked += 1;
        }
    }
    assert!(checked > 0);
}
