//! Sources that end their own stream, and a source reading the host's standard input: the
//! `y4m` source as real stage processes and in-process, on files the `y4m` sink wrote.
//!
//! Every frame read back is checked against the hash of the frame the first run wrote
//! (`run --checksums`), so a lost, repeated or misplaced frame shows.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::*;

/// Frames in the file the tests read.
const FRAMES: u64 = 7;

/// generator (odd size) -> yuv420 (i420) -> y4m sink: `dir/in.y4m` of [`FRAMES`] frames; the
/// hash of each frame, by `seq`.
fn write_video(dir: &Path) -> Vec<String> {
    let text = format!(
        r#"
[pipeline]
name = "write"
frames = {FRAMES}
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = 37, height = 23, pattern = "noise" }}
[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
[[stage]]
name = "file"
plugin = "y4m"
inputs = ["yuv"]
params = {{ path = "in.y4m", fps = 25 }}
"#
    );
    let file = pipeline(dir, "write.toml", &text);
    let run = run_file(dir, &file, &["--checksums", "written"]);
    assert!(run.status.success(), "{}", run.output());
    let lines = sum_lines(&dir.join("written/yuv.sum"));
    assert_eq!(lines.iter().map(|l| l.0).collect::<Vec<_>>(), (0..FRAMES).collect::<Vec<_>>());
    lines.into_iter().map(|(_, hash)| hash).collect()
}

/// y4m source (`params`) -> checksum sink, with no `frames`: the pipeline file in `dir`.
fn reader(dir: &Path, params: &str) -> PathBuf {
    let text = format!(
        r#"
[pipeline]
name = "read"
[[stage]]
name = "video"
plugin = "y4m"
params = {{ {params} }}
[[stage]]
name = "sums"
plugin = "checksum"
inputs = ["video"]
params = {{ path = "read.xxh3" }}
"#
    );
    pipeline(dir, "read.toml", &text)
}

/// The `seq hash` lines the checksum sink wrote, as `--checksums` writes them.
fn read_back(dir: &Path) -> Vec<(u64, String)> {
    sum_lines(&dir.join("read.xxh3"))
}

fn expect_frames(dir: &Path, hashes: &[String], seqs: std::ops::Range<u64>, what: &str) {
    let got = read_back(dir);
    let want: Vec<(u64, String)> = seqs.map(|s| (s, hashes[(s % FRAMES) as usize].clone())).collect();
    assert_eq!(got, want, "{what}");
}

#[test]
fn a_y4m_source_ends_the_run_at_the_end_of_its_file() {
    let dir = scratch("source-ends");
    let hashes = write_video(&dir);
    let file = reader(&dir, r#"path = "in.y4m""#);
    for mode in [None, Some("--in-process")] {
        let mut args = vec!["run", file.to_str().unwrap(), "--quiet", "--report", "report.json"];
        args.extend(mode);
        let run = run(&dir, &args);
        assert!(run.status.success(), "{mode:?}: {}", run.output());
        assert_nothing_left(run.pid);
        expect_frames(&dir, &hashes, 0..FRAMES, &format!("{mode:?}"));
        for stage in report(&dir)["stages"].as_array().unwrap() {
            assert_eq!(stage["frames"].as_u64(), Some(FRAMES), "{mode:?}: {stage}");
            assert_eq!(stage["outcome"].as_str(), Some("finished"), "{mode:?}: {stage}");
        }
    }
    // `--frames` still ends it first.
    let run = run_file(&dir, &file, &["--frames", "3"]);
    assert!(run.status.success(), "{}", run.output());
    expect_frames(&dir, &hashes, 0..3, "--frames 3");
}

#[test]
fn loop_plays_the_file_again_until_frames() {
    let dir = scratch("source-loop");
    let hashes = write_video(&dir);
    let file = reader(&dir, r#"path = "in.y4m", loop = true"#);
    for mode in [None, Some("--in-process")] {
        let mut args = vec!["run", file.to_str().unwrap(), "--quiet", "--frames", "17"];
        args.extend(mode);
        let run = run(&dir, &args);
        assert!(run.status.success(), "{mode:?}: {}", run.output());
        assert_nothing_left(run.pid);
        expect_frames(&dir, &hashes, 0..17, &format!("loop, {mode:?}"));
    }
}

#[test]
fn standard_input_feeds_a_source_stage() {
    let dir = scratch("source-stdin");
    let hashes = write_video(&dir);
    let file = reader(&dir, r#"path = "-""#);
    let file = file.to_str().unwrap();
    let video = dir.join("in.y4m");
    // Redirected from the file: the host reads the header, the stage the frames after it.
    for mode in [None, Some("--in-process")] {
        let mut args = vec!["run", file, "--quiet"];
        args.extend(mode);
        let stdin = Stdio::from(std::fs::File::open(&video).unwrap());
        let run = start_with_stdin(&dir, &args, stdin).finish(RUN_TIMEOUT);
        assert!(run.status.success(), "{mode:?}: {}", run.output());
        assert_nothing_left(run.pid);
        expect_frames(&dir, &hashes, 0..FRAMES, &format!("file on stdin, {mode:?}"));
    }
    // Through a pipe, as from ffmpeg.
    let mut cat = std::process::Command::new("cat").arg(&video).stdout(Stdio::piped()).spawn().unwrap();
    let stdin = Stdio::from(cat.stdout.take().unwrap());
    let run = start_with_stdin(&dir, &["run", file, "--quiet"], stdin).finish(RUN_TIMEOUT);
    assert!(cat.wait().unwrap().success());
    assert!(run.status.success(), "{}", run.output());
    assert_nothing_left(run.pid);
    expect_frames(&dir, &hashes, 0..FRAMES, "a pipe on stdin");
    // `validate` reads the header too, and says what it found.
    let stdin = Stdio::from(std::fs::File::open(&video).unwrap());
    let v = start_with_stdin(&dir, &["validate", file], stdin).finish(RUN_TIMEOUT);
    assert!(v.status.success(), "{}", v.output());
    assert!(v.stdout.contains("i420 37x23"), "{}", v.stdout);
    // Nothing on stdin: an error at validation, naming standard input.
    let v = run_stdin_null(&dir, &["run", file, "--quiet"]);
    assert_eq!(v.status.code(), Some(2), "{}", v.output());
    assert!(v.stderr.contains("stage 'video': standard input is empty; expected a YUV4MPEG2 stream"), "{}", v.output());
    // `loop` cannot replay standard input.
    let file = reader(&dir, r#"path = "-", loop = true"#);
    let v = run_stdin_null(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(2), "{}", v.output());
    assert!(
        v.stderr.contains("param `loop` needs a file: standard input (path = \"-\") cannot be read again"),
        "{}",
        v.output()
    );
}

fn run_stdin_null(dir: &Path, args: &[&str]) -> Finished {
    start_with_stdin(dir, args, Stdio::null()).finish(RUN_TIMEOUT)
}

#[test]
fn a_truncated_file_fails_naming_the_frame_and_other_chroma_is_refused() {
    let dir = scratch("source-truncated");
    write_video(&dir);
    let video = dir.join("in.y4m");
    let mut bytes = std::fs::read(&video).unwrap();
    bytes.truncate(bytes.len() - 100);
    std::fs::write(&video, &bytes).unwrap();
    let file = reader(&dir, r#"path = "in.y4m""#);
    let run = run_file(&dir, &file, &[]);
    assert_eq!(run.status.code(), Some(1), "{}", run.output());
    assert_nothing_left(run.pid);
    // 37x23 i420: 851 + 2 * 19 * 12 = 1307 bytes a frame.
    let want = "in.y4m: frame 6 is truncated: the stream ends after 1207 of its 1307 bytes";
    assert!(run.output().contains(want), "{}", run.output());

    let header = b"YUV4MPEG2 W4 H4 F25:1 Ip A1:1 C444\nFRAME\n";
    std::fs::write(&video, header).unwrap();
    let v = run_stdin_null(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(v.status.code(), Some(2), "{}", v.output());
    assert!(v.stderr.contains("in.y4m: the stream is C444; the y4m source reads 8-bit 4:2:0 only"), "{}", v.output());
}
