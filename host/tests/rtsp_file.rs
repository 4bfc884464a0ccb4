//! The `rtsp` source against `scripts/rtsp-file-server.py`, the pure-Python RTSP server (no
//! GStreamer) that the benchmark and the GPU check use: an H.264 and an HEVC file made here
//! with ffmpeg, served looped at 30 frames/s, over TCP and UDP. The frames the cpu domain
//! decodes from the stream equal ffmpeg's decode of the file, frame for frame across the loop;
//! a wrong password is refused (401); the sender reports' clock reaches the frames' stamps with
//! `clock = "sender"`; the camera is asked to PLAY only once the whole pipeline has started.
//!
//! Needs `python3` (its standard library only) and ffmpeg: without ffmpeg each test says it is
//! skipped and returns, unless `GPUIPC_REQUIRE_FFMPEG=1`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::rtsp_server::RtspServer;
use common::*;

const WAIT: Duration = Duration::from_secs(60);
const SIZE: (usize, usize) = (320, 240);
/// Frames in each file: the runs take more, so the stream loops.
const FILE_FRAMES: usize = 20;

/// The pure-Python server looping `file`.
fn file_server(file: &Path, extra: &[&str]) -> RtspServer {
    let mut command = Command::new("python3");
    command.arg(repo_root().join("scripts/rtsp-file-server.py")).arg(file).args(extra);
    RtspServer::start(command)
}

/// An Annex B file of `FILE_FRAMES` frames without B-frames, a key frame every 10.
fn make_file(dir: &Path, codec: &str) -> PathBuf {
    let (name, args): (&str, &[&str]) = match codec {
        "h264" => ("clip.h264", &["-c:v", "libx264", "-bf", "0", "-g", "10", "-f", "h264"]),
        _ => (
            "clip.hevc",
            &[
                "-c:v",
                "libx265",
                "-preset",
                "ultrafast",
                "-x265-params",
                "log-level=error:bframes=0:keyint=10",
                "-f",
                "hevc",
            ],
        ),
    };
    let path = dir.join(name);
    let size = format!("testsrc2=size={}x{}:rate=30", SIZE.0, SIZE.1);
    let status = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-f", "lavfi", "-i", &size])
        .args(["-frames:v", &FILE_FRAMES.to_string(), "-pix_fmt", "yuv420p"])
        .args(args)
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    path
}

/// ffmpeg's decode of `file` into nv12 frames, one xxh3 hash each.
fn ffmpeg_hashes(file: &Path) -> Vec<String> {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-i"])
        .arg(file)
        .args(["-f", "rawvideo", "-pix_fmt", "nv12", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = SIZE.0 * SIZE.1 * 3 / 2;
    out.stdout.chunks(frame).map(|f| format!("{:016x}", xxhash_rust::xxh3::xxh3_64(f))).collect()
}

fn camera_pipeline(dir: &Path, name: &str, frames: u64, params: &str) -> PathBuf {
    pipeline(
        dir,
        name,
        &format!(
            "[pipeline]\nname = \"{name}\"\nframes = {frames}\ndevice = \"cpu\"\n\n\
             [[stage]]\nname = \"cam\"\nplugin = \"rtsp\"\nparams = {{ {params} }}\n\n\
             [[stage]]\nname = \"sink\"\nplugin = \"null\"\ninputs = [\"cam\"]\n"
        ),
    )
}

/// Served over `transport`, `frames` frames (more than the file's: the stream loops) equal
/// ffmpeg's decode of the file, numbered from 0 without a gap.
fn frames_equal_the_files(test: &str, codec: &str, transport: &str) {
    if !ffmpeg_tools_for_test(test) {
        return;
    }
    let dir = scratch(&format!("rtsp-file-{codec}-{transport}"));
    let file = make_file(&dir, codec);
    let server = file_server(&file, &["--user", "viewer", "--password", "right"]);
    let frames = FILE_FRAMES as u64 * 3 / 2;
    let params = format!("url = \"{}\", transport = \"{transport}\"", server.url("viewer:right@"));
    let p = camera_pipeline(&dir, "equal", frames, &params);
    let done = run_ok(&dir, &p, &SUMS_AND_REPORT);
    assert_nothing_left(done.pid);
    let ours = sum_lines(&dir.join("sums/cam.sum"));
    let seqs: Vec<u64> = ours.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (0..frames).collect::<Vec<_>>(), "{}", done.output());
    let theirs = ffmpeg_hashes(&file);
    assert_eq!(theirs.len(), FILE_FRAMES);
    for (seq, hash) in &ours {
        assert_eq!(hash, &theirs[*seq as usize % FILE_FRAMES], "frame {seq} differs from ffmpeg's decode of the file");
    }
}

#[test]
fn h264_over_tcp_equals_ffmpegs_decode_of_the_file() {
    frames_equal_the_files("h264_over_tcp_equals_ffmpegs_decode_of_the_file", "h264", "tcp");
}

#[test]
fn hevc_over_udp_equals_ffmpegs_decode_of_the_file() {
    frames_equal_the_files("hevc_over_udp_equals_ffmpegs_decode_of_the_file", "h265", "udp");
}

#[test]
fn hevc_over_tcp_equals_ffmpegs_decode_of_the_file() {
    frames_equal_the_files("hevc_over_tcp_equals_ffmpegs_decode_of_the_file", "h265", "tcp");
}

#[test]
fn a_wrong_password_is_refused_with_401() {
    if !ffmpeg_tools_for_test("a_wrong_password_is_refused_with_401") {
        return;
    }
    let dir = scratch("rtsp-file-401");
    let file = make_file(&dir, "h264");
    let server = file_server(&file, &["--user", "viewer", "--password", "right"]);
    let p = camera_pipeline(&dir, "denied", 10, &format!("url = \"{}\"", server.url("viewer:wrong@")));
    let done = run(&dir, &["validate", &p.to_string_lossy()]);
    assert_ne!(done.status.code(), Some(0), "{}", done.output());
    assert!(done.output().contains("401"), "{}", done.output());
    assert!(!done.output().contains("wrong"), "{}", done.output());
}

/// The server's sender reports say its clock is an hour behind the machine's: with
/// `clock = "sender"` the frames are stamped on that clock, so their latency from the stamp
/// lands in the histogram's last bucket (over 10 s); with `clock = "arrival"` it does not.
#[test]
fn sender_reports_stamp_the_frames_with_clock_sender() {
    if !ffmpeg_tools_for_test("sender_reports_stamp_the_frames_with_clock_sender") {
        return;
    }
    let dir = scratch("rtsp-file-sender");
    let file = make_file(&dir, "h264");
    let server = file_server(&file, &["--clock-offset", "-3600"]);
    let p50 = |clock: &str| {
        let p = camera_pipeline(&dir, clock, 15, &format!("url = \"{}\", clock = \"{clock}\"", server.url("")));
        let done = run_ok(&dir, &p, &SUMS_AND_REPORT);
        assert_nothing_left(done.pid);
        stage_row(&report(&dir), "cam")["latency"]["p50_ms"].as_f64().unwrap()
    };
    assert_eq!(p50("sender"), 10_000.0, "the latency's highest bucket bound: stamped an hour back");
    assert!(p50("arrival") < 10_000.0);
}

/// With `width` and `height` the pipeline is planned without the camera (nothing listens at
/// `validate`); when the stream comes, another size, or another codec than `codec`, is refused
/// naming both.
#[test]
fn width_and_height_plan_without_the_camera_and_are_checked_when_it_comes() {
    if !ffmpeg_tools_for_test("width_and_height_plan_without_the_camera_and_are_checked_when_it_comes") {
        return;
    }
    let dir = scratch("rtsp-file-planned");
    let nobody = free_ports(1);
    let p = camera_pipeline(
        &dir,
        "planned",
        10,
        &format!("url = \"rtsp://127.0.0.1:{nobody}/cam0\", width = 320, height = 240"),
    );
    let done = run(&dir, &["validate", &p.to_string_lossy()]);
    assert_eq!(done.status.code(), Some(0), "{}", done.output());
    assert!(done.output().contains("planned as H.264 or HEVC, 320x240"), "{}", done.output());
    let file = make_file(&dir, "h264");
    let server = file_server(&file, &[]);
    let url = server.url("");
    let p = camera_pipeline(&dir, "size", 10, &format!("url = \"{url}\", width = 640, height = 480"));
    let done = run_file(&dir, &p, &[]);
    assert_ne!(done.status.code(), Some(0), "{}", done.output());
    let said = "sends H.264 320x240 video (nv12 320x240), but the pipeline was planned for nv12 640x480 (params `width` and `height`)";
    assert!(done.output().contains(said), "{}", done.output());
    assert_nothing_left(done.pid);
    let p =
        camera_pipeline(&dir, "codec", 10, &format!("url = \"{url}\", width = 320, height = 240, codec = \"hevc\""));
    let done = run_file(&dir, &p, &[]);
    assert_ne!(done.status.code(), Some(0), "{}", done.output());
    assert!(done.output().contains("sends H.264 video, but param `codec` says HEVC"), "{}", done.output());
    let p =
        camera_pipeline(&dir, "right", 10, &format!("url = \"{url}\", width = 320, height = 240, codec = \"h264\""));
    run_ok(&dir, &p, &[]);
}

/// The camera sends nothing while the pipeline starts: the rtsp stage is set up (its create has
/// returned: DESCRIBE, SETUP, its decoder started) while the stage after it is held in its
/// create (`test-faulty`'s `gate`, a FIFO this test holds), and the server has had no PLAY; once
/// the gate opens and the pipeline starts, it has one, and the frames are numbered from 0 with
/// none dropped: none queued while the pipeline could not take them.
///
/// No sleep: the server says `client K` when a PLAY comes, before it sends a frame, and
/// `paused` when it gets SIGUSR1; its lines are in order, so the lines before `paused`, asked
/// for once the stage is set up, hold every PLAY that came before.
#[test]
fn the_camera_plays_only_once_the_pipeline_has_started() {
    if !ffmpeg_tools_for_test("the_camera_plays_only_once_the_pipeline_has_started") {
        return;
    }
    let dir = scratch("rtsp-file-start");
    let file = make_file(&dir, "h264");
    let server = file_server(&file, &[]);
    let gate = dir.join("gate");
    let made = Command::new("mkfifo").arg(&gate).status().unwrap();
    assert!(made.success());
    let frames = 15;
    let p = pipeline(
        &dir,
        "start",
        &format!(
            "[pipeline]\nname = \"start\"\nframes = {frames}\ndevice = \"cpu\"\n\n\
             [[stage]]\nname = \"cam\"\nplugin = \"rtsp\"\nparams = {{ url = \"{}\", queue = 2 }}\n\n\
             [[stage]]\nname = \"gate\"\nplugin = \"test-faulty\"\ninputs = [\"cam\"]\n\
             params = {{ sink = true, gate = \"{}\" }}\n",
            server.url(""),
            gate.display()
        ),
    );
    let p = p.to_string_lossy().to_string();
    let mut all = vec!["run", &p];
    all.extend_from_slice(&SUMS_AND_REPORT);
    let mut run = start(&dir, &all);
    run.wait_for_stderr("PLAY when the pipeline starts", WAIT);
    server.signal(rustix::process::Signal::USR1);
    let before = server.lines_until("paused");
    assert!(!before.iter().any(|l| l.starts_with("client")), "a PLAY came before the pipeline started: {before:?}");
    server.signal(rustix::process::Signal::USR2);
    server.lines_until("resumed");
    // Open the gate: the writer's end opened and closed.
    drop(std::fs::OpenOptions::new().write(true).open(&gate).unwrap());
    server.lines_until("client 0");
    let done = run.finish(WAIT);
    assert!(done.status.success(), "{}", done.output());
    assert_nothing_left(done.pid);
    let seqs: Vec<u64> = sum_lines(&dir.join("sums/cam.sum")).into_iter().map(|(s, _)| s).collect();
    assert_eq!(seqs, (0..frames).collect::<Vec<_>>(), "{}", done.output());
    assert_eq!(stage_row(&report(&dir), "cam")["dropped"].as_u64(), Some(0), "{}", done.output());
}
