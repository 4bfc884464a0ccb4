//! `nccl-send`: the producer's end of a link between two hosts whose frames go GPU to GPU. A
//! sink stage in the cuda domain on the producer's host that reads its input ring (in device
//! memory) like any consumer and sends every frame to an `nccl-receive` stage on the
//! consumer's host: the frame's header over TCP, its bytes by `ncclSend` on the stage's stream
//! (any pixel format). The planner inserts it for a link whose consumer asks for
//! `input_transport = "nccl"` (docs/multi-host.md); a pipeline may also name it.
//!
//! The control connection is `tcp-send`'s: it connects at its first frame (or its end of
//! stream), retrying every 50 ms until `connect_timeout_s`, and sends a hello (link name,
//! format, frame size) that the receiver accepts or refuses with a reason. The receiver then
//! sends an NCCL unique id and both join a two-rank communicator (this end rank 0), created
//! non-blocking so that a peer that dies while it forms is noticed. Each frame is first copied,
//! on the GPU, into a device buffer of the stage's own (the kept frame), then sent from it:
//! the frame is kept until the receiver acknowledges it (once it is published in its ring).
//! When the connection breaks, the communicator is aborted (which ends a send the GPU is
//! blocked in), and the sender connects again (new TCP connection, new unique id, new
//! communicator) and sends the kept frame again. At the end of stream it sends an end header
//! and waits for its acknowledgement before the stage exits. The wire format is
//! `gpuipc_tcp_wire`'s, with its NCCL hello, and so is the session, shared with `tcp-send`:
//! this stage keeps how a frame's bytes travel (the device copy, the communicator, `ncclSend`).
//!
//! It needs `libnccl.so.2` on the library path (`LD_LIBRARY_PATH`; the PyPI package
//! `nvidia-nccl-cu13` ships it in `site-packages/nvidia/nccl/lib`): without it the stage fails
//! at start, saying so. Two agents on one machine need distinct `NCCL_HOSTID`s in their
//! environment (docs/multi-host.md); the stage sets nothing itself.
//!
//! # Params
//!
//! | param | type | default | meaning |
//! |---|---|---|---|
//! | `to` | string, ADDRESS:PORT | required | the receiver's address and port |
//! | `link` | string | required | the link's name; the receiver must name the same |
//! | `connect_timeout_s` | float, > 0 | `30.0` | how long to keep trying to connect (TCP and the communicator), at start and after a connection breaks |
//!
//! ```toml
//! [[stage]]
//! name = "gen-to-b"
//! plugin = "nccl-send"
//! inputs = ["gen"]
//! device = "cuda:0"
//! restart = "on-failure"
//! params = { to = "10.77.0.2:7448", link = "gen->b" }
//! ```
#![deny(unsafe_code)]

pub mod send;

gpuipc_plugin_api::export_plugin!(send::NcclSend);
