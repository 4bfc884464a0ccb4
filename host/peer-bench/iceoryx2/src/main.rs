//! The peer of gpuipc's small-frame benchmark (docs/benchmarks.md, "Small frames against
//! iceoryx2"): iceoryx2's publish-subscribe between two processes, 64-byte payloads, waiting
//! the way a gpuipc link waits.
//!
//! ```text
//! iox2-small pair --frames N [--spin-us S] [--fps F] [--depth D]
//! ```
//!
//! `pair` starts two processes of this program, a subscriber (`sub`) and then a publisher
//! (`pub`), on a service named after its own pid, and prints the subscriber's result as one
//! line of JSON: frames received, frames/s from its first sample to its last, frames lost
//! (a gap in the sequence numbers: must be 0), and the latency of every sample from the
//! publisher's stamp (CLOCK_REALTIME, the clock gpuipc's sources stamp with) to its receipt.
//!
//! How it maps onto a gpuipc link (`block` policy, ring of D slots, a cpu stage waiting
//! `spin_us` then sleeping on a futex):
//!
//! - No sample is lost: the service has no safe overflow, and the publisher's backpressure
//!   strategy is `RetryUntilDelivered` (iceoryx2's default), so a publisher facing a full
//!   subscriber buffer of D samples waits in `send` until there is room, as a gpuipc producer
//!   waits for a free slot. That is iceoryx2's own way to block a publisher; while it waits it
//!   yields the CPU (10,000 times) and then sleeps 100 µs to 10 ms at a time (its
//!   `AdaptiveWait`): it has no event for "room again". The subscriber checks the sequence
//!   numbers and reports any gap.
//! - Waiting for a sample: `--spin-us S` polls `receive` for S µs, then sleeps on a listener of
//!   an event service the publisher notifies after every `send` (iceoryx2's way of waking a
//!   subscriber: one datagram on a unix socket per notification, whether anyone sleeps or
//!   not), in slices of 50 ms as gpuipc's waits; `--spin-us 0` sleeps at once. With S of 10 s
//!   or more nothing is notified and the subscriber only polls (pure spinning).
//! - `--fps F` paces the publisher as gpuipc's `bench` paces a source (sleep, then spin the
//!   last 100 µs): the latency of a hop without queueing. 0 (default) runs at full speed.
#![deny(unsafe_code)]

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;

/// The payload: 64 bytes, as a gpuipc frame of 8x8 gray8 pixels.
#[derive(Debug, Clone, Copy, ZeroCopySend)]
#[repr(C)]
struct Frame {
    seq: u64,
    stamp_ns: u64,
    pixels: [u8; 48],
}

const _: () = assert!(size_of::<Frame>() == 64);

/// Spin this long or more: nothing sleeps, nothing is notified.
const PURE_SPIN_US: u64 = 10_000_000;
/// How long one sleep lasts at most before the subscriber looks again (gpuipc's sleep slice).
const SLEEP_SLICE: Duration = Duration::from_millis(50);
/// A run that takes longer than this has failed.
const DEADLINE: Duration = Duration::from_secs(120);

struct Args {
    frames: u64,
    spin_us: u64,
    fps: f64,
    depth: usize,
    service: String,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args { frames: 100_000, spin_us: 20, fps: 0.0, depth: 4, service: String::new() };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--frames" => a.frames = value.parse().map_err(|e| bad(&e))?,
            "--spin-us" => a.spin_us = value.parse().map_err(|e| bad(&e))?,
            "--fps" => a.fps = value.parse().map_err(|e| bad(&e))?,
            "--depth" => a.depth = value.parse().map_err(|e| bad(&e))?,
            "--service" => a.service = value.clone(),
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    if a.frames == 0 || a.depth == 0 {
        return Err("--frames and --depth must be at least 1".into());
    }
    Ok(a)
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let usage = "usage: iox2-small pair --frames N [--spin-us S] [--fps F] [--depth D]";
    let Some(role) = argv.get(1) else {
        eprintln!("{usage}");
        return ExitCode::FAILURE;
    };
    let args = match parse(&argv[2..]) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("iox2-small: {e}\n{usage}");
            return ExitCode::FAILURE;
        }
    };
    set_log_level(LogLevel::Error);
    let result = match role.as_str() {
        "pair" => pair(&argv[2..]),
        "sub" => subscriber(&args),
        "pub" => publisher(&args),
        _ => Err(usage.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iox2-small {role}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Start the subscriber, wait until it is subscribed, start the publisher, pass on the
/// subscriber's result.
fn pair(rest: &[String]) -> Result<(), String> {
    use std::io::BufRead;
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let service = format!("gpuipc-small-frames-{}", std::process::id());
    let mut sub = Command::new(&me)
        .arg("sub")
        .args(rest)
        .args(["--service", &service])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the subscriber: {e}"))?;
    let mut lines = std::io::BufReader::new(sub.stdout.take().expect("piped")).lines();
    match lines.next() {
        Some(Ok(line)) if line == "ready" => {}
        other => return Err(format!("the subscriber did not start: {other:?}")),
    }
    let publisher = Command::new(&me)
        .arg("pub")
        .args(rest)
        .args(["--service", &service])
        .status()
        .map_err(|e| format!("cannot start the publisher: {e}"))?;
    let result = lines.next();
    let status = sub.wait().map_err(|e| e.to_string())?;
    if !publisher.success() || !status.success() {
        return Err(format!("publisher {publisher}, subscriber {status}"));
    }
    match result {
        Some(Ok(line)) => {
            println!("{line}");
            Ok(())
        }
        other => Err(format!("no result from the subscriber: {other:?}")),
    }
}

fn service_name(args: &Args, kind: &str) -> Result<ServiceName, String> {
    format!("{}/{kind}", args.service).as_str().try_into().map_err(|e| format!("service name: {e:?}"))
}

fn node() -> Result<Node<ipc::Service>, String> {
    NodeBuilder::new().create::<ipc::Service>().map_err(|e| format!("node: {e:?}"))
}

fn subscriber(args: &Args) -> Result<(), String> {
    let node = node()?;
    let frames = node
        .service_builder(&service_name(args, "frames")?)
        .publish_subscribe::<Frame>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(args.depth)
        .subscriber_max_borrowed_samples(1)
        .history_size(0)
        .max_publishers(1)
        .max_subscribers(1)
        .create()
        .map_err(|e| format!("publish-subscribe service: {e:?}"))?;
    let events = node
        .service_builder(&service_name(args, "published")?)
        .event()
        .create()
        .map_err(|e| format!("event service: {e:?}"))?;
    let connected = node
        .service_builder(&service_name(args, "connected")?)
        .event()
        .create()
        .map_err(|e| format!("event service: {e:?}"))?;
    let subscriber = frames.subscriber_builder().buffer_size(args.depth).create().map_err(|e| format!("{e:?}"))?;
    let listener = events.listener_builder().create().map_err(|e| format!("{e:?}"))?;
    println!("ready");
    // A publisher delivers only to a subscriber whose side of the connection is made (its
    // `update_connections`, which `receive` also calls); until then `send` discards. So the
    // publisher waits for this side to connect before its first sample.
    let deadline = Instant::now() + DEADLINE;
    while frames.dynamic_config().number_of_publishers() == 0 {
        if Instant::now() > deadline {
            return Err("no publisher came".into());
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    subscriber.update_connections().map_err(|e| format!("connecting: {e:?}"))?;
    connected.notifier_builder().create().map_err(|e| format!("{e:?}"))?.notify().map_err(|e| format!("{e:?}"))?;

    let spin = Duration::from_micros(args.spin_us);
    let mut latencies = Vec::with_capacity(args.frames as usize);
    let (mut first_ns, mut last_ns, mut lost, mut next) = (0u64, 0u64, 0u64, 0u64);
    let receive = || subscriber.receive().map_err(|e| format!("receive: {e:?}"));
    while next < args.frames {
        // Poll, spin for `spin`, then sleep on the listener until notified (a slice at a time).
        let mut sample = receive()?;
        if sample.is_none() && !spin.is_zero() {
            let until = Instant::now() + spin;
            while sample.is_none() && Instant::now() < until {
                std::hint::spin_loop();
                sample = receive()?;
            }
        }
        while sample.is_none() {
            if Instant::now() > deadline {
                return Err(format!("timed out after {next} of {} frames", args.frames));
            }
            listener.timed_wait(|_| {}, SLEEP_SLICE).map_err(|e| format!("listener: {e:?}"))?;
            sample = receive()?;
        }
        let sample = sample.expect("received");
        let frame = *sample.payload();
        drop(sample);
        let now = now_ns();
        if first_ns == 0 {
            first_ns = now;
        }
        last_ns = now;
        latencies.push(now.saturating_sub(frame.stamp_ns));
        lost += frame.seq.saturating_sub(next);
        next = frame.seq + 1;
    }
    latencies.sort_unstable();
    let pct = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize] as f64 / 1000.0;
    let secs = (last_ns - first_ns) as f64 / 1e9;
    let fps = if secs > 0.0 { latencies.len() as f64 / secs } else { 0.0 };
    println!(
        "{{\"frames\": {}, \"lost\": {lost}, \"frames_per_s\": {fps:.1}, \"latency_us\": [{:.2}, {:.2}, {:.2}]}}",
        latencies.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    Ok(())
}

fn publisher(args: &Args) -> Result<(), String> {
    let node = node()?;
    let frames = node
        .service_builder(&service_name(args, "frames")?)
        .publish_subscribe::<Frame>()
        .open()
        .map_err(|e| format!("publish-subscribe service: {e:?}"))?;
    let events =
        node.service_builder(&service_name(args, "published")?).event().open().map_err(|e| format!("{e:?}"))?;
    let connected =
        node.service_builder(&service_name(args, "connected")?).event().open().map_err(|e| format!("{e:?}"))?;
    let listener = connected.listener_builder().create().map_err(|e| format!("{e:?}"))?;
    let publisher = frames
        .publisher_builder()
        .max_loaned_samples(1)
        .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
        .create()
        .map_err(|e| format!("publisher: {e:?}"))?;
    let notifier = events.notifier_builder().create().map_err(|e| format!("notifier: {e:?}"))?;
    // Wait for the subscriber's side of the connection (see `subscriber`), which it makes
    // once it sees the publisher: the listener exists before the publisher does.
    let deadline = Instant::now() + DEADLINE;
    while listener.timed_wait(|_| {}, SLEEP_SLICE).map_err(|e| format!("listener: {e:?}"))? == 0 {
        if Instant::now() > deadline {
            return Err("the subscriber did not connect".into());
        }
    }
    let notify = args.spin_us < PURE_SPIN_US;
    let start = Instant::now();
    for seq in 0..args.frames {
        if args.fps > 0.0 {
            pace(start, seq, args.fps);
        }
        let sample = publisher.loan_uninit().map_err(|e| format!("loan: {e:?}"))?;
        // Stamped when the frame is begun, as a gpuipc source stamps its frames.
        let stamp_ns = now_ns();
        let sample = sample.write_payload(Frame { seq, stamp_ns, pixels: [seq as u8; 48] });
        sample.send().map_err(|e| format!("send: {e:?}"))?;
        if notify {
            // A full socket buffer means the listener has notifications pending: nothing lost.
            let _ = notifier.notify();
        }
    }
    Ok(())
}

/// Frame `k` starts no sooner than k / fps after the first: sleep, then spin the last 100 µs
/// (gpuipc's `stage::measure::Pace`).
fn pace(start: Instant, k: u64, fps: f64) {
    const SPIN: Duration = Duration::from_micros(100);
    let due = start + Duration::from_secs_f64(k as f64 / fps);
    let now = Instant::now();
    if due > now + SPIN {
        std::thread::sleep(due - now - SPIN);
    }
    while Instant::now() < due {
        std::hint::spin_loop();
    }
}
