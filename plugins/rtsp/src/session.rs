//! The thread receiving a camera's stream: a current-thread tokio runtime of its own running
//! the `retina` RTSP client. It connects (DESCRIBE, SETUP), and on the first connection waits
//! for the stage to say go (its first `process`, once the whole pipeline is started) before it
//! sends PLAY, so nothing arrives while the pipeline is still starting. It stamps each access
//! unit and hands it to the [`Queue`] without ever waiting for the pipeline, and when the
//! connection breaks or the stream stalls (no packet for `timeout`) connects again after a
//! backoff that doubles from `reconnect` up to `reconnect_max`, counting the frames missed
//! meanwhile.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver as GoReceiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use gpuipc_video_codec::container::{Codec, StreamInfo, params};
use gpuipc_video_codec::decode::live::AccessUnit;
use retina::client::{Credentials, PlayOptions, Session, SessionOptions, SetupOptions, Transport};
use retina::codec::{CodecItem, FrameFormat, ParametersRef, VideoParameters};

use crate::clock::{Clock, ClockKind, ntp_to_unix_ns};
use crate::queue::Queue;
use crate::url::{CameraUrl, redact_with};

/// How a stage reaches its camera.
#[derive(Debug, Clone)]
pub struct Config {
    pub camera: CameraUrl,
    pub tcp: bool,
    /// No packet for this long: the stream stalled. Also the bound of each request.
    pub timeout: Duration,
    /// The first wait before connecting again; `None`: a broken stream ends the stage.
    pub reconnect: Option<Duration>,
    pub reconnect_max: Duration,
    pub clock: ClockKind,
}

impl Config {
    /// The address as messages show it (no credentials).
    pub fn what(&self) -> String {
        self.camera.url.to_string()
    }

    /// A message from the client or the server, with any credential taken out.
    fn clean(&self, text: impl std::fmt::Display) -> String {
        redact_with(&text.to_string(), self.camera.password.as_deref())
    }

    fn options(&self) -> SessionOptions {
        let creds = self.camera.user.as_ref().map(|user| Credentials {
            username: user.clone(),
            password: self.camera.password.clone().unwrap_or_default(),
        });
        SessionOptions::default().creds(creds).user_agent(format!("gpuipc-rtsp/{}", env!("CARGO_PKG_VERSION")))
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the RTSP client's runtime: {e}"))
}

/// Bound a request by the config's timeout.
async fn within<T>(
    cfg: &Config,
    doing: &str,
    f: impl std::future::Future<Output = Result<T, retina::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(cfg.timeout, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{doing} {}: {}", cfg.what(), cfg.clean(e))),
        Err(_) => Err(format!("{doing} {}: no answer in {:.1} s", cfg.what(), cfg.timeout.as_secs_f64())),
    }
}

/// A described session and the stream of it to receive.
struct Described {
    session: Session<retina::client::Described>,
    stream: usize,
    codec: Codec,
}

async fn describe(cfg: &Config) -> Result<Described, String> {
    let session = within(cfg, "cannot DESCRIBE", Session::describe(cfg.camera.url.clone(), cfg.options())).await?;
    let videos: Vec<(usize, &retina::client::Stream)> =
        session.streams().iter().enumerate().filter(|(_, s)| s.media() == "video").collect();
    let Some(&(stream, s)) = videos.first() else {
        let media: Vec<&str> = session.streams().iter().map(|s| s.media()).collect();
        return Err(format!("{} has no video stream (its streams: {})", cfg.what(), media.join(", ")));
    };
    let codec = match s.encoding_name().to_ascii_lowercase().as_str() {
        "h264" => Codec::H264,
        "h265" => Codec::Hevc,
        other => {
            return Err(format!(
                "{}: its video is {} ({other}); the rtsp source decodes H.264 and HEVC",
                cfg.what(),
                match other {
                    "jpeg" => "MJPEG",
                    "vp8" => "VP8",
                    "vp9" => "VP9",
                    "mp4v-es" => "MPEG-4 Part 2",
                    _ => "not H.264 or HEVC",
                }
            ));
        }
    };
    Ok(Described { session, stream, codec })
}

/// What a stream's parameters say, as the decoders need it.
fn stream_info(cfg: &Config, codec: Codec, p: &VideoParameters) -> Result<StreamInfo, String> {
    let sps = sps_of(codec, p.extra_data())
        .ok_or_else(|| format!("{}: its parameters carry no sequence parameter set", cfg.what()))?;
    let facts = match codec {
        Codec::Hevc => params::hevc_sps(&sps),
        _ => params::h264_sps(&sps),
    }
    .map_err(|e| format!("{}: {e}", cfg.what()))?;
    Ok(StreamInfo {
        container: "RTSP",
        codec,
        profile: facts.profile,
        width: facts.width,
        height: facts.height,
        bit_depth: facts.bit_depth,
        chroma: facts.chroma,
        frame_rate: facts.frame_rate.or(p.frame_rate()),
        frames: 0,
    })
}

/// The SPS NAL unit in an `avcC` (H.264) or `hvcC` (HEVC) record, or in Annex B data.
fn sps_of(codec: Codec, extra: &[u8]) -> Option<Vec<u8>> {
    let u16_at = |at: usize| Some(usize::from(u16::from_be_bytes([*extra.get(at)?, *extra.get(at + 1)?])));
    if extra.starts_with(&[0, 0, 0, 1]) || extra.starts_with(&[0, 0, 1]) {
        return annexb_nals(extra).into_iter().find(|n| is_sps(codec, n)).map(<[u8]>::to_vec);
    }
    match codec {
        Codec::Hevc => {
            let arrays = usize::from(*extra.get(22)?);
            let mut at = 23;
            for _ in 0..arrays {
                let kind = extra.get(at)? & 0x3f;
                let count = u16_at(at + 1)?;
                at += 3;
                for _ in 0..count {
                    let len = u16_at(at)?;
                    let nal = extra.get(at + 2..at + 2 + len)?;
                    if kind == params::HEVC_SPS {
                        return Some(nal.to_vec());
                    }
                    at += 2 + len;
                }
            }
            None
        }
        _ => {
            if extra.get(5)? & 0x1f == 0 {
                return None;
            }
            let len = u16_at(6)?;
            extra.get(8..8 + len).map(<[u8]>::to_vec)
        }
    }
}

fn is_sps(codec: Codec, nal: &[u8]) -> bool {
    match (codec, nal.first()) {
        (Codec::Hevc, Some(h)) => (h >> 1) & 0x3f == params::HEVC_SPS,
        (_, Some(h)) => h & 0x1f == params::H264_SPS,
        _ => false,
    }
}

fn annexb_nals(data: &[u8]) -> Vec<&[u8]> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= data.len() {
        if data[i..i + 3] == [0, 0, 1] {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &s)| {
            let mut end = starts.get(k + 1).map_or(data.len(), |&n| n - 3);
            while end > s && data[end - 1] == 0 {
                end -= 1;
            }
            &data[s..end]
        })
        .collect()
}

/// Ask the camera what it sends (plan time): a DESCRIBE, and when its answer has no parameter
/// sets, the stream until its first frame.
pub fn probe(cfg: &Config) -> Result<StreamInfo, String> {
    runtime()?.block_on(async {
        let mut d = describe(cfg).await?;
        if let Some(ParametersRef::Video(p)) = d.session.streams()[d.stream].parameters() {
            return stream_info(cfg, d.codec, p);
        }
        let setup = SetupOptions::default().transport(transport(cfg));
        within(cfg, "cannot SETUP", d.session.setup(d.stream, setup)).await?;
        let playing = within(cfg, "cannot PLAY", d.session.play(PlayOptions::default())).await?;
        let mut demuxed = playing.demuxed().map_err(|e| format!("{}: {}", cfg.what(), cfg.clean(e)))?;
        let deadline = tokio::time::Instant::now() + cfg.timeout;
        loop {
            let item = tokio::time::timeout_at(deadline, demuxed.next()).await.map_err(|_| {
                format!("{}: no frame with parameter sets in {:.1} s", cfg.what(), cfg.timeout.as_secs_f64())
            })?;
            match item {
                Some(Ok(CodecItem::VideoFrame(_))) => {
                    if let Some(ParametersRef::Video(p)) = demuxed.streams()[d.stream].parameters() {
                        return stream_info(cfg, d.codec, p);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("{}: {}", cfg.what(), cfg.clean(e))),
                None => return Err(format!("{}: the stream ended before its first frame", cfg.what())),
            }
        }
    })
}

fn transport(cfg: &Config) -> Transport {
    if cfg.tcp { Transport::Tcp(Default::default()) } else { Transport::Udp(Default::default()) }
}

/// What the first connection's DESCRIBE and SETUP found: the codec, and the stream as its
/// description's parameter sets tell it (`None` when it carries none: the stream is known at
/// its first frame only).
#[derive(Debug, Clone)]
pub struct SetUp {
    pub codec: Codec,
    pub info: Option<StreamInfo>,
    /// The description's sequence parameter set (NAL unit, no start code), when it has one:
    /// NVDEC's decoder is made from it before PLAY.
    pub sps: Option<Vec<u8>>,
}

/// What the receiving thread tells `create` once: the session set up, or why it could not be.
pub type Started = Result<SetUp, String>;

/// What the stage sends once it takes frames (its first `process`): PLAY now; every connection
/// must give this stream (the one its decoder was made for).
pub type Go = StreamInfo;

/// How often the thread waiting for go looks whether the stage stopped.
const GO_LOOK: Duration = Duration::from_millis(100);

/// The receiving thread's state across connections.
struct Receiver {
    cfg: Config,
    queue: Arc<Queue>,
    stop: Arc<AtomicBool>,
    clock: Clock,
    /// The stream planned: every connection must give it.
    planned: Option<StreamInfo>,
    started: Option<SyncSender<Started>>,
    /// Until the stage takes frames: where it says so.
    go: Option<GoReceiver<Go>>,
    /// When the last access unit arrived, and the spacing of frames (ns) last seen.
    last_arrival: Option<Instant>,
    frame_ns: Option<u64>,
    /// Whether the connection under way delivered a frame (the backoff then starts over).
    delivered: bool,
}

/// Receive `cfg`'s stream into `queue` until `stop`; tell `started` once what the first
/// connection set up (or why it could not), and PLAY only once `go` says the stage takes frames.
pub fn receive(
    cfg: Config,
    queue: Arc<Queue>,
    stop: Arc<AtomicBool>,
    started: SyncSender<Started>,
    go: GoReceiver<Go>,
) {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = started.send(Err(e));
            return;
        }
    };
    let clock = Clock::new(cfg.clock);
    let mut r = Receiver {
        cfg,
        queue,
        stop,
        clock,
        planned: None,
        started: Some(started),
        go: Some(go),
        last_arrival: None,
        frame_ns: None,
        delivered: false,
    };
    rt.block_on(r.run());
    r.queue.close();
}

impl Receiver {
    async fn run(&mut self) {
        let mut backoff = self.cfg.reconnect.unwrap_or_default();
        loop {
            let result = self.connection().await;
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let why = match result {
                Ok(()) => return,
                Err(why) => why,
            };
            if self.queue.failure().is_some() {
                return;
            }
            if let Some(started) = self.started.take() {
                // Never connected: the stage fails, naming why.
                let _ = started.send(Err(why));
                return;
            }
            let Some(first) = self.cfg.reconnect else {
                gpuipc_plugin_api::error!("{why}; reconnect = false, so the stream ends");
                return;
            };
            if self.delivered_since_backoff() {
                backoff = first;
            }
            gpuipc_plugin_api::warn!("{why}; connecting again in {:.1} s", backoff.as_secs_f64());
            let until = Instant::now() + backoff;
            while Instant::now() < until {
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50).min(until - Instant::now())).await;
            }
            backoff = (backoff * 2).min(self.cfg.reconnect_max);
        }
    }

    fn delivered_since_backoff(&mut self) -> bool {
        std::mem::take(&mut self.delivered)
    }

    /// One connection, until it breaks, stalls or the stage stops (`Ok`).
    async fn connection(&mut self) -> Result<(), String> {
        let what = self.cfg.what();
        let mut d = describe(&self.cfg).await?;
        let setup = SetupOptions::default().transport(transport(&self.cfg)).frame_format(FrameFormat::SIMPLE);
        within(&self.cfg, "cannot SETUP", d.session.setup(d.stream, setup)).await?;
        if let Some(started) = self.started.take() {
            let (info, sps) = match d.session.streams()[d.stream].parameters() {
                Some(ParametersRef::Video(p)) => {
                    (Some(stream_info(&self.cfg, d.codec, p)?), sps_of(d.codec, p.extra_data()))
                }
                _ => (None, None),
            };
            let _ = started.send(Ok(SetUp { codec: d.codec, info, sps }));
        }
        if !self.wait_for_go() {
            return Ok(());
        }
        let playing = within(&self.cfg, "cannot PLAY", d.session.play(PlayOptions::default())).await?;
        let mut demuxed = playing.demuxed().map_err(|e| format!("{what}: {}", self.cfg.clean(e)))?;
        self.clock.restart();
        let mut first = true;
        let mut last_packet = Instant::now();
        let mut last_media: Option<i128> = None;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            let item = match tokio::time::timeout(Duration::from_millis(100), demuxed.next()).await {
                Err(_) => {
                    if last_packet.elapsed() >= self.cfg.timeout {
                        return Err(format!(
                            "{what}: the stream stalled: no packet for {:.1} s",
                            self.cfg.timeout.as_secs_f64()
                        ));
                    }
                    continue;
                }
                Ok(None) => return Err(format!("{what}: the server ended the stream")),
                Ok(Some(Err(e))) => return Err(format!("{what}: {}", self.cfg.clean(e))),
                Ok(Some(Ok(item))) => item,
            };
            last_packet = Instant::now();
            match item {
                CodecItem::VideoFrame(frame) if frame.stream_id() == d.stream => {
                    if first || frame.has_new_parameters() {
                        let Some(ParametersRef::Video(p)) = demuxed.streams()[d.stream].parameters() else {
                            return Err(format!("{what}: a frame came before the stream's parameter sets"));
                        };
                        let info = stream_info(&self.cfg, d.codec, p)?;
                        self.check_planned(info)?;
                    }
                    if first {
                        first = false;
                        let lost = self.lost_while_away();
                        if lost > 0 {
                            gpuipc_plugin_api::warn!(
                                "{what}: connected again; about {lost} frames were lost meanwhile"
                            );
                        } else if self.last_arrival.is_some() {
                            gpuipc_plugin_api::warn!("{what}: connected again");
                        }
                        self.queue.reconnected(lost);
                    }
                    let ts = frame.timestamp();
                    let media_ns = i128::from(ts.elapsed()) * 1_000_000_000 / i128::from(ts.clock_rate().get());
                    if let Some(before) = last_media.replace(media_ns)
                        && media_ns > before
                    {
                        self.frame_ns = u64::try_from(media_ns - before).ok();
                    }
                    let arrival_ns = now_ns();
                    let key = self.clock.stamp(media_ns, arrival_ns);
                    let key_frame = frame.is_random_access_point();
                    self.queue.push(AccessUnit { data: frame.into_data(), key, arrival_ns }, key_frame);
                    self.last_arrival = Some(Instant::now());
                    self.delivered = true;
                }
                CodecItem::Rtcp(rtcp) => {
                    if let Some(ts) = rtcp.rtp_timestamp() {
                        let media_ns = i128::from(ts.elapsed()) * 1_000_000_000 / i128::from(ts.clock_rate().get());
                        for pkt in rtcp.pkts() {
                            if let Ok(Some(sr)) = pkt.as_sender_report() {
                                self.clock.sender_report(media_ns, ntp_to_unix_ns(sr.ntp_timestamp().0));
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Frames the camera sent while no connection received them: the time since the last
    /// access unit arrived, in frames of the stream's spacing, less the one due anyway.
    fn lost_while_away(&self) -> u64 {
        match (self.last_arrival, self.frame_ns) {
            (Some(at), Some(frame_ns)) if frame_ns > 0 => {
                (at.elapsed().as_nanos() / u128::from(frame_ns)).saturating_sub(1) as u64
            }
            _ => 0,
        }
    }

    /// Wait, before the first PLAY, until the stage takes frames; the stream it started for is
    /// then the one every connection must give. `false`: the stage stopped meanwhile.
    ///
    /// The wait blocks this thread's runtime, which has nothing else to run: the session is
    /// set up and idle (retina keeps a session alive while it plays only; a server that dropped
    /// it meanwhile fails the PLAY, and the source connects again).
    fn wait_for_go(&mut self) -> bool {
        let Some(go) = &self.go else { return true };
        loop {
            match go.recv_timeout(GO_LOOK) {
                Ok(planned) => {
                    self.planned = Some(planned);
                    self.go = None;
                    return true;
                }
                Err(RecvTimeoutError::Timeout) if !self.stop.load(Ordering::Relaxed) => {}
                // Stopped, or the stage is gone.
                Err(_) => return false,
            }
        }
    }

    /// Every connection must give the stream the stage was started for. The first connection's
    /// stream not being it (its description had no parameter sets, or told another stream than
    /// its frames) fails the stage; a later connection's is refused, and the source tries again.
    fn check_planned(&mut self, info: StreamInfo) -> Result<(), String> {
        let Some(planned) = &self.planned else {
            // Not playing before go, which sets it.
            self.planned = Some(info);
            return Ok(());
        };
        let key = |i: &StreamInfo| (i.codec, i.width, i.height, i.bit_depth, i.chroma);
        if key(planned) == key(&info) {
            return Ok(());
        }
        let (now, was) = (
            format!("{} {}x{} {}-bit", info.codec.name(), info.width, info.height, info.bit_depth),
            format!("{} {}x{} {}-bit", planned.codec.name(), planned.width, planned.height, planned.bit_depth),
        );
        if self.last_arrival.is_none() {
            let why =
                format!("{} sends {now} video, but the stage was started for {was} (as planned)", self.cfg.what());
            self.queue.fail(why.clone());
            return Err(why);
        }
        Err(format!("{}: the camera now sends {now}, but the stage was started for {was}", self.cfg.what()))
    }
}
