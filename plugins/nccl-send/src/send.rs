//! The nccl-send stage: params, the control connection and communicator with their
//! reconnections, and the frames sent from the kept device buffer.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpuipc_plugin_api::cuda::{NcclId, NcclPair, RawStream, ScratchBuffer, nccl_available};
use gpuipc_plugin_api::{
    CreateContext, DeviceBuffer, Domain, Error, FrameFormat, FrameLayout, InputFrame, OutputFrame, ParamInfo,
    PixelFormat, Plugin, PluginInfo, ProcessContext, Result, bail, info, warn,
};
use gpuipc_tcp_wire::{self as wire, FrameHeader, Hello, Payloads, WireError};
use serde::Deserialize;

/// How long to wait between two connection attempts the receiver refused or did not answer.
const RETRY_EVERY: Duration = Duration::from_millis(50);
/// Sends of one frame that NCCL may fail, each on a new connection, before the stage fails:
/// a broken link is retried, a frame NCCL cannot send at all is not retried for ever.
const MAX_SEND_FAILURES: u32 = 3;

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

/// Why a send failed for good (a broken connection is not a failure: it is retried).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("link '{link}': could not connect to the receiver at {to} within {secs} s (last: {last})")]
    Unreachable { link: String, to: SocketAddr, secs: f64, last: String },
    #[error("link '{link}': the receiver at {to} refused the connection: {reason}")]
    Refused { link: String, to: SocketAddr, reason: String },
    #[error("link '{link}': the receiver at {to} broke the protocol: {what}")]
    Protocol { link: String, to: SocketAddr, what: String },
    #[error("link '{link}': input frame of {got} bytes, its layout needs {need}")]
    ShortFrame { link: String, got: u64, need: u64 },
    #[error("link '{link}': frame {seq} could not be sent over NCCL {tries} times: {last}")]
    Nccl { link: String, seq: u64, tries: u32, last: String },
}

impl From<SendError> for Error {
    fn from(e: SendError) -> Error {
        Error::new(e)
    }
}

/// What broke while sending: the TCP connection (or the communicator with it), or the
/// protocol. NCCL failures count as a broken connection: both are made again.
enum Broken {
    Wire(WireError),
    Nccl(String),
}

impl From<WireError> for Broken {
    fn from(e: WireError) -> Broken {
        Broken::Wire(e)
    }
}

/// One connection: TCP for control, the communicator for payloads.
#[derive(Debug)]
struct Connection {
    stream: TcpStream,
    pair: NcclPair,
}

/// An nccl-send stage instance.
#[derive(Debug)]
pub struct NcclSend {
    to: SocketAddr,
    link: String,
    timeout: Duration,
    format: FrameFormat,
    frame_bytes: u64,
    /// The stage's context and stream: the communicator's, and where every copy and send goes.
    on: RawStream,
    conn: Option<Connection>,
    /// Connections made so far; the hello carries it.
    epoch: u64,
    /// The last frame sent, kept until the receiver acknowledges it: sent again on a new
    /// connection if the old one broke before the acknowledgement. Its bytes are in `kept`.
    unacked: Option<FrameHeader>,
    kept: ScratchBuffer,
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
        let layout = FrameLayout::for_format(format).ok_or_else(|| Error::new(format!("no layout for {format}")))?;
        let bytes = usize::try_from(layout.total_bytes).map_err(|_| Error::new("frame too large"))?;
        Ok(NcclSend {
            to: wire::params::to_address(&params.to).map_err(Error::new)?,
            link: params.link,
            timeout: Duration::from_secs_f64(params.connect_timeout_s),
            format,
            frame_bytes: layout.total_bytes,
            on: RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream },
            conn: None,
            epoch: 0,
            unacked: None,
            kept: ScratchBuffer::zeroed(ctx, bytes)?,
        })
        // Connected at the first frame, not here: see tcp-send (a receiver answers from its
        // frame loop, which starts once every stage of its run is created).
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        _output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        if ctx.cuda_stream != self.on.stream {
            bail!("nccl-send: the runner's stream changed");
        }
        self.first_connect()?;
        let input = inputs.first().ok_or("nccl-send takes 1 input")?;
        let buffer = input.device_buffer().ok_or("nccl-send reads device memory only")?;
        let need = self.frame_bytes;
        if buffer.len < need {
            return Err(SendError::ShortFrame { link: self.link.clone(), got: buffer.len, need }.into());
        }
        // The frame before this one must be in the receiver's ring before this one replaces it.
        self.settle()?;
        // Kept on the GPU, in stream order: the input slot is released when the stage's work
        // on it (this copy and everything before) is done, the kept frame stays for a resend.
        self.kept.copy_from_device(self.on.stream, 0, DeviceBuffer { addr: buffer.addr, len: need })?;
        self.unacked = Some(FrameHeader {
            flags: 0,
            seq: input.info.seq,
            timestamp_ns: input.info.timestamp_ns,
            payload_len: need,
        });
        self.send_kept()
    }

    fn flush(&mut self) -> Result<()> {
        self.first_connect()?;
        self.settle()?;
        loop {
            let sent = self.stream().and_then(|s| s.write_all(&FrameHeader::end().to_bytes()).map_err(WireError::Lost));
            match sent.and_then(|()| self.read_ack(wire::ACK_END)) {
                Ok(()) => return Ok(()),
                Err(e) => self.recover(Broken::Wire(e))?,
            }
        }
    }
}

impl NcclSend {
    fn first_connect(&mut self) -> Result<()> {
        if self.epoch == 0 && self.conn.is_none() { self.connect() } else { Ok(()) }
    }

    fn stream(&mut self) -> Result<&mut TcpStream, WireError> {
        self.conn
            .as_mut()
            .map(|c| &mut c.stream)
            .ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))
    }

    /// Send the kept frame (its header over TCP, its bytes by NCCL), again on a new connection
    /// until it is sent.
    fn send_kept(&mut self) -> Result<()> {
        let Some(header) = self.unacked else { return Ok(()) };
        let mut failures = 0;
        loop {
            match self.try_send(header) {
                Ok(()) => return Ok(()),
                Err(Broken::Nccl(last)) => {
                    failures += 1;
                    if failures >= MAX_SEND_FAILURES {
                        return Err(SendError::Nccl {
                            link: self.link.clone(),
                            seq: header.seq,
                            tries: failures,
                            last,
                        }
                        .into());
                    }
                    self.recover(Broken::Nccl(last))?;
                }
                Err(broken) => self.recover(broken)?,
            }
        }
    }

    fn try_send(&mut self, header: FrameHeader) -> Result<(), Broken> {
        let (addr, len, stream, timeout) = (self.kept.addr(), self.frame_bytes as usize, self.on.stream, self.timeout);
        let conn = self.conn.as_mut().ok_or_else(|| WireError::Lost(std::io::ErrorKind::NotConnected.into()))?;
        conn.stream.write_all(&header.to_bytes()).map_err(WireError::Lost)?;
        let Connection { stream: tcp, pair } = conn;
        // NCCL takes the send once the receiver has posted its receive (it read the header);
        // a receiver that dies meanwhile closes the TCP connection.
        pair.send(addr, len, stream, Instant::now() + timeout, &mut || wire::peer_gone(tcp))
            .map_err(|e| Broken::Nccl(e.to_string()))
    }

    /// Wait for the acknowledgement of the kept frame, sending it again on a new connection
    /// until one comes.
    fn settle(&mut self) -> Result<()> {
        while self.unacked.is_some() {
            match self.read_ack(wire::ACK_FRAME) {
                Ok(()) => self.unacked = None,
                Err(e) => {
                    self.recover(Broken::Wire(e))?;
                    self.send_kept()?;
                }
            }
        }
        Ok(())
    }

    fn read_ack(&mut self, want: u8) -> Result<(), WireError> {
        let mut ack = [0u8; 1];
        self.stream()?.read_exact(&mut ack)?;
        match ack[0] {
            got if got == want => Ok(()),
            got => Err(WireError::Protocol(format!("acknowledgement {got:#04x}, expected {want:#04x}"))),
        }
    }

    /// After `broken`: the communicator is aborted (ending a send the GPU may be blocked in)
    /// and the connection made again within the timeout; a protocol error fails.
    fn recover(&mut self, broken: Broken) -> Result<()> {
        // Dropping the pair aborts it.
        self.conn = None;
        match broken {
            Broken::Wire(WireError::Protocol(what)) => {
                Err(SendError::Protocol { link: self.link.clone(), to: self.to, what }.into())
            }
            Broken::Wire(WireError::Lost(io)) => {
                warn!("link '{}': connection {} to {} lost ({io}); connecting again", self.link, self.epoch, self.to);
                self.connect()
            }
            Broken::Nccl(what) => {
                warn!(
                    "link '{}': NCCL on connection {} to {} failed ({what}); connecting again",
                    self.link, self.epoch, self.to
                );
                self.connect()
            }
        }
    }

    /// Connect, say hello, join the communicator; retrying until the timeout.
    fn connect(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut last = String::from("no attempt");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(SendError::Unreachable {
                    link: self.link.clone(),
                    to: self.to,
                    secs: self.timeout.as_secs_f64(),
                    last,
                }
                .into());
            }
            match self.try_connect(left) {
                Ok(conn) => {
                    self.conn = Some(conn);
                    return Ok(());
                }
                Err(WireError::Lost(e)) => last = e.to_string(),
                Err(WireError::Protocol(reason)) => {
                    return Err(SendError::Refused { link: self.link.clone(), to: self.to, reason }.into());
                }
            }
            std::thread::sleep(RETRY_EVERY.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    /// One attempt: connect, hello, answer, the unique id, the communicator. A refusal comes
    /// back as `Protocol`; a communicator that cannot form as `Lost` (tried again).
    fn try_connect(&mut self, left: Duration) -> Result<Connection, WireError> {
        let mut stream = TcpStream::connect_timeout(&self.to, left)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(left))?;
        self.epoch += 1;
        let hello =
            Hello { epoch: self.epoch, format: self.format, frame_bytes: self.frame_bytes, link: self.link.clone() };
        hello.write_for(&mut stream, Payloads::Nccl)?;
        wire::read_answer(&mut stream)?.map_err(WireError::Protocol)?;
        let id = NcclId::from_bytes(wire::read_nccl_id(&mut stream)?);
        let pair = NcclPair::connect(self.on, &id, 0, Instant::now() + left, &mut || wire::peer_gone(&stream))
            .map_err(|e| WireError::Lost(std::io::Error::other(format!("the NCCL communicator did not form: {e}"))))?;
        // Acknowledgements wait for the receiver's ring (backpressure): no timeout on them.
        stream.set_read_timeout(None)?;
        info!(
            "link '{}': connection {} to {} from {}, NCCL rank 0",
            self.link,
            self.epoch,
            self.to,
            stream.local_addr()?
        );
        Ok(Connection { stream, pair })
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
