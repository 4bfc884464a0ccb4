//! `run --in-process` for a pipeline with cuda stages: the measured ideal of that pipeline.
//! Every stage in this one process, the cuda stages on one CUDA context and one stream, each
//! frame handed on through device memory in plan order: no links, no interprocess events, no
//! second process. The host runs every stage's `process` for frame N before frame N + 1;
//! the GPU runs the stream's work in that order, so a stage's output is read by its consumers
//! before the next frame overwrites it, with no synchronisation at all.
//!
//! A cpu stage among cuda ones gets its input copied back from the GPU (and a cuda stage's
//! input from a cpu stage copied up), waiting for the GPU each time, as a staged link does.
//! Every frame goes through every stage: policies that drop frames in a multi-process run
//! drop nothing here, so checksums equal the multi-process run's where nothing is dropped.
//! `gpuipc-host bench` runs pipelines this way to compare; [`Probe`] is what it measures.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpuipc_plugin_api::abi::{self, RawFrame, RawProcessContext};
use gpuipc_plugin_api::{Domain, FrameFormat};

use super::report::{RunReport, StageOutcome};
use crate::gpu::{DeviceMemory, Gpu, GpuError};
use crate::link::StatsMap;
use crate::plan::Plan;
use crate::plugin::{Instance, LoadedPlugin, Processed};
use crate::stage::output::{Output, Pending};
use crate::stage::tap::Tap;
use crate::stage::{StageError, create_plugin_instance, now_ns, only_sources_end, only_sources_wait};

/// What to measure besides the report (`gpuipc-host bench`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Probe {
    /// Time each cuda stage's GPU work with events around it; the host waits for each frame's
    /// work before the next, so frames/s of such a run mean nothing.
    pub gpu_time: bool,
    /// Sources make this many frames a second at most; a frame is stamped when its turn comes.
    pub pace_fps: Option<f64>,
    /// Wait for each frame's GPU work and note how long after its stamp it completed.
    pub latency: bool,
}

/// What a [`Probe`] found.
#[derive(Debug, Default)]
pub struct Measured {
    /// Per stage, GPU nanoseconds summed over `timed_frames` (cuda stages only).
    pub gpu_ns: Vec<Option<u64>>,
    pub timed_frames: u64,
    /// Per frame: nanoseconds from the source's stamp to the completion of its last GPU work.
    pub latencies_ns: Vec<u64>,
    /// From the start of the first frame to the end of the last one's GPU work.
    pub seconds: f64,
    /// Device memory in use (device-wide) once every stage was set up.
    pub memory_in_use: Option<u64>,
}

/// One stage's input: the producer's output as it is, or copied into this stage's domain.
enum Input {
    Same(usize),
    /// A cpu stage reading a cuda stage: copied back into host memory.
    Download {
        from: usize,
        bytes: Vec<u8>,
    },
    /// A cuda stage reading a cpu stage: copied up into device memory.
    Upload {
        from: usize,
        memory: DeviceMemory,
    },
}

struct Stage<'p> {
    /// Where its output goes in the frame's outputs: its index in the plan.
    index: usize,
    /// `stage{name=...}`: the plugin's log lines name their stage, as in a stage process.
    span: tracing::Span,
    instance: Instance<'p>,
    inputs: Vec<Input>,
    output: Output,
    /// The stage's GPU, in the cuda domain.
    gpu: Option<Arc<Gpu>>,
    /// The run's GPU, for copies between domains.
    run_gpu: Option<Arc<Gpu>>,
    tap: Option<Tap>,
    /// Events around the stage's GPU work, when timed.
    events: Option<(crate::gpu::TimingEvent, crate::gpu::TimingEvent)>,
}

/// The one GPU the cuda stages of `plan` share; an error if they are on several.
fn the_gpu(plan: &Plan) -> Result<Option<Arc<Gpu>>, String> {
    let mut devices =
        plan.stages.iter().filter(|s| s.domain == Domain::Cuda).map(|s| (s.name.as_str(), s.device.unwrap_or(0)));
    let Some((_, device)) = devices.next() else { return Ok(None) };
    if let Some((name, other)) = devices.find(|(_, d)| *d != device) {
        return Err(format!(
            "stage '{name}': --in-process runs the cuda stages of one GPU (cuda:{device}); this one is on cuda:{other}"
        ));
    }
    Gpu::open(device).map(|g| Some(Arc::new(g))).map_err(|e| format!("cuda:{device}: {e}"))
}

/// Run `plan` in this process on one context; sources emit `frames` frames (or run until
/// `stop`). Returns the report and what `probe` asked for.
pub fn run(
    plan: &Plan,
    frames: Option<u64>,
    checksums: Option<&Path>,
    stop: &AtomicBool,
    probe: Probe,
) -> Result<(RunReport, Measured), String> {
    let gpu = the_gpu(plan)?;
    let plugins = plan
        .stages
        .iter()
        .map(|s| LoadedPlugin::load(&s.plugin.path).map_err(|e| format!("stage '{}': {e}", s.name)))
        .collect::<Result<Vec<_>, _>>()?;
    let stats = plan
        .stages
        .iter()
        .map(|s| StatsMap::create(&format!("gpuipc-stats-{}", s.name)).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut stages = Vec::with_capacity(plan.stages.len());
    for (i, plugin) in plugins.iter().enumerate() {
        let stage = build_stage(plan, i, plugin, gpu.as_ref(), checksums, probe)
            .map_err(|e| format!("stage '{}': {e}", plan.stages[i].name))?;
        stages.push(stage);
    }
    let memory_in_use = gpu.as_deref().map(crate::gpu::memory_in_use).transpose().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let mut measured = Measured { gpu_ns: vec![None; stages.len()], memory_in_use, ..Measured::default() };
    let done = match (&gpu, probe.latency) {
        (Some(g), true) => Some(crate::gpu::TimingEvent::create(g).map_err(|e| e.to_string())?),
        _ => None,
    };
    let mut outcomes: Vec<Option<StageOutcome>> = vec![None; stages.len()];
    let mut failure = None;
    let mut interrupted = None;
    let mut seq = 0;
    let mut pace = probe.pace_fps.map(crate::stage::measure::Pace::new);
    let mut outputs: Vec<Option<RawFrame>> = vec![None; stages.len()];
    while frames.is_none_or(|n| seq < n) {
        if stop.load(Ordering::Relaxed) {
            interrupted = Some("a stop signal");
            break;
        }
        if let Some(pace) = &mut pace {
            pace.wait_for_turn();
        }
        let stamp = now_ns();
        let mut source_ended = false;
        for (i, stage) in stages.iter_mut().enumerate() {
            match stage.process(seq, stamp, &mut outputs, &stats[i], stop) {
                Ok(true) => {}
                // A source's stream is over, or a live one had no frame when the run was
                // stopped: frame `seq` is not made, the run ends here.
                Ok(false) => {
                    source_ended = true;
                    break;
                }
                Err(e) => {
                    failure = Some((i, e.to_string()));
                    outcomes[i] = Some(StageOutcome::Failed(e.to_string()));
                    break;
                }
            }
        }
        if failure.is_some() || source_ended {
            if source_ended && failure.is_none() && stop.load(Ordering::Relaxed) {
                interrupted = Some("a stop signal");
            }
            break;
        }
        if probe.gpu_time || probe.latency {
            measure_frame(&stages, probe, done.as_ref(), gpu.as_ref(), stamp, &mut measured)
                .map_err(|e| e.to_string())?;
        }
        seq += 1;
    }
    finish(&mut stages, gpu.as_ref(), &mut outcomes, &mut failure);
    measured.seconds = started.elapsed().as_secs_f64();
    let report = RunReport::new(
        plan,
        &plan.one_process_per_stage(),
        &stats,
        outcomes,
        failure,
        interrupted,
        Some(started.elapsed()),
    );
    Ok((report, measured))
}

fn build_stage<'p>(
    plan: &Plan,
    i: usize,
    plugin: &'p LoadedPlugin,
    gpu: Option<&Arc<Gpu>>,
    checksums: Option<&Path>,
    probe: Probe,
) -> Result<Stage<'p>, StageError> {
    let s = &plan.stages[i];
    let span = tracing::info_span!("stage", name = %s.name);
    let _in_stage = span.enter();
    let own_gpu = (s.domain == Domain::Cuda).then(|| gpu.expect("a cuda stage has the GPU").clone());
    let mut inputs = Vec::with_capacity(s.inputs.len());
    let mut formats: Vec<FrameFormat> = Vec::with_capacity(s.inputs.len());
    for input in &s.inputs {
        let from = input.from;
        let bytes = plan.links[input.link].layout.total_bytes as usize;
        inputs.push(match (plan.stages[from].domain, &own_gpu) {
            (Domain::Cuda, None) => Input::Download { from, bytes: vec![0; bytes] },
            (Domain::Cpu, Some(g)) => Input::Upload { from, memory: DeviceMemory::private(g, bytes)? },
            _ => Input::Same(from),
        });
        formats.push(input.format);
    }
    let instance =
        create_plugin_instance(s.name.as_str(), &s.params, plugin, &formats, s.output_format(), own_gpu.as_ref())?;
    let output = Output::new(None, s.output_format(), own_gpu.as_ref())?;
    let tap = checksums.map(|dir| Tap::create(dir, s.name.as_str(), false)).transpose().map_err(StageError::Setup)?;
    let events = match (&own_gpu, probe.gpu_time) {
        (Some(g), true) => Some((crate::gpu::TimingEvent::create(g)?, crate::gpu::TimingEvent::create(g)?)),
        _ => None,
    };
    Ok(Stage {
        index: i,
        span: span.clone(),
        instance,
        inputs,
        output,
        gpu: own_gpu,
        run_gpu: gpu.cloned(),
        tap,
        events,
    })
}

impl Stage<'_> {
    /// Frame `seq` through this stage: its inputs are the outputs already made for `seq`.
    /// `false` when the stage, a source, ended its stream instead, or was a live source with
    /// no frame yet when `stop` was set.
    fn process(
        &mut self,
        seq: u64,
        stamp: u64,
        outputs: &mut [Option<RawFrame>],
        stats: &StatsMap,
        stop: &AtomicBool,
    ) -> Result<bool, StageError> {
        let span = self.span.clone();
        let _in_stage = span.enter();
        let mut inputs = Vec::with_capacity(self.inputs.len());
        for input in &mut self.inputs {
            inputs.push(input.frame(outputs, self.run_gpu.as_ref())?);
        }
        let mut out = self.output.raw_frame(&Pending::Private, seq, stamp);
        let stream = self.gpu.as_ref().map_or(std::ptr::null_mut(), |g| g.stream_ptr());
        let ctx = RawProcessContext { frame_index: seq, cuda_stream: stream };
        if let (Some((start, _)), Some(gpu)) = (&self.events, &self.gpu) {
            start.record(gpu.stream())?;
        }
        let mut started = now_ns();
        let mut result = self.instance.process(&inputs, out.as_mut(), &ctx);
        // A live source with no frame yet (its camera away) is asked again for the same one,
        // until the run is stopped.
        while matches!(result, Ok(Processed::NoFrame)) && self.inputs.is_empty() {
            if stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            started = now_ns();
            result = self.instance.process(&inputs, out.as_mut(), &ctx);
        }
        let ended = now_ns();
        match result.map_err(|error| StageError::Plugin { during: "process", frame: Some(seq), error })? {
            Processed::Frame => {}
            Processed::Damaged => {
                stats.get().damaged.fetch_add(1, Ordering::Relaxed);
            }
            Processed::EndOfStream if self.inputs.is_empty() => return Ok(false),
            Processed::EndOfStream => {
                return Err(StageError::Plugin { during: "process", frame: Some(seq), error: only_sources_end() });
            }
            Processed::NoFrame => {
                return Err(StageError::Plugin { during: "process", frame: Some(seq), error: only_sources_wait() });
            }
        }
        if let (Some((_, end)), Some(gpu)) = (&self.events, &self.gpu) {
            end.record(gpu.stream())?;
        }
        if let Some(tap) = &mut self.tap {
            let hash = self.output.pixel_hash(self.gpu.as_ref(), out.as_ref())?;
            tap.record(seq, hash).map_err(StageError::Setup)?;
        }
        outputs[self.index] = out;
        count(stats, seq, started, ended);
        Ok(true)
    }
}

impl Input {
    /// The frame this input hands the plugin for the frame in `outputs`; `gpu` is the run's.
    fn frame(&mut self, outputs: &[Option<RawFrame>], gpu: Option<&Arc<Gpu>>) -> Result<RawFrame, StageError> {
        let source =
            |from: usize| outputs[from].ok_or_else(|| StageError::Setup("an input from a stage without output".into()));
        Ok(match self {
            Input::Same(from) => source(*from)?,
            Input::Download { from, bytes } => {
                let frame = source(*from)?;
                let gpu = transfer_gpu(gpu)?;
                gpu.download(frame.addr, bytes)?;
                RawFrame { domain: abi::DOMAIN_CPU, addr: bytes.as_mut_ptr() as u64, len: bytes.len() as u64, ..frame }
            }
            Input::Upload { from, memory } => {
                let frame = source(*from)?;
                #[allow(unsafe_code)]
                // SAFETY: a host frame of a cpu stage of this run: its private output buffer,
                // `len` bytes, which nothing writes while this stage runs (one thread runs
                // the stages in turn).
                let bytes = unsafe { std::slice::from_raw_parts(frame.addr as *const u8, frame.len as usize) };
                transfer_gpu(gpu)?.upload(memory.addr(), bytes)?;
                RawFrame { domain: abi::DOMAIN_CUDA, addr: memory.addr(), len: memory.len() as u64, ..frame }
            }
        })
    }
}

/// The run's GPU, which copies frames between the cpu and cuda domains.
fn transfer_gpu(gpu: Option<&Arc<Gpu>>) -> Result<&Arc<Gpu>, StageError> {
    gpu.ok_or_else(|| StageError::Setup("a copy between the cpu and cuda domains, but the run has no GPU".into()))
}

/// A frame done, as the frame loop counts it.
fn count(stats: &StatsMap, seq: u64, started: u64, ended: u64) {
    stats.plugin_called(started, ended);
    // One thread runs every stage: a stage's CPU is its time inside the plugin.
    stats.get().cpu_ns.fetch_add(ended.saturating_sub(started), Ordering::Relaxed);
    stats.frame_done(seq, ended);
}

/// After a frame's work is enqueued: wait for it, and add up what the probe asked for.
fn measure_frame(
    stages: &[Stage<'_>],
    probe: Probe,
    done: Option<&crate::gpu::TimingEvent>,
    gpu: Option<&Arc<Gpu>>,
    stamp: u64,
    measured: &mut Measured,
) -> Result<(), GpuError> {
    if probe.latency {
        // Without a GPU the work is done when the last stage returns.
        if let (Some(done), Some(gpu)) = (done, gpu) {
            done.record(gpu.stream())?;
            done.synchronize()?;
        }
        measured.latencies_ns.push(now_ns().saturating_sub(stamp));
    }
    let mut timed = false;
    for (i, stage) in stages.iter().enumerate() {
        if let Some((start, end)) = &stage.events {
            end.synchronize()?;
            let ns = (start.elapsed_ms(end)? as f64 * 1e6) as u64;
            *measured.gpu_ns[i].get_or_insert(0) += ns;
            timed = true;
        }
    }
    measured.timed_frames += timed as u64;
    Ok(())
}

/// Flush every plugin in plan order and wait for the GPU; the first failure is the run's.
fn finish(
    stages: &mut [Stage<'_>],
    gpu: Option<&Arc<Gpu>>,
    outcomes: &mut [Option<StageOutcome>],
    failure: &mut Option<(usize, String)>,
) {
    for (i, stage) in stages.iter_mut().enumerate() {
        if outcomes[i].is_some() {
            continue;
        }
        let in_stage = stage.span.clone().entered();
        let flushed =
            stage.instance.flush().map_err(|error| StageError::Plugin { during: "flush", frame: None, error });
        drop(in_stage);
        let tapped = stage.tap.as_mut().map_or(Ok(()), |t| t.finish().map_err(StageError::Setup));
        outcomes[i] = Some(match flushed.and(tapped) {
            Ok(()) if failure.is_none() => StageOutcome::Finished,
            Ok(()) => StageOutcome::Stopped,
            Err(e) => {
                failure.get_or_insert((i, e.to_string()));
                StageOutcome::Failed(e.to_string())
            }
        });
    }
    if let Some(gpu) = gpu
        && let Err(e) = gpu.synchronize()
    {
        failure.get_or_insert((0, format!("CUDA: {e}")));
    }
}
