//! `tcp-send`: the producer's end of a link between two hosts. A sink stage on the producer's
//! host that reads its input ring like any consumer and sends every frame over TCP to a
//! `tcp-receive` stage on the consumer's host (cpu domain only; any pixel format). The planner
//! inserts it for a link that crosses hosts; a pipeline may also name it.
//!
//! It connects when the stage starts, retrying every 50 ms until `connect_timeout_s`; sends a
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
