//! `gpuipc-host bench FILE`: the pipeline in one process on one CUDA context (its measured
//! ideal, [`supervisor::one_context`]) and as separate stage processes, back to back in one
//! call on the same frames, after a warm-up; what each achieves and where the difference goes.
//!
//! Measured, in order: that both give the same output frames (checksums of a short run);
//! frames/s of each (a warm-up run each way, then `rounds` measured runs, one way then the
//! other, so that a drift of the machine's speed reaches both; the figures are the medians);
//! each cuda stage's GPU time per frame
//! (events around its work, in one process) with the bytes its frames move and the bandwidth
//! that makes against a device-to-device copy measured here; host CPU per stage; GPU memory;
//! end-to-end latency with the sources paced (`--fps`), from a frame's stamp at its source
//! to the completion of the last stage's GPU work on it, and the latency each hop adds (also
//! `rounds` runs each way, one way then the other; p50 and p99 are the medians of theirs).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use gpuipc_plugin_api::Domain;
use serde::Serialize;

use crate::gpu::{DeviceMemory, Gpu, GpuError, memory_in_use};
use crate::plan::Plan;
use crate::stage::measure::read_latencies;
use crate::supervisor::one_context::{self, Measured, Probe};
use crate::supervisor::report::RunReport;
use crate::supervisor::{self, RunOptions, Shutdown};

/// What `bench` was asked.
pub struct BenchArgs {
    /// Frames of each measured run.
    pub frames: u64,
    /// Frames of the warm-up run before each.
    pub warmup: u64,
    /// Measured runs each way, alternating.
    pub rounds: u32,
    /// Frames of the checksum comparison.
    pub check_frames: u64,
    /// Source rate of the latency runs (sources with an `fps` param), and their length.
    pub fps: f64,
    pub latency_frames: u64,
    /// Overrides the file's `spin_us` in the separate processes.
    pub spin_us: Option<u32>,
    pub json: Option<PathBuf>,
}

#[derive(Debug, Default, Serialize)]
pub struct BenchReport {
    pub pipeline: String,
    pub file: String,
    pub device: String,
    pub isolation: String,
    pub frames: u64,
    pub warmup: u64,
    /// Each round's frames/s, in the order they ran; `in_process` and `separate` hold the
    /// medians, `ratio` is theirs.
    pub rounds: Vec<Round>,
    /// Stages whose output frames differ between the two ways of running (empty: none).
    pub outputs_differ: Vec<String>,
    pub outputs_compared: u64,
    pub in_process: Mode,
    pub separate: Mode,
    /// separate / in-process frames/s.
    pub ratio: f64,
    pub stages: Vec<StageBench>,
    /// A device-to-device copy on this GPU: bytes read plus bytes written per second.
    pub copy_gb_per_s: Option<f64>,
    /// Links on the longest path from a source to a sink.
    pub hops: usize,
    /// (separate − in-process) / hops, in microseconds, for p50 and p99 (of the medians).
    pub added_latency_per_hop_us: Option<(f64, f64)>,
    /// Each latency round's percentiles, in the order they ran; `latency_us` of each way holds
    /// their medians (p50, p99) and the largest max.
    pub latency_rounds: Vec<LatencyRound>,
    pub notes: Vec<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Round {
    pub in_process_frames_per_s: f64,
    pub separate_frames_per_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct LatencyRound {
    /// Microseconds: p50, p99, max.
    pub in_process_us: Option<(f64, f64, f64)>,
    pub separate_us: Option<(f64, f64, f64)>,
}

#[derive(Debug, Default, Serialize)]
pub struct Mode {
    pub frames_per_s: f64,
    pub seconds: f64,
    /// Microseconds: p50, p99, max; `None` where no source could be paced.
    pub latency_us: Option<(f64, f64, f64)>,
    /// Device memory in use during the run less before it (device-wide: separate processes
    /// count a context each; in one process, the median round's, as separate processes the
    /// peak over every round).
    pub gpu_memory_mib: Option<f64>,
}

#[derive(Debug, Default, Serialize)]
pub struct StageBench {
    pub name: String,
    pub domain: String,
    /// GPU time of its work per frame, in one process.
    pub gpu_us_per_frame: Option<f64>,
    /// Bytes its frames move per frame (inputs read, output written).
    pub bytes_per_frame: u64,
    pub gb_per_s: Option<f64>,
    /// `gb_per_s` against the device-to-device copy measured in the same call.
    pub share_of_copy: Option<f64>,
    /// Host CPU per unit of wall time (1.0: a core), in one process (time inside the plugin)
    /// and as a separate process (the whole process), in the median round of each.
    pub cpu_in_process: f64,
    pub cpu_separate: f64,
    /// The knobs it ran with (`plan::tuning`), so a figure says what it was measured with.
    pub tuning: Option<crate::plan::tuning::Tuning>,
}

/// Run the benchmark and print it; the exit code says whether it ran through.
pub fn main(plan: &Plan, args: &BenchArgs) -> std::process::ExitCode {
    match bench(plan, args) {
        Ok(report) => {
            println!("{}", render(&report));
            if let Some(path) = &args.json {
                let json = serde_json::to_string_pretty(&report).expect("the report serialises");
                if let Err(e) = std::fs::write(path, json) {
                    eprintln!("error: cannot write {}: {e}", path.display());
                    return std::process::ExitCode::from(1);
                }
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

fn bench(plan: &Plan, args: &BenchArgs) -> Result<BenchReport, String> {
    let gpu = bench_gpu(plan)?;
    let scratch = Scratch::new()?;
    let shutdown = Shutdown::install().map_err(|e| format!("cannot install signal handlers: {e}"))?;
    let mut report = BenchReport {
        pipeline: plan.name.clone(),
        file: plan.file.display().to_string(),
        device: gpu.as_ref().map_or("cpu".into(), |g| format!("cuda:{}", g.ordinal())),
        isolation: plan.isolation.name().to_owned(),
        frames: args.frames,
        warmup: args.warmup,
        hops: hops(plan),
        ..BenchReport::default()
    };
    if let Some(gpu) = &gpu {
        report.device = describe(gpu);
    }

    eprintln!("bench: comparing outputs ({} frames each way)", args.check_frames);
    compare_outputs(plan, args, &scratch, &shutdown, &mut report)?;

    let (inproc, sep) = measure_rounds(plan, args, &shutdown, gpu.as_ref(), &mut report)?;

    eprintln!("bench: GPU time per stage ({} frames, waiting for each)", args.frames.min(1000));
    let (_, timed) = in_process(plan, args.frames.min(1000), Probe { gpu_time: true, ..Probe::default() })?;
    report.copy_gb_per_s =
        gpu.as_ref().map(|g| copy_bandwidth(g, largest_frame(plan))).transpose().map_err(|e| e.to_string())?;
    report.stages = stage_table(plan, &timed, &inproc, &sep, report.copy_gb_per_s, args.spin_us);

    latency(plan, args, &scratch, &shutdown, &mut report)?;
    Ok(report)
}

const MIB: f64 = 1024.0 * 1024.0;

/// A warm-up run each way, then `rounds` measured runs in one process and as separate
/// processes in turn. Fills in frames/s (medians), their ratio, each round and GPU memory;
/// returns the run reports of the median round of each way, for the per-stage figures.
fn measure_rounds(
    plan: &Plan,
    args: &BenchArgs,
    shutdown: &Shutdown,
    gpu: Option<&Arc<Gpu>>,
    report: &mut BenchReport,
) -> Result<(RunReport, RunReport), String> {
    eprintln!("bench: warm-up as separate processes and in one process ({} frames each)", args.warmup);
    // Separate first: the baseline of GPU memory is taken after a run in this process, not
    // while other processes' contexts may still be going.
    separate(plan, args.warmup, args, shutdown, Separate::default())?;
    in_process(plan, args.warmup, Probe::default())?;
    let before = gpu.map(|g| memory_in_use(g)).transpose().map_err(|e| e.to_string())?;
    let mut one = Vec::new();
    let mut sep = Vec::new();
    let mut peak = 0;
    for round in 1..=args.rounds.max(1) {
        eprintln!(
            "bench: round {round} of {}: in one process, then as separate processes ({} frames each)",
            args.rounds, args.frames
        );
        let (run, measured) = in_process(plan, args.frames, Probe::default())?;
        one.push((args.frames as f64 / measured.seconds, (run, measured)));
        let sampler = gpu.map(|g| MemorySampler::start(g.clone()));
        let run = separate(plan, args.frames, args, shutdown, Separate::default())?;
        peak = peak.max(sampler.map_or(0, MemorySampler::stop));
        // A separate run goes as fast as its slowest stage.
        let slowest = run.stages.iter().map(|s| s.fps).fold(f64::INFINITY, f64::min);
        sep.push((if slowest.is_finite() { slowest } else { 0.0 }, run));
    }
    report.rounds =
        one.iter().zip(&sep).map(|(o, s)| Round { in_process_frames_per_s: o.0, separate_frames_per_s: s.0 }).collect();
    let (fps, (inproc, measured)) = median(one);
    report.in_process = Mode {
        frames_per_s: fps,
        seconds: measured.seconds,
        latency_us: None,
        gpu_memory_mib: before.zip(measured.memory_in_use).map(|(b, d)| d.saturating_sub(b) as f64 / MIB),
    };
    let (fps, run) = median(sep);
    report.separate = Mode {
        frames_per_s: fps,
        seconds: run.seconds,
        latency_us: None,
        gpu_memory_mib: before.map(|b| peak.saturating_sub(b) as f64 / MIB),
    };
    report.ratio = report.separate.frames_per_s / report.in_process.frames_per_s;
    Ok((inproc, run))
}

/// The median of `items` by their figure (of an even count, the lower middle one).
fn median<T>(mut items: Vec<(f64, T)>) -> (f64, T) {
    items.sort_by(|a, b| a.0.total_cmp(&b.0));
    items.swap_remove((items.len() - 1) / 2)
}

/// The GPU of the plan's cuda stages, opened here for the copy and memory measurements (the
/// one-process run shares its primary context).
fn bench_gpu(plan: &Plan) -> Result<Option<Arc<Gpu>>, String> {
    let Some(stage) = plan.stages.iter().find(|s| s.domain == Domain::Cuda) else { return Ok(None) };
    let ordinal = stage.device.unwrap_or(0);
    Gpu::open(ordinal).map(|g| Some(Arc::new(g))).map_err(|e| format!("cuda:{ordinal}: {e}"))
}

fn describe(gpu: &Gpu) -> String {
    let name = crate::gpu::devices()
        .ok()
        .and_then(|d| d.into_iter().find(|d| d.ordinal == gpu.ordinal()))
        .map_or_else(String::new, |d| format!(" ({})", d.name));
    format!("cuda:{}{name}", gpu.ordinal())
}

fn in_process(plan: &Plan, frames: u64, probe: Probe) -> Result<(RunReport, Measured), String> {
    let stop = AtomicBool::new(false);
    let (report, measured) = one_context::run(plan, Some(frames), None, &stop, probe)?;
    succeeded(&report, "in one process")?;
    Ok((report, measured))
}

/// One run as separate processes: what differs from the measured run.
#[derive(Default)]
struct Separate<'a> {
    checksums: Option<&'a Path>,
    latency: Option<&'a Path>,
    pace_fps: Option<f64>,
}

fn separate(
    plan: &Plan,
    frames: u64,
    args: &BenchArgs,
    shutdown: &Shutdown,
    how: Separate<'_>,
) -> Result<RunReport, String> {
    let options = RunOptions {
        frames: Some(frames),
        stage_exe: std::env::current_exe().map_err(|e| format!("cannot find the gpuipc-host executable: {e}"))?,
        live: false,
        spin_us: args.spin_us,
        checksums: how.checksums.map(Path::to_owned),
        latency: how.latency.map(Path::to_owned),
        pace_fps: how.pace_fps,
        metrics: None,
        part: false,
    };
    let report = supervisor::run(plan, &options, shutdown).map_err(|e| e.to_string())?;
    succeeded(&report, "as separate processes")?;
    Ok(report)
}

fn succeeded(report: &RunReport, how: &str) -> Result<(), String> {
    if report.succeeded() { Ok(()) } else { Err(format!("the run {how} did not finish:\n{}", report.render())) }
}

/// Both ways, with checksums: every stage's output hashes must be equal.
fn compare_outputs(
    plan: &Plan,
    args: &BenchArgs,
    scratch: &Scratch,
    shutdown: &Shutdown,
    report: &mut BenchReport,
) -> Result<(), String> {
    let frames = args.check_frames;
    let one = scratch.folder("sums-in-process")?;
    let sep = scratch.folder("sums-separate")?;
    let stop = AtomicBool::new(false);
    let (r, _) = one_context::run(plan, Some(frames), Some(&one), &stop, Probe::default())?;
    succeeded(&r, "in one process")?;
    separate(plan, args.check_frames, args, shutdown, Separate { checksums: Some(&sep), ..Separate::default() })?;
    for stage in &plan.stages {
        let name = format!("{}.sum", stage.name);
        let (a, b) = (std::fs::read(one.join(&name)), std::fs::read(sep.join(&name)));
        match (a, b) {
            (Ok(a), Ok(b)) if a == b => report.outputs_compared += a.iter().filter(|&&c| c == b'\n').count() as u64,
            _ => report.outputs_differ.push(stage.name.to_string()),
        }
    }
    Ok(())
}

/// Paced sources, both ways, `rounds` times one way then the other (a burst of the
/// machine's noise reaches one round, not the figure): latency percentiles and the added
/// latency per hop.
fn latency(
    plan: &Plan,
    args: &BenchArgs,
    scratch: &Scratch,
    shutdown: &Shutdown,
    report: &mut BenchReport,
) -> Result<(), String> {
    let probe = Probe { latency: true, pace_fps: Some(args.fps), ..Probe::default() };
    let rounds = args.rounds.max(1);
    for round in 1..=rounds {
        eprintln!(
            "bench: latency at {} frames/s, round {round} of {rounds} ({} frames each way)",
            args.fps, args.latency_frames
        );
        let (_, measured) = in_process(plan, args.latency_frames, probe)?;
        let dir = scratch.folder(&format!("latency-{round}"))?;
        let paced = Separate { latency: Some(&dir), pace_fps: Some(args.fps), ..Separate::default() };
        separate(plan, args.latency_frames, args, shutdown, paced)?;
        let mut samples = Vec::new();
        for stage in plan.stages.iter().filter(|s| s.output.as_ref().is_none_or(|o| o.link.is_none())) {
            samples.extend(read_latencies(&dir, stage.name.as_str()));
        }
        report.latency_rounds.push(LatencyRound {
            in_process_us: percentiles(measured.latencies_ns),
            separate_us: percentiles(samples),
        });
    }
    let one = latency_over_rounds(report.latency_rounds.iter().map(|r| r.in_process_us));
    let sep = latency_over_rounds(report.latency_rounds.iter().map(|r| r.separate_us));
    report.in_process.latency_us = one;
    report.separate.latency_us = sep;
    if let (Some(a), Some(b)) = (one, sep)
        && report.hops > 0
    {
        let hops = report.hops as f64;
        report.added_latency_per_hop_us = Some(((b.0 - a.0) / hops, (b.1 - a.1) / hops));
    }
    Ok(())
}

/// The medians of the rounds' p50 and p99 (as frames/s: the lower middle of an even count)
/// and the largest max; `None` where a round has none.
fn latency_over_rounds(rounds: impl Iterator<Item = Option<(f64, f64, f64)>>) -> Option<(f64, f64, f64)> {
    let rounds: Vec<(f64, f64, f64)> = rounds.collect::<Option<_>>()?;
    if rounds.is_empty() {
        return None;
    }
    let p50 = median(rounds.iter().map(|r| (r.0, ())).collect()).0;
    let p99 = median(rounds.iter().map(|r| (r.1, ())).collect()).0;
    Some((p50, p99, rounds.iter().map(|r| r.2).fold(f64::MIN, f64::max)))
}

/// p50, p99 and max in microseconds.
fn percentiles(mut ns: Vec<u64>) -> Option<(f64, f64, f64)> {
    if ns.is_empty() {
        return None;
    }
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    Some((at(0.50), at(0.99), at(1.0)))
}

/// Links on the longest path (stages are in topological order).
fn hops(plan: &Plan) -> usize {
    let mut depth = vec![0usize; plan.stages.len()];
    for (i, stage) in plan.stages.iter().enumerate() {
        depth[i] = stage.inputs.iter().map(|input| depth[input.from] + 1).max().unwrap_or(0);
    }
    depth.into_iter().max().unwrap_or(0)
}

fn largest_frame(plan: &Plan) -> u64 {
    plan.stages.iter().filter_map(|s| s.output.as_ref()).map(|o| o.layout.total_bytes).max().unwrap_or(0)
}

fn stage_table(
    plan: &Plan,
    timed: &Measured,
    inproc: &RunReport,
    sep: &RunReport,
    copy: Option<f64>,
    spin_us: Option<u32>,
) -> Vec<StageBench> {
    let overrides = crate::plan::tuning::Overrides::from_env(spin_us);
    plan.stages
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let input_bytes: u64 = s.inputs.iter().map(|input| plan.links[input.link].layout.total_bytes).sum();
            let bytes = input_bytes + s.output.as_ref().map_or(0, |o| o.layout.total_bytes);
            let gpu_us = timed.gpu_ns[i].map(|ns| ns as f64 / 1000.0 / timed.timed_frames.max(1) as f64);
            let gb_per_s = gpu_us.filter(|&us| us > 0.0).map(|us| bytes as f64 / (us * 1000.0));
            StageBench {
                name: s.name.to_string(),
                domain: s.domain.name().to_owned(),
                gpu_us_per_frame: gpu_us,
                bytes_per_frame: bytes,
                gb_per_s,
                share_of_copy: gb_per_s.zip(copy).map(|(g, c)| g / c),
                cpu_in_process: inproc.stages[i].cpu,
                cpu_separate: sep.stages[i].cpu,
                tuning: Some(crate::plan::tuning::Tuning::resolve(plan, i, &overrides)),
            }
        })
        .collect()
}

/// Bytes read plus written per second by device-to-device copies of `bytes` (at least
/// 64 MiB), timed with events after a warm-up.
fn copy_bandwidth(gpu: &Arc<Gpu>, bytes: u64) -> Result<f64, GpuError> {
    const COPIES: u32 = 50;
    let bytes = bytes.max(64 << 20) as usize;
    let (a, b) = (DeviceMemory::private(gpu, bytes)?, DeviceMemory::private(gpu, bytes)?);
    gpu.memset_d8_async(a.addr(), 0x5a, bytes)?;
    let seconds = crate::gpu::time_copies(gpu, b.addr(), a.addr(), bytes, COPIES)?;
    Ok(2.0 * bytes as f64 * f64::from(COPIES) / seconds / 1e9)
}

/// Samples the device's memory in use while separate processes run, keeping the peak.
struct MemorySampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl MemorySampler {
    fn start(gpu: Arc<Gpu>) -> MemorySampler {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(used) = memory_in_use(&gpu) {
                    p.fetch_max(used, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        MemorySampler { stop, peak, thread }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        self.peak.load(Ordering::Relaxed)
    }
}

/// A private folder for the bench's checksum and latency files, removed at the end.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, String> {
        // Private (0700, a fresh random name): checksum and latency files of this user's run.
        let dir = supervisor::private_dir::create("gpuipc-bench")
            .map_err(|e| format!("cannot create a folder for the bench's files: {e}"))?;
        Ok(Scratch(dir))
    }

    fn folder(&self, name: &str) -> Result<PathBuf, String> {
        let dir = self.0.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn render(r: &BenchReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench '{}' on {}, isolation {}: {} rounds of {} frames each way after {} of warm-up",
        r.pipeline,
        r.device,
        r.isolation,
        r.rounds.len(),
        r.frames,
        r.warmup
    );
    if r.outputs_differ.is_empty() {
        let _ = writeln!(
            out,
            "outputs: equal both ways ({} frames of {} stages compared)",
            r.outputs_compared,
            r.stages.len()
        );
    } else {
        let _ = writeln!(out, "outputs: DIFFER between the two ways in stage(s) {}", r.outputs_differ.join(", "));
    }
    let _ = writeln!(out, "{:24} {:>14} {:>14} {:>8}", "", "one process", "separate", "ratio");
    let _ = writeln!(
        out,
        "{:24} {:>14.0} {:>14.0} {:>7.1}%",
        "frames/s (median)",
        r.in_process.frames_per_s,
        r.separate.frames_per_s,
        r.ratio * 100.0
    );
    for (k, round) in r.rounds.iter().enumerate() {
        let (a, b) = (round.in_process_frames_per_s, round.separate_frames_per_s);
        let _ = writeln!(out, "{:24} {a:>14.0} {b:>14.0} {:>7.1}%", format!("  round {}", k + 1), b / a * 100.0);
    }
    if let (Some(a), Some(b)) = (r.in_process.latency_us, r.separate.latency_us) {
        let rounds = r.latency_rounds.len();
        let of = if rounds > 1 { " (median)" } else { "" };
        for (label, x, y) in [
            (format!("latency p50 µs{of}"), a.0, b.0),
            (format!("latency p99 µs{of}"), a.1, b.1),
            ("latency max µs".into(), a.2, b.2),
        ] {
            let _ = writeln!(out, "{label:24} {x:>14.1} {y:>14.1}");
        }
        if rounds > 1 {
            for (k, round) in r.latency_rounds.iter().enumerate() {
                if let (Some(x), Some(y)) = (round.in_process_us, round.separate_us) {
                    let label = format!("  round {} p50 / p99", k + 1);
                    let _ = writeln!(
                        out,
                        "{label:24} {:>14} {:>14}",
                        format!("{:.0} / {:.0}", x.0, x.1),
                        format!("{:.0} / {:.0}", y.0, y.1)
                    );
                }
            }
        }
    }
    if let (Some(a), Some(b)) = (r.in_process.gpu_memory_mib, r.separate.gpu_memory_mib) {
        let _ = writeln!(out, "{:24} {:>14.0} {:>14.0}", "GPU memory (MiB)", a, b);
    }
    let _ = writeln!(
        out,
        "\n{:12} {:6} {:>12} {:>12} {:>9} {:>9} {:>11} {:>9}",
        "stage", "domain", "GPU µs/frame", "MB/frame", "GB/s", "of copy", "cpu 1-proc", "cpu sep."
    );
    for s in &r.stages {
        let gpu = s.gpu_us_per_frame.map_or("-".into(), |us| format!("{us:.1}"));
        let gbs = s.gb_per_s.map_or("-".into(), |g| format!("{g:.0}"));
        let share = s.share_of_copy.map_or("-".into(), |f| format!("{:.0}%", f * 100.0));
        let _ = writeln!(
            out,
            "{:12} {:6} {:>12} {:>12.2} {:>9} {:>9} {:>10.0}% {:>8.0}%",
            s.name,
            s.domain,
            gpu,
            s.bytes_per_frame as f64 / 1e6,
            gbs,
            share,
            s.cpu_in_process * 100.0,
            s.cpu_separate * 100.0
        );
    }
    let cpu: f64 = r.stages.iter().map(|s| s.cpu_separate).sum();
    let _ = writeln!(out, "host CPU of the separate stages together: {:.0}% of a core", cpu * 100.0);
    if let Some(c) = r.copy_gb_per_s {
        let _ = writeln!(out, "device-to-device copy on this GPU: {c:.0} GB/s (bytes read + written)");
    }
    if let Some((p50, p99)) = r.added_latency_per_hop_us {
        let _ = writeln!(out, "added latency per hop ({} hops): p50 {p50:.1} µs, p99 {p99:.1} µs", r.hops);
    }
    for note in &r.notes {
        let _ = writeln!(out, "note: {note}");
    }
    out.trim_end().to_owned()
}
