//! The rtsp stage: its params, what it asks the camera at plan time, and the frame loop that
//! hands on each decoded picture under a number that counts the frames it could not hand on.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use gpuipc_plugin_api::ffmpeg::Program;
use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use gpuipc_video_codec::container::{Chroma, Codec, StreamInfo};
use gpuipc_video_codec::decode::cpu;
use gpuipc_video_codec::decode::live::{LiveDecoder, Next, Units};
use serde::Deserialize;

use crate::clock::ClockKind;
use crate::queue::Queue;
use crate::session::{self, Config, Go};
use crate::url::{CameraUrl, redact};

/// `reconnect`: on or off, or the first wait before connecting again in seconds.
#[derive(Clone, Copy, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Reconnect {
    On(bool),
    After(f64),
}

impl Default for Reconnect {
    fn default() -> Reconnect {
        Reconnect::On(true)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportParam {
    #[default]
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockParam {
    #[default]
    Arrival,
    Sender,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodecParam {
    H264,
    Hevc,
}

impl CodecParam {
    fn codec(self) -> Codec {
        match self {
            CodecParam::H264 => Codec::H264,
            CodecParam::Hevc => Codec::Hevc,
        }
    }
}

/// The longest `process` waits for a picture before it says it has none yet: each return is a
/// sign of life to the stall watchdog, which so never kills a camera that is away (while one
/// whose `process` hangs still is); short enough for any `stall_timeout` worth having.
const NO_FRAME_WAIT: Duration = Duration::from_millis(100);

/// The first wait before connecting again when `reconnect = true`.
const FIRST_BACKOFF_S: f64 = 0.5;

/// The `params` table of an rtsp stage.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// `rtsp://[user[:password]@]host[:port]/path`. Required.
    pub url: String,
    #[serde(default)]
    pub transport: TransportParam,
    pub user: Option<String>,
    pub password: Option<String>,
    /// An environment variable holding the password.
    pub password_env: Option<String>,
    #[serde(default)]
    pub reconnect: Reconnect,
    #[serde(default = "default_reconnect_max")]
    pub reconnect_max: f64,
    #[serde(default = "default_timeout")]
    pub timeout: f64,
    #[serde(default = "default_queue")]
    pub queue: u32,
    #[serde(default)]
    pub clock: ClockParam,
    pub ffmpeg: Option<String>,
    /// The stream's size and codec as the pipeline is planned, without asking the camera.
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub codec: Option<CodecParam>,
}

fn default_reconnect_max() -> f64 {
    30.0
}
fn default_timeout() -> f64 {
    5.0
}
fn default_queue() -> u32 {
    30
}

impl std::fmt::Debug for Params {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Params")
            .field("url", &redact(&self.url))
            .field("transport", &self.transport)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("password_env", &self.password_env)
            .finish_non_exhaustive()
    }
}

impl Params {
    fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if let Err(e) = CameraUrl::parse(&self.url) {
            problems.push(e);
        }
        match self.reconnect {
            Reconnect::After(s) if !(s > 0.0 && s.is_finite()) => {
                problems.push(format!("param `reconnect` is {s}; give true, false, or the first wait in seconds (> 0)"))
            }
            _ => {}
        }
        if !(self.reconnect_max > 0.0 && self.reconnect_max.is_finite()) {
            problems.push(format!(
                "param `reconnect_max` is {}; give the longest wait in seconds (> 0)",
                self.reconnect_max
            ));
        } else if let Reconnect::After(s) = self.reconnect
            && s > self.reconnect_max
        {
            problems
                .push(format!("param `reconnect` ({s} s) is longer than `reconnect_max` ({} s)", self.reconnect_max));
        }
        if !(self.timeout > 0.0 && self.timeout.is_finite()) {
            problems.push(format!("param `timeout` is {}; give seconds (> 0)", self.timeout));
        }
        if self.queue == 0 {
            problems.push("param `queue` is 0; give at least 1 access unit".to_owned());
        }
        if self.password.is_some() && self.password_env.is_some() {
            problems.push("params `password` and `password_env` are both given; give one".to_owned());
        }
        match (self.width, self.height) {
            (Some(w), Some(h)) if w == 0 || h == 0 || !w.is_multiple_of(2) || !h.is_multiple_of(2) => {
                problems.push(format!("params `width` and `height` are {w}x{h}; give an even width and height (> 0)"))
            }
            (Some(_), None) | (None, Some(_)) => {
                problems.push("params `width` and `height`: give both or neither".to_owned())
            }
            _ => {}
        }
        problems.extend(cpu::ffmpeg_param_problem(self.ffmpeg.as_deref()));
        if problems.is_empty() { Ok(()) } else { Err(Error::new(problems.join("; "))) }
    }

    /// How to reach the camera (after [`Params::validate`]).
    fn config(&self) -> Result<Config> {
        let mut camera = CameraUrl::parse(&self.url).map_err(Error::new)?;
        if let Some(user) = &self.user {
            camera.user = Some(user.clone());
        }
        if let Some(password) = &self.password {
            camera.password = Some(password.clone());
        }
        if let Some(var) = &self.password_env {
            match std::env::var(var) {
                Ok(p) => camera.password = Some(p),
                Err(_) => bail!("param `password_env`: the environment variable {var} is not set"),
            }
        }
        let reconnect = match self.reconnect {
            Reconnect::On(false) => None,
            Reconnect::On(true) => Some(Duration::from_secs_f64(FIRST_BACKOFF_S.min(self.reconnect_max))),
            Reconnect::After(s) => Some(Duration::from_secs_f64(s)),
        };
        Ok(Config {
            camera,
            tcp: self.transport == TransportParam::Tcp,
            timeout: Duration::from_secs_f64(self.timeout),
            reconnect,
            reconnect_max: Duration::from_secs_f64(self.reconnect_max),
            clock: match self.clock {
                ClockParam::Arrival => ClockKind::Arrival,
                ClockParam::Sender => ClockKind::Sender,
            },
        })
    }
}

/// The output format of a stream, or why the rtsp source cannot give it.
pub fn output_format(info: &StreamInfo, what: &str) -> Result<FrameFormat> {
    gpuipc_video_codec::decode::frame_format(info, &what, "rtsp")
}

/// The stream a pipeline was planned for (`output`), as the decoders need it, when the camera's
/// description does not tell it: 4:2:0 (nv12 8-bit, p010 10-bit) of the planned size.
fn planned_info(codec: Codec, output: Option<FrameFormat>) -> Result<StreamInfo> {
    let Some(format) = output else { bail!("no output format was planned") };
    let bit_depth = match format.pixel_format() {
        Some(PixelFormat::Nv12) => 8,
        Some(PixelFormat::P010) => 10,
        _ => bail!("the pipeline was planned for {format} frames; the rtsp source makes nv12 and p010"),
    };
    Ok(StreamInfo {
        container: "RTSP",
        codec,
        profile: "(not described)".to_owned(),
        width: format.width,
        height: format.height,
        bit_depth,
        chroma: Chroma::C420,
        frame_rate: None,
        frames: 0,
    })
}

/// The line `validate` logs about a camera's stream.
fn describe_stream(info: &StreamInfo) -> String {
    let rate = match info.frame_rate {
        Some((n, 1)) => format!("{n} frames/s"),
        Some((n, d)) => format!("{:.3} frames/s", f64::from(n) / f64::from(d)),
        None => "frame rate not given".to_owned(),
    };
    format!(
        "{} {}, {}x{}, {}-bit {}, {rate}",
        info.codec.name(),
        info.profile,
        info.width,
        info.height,
        info.bit_depth,
        info.chroma.name()
    )
}

/// An rtsp stage instance.
pub struct Rtsp {
    decoder: LiveDecoder,
    queue: Arc<Queue>,
    stop: Arc<AtomicBool>,
    /// Until the first `process`: where to tell the receiving thread to PLAY, and the stream
    /// the decoder was made for.
    go: Option<(SyncSender<Go>, StreamInfo)>,
    /// The number the next frame gets, at the least.
    next_seq: u64,
    damaged: u64,
    what: String,
}

impl std::fmt::Debug for Rtsp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Rtsp({})", self.what)
    }
}

impl Plugin for Rtsp {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "rtsp",
        version: env!("CARGO_PKG_VERSION"),
        description: "a live RTSP camera (H.264, HEVC over RTP, TCP or UDP) decoded into nv12 or p010 frames, with NVDEC on the GPU or ffmpeg on the CPU; reconnects when the network fails",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 0,
        max_inputs: 0,
        accepts: &[],
        produces: &[PixelFormat::Nv12, PixelFormat::P010],
    };

    const LIVE: bool = true;

    /// The `# Params` table of the crate docs, for `gpuipc-host inspect`.
    const PARAMS: &'static [ParamInfo] = &[
        ParamInfo {
            name: "url",
            kind: "string",
            default: ParamInfo::REQUIRED,
            range: "",
            description: "the camera: `rtsp://[user[:password]@]host[:port]/path`; credentials are never shown in logs, errors, reports or metrics",
        },
        ParamInfo {
            name: "transport",
            kind: r#""tcp" | "udp""#,
            default: r#""tcp""#,
            range: "",
            description: "RTP interleaved on the RTSP connection (TCP), or over UDP",
        },
        ParamInfo {
            name: "user",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the user name, instead of the one in `url`",
        },
        ParamInfo {
            name: "password",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "the password, instead of the one in `url`",
        },
        ParamInfo {
            name: "password_env",
            kind: "string",
            default: ParamInfo::NONE,
            range: "",
            description: "an environment variable holding the password, so that it need not be in the pipeline file",
        },
        ParamInfo {
            name: "reconnect",
            kind: "bool or float",
            default: "true",
            range: "> 0 (seconds)",
            description: "connect again when the stream breaks or stalls: true (first wait 0.5 s), false (the stream ends), or the first wait in seconds; each failed try doubles the wait",
        },
        ParamInfo {
            name: "reconnect_max",
            kind: "float",
            default: "30.0",
            range: "> 0 (seconds)",
            description: "the longest wait between two tries",
        },
        ParamInfo {
            name: "timeout",
            kind: "float",
            default: "5.0",
            range: "> 0 (seconds)",
            description: "no packet for this long: the stream stalled, connect again; also the bound of each RTSP request",
        },
        ParamInfo {
            name: "queue",
            kind: "integer",
            default: "30",
            range: ">= 1",
            description: "access units received and not yet decoded, at most; beyond, whole access units are dropped up to the next key frame (counted dropped)",
        },
        ParamInfo {
            name: "clock",
            kind: r#""arrival" | "sender""#,
            default: r#""arrival""#,
            range: "",
            description: "frame stamps: the camera's clock put on the host's at the least delayed arrival, or the camera's wall clock from its RTCP sender reports",
        },
        ParamInfo {
            name: "width",
            kind: "integer",
            default: ParamInfo::NONE,
            range: "> 0, even",
            description: "with `height`: the stream's size, so the pipeline is planned (`validate`, `run`) without asking the camera; 8-bit 4:2:0 (nv12) is assumed, and a stream of another size or depth is refused when it comes",
        },
        ParamInfo {
            name: "height",
            kind: "integer",
            default: ParamInfo::NONE,
            range: "> 0, even",
            description: "with `width`: the stream's height",
        },
        ParamInfo {
            name: "codec",
            kind: r#""h264" | "hevc""#,
            default: ParamInfo::NONE,
            range: "",
            description: "the codec the camera must send; another is refused when the stream comes",
        },
        cpu::FFMPEG_PARAM,
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.validate()
    }

    /// Asks the camera what it sends (DESCRIBE); says it in the log (`validate` shows it).
    /// With `width` and `height` the camera is not asked: the stream is checked when it comes.
    fn negotiate(params: &Params, _inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        let cfg = params.config()?;
        if let (Some(w), Some(h)) = (params.width, params.height) {
            let format = FrameFormat::new(PixelFormat::Nv12, w, h);
            let codec = params.codec.map_or("H.264 or HEVC".to_owned(), |c| c.codec().name().to_owned());
            gpuipc_plugin_api::info!(
                "{}: planned as {codec}, {w}x{h}, 8-bit 4:2:0 (params; checked when the stream comes) -> {format}",
                cfg.what()
            );
            return Ok(Some(format));
        }
        let info = session::probe(&cfg).map_err(Error::new)?;
        let format = output_format(&info, &cfg.what())?;
        gpuipc_plugin_api::info!("{}: {} -> {format}", cfg.what(), describe_stream(&info));
        Ok(Some(format))
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<Rtsp> {
        let cfg = params.config()?;
        let what = cfg.what();
        let program = match ctx.domain {
            Domain::Cpu => Some(Program::for_param(params.ffmpeg.as_deref()).find()?),
            Domain::Cuda => None,
        };
        let queue = Arc::new(Queue::new(params.queue as usize));
        let stop = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel(1);
        let (go_tx, go_rx) = std::sync::mpsc::sync_channel(1);
        let (q, s, c) = (Arc::clone(&queue), Arc::clone(&stop), cfg.clone());
        std::thread::Builder::new()
            .name("rtsp-receive".into())
            .spawn(move || session::receive(c, q, s, started_tx, go_rx))
            .map_err(|e| Error::new(format!("cannot start the thread receiving {what}: {e}")))?;
        // DESCRIBE and SETUP, each bounded by the timeout; no PLAY before the first `process`.
        let wait = cfg.timeout * 3;
        let refuse = |why: String| {
            stop.store(true, Ordering::Relaxed);
            queue.close();
            Error::new(why)
        };
        let set_up = match started_rx.recv_timeout(wait) {
            Ok(Ok(set_up)) => set_up,
            Ok(Err(e)) => return Err(refuse(e)),
            Err(_) => return Err(refuse(format!("{what}: not set up in {:.1} s", wait.as_secs_f64()))),
        };
        if let Some(want) = params.codec
            && want.codec() != set_up.codec
        {
            return Err(refuse(format!(
                "{what} sends {} video, but param `codec` says {}",
                set_up.codec.name(),
                want.codec().name()
            )));
        }
        let info = match set_up.info {
            Some(info) => info,
            // No parameter sets in its description: the stream as planned, checked at its
            // first frame (the receiving thread fails the stage if it is another).
            None => planned_info(set_up.codec, output).map_err(|e| refuse(format!("{what}: {}", e.message())))?,
        };
        let format = output_format(&info, &what).map_err(|e| refuse(e.message().to_owned()))?;
        if output != Some(format) {
            let planned = output.map_or("no output".to_owned(), |f| f.to_string());
            let by = if params.width.is_some() { " (params `width` and `height`)" } else { "" };
            return Err(refuse(format!(
                "{what} sends {} {}x{} video ({format}), but the pipeline was planned for {planned}{by}",
                info.codec.name(),
                info.width,
                info.height
            )));
        }
        let feed = Arc::clone(&queue);
        let units: Units = Box::new(move |wait| feed.pop(wait));
        let decoder = match program {
            Some(program) => LiveDecoder::cpu(info.clone(), program, &what, units),
            None => LiveDecoder::cuda(info.clone(), set_up.sps.as_deref(), &what, ctx, units),
        }
        .map_err(|e| refuse(e.message().to_owned()))?;
        gpuipc_plugin_api::info!("{what}: set up ({}); PLAY when the pipeline starts", describe_stream(&info));
        let go = Some((go_tx, info));
        Ok(Rtsp { decoder, queue, stop, go, next_seq: 0, damaged: 0, what })
    }

    /// Each call hands on the next decoded picture, numbered after the frames skipped before it.
    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let out = output.ok_or_else(|| Error::new("an rtsp source needs an output frame"))?;
        // The pipeline is started and takes frames: the camera may send now.
        if let Some((go, info)) = self.go.take() {
            // The thread is gone only if it failed to set up again, which the queue says.
            let _ = go.send(info);
        }
        let decoded = match self.decoder.next_frame(out, NO_FRAME_WAIT)? {
            Next::Got(decoded) => decoded,
            // The camera is away (connecting again) or slow: the host calls again.
            Next::NotYet => {
                out.no_frame_yet();
                return Ok(());
            }
            // The receiving thread ended (reconnect = false): so does the stream, unless it
            // found the stream cannot go on.
            Next::Over => {
                if let Some(why) = self.queue.failure() {
                    bail!("{why}");
                }
                out.end_stream();
                return Ok(());
            }
        };
        let least = self.next_seq.max(out.info().seq);
        let seq = self.queue.number_of(decoded.key).map_or(least, |n| n.max(least));
        self.next_seq = seq + 1;
        if decoded.damaged {
            self.damaged += 1;
            out.mark_damaged();
        }
        out.relay(seq, decoded.key);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        self.queue.close();
        let counts = self.queue.counts();
        gpuipc_plugin_api::info!(
            "{}: {} frames dropped (the pipeline was behind), {} lost (connection), {} damaged",
            self.what,
            counts.dropped,
            counts.lost,
            self.damaged
        );
        Ok(())
    }
}

impl Drop for Rtsp {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.queue.close();
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;
    use gpuipc_plugin_api::testing::check_doc_examples;

    use super::*;

    #[test]
    fn params_are_checked_and_named_without_credentials() {
        let e = parse_params::<Rtsp>("transport = \"tcp\"").unwrap_err();
        assert!(e.message().contains("url"), "{e}");
        let p = parse_params::<Rtsp>(
            "url = \"http://admin:hunter2@cam/x\"\nreconnect = 60.0\nreconnect_max = 10.0\ntimeout = 0.0\nqueue = 0",
        )
        .unwrap();
        let e = Rtsp::check(&p, &[]).unwrap_err();
        assert_eq!(
            e.message(),
            "param `url`: `http://***@cam/x` is a http URL; the rtsp source reads rtsp:// URLs (RTSP over TCP, RTP over TCP or UDP); \
             param `reconnect` (60 s) is longer than `reconnect_max` (10 s); param `timeout` is 0; give seconds (> 0); \
             param `queue` is 0; give at least 1 access unit"
        );
        assert!(!format!("{p:?}").contains("hunter2"));
        let e = parse_params::<Rtsp>("url = \"rtsp://cam/x\"\ntransport = \"quic\"").unwrap_err();
        assert!(e.message().contains("transport"), "{e}");
    }

    #[test]
    fn credentials_come_from_the_url_params_or_the_environment() {
        let p = parse_params::<Rtsp>("url = \"rtsp://a:b@cam/x\"\nuser = \"c\"").unwrap();
        let cfg = p.config().unwrap();
        assert_eq!((cfg.camera.user.as_deref(), cfg.camera.password.as_deref()), (Some("c"), Some("b")));
        assert_eq!(cfg.what(), "rtsp://cam/x");
        let p = parse_params::<Rtsp>("url = \"rtsp://cam/x\"\npassword_env = \"GPUIPC_TEST_NO_SUCH_VAR\"").unwrap();
        let e = p.config().unwrap_err();
        assert_eq!(e.message(), "param `password_env`: the environment variable GPUIPC_TEST_NO_SUCH_VAR is not set");
        let p = parse_params::<Rtsp>("url = \"rtsp://cam/x\"\nreconnect = false").unwrap();
        assert_eq!(p.config().unwrap().reconnect, None);
    }

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<Rtsp>(include_str!("lib.rs"), "url = \"rtsp://cam/x\"");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), Rtsp::INFO.name, |text| {
            let params = parse_params::<Rtsp>(text).unwrap();
            params.validate().unwrap();
        });
    }
}
