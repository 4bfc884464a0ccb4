//! The sender's end of a link's session, for `tcp-send` and `nccl-send` alike: connecting
//! (retrying until the timeout), the hello and its answer, the window of frames sent and not
//! yet acknowledged, a new connection (a new epoch) when one breaks with every unacknowledged
//! frame sent again on it, and the end of stream. How a frame's payload travels is the
//! plugin's [`SendCarrier`].

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{Error, FrameFormat, Result, info, warn};

use crate::{ACK_END, ACK_FRAME, Connection, FrameHeader, Hello, Payloads, WireError, not_connected, read_answer};

/// How long to wait between two connection attempts the receiver refused or did not answer.
pub const RETRY_EVERY: Duration = Duration::from_millis(50);

/// Sends of one frame whose payload the carrier may fail (NCCL), each on a new connection,
/// before the stage fails: a broken link is retried, a frame that cannot be sent at all is not
/// retried for ever.
pub const MAX_PAYLOAD_FAILURES: u32 = 3;

/// How a sender's payloads travel: what a connection holds for them besides its TCP stream,
/// what is kept of a frame until it is acknowledged, and how a kept frame is sent.
pub trait SendCarrier {
    /// A connection's payload path, made once the receiver accepted (NCCL: the communicator;
    /// TCP: nothing, the payloads follow their headers on the stream).
    type Path;
    /// What the session keeps of a frame until its acknowledgement; the values of
    /// acknowledged frames come back from [`SenderSession::reuse`].
    type Kept;
    /// How the payloads travel; the hello says so.
    const PAYLOADS: Payloads;
    /// What the log line of a new connection adds (`", NCCL rank 0"`).
    const PATH_NOTE: &'static str;

    /// Make the payload path of a connection whose hello the receiver just accepted, within
    /// `left`. A path that cannot form is [`WireError::Lost`] (the connection is tried again).
    fn join(&mut self, stream: &mut TcpStream, left: Duration) -> Result<Self::Path, WireError>;

    /// Send a kept frame on `conn`: its header over the stream, its payload by the path.
    /// `timeout` bounds a payload that waits for the receiver.
    fn send(
        &mut self,
        conn: &mut Connection<Self::Path>,
        header: &FrameHeader,
        kept: &Self::Kept,
        timeout: Duration,
    ) -> Result<(), Broken>;
}

/// What broke while sending: the connection or the protocol ([`WireError`]), or the payload
/// path on its own (NCCL), which is made again with the connection.
#[derive(Debug)]
pub enum Broken {
    Wire(WireError),
    /// Frame `seq`'s payload could not be sent: `what`.
    Payload {
        seq: u64,
        what: String,
    },
}

impl From<WireError> for Broken {
    fn from(e: WireError) -> Broken {
        Broken::Wire(e)
    }
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
    ShortFrame { link: String, got: u64, need: u64 },
    #[error("link '{link}': frame {seq} could not be sent over {over} {tries} times: {last}")]
    Payload { link: String, seq: u64, over: &'static str, tries: u32, last: String },
}

impl From<SendError> for Error {
    fn from(e: SendError) -> Error {
        Error::new(e)
    }
}

/// What a sender is told at create: where its receiver is, the link, and its frames.
#[derive(Debug, Clone)]
pub struct SenderSetup {
    pub to: SocketAddr,
    pub link: String,
    /// How long to keep trying to connect, at start and after a connection breaks.
    pub timeout: Duration,
    pub format: FrameFormat,
    /// One frame's bytes in the ring's layout.
    pub frame_bytes: u64,
    /// Frames sent ahead of the receiver's acknowledgements, at least 1.
    pub window: usize,
    /// TCP connections of the link, 1 to [`crate::MAX_CONNECTIONS`]: each carries its stripe
    /// of every payload ([`crate::stripe`]), the first also the headers and acknowledgements.
    pub connections: usize,
}

/// Where a sender's time went, logged at its end of stream (docs/benchmarks.md, "TCP bridge
/// against a plain TCP stream"): the session counts the waits for acknowledgements, the
/// carrier what it measures of its own.
#[derive(Debug, Clone, Default)]
pub struct SendTimes {
    /// Frames sent (the first time).
    pub frames: u64,
    /// Waiting for acknowledgements with the window full.
    pub acks: Duration,
    /// Writing frames (headers and payloads), from the first byte to the last.
    pub writing: Duration,
    /// Waiting, after a frame was written, for the copy kept of it.
    pub copy_after: Duration,
}

/// A sender's session with its receiver.
#[derive(Debug)]
pub struct SenderSession<C: SendCarrier> {
    carrier: C,
    setup: SenderSetup,
    conn: Option<Connection<C::Path>>,
    /// Connections made so far; the hello carries it.
    epoch: u64,
    /// Frames sent and not yet acknowledged, oldest first, at most `window`: each is sent
    /// again, in order, on a new connection if the old one broke before its acknowledgement
    /// (the receiver acknowledges every frame in the order sent, and skips the ones its ring
    /// has). They are kept because the input slot goes back to the producer when `process`
    /// returns, and a receiver that dies loses what it had not published.
    unacked: VecDeque<(FrameHeader, C::Kept)>,
    /// What was kept of acknowledged frames, for the next ones (a frame then costs one copy
    /// and no allocation).
    spare: Vec<C::Kept>,
    times: SendTimes,
}

impl<C: SendCarrier> SenderSession<C> {
    /// A session not connected yet: it connects at [`start`](Self::start).
    pub fn new(carrier: C, mut setup: SenderSetup) -> SenderSession<C> {
        setup.window = setup.window.max(1);
        setup.connections = setup.connections.clamp(1, usize::from(crate::MAX_CONNECTIONS));
        let times = SendTimes::default();
        SenderSession { carrier, setup, conn: None, epoch: 0, unacked: VecDeque::new(), spare: Vec::new(), times }
    }

    pub fn carrier(&self) -> &C {
        &self.carrier
    }

    pub fn carrier_mut(&mut self) -> &mut C {
        &mut self.carrier
    }

    pub fn setup(&self) -> &SenderSetup {
        &self.setup
    }

    /// Where the time went so far; the carrier adds what it measures.
    pub fn times(&mut self) -> &mut SendTimes {
        &mut self.times
    }

    /// The connection, if there is one now.
    pub fn connection(&mut self) -> Option<&mut Connection<C::Path>> {
        self.conn.as_mut()
    }

    /// The first connection, made at the first frame or the end of stream, not when the stage
    /// is created: a run starts its frame loops only once every stage is created, and a
    /// receiver answers the hello from its frame loop, so two hosts whose links cross both
    /// ways (a -> b -> a) would each wait for the other's start.
    pub fn start(&mut self) -> Result<()> {
        if self.epoch == 0 && self.conn.is_none() { self.connect() } else { Ok(()) }
    }

    /// Wait until fewer than `window` frames are unacknowledged: the receiver's full ring (no
    /// acknowledgements) holds the stage here, and through its input ring the producer.
    pub fn make_room(&mut self) -> Result<()> {
        let start = Instant::now();
        while self.unacked.len() >= self.setup.window {
            self.settle_one()?;
        }
        self.times.acks += start.elapsed();
        Ok(())
    }

    /// What was kept of an acknowledged frame, to keep the next one in.
    pub fn reuse(&mut self) -> Option<C::Kept> {
        self.spare.pop()
    }

    /// Send a new frame, kept as `kept`, by the carrier, and keep it until its
    /// acknowledgement.
    pub fn send_new(&mut self, header: FrameHeader, kept: C::Kept) -> Result<()> {
        let sent = match self.conn.as_mut() {
            Some(conn) => self.carrier.send(conn, &header, &kept, self.setup.timeout),
            None => Err(not_connected().into()),
        };
        self.keep(header, kept, sent)
    }

    /// Keep a new frame the plugin sent itself (`sent` says how that went) until its
    /// acknowledgement; a broken send makes a new connection and sends every unacknowledged
    /// frame on it, this one last.
    pub fn keep(&mut self, header: FrameHeader, kept: C::Kept, sent: Result<(), Broken>) -> Result<()> {
        self.times.frames += 1;
        self.unacked.push_back((header, kept));
        match sent {
            Ok(()) => Ok(()),
            Err(e) => self.recover(e),
        }
    }

    /// The end of stream: wait for every acknowledgement, then send the end and wait for its
    /// own. The end goes over a connection like a frame, and is sent again on a new one if the
    /// old one breaks before the receiver acknowledges it.
    pub fn finish(&mut self) -> Result<()> {
        self.start()?;
        while !self.unacked.is_empty() {
            self.settle_one()?;
        }
        loop {
            let sent = self.stream().and_then(|s| s.write_all(&FrameHeader::end().to_bytes()).map_err(WireError::Lost));
            match sent.and_then(|()| self.read_ack(ACK_END)) {
                Ok(()) => {
                    let SendTimes { frames, acks, writing, copy_after } = &self.times;
                    info!(
                        "link '{}': {frames} frame(s) over {} connection(s); waiting for acknowledgements {:.3} s, writing {:.3} s, waiting for the kept copy after writing {:.3} s",
                        self.setup.link,
                        self.setup.connections,
                        acks.as_secs_f64(),
                        writing.as_secs_f64(),
                        copy_after.as_secs_f64()
                    );
                    return Ok(());
                }
                Err(e) => self.recover(e.into())?,
            }
        }
    }

    fn stream(&mut self) -> Result<&mut TcpStream, WireError> {
        self.conn.as_mut().map(|c| &mut c.stream).ok_or_else(not_connected)
    }

    /// Wait for the acknowledgement of the oldest unacknowledged frame; a connection that
    /// breaks meanwhile is made again and every unacknowledged frame sent again.
    fn settle_one(&mut self) -> Result<()> {
        match self.read_ack(ACK_FRAME) {
            Ok(()) => {
                if let Some((_, kept)) = self.unacked.pop_front() {
                    self.spare.push(kept);
                }
                Ok(())
            }
            Err(e) => self.recover(e.into()),
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

    /// After `e`: a lost connection (or a failed payload path) is made again within the
    /// timeout and every unacknowledged frame sent again on it, oldest first; a protocol
    /// error fails, and so does a payload the carrier failed [`MAX_PAYLOAD_FAILURES`] times.
    fn recover(&mut self, mut e: Broken) -> Result<()> {
        let mut failures = 0;
        loop {
            if let Broken::Payload { seq, what } = &e {
                failures += 1;
                if failures >= MAX_PAYLOAD_FAILURES {
                    return Err(SendError::Payload {
                        link: self.setup.link.clone(),
                        seq: *seq,
                        over: C::PAYLOADS.name(),
                        tries: failures,
                        last: what.clone(),
                    }
                    .into());
                }
            }
            // Dropping the connection drops its path: an NCCL communicator is aborted, which
            // ends a send the GPU may be blocked in.
            self.conn = None;
            let (link, to) = (&self.setup.link, self.setup.to);
            match e {
                Broken::Wire(WireError::Protocol(what)) => {
                    return Err(SendError::Protocol { link: link.clone(), to, what }.into());
                }
                Broken::Wire(WireError::Lost(io)) => {
                    warn!("link '{link}': connection {} to {to} lost ({io}); connecting again", self.epoch);
                }
                Broken::Payload { what, .. } => {
                    warn!(
                        "link '{link}': {} on connection {} to {to} failed ({what}); connecting again",
                        C::PAYLOADS.name(),
                        self.epoch
                    );
                }
            }
            self.connect()?;
            match self.resend() {
                Ok(()) => return Ok(()),
                Err(again) => e = again,
            }
        }
    }

    /// Send every unacknowledged frame again, oldest first, on a connection just made.
    fn resend(&mut self) -> Result<(), Broken> {
        let conn = self.conn.as_mut().ok_or_else(not_connected)?;
        if !self.unacked.is_empty() {
            info!("link '{}': sending {} unacknowledged frame(s) again", self.setup.link, self.unacked.len());
        }
        for (header, kept) in &self.unacked {
            self.carrier.send(conn, header, kept, self.setup.timeout)?;
        }
        Ok(())
    }

    /// Connect and say hello, retrying until the timeout.
    fn connect(&mut self) -> Result<()> {
        let timeout = self.setup.timeout;
        let deadline = Instant::now() + timeout;
        let mut last = String::from("no attempt");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (link, to) = (self.setup.link.clone(), self.setup.to);
            if left.is_zero() {
                return Err(SendError::Unreachable { link, to, secs: timeout.as_secs_f64(), last }.into());
            }
            match self.try_connect(left) {
                Ok(conn) => {
                    self.conn = Some(conn);
                    return Ok(());
                }
                Err(WireError::Lost(e)) => last = e.to_string(),
                Err(WireError::Protocol(reason)) => return Err(SendError::Refused { link, to, reason }.into()),
            }
            std::thread::sleep(RETRY_EVERY.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// One attempt: connect, hello, answer, the payload path, then the other connections of
    /// the link (its stripes), each with its hello and answer. A refusal comes back as
    /// `Protocol`; a path that cannot form, or a stripe's connection that fails, as `Lost`
    /// (the whole set is tried again).
    fn try_connect(&mut self, left: Duration) -> Result<Connection<C::Path>, WireError> {
        let deadline = Instant::now() + left;
        let to = self.setup.to;
        self.epoch += 1;
        let mut stream = self.hello(0, left)?;
        let path = self.carrier.join(&mut stream, left)?;
        let mut stripes = Vec::with_capacity(self.setup.connections - 1);
        for i in 1..self.setup.connections {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100));
            let s = self.hello(i as u16, left)?;
            s.set_read_timeout(None)?;
            stripes.push(s);
        }
        // Acknowledgements wait for the receiver's ring (backpressure): no timeout on them; a
        // receiver that is gone resets or closes the connection.
        stream.set_read_timeout(None)?;
        let more = match stripes.len() {
            0 => String::new(),
            n => format!(" and {n} more for its stripes"),
        };
        info!(
            "link '{}': connection {} to {to} from {}{more}{}",
            self.setup.link,
            self.epoch,
            stream.local_addr()?,
            C::PATH_NOTE
        );
        Ok(Connection { stream, stripes, peer: to, path })
    }

    /// Connect, say the hello of connection `stripe` of this epoch, and read its answer.
    fn hello(&mut self, stripe: u16, left: Duration) -> Result<TcpStream, WireError> {
        let mut stream = TcpStream::connect_timeout(&self.setup.to, left)?;
        // Frames are written whole; headers must not wait for the next frame (Nagle).
        stream.set_nodelay(true)?;
        // The answer comes at once from a receiver that is running; one that accepted in the
        // kernel but never answers is retried.
        stream.set_read_timeout(Some(left))?;
        let hello = Hello {
            epoch: self.epoch,
            format: self.setup.format,
            frame_bytes: self.setup.frame_bytes,
            connections: self.setup.connections as u16,
            stripe,
            link: self.setup.link.clone(),
        };
        hello.write_for(&mut stream, C::PAYLOADS)?;
        read_answer(&mut stream)?.map_err(WireError::Protocol)?;
        Ok(stream)
    }
}
