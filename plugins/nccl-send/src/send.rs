//! The nccl-send stage: its params, and how a frame's payload travels (from a device copy the
//! stage keeps, by `ncclSend` on a communicator made for each connection). The session
//! (connecting, the window, reconnections) is `gpuipc_tcp_wire::sender`'s.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use gpuipc_plugin_api::cuda::{NcclId, NcclPair, RawStream, ScratchBuffer, nccl_available};
use gpuipc_plugin_api::{
    CreateContext, DeviceBuffer, Domain, Error, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin,
    PluginInfo, ProcessContext, Result, bail,
};
use gpuipc_tcp_wire::sender::{Broken, SendCarrier, SendError, SenderSession};
use gpuipc_tcp_wire::{self as wire, Connection, FrameHeader, Payloads, WireError};
use serde::Deserialize;

/// The `params` table of an nccl-send stage.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    pub to: String,
    pub link: String,
    #[serde(default = "default_timeout")]
    pub connect_timeout_s: f64,
}

fn default_timeout() -> f64 {
    30.0
}

/// Payloads by NCCL: a communicator for each connection, each frame sent from the one device
/// buffer the stage keeps it in (so its window is 1: the frame before must be in the
/// receiver's ring before the next replaces it).
#[derive(Debug)]
pub struct NcclCarrier {
    /// The stage's context and stream: the communicator's, and where every copy and send goes.
    on: RawStream,
    /// The last frame sent, kept until the receiver acknowledges it.
    kept: ScratchBuffer,
}

impl SendCarrier for NcclCarrier {
    type Path = NcclPair;
    /// The frame is in `kept`, on the GPU.
    type Kept = ();
    const PAYLOADS: Payloads = Payloads::Nccl;
    const PATH_NOTE: &'static str = ", NCCL rank 0";

    /// The unique id the receiver sends after accepting, and the communicator on it.
    fn join(&mut self, stream: &mut TcpStream, left: Duration) -> Result<NcclPair, WireError> {
        let id = NcclId::from_bytes(wire::read_nccl_id(stream)?);
        NcclPair::connect(self.on, &id, 0, Instant::now() + left, &mut || wire::peer_gone(stream))
            .map_err(|e| WireError::Lost(std::io::Error::other(format!("the NCCL communicator did not form: {e}"))))
    }

    fn send(
        &mut self,
        conn: &mut Connection<NcclPair>,
        header: &FrameHeader,
        _kept: &(),
        timeout: Duration,
    ) -> Result<(), Broken> {
        conn.stream.write_all(&header.to_bytes()).map_err(WireError::Lost)?;
        let Connection { stream: tcp, path: pair, .. } = conn;
        let (addr, len) = (self.kept.addr(), header.payload_len as usize);
        // NCCL takes the send once the receiver has posted its receive (it read the header);
        // a receiver that dies meanwhile closes the TCP connection.
        pair.send(addr, len, self.on.stream, Instant::now() + timeout, &mut || wire::peer_gone(tcp))
            .map_err(|e| Broken::Payload { seq: header.seq, what: e.to_string() })
    }
}

/// An nccl-send stage instance.
#[derive(Debug)]
pub struct NcclSend {
    session: SenderSession<NcclCarrier>,
}

impl Plugin for NcclSend {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "nccl-send",
        version: env!("CARGO_PKG_VERSION"),
        description: "sends every frame of its input GPU to GPU over NCCL to an nccl-receive stage on another host",
        domains: &[Domain::Cuda],
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
            description: "how long to keep trying to connect (TCP and the communicator), at start and after a connection breaks",
        },
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        let problems =
            wire::params::sender_problems(&params.to, &params.link, ("connect_timeout_s", params.connect_timeout_s));
        wire::params::checked(problems)
    }

    fn negotiate(_params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if inputs.len() != 1 {
            bail!("nccl-send takes 1 input, got {}", inputs.len());
        }
        Ok(None)
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        _output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<NcclSend> {
        if ctx.domain != Domain::Cuda {
            bail!(
                "nccl-send runs in the cuda domain only (it sends from the ring's device memory); give it device = \"cuda:N\""
            );
        }
        if !nccl_available() {
            // The library's own error says where it was looked for and what to do.
            NcclId::new()?;
        }
        let format = *inputs.first().ok_or("nccl-send takes 1 input")?;
        let setup = wire::params::sender_setup(&params.to, params.link, params.connect_timeout_s, format, 1, 1)?;
        let bytes = usize::try_from(setup.frame_bytes).map_err(|_| Error::new("frame too large"))?;
        let carrier = NcclCarrier {
            on: RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream },
            kept: ScratchBuffer::zeroed(ctx, bytes)?,
        };
        // Connected at the first frame, not here (`SenderSession::start` says why).
        Ok(NcclSend { session: SenderSession::new(carrier, setup) })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let on = self.session.carrier().on.stream;
        if ctx.cuda_stream != on {
            bail!("nccl-send: the runner's stream changed");
        }
        self.session.start()?;
        let input = inputs.first().ok_or("nccl-send takes 1 input")?;
        let buffer = input.device_buffer().ok_or("nccl-send reads device memory only")?;
        let need = self.session.setup().frame_bytes;
        if buffer.len < need {
            let link = self.session.setup().link.clone();
            return Err(SendError::ShortFrame { link, got: buffer.len, need }.into());
        }
        // The frame before this one must be in the receiver's ring before this one replaces it.
        self.session.make_room()?;
        // Kept on the GPU, in stream order: the input slot is released when the stage's work
        // on it (this copy and everything before) is done, the kept frame stays for a resend.
        self.session.carrier_mut().kept.copy_from_device(on, 0, DeviceBuffer { addr: buffer.addr, len: need })?;
        let header =
            FrameHeader { flags: 0, seq: input.info.seq, timestamp_ns: input.info.timestamp_ns, payload_len: need };
        self.session.send_new(header, ())
    }

    fn flush(&mut self) -> Result<()> {
        self.session.finish()
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;

    use super::*;

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<NcclSend>(
            include_str!("lib.rs"),
            "to = \"127.0.0.1:1\"\nlink = \"a->b\"",
        );
    }

    #[test]
    fn check_names_every_bad_param() {
        let params = parse_params::<NcclSend>("to = \"host:7\"\nlink = \"\"\nconnect_timeout_s = -1.0").unwrap();
        let e = NcclSend::check(&params, &[]).unwrap_err().to_string();
        for what in
            ["param `to`: \"host:7\" is not ADDRESS:PORT", "param `link`", "param `connect_timeout_s` must be > 0"]
        {
            assert!(e.contains(what), "{what} in {e}");
        }
        assert!(parse_params::<NcclSend>("to = \"127.0.0.1:1\"\nlink = \"l\"\nlisten = \"x\"").is_err());
    }

    #[test]
    fn it_is_a_sink_of_the_cuda_domain_and_refuses_the_cpu_one() {
        assert_eq!(NcclSend::INFO.domains, &[Domain::Cuda]);
        let params = parse_params::<NcclSend>("to = \"127.0.0.1:1\"\nlink = \"a->b\"").unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        assert_eq!(NcclSend::negotiate(&params, &[format]).unwrap(), None);
        let e = NcclSend::create(params, &[format], None, &gpuipc_plugin_api::testing::cpu_context()).unwrap_err();
        assert!(e.to_string().contains("cuda domain only"), "{e}");
    }

    /// Where libnccl.so.2 cannot be loaded (here), the stage fails at create saying what to
    /// install, before it touches the (here fake) context.
    #[test]
    fn without_nccl_create_says_where_to_get_it() {
        if nccl_available() {
            eprintln!("NCCL is present; the missing-library path is not exercised here");
            return;
        }
        let params = parse_params::<NcclSend>("to = \"127.0.0.1:1\"\nlink = \"a->b\"").unwrap();
        let format = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        let ctx = CreateContext {
            domain: Domain::Cuda,
            device_ordinal: Some(0),
            cuda_context: 0x1000,
            cuda_stream: 0x2000,
            ..gpuipc_plugin_api::testing::cpu_context()
        };
        let e = NcclSend::create(params, &[format], None, &ctx).unwrap_err().to_string();
        assert!(e.contains("libnccl.so.2") && e.contains("nvidia-nccl-cu13"), "{e}");
    }
}
