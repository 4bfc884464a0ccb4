//! `gpuipc-host __nccl-stream`: NCCL's own send and receive between two processes, frame-sized
//! transfers from one device buffer into one device buffer, the yardstick the NCCL bridge is
//! measured against (scripts/bench-tcp.sh), as `gpuipc-tcp-stream` is the TCP bridge's. The
//! receiver (rank 1) listens on a TCP address, makes the NCCL unique id and sends it to the
//! sender (rank 0), as `nccl-receive` does; then `frames` transfers of `bytes` each, enqueued
//! one after the other on the GPU's stream and waited for at the end (after one untimed
//! transfer that sets up NCCL's connection). Each end prints one line as `gpuipc-tcp-stream`
//! does: `stream END conns=1 bytes=B frames=F secs=S gbytes_per_s=G frames_per_s=R cpu=C`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuipc_cuda::{NCCL_ID_BYTES, NcclId, NcclPair};

use crate::gpu::{DeviceMemory, Gpu};

/// How long any wait of the measurement may take.
const DEADLINE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamEnd {
    Receive,
    Send,
}

pub fn main(end: StreamEnd, addr: &str, bytes: usize, frames: usize, device: u32) -> ExitCode {
    match run(end, addr, bytes, frames, device) {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: __nccl-stream: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(end: StreamEnd, addr: &str, bytes: usize, frames: usize, device: u32) -> Result<String, String> {
    let addr: SocketAddr = addr.parse().map_err(|_| format!("{addr:?} is not ADDRESS:PORT"))?;
    if bytes == 0 || frames == 0 {
        return Err("BYTES and FRAMES must be > 0".into());
    }
    let deadline = Instant::now() + DEADLINE;
    let (rank, id) = match end {
        StreamEnd::Receive => {
            let listener = TcpListener::bind(addr).map_err(|e| format!("listen on {addr}: {e}"))?;
            let (mut stream, _) = listener.accept().map_err(|e| format!("accept on {addr}: {e}"))?;
            let id = NcclPair::unique_id().map_err(|e| e.to_string())?;
            stream.write_all(&id.to_bytes()).map_err(|e| format!("sending the NCCL id: {e}"))?;
            (1, id)
        }
        StreamEnd::Send => {
            // The receiver may start a moment later.
            let give_up = Instant::now() + Duration::from_secs(10);
            let mut stream = loop {
                match TcpStream::connect(addr) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() >= give_up => return Err(format!("connect to {addr}: {e}")),
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            };
            let mut id = [0u8; NCCL_ID_BYTES];
            stream.read_exact(&mut id).map_err(|e| format!("reading the NCCL id: {e}"))?;
            (0, NcclId::from_bytes(id))
        }
    };
    let gpu = Arc::new(Gpu::open(device).map_err(|e| e.to_string())?);
    let buffer = DeviceMemory::private(&gpu, bytes).map_err(|e| e.to_string())?;
    let on = gpu.raw_stream();
    let never = &mut || false;
    let mut pair = NcclPair::connect(on, &id, rank, deadline, never).map_err(|e| e.to_string())?;
    let transfer = |pair: &mut NcclPair| match end {
        StreamEnd::Send => pair.send(buffer.addr(), bytes, on.stream, deadline, &mut || false),
        StreamEnd::Receive => pair.recv(buffer.addr(), bytes, on.stream, deadline, &mut || false),
    };
    // One untimed transfer: NCCL connects its ranks at the first.
    transfer(&mut pair).and_then(|()| pair.wait_done(deadline, &mut || false)).map_err(|e| e.to_string())?;
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    for _ in 0..frames {
        transfer(&mut pair).map_err(|e| e.to_string())?;
    }
    pair.wait_done(deadline, never).map_err(|e| e.to_string())?;
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let cpu = (cpu_seconds() - cpu_before) / secs;
    let name = match end {
        StreamEnd::Send => "send",
        StreamEnd::Receive => "receive",
    };
    Ok(format!(
        "stream {name} conns=1 bytes={bytes} frames={frames} secs={secs:.3} gbytes_per_s={:.3} frames_per_s={:.1} cpu={cpu:.2}",
        (bytes * frames) as f64 / secs / 1e9,
        frames as f64 / secs
    ))
}

/// User and system CPU seconds of this process so far (/proc/self/stat; clock ticks of 10 ms).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}
