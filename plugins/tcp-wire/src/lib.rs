//! The wire protocol of a link between two hosts: what `tcp-send` writes and `tcp-receive`
//! reads. Every integer is little-endian.
//!
//! 1. **Hello** (sender → receiver, once per connection):
//!    `magic u32 = HELLO_MAGIC`, `version u16 = VERSION`, `link_len u16`, `epoch u64` (the
//!    sender's connection number, from 1), `pixel u32` (the `PixelFormat` code), `width u32`,
//!    `height u32`, `frame_bytes u64` (one frame's bytes in the ring's layout), `connections
//!    u16` (K, the connections of the link, 1 to [`MAX_CONNECTIONS`]), `stripe u16` (which of
//!    them this one is, 0 the first), then `link_len` bytes of the link's name (UTF-8, at most
//!    [`MAX_LINK_NAME`]).
//!
//!    A link of K connections (version 2): the sender connects the first (stripe 0), and once it
//!    is accepted (and its payload path made) the K − 1 others, in order, each with a hello of
//!    the same epoch and its own stripe, each answered. Only the first carries headers,
//!    acknowledgements and the end of stream; every connection carries its stripe of each
//!    frame's payload: bytes `frame_bytes * i / K` up to `frame_bytes * (i + 1) / K` on
//!    connection i ([`stripe`]). Any of them breaking breaks the whole set: the sender makes a
//!    new one under a new epoch.
//! 2. **Answer** (receiver → sender): `status u8` ([`ACCEPT`] or [`REFUSE`]), `reason_len u16`,
//!    then the reason (UTF-8; empty on accept). A refusal names both ends' formats or links.
//! 3. **Frames** (sender → receiver): a [`FrameHeader`] of [`HEADER_BYTES`] (`magic u32 =
//!    FRAME_MAGIC`, `flags u32`, `seq u64`, `timestamp_ns u64`, `payload_len u64`), then
//!    `payload_len` bytes: the frame exactly as the ring slot holds it, padding included
//!    (both ends compute the same layout from the same format), cut into the connections'
//!    stripes (above). With [`FLAG_END_OF_STREAM`] there is no payload: the stream is over.
//! 4. **Acknowledgements** (receiver → sender), one byte each, in order: [`ACK_FRAME`] once a
//!    frame is published in the receiver's ring (or was already: a frame sent again after a
//!    reconnection), [`ACK_END`] for the end of stream.
//!
//! **NCCL** (`nccl-send` and `nccl-receive`, added alongside; the above is unchanged for the
//! tcp stages): the hello starts with [`NCCL_HELLO_MAGIC`] instead (the rest as above); after an
//! accepting answer the receiver sends the [`NCCL_ID_BYTES`] bytes of an NCCL unique id, and
//! both join a two-rank communicator on it (sender rank 0, receiver rank 1). Each frame's
//! header still goes over TCP, its payload by `ncclSend`/`ncclRecv` from and into the rings'
//! device memory; acknowledgements as above. A tcp receiver refuses an NCCL hello and an NCCL
//! receiver a TCP one, naming both.
//!
//! A sender keeps every frame it sent until its acknowledgement comes (at most its `window`
//! of them; the receiver needs no setting for it: it acknowledges each frame in turn), so a
//! connection that breaks (either end died and restarted) loses nothing: the sender connects
//! again (a new epoch), sends a new hello and every unacknowledged frame again, oldest first,
//! and the receiver publishes each unless it already had (its number is below the next the
//! receiver's ring expects). A frame is never published half-read.
//!
//! The session that speaks this protocol is here too, one for the four bridge stages:
//! [`sender::SenderSession`] (connecting and retrying, the hello, the window of
//! unacknowledged frames, reconnecting under a new epoch and sending them again, the end of
//! stream) and [`receiver::ReceiverSession`] (the listener, accepting and checking a hello,
//! the answer, acknowledgements, a sender that connects again). Both are generic over how a
//! frame's payload travels, a [`sender::SendCarrier`] and a [`receiver::ReceiveCarrier`]:
//! after its header on the stream (tcp-send, tcp-receive) or by NCCL with only the control
//! on TCP (nccl-send, nccl-receive). Each plugin keeps its params and its carrier.

#![deny(unsafe_code)]

pub mod params;
pub mod receiver;
pub mod sender;
#[cfg(test)]
mod session_tests;
pub mod threads;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};

use gpuipc_plugin_api::FrameFormat;

/// "GPNH": a hello.
pub const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"GPNH");
/// "GPNC": the hello of a sender whose payloads go over NCCL.
pub const NCCL_HELLO_MAGIC: u32 = u32::from_le_bytes(*b"GPNC");
/// Bytes of the NCCL unique id an NCCL receiver sends after accepting.
pub const NCCL_ID_BYTES: usize = 128;
/// "GPNF": a frame header.
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"GPNF");
/// The protocol version; a receiver refuses any other. 2: the hello names the link's
/// connections and which one it comes on.
pub const VERSION: u16 = 2;
/// The most connections a link may have.
pub const MAX_CONNECTIONS: u16 = 16;
/// The longest link name a hello carries.
pub const MAX_LINK_NAME: usize = 1024;
/// The longest refusal reason an answer carries.
pub const MAX_REASON: usize = 4096;

pub const ACCEPT: u8 = 0;
pub const REFUSE: u8 = 1;

/// [`FrameHeader::flags`]: the stream is over; no payload follows.
pub const FLAG_END_OF_STREAM: u32 = 1;

/// The receiver published the frame (or had it already).
pub const ACK_FRAME: u8 = 0x06;
/// The receiver took the end of stream.
pub const ACK_END: u8 = 0x04;

/// Bytes of a [`FrameHeader`] on the wire.
pub const HEADER_BYTES: usize = 32;

/// Bytes of a hello before the link name.
const HELLO_FIXED: usize = 4 + 2 + 2 + 8 + 4 + 4 + 4 + 8 + 2 + 2;

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The connection broke or ended (EOF, reset, broken pipe): the other end is gone.
    #[error("connection lost: {0}")]
    Lost(#[source] io::Error),
    /// The peer sent something that is not this protocol.
    #[error("{0}")]
    Protocol(String),
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> WireError {
        WireError::Lost(e)
    }
}

/// What a sender says when it connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub epoch: u64,
    pub format: FrameFormat,
    pub frame_bytes: u64,
    /// The link's connections, 1 to [`MAX_CONNECTIONS`].
    pub connections: u16,
    /// Which of them this is: 0 the first (headers, acknowledgements), else a stripe's.
    pub stripe: u16,
    pub link: String,
}

/// The bytes of a frame of `frame_bytes` that connection `i` of `k` carries.
pub fn stripe(frame_bytes: usize, i: usize, k: usize) -> std::ops::Range<usize> {
    let k = k.max(1);
    frame_bytes * i / k..frame_bytes * (i + 1) / k
}

/// How a link's payloads travel; the hello's magic says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payloads {
    /// On the TCP connection, after each header (tcp-send, tcp-receive).
    Tcp,
    /// By NCCL, GPU to GPU (nccl-send, nccl-receive).
    Nccl,
}

impl Payloads {
    fn magic(self) -> u32 {
        match self {
            Payloads::Tcp => HELLO_MAGIC,
            Payloads::Nccl => NCCL_HELLO_MAGIC,
        }
    }

    /// Which stage sends this way, for messages.
    pub fn sender(self) -> &'static str {
        match self {
            Payloads::Tcp => "tcp-send",
            Payloads::Nccl => "nccl-send",
        }
    }

    /// What carries the payloads, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Payloads::Tcp => "TCP",
            Payloads::Nccl => "NCCL",
        }
    }
}

/// One connection of a link: the TCP stream (hello, answer, headers, acknowledgements; the
/// payloads too for TCP, or their first stripe), the link's other connections (stripes 1 to
/// K − 1, each carrying its stripe of every payload), the other end's address, and the
/// payload path a carrier made for it (NCCL: the communicator, aborted when the connection is
/// dropped). Dropping it closes every stream of the set.
#[derive(Debug)]
pub struct Connection<P> {
    pub stream: TcpStream,
    pub stripes: Vec<TcpStream>,
    pub peer: SocketAddr,
    pub path: P,
}

/// What a session with no connection says when asked to use it: a lost connection.
fn not_connected() -> WireError {
    WireError::Lost(io::ErrorKind::NotConnected.into())
}

impl Hello {
    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        self.write_for(w, Payloads::Tcp)
    }

    /// The hello of a sender whose payloads travel as `payloads` says.
    pub fn write_for(&self, w: &mut impl Write, payloads: Payloads) -> io::Result<()> {
        let link = self.link.as_bytes();
        let link = &link[..link.len().min(MAX_LINK_NAME)];
        let mut buf = Vec::with_capacity(HELLO_FIXED + link.len());
        buf.extend_from_slice(&payloads.magic().to_le_bytes());
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&(link.len() as u16).to_le_bytes());
        buf.extend_from_slice(&self.epoch.to_le_bytes());
        buf.extend_from_slice(&self.format.pixel.to_le_bytes());
        buf.extend_from_slice(&self.format.width.to_le_bytes());
        buf.extend_from_slice(&self.format.height.to_le_bytes());
        buf.extend_from_slice(&self.frame_bytes.to_le_bytes());
        buf.extend_from_slice(&self.connections.to_le_bytes());
        buf.extend_from_slice(&self.stripe.to_le_bytes());
        buf.extend_from_slice(link);
        w.write_all(&buf)
    }

    pub fn read_from(r: &mut impl Read) -> Result<Hello, WireError> {
        Hello::read_for(r, Payloads::Tcp)
    }

    /// Read the hello of a sender whose payloads must travel as `payloads` says; another
    /// sender's is refused, naming it.
    pub fn read_for(r: &mut impl Read, payloads: Payloads) -> Result<Hello, WireError> {
        let mut fixed = [0u8; HELLO_FIXED];
        r.read_exact(&mut fixed)?;
        let mut at = Cursor(&fixed);
        let magic = at.u32();
        if magic != payloads.magic() {
            let other = [Payloads::Tcp, Payloads::Nccl].into_iter().find(|p| p.magic() == magic);
            return Err(WireError::Protocol(match other {
                Some(other) => format!(
                    "the sender is a {} stage, this receiver takes the frames of a {} stage: give both ends of the link the same transport",
                    other.sender(),
                    payloads.sender()
                ),
                None => format!("not a gpuipc link: the hello starts with {magic:#010x}"),
            }));
        }
        let version = at.u16();
        if version != VERSION {
            return Err(WireError::Protocol(format!(
                "the sender speaks link protocol version {version}; this receiver speaks {VERSION}"
            )));
        }
        let link_len = usize::from(at.u16());
        let epoch = at.u64();
        let format = FrameFormat { pixel: at.u32(), width: at.u32(), height: at.u32() };
        let frame_bytes = at.u64();
        let (connections, stripe) = (at.u16(), at.u16());
        if link_len > MAX_LINK_NAME {
            return Err(WireError::Protocol(format!("link name of {link_len} bytes (at most {MAX_LINK_NAME})")));
        }
        if !(1..=MAX_CONNECTIONS).contains(&connections) || stripe >= connections {
            return Err(WireError::Protocol(format!(
                "a hello for connection {stripe} of {connections} (1 to {MAX_CONNECTIONS} connections)"
            )));
        }
        let mut link = vec![0u8; link_len];
        r.read_exact(&mut link)?;
        let link = String::from_utf8_lossy(&link).into_owned();
        Ok(Hello { epoch, format, frame_bytes, connections, stripe, link })
    }
}

/// The receiver's answer to a hello: `Ok(())` or the reason it refused.
pub fn write_answer(w: &mut impl Write, answer: Result<(), &str>) -> io::Result<()> {
    let (status, reason) = match answer {
        Ok(()) => (ACCEPT, &b""[..]),
        Err(reason) => (REFUSE, reason.as_bytes()),
    };
    let reason = &reason[..reason.len().min(MAX_REASON)];
    let mut buf = Vec::with_capacity(3 + reason.len());
    buf.push(status);
    buf.extend_from_slice(&(reason.len() as u16).to_le_bytes());
    buf.extend_from_slice(reason);
    w.write_all(&buf)
}

/// Read the receiver's answer: `Ok(Ok(()))` accepted, `Ok(Err(reason))` refused.
pub fn read_answer(r: &mut impl Read) -> Result<Result<(), String>, WireError> {
    let mut fixed = [0u8; 3];
    r.read_exact(&mut fixed)?;
    let len = usize::from(u16::from_le_bytes([fixed[1], fixed[2]]));
    if len > MAX_REASON {
        return Err(WireError::Protocol(format!("a refusal of {len} bytes (at most {MAX_REASON})")));
    }
    let mut reason = vec![0u8; len];
    r.read_exact(&mut reason)?;
    match fixed[0] {
        ACCEPT => Ok(Ok(())),
        REFUSE => Ok(Err(String::from_utf8_lossy(&reason).into_owned())),
        other => Err(WireError::Protocol(format!("an answer of status {other}"))),
    }
}

/// What precedes every frame on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub flags: u32,
    pub seq: u64,
    pub timestamp_ns: u64,
    pub payload_len: u64,
}

impl FrameHeader {
    /// The header of the end of stream.
    pub fn end() -> FrameHeader {
        FrameHeader { flags: FLAG_END_OF_STREAM, seq: 0, timestamp_ns: 0, payload_len: 0 }
    }

    pub fn ends_stream(&self) -> bool {
        self.flags & FLAG_END_OF_STREAM != 0
    }

    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut buf = [0u8; HEADER_BYTES];
        buf[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        buf[4..8].copy_from_slice(&self.flags.to_le_bytes());
        buf[8..16].copy_from_slice(&self.seq.to_le_bytes());
        buf[16..24].copy_from_slice(&self.timestamp_ns.to_le_bytes());
        buf[24..32].copy_from_slice(&self.payload_len.to_le_bytes());
        buf
    }

    pub fn read_from(r: &mut impl Read) -> Result<FrameHeader, WireError> {
        let mut buf = [0u8; HEADER_BYTES];
        r.read_exact(&mut buf)?;
        let mut at = Cursor(&buf);
        let magic = at.u32();
        if magic != FRAME_MAGIC {
            return Err(WireError::Protocol(format!("a frame header starting with {magic:#010x}")));
        }
        Ok(FrameHeader { flags: at.u32(), seq: at.u64(), timestamp_ns: at.u64(), payload_len: at.u64() })
    }
}

/// Reads fixed-size fields off the front of a buffer whose size the caller checked.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().expect("split at N")
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

/// Send an NCCL unique id (the NCCL receiver, after accepting).
pub fn write_nccl_id(w: &mut impl Write, id: &[u8; NCCL_ID_BYTES]) -> io::Result<()> {
    w.write_all(id)
}

/// Read the NCCL unique id the receiver sends after accepting.
pub fn read_nccl_id(r: &mut impl Read) -> Result<[u8; NCCL_ID_BYTES], WireError> {
    let mut id = [0u8; NCCL_ID_BYTES];
    r.read_exact(&mut id)?;
    Ok(id)
}

/// Whether the other end of `stream` is gone: it closed (end of file waits to be read) or the
/// connection failed. Looks without taking bytes and without blocking, for a wait on the GPU
/// that must stop when the peer dies.
pub fn peer_gone(stream: &std::net::TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let gone = match stream.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => false,
        Err(_) => true,
    };
    stream.set_nonblocking(false).is_err() || gone
}

/// Whether an I/O error means the connection is gone (rather than, say, a bad address).
pub fn is_disconnect(e: &io::Error) -> bool {
    use io::ErrorKind::*;
    matches!(
        e.kind(),
        UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe | NotConnected | TimedOut | WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuipc_plugin_api::PixelFormat;

    #[test]
    fn a_hello_an_answer_and_a_header_read_back_as_written() {
        let hello = Hello {
            epoch: 3,
            format: FrameFormat::new(PixelFormat::Rgb8, 64, 48),
            frame_bytes: 9216,
            connections: 3,
            stripe: 2,
            link: "gen->b".into(),
        };
        let mut wire = Vec::new();
        hello.write_to(&mut wire).unwrap();
        write_answer(&mut wire, Err("no")).unwrap();
        let header = FrameHeader { flags: 0, seq: 7, timestamp_ns: 99, payload_len: 9216 };
        wire.extend_from_slice(&header.to_bytes());
        let mut r = &wire[..];
        assert_eq!(Hello::read_from(&mut r).unwrap(), hello);
        assert_eq!(read_answer(&mut r).unwrap(), Err("no".to_owned()));
        assert_eq!(FrameHeader::read_from(&mut r).unwrap(), header);
        assert!(r.is_empty());
    }

    #[test]
    fn an_nccl_hello_is_refused_by_a_tcp_receiver_and_the_other_way_round() {
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        let hello = Hello { epoch: 1, format, frame_bytes: 16, connections: 1, stripe: 0, link: "l".into() };
        let mut wire = Vec::new();
        hello.write_for(&mut wire, Payloads::Nccl).unwrap();
        assert_eq!(Hello::read_for(&mut &wire[..], Payloads::Nccl).unwrap(), hello);
        let e = Hello::read_from(&mut &wire[..]).unwrap_err().to_string();
        assert!(
            e.contains("the sender is a nccl-send stage, this receiver takes the frames of a tcp-send stage"),
            "{e}"
        );
        let mut wire = Vec::new();
        hello.write_to(&mut wire).unwrap();
        let e = Hello::read_for(&mut &wire[..], Payloads::Nccl).unwrap_err().to_string();
        assert!(e.contains("the sender is a tcp-send stage"), "{e}");
        let id: [u8; NCCL_ID_BYTES] = std::array::from_fn(|i| i as u8);
        let mut wire = Vec::new();
        write_nccl_id(&mut wire, &id).unwrap();
        assert_eq!(read_nccl_id(&mut &wire[..]).unwrap(), id);
        assert!(matches!(read_nccl_id(&mut &wire[..100]), Err(WireError::Lost(_))));
    }

    #[test]
    fn a_closed_peer_is_seen_without_taking_bytes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(!peer_gone(&server));
        client.write_all(&[ACK_FRAME]).unwrap();
        drop(client);
        // The byte sent before the close is still there to read; then the end of file.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut server = server;
        let mut one = [0u8; 1];
        server.read_exact(&mut one).unwrap();
        assert_eq!(one[0], ACK_FRAME);
        while !peer_gone(&server) {
            assert!(std::time::Instant::now() < deadline, "the close was never seen");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    #[test]
    fn a_hello_of_a_stripe_outside_its_connections_or_of_version_1_is_refused() {
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        let mut hello = Hello { epoch: 1, format, frame_bytes: 16, connections: 2, stripe: 2, link: "l".into() };
        let mut wire = Vec::new();
        hello.write_to(&mut wire).unwrap();
        let e = Hello::read_from(&mut &wire[..]).unwrap_err().to_string();
        assert!(e.contains("a hello for connection 2 of 2 (1 to 16 connections)"), "{e}");
        hello.stripe = 1;
        let mut wire = Vec::new();
        hello.write_to(&mut wire).unwrap();
        wire[4..6].copy_from_slice(&1u16.to_le_bytes());
        let e = Hello::read_from(&mut &wire[..]).unwrap_err().to_string();
        assert!(e.contains("the sender speaks link protocol version 1; this receiver speaks 2"), "{e}");
    }

    #[test]
    fn the_stripes_of_a_frame_cover_it_in_order_without_overlap() {
        for (bytes, k) in [(24_883_200, 4), (10, 3), (2, 5), (7, 1)] {
            let parts: Vec<_> = (0..k).map(|i| stripe(bytes, i, k)).collect();
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts[k - 1].end, bytes);
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start), "{parts:?}");
        }
    }

    #[test]
    fn something_else_is_refused_and_a_short_read_is_a_lost_connection() {
        let e = Hello::read_from(&mut &b"GET / HTTP/1.1\r\nHost: example.org\r\nAccept: */*\r\n\r\n"[..]).unwrap_err();
        assert!(e.to_string().contains("not a gpuipc link"), "{e}");
        assert!(matches!(FrameHeader::read_from(&mut &FrameHeader::end().to_bytes()[..20]), Err(WireError::Lost(_))));
    }
}
