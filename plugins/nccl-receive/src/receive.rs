//! The nccl-receive stage: params, the listening socket, its connections and their
//! communicators, and the frames received into the output ring's device memory.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::cuda::{NcclId, NcclPair, RawStream, nccl_available};
use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, FrameLayout, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin,
    PluginInfo, ProcessContext, Result, bail, info, warn,
};
use gpuipc_tcp_wire::{self as wire, FrameHeader, Hello, Payloads, WireError};
use rustix::event::{PollFd, PollFlags, poll};
use serde::Deserialize;

/// The `params` table of an nccl-receive stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub listen: String,
    pub link: String,
    pub format: String,
    pub width: u32,
    pub height: u32,
    #[serde(default = "default_timeout")]
    pub reconnect_timeout_s: f64,
}

fn default_timeout() -> f64 {
    30.0
}

/// Why the stage fails.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    #[error("link '{link}': cannot listen on {listen}: {source}")]
    Listen { link: String, listen: SocketAddr, source: std::io::Error },
    #[error("no sender connected to {listen} for link '{link}' within {secs} s")]
    NoSender { link: String, listen: SocketAddr, secs: f64 },
    #[error("{0}")]
    Refused(String),
    #[error("link '{link}': the sender at {peer} broke the protocol: {what}")]
    Protocol { link: String, peer: SocketAddr, what: String },
    #[error("link '{link}': waiting on the connection failed: {source}")]
    Poll { link: String, source: std::io::Error },
}

impl From<ReceiveError> for Error {
    fn from(e: ReceiveError) -> Error {
        Error::new(e)
    }
}

/// One accepted sender: the control connection, its address and the communicator.
#[derive(Debug)]
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    pair: NcclPair,
}

/// An nccl-receive stage instance.
#[derive(Debug)]
pub struct NcclReceive {
    listen: SocketAddr,
    link: String,
    timeout: Duration,
    format: FrameFormat,
    frame_bytes: u64,
    /// The stage's context and stream: the communicator's, and where every receive goes.
    on: RawStream,
    listener: TcpListener,
    conn: Option<Connection>,
    /// Connections accepted so far.
    connections: u64,
    /// The frame last handed on is acknowledged when the runner asks for the next one (it is
    /// published by then).
    ack_due: bool,
    ended: bool,
}

impl Plugin for NcclReceive {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "nccl-receive",
        version: env!("CARGO_PKG_VERSION"),
        description: "a source of the frames an nccl-send stage on another host sends GPU to GPU over NCCL, under their own numbers",
        domains: &[Domain::Cuda],
        min_inputs: 0,
        max_inputs: 0,
        accepts: &[],
        produces: &PixelFormat::ALL,
    };

    const PARAMS: &'static [ParamInfo] = &[
        wire::params::LISTEN,
        wire::params::RECEIVER_LINK,
        wire::params::FORMAT,
        wire::params::WIDTH,
        wire::params::HEIGHT,
        ParamInfo {
            name: "reconnect_timeout_s",
            kind: "float",
            default: "30.0",
            range: "> 0",
            description: "how long to wait for a sender (and its communicator, and a frame's bytes), at start and after a connection breaks",
        },
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let format = (params.format.as_str(), params.width, params.height);
        wire::params::checked(wire::params::receiver_problems(
            &params.listen,
            &params.link,
            format,
            ("reconnect_timeout_s", params.reconnect_timeout_s),
        ))
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if !inputs.is_empty() {
            bail!("nccl-receive is a source: it takes no inputs, got {}", inputs.len());
        }
        wire::params::frame_format(&params.format, params.width, params.height)
            .map(Some)
            .map_err(|p| Error::new(p.join("; ")))
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<NcclReceive> {
        if ctx.domain != Domain::Cuda {
            bail!(
                "nccl-receive runs in the cuda domain only (it receives into the ring's device memory); give it device = \"cuda:N\""
            );
        }
        if !nccl_available() {
            // The library's own error says where it was looked for and what to do.
            NcclId::new()?;
        }
        let format = output.ok_or("nccl-receive has an output")?;
        let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
        let listen = wire::params::listen_address(&params.listen).map_err(Error::new)?;
        let listener = TcpListener::bind(listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| ReceiveError::Listen { link: params.link.clone(), listen, source })?;
        Ok(NcclReceive {
            listen,
            link: params.link,
            timeout: Duration::from_secs_f64(params.reconnect_timeout_s),
            format,
            frame_bytes: layout.total_bytes,
            on: RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream },
            listener,
            conn: None,
            connections: 0,
            ack_due: false,
            ended: false,
        })
    }

    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        if ctx.cuda_stream != self.on.stream {
            bail!("nccl-receive: the runner's stream changed");
        }
        let out = output.ok_or("nccl-receive has an output")?;
        self.acknowledge_due();
        let expected = out.info().seq;
        let buffer = out.device_buffer().ok_or("nccl-receive writes device memory only")?;
        if buffer.len < self.frame_bytes {
            bail!("output slot of {} bytes shorter than its frame ({})", buffer.len, self.frame_bytes);
        }
        loop {
            if self.conn.is_none() {
                self.accept(Instant::now() + self.timeout)?;
            }
            if self.superseded()? {
                continue;
            }
            let header = match self.read_header() {
                Ok(h) => h,
                Err(WireError::Lost(e)) => {
                    self.lost(&e.to_string());
                    continue;
                }
                Err(WireError::Protocol(what)) => {
                    let peer = self.conn.as_ref().map_or(self.listen, |c| c.peer);
                    return Err(ReceiveError::Protocol { link: self.link.clone(), peer, what }.into());
                }
            };
            if header.ends_stream() {
                if self.send(wire::ACK_END) {
                    info!("link '{}': end of stream", self.link);
                    self.ended = true;
                    out.end_stream();
                    return Ok(());
                }
                continue;
            }
            // Straight into the slot; the frame is handed on only once the GPU has it whole.
            if let Err(what) = self.receive(buffer.addr) {
                self.lost(&what);
                continue;
            }
            if header.seq < expected {
                // Sent again by a sender that did not hear the acknowledgement; the ring has
                // it already, and this slot's bytes are not published.
                self.send(wire::ACK_FRAME);
                continue;
            }
            out.relay(header.seq, header.timestamp_ns);
            self.ack_due = true;
            return Ok(());
        }
    }

    fn flush(&mut self) -> Result<()> {
        self.acknowledge_due();
        if self.ended {
            return Ok(());
        }
        let Some(conn) = self.conn.as_mut() else { return Ok(()) };
        // Stopped before the sender's end of stream: take the end if it comes, so the sender
        // is not left waiting.
        let _ = conn.stream.set_read_timeout(Some(self.timeout));
        match FrameHeader::read_from(&mut conn.stream) {
            Ok(h) if h.ends_stream() => {
                self.send(wire::ACK_END);
            }
            Ok(h) => warn!("link '{}': stopped before frame {}; the sender has more", self.link, h.seq),
            Err(e) => warn!("link '{}': stopped before the sender's end of stream ({e})", self.link),
        }
        Ok(())
    }
}

impl NcclReceive {
    fn acknowledge_due(&mut self) {
        if std::mem::take(&mut self.ack_due) {
            self.send(wire::ACK_FRAME);
        }
    }

    /// Send one acknowledgement byte; `false` (and the connection dropped) if it broke.
    fn send(&mut self, ack: u8) -> bool {
        let Some(conn) = self.conn.as_mut() else { return false };
        match conn.stream.write_all(&[ack]) {
            Ok(()) => true,
            Err(e) => {
                self.lost(&e.to_string());
                false
            }
        }
    }

    /// Drop the connection; its communicator is aborted with it (ending a receive the GPU may
    /// be blocked in).
    fn lost(&mut self, why: &str) {
        if let Some(conn) = self.conn.take() {
            warn!(
                "link '{}': connection {} from {} lost ({why}); waiting for the sender again",
                self.link, self.connections, conn.peer
            );
        }
    }

    fn read_header(&mut self) -> Result<FrameHeader, WireError> {
        let conn = self.conn.as_mut().ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))?;
        let header = FrameHeader::read_from(&mut conn.stream)?;
        if !header.ends_stream() && header.payload_len != self.frame_bytes {
            return Err(WireError::Protocol(format!(
                "frame {} of {} bytes, the link's frames have {}",
                header.seq, header.payload_len, self.frame_bytes
            )));
        }
        Ok(header)
    }

    /// Receive one frame's bytes at `dst` and wait until the GPU has them; the error's text
    /// when NCCL failed or the sender went away meanwhile.
    fn receive(&mut self, dst: u64) -> std::result::Result<(), String> {
        let (len, stream, deadline) = (self.frame_bytes as usize, self.on.stream, Instant::now() + self.timeout);
        let Some(Connection { stream: tcp, pair, .. }) = self.conn.as_mut() else { return Err("not connected".into()) };
        pair.recv(dst, len, stream, deadline, &mut || wire::peer_gone(tcp)).map_err(|e| e.to_string())?;
        pair.wait_done(deadline, &mut || wire::peer_gone(tcp)).map_err(|e| e.to_string())
    }

    /// Wait until the connection has bytes, or a new sender connects; `true` when a new one
    /// took the old one's place (a sender that reconnected before this end saw the old
    /// connection break).
    fn superseded(&mut self) -> Result<bool> {
        let Some(conn) = self.conn.as_ref() else { return Ok(false) };
        let mut fds = [PollFd::new(&conn.stream, PollFlags::IN), PollFd::new(&self.listener, PollFlags::IN)];
        loop {
            match poll(&mut fds, None) {
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(ReceiveError::Poll { link: self.link.clone(), source: e.into() }.into()),
            }
        }
        if !fds[0].revents().is_empty() || fds[1].revents().is_empty() {
            return Ok(false);
        }
        self.lost("a new connection came");
        self.accept(Instant::now() + self.timeout)?;
        Ok(true)
    }

    /// Accept a sender whose hello matches and whose communicator forms, before `deadline`.
    fn accept(&mut self, deadline: Instant) -> Result<()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    if self.handshake(stream, peer, left)? {
                        return Ok(());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if left.is_zero() {
                        return Err(ReceiveError::NoSender {
                            link: self.link.clone(),
                            listen: self.listen,
                            secs: self.timeout.as_secs_f64(),
                        }
                        .into());
                    }
                    std::thread::sleep(left.min(Duration::from_millis(5)));
                }
                Err(e) => warn!("link '{}': accepting on {} failed: {e}", self.link, self.listen),
            }
        }
    }

    /// Check a new connection's hello, send the unique id and join the communicator:
    /// `Ok(true)` accepted, `Ok(false)` not a usable sender (keep waiting), an error for a
    /// sender of another link or format.
    fn handshake(&mut self, mut stream: TcpStream, peer: SocketAddr, left: Duration) -> Result<bool> {
        let left = left.max(Duration::from_millis(100));
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| stream.set_read_timeout(Some(left)));
        if let Err(e) = setup {
            warn!("link '{}': connection from {peer} unusable: {e}", self.link);
            return Ok(false);
        }
        let hello = match Hello::read_for(&mut stream, Payloads::Nccl) {
            Ok(hello) => hello,
            Err(WireError::Lost(e)) => {
                warn!("link '{}': connection from {peer} closed before its hello: {e}", self.link);
                return Ok(false);
            }
            Err(WireError::Protocol(what)) => {
                warn!("link '{}': connection from {peer} refused: {what}", self.link);
                let _ = wire::write_answer(&mut stream, Err(&what));
                return Ok(false);
            }
        };
        let refusal = if hello.link != self.link {
            Some(format!(
                "the sender at {peer} sends link '{}', this receiver at {} takes link '{}'",
                hello.link, self.listen, self.link
            ))
        } else if (hello.format, hello.frame_bytes) != (self.format, self.frame_bytes) {
            Some(format!(
                "link '{}': the sender sends {}, the receiver expects {}",
                self.link,
                wire::params::describe(hello.format, hello.frame_bytes),
                wire::params::describe(self.format, self.frame_bytes)
            ))
        } else {
            None
        };
        if let Some(reason) = refusal {
            let _ = wire::write_answer(&mut stream, Err(&reason));
            return Err(ReceiveError::Refused(reason).into());
        }
        // A fresh id for every connection: the bootstrap of a new communicator.
        let id = NcclId::new()?;
        if let Err(e) =
            wire::write_answer(&mut stream, Ok(())).and_then(|()| wire::write_nccl_id(&mut stream, &id.to_bytes()))
        {
            warn!("link '{}': connection from {peer} closed before it was accepted: {e}", self.link);
            return Ok(false);
        }
        let pair = match NcclPair::connect(self.on, &id, 1, Instant::now() + left, &mut || wire::peer_gone(&stream)) {
            Ok(pair) => pair,
            Err(e) => {
                warn!(
                    "link '{}': the NCCL communicator with {peer} did not form ({e}); waiting for the sender again",
                    self.link
                );
                return Ok(false);
            }
        };
        if let Err(e) = stream.set_read_timeout(None) {
            warn!("link '{}': connection from {peer} unusable: {e}", self.link);
            return Ok(false);
        }
        self.connections += 1;
        let local = stream.local_addr().map_or_else(|_| self.listen.to_string(), |a| a.to_string());
        info!("link '{}': connection {} from {peer} to {local}, NCCL rank 1", self.link, self.connections);
        self.conn = Some(Connection { stream, peer, pair });
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;

    use super::*;

    const REQUIRED: &str = "listen = \"127.0.0.1:0\"\nlink = \"a->b\"\nformat = \"rgb8\"\nwidth = 4\nheight = 2";

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<NcclReceive>(include_str!("lib.rs"), REQUIRED);
    }

    #[test]
    fn check_names_every_bad_param() {
        let text =
            "listen = \"7448\"\nlink = \"a\"\nformat = \"rgb9\"\nwidth = 0\nheight = 2\nreconnect_timeout_s = -1.0";
        let params = parse_params::<NcclReceive>(text).unwrap();
        let e = NcclReceive::check(&params, &[]).unwrap_err().to_string();
        for what in [
            "param `listen`: \"7448\" is not ADDRESS:PORT",
            "unknown pixel format \"rgb9\"",
            "param `width` must be > 0",
            "param `reconnect_timeout_s`",
        ] {
            assert!(e.contains(what), "{what} in {e}");
        }
    }

    #[test]
    fn negotiates_the_format_of_its_params_in_the_cuda_domain_only() {
        assert_eq!(NcclReceive::INFO.domains, &[Domain::Cuda]);
        let params = parse_params::<NcclReceive>(REQUIRED).unwrap();
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 2);
        assert_eq!(NcclReceive::negotiate(&params, &[]).unwrap(), Some(format));
        let e = NcclReceive::create(params, &[], Some(format), &gpuipc_plugin_api::testing::cpu_context()).unwrap_err();
        assert!(e.to_string().contains("cuda domain only"), "{e}");
    }

    #[test]
    fn without_nccl_create_says_where_to_get_it() {
        if nccl_available() {
            eprintln!("NCCL is present; the missing-library path is not exercised here");
            return;
        }
        let params = parse_params::<NcclReceive>(REQUIRED).unwrap();
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 2);
        let ctx = CreateContext {
            domain: Domain::Cuda,
            device_ordinal: Some(0),
            cuda_context: 0x1000,
            cuda_stream: 0x2000,
            ..gpuipc_plugin_api::testing::cpu_context()
        };
        let e = NcclReceive::create(params, &[], Some(format), &ctx).unwrap_err().to_string();
        assert!(e.contains("libnccl.so.2") && e.contains("nvidia-nccl-cu13"), "{e}");
    }
}
