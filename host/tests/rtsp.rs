//! The `rtsp` source against a real RTSP server: GStreamer's, started by
//! `scripts/rtsp-test-server.py` (x264 with fixed settings, the test pattern from frame 0 for
//! each client, what each client was sent also written to a file). Frames decoded from the
//! stream equal ffmpeg's decode of what the server sent; a server killed and started again, and
//! a stalled stream, are ridden out (the run goes on, numbers keep rising, what was lost is
//! counted); a wrong password is refused naming the stage; credentials never show.
//!
//! Every test needs the server (Debian: gir1.2-gst-rtsp-server-1.0, python3-gi,
//! gstreamer1.0-plugins-ugly) and ffmpeg: without them it says it is skipped and returns, unless
//! `GPUIPC_REQUIRE_RTSP=1` (CI), where that fails it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::rtsp_server::RtspServer;
use common::*;

const REQUIRE_RTSP_ENV: &str = "GPUIPC_REQUIRE_RTSP";
const PASSWORD: &str = "hunter2-secret";
const WAIT: Duration = Duration::from_secs(60);

/// The Python that has GStreamer's RTSP server bindings: `$GPUIPC_RTSP_PYTHON`, Debian's, or
/// the first `python3` on PATH.
fn python() -> Option<String> {
    let candidates =
        [std::env::var("GPUIPC_RTSP_PYTHON").ok(), Some("/usr/bin/python3".into()), Some("python3".into())];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args([
                "-c",
                "import gi; gi.require_version('GstRtspServer', '1.0'); from gi.repository import GstRtspServer",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

fn server_for_test(test: &str) -> Option<String> {
    let python = python();
    let ffmpeg = ffmpeg_tools_for_test(test);
    match python {
        Some(p) if ffmpeg => Some(p),
        Some(_) => None,
        None if std::env::var(REQUIRE_RTSP_ENV).is_ok_and(|v| v == "1") => {
            panic!(
                "{REQUIRE_RTSP_ENV}=1 but GStreamer's RTSP server does not load (install gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-ugly)"
            )
        }
        None => {
            eprintln!(
                "skipped {test}: GStreamer's RTSP server is not installed ({REQUIRE_RTSP_ENV}=1 makes this a failure)"
            );
            None
        }
    }
}

/// GStreamer's test server on `port` (0: any), what it sends each client written under `dir`.
fn gst_server(python: &str, dir: &Path, port: u16, extra: &[&str]) -> RtspServer {
    let mut command = Command::new(python);
    command
        .arg(repo_root().join("scripts/rtsp-test-server.py"))
        .args(["--port", &port.to_string(), "--record", &dir.to_string_lossy()])
        .args(extra);
    RtspServer::start(command)
}

fn camera_pipeline(dir: &Path, name: &str, frames: u64, params: &str) -> PathBuf {
    pipeline(
        dir,
        name,
        &format!(
            r#"[pipeline]
name = "{name}"
frames = {frames}
device = "cpu"

[[stage]]
name = "cam"
plugin = "rtsp"
params = {{ {params} }}

[[stage]]
name = "sink"
plugin = "null"
inputs = ["cam"]
"#
        ),
    )
}

/// The largest recording in `dir`: the stream the stage played (a plan-time DESCRIBE makes a
/// short one too).
fn recording(dir: &Path) -> PathBuf {
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "h264"))
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    files.sort();
    files.pop().expect("the server recorded a stream").1
}

/// ffmpeg's decode of `file` into nv12 frames of `w`x`h`, one xxh3 hash each.
fn ffmpeg_hashes(file: &Path, (w, h): (usize, usize)) -> Vec<String> {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-i"])
        .arg(file)
        .args(["-f", "rawvideo", "-pix_fmt", "nv12", "-"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let frame = w * h * 3 / 2;
    out.stdout.chunks(frame).map(|f| format!("{:016x}", xxhash_rust::xxh3::xxh3_64(f))).collect()
}

/// Wait until the camera stage has handed on `n` frames (its `--checksums` file, written as each
/// frame is published).
fn wait_for_frames(dir: &Path, n: usize) {
    let sums = dir.join("sums/cam.sum");
    wait_until(WAIT, "frames from the camera", || {
        std::fs::read_to_string(&sums).is_ok_and(|s| s.lines().filter(|l| !l.starts_with('#')).count() >= n)
    });
}

fn no_credentials(done: &Finished, dir: &Path) {
    assert!(!done.output().contains(PASSWORD), "the password shows:\n{}", done.output());
    if let Ok(report) = std::fs::read_to_string(dir.join("report.json")) {
        assert!(!report.contains(PASSWORD), "the password is in the report");
    }
}

#[test]
fn frames_equal_ffmpegs_decode_of_what_the_server_sent() {
    let Some(python) = server_for_test("frames_equal_ffmpegs_decode_of_what_the_server_sent") else { return };
    let dir = scratch("rtsp-equal");
    let server = gst_server(&python, &dir, 0, &["--frames", "120", "--size", "320x240"]);
    let url = server.url(&format!("viewer:{PASSWORD}@"));
    let p = camera_pipeline(&dir, "equal", 60, &format!("url = \"{url}\""));
    let done = run_ok(&dir, &p, &SUMS_AND_REPORT);
    no_credentials(&done, &dir);
    let ours: Vec<(u64, String)> = sum_lines(&dir.join("sums/cam.sum"));
    assert_eq!(ours.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (0..60).collect::<Vec<_>>(), "{}", done.output());
    let theirs = ffmpeg_hashes(&recording(&dir), (320, 240));
    assert!(theirs.len() >= 60, "the recording holds {} frames", theirs.len());
    let ours: Vec<String> = ours.into_iter().map(|(_, h)| h).collect();
    assert_eq!(ours, theirs[..60], "decoded frames differ from ffmpeg's decode of the recording");
}

/// The numbers of the frames the camera stage made: they rise, skip the frames missed while the
/// stream was away (some frames come after the gap), and end at the run's `frames`; the stage's
/// `dropped` in the report counts the numbers skipped.
fn rising_across_a_gap(dir: &Path, frames: u64) -> Vec<u64> {
    let seqs: Vec<u64> = sum_lines(&dir.join("sums/cam.sum")).into_iter().map(|(s, _)| s).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "numbers do not rise: {seqs:?}");
    let gap = seqs.windows(2).position(|w| w[1] > w[0] + 1);
    let gap = gap.unwrap_or_else(|| panic!("numbers skip the frames lost: {seqs:?}"));
    assert!(gap + 2 < seqs.len(), "frames came after the gap: {seqs:?}");
    assert_eq!(*seqs.last().unwrap(), frames - 1, "{seqs:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let cam = report["stages"].as_array().unwrap().iter().find(|s| s["name"] == "cam").unwrap().clone();
    assert_eq!(cam["dropped"].as_u64().unwrap(), frames - seqs.len() as u64, "{cam}");
    seqs
}

/// The stage's stall watchdog is on (1 s) and the server stays away for longer: the source's
/// `process` returning with no frame while it connects again keeps the watchdog off it.
#[test]
fn a_server_killed_and_started_again_is_ridden_out() {
    let Some(python) = server_for_test("a_server_killed_and_started_again_is_ridden_out") else { return };
    let dir = scratch("rtsp-restart");
    let server = gst_server(&python, &dir, 0, &[]);
    let port = server.port;
    let url = server.url(&format!("viewer:{PASSWORD}@"));
    let p = camera_pipeline(&dir, "restart", 90, &format!("url = \"{url}\", reconnect = 0.2, reconnect_max = 0.5"));
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("plugin = \"rtsp\"\n", "plugin = \"rtsp\"\nstall_timeout = \"1s\"\n");
    std::fs::write(&p, text).unwrap();
    let p = p.to_string_lossy().to_string();
    let mut all = vec!["run", &p];
    all.extend_from_slice(&SUMS_AND_REPORT);
    let mut run = start(&dir, &all);
    // The probe's DESCRIBE is client 0, the stage's stream client 1.
    server.wait_for("client 1");
    wait_for_frames(&dir, 10);
    drop(server);
    // Five tries to connect: the waits between them (0.2, 0.4, 0.5, 0.5 s) make the outage
    // longer than the stall timeout.
    for _ in 0..5 {
        run.wait_for_stderr("connecting again", WAIT);
    }
    let again = gst_server(&python, &dir, port, &[]);
    again.wait_for("client");
    let done = run.finish(WAIT);
    assert!(done.status.success(), "{}", done.output());
    assert_nothing_left(done.pid);
    assert!(done.stderr.contains("connected again"), "{}", done.output());
    assert!(!done.output().contains("watchdog"), "{}", done.output());
    no_credentials(&done, &dir);
    rising_across_a_gap(&dir, 90);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let cam = report["stages"].as_array().unwrap().iter().find(|s| s["name"] == "cam").unwrap().clone();
    assert_eq!(cam["restarts"].as_u64(), Some(0), "{cam}");
}

#[test]
fn a_stalled_stream_is_caught_and_connected_again() {
    let Some(python) = server_for_test("a_stalled_stream_is_caught_and_connected_again") else { return };
    let dir = scratch("rtsp-stall");
    let server = gst_server(&python, &dir, 0, &[]);
    let url = server.url("");
    let p = camera_pipeline(&dir, "stall", 90, &format!("url = \"{url}\", timeout = 1.0, reconnect = 0.2"));
    let p = p.to_string_lossy().to_string();
    let mut all = vec!["run", &p];
    all.extend_from_slice(&SUMS_AND_REPORT);
    let mut run = start(&dir, &all);
    server.wait_for("client 1");
    wait_for_frames(&dir, 10);
    server.signal(rustix::process::Signal::USR1);
    server.wait_for("paused");
    run.wait_for_stderr("stalled", WAIT);
    let done = run.finish(WAIT);
    assert!(done.status.success(), "{}", done.output());
    assert_nothing_left(done.pid);
    assert!(done.stderr.contains("the stream stalled: no packet for 1.0 s"), "{}", done.output());
    assert!(done.stderr.contains("connected again"), "{}", done.output());
    rising_across_a_gap(&dir, 90);
}

#[test]
fn a_wrong_password_is_refused_naming_the_stage() {
    let Some(python) = server_for_test("a_wrong_password_is_refused_naming_the_stage") else { return };
    let dir = scratch("rtsp-401");
    let server = gst_server(&python, &dir, 0, &["--user", "viewer", "--password", "right"]);
    let url = server.url(&format!("viewer:{PASSWORD}@"));
    let p = camera_pipeline(&dir, "denied", 10, &format!("url = \"{url}\""));
    let done = run_file(&dir, &p, &[]);
    assert_ne!(done.status.code(), Some(0), "{}", done.output());
    let said = done.output();
    assert!(said.contains("'cam'") || said.contains("stage cam") || said.contains("`cam`"), "{said}");
    assert!(said.contains("401"), "{said}");
    assert!(said.contains(&format!("rtsp://127.0.0.1:{}/cam0", server.port)), "{said}");
    no_credentials(&done, &dir);
    assert_nothing_left(done.pid);
    // The right password plays.
    let p = camera_pipeline(&dir, "allowed", 10, &format!("url = \"{}\"", server.url("viewer:right@")));
    run_ok(&dir, &p, &[]);
}

#[test]
fn a_bad_url_is_refused_at_validate() {
    let dir = scratch("rtsp-bad-url");
    let p = camera_pipeline(&dir, "bad", 10, &format!("url = \"http://viewer:{PASSWORD}@cam/x\""));
    let done = run(&dir, &["validate", &p.to_string_lossy()]);
    assert_ne!(done.status.code(), Some(0), "{}", done.output());
    let said = done.output();
    assert!(said.contains("cam") && said.contains("http://***@cam/x") && said.contains("rtsp://"), "{said}");
    assert!(!said.contains(PASSWORD), "{said}");
}

#[test]
fn the_camera_pipeline_runs_against_the_test_server() {
    let Some(python) = server_for_test("the_camera_pipeline_runs_against_the_test_server") else { return };
    let dir = scratch("rtsp-pipeline");
    let server = gst_server(&python, &dir, 0, &["--user", "viewer", "--password", PASSWORD]);
    let text = std::fs::read_to_string(repo_root().join("pipelines/cameras/rtsp-camera.toml")).unwrap();
    let text = text.replace("rtsp://camera.local:554/stream1", &server.url(""));
    let p = pipeline(&dir, "rtsp-camera", &text);
    let p = p.to_string_lossy();
    let mut args = vec!["run", &p, "--frames", "20", "--device", "cpu"];
    args.extend_from_slice(&SUMS_AND_REPORT);
    let env = format!("CAM_PASSWORD={PASSWORD}");
    let done = start_wrapped(&dir, &["env", &env], &args, Stdio::null()).finish(WAIT);
    let said = done.output();
    assert!(done.status.success(), "{said}");
    assert_nothing_left(done.pid);
    assert!(!said.contains(PASSWORD), "{said}");
    let made = sum_lines(&dir.join("sums/show.sum"));
    assert!(!made.is_empty() && made.windows(2).all(|w| w[0].0 < w[1].0), "{made:?}");
}
