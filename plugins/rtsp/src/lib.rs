//! `rtsp`: a source stage receiving a live camera over RTSP (H.264 or HEVC, RTP interleaved on
//! TCP by default or over UDP, through the `retina` client) and decoding it into `nv12` (8-bit)
//! or `p010` (10-bit) frames: with NVDEC, straight into GPU memory, in the cuda domain; with
//! ffmpeg in the cpu domain. The decoders are the `video` source's (crate `gpuipc-video-codec`).
//!
//! # Live
//!
//! `create` connects (DESCRIBE, SETUP) and starts the decoder; PLAY waits for the first
//! `process`, once the whole pipeline runs, so the camera sends nothing while N stages start
//! (no frame queues up, is dropped or counts latency meanwhile). Once it plays, the camera is
//! never made to wait: a thread of the stage's own receives the stream and queues
//! each access unit; `process` decodes them in order and hands on each picture. When the
//! pipeline falls behind and the queue is full (`queue`), whole access units are dropped up to
//! the next key frame; when a connection breaks, the frames the camera sent meanwhile are lost.
//! Either way a frame's `seq` counts the frames missed before it (numbers are skipped, never
//! reused, across reconnections too), the stage's `dropped` count in the run's table, report
//! and metrics counts them, and the stage logs how many were dropped (the pipeline was behind)
//! and lost (the connection) when it ends. Put `policy = "latest"` on the links after it for
//! live display: a slow consumer then always gets the newest frame.
//!
//! A frame's `timestamp_ns` is on the host's wall clock: the camera's RTP clock (its capture
//! times, without the network's jitter) put on the host's at the least delayed arrival
//! (`clock = "arrival"`), or the camera's own wall clock from its RTCP sender reports
//! (`clock = "sender"`, for a camera synchronised with the host by NTP). It is the frame's
//! birth: the latency the run reports for each stage counts from it.
//!
//! # The network
//!
//! A server that goes away, a TCP reset, or a stream that stalls (no packet for `timeout`) ends
//! the connection; the source connects again after `reconnect` seconds, doubling the wait after
//! each failed try up to `reconnect_max`, and goes on; the rest of the pipeline keeps running.
//! Meanwhile `process` returns every 0.1 s with no frame (`OutputFrame::no_frame_yet`), which
//! the host takes as a sign of life: the stage's `stall_timeout` watchdog does not kill a camera
//! that is away for longer than it (and still kills a stage whose `process` hangs), and a stop
//! signal drains the run. With `reconnect = false` a broken stream ends the source's stream and
//! the run drains.
//!
//! Credentials (`rtsp://user:password@host/...`, or `user`, `password`, `password_env`) go to
//! the camera only: every address the stage shows in a log line, an error or a report is
//! redacted (`rtsp://***@host/...`).
//!
//! When the pipeline is planned (`validate` too) the camera is asked what it sends (DESCRIBE,
//! and its first frame when its answer has no parameter sets) and a line is logged. A URL that
//! is not `rtsp://`, a refused connection, a wrong password (401), a camera without video or
//! with another codec than H.264 or HEVC, 4:2:2 or 12-bit video are errors there, naming the
//! stage and the redacted address. With `width` and `height` (and `codec`) the camera is not
//! asked: the pipeline is planned with them, and the stream is checked against them when it
//! comes (a clear error naming both if it differs).
//!
//! # Params
//!
//! | key             | type                   | default     | meaning |
//! |-----------------|------------------------|-------------|---------|
//! | `url`           | string                 | required    | the camera: `rtsp://[user[:password]@]host[:port]/path`; credentials are never shown in logs, errors, reports or metrics |
//! | `transport`     | `"tcp"` \| `"udp"`     | `"tcp"`     | RTP interleaved on the RTSP connection (TCP), or over UDP |
//! | `user`          | string                 | `none`      | the user name, instead of the one in `url` |
//! | `password`      | string                 | `none`      | the password, instead of the one in `url` |
//! | `password_env`  | string                 | `none`      | an environment variable holding the password, so that it need not be in the pipeline file |
//! | `reconnect`     | bool or float, > 0 (seconds) | `true`      | connect again when the stream breaks or stalls: true (first wait 0.5 s), false (the stream ends), or the first wait in seconds; each failed try doubles the wait |
//! | `reconnect_max` | float, > 0 (seconds)   | `30.0`      | the longest wait between two tries |
//! | `timeout`       | float, > 0 (seconds)   | `5.0`       | no packet for this long: the stream stalled, connect again; also the bound of each RTSP request |
//! | `queue`         | integer, >= 1          | `30`        | access units received and not yet decoded, at most; beyond, whole access units are dropped up to the next key frame (counted dropped) |
//! | `clock`         | `"arrival"` \| `"sender"` | `"arrival"` | frame stamps: the camera's clock put on the host's at the least delayed arrival, or the camera's wall clock from its RTCP sender reports |
//! | `width`         | integer, > 0, even     | `none`      | with `height`: the stream's size, so the pipeline is planned (`validate`, `run`) without asking the camera; 8-bit 4:2:0 (nv12) is assumed, and a stream of another size or depth is refused when it comes |
//! | `height`        | integer, > 0, even     | `none`      | with `width`: the stream's height |
//! | `codec`         | `"h264"` \| `"hevc"`   | `none`      | the codec the camera must send; another is refused when the stream comes |
//! | `ffmpeg`        | string                 | `none`      | cpu domain: the ffmpeg program that decodes; $GPUIPC_FFMPEG when not given, else `ffmpeg` on PATH |
//!
//! ```toml
//! [[stage]]
//! name = "cam0"
//! plugin = "rtsp"
//! params = { url = "rtsp://192.168.1.64:554/Streaming/Channels/101", user = "viewer", password_env = "CAM_PASSWORD" }
//!
//! [[stage]]
//! name = "lobby"
//! plugin = "rtsp"
//! params = { url = "rtsp://10.0.0.7:8554/lobby", transport = "udp", reconnect = 1.0, reconnect_max = 10.0, timeout = 3.0 }
//! ```
//!
//! More: [rtsp.md](rtsp.md).
#![deny(unsafe_code)]

pub mod clock;
pub mod queue;
pub mod rtsp;
pub mod session;
pub mod url;

gpuipc_plugin_api::export_plugin!(rtsp::Rtsp);
