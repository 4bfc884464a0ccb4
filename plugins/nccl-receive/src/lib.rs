//! `nccl-receive`: the consumer's end of a link between two hosts whose frames go GPU to GPU.
//! A source stage in the cuda domain on the consumer's host, named like the producer so its
//! consumers' `inputs` stay as they are; it takes the frames an `nccl-send` stage sends,
//! each frame's header over TCP and its bytes by `ncclRecv` straight into a slot of its output
//! ring in device memory, on the stage's stream, under the frame's own sequence number and
//! timestamp (`OutputFrame::relay`).
//!
//! It listens when the stage starts and accepts a sender within `reconnect_timeout_s`; checks
//! the sender's hello (an NCCL sender's, with its link name, format and frame size, or it
//! refuses naming both and fails); makes an NCCL unique id, sends it over the connection and
//! joins the two-rank communicator with the sender (this end rank 1), created non-blocking.
//! Per frame it reads the header, receives the bytes into the slot and waits (polling, never
//! blocked) until the GPU has them before handing the frame on, so a frame is never published
//! half-received. A connection lost (or an NCCL error) aborts the communicator (which ends a
//! receive the GPU is blocked in), drops the frame's bytes, and waits for the sender to
//! connect again, with a new unique id and a new communicator, which sends the frame again.
//! A frame that comes again after it was published is received, acknowledged and not
//! published twice. The wire format is `gpuipc_tcp_wire`'s, with its NCCL hello, and so is
//! the session, shared with `tcp-receive`: this stage keeps how a frame's bytes travel (the
//! unique id, the communicator, `ncclRecv` and the wait for the GPU).
//!
//! It needs `libnccl.so.2` on the library path, as `nccl-send` does, and two agents on one
//! machine need distinct `NCCL_HOSTID`s (docs/multi-host.md). Leave the pipeline's `frames`
//! out on the receiver's host: the sender's side counts frames.
//!
//! # Params
//!
//! | param | type | default | meaning |
//! |---|---|---|---|
//! | `listen` | string, ADDRESS:PORT | required | the address and port to listen on |
//! | `link` | string | required | the link's name; the sender must name the same |
//! | `format` | `"rgb8" \| "rgba8" \| "gray8" \| "i420" \| "nv12" \| "p010"` | required | the frames' pixel format |
//! | `width` | integer, > 0 | required | frame width in pixels |
//! | `height` | integer, > 0 | required | frame height in pixels |
//! | `reconnect_timeout_s` | float, > 0 | `30.0` | how long to wait for a sender (and its communicator, and a frame's bytes), at start and after a connection breaks |
//!
//! ```toml
//! [[stage]]
//! name = "gen"
//! plugin = "nccl-receive"
//! device = "cuda:0"
//! restart = "on-failure"
//! params = { listen = "10.77.0.2:7448", link = "gen->b", format = "rgb8", width = 1920, height = 1080 }
//! ```
#![deny(unsafe_code)]

pub mod receive;

gpuipc_plugin_api::export_plugin!(receive::NcclReceive);
