//! `tcp-receive`: the consumer's end of a link between two hosts. A source stage on the
//! consumer's host, named like the producer so its consumers' `inputs` stay as they are; it
//! takes the frames a `tcp-send` stage sends and writes each straight into a slot of its output
//! ring (cpu domain only), under the frame's own sequence number and timestamp
//! (`OutputFrame::relay`).
//!
//! It listens when the stage starts and accepts a sender within `reconnect_timeout_s`; checks
//! the sender's hello (link name, format and frame size must be its own, or it refuses naming
//! both and fails); then reads each frame's header and bytes. A connection lost before a frame
//! is complete drops that frame's bytes (never published) and waits for the sender to connect
//! again, which sends it again. Each connection is logged as `link 'L': connection N from PEER
//! to LOCAL`. It acknowledges every frame in the order it came, once it is published (when
//! the runner asks for the next one), so a sender may have several in flight (its `window`);
//! a frame that comes again after it was published (sent again after a reconnection, the
//! sender not having heard the acknowledgement) is acknowledged and not published twice.
//! Nothing here depends on the sender's window. A sender that goes silent without closing
//! the connection (frozen, or its network gone without a reset) leaves this stage waiting in
//! its plugin: the stage's `stall_timeout` watchdog ends it and its restart policy starts it
//! again, listening for the sender's next connection. The wire format is
//! `gpuipc_tcp_wire`'s, and so is the session (listening, the hello check, acknowledgements,
//! reconnections), shared with `nccl-receive`: this stage keeps how a frame's bytes travel
//! (read off the connection into the slot).
//!
//! A sender's link may have several TCP connections (its `connections` param; the hello says
//! how many): this stage accepts the sender's first connection, then the others of the same
//! epoch, and reads each frame's stripes off them into the slot (a frame of 1 MiB or more,
//! each stripe on a thread of its own). Any of them breaking drops the frame being read and
//! the whole set, and the sender connects again, as above; nothing to set here.
//!
//! Leave the pipeline's `frames` out on the receiver's host: the sender's side counts frames,
//! and the stream ends when the sender's does.
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
//! | `reconnect_timeout_s` | float, > 0 | `30.0` | how long to wait for a sender, at start and after a connection breaks |
//!
//! ```toml
//! [[stage]]
//! name = "gen"
//! plugin = "tcp-receive"
//! restart = "on-failure"
//! params = { listen = "10.77.0.2:7448", link = "gen->b", format = "rgb8", width = 1920, height = 1080 }
//! ```
#![deny(unsafe_code)]

pub mod receive;

gpuipc_plugin_api::export_plugin!(receive::TcpReceive);
