//! `tcp-send`: the producer's end of a link between two hosts. A sink stage on the producer's
//! host that reads its input ring like any consumer and sends every frame over TCP to a
//! `tcp-receive` stage on the consumer's host (cpu domain only; any pixel format). The planner
//! inserts it for a link that crosses hosts; a pipeline may also name it.
//!
//! It connects at its first frame (or its end of stream, if none comes), not when the stage
//! starts: a receiver answers from its frame loop, and a run starts its frame loops only once
//! every stage is created, so two hosts whose links cross both ways would wait for each other.
//! It retries every 50 ms until `connect_timeout_s`; sends a
//! hello (link name, format, frame size) that the receiver accepts or refuses with a reason,
//! then each frame as a header and the slot's bytes. It keeps the last frame until the receiver
//! acknowledges it: when the connection breaks (either end died), it connects again (a new
//! epoch) and sends that frame again, so nothing is lost or half-delivered. At the end of
//! stream it sends an end header and waits for its acknowledgement before the stage exits.
//! The wire format is `gpuipc_tcp_wire`'s.
//!
//! # Params
//!
//! | param | type | default | meaning |
//! |---|---|---|---|
//! | `to` | string, ADDRESS:PORT | required | the receiver's address and port |
//! | `link` | string | required | the link's name; the receiver must name the same |
//! | `connect_timeout_s` | float, > 0 | `30.0` | how long to keep trying to connect, at start and after a connection breaks |
//!
//! # Wire protocol
//!
//! Little-endian integers, one TCP connection per link (the `gpuipc-tcp-wire` crate):
//!
//! 1. hello, sender → receiver: `magic u32` ("GPNH"), `version u16` (1), `link_len u16`,
//!    `epoch u64` (the sender's connection number, from 1), `pixel u32` (the pixel format's
//!    code), `width u32`, `height u32`, `frame_bytes u64` (a frame's bytes in the ring's layout,
//!    padding included), then the link's name;
//! 2. answer, receiver → sender: `status u8` (0 accept, 1 refuse), `reason_len u16`, the reason.
//!    A receiver refuses another link's sender, or another format, naming both ends' formats
//!    (`link 'gen->b': the sender sends rgb8 32x32 (...), the receiver expects rgb8 64x64 (...)`);
//!    the sender then fails with that text;
//! 3. each frame, sender → receiver: a 32-byte header (`magic u32` "GPNF", `flags u32`, `seq u64`,
//!    `timestamp_ns u64`, `payload_len u64`), then the frame's bytes exactly as its ring slot
//!    holds them, which the receiver reads straight into its own ring's slot. Flag 1,
//!    END_OF_STREAM, has no payload;
//! 4. acknowledgements, receiver → sender, one byte each: `0x06` when a frame is published in
//!    the receiver's ring (it is when the receiver's runner asks for the next one), `0x04` for
//!    the end of stream.
//!
//! # Reconnection
//!
//! The sender keeps its last frame until the receiver acknowledges it, and waits for that
//! before it sends the next: one frame in flight, so the receiver's ring full (backpressure)
//! holds the sender, and through its ring the producer. When the connection breaks (reset,
//! broken pipe, end of file; the receiver or the sender died and restarts by its policy), the
//! sender connects again within `connect_timeout_s` (a new epoch, a new hello) and sends the
//! unacknowledged frame again; the receiver publishes it unless its ring has it already (its
//! number is below the next the ring expects). A frame is never published half-read, and the
//! frames a dead sender took but never sent are counted lost by its host, so the frames
//! produced are those delivered plus those counted lost. The end of stream is sent at `flush`
//! and acknowledged before the sender's stage exits. One copy a frame (into the kept frame) is
//! the price of losing nothing when the receiver dies.
//!
//! ```toml
//! [[stage]]
//! name = "gen-to-b"
//! plugin = "tcp-send"
//! inputs = ["gen"]
//! restart = "on-failure"
//! params = { to = "10.77.0.2:7448", link = "gen->b" }
//! ```
#![deny(unsafe_code)]

pub mod send;

gpuipc_plugin_api::export_plugin!(send::TcpSend);
