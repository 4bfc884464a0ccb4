//! `gpuipc-host bench` on the cpu domain (the GPU figures come from a machine with one): both
//! ways run as real processes, their outputs are compared, and every figure it reports for the
//! cpu is there, in the text and in the JSON.

mod common;

use common::*;

#[test]
fn bench_runs_both_ways_compares_outputs_and_reports_every_figure() {
    let dir = scratch("bench");
    let file = repo_root().join("pipelines/gradient-nv12.toml");
    let json = dir.join("bench.json");
    let args = [
        "bench", &file.to_string_lossy(), "--device", "cpu", "--frames", "40", "--warmup", "5", "--rounds", "3", "--check-frames", "12",
        "--latency-frames", "20", "--fps", "500", "--json", &json.to_string_lossy(),
    ]
    .map(|a| a.to_string());
    let run = run(&dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    assert!(run.stdout.contains("outputs: equal both ways (48 frames of 4 stages compared)"), "{}", run.output());
    for line in ["3 rounds of 40 frames each way", "frames/s (median)", "  round 3", "latency p50 (µs)", "latency p99 (µs)", "host CPU of the separate stages together", "added latency per hop (3 hops)"] {
        assert!(run.stdout.contains(line), "missing `{line}`:\n{}", run.output());
    }
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["outputs_differ"], serde_json::json!([]));
    assert_eq!(report["hops"], 3);
    for mode in ["in_process", "separate"] {
        assert!(report[mode]["frames_per_s"].as_f64().unwrap() > 0.0, "{mode}: {report}");
        let latency = report[mode]["latency_us"].as_array().unwrap_or_else(|| panic!("{mode}: no latency: {report}"));
        let (p50, p99, max) = (latency[0].as_f64().unwrap(), latency[1].as_f64().unwrap(), latency[2].as_f64().unwrap());
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{mode}: {latency:?}");
    }
    // Each way's frames/s is the median of its three rounds.
    let rounds = report["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 3, "{report}");
    for (mode, key) in [("in_process", "in_process_frames_per_s"), ("separate", "separate_frames_per_s")] {
        let mut each: Vec<f64> = rounds.iter().map(|r| r[key].as_f64().unwrap()).collect();
        each.sort_by(f64::total_cmp);
        assert_eq!(report[mode]["frames_per_s"].as_f64().unwrap(), each[1], "{mode}: {report}");
    }
    let ratio = report["separate"]["frames_per_s"].as_f64().unwrap() / report["in_process"]["frames_per_s"].as_f64().unwrap();
    // (JSON numbers parse back to within a rounding of what was written.)
    assert!((report["ratio"].as_f64().unwrap() - ratio).abs() < 1e-9 * ratio, "{report}");
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages.iter().map(|s| s["name"].as_str().unwrap()).collect::<Vec<_>>(), ["gen", "grade", "nv12", "hash"]);
    assert!(stages.iter().all(|s| s["cpu_separate"].as_f64().unwrap() > 0.0), "{report}");
    assert_nothing_left(run.pid);
}
