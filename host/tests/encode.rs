//! The `encode` sink run by the real host, its output checked by ffprobe: I420 frames into an
//! H.264 .mp4, RGB frames converted by ffmpeg into a Matroska file (and what ffmpeg picks
//! without `pix_fmt`), the shipped `pipelines/encode-mp4.toml`, a run drained by a signal into
//! a complete file holding every frame made; and ffmpeg refusing the codec failing the run
//! with ffmpeg's own message, no ffmpeg left behind.
//!
//! Needs `ffmpeg` and `ffprobe` on the PATH. Without them each test that runs them says it
//! is skipped and returns, unless `GPUIPC_REQUIRE_FFMPEG=1` (CI), where that fails it.

mod common;

use std::path::Path;

use common::*;
use rustix::process::Signal;

/// A pipeline: the generator (`gen`, `size`, `format`), optionally a `yuv420` stage (`i420`)
/// making I420, then the encode stage `enc` with `params` (the inside of its params table).
fn encode_pipeline(frames: Option<u64>, size: (u32, u32), format: &str, to_i420: bool, params: &str) -> String {
    let frames = frames.map(|n| format!("frames = {n}")).unwrap_or_default();
    let (width, height) = size;
    let (middle, input) = if to_i420 {
        (
            "[[stage]]\nname = \"i420\"\nplugin = \"yuv420\"\ninputs = [\"gen\"]\nparams = { layout = \"i420\" }\n",
            "i420",
        )
    } else {
        ("", "gen")
    };
    format!(
        r#"
[pipeline]
name = "encode"
{frames}
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = {width}, height = {height}, pattern = "gradient", format = "{format}" }}
{middle}
[[stage]]
name = "enc"
plugin = "encode"
inputs = ["{input}"]
params = {{ {params} }}
"#
    )
}

/// Assert what ffprobe reads in `path`.
fn assert_video(path: &Path, codec: &str, size: (u64, u64), pix_fmt: &str, frames: u64, rate: &str) {
    let s = ffprobe_video(path);
    let what = path.display();
    assert_eq!(s["codec_name"], codec, "{what}: {s}");
    assert_eq!((s["width"].as_u64(), s["height"].as_u64()), (Some(size.0), Some(size.1)), "{what}: {s}");
    assert_eq!(s["pix_fmt"], pix_fmt, "{what}: {s}");
    assert_eq!(s["nb_read_frames"], frames.to_string(), "{what}: {s}");
    assert_eq!(s["r_frame_rate"], rate, "{what}: {s}");
}

#[test]
fn i420_frames_become_an_h264_mp4() {
    if !ffmpeg_tools_for_test("i420_frames_become_an_h264_mp4") {
        return;
    }
    let dir = scratch("encode-i420-mp4");
    let params = r#"path = "out/videos/clip.mp4", fps = 25, preset = "ultrafast""#;
    run_ok(&dir, &pipeline(&dir, "p.toml", &encode_pipeline(Some(48), (320, 240), "rgb8", true, params)), &[]);
    assert_video(&dir.join("out/videos/clip.mp4"), "h264", (320, 240), "yuv420p", 48, "25/1");
}

#[test]
fn rgb8_frames_become_a_playable_matroska_file_with_pix_fmt() {
    if !ffmpeg_tools_for_test("rgb8_frames_become_a_playable_matroska_file_with_pix_fmt") {
        return;
    }
    let dir = scratch("encode-rgb8-mkv");
    let params = r#"path = "clip.mkv", codec = "libx264", pix_fmt = "yuv420p", crf = 28, fps = 30000, fps_den = 1001"#;
    run_ok(&dir, &pipeline(&dir, "p.toml", &encode_pipeline(Some(36), (160, 96), "rgb8", false, params)), &[]);
    assert_video(&dir.join("clip.mkv"), "h264", (160, 96), "yuv420p", 36, "30000/1001");
    // Without `pix_fmt` ffmpeg keeps all of RGB's chroma, 4:4:4, which players mostly cannot
    // play (the docs say to give yuv420p).
    let text = encode_pipeline(Some(12), (160, 96), "rgb8", false, r#"path = "444.mkv", preset = "ultrafast""#);
    run_ok(&dir, &pipeline(&dir, "p.toml", &text), &[]);
    assert_video(&dir.join("444.mkv"), "h264", (160, 96), "yuv444p", 12, "30/1");
}

#[test]
fn the_shipped_pipeline_makes_a_playable_mp4() {
    if !ffmpeg_tools_for_test("the_shipped_pipeline_makes_a_playable_mp4") {
        return;
    }
    let dir = scratch("encode-shipped");
    let file = repo_root().join("pipelines/encode-mp4.toml");
    run_ok(&dir, &file, &["--frames", "30"]);
    assert_video(&dir.join("out/encode-mp4.mp4"), "h264", (640, 360), "yuv420p", 30, "30/1");
}

#[test]
fn a_drained_run_ends_in_a_complete_file_with_every_frame_made() {
    if !ffmpeg_tools_for_test("a_drained_run_ends_in_a_complete_file_with_every_frame_made") {
        return;
    }
    let dir = scratch("encode-drain");
    // No frame count: the run goes on until the signal. MP4's index is written last, so the
    // file only plays if ffmpeg was let finish.
    let text = encode_pipeline(None, (128, 96), "rgb8", true, r#"path = "live.mp4", preset = "ultrafast""#);
    let file = pipeline(&dir, "p.toml", &text);
    let host = start_running(&dir, &file, &["--report", "report.json"]);
    wait_until(RUN_TIMEOUT, "frames encoded", || std::fs::metadata(dir.join("live.mp4")).is_ok_and(|m| m.len() > 0));
    host.signal(Signal::INT);
    let run = host.finish(RUN_TIMEOUT);
    assert!(run.status.success(), "{}", run.output());
    assert!(run.stdout.contains("run 'encode' stopped by a stop signal and drained"), "{}", run.output());
    assert_nothing_left(run.pid);
    let made = report(&dir)["stages"][0]["frames"].as_u64().unwrap();
    assert!(made > 0);
    assert_video(&dir.join("live.mp4"), "h264", (128, 96), "yuv420p", made, "30/1");
}

#[test]
fn ffmpeg_refusing_the_codec_fails_the_run_in_its_own_words() {
    if !ffmpeg_tools_for_test("ffmpeg_refusing_the_codec_fails_the_run_in_its_own_words") {
        return;
    }
    for (mode, extra) in [("multi", None), ("inproc", Some("--in-process"))] {
        let dir = scratch(&format!("encode-bad-codec-{mode}"));
        let out = dir.join("never.mp4");
        let params = format!("path = {:?}, codec = \"nope\"", out.to_str().unwrap());
        let file = pipeline(&dir, "p.toml", &encode_pipeline(Some(40), (320, 240), "rgb8", true, &params));
        let run = run_file(&dir, &file, extra.as_slice());
        assert_eq!(run.status.code(), Some(1), "{mode}: {}", run.output());
        // The frame it fails at depends on how much the pipe took before ffmpeg gave up.
        let line = run.stdout.lines().find(|l| l.starts_with("run 'encode' failed: ")).unwrap_or_default();
        let quoted = format!("ffmpeg (encoding to {}) exited with code 1: Unknown encoder 'nope'", out.display());
        assert!(line.starts_with("run 'encode' failed: stage 'enc' "), "{mode}:\n{}", run.output());
        assert!(line.ends_with(&quoted), "{mode}: expected `{quoted}`:\n{}", run.output());
        assert!(!run.output().contains("Broken pipe"), "{mode}: {}", run.output());
        assert_nothing_left(run.pid);
        // A stage's ffmpeg carries its environment, so `assert_nothing_left` counts it too;
        // in one process it does not: look for one writing the output.
        let marker = out.display().to_string();
        let ffmpegs: Vec<_> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect();
        assert!(ffmpegs.is_empty(), "{mode}: ffmpeg left behind: {ffmpegs:?}");
    }
}

#[test]
fn validate_names_a_missing_ffmpeg() {
    // No ffmpeg needed: the program is looked for, not run.
    let dir = scratch("encode-no-ffmpeg");
    let text =
        encode_pipeline(Some(2), (64, 48), "rgb8", false, r#"path = "x.mp4", ffmpeg = "/nonexistent/bin/ffmpeg""#);
    let file = pipeline(&dir, "p.toml", &text);
    let run = run(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2), "{}", run.output());
    assert!(run.output().contains("param `ffmpeg`: cannot run /nonexistent/bin/ffmpeg"), "{}", run.output());
    assert!(!dir.join("x.mp4").exists());
}
