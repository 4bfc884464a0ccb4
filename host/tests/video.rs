//! The `video` source in the cpu domain, against ffmpeg: clips made here by Debian's ffmpeg
//! (H.264 with and without B-frames, in MP4 and as an elementary stream, HEVC 8 and 10 bit,
//! AV1, VP9, odd sizes, one frame), each decoded by a pipeline and by ffmpeg itself to raw
//! `nv12`/`p010le`, frame for frame, byte for byte (through the hashes `--checksums` writes);
//! bad files refused at validate naming the file; damaged data counted; a decoder killed
//! mid-file restarted where it left off; looping.
//!
//! Every test needs ffmpeg and ffprobe: without them it says it is skipped and returns, unless
//! `GPUIPC_REQUIRE_FFMPEG=1` (CI), where that fails it.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// A clip: its file name, the size and rate of ffmpeg's test pattern, its frame count, the
/// encoder's arguments, and the format our source gives for it.
struct Clip {
    name: &'static str,
    size: (u32, u32),
    rate: u32,
    frames: u32,
    encode: &'static str,
    pixel: &'static str,
}

const X265: &str = "-c:v libx265 -preset ultrafast -x265-params log-level=error";

fn corpus() -> Vec<Clip> {
    let clip = |name, size, frames, encode: &'static str, pixel| Clip { name, size, rate: 30, frames, encode, pixel };
    vec![
        clip("h264-bframes.mp4", (642, 362), 24, "-c:v libx264 -bf 3 -pix_fmt yuv420p", "nv12"),
        clip("h264-baseline.mp4", (320, 240), 20, "-c:v libx264 -profile:v baseline -pix_fmt yuv420p", "nv12"),
        clip("h264-main.mov", (352, 288), 16, "-c:v libx264 -profile:v main -bf 2 -pix_fmt yuv420p", "nv12"),
        clip("h264-annexb.h264", (642, 362), 20, "-c:v libx264 -bf 2 -pix_fmt yuv420p -f h264", "nv12"),
        clip(
            "hevc-8bit.mp4",
            (1918, 1078),
            6,
            "-c:v libx265 -preset ultrafast -x265-params log-level=error -pix_fmt yuv420p",
            "nv12",
        ),
        clip(
            "hevc-10bit.mp4",
            (642, 362),
            16,
            "-c:v libx265 -preset ultrafast -x265-params log-level=error -pix_fmt yuv420p10le",
            "p010",
        ),
        clip(
            "hevc-annexb.hevc",
            (320, 240),
            16,
            "-c:v libx265 -preset ultrafast -x265-params log-level=error:bframes=3 -pix_fmt yuv420p -f hevc",
            "nv12",
        ),
        clip(
            "av1.mp4",
            (642, 362),
            10,
            "-c:v libsvtav1 -preset 12 -svtav1-params verbosity=0 -pix_fmt yuv420p",
            "nv12",
        ),
        clip("av1-10bit.mp4", (320, 240), 8, "-c:v libaom-av1 -cpu-used 8 -pix_fmt yuv420p10le", "p010"),
        clip("vp9.mp4", (642, 362), 12, "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -pix_fmt yuv420p", "nv12"),
        clip("one-frame.mp4", (64, 48), 1, "-c:v libx264 -pix_fmt yuv420p", "nv12"),
    ]
}

/// Make `clip` in `dir`.
fn make(dir: &Path, clip: &Clip) -> PathBuf {
    let source = format!("testsrc2=size={}x{}:rate={}", clip.size.0, clip.size.1, clip.rate);
    let frames = clip.frames.to_string();
    let mut args = vec!["-f", "lavfi", "-i", &source, "-frames:v", &frames];
    args.extend(clip.encode.split(' '));
    args.push(clip.name);
    ffmpeg_in(dir, &args);
    dir.join(clip.name)
}

/// ffmpeg's own decode of `file`, as `pixel` frames of `size`: one xxh3 hash per frame (what
/// `--checksums` writes for a frame: its planes packed, padding excluded).
fn ffmpeg_hashes(dir: &Path, file: &Path, pixel: &str, size: (u32, u32)) -> Vec<String> {
    let raw = dir.join("ffmpeg.raw");
    let pix_fmt = if pixel == "p010" { "p010le" } else { "nv12" };
    ffmpeg_in(
        dir,
        &[
            "-i",
            &file.to_string_lossy(),
            "-map",
            "0:v:0",
            "-fps_mode",
            "passthrough",
            "-f",
            "rawvideo",
            "-pix_fmt",
            pix_fmt,
            &raw.to_string_lossy(),
        ],
    );
    let bytes = std::fs::read(&raw).unwrap();
    std::fs::remove_file(&raw).unwrap();
    let sample = if pixel == "p010" { 2 } else { 1 };
    let (w, h) = (size.0 as usize, size.1 as usize);
    let frame = (w * h + 2 * w.div_ceil(2) * h.div_ceil(2)) * sample;
    assert_eq!(
        bytes.len() % frame,
        0,
        "{}: ffmpeg wrote {} bytes, not whole {frame}-byte frames",
        file.display(),
        bytes.len()
    );
    bytes.chunks(frame).map(|f| format!("{:016x}", xxhash_rust::xxh3::xxh3_64(f))).collect()
}

/// A pipeline decoding `path` into a `null` sink, with `params` added to the source's.
fn decode_pipeline(name: &str, path: &Path, params: &str, stage_keys: &str) -> String {
    format!(
        r#"
[pipeline]
name = "{name}"
device = "cpu"

[[stage]]
name = "decode"
plugin = "video"
{stage_keys}
params = {{ path = {path:?}{params} }}

[[stage]]
name = "sink"
plugin = "null"
inputs = ["decode"]
"#,
        path = path.to_string_lossy()
    )
}

/// The hashes of the frames `stage` made, in seq order, checking the seqs run 0, 1, 2, ...
fn hashes(sums: &Path, stage: &str) -> Vec<String> {
    let lines = sum_lines(&sums.join(format!("{stage}.sum")));
    let seqs: Vec<u64> = lines.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs, (0..lines.len() as u64).collect::<Vec<_>>(), "{stage}'s frames are numbered 0, 1, 2, ...");
    lines.into_iter().map(|(_, h)| h).collect()
}

#[test]
fn every_clip_decodes_to_the_bytes_ffmpeg_decodes_it_to() {
    if !ffmpeg_tools_for_test("every_clip_decodes_to_the_bytes_ffmpeg_decodes_it_to") {
        return;
    }
    let dir = scratch("video-corpus");
    for clip in corpus() {
        let file = make(&dir, &clip);
        let want = ffmpeg_hashes(&dir, &file, clip.pixel, clip.size);
        assert_eq!(want.len(), clip.frames as usize, "{}: ffmpeg's own frame count", clip.name);

        let text = decode_pipeline("decode", &file, "", "");
        let p = pipeline(&dir, "decode.toml", &text);
        let validate = run(&dir, &["validate", &p.to_string_lossy()]);
        assert!(validate.status.success(), "{}: {}", clip.name, validate.output());
        let said = format!("{}x{}", clip.size.0, clip.size.1);
        let frames = format!("{} frames", clip.frames);
        for needle in [said.as_str(), frames.as_str(), clip.pixel] {
            assert!(
                validate.stderr.contains(needle) || validate.stdout.contains(needle),
                "{}: validate does not say {needle}:\n{}",
                clip.name,
                validate.output()
            );
        }

        let sums = format!("sums-{}", clip.name);
        let out = run_file(&dir, &p, &["--checksums", &sums]);
        assert!(out.status.success(), "{}: {}", clip.name, out.output());
        assert_nothing_left(out.pid);
        let got = hashes(&dir.join(&sums), "decode");
        assert_eq!(got.len(), want.len(), "{}: frames decoded", clip.name);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{}: frame {k} differs from ffmpeg's own decode", clip.name);
        }
    }
}

#[test]
fn a_looping_source_plays_the_file_again_and_frames_caps_it() {
    if !ffmpeg_tools_for_test("a_looping_source_plays_the_file_again_and_frames_caps_it") {
        return;
    }
    let dir = scratch("video-loop");
    let clip = Clip {
        name: "five.mp4",
        size: (64, 48),
        rate: 30,
        frames: 5,
        encode: "-c:v libx264 -bf 2 -pix_fmt yuv420p",
        pixel: "nv12",
    };
    let file = make(&dir, &clip);
    let want = ffmpeg_hashes(&dir, &file, clip.pixel, clip.size);
    let p = pipeline(&dir, "loop.toml", &decode_pipeline("loop", &file, ", loop = true", ""));
    let out = run_file(&dir, &p, &["--frames", "13", "--checksums", "sums"]);
    assert!(out.status.success(), "{}", out.output());
    let got = hashes(&dir.join("sums"), "decode");
    assert_eq!(got.len(), 13);
    for (seq, hash) in got.iter().enumerate() {
        assert_eq!(hash, &want[seq % 5], "frame {seq} is frame {} of the file", seq % 5);
    }
    // Without `loop` the stream ends with the file, whatever `frames` allows.
    let p = pipeline(&dir, "once.toml", &decode_pipeline("once", &file, "", ""));
    let out = run_file(&dir, &p, &["--frames", "13", "--checksums", "once"]);
    assert!(out.status.success(), "{}", out.output());
    assert_eq!(hashes(&dir.join("once"), "decode"), want);
    assert_nothing_left(out.pid);
}

#[test]
fn a_decoder_killed_mid_file_goes_on_from_the_next_frame() {
    if !ffmpeg_tools_for_test("a_decoder_killed_mid_file_goes_on_from_the_next_frame") {
        return;
    }
    // Key frames every 30 frames: the restarted decoder starts at the one before the frame
    // it owes, in an MP4 file (its sync samples) and in an elementary stream (its IDR units).
    let clips = [
        Clip {
            name: "long.mp4",
            size: (160, 120),
            rate: 30,
            frames: 90,
            encode: "-c:v libx264 -bf 2 -g 30 -pix_fmt yuv420p",
            pixel: "nv12",
        },
        Clip {
            name: "long.h264",
            size: (160, 120),
            rate: 30,
            frames: 90,
            encode: "-c:v libx264 -bf 2 -g 30 -pix_fmt yuv420p -f h264",
            pixel: "nv12",
        },
    ];
    for clip in clips {
        let dir = scratch(&format!("video-restart-{}", clip.name));
        let file = make(&dir, &clip);
        let want = ffmpeg_hashes(&dir, &file, clip.pixel, clip.size);
        // Paced at the file's 30 frames/s, so the kill lands mid-file, past the second key frame.
        let text = decode_pipeline("restart", &file, ", realtime = true", "restart = \"on-failure\"");
        let p = pipeline(&dir, "restart.toml", &text);
        let mut host = start_running(&dir, &p, &SUMS_AND_REPORT);
        let tap = dir.join("sums").join("decode.sum");
        wait_until(RUN_TIMEOUT, "40 decoded frames", || {
            std::fs::read_to_string(&tap).is_ok_and(|t| t.lines().count() >= 40)
        });
        rustix::process::kill_process(pid_of(host.pid(), "decode"), rustix::process::Signal::KILL).unwrap();
        host.wait_for_stderr("stage 'decode' restarted (restart 1)", RUN_TIMEOUT);
        let finished = host.finish(RUN_TIMEOUT);
        assert_eq!(finished.status.code(), Some(0), "{}: {}", clip.name, finished.output());
        let report = report(&dir);
        assert_eq!(stage_row(&report, "decode")["restarts"].as_u64(), Some(1));
        // Every frame the source made is the file's frame of that number, each made once: the
        // restarted process went on after the last one delivered, not from the start.
        let made = sum_lines(&tap);
        let seqs: Vec<u64> = made.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (0..90).collect::<Vec<_>>(), "{}: the source made every frame once, in order", clip.name);
        for (seq, hash) in &made {
            assert_eq!(hash, &want[*seq as usize], "{}: frame {seq}", clip.name);
        }
        let delivered = sum_lines(&dir.join("sums").join("sink.sum")).len() as u64;
        let lost: u64 = ["decode", "sink"].iter().map(|s| stage_row(&report, s)["lost"].as_u64().unwrap()).sum();
        assert_eq!(delivered + lost, 90, "{}: delivered + lost = made", clip.name);
        assert_nothing_left(finished.pid);
    }
}

#[test]
fn damaged_data_is_decoded_counted_and_the_run_finishes() {
    if !ffmpeg_tools_for_test("damaged_data_is_decoded_counted_and_the_run_finishes") {
        return;
    }
    let dir = scratch("video-damaged");
    let clip = Clip {
        name: "clip.h264",
        size: (320, 240),
        rate: 30,
        frames: 30,
        encode: "-c:v libx264 -bf 0 -g 300 -pix_fmt yuv420p -f h264",
        pixel: "nv12",
    };
    let file = make(&dir, &clip);
    // Overwrite bytes in the middle of the stream's slice data, away from its parameter sets.
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    for (i, b) in bytes[mid..mid + 64].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(37) | 0x11;
    }
    std::fs::write(&file, &bytes).unwrap();
    let p = pipeline(&dir, "damaged.toml", &decode_pipeline("damaged", &file, "", ""));
    let out = run_file(&dir, &p, &["--report", "report.json"]);
    assert!(out.status.success(), "{}", out.output());
    let report = report(&dir);
    let decode = stage_row(&report, "decode");
    assert!(decode["damaged"].as_u64().unwrap() >= 1, "no damaged frame counted:\n{}", out.output());
    assert!(decode["frames"].as_u64().unwrap() >= 1);
    assert!(out.stdout.contains("damaged"), "the table shows a damaged column:\n{}", out.output());
    assert_nothing_left(out.pid);
}

/// `validate` of a pipeline decoding `file` fails with exit code 2 and says `needle`.
fn refused(dir: &Path, file: &Path, needle: &str) {
    let p = pipeline(dir, "bad.toml", &decode_pipeline("bad", file, "", ""));
    let out = run(dir, &["validate", &p.to_string_lossy()]);
    assert_eq!(out.status.code(), Some(2), "{}: {}", file.display(), out.output());
    let text = out.output();
    assert!(text.contains(needle), "{}: expected `{needle}` in:\n{text}", file.display());
    assert!(text.contains("decode"), "{}: the error names the stage:\n{text}", file.display());
}

#[test]
fn bad_files_are_refused_at_validate_naming_the_file_and_why() {
    if !ffmpeg_tools_for_test("bad_files_are_refused_at_validate_naming_the_file_and_why") {
        return;
    }
    let dir = scratch("video-bad");
    let name = |f: &str| dir.join(f).to_string_lossy().into_owned();
    refused(&dir, &dir.join("missing.mp4"), &format!("cannot open {}", name("missing.mp4")));

    std::fs::write(dir.join("text.mp4"), b"this is not a video at all, just words\n").unwrap();
    refused(&dir, &dir.join("text.mp4"), &format!("{} is not a video file", name("text.mp4")));
    std::fs::write(dir.join("empty.h264"), b"").unwrap();
    refused(&dir, &dir.join("empty.h264"), &format!("{} is empty", name("empty.h264")));

    ffmpeg_in(&dir, &["-f", "lavfi", "-i", "sine=frequency=440:duration=1", "-c:a", "aac", "audio.mp4"]);
    refused(&dir, &dir.join("audio.mp4"), "has no video track (its tracks: audio)");

    ffmpeg_in(&dir, &["-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "3", "-c:v", "mpeg4", "mpeg4.mp4"]);
    refused(&dir, &dir.join("mpeg4.mp4"), "is not supported; the video source decodes H.264, HEVC, VP9 and AV1");

    ffmpeg_in(
        &dir,
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=64x48",
            "-frames:v",
            "3",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv444p",
            "h264-444.mp4",
        ],
    );
    refused(
        &dir,
        &dir.join("h264-444.mp4"),
        "has 4:4:4 chroma; the video source makes nv12 and p010 frames (4:2:0) only",
    );

    let x265 = X265.split(' ').collect::<Vec<_>>();
    let mut args = vec!["-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "3"];
    args.extend(&x265);
    args.extend(["-pix_fmt", "yuv420p12le", "hevc-12bit.mp4"]);
    ffmpeg_in(&dir, &args);
    refused(
        &dir,
        &dir.join("hevc-12bit.mp4"),
        "is 12-bit; the video source decodes 8-bit (nv12) and 10-bit (p010) video only",
    );

    // Parameter sets and no picture.
    let head: Vec<u8> = {
        ffmpeg_in(
            &dir,
            &[
                "-f",
                "lavfi",
                "-i",
                "testsrc2=size=64x48",
                "-frames:v",
                "1",
                "-c:v",
                "libx264",
                "-bsf:v",
                "filter_units=remove_types=1|5",
                "-f",
                "h264",
                "noslice.h264",
            ],
        );
        std::fs::read(dir.join("noslice.h264")).unwrap()
    };
    assert!(!head.is_empty());
    refused(&dir, &dir.join("noslice.h264"), "holds no frame");

    // moov after the data (ffmpeg's default) and the end cut off: no sample table left.
    ffmpeg_in(&dir, &["-f", "lavfi", "-i", "testsrc2=size=64x48", "-frames:v", "30", "-c:v", "libx264", "whole.mp4"]);
    let whole = std::fs::read(dir.join("whole.mp4")).unwrap();
    std::fs::write(dir.join("cut.mp4"), &whole[..whole.len() / 2]).unwrap();
    refused(
        &dir,
        &dir.join("cut.mp4"),
        &format!("{} is truncated: it ends at byte {}", name("cut.mp4"), whole.len() / 2),
    );
    refused(&dir, &dir.join("cut.mp4"), "its index (the `moov` box) is missing too");
    // moov first (faststart) and the data cut short: samples past the end.
    ffmpeg_in(
        &dir,
        &[
            "-f",
            "lavfi",
            "-i",
            "testsrc2=size=64x48",
            "-frames:v",
            "30",
            "-c:v",
            "libx264",
            "-movflags",
            "+faststart",
            "fast.mp4",
        ],
    );
    let fast = std::fs::read(dir.join("fast.mp4")).unwrap();
    std::fs::write(dir.join("fastcut.mp4"), &fast[..fast.len() * 2 / 3]).unwrap();
    refused(
        &dir,
        &dir.join("fastcut.mp4"),
        &format!("{} is truncated: it ends at byte {}", name("fastcut.mp4"), fast.len() * 2 / 3),
    );
}

#[test]
fn a_missing_ffmpeg_fails_the_stage_naming_it() {
    if !ffmpeg_tools_for_test("a_missing_ffmpeg_fails_the_stage_naming_it") {
        return;
    }
    let dir = scratch("video-no-ffmpeg");
    let clip = Clip {
        name: "clip.mp4",
        size: (64, 48),
        rate: 30,
        frames: 3,
        encode: "-c:v libx264 -pix_fmt yuv420p",
        pixel: "nv12",
    };
    let file = make(&dir, &clip);
    let p = pipeline(&dir, "p.toml", &decode_pipeline("noffmpeg", &file, ", ffmpeg = \"gpuipc-no-such-ffmpeg\"", ""));
    let out = run_file(&dir, &p, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(out.stdout.contains("stage 'decode'"), "{}", out.output());
    assert!(out.output().contains("param `ffmpeg`: `gpuipc-no-such-ffmpeg` is not found on PATH"), "{}", out.output());
    assert_nothing_left(out.pid);
}
