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
//! then each frame as a header and the slot's bytes. It sends up to `window` frames ahead of
//! the receiver's acknowledgements, keeping a copy of each until it is acknowledged: when the
//! connection breaks (either end died), it connects again (a new epoch) and sends every
//! unacknowledged frame again, oldest first, so nothing is lost or half-delivered. At the end
//! of stream it waits for every acknowledgement, sends an end header and waits for its
//! acknowledgement before the stage exits.
//! The wire format is `gpuipc_tcp_wire`'s, and so is the session (connecting, the window,
//! reconnecting and sending again, the end of stream), shared with `nccl-send`: this stage
//! keeps how a frame's bytes travel (copied, and written after their header).
//!
//! # Params
//!
//! | param | type | default | meaning |
//! |---|---|---|---|
//! | `to` | string, ADDRESS:PORT | required | the receiver's address and port |
//! | `link` | string | required | the link's name; the receiver must name the same |
//! | `connect_timeout_s` | float, > 0 | `30.0` | how long to keep trying to connect, at start and after a connection breaks |
//! | `window` | integer, 1 to 64 | `1` | frames sent ahead of the receiver's acknowledgements (each kept as a copy until acknowledged) |
//! | `connections` | integer, 1 to 16 | `4` | TCP connections of the link, each carrying a stripe of every frame on a thread of its own |
//!
//! # Wire protocol
//!
//! Little-endian integers, `connections` TCP connections per link (the `gpuipc-tcp-wire`
//! crate):
//!
//! 1. hello, sender → receiver, on each connection: `magic u32` ("GPNH"), `version u16` (2),
//!    `link_len u16`, `epoch u64` (the sender's connection number, from 1), `pixel u32` (the
//!    pixel format's code), `width u32`, `height u32`, `frame_bytes u64` (a frame's bytes in
//!    the ring's layout, padding included), `connections u16` (K), `stripe u16` (which
//!    connection this is, from 0), then the link's name. The first connection's hello is
//!    answered (and its payload path made) before the sender opens the others, in order;
//! 2. answer, receiver → sender: `status u8` (0 accept, 1 refuse), `reason_len u16`, the reason.
//!    A receiver refuses another link's sender, or another format, naming both ends' formats
//!    (`link 'gen->b': the sender sends rgb8 32x32 (...), the receiver expects rgb8 64x64 (...)`);
//!    the sender then fails with that text;
//! 3. each frame, sender → receiver: a 32-byte header (`magic u32` "GPNF", `flags u32`, `seq u64`,
//!    `timestamp_ns u64`, `payload_len u64`) on the first connection, then the frame's bytes
//!    exactly as its ring slot holds them, cut in K stripes: bytes `len * i / K` up to
//!    `len * (i + 1) / K` on connection i, which the receiver reads straight into its own
//!    ring's slot. A frame of 1 MiB or more has each stripe written by a thread of its own
//!    (and read by one at the receiver): one connection is one core's copy into the kernel,
//!    and another's out of it. Flag 1, END_OF_STREAM, has no payload;
//! 4. acknowledgements, receiver → sender, on the first connection, one byte each, in the
//!    order the frames were sent:
//!    `0x06` when a frame is published in the receiver's ring (it is when the receiver's runner
//!    asks for the next one) or was already, `0x04` for the end of stream. The sender has up to
//!    `window` frames unacknowledged.
//!
//! # Reconnection
//!
//! The sender keeps a copy of every frame it sent until the receiver acknowledges it, and has
//! at most `window` of them: with the window full it waits for the oldest acknowledgement
//! before it takes the next frame, so the receiver's ring full (backpressure) holds the
//! sender, and through its ring the producer. Sending and receiving overlap: the sender copies
//! and sends frame N+1 while the receiver still reads and publishes frame N (with `window = 1`
//! they take turns). When the connection breaks (reset, broken pipe, end of file; the receiver
//! or the sender died and restarts by its policy; any one of the K connections breaking
//! breaks the set), the sender connects again within
//! `connect_timeout_s` (a new epoch, a new hello) and sends every unacknowledged frame again,
//! oldest first; the receiver acknowledges each and publishes those its ring does not have yet
//! (their numbers are at or above the next the ring expects). A frame is never published
//! half-read. The end of stream is sent at `flush`, after every acknowledgement, and
//! acknowledged before the sender's stage exits.
//!
//! The copy (one a frame, into a reused buffer) is what lets a *receiver* die and restart
//! without losing a frame: the input slot goes back to the producer when `process` returns,
//! long before the receiver acknowledges it. What a *sender* that dies loses: the frame it was
//! taking (counted lost by its host), and, with `window > 1`, frames it had sent whose bytes
//! were still in its own kernel's send buffer when the kernel reset the connection (it does
//! at the death of a process with acknowledgements unread); those are not counted. Bytes that
//! reached the receiver's kernel are read and published (Linux keeps them readable after a
//! reset). This happens over loopback too: in the SIGKILL test of the sender with `window = 4`,
//! 3 runs in 15 delivered one frame fewer than produced and counted lost. Hence the default
//! of 1, with which the only frame at stake is the one being taken. Keeping the frames in
//! flight countable needs the host: a sink that holds its input slots until they are
//! acknowledged (no copy then either) or tells its host what it has in flight.
//!
//! With `window = 1` one race remains, and was there before the window: the host marks a
//! sink's frame done after its `process` returns, so a sender killed between its frame's last
//! byte going out and that mark has the frame delivered and counted lost both (at most one
//! frame a kill; the test allows exactly that frame, found by the sender's tap).
//!
//! # Throughput
//!
//! Measured on the 2-core development VM (shared with other work: load average 1 to 7 during
//! the runs), loopback, release-built plugins under a debug-built `gpuipc-host`, generator
//! 3840x2160 rgb8 -> tcp-send | tcp-receive -> null, 300 frames, frames/s at the sink:
//! before the window (one frame in flight, copied then sent) 55–71; after, `window = 1`
//! 55–76, `window = 2` 57–75, `window = 4` 57–78. The spread between runs is larger than any
//! difference between the settings. At 1920x1080 (6.2 MB a frame, 600 frames, three rounds):
//! before 270–284, `window = 1` 290–294, `window = 4` 290–309 (two runs: the third's port was
//! taken by another program): a gain in every round, and as large with `window = 1`, so it
//! comes from the copy on a second thread and the one `writev` a frame, not from the window.
//! On this machine the sender is bound by its own CPU work, not by waiting: copying a 4K frame takes 4–6 ms and writing it into loopback TCP about
//! 8 ms on the sender's core, and the receiver reads each frame with the sender's next one
//! already under way. Copying on a second thread while the frame is sent from its slot took
//! one pair of back-to-back runs on a quiet machine from 67 to 75 frames/s; under load the
//! difference is lost in the noise. A window is for machines with cores to spare
//! (the 16-core GPU machine ran 59 frames/s with the sender 99.7 % busy, where raw TCP moves
//! 130–162): whether a window gains there is not measured yet; try `window = 4` there,
//! knowing the cost above. The cost: `window` copies of a frame per link
//! (4 x 24.9 MB for 4K RGB). Socket buffers are left to the kernel's autotuning (up to 32 MiB
//! to receive here); setting `SO_SNDBUF`/`SO_RCVBUF` turns it off and is capped by
//! `net.core.wmem_max`/`rmem_max` (4 MiB here), so it could only make things worse here.
//!
//! `connections` (4 by default) cuts each frame into that many stripes, each written by a
//! thread of its own on a TCP connection of its own (and read likewise at the receiver):
//! one connection is one core's copy into the kernel at the sender and one out of it at the
//! receiver, and a plain TCP stream over loopback or a fast NIC moves more over several
//! (`scripts/bench-tcp.sh` measures the bridge against a plain stream of one and of several
//! connections on the same path, in one run; figures in docs/benchmarks.md, "TCP bridge
//! against a plain TCP stream"). On the 2-core development VM, 4K over loopback: 4
//! connections 78–107 frames/s against 66–94 with 1, where one plain connection moved
//! 68–116 in the same rounds. Each end logs where its time went at its end of stream
//! (waiting for acknowledgements, writing, the kept copy; waiting for headers, reading).
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
