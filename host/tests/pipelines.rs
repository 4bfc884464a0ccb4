//! Every pipeline in `pipelines/` runs as real stage processes and in-process, and both
//! runs write the same bytes: every stage's output checksums and every sink's files.
//!
//! A pipeline that decodes a clip says how to make it in a comment line
//! `# clip: ffmpeg ARGS... FILE`: the test runs that line in each run's folder first. Such a
//! pipeline, and one with an `encode` sink, needs ffmpeg: without it it is skipped, unless
//! `GPUIPC_REQUIRE_FFMPEG=1`.

mod common;

use common::*;

/// Frames per run: enough to fill and wrap every ring, few enough for a debug build on two
/// cores (4K frames are slow to draw on a CPU).
fn frames_for(pipeline: &str) -> u64 {
    if pipeline.contains("4k") { 2 } else { 12 }
}

#[test]
fn every_pipeline_gives_the_same_bytes_in_both_modes() {
    let mut files: Vec<_> = std::fs::read_dir(repo_root().join("pipelines"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "expected the shipped pipelines, found {files:?}");
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let clips = clip_commands(&file);
        // Clips are made with ffmpeg; an `encode` sink runs it.
        let needs_ffmpeg = !clips.is_empty() || std::fs::read_to_string(&file).unwrap().contains("plugin = \"encode\"");
        if needs_ffmpeg && !ffmpeg_tools_for_test(&format!("the pipeline {stem}")) {
            continue;
        }
        let frames = frames_for(&stem);
        let frames_arg = frames.to_string();
        let file_arg = file.to_string_lossy().into_owned();
        let mut results = Vec::new();
        for (mode, extra) in [("multi", None), ("inproc", Some("--in-process"))] {
            let dir = scratch(&format!("pipelines-{stem}-{mode}"));
            for clip in &clips {
                ffmpeg_in(&dir, clip);
            }
            let mut args = vec!["run", &file_arg, "--quiet", "--frames", &frames_arg, "--checksums", "sums"];
            args.extend(extra);
            let run = run(&dir, &args);
            assert!(run.status.success(), "{stem} ({mode}) failed:\n{}", run.output());
            assert_nothing_left(run.pid);
            let sums = files_under(&dir.join("sums"));
            assert!(!sums.is_empty(), "{stem} ({mode}): no checksum files");
            for name in sums.keys() {
                let seqs: Vec<u64> = sum_lines(&dir.join("sums").join(name)).into_iter().map(|(s, _)| s).collect();
                assert_eq!(seqs, (0..frames).collect::<Vec<_>>(), "{stem} ({mode}) {name}");
            }
            let mut outputs = files_under(&dir);
            // The clips were made for the run, not by it.
            outputs.retain(|name, _| !name.starts_with("stdout-") && !clips.iter().any(|c| c.last() == Some(name)));
            results.push(outputs);
        }
        assert_eq!(
            results[0].keys().collect::<Vec<_>>(),
            results[1].keys().collect::<Vec<_>>(),
            "{stem}: the two modes wrote different files"
        );
        for (name, bytes) in &results[0] {
            assert!(bytes == &results[1][name], "{stem}: {name} differs between multi-process and in-process runs");
        }
    }
}

/// The `# clip: ffmpeg ...` lines of a pipeline file, each as its arguments after `ffmpeg`.
fn clip_commands(file: &std::path::Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("# clip: ffmpeg "))
        .map(|args| args.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn validate_prints_the_plan_and_graph_prints_dot() {
    let file = repo_root().join("pipelines/4k-yuv.toml");
    let dir = scratch("validate-4k");
    let v = run(&dir, &["validate", &file.to_string_lossy()]);
    assert!(v.status.success(), "{}", v.output());
    for needle in ["gen", "grade", "yuv", "rgb8 3840x2160", "i420 3840x2160", "4 slots x 24.88 MB", "private output"] {
        assert!(v.stdout.contains(needle), "validate output lacks `{needle}`:\n{}", v.stdout);
    }
    let g = run(&dir, &["graph", &file.to_string_lossy()]);
    assert!(g.status.success(), "{}", g.output());
    assert!(g.stdout.starts_with("digraph \"4k-yuv\" {"), "{}", g.stdout);
    assert!(g.stdout.contains("\"gen\" -> \"grade\""), "{}", g.stdout);
    assert!(g.stdout.contains("\"grade\" -> \"yuv\""), "{}", g.stdout);
}

/// Stages that hold back wake-ups of sleeping neighbours and send them in batches (as cuda
/// stages do, `GPUIPC_WAKE_BATCH`; forced here on cpu stages, which never do by default) lose
/// no frame and no wake-up: fan-out, fan-in and a long small-frame handoff end with every frame
/// at every stage and the bytes of an in-process run.
#[test]
fn held_wake_ups_lose_no_frame() {
    for (stem, frames) in [("fan-in", 40u64), ("handoff-64", 3000)] {
        let file = repo_root().join("pipelines").join(format!("{stem}.toml"));
        let file_arg = file.to_string_lossy().into_owned();
        let frames_arg = frames.to_string();
        let mut sums = Vec::new();
        for (mode, wrap, extra) in
            [("held", &["env", "GPUIPC_WAKE_BATCH=3"][..], None), ("inproc", &[][..], Some("--in-process"))]
        {
            let dir = scratch(&format!("held-wakes-{stem}-{mode}"));
            let mut args = vec!["run", &file_arg, "--quiet", "--frames", &frames_arg, "--checksums", "sums"];
            args.extend(extra);
            let run = start_wrapped(&dir, wrap, &args, std::process::Stdio::null()).finish(RUN_TIMEOUT);
            assert!(run.status.success(), "{stem} ({mode}) failed:\n{}", run.output());
            assert_nothing_left(run.pid);
            let files = files_under(&dir.join("sums"));
            for name in files.keys() {
                let seqs: Vec<u64> = sum_lines(&dir.join("sums").join(name)).into_iter().map(|(s, _)| s).collect();
                assert_eq!(seqs, (0..frames).collect::<Vec<_>>(), "{stem} ({mode}) {name}");
            }
            sums.push(files);
        }
        assert!(sums[0] == sums[1], "{stem}: held wake-ups changed the bytes");
    }
}
