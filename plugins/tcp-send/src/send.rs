//! The tcp-send stage: params, the connection with its reconnections, and the frames sent.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, FrameLayout, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin,
    PluginInfo, ProcessContext, Result, bail, info, warn,
};
use gpuipc_tcp_wire::{self as wire, FrameHeader, Hello, WireError};
use serde::Deserialize;

/// How long to wait between two connection attempts the receiver refused or did not answer.
const RETRY_EVERY: Duration = Duration::from_millis(50);

/// The `params` table of a tcp-send stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub to: String,
    pub link: String,
    #[serde(default = "default_timeout")]
    pub connect_timeout_s: f64,
    #[serde(default = "default_window")]
    pub window: u32,
}

fn default_timeout() -> f64 {
    30.0
}

/// Frames in flight by default: 1. Measured on the 2-core development machine over loopback
/// (docs/plugins.md), 2 or 4 gained nothing the noise let through, and more than 1 weakens
/// what a killed sender's host can count (frames it sent that were still in its kernel's send
/// buffer are lost uncounted).
pub const DEFAULT_WINDOW: u32 = 1;
/// The most frames in flight a sender allows (each is a kept copy).
pub const MAX_WINDOW: u32 = 64;

fn default_window() -> u32 {
    DEFAULT_WINDOW
}

/// Why a send failed for good (a broken connection is not a failure: it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("link '{link}': could not connect to the receiver at {to} within {secs} s (last: {last})")]
    Unreachable { link: String, to: SocketAddr, secs: f64, last: String },
    #[error("link '{link}': the receiver at {to} refused the connection: {reason}")]
    Refused { link: String, to: SocketAddr, reason: String },
    #[error("link '{link}': the receiver at {to} broke the protocol: {what}")]
    Protocol { link: String, to: SocketAddr, what: String },
    #[error("link '{link}': input frame of {got} bytes, its layout needs {need}")]
    ShortFrame { link: String, got: usize, need: u64 },
}

impl From<SendError> for Error {
    fn from(e: SendError) -> Error {
        Error::new(e)
    }
}

/// A tcp-send stage instance.
#[derive(Debug)]
pub struct TcpSend {
    to: SocketAddr,
    link: String,
    timeout: Duration,
    format: FrameFormat,
    frame_bytes: u64,
    conn: Option<TcpStream>,
    /// Connections made so far; the hello carries it.
    epoch: u64,
    /// Frames sent and not yet acknowledged, oldest first, at most `window`: each is sent
    /// again, in order, on a new connection if the old one broke before its acknowledgement
    /// (the receiver acknowledges every frame in the order sent, and skips the ones its ring
    /// has). The copy is needed: the input slot goes back to the producer when `process`
    /// returns, and a receiver that dies loses what it had not published.
    unacked: VecDeque<Kept>,
    /// Buffers of acknowledged frames, reused so a frame costs one copy and no allocation.
    spare: Vec<Vec<u8>>,
    window: usize,
}

/// A frame sent and not yet acknowledged.
#[derive(Debug)]
struct Kept {
    header: FrameHeader,
    bytes: Vec<u8>,
}

impl Plugin for TcpSend {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "tcp-send",
        version: env!("CARGO_PKG_VERSION"),
        description: "sends every frame of its input over TCP to a tcp-receive stage on another host",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &PixelFormat::ALL,
        produces: &[],
    };

    const PARAMS: &'static [ParamInfo] = &[
        wire::params::TO,
        wire::params::SENDER_LINK,
        ParamInfo {
            name: "connect_timeout_s",
            kind: "float",
            default: "30.0",
            range: "> 0",
            description: "how long to keep trying to connect, at start and after a connection breaks",
        },
        ParamInfo {
            name: "window",
            kind: "integer",
            default: "1",
            range: "1 to 64",
            description: "frames sent ahead of the receiver's acknowledgements (each kept as a copy until acknowledged)",
        },
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let mut problems =
            wire::params::sender_problems(&params.to, &params.link, ("connect_timeout_s", params.connect_timeout_s));
        if !(1..=MAX_WINDOW).contains(&params.window) {
            problems.push(format!("param `window` must be 1 to {MAX_WINDOW}, got {}", params.window));
        }
        wire::params::checked(problems)
    }

    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if inputs.len() != 1 {
            bail!("tcp-send takes 1 input, got {}", inputs.len());
        }
        Ok(None)
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<TcpSend> {
        if ctx.domain != Domain::Cpu {
            bail!("tcp-send runs in the cpu domain only (the ring at a network end is in host memory)");
        }
        let format = *inputs.first().ok_or("tcp-send takes 1 input")?;
        let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
        let stage = TcpSend {
            to: wire::params::to_address(&params.to).map_err(Error::new)?,
            link: params.link,
            timeout: Duration::from_secs_f64(params.connect_timeout_s),
            format,
            frame_bytes: layout.total_bytes,
            conn: None,
            epoch: 0,
            unacked: VecDeque::new(),
            spare: Vec::new(),
            window: params.window.clamp(1, MAX_WINDOW) as usize,
        };
        // Connected at the first frame, not here: a run starts its frame loops only once every
        // stage is created, and a receiver answers the hello from its frame loop, so two hosts
        // whose links cross both ways (a -> b -> a) would each wait for the other's start.
        Ok(stage)
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        self.first_connect()?;
        let input = inputs.first().ok_or("tcp-send takes 1 input")?;
        let bytes = input.host_bytes().ok_or("tcp-send reads host memory only")?;
        let need = self.frame_bytes;
        let payload = bytes.get(..need as usize).ok_or_else(|| SendError::ShortFrame {
            link: self.link.clone(),
            got: bytes.len(),
            need,
        })?;
        // At most `window` frames unacknowledged: the receiver's full ring (no acknowledgements)
        // holds this stage here, and through its input ring the producer.
        while self.unacked.len() >= self.window {
            self.settle_one()?;
        }
        let header =
            FrameHeader { flags: 0, seq: input.info.seq, timestamp_ns: input.info.timestamp_ns, payload_len: need };
        // Kept, because the input slot goes back to the producer when this returns; copied
        // while the frame is sent from the slot, so the copy costs no time where a core is free.
        let mut kept = self.spare.pop().unwrap_or_default();
        kept.clear();
        let sent = match self.conn.as_mut() {
            Some(stream) => copy_while_sending(stream, &header, payload, &mut kept)?.map_err(WireError::Lost),
            None => {
                kept.extend_from_slice(payload);
                Err(WireError::Lost(std::io::ErrorKind::NotConnected.into()))
            }
        };
        self.unacked.push_back(Kept { header, bytes: kept });
        match sent {
            Ok(()) => Ok(()),
            // A new connection, and every unacknowledged frame (this one last) sent on it.
            Err(e) => self.recover(e),
        }
    }

    fn flush(&mut self) -> Result<()> {
        self.first_connect()?;
        while !self.unacked.is_empty() {
            self.settle_one()?;
        }
        // The end goes over a connection like a frame, and is sent again on a new one if the
        // old one breaks before the receiver acknowledges it.
        loop {
            let sent = self.stream().and_then(|s| s.write_all(&FrameHeader::end().to_bytes()).map_err(WireError::Lost));
            match sent.and_then(|()| self.read_ack(wire::ACK_END)) {
                Ok(()) => return Ok(()),
                Err(e) => self.recover(e)?,
            }
        }
    }
}

impl TcpSend {
    /// The first connection, made at the first frame or the end of stream (see `create`).
    fn first_connect(&mut self) -> Result<()> {
        if self.epoch == 0 && self.conn.is_none() { self.connect() } else { Ok(()) }
    }

    fn stream(&mut self) -> Result<&mut TcpStream, WireError> {
        self.conn.as_mut().ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))
    }

    /// Wait for the acknowledgement of the oldest unacknowledged frame; a connection that
    /// breaks meanwhile is made again and every unacknowledged frame sent again.
    fn settle_one(&mut self) -> Result<()> {
        match self.read_ack(wire::ACK_FRAME) {
            Ok(()) => {
                if let Some(done) = self.unacked.pop_front() {
                    self.spare.push(done.bytes);
                }
                Ok(())
            }
            Err(e) => self.recover(e),
        }
    }

    fn read_ack(&mut self, want: u8) -> Result<(), WireError> {
        let mut ack = [0u8; 1];
        self.stream()?.read_exact(&mut ack)?;
        match ack[0] {
            got if got == want => Ok(()),
            got => Err(WireError::Protocol(format!("acknowledgement {got:#04x}, expected {want:#04x}"))),
        }
    }

    /// After `e`: a lost connection is made again (within the timeout) and every
    /// unacknowledged frame sent again on it, oldest first; anything else fails.
    fn recover(&mut self, mut e: WireError) -> Result<()> {
        loop {
            self.conn = None;
            match e {
                WireError::Lost(io) => {
                    warn!(
                        "link '{}': connection {} to {} lost ({io}); connecting again",
                        self.link, self.epoch, self.to
                    );
                    self.connect()?;
                }
                WireError::Protocol(what) => {
                    return Err(SendError::Protocol { link: self.link.clone(), to: self.to, what }.into());
                }
            }
            match self.resend() {
                Ok(()) => return Ok(()),
                Err(again) => e = again,
            }
        }
    }

    /// Send every unacknowledged frame again, oldest first, on a connection just made.
    fn resend(&mut self) -> Result<(), WireError> {
        let stream = self.conn.as_mut().ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))?;
        if !self.unacked.is_empty() {
            info!("link '{}': sending {} unacknowledged frame(s) again", self.link, self.unacked.len());
        }
        for kept in &self.unacked {
            write_frame(stream, &kept.header, &kept.bytes)?;
        }
        Ok(())
    }

    /// Connect and say hello, retrying until the timeout.
    fn connect(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut last = String::from("no attempt");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SendError::Unreachable {
                    link: self.link.clone(),
                    to: self.to,
                    secs: self.timeout.as_secs_f64(),
                    last,
                }
                .into());
            }
            match self.try_connect(left) {
                Ok(stream) => {
                    self.conn = Some(stream);
                    return Ok(());
                }
                Err(WireError::Lost(e)) => last = e.to_string(),
                Err(WireError::Protocol(reason)) => {
                    return Err(SendError::Refused { link: self.link.clone(), to: self.to, reason }.into());
                }
            }
            std::thread::sleep(RETRY_EVERY.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// One attempt: connect, hello, answer. A refusal comes back as `Protocol`.
    fn try_connect(&mut self, left: Duration) -> Result<TcpStream, WireError> {
        let mut stream = TcpStream::connect_timeout(&self.to, left)?;
        // Frames are written whole; headers must not wait for the next frame (Nagle).
        stream.set_nodelay(true)?;
        // The answer comes at once from a receiver that is running; one that accepted in the
        // kernel but never answers is retried.
        stream.set_read_timeout(Some(left))?;
        self.epoch += 1;
        let hello =
            Hello { epoch: self.epoch, format: self.format, frame_bytes: self.frame_bytes, link: self.link.clone() };
        hello.write_to(&mut stream)?;
        wire::read_answer(&mut stream)?.map_err(WireError::Protocol)?;
        // Acknowledgements wait for the receiver's ring (backpressure): no timeout on them; a
        // receiver that is gone resets or closes the connection.
        stream.set_read_timeout(None)?;
        info!("link '{}': connection {} to {} from {}", self.link, self.epoch, self.to, stream.local_addr()?);
        Ok(stream)
    }
}

/// Frames from this size on are copied by a second thread while the first sends them (a
/// thread's start, some 30 µs, is then under 10 % of the copy).
const COPY_ASIDE_FROM: usize = 1 << 20;

/// Send `header` and `payload` on `stream` and copy `payload` into `kept`, at once for a large
/// frame. The outer error is the copying thread's failure; the inner one the send's.
fn copy_while_sending(
    stream: &mut TcpStream,
    header: &FrameHeader,
    payload: &[u8],
    kept: &mut Vec<u8>,
) -> Result<std::io::Result<()>> {
    if payload.len() < COPY_ASIDE_FROM {
        kept.extend_from_slice(payload);
        return Ok(write_frame(stream, header, payload));
    }
    let copied_aside: Option<std::io::Result<()>> = std::thread::scope(|scope| -> Result<_> {
        let copier = std::thread::Builder::new()
            .name("tcp-send-copy".into())
            .spawn_scoped(scope, || kept.extend_from_slice(payload));
        match copier {
            Ok(copier) => {
                let sent = write_frame(stream, header, payload);
                copier.join().map_err(|_| Error::new("tcp-send: the thread copying a frame failed"))?;
                Ok(Some(sent))
            }
            Err(_) => Ok(None),
        }
    })?;
    match copied_aside {
        Some(sent) => Ok(sent),
        // No thread to be had: copy here, then send.
        None => {
            kept.extend_from_slice(payload);
            Ok(write_frame(stream, header, payload))
        }
    }
}

/// A frame's header and bytes, in one call where the kernel allows (a 32-byte header alone
/// would go out as its own segment with `TCP_NODELAY`).
fn write_frame(stream: &mut TcpStream, header: &FrameHeader, bytes: &[u8]) -> std::io::Result<()> {
    let header = header.to_bytes();
    let mut parts = [std::io::IoSlice::new(&header), std::io::IoSlice::new(bytes)];
    let mut parts = &mut parts[..];
    while !parts.is_empty() {
        match stream.write_vectored(parts) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => std::io::IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;

    use super::*;

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<TcpSend>(
            include_str!("lib.rs"),
            "to = \"127.0.0.1:1\"\nlink = \"a->b\"",
        );
    }

    #[test]
    fn check_names_every_bad_param() {
        let params =
            parse_params::<TcpSend>("to = \"host:7\"\nlink = \"\"\nconnect_timeout_s = 0.0\nwindow = 0").unwrap();
        let e = TcpSend::check(&params, &[]).unwrap_err().to_string();
        for what in [
            "param `to`: \"host:7\" is not ADDRESS:PORT",
            "param `link`",
            "param `connect_timeout_s` must be > 0",
            "param `window` must be 1 to 64, got 0",
        ] {
            assert!(e.contains(what), "{what} in {e}");
        }
    }

    #[test]
    fn nobody_listening_fails_after_the_timeout_naming_the_address_and_link() {
        // A port just released: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let text = format!("to = \"127.0.0.1:{port}\"\nlink = \"a->b\"\nconnect_timeout_s = 0.2");
        let params = parse_params::<TcpSend>(&text).unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        // It connects at its first frame or its end of stream, whichever comes first.
        let mut stage = TcpSend::create(params, &[format], None, &gpuipc_plugin_api::testing::cpu_context()).unwrap();
        let e = stage.flush().unwrap_err().to_string();
        assert!(
            e.contains(&format!("link 'a->b': could not connect to the receiver at 127.0.0.1:{port} within 0.2 s")),
            "{e}"
        );
    }

    /// A receiver played by the test: accept, answer, then read frames (acknowledging them
    /// when `ack`) until the end of stream, or until `frames` were read; returns their numbers.
    fn fake_receiver(listener: &std::net::TcpListener, ack: bool, frames: usize, frame_bytes: usize) -> Vec<u64> {
        let (mut stream, _) = listener.accept().unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        Hello::read_from(&mut stream).unwrap();
        wire::write_answer(&mut stream, Ok(())).unwrap();
        let mut seqs = Vec::new();
        let mut payload = vec![0u8; frame_bytes];
        while seqs.len() < frames {
            let header = FrameHeader::read_from(&mut stream).unwrap();
            if header.ends_stream() {
                stream.write_all(&[wire::ACK_END]).unwrap();
                break;
            }
            stream.read_exact(&mut payload).unwrap();
            assert!(payload.iter().all(|&b| b == header.seq as u8), "frame {} carries its own bytes", header.seq);
            seqs.push(header.seq);
            if ack {
                stream.write_all(&[wire::ACK_FRAME]).unwrap();
            }
        }
        seqs
    }

    #[test]
    fn a_window_of_frames_goes_out_unacknowledged_and_all_of_it_again_after_a_reconnection() {
        const WINDOW: usize = 3;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        let frame_bytes = FrameLayout::for_format(format).unwrap().total_bytes as usize;
        let receiver = std::thread::spawn(move || {
            // The first connection takes a window of frames, acknowledges none and breaks:
            // the sender must have sent them all without waiting, and sends them again.
            let first = fake_receiver(&listener, false, WINDOW, frame_bytes);
            let second = fake_receiver(&listener, true, usize::MAX, frame_bytes);
            (first, second)
        });
        let text = format!("to = \"127.0.0.1:{port}\"\nlink = \"a->b\"\nconnect_timeout_s = 20.0\nwindow = {WINDOW}");
        let params = parse_params::<TcpSend>(&text).unwrap();
        let mut stage = TcpSend::create(params, &[format], None, &gpuipc_plugin_api::testing::cpu_context()).unwrap();
        for seq in 0..=WINDOW as u64 {
            let bytes = vec![seq as u8; frame_bytes];
            let info = gpuipc_plugin_api::FrameInfo::new(format, seq, 1000 + seq).unwrap();
            let input = InputFrame::host(info, &bytes).unwrap();
            stage.process(&[input], None, &ProcessContext { frame_index: seq, cuda_stream: 0 }).unwrap();
        }
        stage.flush().unwrap();
        let (first, second) = receiver.join().unwrap();
        assert_eq!(first, (0..WINDOW as u64).collect::<Vec<_>>());
        assert_eq!(
            second,
            (0..=WINDOW as u64).collect::<Vec<_>>(),
            "every unacknowledged frame again, in order, then the next"
        );
    }
}
