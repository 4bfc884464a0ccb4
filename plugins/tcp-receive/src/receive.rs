//! The tcp-receive stage: params, the listening socket and its connections, and the frames
//! read into the output ring.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameDataMut, FrameFormat, FrameLayout, InputFrame, OutputFrame, ParamInfo,
    PixelFormat, Plugin, PluginInfo, ProcessContext, Result, bail, info, warn,
};
use gpuipc_tcp_wire::{self as wire, FrameHeader, Hello, WireError};
use rustix::event::{PollFd, PollFlags, poll};
use serde::Deserialize;

/// The `params` table of a tcp-receive stage.
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

/// A tcp-receive stage instance.
#[derive(Debug)]
pub struct TcpReceive {
    listen: SocketAddr,
    link: String,
    timeout: Duration,
    format: FrameFormat,
    frame_bytes: u64,
    listener: TcpListener,
    /// The sender's connection and its address.
    conn: Option<(TcpStream, SocketAddr)>,
    /// Connections accepted so far (the epoch of the link at this end).
    connections: u64,
    /// The frame last handed on is not acknowledged yet: it is once it is published, which it
    /// is when the runner asks for the next frame (or flushes).
    ack_due: bool,
    /// The sender's end of stream came and was acknowledged.
    ended: bool,
}

impl Plugin for TcpReceive {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "tcp-receive",
        version: env!("CARGO_PKG_VERSION"),
        description: "a source of the frames a tcp-send stage on another host sends, under their own numbers",
        domains: &[Domain::Cpu],
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
            description: "how long to wait for a sender, at start and after a connection breaks",
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
            bail!("tcp-receive is a source: it takes no inputs, got {}", inputs.len());
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
    ) -> Result<TcpReceive> {
        if ctx.domain != Domain::Cpu {
            bail!("tcp-receive runs in the cpu domain only (the ring at a network end is in host memory)");
        }
        let format = output.ok_or("tcp-receive has an output")?;
        let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
        let listen = wire::params::listen_address(&params.listen).map_err(Error::new)?;
        // std sets SO_REUSEADDR on Unix: a restarted receiver binds again while the old
        // connections are in TIME_WAIT.
        let listener = TcpListener::bind(listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| ReceiveError::Listen { link: params.link.clone(), listen, source })?;
        Ok(TcpReceive {
            listen,
            link: params.link,
            timeout: Duration::from_secs_f64(params.reconnect_timeout_s),
            format,
            frame_bytes: layout.total_bytes,
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
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let out = output.ok_or("tcp-receive has an output")?;
        // The runner asks for the next frame once the last is published: acknowledge it.
        self.acknowledge_due();
        let expected = out.info().seq;
        let need = self.frame_bytes;
        loop {
            if self.conn.is_none() {
                self.accept(Instant::now() + self.timeout)?;
            }
            if self.superseded()? {
                continue;
            }
            let FrameDataMut::Host(bytes) = out.data() else { bail!("tcp-receive writes host memory only") };
            let slot = bytes.get_mut(..need as usize).ok_or("output slot shorter than its frame")?;
            match self.read_frame(slot) {
                Ok(header) if header.ends_stream() => {
                    if self.send(wire::ACK_END) {
                        info!("link '{}': end of stream", self.link);
                        self.ended = true;
                        out.end_stream();
                        return Ok(());
                    }
                }
                Ok(header) if header.seq < expected => {
                    // Sent again by a sender that did not hear the acknowledgement; this ring
                    // has it already.
                    self.send(wire::ACK_FRAME);
                }
                Ok(header) => {
                    out.relay(header.seq, header.timestamp_ns);
                    self.ack_due = true;
                    return Ok(());
                }
                Err(WireError::Lost(e)) => self.lost(&e.to_string()),
                Err(WireError::Protocol(what)) => {
                    let peer = self.conn.as_ref().map_or(self.listen, |c| c.1);
                    return Err(ReceiveError::Protocol { link: self.link.clone(), peer, what }.into());
                }
            }
        }
    }

    fn flush(&mut self) -> Result<()> {
        self.acknowledge_due();
        if self.ended || self.conn.is_none() {
            return Ok(());
        }
        // This end stopped before the sender's end of stream (the pipeline's `frames` here, or
        // a stop): take the end if it comes, so the sender is not left waiting for a receiver.
        let Some((stream, _)) = self.conn.as_mut() else { return Ok(()) };
        let _ = stream.set_read_timeout(Some(self.timeout));
        match FrameHeader::read_from(stream) {
            Ok(h) if h.ends_stream() => {
                self.send(wire::ACK_END);
            }
            Ok(h) => warn!("link '{}': stopped before frame {}; the sender has more", self.link, h.seq),
            Err(e) => warn!("link '{}': stopped before the sender's end of stream ({e})", self.link),
        }
        Ok(())
    }
}

impl TcpReceive {
    /// Acknowledge the frame handed on last, if it is due.
    fn acknowledge_due(&mut self) {
        if std::mem::take(&mut self.ack_due) {
            self.send(wire::ACK_FRAME);
        }
    }

    /// Send one acknowledgement byte; `false` (and the connection dropped) if it broke.
    fn send(&mut self, ack: u8) -> bool {
        let Some((stream, _)) = self.conn.as_mut() else { return false };
        match stream.write_all(&[ack]) {
            Ok(()) => true,
            Err(e) => {
                self.lost(&e.to_string());
                false
            }
        }
    }

    fn lost(&mut self, why: &str) {
        if let Some((_, peer)) = self.conn.take() {
            warn!(
                "link '{}': connection {} from {peer} lost ({why}); waiting for the sender again",
                self.link, self.connections
            );
        }
    }

    /// Wait until the connection has bytes, or a new sender connects; `true` when a new one
    /// took the old one's place (a sender that reconnected before this end saw the old
    /// connection break, as over a network with a half-open connection).
    fn superseded(&mut self) -> Result<bool> {
        let Some((stream, _)) = self.conn.as_ref() else { return Ok(false) };
        let mut fds = [PollFd::new(stream, PollFlags::IN), PollFd::new(&self.listener, PollFlags::IN)];
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

    /// Read one frame header, and its payload into `slot`.
    fn read_frame(&mut self, slot: &mut [u8]) -> Result<FrameHeader, WireError> {
        let (stream, _) = self.conn.as_mut().ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))?;
        let header = FrameHeader::read_from(stream)?;
        if header.ends_stream() {
            return Ok(header);
        }
        if header.payload_len != slot.len() as u64 {
            return Err(WireError::Protocol(format!(
                "frame {} of {} bytes, the link's frames have {}",
                header.seq,
                header.payload_len,
                slot.len()
            )));
        }
        // Straight into the ring's slot; a frame cut short is never handed on.
        stream.read_exact(slot)?;
        Ok(header)
    }

    /// Accept a sender whose hello matches, before `deadline`.
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
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    let timeout = rustix::time::Timespec {
                        tv_sec: left.as_secs() as i64,
                        tv_nsec: i64::from(left.subsec_nanos()),
                    };
                    match poll(&mut fds, Some(&timeout)) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(ReceiveError::Poll { link: self.link.clone(), source: e.into() }.into()),
                    }
                }
                // A connection that was reset before it was accepted, and the like: take the next.
                Err(e) => warn!("link '{}': accepting on {} failed: {e}", self.link, self.listen),
            }
        }
    }

    /// Check a new connection's hello: `Ok(true)` accepted, `Ok(false)` not a usable sender
    /// (gone, or not speaking this protocol: keep waiting), an error for a sender of another
    /// link or format.
    fn handshake(&mut self, mut stream: TcpStream, peer: SocketAddr, left: Duration) -> Result<bool> {
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| stream.set_read_timeout(Some(left.max(Duration::from_millis(100)))));
        if let Err(e) = setup {
            warn!("link '{}': connection from {peer} unusable: {e}", self.link);
            return Ok(false);
        }
        let hello = match Hello::read_from(&mut stream) {
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
        if let Err(e) = wire::write_answer(&mut stream, Ok(())).and_then(|()| stream.set_read_timeout(None)) {
            warn!("link '{}': connection from {peer} closed before it was accepted: {e}", self.link);
            return Ok(false);
        }
        self.connections += 1;
        let local = stream.local_addr().map_or_else(|_| self.listen.to_string(), |a| a.to_string());
        info!("link '{}': connection {} from {peer} to {local}", self.link, self.connections);
        self.conn = Some((stream, peer));
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
        gpuipc_plugin_api::param_check::assert_declared::<TcpReceive>(include_str!("lib.rs"), REQUIRED);
    }

    #[test]
    fn check_names_every_bad_param() {
        let text =
            "listen = \"7448\"\nlink = \"a\"\nformat = \"rgb9\"\nwidth = 0\nheight = 2\nreconnect_timeout_s = -1.0";
        let params = parse_params::<TcpReceive>(text).unwrap();
        let e = TcpReceive::check(&params, &[]).unwrap_err().to_string();
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
    fn negotiates_the_format_of_its_params() {
        let params = parse_params::<TcpReceive>(REQUIRED).unwrap();
        assert_eq!(TcpReceive::negotiate(&params, &[]).unwrap(), Some(FrameFormat::new(PixelFormat::Rgb8, 4, 2)));
    }
}
