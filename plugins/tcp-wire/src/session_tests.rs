//! A sender session and a receiver session over loopback, with carriers of the tests' own
//! (NCCL's kind of hello, id after the answer and failures, but the payload on the stream), so
//! that what the NCCL stages do when a payload fails is tried without a GPU.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::{FrameFormat, PixelFormat, Result};

use crate::receiver::{ReceiveCarrier, Received, ReceiverSession, ReceiverSetup};
use crate::sender::{Broken, SendCarrier, SenderSession, SenderSetup};
use crate::{Connection, FrameHeader, NCCL_ID_BYTES, Payloads, WireError, read_nccl_id, write_nccl_id};

const FRAME_BYTES: usize = 16;

/// Sends like NCCL (its hello, the id after the answer, a payload that can fail without the
/// connection failing), but the payload follows its header on the stream; fails the first
/// `failures` payloads.
struct FlakyOut {
    failures: u32,
    /// The first byte of each id the receiver offered, one a connection.
    ids: Vec<u8>,
}

impl SendCarrier for FlakyOut {
    type Path = ();
    type Kept = Vec<u8>;
    const PAYLOADS: Payloads = Payloads::Nccl;
    const PATH_NOTE: &'static str = "";

    fn join(&mut self, stream: &mut TcpStream, _left: Duration) -> Result<(), WireError> {
        self.ids.push(read_nccl_id(stream)?[0]);
        Ok(())
    }

    fn send(
        &mut self,
        conn: &mut Connection<()>,
        header: &FrameHeader,
        kept: &Vec<u8>,
        _: Duration,
    ) -> Result<(), Broken> {
        conn.stream.write_all(&header.to_bytes()).map_err(WireError::Lost)?;
        if self.failures > 0 {
            self.failures -= 1;
            return Err(Broken::Payload { seq: header.seq, what: "injected".into() });
        }
        conn.stream.write_all(kept).map_err(|e| WireError::Lost(e).into())
    }
}

/// Takes `FlakyOut`'s hello and offers it a new id for each connection (all its bytes the
/// connection's number); the payload is read off the stream by the caller.
struct StreamIn {
    offers: u8,
}

impl ReceiveCarrier for StreamIn {
    type Path = u8;
    type Offer = [u8; NCCL_ID_BYTES];
    const PAYLOADS: Payloads = Payloads::Nccl;
    const PATH_NOTE: &'static str = ", test path";

    fn offer(&mut self) -> Result<[u8; NCCL_ID_BYTES]> {
        self.offers += 1;
        Ok([self.offers; NCCL_ID_BYTES])
    }

    fn write_offer(&mut self, id: &[u8; NCCL_ID_BYTES], stream: &mut TcpStream) -> std::io::Result<()> {
        write_nccl_id(stream, id)
    }

    fn join(&mut self, id: [u8; NCCL_ID_BYTES], _: &TcpStream, _: SocketAddr, _: Instant) -> Result<u8, String> {
        Ok(id[0])
    }
}

fn setups(sender_link: &str, receiver_link: &str) -> (SenderSetup, ReceiverSetup) {
    // A port just released: the receiver binds it again.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
    let sender = SenderSetup {
        to: addr,
        link: sender_link.into(),
        timeout: Duration::from_secs(20),
        format,
        frame_bytes: FRAME_BYTES as u64,
        window: 1,
        connections: 1,
    };
    let receiver = ReceiverSetup {
        listen: addr,
        link: receiver_link.into(),
        timeout: Duration::from_secs(2),
        format,
        frame_bytes: FRAME_BYTES as u64,
    };
    (sender, receiver)
}

/// Frames as a receiver handed them on: number and bytes.
type Frames = Vec<(u64, Vec<u8>)>;

/// A receiver on its own thread until the end of stream: the frames it handed on, in order.
fn receive_all(setup: ReceiverSetup) -> std::thread::JoinHandle<Result<Frames>> {
    let session = ReceiverSession::bind(StreamIn { offers: 0 }, setup).unwrap();
    std::thread::spawn(move || {
        let mut session = session;
        let mut frames = Vec::new();
        let mut slot = vec![0u8; FRAME_BYTES];
        loop {
            let read = |conn: &mut Connection<u8>| conn.stream.read_exact(&mut slot).map_err(|e| e.to_string());
            match session.receive(frames.len() as u64, read)? {
                Received::Frame(header) => frames.push((header.seq, slot.clone())),
                Received::End => break,
            }
        }
        session.finish();
        Ok(frames)
    })
}

fn header(seq: u64) -> FrameHeader {
    FrameHeader { flags: 0, seq, timestamp_ns: 1000 + seq, payload_len: FRAME_BYTES as u64 }
}

#[test]
fn a_failed_payload_goes_again_on_a_new_connection_and_the_third_failure_of_a_frame_fails() {
    // Two failures: the frame goes on the third connection, and so does the rest.
    let (send_setup, receive_setup) = setups("a->b", "a->b");
    let receiver = receive_all(receive_setup);
    let mut sender = SenderSession::new(FlakyOut { failures: 2, ids: Vec::new() }, send_setup);
    sender.start().unwrap();
    for seq in 0..3 {
        sender.make_room().unwrap();
        sender.send_new(header(seq), vec![seq as u8; FRAME_BYTES]).unwrap();
    }
    sender.finish().unwrap();
    let frames = receiver.join().unwrap().unwrap();
    assert_eq!(frames, (0..3).map(|s| (s, vec![s as u8; FRAME_BYTES])).collect::<Vec<_>>());
    assert_eq!(sender.carrier().ids, [1, 2, 3], "a new id for each connection, read after the answer");

    // Every payload fails: the third failure of frame 0 fails the sender, naming it.
    let (send_setup, receive_setup) = setups("a->b", "a->b");
    let receiver = receive_all(receive_setup);
    let mut sender = SenderSession::new(FlakyOut { failures: u32::MAX, ids: Vec::new() }, send_setup);
    sender.start().unwrap();
    let e = sender.send_new(header(0), vec![0; FRAME_BYTES]).unwrap_err().to_string();
    assert_eq!(e, "link 'a->b': frame 0 could not be sent over NCCL 3 times: injected");
    drop(sender);
    let e = receiver.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("no sender connected to 127.0.0.1:") && e.contains("for link 'a->b' within 2 s"), "{e}");
}

#[test]
fn a_sender_of_another_link_is_refused_and_both_ends_fail_naming_both_links() {
    let (send_setup, receive_setup) = setups("a->b", "a->c");
    let listen = receive_setup.listen;
    let receiver = receive_all(receive_setup);
    let mut sender = SenderSession::new(FlakyOut { failures: 0, ids: Vec::new() }, send_setup);
    let e = sender.start().unwrap_err().to_string();
    let why = format!("this receiver at {listen} takes link 'a->c'");
    assert!(
        e.contains(&format!("link 'a->b': the receiver at {listen} refused the connection: the sender at ")),
        "{e}"
    );
    assert!(e.contains(&format!("sends link 'a->b', {why}")), "{e}");
    let e = receiver.join().unwrap().unwrap_err().to_string();
    assert!(e.contains(&why), "{e}");
}
