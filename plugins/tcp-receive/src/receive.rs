//! The tcp-receive stage: its params, and how a frame's payload travels (after its header, on
//! the stream, read straight into the output ring's slot). The session (listening, the hello,
//! acknowledgements, reconnections) is `gpuipc_tcp_wire::receiver`'s.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use gpuipc_plugin_api::{
    CreateContext, Domain, FrameDataMut, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin,
    PluginInfo, ProcessContext, Result, bail,
};
use gpuipc_tcp_wire::params::ReceiverParams;
use gpuipc_tcp_wire::receiver::{ReceiveCarrier, Received, ReceiverSession};
use gpuipc_tcp_wire::threads::{THREADS_FROM, on_threads};
use gpuipc_tcp_wire::{self as wire, Connection, Payloads};

/// The `params` table of a tcp-receive stage: a receiver's.
pub type Params = ReceiverParams;

/// Payloads on the TCP stream, after their headers: nothing to set up beyond the stream.
#[derive(Debug)]
pub struct TcpCarrier;

impl ReceiveCarrier for TcpCarrier {
    type Path = ();
    type Offer = ();
    const PAYLOADS: Payloads = Payloads::Tcp;
    const PATH_NOTE: &'static str = "";

    fn offer(&mut self) -> Result<()> {
        Ok(())
    }

    fn write_offer(&mut self, _offer: &(), _stream: &mut TcpStream) -> std::io::Result<()> {
        Ok(())
    }

    fn join(&mut self, _offer: (), _stream: &TcpStream, _peer: SocketAddr, _deadline: Instant) -> Result<(), String> {
        Ok(())
    }
}

/// A tcp-receive stage instance.
#[derive(Debug)]
pub struct TcpReceive {
    session: ReceiverSession<TcpCarrier>,
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
        params.check()
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if !inputs.is_empty() {
            bail!("tcp-receive is a source: it takes no inputs, got {}", inputs.len());
        }
        params.frame_format().map(Some)
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
        let setup = params.setup(format)?;
        Ok(TcpReceive { session: ReceiverSession::bind(TcpCarrier, setup)? })
    }

    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        _ctx: &ProcessContext,
    ) -> Result<()> {
        let out = output.ok_or("tcp-receive has an output")?;
        let expected = out.info().seq;
        let need = self.session.setup().frame_bytes;
        let FrameDataMut::Host(bytes) = out.data() else { bail!("tcp-receive writes host memory only") };
        let slot = bytes.get_mut(..need as usize).ok_or("output slot shorter than its frame")?;
        // Straight into the ring's slot; a frame cut short is never handed on.
        match self.session.receive(expected, |conn| read_striped(conn, slot).map_err(|e| e.to_string()))? {
            Received::Frame(header) => out.relay(header.seq, header.timestamp_ns),
            Received::End => out.end_stream(),
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.session.finish();
        Ok(())
    }
}

/// Read a frame's payload into `slot` off a link's connections, each its stripe
/// ([`wire::stripe`]): a large frame's each by a thread of its own, so that each connection's
/// copy out of the kernel has a core. Any stripe failing fails the frame (the set is dropped
/// and the sender sends it again on a new one).
fn read_striped(conn: &Connection<()>, slot: &mut [u8]) -> std::io::Result<()> {
    let k = 1 + conn.stripes.len();
    let len = slot.len();
    let mut parts = Vec::with_capacity(k);
    let mut rest = slot;
    for i in 0..k {
        let (part, tail) = rest.split_at_mut(wire::stripe(len, i, k).len());
        parts.push(part);
        rest = tail;
    }
    let mut parts = parts.into_iter();
    let first = parts.next().expect("k >= 1 stripes");
    if k == 1 || len < THREADS_FROM {
        read_all(&conn.stream, first)?;
        for (s, part) in conn.stripes.iter().zip(parts) {
            read_all(s, part)?;
        }
        return Ok(());
    }
    let stripes = conn.stripes.iter().zip(parts).collect();
    let (read, stripes) =
        on_threads("tcp-receive-stripe", stripes, |(s, part)| read_all(s, part), || read_all(&conn.stream, first));
    read.and(stripes)
}

fn read_all(mut stream: &TcpStream, part: &mut [u8]) -> std::io::Result<()> {
    stream.read_exact(part)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

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

    /// Forwards every connection made to it to `to`, byte for byte both ways, except the
    /// `cut`-th (from 0) connection: that one is shut down both ways once `after` bytes went
    /// through it towards the receiver, as a link whose one connection breaks.
    /// Also: how many connections it took so far.
    fn cutting_proxy(to: std::net::SocketAddr, cut: usize, after: usize) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let taken = Arc::new(AtomicUsize::new(0));
        let counted = taken.clone();
        std::thread::spawn(move || {
            for (n, client) in listener.incoming().enumerate() {
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(to) else { return };
                let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_in, mut c_out) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut through = 0usize;
                    loop {
                        let limit = if n == cut { buf.len().min(after - through) } else { buf.len() };
                        let got = match c_in.read(&mut buf[..limit]) {
                            Ok(0) | Err(_) => break,
                            Ok(got) => got,
                        };
                        if s_out.write_all(&buf[..got]).is_err() {
                            break;
                        }
                        through += got;
                        if n == cut && through >= after {
                            break;
                        }
                    }
                    let _ = c_in.shutdown(std::net::Shutdown::Both);
                    let _ = s_out.shutdown(std::net::Shutdown::Both);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s_in, &mut c_out);
                    let _ = s_in.shutdown(std::net::Shutdown::Both);
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        (addr, taken)
    }

    /// A frame's bytes, different for every frame and every byte (a stripe sent in the wrong
    /// place or twice shows).
    fn frame_bytes(seq: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + i as u64 / 4093 + seq * 7) as u8).collect()
    }

    /// `frames` frames of `format` from a tcp-send of `connections` connections and a
    /// `window`, through a proxy that cuts its `cut`-th connection after `after` bytes, into a
    /// tcp-receive; every frame it handed on (number and bytes), and the connections made.
    fn through(
        format: FrameFormat,
        frames: u64,
        sender: &str,
        cut: usize,
        after: usize,
    ) -> (Vec<(u64, Vec<u8>)>, usize) {
        use gpuipc_plugin_api::{FrameInfo, FrameLayout, InputFrame, testing::cpu_context};
        use gpuipc_tcp_send::send::TcpSend;
        let len = FrameLayout::for_format(format).unwrap().total_bytes as usize;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let text = format!(
            "listen = \"127.0.0.1:{port}\"\nlink = \"a->b\"\nformat = \"{}\"\nwidth = {}\nheight = {}\nreconnect_timeout_s = 20.0",
            PixelFormat::from_code(format.pixel).unwrap().name(),
            format.width,
            format.height
        );
        let params = parse_params::<TcpReceive>(&text).unwrap();
        let mut receiver = TcpReceive::create(params, &[], Some(format), &cpu_context()).unwrap();
        let (proxy, connections) = cutting_proxy(format!("127.0.0.1:{port}").parse().unwrap(), cut, after);
        let text = format!("to = \"{proxy}\"\nlink = \"a->b\"\nconnect_timeout_s = 20.0\n{sender}");
        let params = parse_params::<TcpSend>(&text).unwrap();
        let sending = std::thread::spawn(move || {
            let mut stage = TcpSend::create(params, &[format], None, &cpu_context()).unwrap();
            for seq in 0..frames {
                let bytes = frame_bytes(seq, len);
                let info = FrameInfo::new(format, seq, 1000 + seq).unwrap();
                let input = InputFrame::host(info, &bytes).unwrap();
                stage.process(&[input], None, &ProcessContext { frame_index: seq, cuda_stream: 0 }).unwrap();
            }
            stage.flush().unwrap();
        });
        let mut got = Vec::new();
        let mut slot = vec![0u8; len];
        let mut expected = 0;
        loop {
            let info = FrameInfo::new(format, expected, 0).unwrap();
            let mut out = OutputFrame::host(info, &mut slot).unwrap();
            receiver.process(&[], Some(&mut out), &ProcessContext { frame_index: expected, cuda_stream: 0 }).unwrap();
            if out.ends_stream() {
                break;
            }
            assert!(out.relays());
            let seq = out.info().seq;
            expected = seq + 1;
            got.push((seq, slot.clone()));
        }
        receiver.flush().unwrap();
        sending.join().unwrap();
        (got, connections.load(Ordering::SeqCst))
    }

    fn assert_every_frame(got: &[(u64, Vec<u8>)], frames: u64) {
        assert_eq!(got.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (0..frames).collect::<Vec<_>>());
        for (seq, bytes) in got {
            assert!(*bytes == frame_bytes(*seq, bytes.len()), "frame {seq} differs from what was sent");
        }
    }

    #[test]
    fn frames_cross_several_connections_byte_for_byte_large_and_small() {
        // 1024x512 rgb8: 1.5 MiB, each stripe written and read by a thread of its own; 40x30:
        // 3,600 bytes, the stripes one after the other, 1,200 bytes each.
        for (format, frames) in
            [(FrameFormat::new(PixelFormat::Rgb8, 1024, 512), 12), (FrameFormat::new(PixelFormat::Rgb8, 40, 30), 50)]
        {
            for (sender, k) in [("connections = 3", 3), ("connections = 3\nwindow = 4", 3), ("connections = 1", 1)] {
                // Nothing cut (a connection number no link reaches): one set of k connections.
                let (got, connections) = through(format, frames, sender, usize::MAX, 0);
                assert_every_frame(&got, frames);
                assert_eq!(connections, k);
            }
        }
    }

    #[test]
    fn a_stripes_connection_cut_mid_frame_breaks_the_set_and_every_frame_comes_once_whole() {
        let format = FrameFormat::new(PixelFormat::Rgb8, 1024, 512);
        let len = gpuipc_plugin_api::FrameLayout::for_format(format).unwrap().total_bytes as usize;
        let stripe = wire::stripe(len, 2, 3).len();
        for sender in ["connections = 3", "connections = 3\nwindow = 4"] {
            // The third connection (stripe 2 of the first set) cut inside the fifth frame.
            let (got, connections) = through(format, 12, sender, 2, 4 * stripe + stripe / 2);
            assert_every_frame(&got, 12);
            assert!(connections >= 6, "a second set of 3 connections after the cut: {connections} made");
            // The first connection (headers, acknowledgements, stripe 0) cut likewise.
            let first = wire::stripe(len, 0, 3).len() + wire::HEADER_BYTES;
            let (got, connections) = through(format, 12, sender, 0, 4 * first + first / 3);
            assert_every_frame(&got, 12);
            assert!(connections >= 6, "a second set of 3 connections after the cut: {connections} made");
        }
    }
}
