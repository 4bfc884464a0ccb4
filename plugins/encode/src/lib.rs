//! `encode`: a sink stage that ends a run in a playable file or stream. It hands its frames,
//! raw, to a child ffmpeg process, which encodes them (libx264 by default) and muxes them into
//! the container of the path's extension (`.mp4`, `.mkv`, `.webm`, ...) or writes them to a
//! URL (`udp://`, `rtmp://`, `srt://`, ...): an encoder, a muxer and a file sink in one stage
//! (cpu domain; a cuda producer's frames are copied to host memory by the host).
//!
//! Takes one `i420`, `nv12`, `p010`, `rgb8`, `rgba8` or `gray8` input, handed to ffmpeg as
//! `yuv420p`, `nv12`, `p010le`, `rgb24`, `rgba` or `gray`. ffmpeg converts them to a pixel
//! format the encoder takes, its own choice unless `pix_fmt` says: for libx264 from `rgb8` it
//! picks 4:4:4 (`yuv444p`, the High 4:4:4 profile), which most players and browsers cannot
//! play, so give `pix_fmt = "yuv420p"` there (or put a `yuv420` stage in front, which also
//! decides the colour matrix and range); from `p010` it keeps 10 bits (`yuv420p10le`, H.264
//! High 10, which few players play): give `pix_fmt = "yuv420p"` for 8-bit H.264, or keep the
//! 10 bits with an encoder players take them from (`codec = "libx265"`, `"libsvtav1"`).
//! 4:2:0 encoders such as libx264 need even widths and heights.
//!
//! # ffmpeg
//!
//! When the stage starts, it runs
//!
//! ```text
//! ffmpeg -hide_banner -nostats -loglevel error -f rawvideo -pix_fmt P -s WxH -framerate FPS/FPS_DEN -i - \
//!        -c:v CODEC [-b:v BITRATE] [-crf CRF] [-preset PRESET] [-pix_fmt PIX_FMT] [OPTIONS...] [-f FORMAT] -y|-n PATH
//! ```
//!
//! each param one argument (no shell in between), and writes every frame's planes, rows
//! without their padding, to its standard input as the frame arrives. ffmpeg is the `ffmpeg`
//! param, else the program the environment variable `GPUIPC_FFMPEG` names, else `ffmpeg` on
//! `PATH`; a program that cannot be found is an error of `validate`, naming the param. The
//! folder of a file path is made when the stage starts. ffmpeg runs in a process group of its
//! own and dies with the stage (a stage killed from outside, or failed, takes it along; its
//! file is then left unfinished, as when ffmpeg is killed).
//!
//! At the end of the stream the stage closes ffmpeg's input and waits for it to finish the
//! file (write the trailer, flush the muxer), so Ctrl-C drains into a complete, playable
//! file. A slow encoder makes the stage slow, and its producers wait (or drop frames, with
//! `policy`); a `flush` that takes long (a slow preset at 4K) counts against the stage's
//! `stall_timeout`.
//!
//! Frames are written at the constant rate `fps / fps_den`: frame N of the stream is at
//! N × fps_den / fps seconds. Their `timestamp_ns` and gaps in `seq` (frames dropped by a
//! `policy`) are not used, so a run that drops frames plays faster, not with holes.
//!
//! ffmpeg failing is the stage failing, with ffmpeg's own words: an encoder ffmpeg does not
//! have (`codec = "nope"`: `ffmpeg (encoding to out/a.mp4) exited with code 1: Unknown
//! encoder 'nope'`), a bad option, a size the encoder refuses, an output it cannot open, a
//! trailer it cannot write. The message quotes ffmpeg's last lines of standard error. An
//! ffmpeg that ends on purpose before the stream does (`options = ["-frames:v", "100"]`) is
//! no failure: the frames after it are dropped, with a warning.
//!
//! `path` is a file, or a URL when it holds `://` (ffmpeg's protocols; give `format`, which
//! a URL has no extension to tell: `"mpegts"` for `udp://` and `srt://`, `"flv"` for
//! `rtmp://`). `"-"` (and ffmpeg's `pipe:`) is refused: standard output is where gpuipc-host
//! prints its plan and report. To play the stream as it is made, write a named pipe
//! (`mkfifo /tmp/live.ts`, `path = "/tmp/live.ts"`, `format = "mpegts"`, `ffplay
//! /tmp/live.ts`) or a URL. MP4 needs a seekable file: for pipes and streams use `mpegts`,
//! `matroska` or `flv` (or `options = ["-movflags", "frag_keyframe+empty_moov"]`). A
//! restarted stage (`restart = "on-failure"`) starts ffmpeg again, which writes the file anew.
//!
//! # Params
//!
//! | key         | type             | default     | meaning |
//! |-------------|------------------|-------------|---------|
//! | `path`      | string           | required    | the file to write (its folder is made when the stage starts), or a URL ffmpeg writes to (udp://, rtmp://, srt://, ...); not "-" |
//! | `codec`     | string           | `"libx264"` | the encoder, ffmpeg's -c:v (ffmpeg -encoders lists them) |
//! | `format`    | string           | `none`      | the container, ffmpeg's -f (mp4, matroska, mpegts, flv, ...); ffmpeg guesses it from the file's extension when not given |
//! | `fps`       | integer, >= 1    | `30`        | frame rate numerator of the output: frames are written one per 1/rate seconds, whatever their timestamps |
//! | `fps_den`   | integer, >= 1    | `1`         | frame rate denominator (fps = 30000, fps_den = 1001 is 29.97) |
//! | `bitrate`   | string           | `none`      | target bitrate, ffmpeg's -b:v ("4M", "800k"); not with crf |
//! | `crf`       | integer, >= 0    | `none`      | constant quality, ffmpeg's -crf (libx264: 0..=51, lower is better, 23 when not given); not with bitrate |
//! | `preset`    | string           | `none`      | the encoder's speed against size, ffmpeg's -preset (libx264: ultrafast ... veryslow, medium when not given) |
//! | `pix_fmt`   | string           | `none`      | the pixel format the encoder gets, ffmpeg's output -pix_fmt ("yuv420p": what players want); ffmpeg picks one when not given |
//! | `options`   | array of strings | `[]`        | more output arguments for ffmpeg, passed as they are, one item per argument, after the others and before format and path |
//! | `ffmpeg`    | string           | `none`      | the ffmpeg program, a name on PATH or a path; when not given, GPUIPC_FFMPEG if set, else ffmpeg |
//! | `overwrite` | bool             | `true`      | replace an existing file (ffmpeg's -y); false: an existing file is an error (-n) |
//!
//! ```toml
//! [[stage]]
//! name = "mp4"
//! plugin = "encode"
//! inputs = ["yuv"]
//! params = { path = "out/clip.mp4", fps = 60, crf = 20, preset = "veryfast" }
//!
//! [[stage]]
//! name = "from-rgb"
//! plugin = "encode"
//! inputs = ["gen"]
//! params = { path = "out/clip.mkv", pix_fmt = "yuv420p", bitrate = "4M" }
//!
//! [[stage]]
//! name = "live"
//! plugin = "encode"
//! inputs = ["yuv"]
//! params = { path = "udp://127.0.0.1:5000", format = "mpegts", preset = "ultrafast", options = ["-tune", "zerolatency", "-g", "30"] }
//!
//! [[stage]]
//! name = "lossless"
//! plugin = "encode"
//! inputs = ["gray"]
//! params = { path = "out/master.mkv", codec = "ffv1", ffmpeg = "/opt/ffmpeg/bin/ffmpeg", overwrite = false }
//! ```
#![deny(unsafe_code)]

pub mod encode;
pub mod ffmpeg;

gpuipc_plugin_api::export_plugin!(encode::Encode);
