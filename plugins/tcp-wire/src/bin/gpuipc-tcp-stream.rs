//! `gpuipc-tcp-stream`: a plain TCP stream of frame-sized messages, the yardstick the TCP
//! bridge is measured against (scripts/bench-tcp.sh). No protocol, no acknowledgements, no
//! copies but the kernel's: the sender writes each frame from one buffer, the receiver reads
//! each into one buffer, over `--conns` connections (each frame cut into that many stripes,
//! one a connection, each connection on its own thread, as the bridge's `connections` param
//! does).
//!
//! ```text
//! gpuipc-tcp-stream receive ADDRESS:PORT BYTES FRAMES CONNS
//! gpuipc-tcp-stream send    ADDRESS:PORT BYTES FRAMES CONNS
//! ```
//!
//! Each end prints one line when done: `stream END conns=N bytes=B frames=F secs=S
//! gbytes_per_s=G frames_per_s=R cpu=C` (C: CPU time of the process over the wall time, 1.0 =
//! one core); the receiver's clock runs from its first byte to its last.

#![deny(unsafe_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpuipc-tcp-stream: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let usage = "usage: gpuipc-tcp-stream receive|send ADDRESS:PORT BYTES FRAMES CONNS";
    let [end, addr, bytes, frames, conns] = args else { return Err(usage.into()) };
    let addr: SocketAddr = addr.parse().map_err(|_| format!("{addr:?} is not ADDRESS:PORT"))?;
    let number = |s: &str| s.parse::<usize>().map_err(|_| format!("{s:?} is not a number; {usage}"));
    let (bytes, frames, conns) = (number(bytes)?, number(frames)?, number(conns)?.max(1));
    let cpu_before = cpu_seconds();
    let secs = match end.as_str() {
        "receive" => receive(addr, bytes, frames, conns),
        "send" => send(addr, bytes, frames, conns),
        _ => return Err(usage.into()),
    }
    .map_err(|e| format!("{end}: {e}"))?;
    let cpu = (cpu_seconds() - cpu_before) / secs;
    let total = (bytes * frames) as f64;
    println!(
        "stream {end} conns={conns} bytes={bytes} frames={frames} secs={secs:.3} gbytes_per_s={:.3} frames_per_s={:.1} cpu={cpu:.2}",
        total / secs / 1e9,
        frames as f64 / secs
    );
    Ok(())
}

/// The byte range of stripe `i` of `n` of a frame of `bytes`: the bridge's split.
fn stripe(bytes: usize, i: usize, n: usize) -> std::ops::Range<usize> {
    bytes * i / n..bytes * (i + 1) / n
}

/// Accept `conns` connections (each says its stripe first), read every frame; seconds from the
/// first byte to the last.
fn receive(addr: SocketAddr, bytes: usize, frames: usize, conns: usize) -> std::io::Result<f64> {
    let listener = TcpListener::bind(addr)?;
    let mut streams: Vec<Option<TcpStream>> = (0..conns).map(|_| None).collect();
    for _ in 0..conns {
        let (mut s, _) = listener.accept()?;
        let mut i = [0u8; 4];
        s.read_exact(&mut i)?;
        let i = u32::from_le_bytes(i) as usize;
        *streams.get_mut(i).ok_or(std::io::ErrorKind::InvalidData)? = Some(s);
    }
    let mut frame = vec![0u8; bytes];
    let mut parts: Vec<&mut [u8]> = Vec::new();
    let mut rest = &mut frame[..];
    for i in 0..conns {
        let (head, tail) = rest.split_at_mut(stripe(bytes, i, conns).len());
        parts.push(head);
        rest = tail;
    }
    let first = std::sync::OnceLock::new();
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for (s, part) in streams.into_iter().zip(parts) {
            let mut s = s.ok_or(std::io::ErrorKind::InvalidData)?;
            let first = &first;
            threads.push(scope.spawn(move || -> std::io::Result<()> {
                for n in 0..frames {
                    if n == 0 && !part.is_empty() {
                        s.read_exact(&mut part[..1])?;
                        let _ = first.set(Instant::now());
                        s.read_exact(&mut part[1..])?;
                    } else {
                        s.read_exact(part)?;
                    }
                }
                Ok(())
            }));
        }
        for t in threads {
            t.join().map_err(|_| std::io::Error::other("a reading thread panicked"))??;
        }
        Ok::<(), std::io::Error>(())
    })?;
    let first = first.get().copied().unwrap_or_else(Instant::now);
    Ok(first.elapsed().as_secs_f64().max(1e-9))
}

/// Connect `conns` times (retrying for 10 s while the receiver starts) and write every frame.
fn send(addr: SocketAddr, bytes: usize, frames: usize, conns: usize) -> std::io::Result<f64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut streams = Vec::new();
    for i in 0..conns {
        let mut s = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        s.set_nodelay(true)?;
        s.write_all(&(i as u32).to_le_bytes())?;
        streams.push(s);
    }
    // Not zeros: a page of zeros could be shared copy-on-write, which a real frame is not.
    let frame: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 4096) as u8).collect();
    let start = Instant::now();
    std::thread::scope(|scope| {
        let threads: Vec<_> = streams
            .into_iter()
            .enumerate()
            .map(|(i, mut s)| {
                let part = &frame[stripe(bytes, i, conns)];
                scope.spawn(move || -> std::io::Result<()> {
                    for _ in 0..frames {
                        s.write_all(part)?;
                    }
                    s.shutdown(std::net::Shutdown::Write)?;
                    // Wait for the receiver to close: its last byte has arrived.
                    let _ = s.read(&mut [0u8; 1]);
                    Ok(())
                })
            })
            .collect();
        for t in threads {
            t.join().map_err(|_| std::io::Error::other("a writing thread panicked"))??;
        }
        Ok::<(), std::io::Error>(())
    })?;
    Ok(start.elapsed().as_secs_f64().max(1e-9))
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
