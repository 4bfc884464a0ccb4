//! The tcp-send stage: its params, and how a frame's payload travels (after its header, on
//! the stream, copied while it is sent). The session (connecting, the window, reconnections)
//! is `gpuipc_tcp_wire::sender`'s.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use gpuipc_tcp_wire::sender::{Broken, SendCarrier, SendError, SenderSession};
use gpuipc_tcp_wire::threads::{THREADS_FROM, on_threads};
use gpuipc_tcp_wire::{self as wire, Connection, FrameHeader, Payloads, WireError};
use serde::Deserialize;

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
    #[serde(default = "default_connections")]
    pub connections: u32,
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

/// TCP connections of a link by default, each carrying a stripe of every frame written and
/// read by a thread of its own at each end: one connection is one core's copy into and out of
/// the kernel at each end, which a link to another machine of 25 Gb/s or more, or loopback,
/// outruns (docs/benchmarks.md, "TCP bridge against a plain TCP stream").
pub const DEFAULT_CONNECTIONS: u32 = 4;

fn default_connections() -> u32 {
    DEFAULT_CONNECTIONS
}

/// Payloads on the TCP stream, after their headers; a frame is kept as a copy of its bytes.
#[derive(Debug)]
pub struct TcpCarrier;

impl SendCarrier for TcpCarrier {
    type Path = ();
    type Kept = Vec<u8>;
    const PAYLOADS: Payloads = Payloads::Tcp;
    const PATH_NOTE: &'static str = "";

    fn join(&mut self, _stream: &mut TcpStream, _left: Duration) -> Result<(), WireError> {
        Ok(())
    }

    fn send(
        &mut self,
        conn: &mut Connection<()>,
        header: &FrameHeader,
        kept: &Vec<u8>,
        _: Duration,
    ) -> Result<(), Broken> {
        write_striped(conn, header, kept).map_err(|e| WireError::Lost(e).into())
    }
}

/// A tcp-send stage instance.
#[derive(Debug)]
pub struct TcpSend {
    session: SenderSession<TcpCarrier>,
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
        ParamInfo {
            name: "connections",
            kind: "integer",
            default: "4",
            range: "1 to 16",
            description: "TCP connections of the link, each carrying a stripe of every frame on a thread of its own",
        },
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let mut problems =
            wire::params::sender_problems(&params.to, &params.link, ("connect_timeout_s", params.connect_timeout_s));
        if !(1..=MAX_WINDOW).contains(&params.window) {
            problems.push(format!("param `window` must be 1 to {MAX_WINDOW}, got {}", params.window));
        }
        let most = u32::from(wire::MAX_CONNECTIONS);
        if !(1..=most).contains(&params.connections) {
            problems.push(format!("param `connections` must be 1 to {most}, got {}", params.connections));
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
        let window = params.window.clamp(1, MAX_WINDOW) as usize;
        let connections = params.connections.clamp(1, u32::from(wire::MAX_CONNECTIONS)) as usize;
        let setup =
            wire::params::sender_setup(&params.to, params.link, params.connect_timeout_s, format, window, connections)?;
        // Connected at the first frame, not here (`SenderSession::start` says why).
        Ok(TcpSend { session: SenderSession::new(TcpCarrier, setup) })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        self.session.start()?;
        let input = inputs.first().ok_or("tcp-send takes 1 input")?;
        let bytes = input.host_bytes().ok_or("tcp-send reads host memory only")?;
        let need = self.session.setup().frame_bytes;
        let payload = bytes.get(..need as usize).ok_or_else(|| SendError::ShortFrame {
            link: self.session.setup().link.clone(),
            got: bytes.len() as u64,
            need,
        })?;
        self.session.make_room()?;
        let header =
            FrameHeader { flags: 0, seq: input.info.seq, timestamp_ns: input.info.timestamp_ns, payload_len: need };
        // Kept, because the input slot goes back to the producer when this returns; copied
        // while the frame is sent from the slot, so the copy costs no time where a core is free.
        let mut kept = self.session.reuse().unwrap_or_default();
        let sent = match self.session.connection() {
            Some(conn) => {
                let (sent, writing, copy_after) = copy_while_sending(conn, &header, payload, &mut kept)?;
                let times = self.session.times();
                times.writing += writing;
                times.copy_after += copy_after;
                sent.map_err(WireError::Lost)
            }
            None => {
                kept.clear();
                kept.extend_from_slice(payload);
                Err(WireError::Lost(std::io::ErrorKind::NotConnected.into()))
            }
        };
        // A broken send: a new connection, and every unacknowledged frame (this one last) sent on it.
        self.session.keep(header, kept, sent.map_err(Broken::from))
    }

    fn flush(&mut self) -> Result<()> {
        self.session.finish()
    }
}

/// Send `header` and `payload` over `conn`'s connections and copy `payload` into `kept` (which
/// may hold an earlier frame), at once for a large frame: the copy in as many parts as the link
/// has connections, each by a thread of its own (one thread's copy of a 4K frame takes as long
/// as several connections' writes). The outer error is a thread's failure; the inner one the
/// send's. Also: how long the writing took, and how long the copy went on after it.
fn copy_while_sending(
    conn: &Connection<()>,
    header: &FrameHeader,
    payload: &[u8],
    kept: &mut Vec<u8>,
) -> Result<(std::io::Result<()>, Duration, Duration)> {
    let start = Instant::now();
    if payload.len() < THREADS_FROM {
        kept.clear();
        kept.extend_from_slice(payload);
        let sent = write_striped(conn, header, payload);
        return Ok((sent, start.elapsed(), Duration::ZERO));
    }
    if kept.len() != payload.len() {
        // Once per kept buffer: a buffer reused for the link's next frames has the size.
        kept.clear();
        kept.resize(payload.len(), 0);
    }
    let k = 1 + conn.stripes.len();
    let mut parts = Vec::with_capacity(k);
    let mut rest = &mut kept[..];
    for i in 0..k {
        let (part, tail) = rest.split_at_mut(wire::stripe(payload.len(), i, k).len());
        parts.push((part, &payload[wire::stripe(payload.len(), i, k)]));
        rest = tail;
    }
    let copy = |(to, from): (&mut [u8], &[u8])| {
        to.copy_from_slice(from);
        Ok(())
    };
    let ((sent, writing), copied) = on_threads("tcp-send-copy", parts, copy, || {
        let sent = write_striped(conn, header, payload);
        (sent, start.elapsed())
    });
    copied.map_err(|_| Error::new("tcp-send: a thread copying a frame failed"))?;
    Ok((sent, writing, start.elapsed().saturating_sub(writing)))
}

/// Write a frame over a link's connections: the header and the first stripe on the first
/// connection, every other stripe on its own ([`wire::stripe`]); a large frame's stripes each
/// by a thread of its own, so that each connection's copy into the kernel has a core.
fn write_striped(conn: &Connection<()>, header: &FrameHeader, payload: &[u8]) -> std::io::Result<()> {
    let k = 1 + conn.stripes.len();
    let part = |i: usize| &payload[wire::stripe(payload.len(), i, k)];
    if k == 1 || payload.len() < THREADS_FROM {
        write_frame(&conn.stream, header, part(0))?;
        for (i, s) in conn.stripes.iter().enumerate() {
            write_all(s, part(i + 1))?;
        }
        return Ok(());
    }
    let stripes = conn.stripes.iter().enumerate().map(|(i, s)| (s, part(i + 1))).collect();
    let (sent, stripes) = on_threads(
        "tcp-send-stripe",
        stripes,
        |(s, bytes)| write_all(s, bytes),
        || write_frame(&conn.stream, header, part(0)),
    );
    // A stripe that failed breaks the set; the first failure is the one told.
    sent.and(stripes)
}

/// All of `bytes` on `stream`.
fn write_all(mut stream: &TcpStream, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(bytes)
}

/// A frame's header and bytes, in one call where the kernel allows (a 32-byte header alone
/// would go out as its own segment with `TCP_NODELAY`).
fn write_frame(mut stream: &TcpStream, header: &FrameHeader, bytes: &[u8]) -> std::io::Result<()> {
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
    use std::io::Read;

    use gpuipc_plugin_api::{FrameLayout, parse_params};
    use gpuipc_tcp_wire::Hello;

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
        let text = "to = \"host:7\"\nlink = \"\"\nconnect_timeout_s = 0.0\nwindow = 0\nconnections = 17";
        let params = parse_params::<TcpSend>(text).unwrap();
        let e = TcpSend::check(&params, &[]).unwrap_err().to_string();
        for what in [
            "param `to`: \"host:7\" is not ADDRESS:PORT",
            "param `link`",
            "param `connect_timeout_s` must be > 0",
            "param `window` must be 1 to 64, got 0",
            "param `connections` must be 1 to 16, got 17",
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
        // One connection: the test plays a receiver of one (the stripes: tcp-receive's tests).
        let text = format!(
            "to = \"127.0.0.1:{port}\"\nlink = \"a->b\"\nconnect_timeout_s = 20.0\nwindow = {WINDOW}\nconnections = 1"
        );
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
