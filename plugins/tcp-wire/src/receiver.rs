//! The receiver's end of a link's session, for `tcp-receive` and `nccl-receive` alike: the
//! listener, accepting a sender and checking its hello, the answer, each frame's header,
//! the acknowledgements, a sender that connects again (a new connection taking the old one's
//! place), and the end of stream. How a frame's payload travels is the plugin's: its
//! [`ReceiveCarrier`] makes the path of a connection, and it reads each payload itself.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{Error, FrameFormat, Result, info, warn};
use rustix::event::{PollFd, PollFlags, poll};

use crate::{ACK_END, ACK_FRAME, Connection, FrameHeader, Hello, Payloads, WireError, not_connected, write_answer};

/// How a receiver's payloads travel: what a connection holds for them besides its TCP
/// stream, and how it is made once a sender's hello is accepted.
pub trait ReceiveCarrier {
    /// A connection's payload path (NCCL: the communicator; TCP: nothing).
    type Path;
    /// What the accepting answer is followed by (NCCL: a fresh unique id; TCP: nothing).
    type Offer;
    /// How the payloads travel; a hello of another kind is refused.
    const PAYLOADS: Payloads;
    /// What the log line of a new connection adds (`", NCCL rank 1"`).
    const PATH_NOTE: &'static str;

    /// Made for each hello accepted, before the answer; an error fails the stage.
    fn offer(&mut self) -> Result<Self::Offer>;

    /// Write `offer` after the accepting answer.
    fn write_offer(&mut self, offer: &Self::Offer, stream: &mut TcpStream) -> std::io::Result<()>;

    /// Make the payload path with the sender at `peer` before `deadline`; what went wrong
    /// (the sender is waited for again) otherwise.
    fn join(
        &mut self,
        offer: Self::Offer,
        stream: &TcpStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> std::result::Result<Self::Path, String>;
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

/// What a receiver is told at create: where to listen, the link, and its frames.
#[derive(Debug, Clone)]
pub struct ReceiverSetup {
    pub listen: SocketAddr,
    pub link: String,
    /// How long to wait for a sender, at start and after a connection breaks.
    pub timeout: Duration,
    pub format: FrameFormat,
    /// One frame's bytes in the ring's layout.
    pub frame_bytes: u64,
}

/// What [`ReceiverSession::receive`] took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A frame new to the ring, its payload read: relay it under its header's number and
    /// timestamp. It is acknowledged once published, at the next `receive` or `finish`.
    Frame(FrameHeader),
    /// The sender's end of stream, acknowledged.
    End,
}

/// A receiver's session with its senders, one connection at a time.
#[derive(Debug)]
pub struct ReceiverSession<C: ReceiveCarrier> {
    carrier: C,
    setup: ReceiverSetup,
    listener: TcpListener,
    conn: Option<Connection<C::Path>>,
    /// Connections accepted so far (the epoch of the link at this end).
    connections: u64,
    /// The frame last handed on is not acknowledged yet: it is once it is published, which it
    /// is when the runner asks for the next frame (or flushes).
    ack_due: bool,
    /// The sender's end of stream came and was acknowledged.
    ended: bool,
    /// Frames handed on, time waiting for a frame's header (the sender's side: its frame not
    /// started yet, or an acknowledgement on its way), and time reading payloads; logged at
    /// the end.
    times: (u64, Duration, Duration),
}

impl<C: ReceiveCarrier> ReceiverSession<C> {
    /// Listen (when the stage is created); senders are accepted at [`receive`](Self::receive).
    pub fn bind(carrier: C, setup: ReceiverSetup) -> Result<ReceiverSession<C>, ReceiveError> {
        let listen = setup.listen;
        // std sets SO_REUSEADDR on Unix: a restarted receiver binds again while the old
        // connections are in TIME_WAIT.
        let listener = TcpListener::bind(listen)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|source| ReceiveError::Listen { link: setup.link.clone(), listen, source })?;
        let times = (0, Duration::ZERO, Duration::ZERO);
        Ok(ReceiverSession {
            carrier,
            setup,
            listener,
            conn: None,
            connections: 0,
            ack_due: false,
            ended: false,
            times,
        })
    }

    pub fn carrier(&self) -> &C {
        &self.carrier
    }

    pub fn setup(&self) -> &ReceiverSetup {
        &self.setup
    }

    /// Acknowledge the frame handed on last (the runner asks for the next one once it is
    /// published), then take the next frame whose number is `expected` or above: accept a
    /// sender if there is none, read the header, and the payload by `payload` (straight into
    /// the ring's slot; its error's text when it could not). A connection lost before a frame
    /// is whole drops that frame (never handed on) and waits for the sender again, which sends
    /// it again; a frame below `expected` (sent again by a sender that did not hear its
    /// acknowledgement) is acknowledged and not handed on twice.
    pub fn receive(
        &mut self,
        expected: u64,
        mut payload: impl FnMut(&mut Connection<C::Path>) -> std::result::Result<(), String>,
    ) -> Result<Received> {
        self.acknowledge_due();
        loop {
            if self.conn.is_none() {
                self.accept(Instant::now() + self.setup.timeout)?;
            }
            let waiting = Instant::now();
            if self.superseded()? {
                continue;
            }
            let header = self.read_header();
            self.times.1 += waiting.elapsed();
            let header = match header {
                Ok(header) => header,
                Err(WireError::Lost(e)) => {
                    self.lost(&e.to_string());
                    continue;
                }
                Err(WireError::Protocol(what)) => {
                    let peer = self.conn.as_ref().map_or(self.setup.listen, |c| c.peer);
                    return Err(ReceiveError::Protocol { link: self.setup.link.clone(), peer, what }.into());
                }
            };
            if header.ends_stream() {
                if self.send(ACK_END) {
                    info!("link '{}': end of stream", self.setup.link);
                    self.ended = true;
                    return Ok(Received::End);
                }
                continue;
            }
            let Some(conn) = self.conn.as_mut() else { continue };
            let reading = Instant::now();
            let read = payload(conn);
            self.times.2 += reading.elapsed();
            if let Err(what) = read {
                self.lost(&what);
                continue;
            }
            if header.seq < expected {
                // Sent again by a sender that did not hear the acknowledgement; the ring has
                // it already, and the payload just read is not published.
                self.send(ACK_FRAME);
                continue;
            }
            self.ack_due = true;
            self.times.0 += 1;
            return Ok(Received::Frame(header));
        }
    }

    /// At the stage's end: acknowledge the last frame, and if this end stopped before the
    /// sender's end of stream (the pipeline's `frames` here, or a stop), take the end if it
    /// comes, so the sender is not left waiting for a receiver.
    pub fn finish(&mut self) {
        self.acknowledge_due();
        let (frames, waiting, reading) = self.times;
        info!(
            "link '{}': {frames} frame(s) handed on; waiting for headers {:.3} s, reading payloads {:.3} s",
            self.setup.link,
            waiting.as_secs_f64(),
            reading.as_secs_f64()
        );
        if self.ended {
            return;
        }
        let link = &self.setup.link;
        let Some(conn) = self.conn.as_mut() else { return };
        let _ = conn.stream.set_read_timeout(Some(self.setup.timeout));
        match FrameHeader::read_from(&mut conn.stream) {
            Ok(h) if h.ends_stream() => {
                self.send(ACK_END);
            }
            Ok(h) => warn!("link '{link}': stopped before frame {}; the sender has more", h.seq),
            Err(e) => warn!("link '{link}': stopped before the sender's end of stream ({e})"),
        }
    }

    /// Acknowledge the frame handed on last, if it is due.
    fn acknowledge_due(&mut self) {
        if std::mem::take(&mut self.ack_due) {
            self.send(ACK_FRAME);
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

    /// Drop the connection; its payload path goes with it (an NCCL communicator is aborted,
    /// ending a receive the GPU may be blocked in).
    fn lost(&mut self, why: &str) {
        if let Some(conn) = self.conn.take() {
            warn!(
                "link '{}': connection {} from {} lost ({why}); waiting for the sender again",
                self.setup.link, self.connections, conn.peer
            );
        }
    }

    /// Read one frame header, checking its payload's size.
    fn read_header(&mut self) -> Result<FrameHeader, WireError> {
        let conn = self.conn.as_mut().ok_or_else(not_connected)?;
        let header = FrameHeader::read_from(&mut conn.stream)?;
        if !header.ends_stream() && header.payload_len != self.setup.frame_bytes {
            return Err(WireError::Protocol(format!(
                "frame {} of {} bytes, the link's frames have {}",
                header.seq, header.payload_len, self.setup.frame_bytes
            )));
        }
        Ok(header)
    }

    /// Wait until the connection has bytes, or a new sender connects; `true` when a new one
    /// took the old one's place (a sender that reconnected before this end saw the old
    /// connection break, as over a network with a half-open connection).
    fn superseded(&mut self) -> Result<bool> {
        let Some(conn) = self.conn.as_ref() else { return Ok(false) };
        let mut fds = [PollFd::new(&conn.stream, PollFlags::IN), PollFd::new(&self.listener, PollFlags::IN)];
        loop {
            match poll(&mut fds, None) {
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(ReceiveError::Poll { link: self.setup.link.clone(), source: e.into() }.into()),
            }
        }
        if !fds[0].revents().is_empty() || fds[1].revents().is_empty() {
            return Ok(false);
        }
        self.lost("a new connection came");
        self.accept(Instant::now() + self.setup.timeout)?;
        Ok(true)
    }

    /// Accept a sender whose hello matches and whose payload path forms, before `deadline`.
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
                    let link = &self.setup.link;
                    if left.is_zero() {
                        let (listen, secs) = (self.setup.listen, self.setup.timeout.as_secs_f64());
                        return Err(ReceiveError::NoSender { link: link.clone(), listen, secs }.into());
                    }
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    let timeout = rustix::time::Timespec {
                        tv_sec: left.as_secs() as i64,
                        tv_nsec: i64::from(left.subsec_nanos()),
                    };
                    match poll(&mut fds, Some(&timeout)) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(ReceiveError::Poll { link: link.clone(), source: e.into() }.into()),
                    }
                }
                // A connection that was reset before it was accepted, and the like: take the next.
                Err(e) => warn!("link '{}': accepting on {} failed: {e}", self.setup.link, self.setup.listen),
            }
        }
    }

    /// Check a new connection's hello, answer it and make its payload path: `Ok(true)`
    /// accepted, `Ok(false)` not a usable sender (gone, not speaking this protocol, or its
    /// path did not form: keep waiting), an error for a sender of another link or format.
    fn handshake(&mut self, mut stream: TcpStream, peer: SocketAddr, left: Duration) -> Result<bool> {
        let link = self.setup.link.clone();
        let left = left.max(Duration::from_millis(100));
        let setup = stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_nodelay(true))
            .and_then(|()| stream.set_read_timeout(Some(left)));
        if let Err(e) = setup {
            warn!("link '{link}': connection from {peer} unusable: {e}");
            return Ok(false);
        }
        let hello = match Hello::read_for(&mut stream, C::PAYLOADS) {
            Ok(hello) => hello,
            Err(WireError::Lost(e)) => {
                warn!("link '{link}': connection from {peer} closed before its hello: {e}");
                return Ok(false);
            }
            Err(WireError::Protocol(what)) => {
                warn!("link '{link}': connection from {peer} refused: {what}");
                let _ = write_answer(&mut stream, Err(&what));
                return Ok(false);
            }
        };
        if hello.stripe != 0 {
            // A stripe of a set that was given up (its sender tries the whole set again).
            warn!(
                "link '{link}': connection from {peer} for stripe {} of a link's connections, not its first; closed",
                hello.stripe
            );
            return Ok(false);
        }
        if let Some(reason) = self.refusal(&hello, peer) {
            let _ = write_answer(&mut stream, Err(&reason));
            return Err(ReceiveError::Refused(reason).into());
        }
        let offer = self.carrier.offer()?;
        let answered = write_answer(&mut stream, Ok(()))
            .and_then(|()| self.carrier.write_offer(&offer, &mut stream))
            .and_then(|()| stream.set_read_timeout(None));
        if let Err(e) = answered {
            warn!("link '{link}': connection from {peer} closed before it was accepted: {e}");
            return Ok(false);
        }
        let deadline = Instant::now() + left;
        let path = match self.carrier.join(offer, &stream, peer, deadline) {
            Ok(path) => path,
            Err(what) => {
                warn!("link '{link}': {what}; waiting for the sender again");
                return Ok(false);
            }
        };
        let Some(stripes) = self.stripes(&hello, deadline) else { return Ok(false) };
        self.connections += 1;
        let local = stream.local_addr().map_or_else(|_| self.setup.listen.to_string(), |a| a.to_string());
        let more = match stripes.len() {
            0 => String::new(),
            n => format!(" and {n} more for its stripes"),
        };
        info!("link '{link}': connection {} from {peer} to {local}{more}{}", self.connections, C::PATH_NOTE);
        self.conn = Some(Connection { stream, stripes, peer, path });
        Ok(true)
    }

    /// Accept the other connections of a link whose first connection said `first`, each with
    /// a hello of the same epoch and link for one of its stripes, answered, before
    /// `deadline`; `None` (warned; the set is dropped and the sender waited for again) when
    /// they do not all come. Anything else that connects meanwhile is closed unanswered, which
    /// a sender takes as a lost connection and tries again.
    fn stripes(&mut self, first: &Hello, deadline: Instant) -> Option<Vec<TcpStream>> {
        let link = self.setup.link.clone();
        let want = usize::from(first.connections) - 1;
        let mut stripes: Vec<Option<TcpStream>> = (0..want).map(|_| None).collect();
        while stripes.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let got = stripes.iter().flatten().count();
                warn!(
                    "link '{link}': {got} of the sender's {want} more connections came; waiting for the sender again"
                );
                return None;
            }
            let (mut stream, peer) = match self.listener.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut fds = [PollFd::new(&self.listener, PollFlags::IN)];
                    let timeout = rustix::time::Timespec {
                        tv_sec: left.as_secs() as i64,
                        tv_nsec: i64::from(left.subsec_nanos()),
                    };
                    let _ = poll(&mut fds, Some(&timeout));
                    continue;
                }
                Err(_) => continue,
            };
            let ok = stream
                .set_nonblocking(false)
                .and_then(|()| stream.set_nodelay(true))
                .and_then(|()| stream.set_read_timeout(Some(left)));
            let hello = match ok.map_err(WireError::Lost).and_then(|()| Hello::read_for(&mut stream, C::PAYLOADS)) {
                Ok(hello) => hello,
                Err(e) => {
                    warn!("link '{link}': connection from {peer} closed: {e}");
                    continue;
                }
            };
            let slot = usize::from(hello.stripe).checked_sub(1).and_then(|i| stripes.get_mut(i));
            let same = (hello.epoch, hello.connections, &hello.link) == (first.epoch, first.connections, &first.link);
            match slot {
                Some(slot @ None) if same => {
                    if write_answer(&mut stream, Ok(())).and_then(|()| stream.set_read_timeout(None)).is_ok() {
                        *slot = Some(stream);
                    }
                }
                _ => warn!(
                    "link '{link}': connection from {peer} for stripe {} of {} of epoch {} while the stripes of epoch {} were awaited; closed",
                    hello.stripe, hello.connections, hello.epoch, first.epoch
                ),
            }
        }
        Some(stripes.into_iter().flatten().collect())
    }

    /// Why a sender whose hello is `hello` is refused: another link, or another format.
    fn refusal(&self, hello: &Hello, peer: SocketAddr) -> Option<String> {
        let ReceiverSetup { listen, link, format, frame_bytes, .. } = &self.setup;
        if hello.link != *link {
            Some(format!(
                "the sender at {peer} sends link '{}', this receiver at {listen} takes link '{link}'",
                hello.link
            ))
        } else if (hello.format, hello.frame_bytes) != (*format, *frame_bytes) {
            Some(format!(
                "link '{link}': the sender sends {}, the receiver expects {}",
                crate::params::describe(hello.format, hello.frame_bytes),
                crate::params::describe(*format, *frame_bytes)
            ))
        } else {
            None
        }
    }
}
