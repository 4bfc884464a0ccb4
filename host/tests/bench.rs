//! `gpuipc-host bench` on the cpu domain (the GPU figures come from a machine with one): both
//! ways run as real processes, their outputs are compared, and every figure it reports for the
//! cpu is there, in the text and in the JSON.

mod common;

use common::*;
use std::process::Stdio;

#[test]
fn bench_runs_both_ways_compares_outputs_and_reports_every_figure() {
    let dir = scratch("bench");
    let file = repo_root().join("pipelines/gradient-nv12.toml");
    let json = dir.join("bench.json");
    let args = [
        "bench",
        &file.to_string_lossy(),
        "--device",
        "cpu",
        "--frames",
        "40",
        "--warmup",
        "5",
        "--rounds",
        "3",
        "--check-frames",
        "12",
        "--latency-frames",
        "20",
        "--fps",
        "500",
        "--json",
        &json.to_string_lossy(),
    ]
    .map(|a| a.to_string());
    let run = run(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    assert!(run.stdout.contains("outputs: equal both ways (48 frames of 4 stages compared)"), "{}", run.output());
    for line in [
        "3 rounds of 40 frames each way",
        "frames/s (median)",
        "  round 3",
        "latency p50 µs (median)",
        "latency p99 µs (median)",
        "latency max µs",
        "  round 3 p50 / p99",
        "host CPU of the separate stages together",
        "added latency per hop (3 hops)",
    ] {
        assert!(run.stdout.contains(line), "missing `{line}`:\n{}", run.output());
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["outputs_differ"], serde_json::json!([]));
    assert_eq!(report["hops"], 3);
    for mode in ["in_process", "separate"] {
        assert!(report[mode]["frames_per_s"].as_f64().unwrap() > 0.0, "{mode}: {report}");
        let latency = report[mode]["latency_us"].as_array().unwrap_or_else(|| panic!("{mode}: no latency: {report}"));
        let (p50, p99, max) =
            (latency[0].as_f64().unwrap(), latency[1].as_f64().unwrap(), latency[2].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{mode}: {latency:?}");
    }
    // Latency: three rounds each way; the p50 and p99 are the medians of theirs, the max the largest.
    let latency_rounds = report["latency_rounds"].as_array().unwrap();
    assert_eq!(latency_rounds.len(), 3, "{report}");
    for (mode, key) in [("in_process", "in_process_us"), ("separate", "separate_us")] {
        for (i, pick) in [(0, 1usize), (1, 1), (2, 2)] {
            let mut each: Vec<f64> = latency_rounds.iter().map(|r| r[key][i].as_f64().unwrap()).collect();
            each.sort_by(f64::total_cmp);
            assert_eq!(report[mode]["latency_us"][i].as_f64().unwrap(), each[pick], "{mode} [{i}]: {report}");
        }
    }
    // Each way's frames/s is the median of its three rounds.
    let rounds = report["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "{report}");
    for (mode, key) in [("in_process", "in_process_frames_per_s"), ("separate", "separate_frames_per_s")] {
        let mut each: Vec<f64> = rounds.iter().map(|r| r[key].as_f64().unwrap()).collect();
        each.sort_by(f64::total_cmp);
        assert_eq!(report[mode]["frames_per_s"].as_f64().unwrap(), each[1], "{mode}: {report}");
    }
    let ratio =
        report["separate"]["frames_per_s"].as_f64().unwrap() / report["in_process"]["frames_per_s"].as_f64().unwrap();
    // (JSON numbers parse back to within a rounding of what was written.)
    assert!((report["ratio"].as_f64().unwrap() - ratio).abs() < 1e-9 * ratio, "{report}");
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(
        stages.iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(),
        ["gen", "grade", "nv12", "hash"]
    );
    assert!(stages.iter().all(|s| s["cpu_separate"].as_f64().unwrap() > 0.0), "{report}");
    assert_nothing_left(run.pid);
}

/// `GPUIPC_TRACE=DIR`: every stage process writes when each frame ended each phase. Each
/// stage's trace holds every frame once, with its source's stamp; within a frame the phases
/// end in loop order; and no stage holds a frame before its producer began to publish it.
#[test]
fn frame_traces_follow_each_frame_through_every_stage_in_order() {
    let dir = scratch("trace");
    let traces = dir.join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let file = repo_root().join("pipelines/gradient-nv12.toml");
    let env = format!("GPUIPC_TRACE={}", traces.display());
    let run = start_wrapped(
        &dir,
        &["env", &env],
        &["run", &file.to_string_lossy(), "--device", "cpu", "--frames", "25"],
        Stdio::null(),
    )
    .finish(RUN_TIMEOUT);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    let order = ["gen", "grade", "nv12", "hash"];
    let rows: Vec<Vec<Vec<u64>>> = order.iter().map(|stage| trace_rows(&traces, stage)).collect();
    // Columns: seq, stamp, cpu, then the ends of: wait input, open input, wait output, prepare
    // output, process, close input, finish output, publish, measure; the frame's start (the
    // last one's release done); when its publish began.
    const WAIT_INPUT: usize = 3;
    const FINISH_OUTPUT: usize = 9;
    const PUBLISH: usize = 10;
    const MEASURE: usize = 11;
    const START: usize = 12;
    const PUBLISH_BEGINS: usize = 13;
    for (stage, frames) in order.iter().zip(&rows) {
        assert_eq!(frames.iter().map(|r| r[0]).collect::<Vec<_>>(), (0..25).collect::<Vec<_>>(), "{stage}");
        for (r, source) in frames.iter().zip(&rows[0]) {
            assert_eq!(r.len(), 14, "{stage}: {r:?}");
            assert_eq!(r[1], source[1], "{stage}: frame {} carries its source's stamp", r[0]);
            let ends: Vec<u64> = std::iter::once(r[START])
                .chain(r[WAIT_INPUT..=FINISH_OUTPUT].iter().copied())
                .chain([r[PUBLISH_BEGINS], r[PUBLISH], r[MEASURE]])
                .collect();
            assert!(ends.windows(2).all(|w| w[0] <= w[1]), "{stage}: frame {}: phases out of order: {r:?}", r[0]);
        }
    }
    for (i, pair) in rows.windows(2).enumerate() {
        for (producer, consumer) in pair[0].iter().zip(&pair[1]) {
            assert!(
                consumer[WAIT_INPUT] >= producer[PUBLISH_BEGINS],
                "{} held frame {} before {} published it",
                order[i + 1],
                consumer[0],
                order[i]
            );
        }
    }
    assert_nothing_left(run.pid);
}

/// The rows of the one trace `stage`'s process wrote under `dir`; its footer has the thread's
/// scheduler figures.
fn trace_rows(dir: &std::path::Path, stage: &str) -> Vec<Vec<u64>> {
    let files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{stage}.")))
        .collect();
    assert_eq!(files.len(), 1, "{stage}: {files:?}");
    let text = std::fs::read_to_string(&files[0]).unwrap();
    let sched = text.lines().find_map(|l| l.strip_prefix("# schedstat (run ns, runqueue wait ns, slices): "));
    let figures: Vec<u64> = sched
        .unwrap_or_else(|| panic!("{stage}: no scheduler line: {text}"))
        .split(' ')
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(figures.len() == 3 && figures[0] > 0, "{stage}: {figures:?}");
    text.lines().filter(|l| !l.starts_with('#')).map(|l| l.split(' ').map(|c| c.parse().unwrap()).collect()).collect()
}

/// A latency rate of 0 (or not a number) is refused on the command line, naming the option:
/// it once reached a division and panicked after the throughput rounds.
#[test]
fn a_rate_of_zero_is_refused_before_anything_runs() {
    let dir = scratch("bench-zero-fps");
    let file = repo_root().join("pipelines/gray-bars.toml");
    for fps in ["0", "nan", "inf"] {
        let run = run(&dir, &["bench", &file.to_string_lossy(), "--device", "cpu", "--fps", fps]);
        assert_eq!(run.status.code(), Some(2), "--fps {fps}: {}", run.output());
        assert!(run.stderr.contains(&format!("invalid value '{fps}' for '--fps <FPS>'")), "{}", run.output());
        assert!(run.stderr.contains("above 0"), "{}", run.output());
        assert!(!run.output().contains("panicked"), "{}", run.output());
    }
}
