//! `run --in-process`: every stage in this one process, in plan order, one frame at a time,
//! through private buffers and no links. The reference the multi-process run is checked
//! against: both must write the same checksums.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpuipc_plugin_api::abi::{self, RawCreateContext, RawFrame, RawProcessContext, RawStr};
use gpuipc_plugin_api::{Domain, FrameLayout};

use super::report::{RunReport, StageOutcome, StageReport};
use crate::link::stats::StatsSnapshot;
use crate::plan::Plan;
use crate::plugin::{Instance, LoadedPlugin};
use crate::stage::now_ns;
use crate::stage::tap::Tap;

/// Run `plan` in this process. Sources emit `frames` frames (or run until `stop` is set).
pub fn run(plan: &Plan, frames: Option<u64>, checksums: Option<&Path>, stop: &AtomicBool) -> Result<RunReport, String> {
    if let Some(s) = plan.stages.iter().find(|s| s.domain != Domain::Cpu) {
        return Err(format!("stage '{}': --in-process runs the cpu domain only", s.name));
    }
    let mut libraries: HashMap<PathBuf, Rc<LoadedPlugin>> = HashMap::new();
    for s in &plan.stages {
        if !libraries.contains_key(&s.plugin.path) {
            let lib = LoadedPlugin::load(&s.plugin.path).map_err(|e| format!("stage '{}': {e}", s.name))?;
            libraries.insert(s.plugin.path.clone(), Rc::new(lib));
        }
    }
    let mut instances: Vec<Instance<'_>> = Vec::new();
    for s in &plan.stages {
        let ctx = RawCreateContext {
            stage: RawStr::from_str(s.name.as_str()),
            domain: abi::DOMAIN_CPU,
            device_ordinal: -1,
            cuda_context: std::ptr::null_mut(),
            cuda_stream: std::ptr::null_mut(),
            kernel_cache_dir: RawStr::from_str(""),
            log: Some(crate::stage::plugin_log),
        };
        let lib = &libraries[&s.plugin.path];
        let instance = lib
            .create(&s.params, &s.input_formats(), s.output_format(), &ctx)
            .map_err(|e| format!("stage '{}' failed in create: {e}", s.name))?;
        instances.push(instance);
    }
    let mut buffers: Vec<Option<(RawFrame, Vec<u8>)>> = plan
        .stages
        .iter()
        .map(|s| {
            s.output.as_ref().map(|o| {
                let bytes = vec![0u8; o.layout.total_bytes as usize];
                (blank_frame(o.format, o.layout), bytes)
            })
        })
        .collect();
    let mut taps: Vec<Option<Tap>> = match checksums {
        Some(dir) => plan.stages.iter().map(|s| Tap::create(dir, s.name.as_str(), false).map(Some)).collect::<Result<_, _>>()?,
        None => plan.stages.iter().map(|_| None).collect(),
    };
    let mut snaps = vec![StatsSnapshot::default(); plan.stages.len()];
    let started = Instant::now();
    let mut index = 0u64;
    let mut failure = None;
    'frames: while frames.is_none_or(|n| index < n) && !stop.load(Ordering::Relaxed) {
        let timestamp_ns = now_ns();
        for (i, s) in plan.stages.iter().enumerate() {
            let inputs: Vec<RawFrame> = s
                .inputs
                .iter()
                .map(|inp| {
                    let (frame, bytes) = buffers[inp.from].as_ref().expect("inputs come from stages with outputs");
                    RawFrame { addr: bytes.as_ptr() as u64, len: bytes.len() as u64, ..*frame }
                })
                .collect();
            let mut output = buffers[i].as_mut().map(|(frame, bytes)| RawFrame {
                addr: bytes.as_mut_ptr() as u64,
                len: bytes.len() as u64,
                seq: index,
                timestamp_ns,
                ..*frame
            });
            let ctx = RawProcessContext { frame_index: index, cuda_stream: std::ptr::null_mut() };
            let t = Instant::now();
            if snaps[i].first_ns == 0 {
                snaps[i].first_ns = now_ns();
            }
            // Buffers are owned here and not touched during the call.
            if let Err(e) = instances[i].process(&inputs, output.as_mut(), &ctx) {
                failure = Some((i, format!("plugin failed in process: {e}")));
                break 'frames;
            }
            snaps[i].busy_ns += t.elapsed().as_nanos() as u64;
            if let Some(tap) = &mut taps[i] {
                let hash = buffers[i].as_ref().and_then(|(frame, bytes)| gpuipc_plugin_api::pixel_hash(&frame.layout, bytes));
                tap.record(index, hash)?;
            }
            snaps[i].frames += 1;
            snaps[i].last_ns = now_ns();
            if let (Some(out), Some((frame, _))) = (output, buffers[i].as_mut()) {
                frame.seq = out.seq;
                frame.timestamp_ns = out.timestamp_ns;
            }
        }
        index += 1;
    }
    let mut outcomes: Vec<Option<StageOutcome>> = vec![Some(StageOutcome::Finished); plan.stages.len()];
    for (i, instance) in instances.iter_mut().enumerate() {
        if failure.is_none()
            && let Err(e) = instance.flush()
        {
            failure = Some((i, format!("plugin failed in flush: {e}")));
        }
    }
    for tap in taps.iter_mut().flatten() {
        tap.finish()?;
    }
    if let Some((i, why)) = &failure {
        outcomes[*i] = Some(StageOutcome::Failed(why.clone()));
    }
    drop(instances);
    let stages = plan
        .stages
        .iter()
        .zip(&snaps)
        .zip(outcomes)
        .map(|((s, snap), o)| StageReport::new(s.name.as_str(), &s.plugin.name, "cpu", snap, o.unwrap_or(StageOutcome::Stopped)))
        .collect();
    Ok(RunReport {
        pipeline: plan.name.clone(),
        stages,
        failure: failure.map(|(i, why)| (plan.stages[i].name.to_string(), why)),
        interrupted: stop.load(Ordering::Relaxed).then(|| "a stop signal".to_owned()),
        seconds: started.elapsed().as_secs_f64(),
    })
}

fn blank_frame(format: gpuipc_plugin_api::FrameFormat, layout: FrameLayout) -> RawFrame {
    RawFrame { format, layout, domain: abi::DOMAIN_CPU, addr: 0, len: 0, seq: 0, timestamp_ns: 0 }
}
