//! The encode stage's tests: params and their checks, then the stage driven against small
//! shell scripts standing in for ffmpeg (what it is given, how its failures come back), then
//! against the real ffmpeg where it is installed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples, temp_path};
use gpuipc_plugin_api::{FrameLayout, parse_params};

use super::*;

/// Set to 1 where ffmpeg must be there (CI): the tests on the real ffmpeg then fail without it.
const REQUIRE_ENV: &str = "GPUIPC_REQUIRE_FFMPEG";

fn params(text: &str) -> Params {
    parse_params::<Encode>(text).unwrap()
}

fn problems(text: &str) -> String {
    params(text).validate().unwrap_err().message().to_owned()
}

#[test]
fn declared_params_match_the_params_type_and_the_docs() {
    gpuipc_plugin_api::param_check::assert_declared::<Encode>(include_str!("../lib.rs"), "path = \"x.mp4\"");
}

#[test]
fn doc_examples_are_valid_params() {
    check_doc_examples(include_str!("../lib.rs"), Encode::INFO.name, |text| {
        let params = parse_params::<Encode>(text).unwrap();
        params.validate().unwrap_or_else(|e| panic!("{text}: {e}"));
    });
}

#[test]
fn the_defaults_are_libx264_at_30_fps_overwriting() {
    let p = params("path = \"out/clip.mp4\"");
    assert_eq!((p.codec.as_str(), p.rate(), p.overwrite), ("libx264", (30, 1), true));
    assert_eq!(
        (&p.format, &p.bitrate, p.crf, &p.preset, &p.pix_fmt, &p.ffmpeg),
        (&None, &None, None, &None, &None, &None)
    );
    assert!(p.options.is_empty());
    assert_eq!(p.output(), Output::File(Path::new("out/clip.mp4")));
}

#[test]
fn bad_params_are_reported_together_each_naming_its_param() {
    let e = problems(
        r#"
        path = "x.mp4"
        codec = ""
        format = " "
        fps = 0
        fps_den = 0
        bitrate = "fast"
        crf = 20
        preset = ""
        pix_fmt = ""
        options = ["-g", ""]
        "#,
    );
    for needle in [
        "param `codec` is empty",
        "param `format` is empty",
        "param `preset` is empty",
        "param `pix_fmt` is empty",
        "param `fps` must be at least 1, got 0",
        "param `fps_den` must be at least 1, got 0",
        "param `bitrate` is \"fast\"; give bits per second",
        "params `bitrate` and `crf` both set the quality",
        "param `options`: item 1 is empty",
    ] {
        assert!(e.contains(needle), "no `{needle}` in: {e}");
    }
    // What serde refuses names the key too.
    for (text, key) in [
        ("codec = \"x\"", "path"),
        ("path = \"x\"\ncrf = -1", "crf"),
        ("path = \"x\"\nfps = 29.97", "fps"),
        ("path = \"x\"\noptions = \"-g 60\"", "options"),
        ("path = \"x\"\nbitrate = 4000000", "bitrate"),
        ("path = \"x\"\nquality = 3", "quality"),
    ] {
        let e = parse_params::<Encode>(text).unwrap_err();
        assert!(e.message().contains(key), "{text}: {e}");
    }
}

#[test]
fn the_path_is_a_file_or_a_url_but_not_standard_output() {
    for path in ["-", "pipe:1", "pipe:"] {
        let e = problems(&format!("path = {path:?}"));
        assert!(e.starts_with(&format!("param `path` is {path:?}, standard output, where gpuipc-host prints")), "{e}");
    }
    let p = params("path = \"srt://0.0.0.0:9000?mode=listener\"\nformat = \"mpegts\"");
    assert_eq!(p.output(), Output::Url("srt://0.0.0.0:9000?mode=listener"));
    p.validate().unwrap();
    let e = problems("path = \"\"");
    assert!(e.starts_with("param `path` is empty"), "{e}");
    let e = problems("path = \"out/\"");
    assert!(e.contains("names a folder"), "{e}");
    let e = problems(&format!("path = {:?}", std::env::temp_dir().display()));
    assert!(e.contains("is a folder"), "{e}");
}

#[test]
fn an_existing_file_is_refused_only_without_overwrite() {
    let path = temp_path("encode", "exists.mp4");
    std::fs::write(&path, b"old").unwrap();
    let text = format!("path = {:?}", path.to_str().unwrap());
    params(&text).validate().unwrap();
    let e = problems(&format!("{text}\noverwrite = false"));
    assert_eq!(
        e,
        format!(
            "param `path`: {} exists and param `overwrite` is false; remove it or leave `overwrite` out",
            path.display()
        )
    );
    std::fs::remove_file(&path).unwrap();
    params(&format!("{text}\noverwrite = false")).validate().unwrap();
}

#[test]
fn check_finds_the_program_or_names_the_param() {
    let format = FrameFormat::new(PixelFormat::I420, 4, 4);
    let p = params("path = \"x.mp4\"\nffmpeg = \"/nonexistent/ffmpeg\"");
    let e = Encode::check(&p, &[format]).unwrap_err();
    assert!(e.message().starts_with("param `ffmpeg`: cannot run /nonexistent/ffmpeg:"), "{e}");
    // Bad params and a missing program in one message.
    let p = params("path = \"x.mp4\"\nfps = 0\nffmpeg = \"no-such-ffmpeg-here\"");
    let e = Encode::check(&p, &[format]).unwrap_err();
    assert!(
        e.message().starts_with(
            "param `fps` must be at least 1, got 0; param `ffmpeg`: `no-such-ffmpeg-here` is not found on PATH"
        ),
        "{e}"
    );
    let p = params("path = \"x.mp4\"\nffmpeg = \"/bin/sh\"");
    Encode::check(&p, &[format]).unwrap();
}

#[test]
fn one_input_of_the_six_formats() {
    let p = params("path = \"x.mp4\"");
    for pixel in PixelFormat::ALL {
        assert_eq!(Encode::negotiate(&p, &[FrameFormat::new(pixel, 4, 4)]).unwrap(), None, "{pixel}");
    }
    let f = FrameFormat::new(PixelFormat::I420, 4, 4);
    assert_eq!(Encode::negotiate(&p, &[f, f]).unwrap_err().message(), "encode takes 1 input, got 2");
    let unknown = FrameFormat { pixel: 999, width: 4, height: 4 };
    let e = Encode::negotiate(&p, &[unknown]).unwrap_err();
    assert!(e.message().starts_with("encode takes i420, nv12, p010, rgb8, rgba8 or gray8 frames; input is"), "{e}");
}

/// An executable shell script standing in for ffmpeg; its path.
fn script(name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = temp_path("encode", name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A stage on `params` and `format`. A script just written may be refused for a moment
/// ("Text file busy": another test's child, between its fork and exec, still holds the file
/// open for writing), so that is tried again.
fn stage(params: &str, format: FrameFormat) -> Result<CpuStage<Encode>> {
    for _ in 0..50 {
        match CpuStage::<Encode>::new(params, &[format]) {
            Err(e) if e.message().contains("Text file busy") => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            other => return other,
        }
    }
    CpuStage::<Encode>::new(params, &[format])
}

/// Packed pixels of frame `seq` of `format`: every sample different from its neighbours
/// (`p010`'s 10-bit samples in the high bits of each little-endian u16, the low 6 zero).
fn frame(format: FrameFormat, seq: u64) -> Vec<u8> {
    let layout = FrameLayout::for_format(format).unwrap();
    if format.pixel_format() == Some(PixelFormat::P010) {
        return (0..layout.pixel_bytes() / 2)
            .flat_map(|i| ((((i * 37 + seq * 101) % 1024) as u16) << 6).to_le_bytes())
            .collect();
    }
    (0..layout.pixel_bytes()).map(|i| (i * 7 + seq * 31) as u8).collect()
}

/// Feed `frames` frames, then flush: the first error, and the frame it came at (`None`:
/// at the flush).
fn feed(stage: &mut CpuStage<Encode>, format: FrameFormat, frames: u64) -> Result<(), (Option<u64>, Error)> {
    for seq in 0..frames {
        stage.process(seq, &[&frame(format, seq)]).map_err(|e| (Some(seq), e))?;
    }
    stage.flush().map_err(|e| (None, e))
}

fn settings(program: &Path, out: &Path, more: &str) -> String {
    format!("path = {:?}\nffmpeg = {:?}\n{more}", out.to_str().unwrap(), program.to_str().unwrap())
}

#[test]
fn ffmpeg_gets_its_arguments_and_every_frame_packed() {
    let dir = temp_path("encode", "fake-run");
    let _ = std::fs::remove_dir_all(&dir);
    let program = script("record.sh", &format!("printf '%s\\n' \"$@\" > {0}/args\ncat > {0}/frames", dir.display()));
    let out = dir.join("made/by/the/stage/clip.mp4");
    // Odd sizes: the chroma planes are 3x2, rows padded in the frames the stage gets.
    let format = FrameFormat::new(PixelFormat::I420, 5, 3);
    let mut s = stage(&settings(&program, &out, "fps = 25\ncrf = 30"), format).unwrap();
    // The stage made the output's folder for ffmpeg, which writes the file.
    assert!(out.parent().unwrap().is_dir());
    feed(&mut s, format, 3).unwrap();
    let args = std::fs::read_to_string(dir.join("args")).unwrap();
    let expected = format!(
        "-hide_banner -nostats -loglevel error -f rawvideo -pix_fmt yuv420p -s 5x3 -framerate 25/1 -i - -c:v libx264 -crf 30 -y {}",
        out.display()
    );
    assert_eq!(args.lines().collect::<Vec<_>>().join(" "), expected);
    let written = std::fs::read(dir.join("frames")).unwrap();
    assert_eq!(written, (0..3).flat_map(|seq| frame(format, seq)).collect::<Vec<u8>>());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_file(&program).unwrap();
}

#[test]
fn ffmpeg_failing_at_the_start_is_reported_in_its_words_not_as_a_broken_pipe() {
    let program = script("refuses.sh", "echo \"Unknown encoder 'nope'\" >&2\nexit 1");
    let out = temp_path("encode", "never.mp4");
    // Frames big enough to fill the pipe: a write fails while the stage runs.
    let format = FrameFormat::new(PixelFormat::Rgb8, 320, 240);
    let mut s = stage(&settings(&program, &out, "codec = \"nope\""), format).unwrap();
    let (at, e) = feed(&mut s, format, 20).unwrap_err();
    assert!(at.is_some(), "the failure waited for the flush");
    assert_eq!(
        e.message(),
        format!("ffmpeg (encoding to {}) exited with code 1: Unknown encoder 'nope'", out.display())
    );
    // Few frames: they all fit in the pipe, and the flush tells.
    let mut s = stage(&settings(&program, &out, ""), FrameFormat::new(PixelFormat::Gray8, 4, 4)).unwrap();
    let (_, e) = feed(&mut s, FrameFormat::new(PixelFormat::Gray8, 4, 4), 2).unwrap_err();
    assert!(e.message().ends_with("exited with code 1: Unknown encoder 'nope'"), "{e}");
    std::fs::remove_file(&program).unwrap();
}

#[test]
fn ffmpeg_failing_at_the_end_fails_the_flush_with_its_message() {
    let program = script(
        "trailer.sh",
        "cat > /dev/null\necho 'av_interleaved_write_frame(): No space left on device' >&2\nexit 1",
    );
    let out = temp_path("encode", "full-disk.mp4");
    let format = FrameFormat::new(PixelFormat::Nv12, 6, 4);
    let mut s = stage(&settings(&program, &out, ""), format).unwrap();
    let (at, e) = feed(&mut s, format, 5).unwrap_err();
    assert_eq!(at, None);
    assert_eq!(
        e.message(),
        format!(
            "ffmpeg (encoding to {}) exited with code 1: av_interleaved_write_frame(): No space left on device",
            out.display()
        )
    );
    std::fs::remove_file(&program).unwrap();
}

#[test]
fn ffmpeg_ending_on_purpose_drops_the_rest_without_failing() {
    // Takes two 64x48 rgba8 frames (12288 bytes each), then exits 0, as `-frames:v 2` would.
    let program = script("two-frames.sh", "head -c 24576 > /dev/null");
    let out = temp_path("encode", "two.mp4");
    let format = FrameFormat::new(PixelFormat::Rgba8, 64, 48);
    let mut s = stage(&settings(&program, &out, ""), format).unwrap();
    feed(&mut s, format, 40).unwrap();
    // Frames written before ffmpeg ended may have waited in the pipe, not taken.
    assert_eq!(s.plugin().written + s.plugin().dropped, 40);
    assert!(s.plugin().written >= 2, "{}", s.plugin().written);
    std::fs::remove_file(&program).unwrap();
}

#[test]
fn a_stage_dropped_before_its_flush_kills_ffmpeg() {
    let pid_file = temp_path("encode", "waits.pid");
    let _ = std::fs::remove_file(&pid_file);
    // `exec`: a grandchild would hold ffmpeg's standard error open after the kill.
    let program =
        script("waits.sh", &format!("echo $$ > {}.tmp && mv {0}.tmp {0}\nexec sleep 600", pid_file.display()));
    let out = temp_path("encode", "dropped.mp4");
    let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
    let s = stage(&settings(&program, &out, ""), format).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file) {
            break text.trim().to_owned();
        }
        assert!(std::time::Instant::now() < deadline, "the stand-in never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    assert!(Path::new("/proc").join(&pid).exists());
    drop(s);
    // Killed and reaped: no process has its pid any more.
    assert!(!Path::new("/proc").join(&pid).exists(), "ffmpeg's stand-in {pid} is still there");
    std::fs::remove_file(&program).unwrap();
    std::fs::remove_file(&pid_file).unwrap();
}

/// Whether the real ffmpeg runs here. Without it: `false` and a line saying the test is
/// skipped, or a panic where `GPUIPC_REQUIRE_FFMPEG=1`.
fn ffmpeg_for_test(test: &str) -> bool {
    let runs = Command::new("ffmpeg")
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs {
        return true;
    }
    if std::env::var(REQUIRE_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_ENV}=1 but ffmpeg does not run (install Debian's ffmpeg package)");
    }
    eprintln!("skipped {test}: ffmpeg is not installed ({REQUIRE_ENV}=1 makes this a failure)");
    false
}

#[test]
fn the_real_ffmpeg_gets_our_exact_pixels_in_every_format() {
    if !ffmpeg_for_test("the_real_ffmpeg_gets_our_exact_pixels_in_every_format") {
        return;
    }
    for pixel in PixelFormat::ALL {
        // Odd sizes: 4:2:0 chroma planes of ceil(w/2) x ceil(h/2), as ffmpeg lays them out.
        // rawvideo stores the frames as given, so decoding gives back what ffmpeg was handed.
        // NUT stores no p010le (it writes it as rgb555le), so those go through ffv1, which
        // keeps 10 bits losslessly, at an even size (swscale's p010le to planar conversion
        // differs at odd sizes).
        let (size, codec) = match pixel {
            PixelFormat::P010 => ((8, 6), "codec = \"ffv1\"\npix_fmt = \"yuv420p10le\""),
            _ => ((7, 5), "codec = \"rawvideo\""),
        };
        let format = FrameFormat::new(pixel, size.0, size.1);
        let out = temp_path("encode", &format!("exact-{pixel}.nut"));
        let mut s = stage(&format!("path = {:?}\nformat = \"nut\"\n{codec}", out.to_str().unwrap()), format).unwrap();
        feed(&mut s, format, 4).unwrap_or_else(|(at, e)| panic!("{pixel} at {at:?}: {e}"));
        let decoded = Command::new("ffmpeg")
            .args(["-v", "error", "-i"])
            .arg(&out)
            .args(["-f", "rawvideo", "-pix_fmt", ffmpeg::pix_fmt(pixel), "-"])
            .output()
            .unwrap();
        assert!(decoded.status.success(), "{pixel}: {}", String::from_utf8_lossy(&decoded.stderr));
        let expected: Vec<u8> = (0..4).flat_map(|seq| frame(format, seq)).collect();
        assert!(decoded.stdout == expected, "{pixel}: ffmpeg decoded other pixels than the stage was given");
        std::fs::remove_file(&out).unwrap();
    }
}

#[test]
fn the_real_ffmpeg_refusing_a_codec_is_quoted() {
    if !ffmpeg_for_test("the_real_ffmpeg_refusing_a_codec_is_quoted") {
        return;
    }
    let out = temp_path("encode", "nope.mp4");
    let format = FrameFormat::new(PixelFormat::I420, 320, 240);
    let mut s = stage(&format!("path = {:?}\ncodec = \"nope\"", out.to_str().unwrap()), format).unwrap();
    let (_, e) = feed(&mut s, format, 30).unwrap_err();
    assert_eq!(
        e.message(),
        format!("ffmpeg (encoding to {}) exited with code 1: Unknown encoder 'nope'", out.display())
    );
    let _ = std::fs::remove_file(&out);
}
