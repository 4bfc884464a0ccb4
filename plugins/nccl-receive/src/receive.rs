//! The nccl-receive stage: its params, and how a frame's payload travels (by `ncclRecv`
//! straight into the output ring's device memory, on a communicator made for each
//! connection). The session (listening, the hello, acknowledgements, reconnections) is
//! `gpuipc_tcp_wire::receiver`'s.

use std::net::{SocketAddr, TcpStream};
use std::time::Instant;

use gpuipc_plugin_api::cuda::{NcclId, NcclPair, RawStream, nccl_available};
use gpuipc_plugin_api::{
    CreateContext, Domain, FrameFormat, InputFrame, OutputFrame, ParamInfo, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail,
};
use gpuipc_tcp_wire::params::ReceiverParams;
use gpuipc_tcp_wire::receiver::{ReceiveCarrier, Received, ReceiverSession};
use gpuipc_tcp_wire::{self as wire, Connection, Payloads};

/// The `params` table of an nccl-receive stage: a receiver's.
pub type Params = ReceiverParams;

/// Payloads by NCCL: for each connection a fresh unique id, sent after the accepting answer,
/// and the two-rank communicator both ends join on it.
#[derive(Debug)]
pub struct NcclCarrier {
    /// The stage's context and stream: the communicator's, and where every receive goes.
    on: RawStream,
}

impl ReceiveCarrier for NcclCarrier {
    type Path = NcclPair;
    type Offer = NcclId;
    const PAYLOADS: Payloads = Payloads::Nccl;
    const PATH_NOTE: &'static str = ", NCCL rank 1";

    /// A fresh id for every connection: the bootstrap of a new communicator.
    fn offer(&mut self) -> Result<NcclId> {
        Ok(NcclId::new()?)
    }

    fn write_offer(&mut self, id: &NcclId, stream: &mut TcpStream) -> std::io::Result<()> {
        wire::write_nccl_id(stream, &id.to_bytes())
    }

    fn join(
        &mut self,
        id: NcclId,
        stream: &TcpStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> Result<NcclPair, String> {
        NcclPair::connect(self.on, &id, 1, deadline, &mut || wire::peer_gone(stream))
            .map_err(|e| format!("the NCCL communicator with {peer} did not form ({e})"))
    }
}

/// An nccl-receive stage instance.
#[derive(Debug)]
pub struct NcclReceive {
    session: ReceiverSession<NcclCarrier>,
}

impl Plugin for NcclReceive {
    type Params = Params;

    const INFO: PluginInfo = PluginInfo {
        name: "nccl-receive",
        version: env!("CARGO_PKG_VERSION"),
        description: "a source of the frames an nccl-send stage on another host sends GPU to GPU over NCCL, under their own numbers",
        domains: &[Domain::Cuda],
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
            description: "how long to wait for a sender (and its communicator, and a frame's bytes), at start and after a connection breaks",
        },
    ];

    fn check(params: &Params, _inputs: &[FrameFormat]) -> Result<()> {
        params.check()
    }

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        if !inputs.is_empty() {
            bail!("nccl-receive is a source: it takes no inputs, got {}", inputs.len());
        }
        params.frame_format().map(Some)
    }

    fn create(
        params: Params,
        _inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<NcclReceive> {
        if ctx.domain != Domain::Cuda {
            bail!(
                "nccl-receive runs in the cuda domain only (it receives into the ring's device memory); give it device = \"cuda:N\""
            );
        }
        if !nccl_available() {
            // The library's own error says where it was looked for and what to do.
            NcclId::new()?;
        }
        let format = output.ok_or("nccl-receive has an output")?;
        let setup = params.setup(format)?;
        let carrier = NcclCarrier { on: RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream } };
        Ok(NcclReceive { session: ReceiverSession::bind(carrier, setup)? })
    }

    fn process(
        &mut self,
        _inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let on = self.session.carrier().on.stream;
        if ctx.cuda_stream != on {
            bail!("nccl-receive: the runner's stream changed");
        }
        let out = output.ok_or("nccl-receive has an output")?;
        let expected = out.info().seq;
        let buffer = out.device_buffer().ok_or("nccl-receive writes device memory only")?;
        let (len, timeout) = (self.session.setup().frame_bytes, self.session.setup().timeout);
        if buffer.len < len {
            bail!("output slot of {} bytes shorter than its frame ({len})", buffer.len);
        }
        // Straight into the slot, and handed on only once the GPU has it whole; the wait ends
        // when NCCL fails or the sender goes away meanwhile.
        let receive = |conn: &mut Connection<NcclPair>| {
            let deadline = Instant::now() + timeout;
            let Connection { stream: tcp, path: pair, .. } = conn;
            pair.recv(buffer.addr, len as usize, on, deadline, &mut || wire::peer_gone(tcp))
                .map_err(|e| e.to_string())?;
            pair.wait_done(deadline, &mut || wire::peer_gone(tcp)).map_err(|e| e.to_string())
        };
        match self.session.receive(expected, receive)? {
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

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::parse_params;

    use super::*;

    const REQUIRED: &str = "listen = \"127.0.0.1:0\"\nlink = \"a->b\"\nformat = \"rgb8\"\nwidth = 4\nheight = 2";

    #[test]
    fn declared_params_match_the_params_type_and_the_docs() {
        gpuipc_plugin_api::param_check::assert_declared::<NcclReceive>(include_str!("lib.rs"), REQUIRED);
    }

    #[test]
    fn check_names_every_bad_param() {
        let text =
            "listen = \"7448\"\nlink = \"a\"\nformat = \"rgb9\"\nwidth = 0\nheight = 2\nreconnect_timeout_s = -1.0";
        let params = parse_params::<NcclReceive>(text).unwrap();
        let e = NcclReceive::check(&params, &[]).unwrap_err().to_string();
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
    fn negotiates_the_format_of_its_params_in_the_cuda_domain_only() {
        assert_eq!(NcclReceive::INFO.domains, &[Domain::Cuda]);
        let params = parse_params::<NcclReceive>(REQUIRED).unwrap();
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 2);
        assert_eq!(NcclReceive::negotiate(&params, &[]).unwrap(), Some(format));
        let e = NcclReceive::create(params, &[], Some(format), &gpuipc_plugin_api::testing::cpu_context()).unwrap_err();
        assert!(e.to_string().contains("cuda domain only"), "{e}");
    }

    #[test]
    fn without_nccl_create_says_where_to_get_it() {
        if nccl_available() {
            eprintln!("NCCL is present; the missing-library path is not exercised here");
            return;
        }
        let params = parse_params::<NcclReceive>(REQUIRED).unwrap();
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 2);
        let ctx = CreateContext {
            domain: Domain::Cuda,
            device_ordinal: Some(0),
            cuda_context: 0x1000,
            cuda_stream: 0x2000,
            ..gpuipc_plugin_api::testing::cpu_context()
        };
        let e = NcclReceive::create(params, &[], Some(format), &ctx).unwrap_err().to_string();
        assert!(e.contains("libnccl.so.2") && e.contains("nvidia-nccl-cu13"), "{e}");
    }
}
