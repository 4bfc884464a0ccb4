//! Our files and conversions checked by a tool nobody here wrote: ffprobe reads the `y4m`
//! sink's files and the `png` sink's files with the right size, pixel format and frame count;
//! ffmpeg decodes our PNGs to the generator's exact pixels; ffmpeg's own RGB → YUV 4:2:0
//! conversion of the generator's frames agrees with `yuv420`'s within [`YUV420_TOLERANCE`]
//! for each matrix and range; and a y4m stream ffmpeg writes, piped into a `y4m` source on
//! standard input, through `yuv-to-rgb` into PNGs, agrees with ffmpeg's own YUV → RGB
//! conversion within [`YUV_TO_RGB_TOLERANCE`]; and 10-bit `p010le` frames ffmpeg makes, sent
//! to a `tcp-receive` source (this test speaking `tcp-send`'s side of the link), through
//! `yuv-to-rgb` into PNGs, agree with ffmpeg's own `p010le` → `rgb24` conversion within
//! [`P010_TO_RGB_TOLERANCE`].
//!
//! Needs `ffmpeg` and `ffprobe` on the PATH. Without them each test says it is skipped and
//! returns, unless `GPUIPC_REQUIRE_FFMPEG=1` (CI sets it after installing Debian's ffmpeg),
//! where a missing ffmpeg fails the test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

/// Any one ffmpeg or ffprobe run on these small files; far longer is a hang.
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// ffmpeg's `scale` options that make swscale convert RGB to YUV 4:2:0 as `yuv420` does:
/// `area` averages each 2x2 block for the 2:1 chroma downscale (its default, bicubic, weighs
/// neighbouring blocks in too: U and V differ by up to 28 on noise), `accurate_rnd` rounds instead
/// of truncating. Matrix and range go in `out_color_matrix` and `out_range`.
const RGB_TO_YUV_FLAGS: &str = "area+accurate_rnd";

/// Largest difference of any Y, U or V sample between ffmpeg's conversion and `yuv420`'s
/// (even frame sizes), and the largest share of a plane's samples that may differ at all on
/// the gradient and noise patterns. Measured on the generator's bars, gradient, noise and box
/// patterns at 320x240 with ffmpeg 5.1 (Debian 12): the difference is at most 1 in every
/// plane, for each of bt601/bt709 x limited/full; on gradient and noise in at most 0.8% of the
/// Y samples and 2.7% of the U or V samples; on box nowhere; on bars nowhere in limited range
/// and, in full range, in one bar of eight (12.5%) of U and of V: yellow's U and cyan's V are
/// exactly 0.5, which `yuv420` rounds up to 1 and swscale down to 0.
const YUV420_TOLERANCE: (u8, f64) = (1, 0.05);

/// ffmpeg's `scale` flags that make swscale convert YUV 4:2:0 to RGB as `yuv-to-rgb` does:
/// `neighbor` with `full_chroma_int` gives each pixel the chroma of its own 2x2 block,
/// `accurate_rnd` rounds. Matrix and range go in `in_color_matrix` and `in_range`.
const YUV_TO_RGB_FLAGS: &str = "neighbor+accurate_rnd+full_chroma_int";

/// Largest difference of any R, G or B byte between ffmpeg's conversion and `yuv-to-rgb`'s,
/// and the largest share of bytes that may differ. Measured on ffmpeg's `testsrc` at 320x240:
/// at most 1, in at most 0.08% of the bytes, for each of bt601/bt709 x limited/full.
const YUV_TO_RGB_TOLERANCE: (u8, f64) = (1, 0.005);

/// The same for 10-bit `p010le` input, per range: the largest difference and the largest share
/// of bytes that may differ. Measured on `testsrc` at 320x240 converted to `p010le` by ffmpeg
/// (most samples real 10-bit values, not 8-bit ones times 4), with ffmpeg 5.1 (Debian 12):
/// at most 1 everywhere; in limited range in 0.03% (bt601) and 0.07% (bt709) of the bytes; in
/// full range in 40% (bt601) and 37% (bt709). `yuv-to-rgb` takes full-range 10-bit levels
/// as H.273 defines them, 0..=1023 for 0..=255 (a scale of 255/1023), swscale 5.1 as 8-bit
/// levels times 4 (255/1020): the two differ by up to 0.75 of an 8-bit level, at white, so
/// many results round apart by 1 but none by more. (On random 10-bit samples beyond the
/// limited range swscale's blue wraps to 0 where it should clamp to 255; `testsrc` stays in
/// range.)
const P010_TO_RGB_TOLERANCE: [(&str, (u8, f64)); 2] = [("limited", (1, 0.005)), ("full", (1, 0.5))];

const MATRICES: [&str; 2] = ["bt601", "bt709"];
const RANGES: [&str; 2] = ["limited", "full"];

/// ffmpeg's name of a range.
fn ff_range(range: &str) -> &'static str {
    if range == "full" { "pc" } else { "tv" }
}

/// Run a tool to completion, at most [`TOOL_TIMEOUT`]; its stdout. Fails the test on a
/// non-zero exit, with its stderr.
fn tool(command: &mut Command) -> Vec<u8> {
    let what = format!("{command:?}");
    let child = command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(TOOL_TIMEOUT) else {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        panic!("{what} took more than {TOOL_TIMEOUT:?}");
    };
    let output = output.unwrap();
    assert!(output.status.success(), "{what} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    output.stdout
}

/// ffmpeg decoding `input` (with `args` before the output) to raw frames of `pix_fmt`.
fn decode(input: &Path, args: &[&str], pix_fmt: &str) -> Vec<u8> {
    tool(
        Command::new("ffmpeg")
            .args(["-v", "error", "-i"])
            .arg(input)
            .args(args)
            .args(["-pix_fmt", pix_fmt, "-f", "rawvideo", "-"]),
    )
}

/// The frames of a y4m file: everything after each `FRAME` line, `frame_bytes` each.
fn y4m_frames(bytes: &[u8], frame_bytes: usize) -> Vec<&[u8]> {
    let mut rest = &bytes[bytes.iter().position(|&b| b == b'\n').unwrap() + 1..];
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let line = rest.iter().position(|&b| b == b'\n').unwrap() + 1;
        assert!(rest.starts_with(b"FRAME"));
        frames.push(&rest[line..line + frame_bytes]);
        rest = &rest[line + frame_bytes..];
    }
    frames
}

/// Largest difference and share of differing bytes between `a` and `b` (the same length).
fn compare(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let (mut max, mut differ) = (0, 0usize);
    for (x, y) in a.iter().zip(b) {
        max = max.max(x.abs_diff(*y));
        differ += (x != y) as usize;
    }
    (max, differ as f64 / a.len() as f64)
}

/// `xxh3` of packed pixels as `--checksums` writes it (`pixel_hash` of a packed layout).
fn packed_hash(format: FrameFormat, bytes: &[u8]) -> String {
    let mut layout = FrameLayout::for_format(format).unwrap();
    let mut offset = 0;
    for plane in &mut layout.planes[..layout.n_planes as usize] {
        (plane.pitch, plane.offset) = (plane.row_bytes, offset);
        offset += plane.row_bytes * plane.rows;
    }
    layout.total_bytes = offset;
    format!("{:016x}", gpuipc_plugin_api::pixel_hash(&layout, bytes).unwrap())
}

#[test]
fn ffprobe_reads_our_y4m_files() {
    if !ffmpeg_tools_for_test("ffprobe_reads_our_y4m_files") {
        return;
    }
    for (width, height) in [(320, 240), (33, 17)] {
        let dir = scratch(&format!("ffmpeg-y4m-{width}x{height}"));
        let text = format!(
            r#"
[pipeline]
name = "y4m"
frames = 12
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = {width}, height = {height}, pattern = "gradient" }}
[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
params = {{ layout = "i420" }}
[[stage]]
name = "file"
plugin = "y4m"
inputs = ["yuv"]
params = {{ path = "out/video.y4m", fps = 30000, fps_den = 1001 }}
"#
        );
        run_ok(&dir, &pipeline(&dir, "y4m.toml", &text), &["--checksums", "sums"]);
        let video = dir.join("out/video.y4m");
        let stream = ffprobe_video(&video);
        assert_eq!(stream["codec_name"], "rawvideo", "{stream}");
        assert_eq!((stream["width"].as_u64(), stream["height"].as_u64()), (Some(width), Some(height)), "{stream}");
        assert_eq!(stream["pix_fmt"], "yuv420p", "{stream}");
        assert_eq!(stream["nb_read_frames"], "12", "{stream}");
        assert_eq!(stream["r_frame_rate"], "30000/1001", "{stream}");
        // And ffmpeg reads back every frame as the yuv420 stage made it.
        let raw = decode(&video, &[], "yuv420p");
        let format = FrameFormat::new(PixelFormat::I420, width as u32, height as u32);
        let frame_bytes = raw.len() / 12;
        let made = sum_lines(&dir.join("sums/yuv.sum"));
        for (seq, hash) in made {
            let frame = &raw[seq as usize * frame_bytes..(seq as usize + 1) * frame_bytes];
            assert_eq!(packed_hash(format, frame), hash, "{width}x{height} frame {seq}");
        }
    }
}

#[test]
fn ffprobe_reads_our_pngs_and_ffmpeg_decodes_the_generators_pixels() {
    if !ffmpeg_tools_for_test("ffprobe_reads_our_pngs_and_ffmpeg_decodes_the_generators_pixels") {
        return;
    }
    let dir = scratch("ffmpeg-png");
    let cases = [
        ("rgb8", "rgb24", PixelFormat::Rgb8),
        ("rgba8", "rgba", PixelFormat::Rgba8),
        ("gray8", "gray", PixelFormat::Gray8),
    ];
    for (format, pix_fmt, pixel) in cases {
        for compression in ["fast", "none"] {
            let name = format!("{format}-{compression}");
            let text = format!(
                r#"
[pipeline]
name = "png"
frames = 7
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = 61, height = 37, pattern = "noise", format = "{format}" }}
[[stage]]
name = "frames"
plugin = "png"
inputs = ["gen"]
params = {{ path = "{name}/f-{{seq:03}}.png", every = 2, compression = "{compression}" }}
"#
            );
            run_ok(&dir, &pipeline(&dir, &format!("{name}.toml"), &text), &["--checksums", &format!("sums-{name}")]);
            let mut files: Vec<String> = std::fs::read_dir(dir.join(&name))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            assert_eq!(files, ["f-000.png", "f-002.png", "f-004.png", "f-006.png"], "{name}");
            let made: std::collections::HashMap<u64, String> =
                sum_lines(&dir.join(format!("sums-{name}/gen.sum"))).into_iter().collect();
            for file in &files {
                let path = dir.join(&name).join(file);
                let stream = ffprobe_video(&path);
                assert_eq!(stream["codec_name"], "png", "{name} {file}: {stream}");
                assert_eq!(
                    (stream["width"].as_u64(), stream["height"].as_u64()),
                    (Some(61), Some(37)),
                    "{name} {file}"
                );
                assert_eq!(stream["pix_fmt"], pix_fmt, "{name} {file}: {stream}");
                assert_eq!(stream["nb_read_frames"], "1", "{name} {file}: {stream}");
                let seq: u64 = file[2..5].parse().unwrap();
                let pixels = decode(&path, &[], pix_fmt);
                let format = FrameFormat::new(pixel, 61, 37);
                assert_eq!(packed_hash(format, &pixels), made[&seq], "{name} {file}: ffmpeg decodes other pixels");
            }
        }
    }
}

#[test]
fn ffmpegs_rgb_to_yuv420_agrees_with_yuv420() {
    if !ffmpeg_tools_for_test("ffmpegs_rgb_to_yuv420_agrees_with_yuv420") {
        return;
    }
    let (width, height) = (320usize, 240usize);
    let (cw, ch) = (width / 2, height / 2);
    let frame_bytes = width * height + 2 * cw * ch;
    for pattern in ["bars", "gradient", "noise", "box"] {
        for matrix in MATRICES {
            for range in RANGES {
                let dir = scratch(&format!("ffmpeg-yuv420-{pattern}-{matrix}-{range}"));
                let text = format!(
                    r#"
[pipeline]
name = "compare"
frames = 2
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = {width}, height = {height}, pattern = "{pattern}" }}
[[stage]]
name = "png"
plugin = "png"
inputs = ["gen"]
params = {{ path = "png/f-{{seq}}.png" }}
[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
params = {{ matrix = "{matrix}", range = "{range}" }}
[[stage]]
name = "file"
plugin = "y4m"
inputs = ["yuv"]
params = {{ path = "ours.y4m" }}
"#
                );
                run_ok(&dir, &pipeline(&dir, "compare.toml", &text), &[]);
                let ours = std::fs::read(dir.join("ours.y4m")).unwrap();
                let ours = y4m_frames(&ours, frame_bytes);
                assert_eq!(ours.len(), 2);
                let vf =
                    format!("scale=out_color_matrix={matrix}:out_range={}:flags={RGB_TO_YUV_FLAGS}", ff_range(range));
                for (seq, ours) in ours.iter().enumerate() {
                    let theirs = decode(&dir.join(format!("png/f-{seq}.png")), &["-vf", &vf], "yuv420p");
                    let planes = [(0, width * height), (width * height, cw * ch), (width * height + cw * ch, cw * ch)];
                    for ((start, len), plane) in planes.into_iter().zip(["Y", "U", "V"]) {
                        let (max, share) = compare(&ours[start..start + len], &theirs[start..start + len]);
                        eprintln!(
                            "{pattern} {matrix} {range} frame {seq} {plane}: max {max}, {:.2}% differ",
                            share * 100.0
                        );
                        // Flat colours differ in whole bars or not at all: only the largest
                        // difference says something there.
                        let share_checked = matches!(pattern, "gradient" | "noise");
                        assert!(
                            max <= YUV420_TOLERANCE.0 && (!share_checked || share <= YUV420_TOLERANCE.1),
                            "{pattern} {matrix} {range} frame {seq} plane {plane}: ffmpeg's conversion differs by up to {max} in {:.2}% of the samples",
                            share * 100.0
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn ffmpegs_y4m_on_stdin_through_yuv_to_rgb_into_pngs() {
    if !ffmpeg_tools_for_test("ffmpegs_y4m_on_stdin_through_yuv_to_rgb_into_pngs") {
        return;
    }
    const FRAMES: usize = 10;
    let (width, height) = (320usize, 240usize);
    let source = ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames", "10", "-pix_fmt", "yuv420p"];
    for matrix in MATRICES {
        for range in RANGES {
            let dir = scratch(&format!("ffmpeg-stdin-{matrix}-{range}"));
            let text = format!(
                r#"
[pipeline]
name = "from-ffmpeg"
[[stage]]
name = "video"
plugin = "y4m"
params = {{ path = "-" }}
[[stage]]
name = "rgb"
plugin = "yuv-to-rgb"
inputs = ["video"]
params = {{ matrix = "{matrix}", range = "{range}" }}
[[stage]]
name = "frames"
plugin = "png"
inputs = ["rgb"]
params = {{ path = "png/f-{{seq:03}}.png" }}
"#
            );
            let file = pipeline(&dir, "from-ffmpeg.toml", &text);
            // ffmpeg writes the stream into a pipe the host reads as its standard input.
            let mut ffmpeg = Command::new("ffmpeg")
                .args(["-v", "error"])
                .args(source)
                .args(["-f", "yuv4mpegpipe", "-"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdin = Stdio::from(ffmpeg.stdout.take().unwrap());
            let run = start_with_stdin(&dir, &["run", file.to_str().unwrap(), "--quiet"], stdin).finish(RUN_TIMEOUT);
            assert!(ffmpeg.wait().unwrap().success());
            assert!(run.status.success(), "{matrix} {range}: {}", run.output());
            assert_nothing_left(run.pid);

            // The source ended with the stream: one PNG per frame, as ffprobe sees them.
            let mut files: Vec<String> = std::fs::read_dir(dir.join("png"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            let want: Vec<String> = (0..FRAMES).map(|i| format!("f-{i:03}.png")).collect();
            assert_eq!(files, want, "{matrix} {range}");
            let stream = ffprobe_video(&dir.join("png/f-000.png"));
            assert_eq!((stream["width"].as_u64(), stream["height"].as_u64()), (Some(320), Some(240)), "{stream}");
            assert_eq!(stream["pix_fmt"], "rgb24", "{stream}");

            // ffmpeg's own conversion of the same stream, with our matrix and range.
            tool(
                Command::new("ffmpeg")
                    .args(["-v", "error", "-y"])
                    .args(source)
                    .args(["-f", "yuv4mpegpipe"])
                    .arg(dir.join("ts.y4m")),
            );
            let vf = format!("scale=in_color_matrix={matrix}:in_range={}:flags={YUV_TO_RGB_FLAGS}", ff_range(range));
            let theirs = decode(&dir.join("ts.y4m"), &["-vf", &vf], "rgb24");
            let ours = decode(&dir.join("png/f-%03d.png"), &[], "rgb24");
            assert_eq!(ours.len(), FRAMES * width * height * 3);
            let (max, share) = compare(&ours, &theirs);
            eprintln!("testsrc {matrix} {range}: max {max}, {:.3}% differ", share * 100.0);
            assert!(
                max <= YUV_TO_RGB_TOLERANCE.0 && share <= YUV_TO_RGB_TOLERANCE.1,
                "{matrix} {range}: ffmpeg's YUV to RGB differs from yuv-to-rgb by up to {max} in {:.3}% of the bytes",
                share * 100.0
            );
        }
    }
}

/// `tcp-send`'s side of the link protocol (`plugins/tcp-wire/src/lib.rs`, version 2), enough
/// to hand a `tcp-receive` stage frames this test made: the hello, the answer, each frame as
/// the ring's slot holds it, the end of stream, and their acknowledgements.
mod link {
    use super::*;

    const HELLO_MAGIC: &[u8; 4] = b"GPNH";
    const FRAME_MAGIC: &[u8; 4] = b"GPNF";
    const VERSION: u16 = 2;
    const FLAG_END_OF_STREAM: u32 = 1;
    const ACCEPT: u8 = 0;
    const ACK_FRAME: u8 = 0x06;
    const ACK_END: u8 = 0x04;

    /// Connect to a receiver listening on `port` of this machine (retrying until it listens, at
    /// most `timeout`), say hello for `link` and `format`, and check the answer.
    pub fn connect(port: u16, link: &str, format: FrameFormat, timeout: Duration) -> TcpStream {
        let deadline = Instant::now() + timeout;
        let mut stream = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(stream) => break stream,
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => panic!("no tcp-receive listening on port {port} within {timeout:?}: {e}"),
            }
        };
        stream.set_read_timeout(Some(timeout)).unwrap();
        let frame_bytes = FrameLayout::for_format(format).unwrap().total_bytes;
        let mut hello = Vec::new();
        hello.extend_from_slice(HELLO_MAGIC);
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&(link.len() as u16).to_le_bytes());
        hello.extend_from_slice(&1u64.to_le_bytes()); // the first connection
        for field in [format.pixel, format.width, format.height] {
            hello.extend_from_slice(&field.to_le_bytes());
        }
        hello.extend_from_slice(&frame_bytes.to_le_bytes());
        hello.extend_from_slice(&1u16.to_le_bytes()); // one connection
        hello.extend_from_slice(&0u16.to_le_bytes()); // the first (headers and payloads)
        hello.extend_from_slice(link.as_bytes());
        stream.write_all(&hello).unwrap();
        let mut answer = [0u8; 3];
        stream.read_exact(&mut answer).unwrap();
        let mut reason = vec![0u8; usize::from(u16::from_le_bytes([answer[1], answer[2]]))];
        stream.read_exact(&mut reason).unwrap();
        assert_eq!(answer[0], ACCEPT, "tcp-receive refused the link: {}", String::from_utf8_lossy(&reason));
        stream
    }

    fn header(flags: u32, seq: u64, payload_len: u64) -> Vec<u8> {
        let mut h = FRAME_MAGIC.to_vec();
        h.extend_from_slice(&flags.to_le_bytes());
        h.extend_from_slice(&seq.to_le_bytes());
        h.extend_from_slice(&0u64.to_le_bytes()); // timestamp_ns
        h.extend_from_slice(&payload_len.to_le_bytes());
        h
    }

    /// Send each of `frames` (packed planes of `format`) laid out as a ring slot, numbered
    /// from 0, then the end of stream; wait for every acknowledgement.
    pub fn send_all(stream: &mut TcpStream, format: FrameFormat, frames: &[&[u8]]) {
        let layout = FrameLayout::for_format(format).unwrap();
        for (seq, packed) in frames.iter().enumerate() {
            let mut slot = vec![0u8; layout.total_bytes as usize];
            let mut rest = *packed;
            for plane in layout.planes() {
                let (row_bytes, pitch, offset) =
                    (plane.row_bytes as usize, plane.pitch as usize, plane.offset as usize);
                for row in 0..plane.rows as usize {
                    let (pixels, after) = rest.split_at(row_bytes);
                    slot[offset + row * pitch..][..row_bytes].copy_from_slice(pixels);
                    rest = after;
                }
            }
            assert!(rest.is_empty(), "a frame of {} bytes for {format}", packed.len());
            stream.write_all(&header(0, seq as u64, slot.len() as u64)).unwrap();
            stream.write_all(&slot).unwrap();
        }
        stream.write_all(&header(FLAG_END_OF_STREAM, 0, 0)).unwrap();
        let mut acks = vec![0u8; frames.len() + 1];
        stream.read_exact(&mut acks).unwrap();
        let mut want = vec![ACK_FRAME; frames.len()];
        want.push(ACK_END);
        assert_eq!(acks, want);
    }
}

#[test]
fn ffmpegs_p010_through_yuv_to_rgb_into_pngs() {
    if !ffmpeg_tools_for_test("ffmpegs_p010_through_yuv_to_rgb_into_pngs") {
        return;
    }
    const FRAMES: usize = 10;
    let (width, height) = (320usize, 240usize);
    let format = FrameFormat::new(PixelFormat::P010, width as u32, height as u32);
    let frame_bytes = FrameLayout::for_format(format).unwrap().pixel_bytes() as usize;
    // ffmpeg's RGB testsrc in 10-bit limited-range BT.601 4:2:0 (ffmpeg's default matrix and
    // range for it), every sample `value << 6`.
    let source = scratch("ffmpeg-p010-source").join("ts.p010");
    let lavfi =
        ["-f", "lavfi", "-i", "testsrc=size=320x240:rate=25", "-frames", "10", "-pix_fmt", "p010le", "-f", "rawvideo"];
    tool(Command::new("ffmpeg").args(["-v", "error", "-y"]).args(lavfi).arg(&source));
    let raw = std::fs::read(&source).unwrap();
    assert_eq!(raw.len(), FRAMES * frame_bytes);
    let samples: Vec<u16> = raw.chunks_exact(2).map(|s| u16::from_le_bytes([s[0], s[1]])).collect();
    assert!(samples.iter().all(|s| s & 0x3f == 0), "p010le keeps its low 6 bits zero");
    // Real 10-bit values: many are no 8-bit level times 4.
    assert!(samples.iter().filter(|&s| (s >> 6) % 4 != 0).count() > samples.len() / 10);
    let frames: Vec<&[u8]> = raw.chunks_exact(frame_bytes).collect();
    let in_size = format!("{width}x{height}");

    for matrix in MATRICES {
        for (range, tolerance) in P010_TO_RGB_TOLERANCE {
            let dir = scratch(&format!("ffmpeg-p010-{matrix}-{range}"));
            let port = free_ports(1);
            let text = format!(
                r#"
[pipeline]
name = "p010"
[[stage]]
name = "video"
plugin = "tcp-receive"
params = {{ listen = "127.0.0.1:{port}", link = "p010", format = "p010", width = {width}, height = {height} }}
[[stage]]
name = "rgb"
plugin = "yuv-to-rgb"
inputs = ["video"]
params = {{ matrix = "{matrix}", range = "{range}" }}
[[stage]]
name = "frames"
plugin = "png"
inputs = ["rgb"]
params = {{ path = "png/f-{{seq:03}}.png" }}
"#
            );
            let file = pipeline(&dir, "p010.toml", &text);
            let running = start(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
            let mut stream = link::connect(port, "p010", format, RUN_TIMEOUT);
            link::send_all(&mut stream, format, &frames);
            drop(stream);
            let run = running.finish(RUN_TIMEOUT);
            assert!(run.status.success(), "{matrix} {range}: {}", run.output());
            assert_nothing_left(run.pid);

            // ffmpeg's own conversion of the same frames, with our matrix and range.
            let vf = format!("scale=in_color_matrix={matrix}:in_range={}:flags={YUV_TO_RGB_FLAGS}", ff_range(range));
            let raw_input = ["-f", "rawvideo", "-pix_fmt", "p010le", "-s", &in_size];
            let theirs = tool(
                Command::new("ffmpeg")
                    .args(["-v", "error"])
                    .args(raw_input)
                    .arg("-i")
                    .arg(&source)
                    .args(["-vf", &vf, "-pix_fmt", "rgb24", "-f", "rawvideo", "-"]),
            );
            let ours = decode(&dir.join("png/f-%03d.png"), &[], "rgb24");
            assert_eq!(ours.len(), FRAMES * width * height * 3, "{matrix} {range}");
            let (max, share) = compare(&ours, &theirs);
            eprintln!("testsrc p010 {matrix} {range}: max {max}, {:.3}% differ", share * 100.0);
            assert!(
                max <= tolerance.0 && share <= tolerance.1,
                "{matrix} {range}: ffmpeg's p010le to RGB differs from yuv-to-rgb by up to {max} in {:.3}% of the bytes",
                share * 100.0
            );
        }
    }
}
