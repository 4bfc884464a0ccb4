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
use gpuipc_tcp_wire::{self as wire, Payloads};

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
        match self.session.receive(expected, |conn| conn.stream.read_exact(slot).map_err(|e| e.to_string()))? {
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
}
