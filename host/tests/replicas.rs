//! Replicas: `replicas = N` runs N processes of a stage that share its input as a work queue
//! and merge their outputs back in sequence order. Consumers must see the stream one process
//! would have made: every frame once, in order, equal to the in-process reference; with
//! replicas killed at random, only counted frames go missing. The stages are real processes.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use rustix::process::Signal;

/// Sum of a field over every row of a stage (its replicas `name#N`, or the one row `name`).
fn total(report: &serde_json::Value, name: &str, field: &str) -> u64 {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name || s["name"].as_str().unwrap().starts_with(&format!("{name}#")))
        .map(|s| s[field].as_u64().unwrap())
        .sum()
}

/// Seq → hash of a tap file, in file order; a seq written twice fails.
fn tap(dir: &Path, file: &str) -> Vec<(u64, String)> {
    let lines = sum_lines(&dir.join(format!("{file}.sum")));
    let mut seen = std::collections::BTreeSet::new();
    for (seq, _) in &lines {
        assert!(seen.insert(*seq), "{file} wrote frame {seq} twice");
    }
    lines
}

/// The sequence numbers of a tap file, in file order.
fn seqs(dir: &Path, file: &str) -> Vec<u64> {
    tap(dir, file).into_iter().map(|(seq, _)| seq).collect()
}

/// Every frame a stage's tap (or its replicas' taps) holds equals the reference's.
fn assert_like_reference(sums: &Path, reference: &Path, stage: &str, replicas: u32) {
    let want: BTreeMap<u64, String> = tap(reference, stage).into_iter().collect();
    let files: Vec<String> =
        if replicas == 1 { vec![stage.to_owned()] } else { (0..replicas).map(|r| format!("{stage}#{r}")).collect() };
    let mut compared = 0;
    for file in files {
        if !sums.join(format!("{file}.sum")).exists() {
            continue;
        }
        for (seq, hash) in tap(sums, &file) {
            assert_eq!(want.get(&seq), Some(&hash), "{file} frame {seq} differs from the in-process reference");
            compared += 1;
        }
    }
    assert!(compared > 0, "no frame of '{stage}' compared");
}

const CHAIN: &str = r#"
[pipeline]
name = "replicas"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 48, pattern = "noise" }

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
replicas = REPLICAS
params = { brightness = 0.1, contrast = 1.2 }

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["grade"]
replicas = 2

[[stage]]
name = "sink"
plugin = "null"
inputs = ["yuv"]
"#;

#[test]
fn replicas_deliver_the_stream_one_process_would_in_order() {
    for replicas in [1, 2, 4] {
        let dir = scratch(&format!("replicas-order-{replicas}"));
        let file = pipeline(&dir, "p.toml", &CHAIN.replace("REPLICAS", &replicas.to_string()));
        let out = run_file(&dir, &file, &["--frames", "500", "--checksums", "sums", "--report", "report.json"]);
        assert_eq!(out.status.code(), Some(0), "{}", out.output());
        let sums = dir.join("sums");
        let sink = seqs(&sums, "sink");
        assert_eq!(
            sink,
            (0..500).collect::<Vec<u64>>(),
            "{replicas} replicas: the sink got every frame once, in order"
        );
        let report = report(&dir);
        assert_eq!(total(&report, "grade", "frames"), 500, "each frame went to one replica of 'grade'");
        assert_eq!(total(&report, "yuv", "frames"), 500);
        let reference = reference_run(&dir, &file, Some(500));
        for (stage, n) in [("grade", replicas), ("yuv", 2), ("sink", 1)] {
            assert_like_reference(&sums, &reference, stage, n);
        }
        assert_nothing_left(out.pid);
    }
}

#[test]
fn each_replica_of_a_fan_in_stage_takes_whole_aligned_sets() {
    let dir = scratch("replicas-fan-in");
    let file = pipeline(
        &dir,
        "p.toml",
        r#"
[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 48, pattern = "noise" }

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
params = { brightness = 0.2 }

[[stage]]
name = "join"
plugin = "test-faulty"
inputs = ["grade", "gen"]
replicas = 3

[[stage]]
name = "sink"
plugin = "null"
inputs = ["join"]
"#,
    );
    let out = run_file(&dir, &file, &["--frames", "400", "--checksums", "sums", "--report", "report.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let sums = dir.join("sums");
    // Every number went to one replica (a tap holds the numbers a replica took and made).
    let mut taken: Vec<u64> =
        (0..3).flat_map(|r| tap(&sums, &format!("join#{r}")).into_iter().map(|(seq, _)| seq)).collect();
    taken.sort_unstable();
    assert_eq!(taken, (0..400).collect::<Vec<u64>>(), "every aligned set taken by exactly one replica");
    let sink = seqs(&sums, "sink");
    assert_eq!(sink, (0..400).collect::<Vec<u64>>());
    let reference = reference_run(&dir, &file, Some(400));
    assert_like_reference(&sums, &reference, "join", 3);
    assert_like_reference(&sums, &reference, "sink", 1);
    assert_eq!(total(&report(&dir), "join", "dropped"), 0);
    assert_nothing_left(out.pid);
}

#[test]
fn every_policy_downstream_of_a_merge_sees_frames_in_order() {
    let dir = scratch("replicas-policies");
    let file = pipeline(
        &dir,
        "p.toml",
        r#"
[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 48, pattern = "noise" }

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
replicas = 3

[[stage]]
name = "block"
plugin = "test-faulty"
inputs = ["grade"]
params = { sink = true, delay_us = 200 }

[[stage]]
name = "oldest"
plugin = "test-faulty"
inputs = ["grade"]
policy = "drop_oldest"
params = { sink = true, delay_us = 500 }

[[stage]]
name = "newest"
plugin = "test-faulty"
inputs = ["grade"]
policy = "latest"
params = { sink = true, delay_us = 500 }
"#,
    );
    let out = run_file(&dir, &file, &["--frames", "600", "--checksums", "sums", "--report", "report.json"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    let sums = dir.join("sums");
    let report = report(&dir);
    let reference = reference_run(&dir, &file, Some(600));
    for sink in ["block", "oldest", "newest"] {
        let order = seqs(&sums, sink);
        assert!(order.windows(2).all(|w| w[0] < w[1]), "'{sink}' got frames out of order: {order:?}");
        let got = stage_row(&report, sink)["frames"].as_u64().unwrap();
        let dropped = stage_row(&report, sink)["dropped"].as_u64().unwrap();
        assert_eq!(got + dropped, 600, "'{sink}': frames it got + frames it missed = frames made");
    }
    assert_like_reference(&sums, &reference, "grade", 3);
    assert_eq!(stage_row(&report, "block")["frames"].as_u64(), Some(600), "a block consumer misses nothing");
    assert_nothing_left(out.pid);
}

const KILLED: &str = r#"
[pipeline]
name = "killed"
restart = "on-failure"
restart_backoff = "2ms"
restart_window = "1s"
max_restarts = 50

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 48, pattern = "noise", fps = 2000.0 }

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
replicas = 4
on_loss = "ON_LOSS"
params = { brightness = 0.1, contrast = 1.2 }

[[stage]]
name = "sink"
plugin = "null"
inputs = ["grade"]
"#;

/// 20 SIGKILLs of random replicas at random moments, each restarted; then a drain.
fn kill_replicas_twenty_times(on_loss: &str) {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    println!("fault injection seed {seed}, on_loss = {on_loss}");
    let mut dice = Dice(seed);
    let dir = scratch(&format!("replicas-kills-{on_loss}"));
    let file = pipeline(&dir, "p.toml", &KILLED.replace("ON_LOSS", on_loss));
    let mut host = start_running(&dir, &file, &SUMS_AND_REPORT);
    let mut restarts: BTreeMap<String, u64> = BTreeMap::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(dice.roll(30)));
        let victim = format!("grade#{}", dice.roll(4));
        let n = restarts.entry(victim.clone()).or_default();
        *n += 1;
        println!("SIGKILL to '{victim}'");
        rustix::process::kill_process(pid_of(host.pid(), &victim), Signal::KILL).unwrap();
        host.wait_for_stderr(&format!("stage '{victim}' restarted (restart {n})"), RUN_TIMEOUT);
    }
    host.signal(Signal::TERM);
    let finished = host.finish(RUN_TIMEOUT);
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    let report = report(&dir);
    for (name, &n) in &restarts {
        assert_eq!(stage_row(&report, name)["restarts"].as_u64(), Some(n), "restarts of '{name}'");
    }
    let sums = dir.join("sums");
    let produced = tap(&sums, "gen").len() as u64;
    let delivered = seqs(&sums, "sink");
    assert!(delivered.windows(2).all(|w| w[0] < w[1]), "the sink got each frame once, in order");
    let counted: u64 =
        ["gen", "grade", "sink"].iter().map(|s| total(&report, s, "dropped") + total(&report, s, "lost")).sum();
    assert_eq!(
        produced,
        delivered.len() as u64 + counted,
        "produced = delivered + dropped + lost\n{}",
        finished.stdout
    );
    if on_loss == "retry" {
        assert_eq!(counted, 0, "with retry a killed replica's frame is made by a sibling\n{}", finished.output());
    }
    let reference = reference_run(&dir, &file, Some(produced));
    assert_like_reference(&sums, &reference, "grade", 4);
    assert_like_reference(&sums, &reference, "sink", 1);
    assert_nothing_left(finished.pid);
}

#[test]
fn twenty_random_kills_of_replicas_with_retry_lose_nothing() {
    kill_replicas_twenty_times("retry");
}

#[test]
fn twenty_random_kills_of_replicas_with_drop_lose_only_counted_frames() {
    kill_replicas_twenty_times("drop");
}

#[test]
fn without_a_restart_policy_the_stage_goes_on_with_the_replicas_left() {
    let dir = scratch("replicas-gone");
    let text = KILLED
        .replace("ON_LOSS", "retry")
        .replace("restart = \"on-failure\"", "restart = \"never\"")
        .replace("fps = 2000.0", "fps = 500.0");
    let file = pipeline(&dir, "p.toml", &text.replace("name = \"killed\"", "name = \"killed\"\nframes = 600"));
    let mut host = start_running(&dir, &file, &SUMS_AND_REPORT);
    for victim in ["grade#1", "grade#3", "grade#0"] {
        rustix::process::kill_process(pid_of(host.pid(), victim), Signal::KILL).unwrap();
        host.wait_for_stderr(&format!("stage '{victim}' killed by SIGKILL; stage 'grade' goes on with"), RUN_TIMEOUT);
    }
    let finished = host.finish(RUN_TIMEOUT);
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    assert!(finished.stdout.contains("GONE: killed by SIGKILL"), "{}", finished.output());
    let sums = dir.join("sums");
    let delivered = seqs(&sums, "sink");
    assert_eq!(delivered, (0..600).collect::<Vec<u64>>(), "with retry the replica left made every frame");
    let reference = reference_run(&dir, &file, Some(600));
    assert_like_reference(&sums, &reference, "sink", 1);
    assert_nothing_left(finished.pid);
}

#[test]
fn a_ring_read_by_replicas_gets_a_slot_for_each_unless_its_depth_is_set() {
    let dir = scratch("replicas-depth");
    let chain = |gen_depth: &str| {
        format!(
            "[pipeline]\ndevice = \"cpu\"\n\n[[stage]]\nname = \"gen\"\nplugin = \"generator\"\n{gen_depth}params = {{ width = 64, height = 48 }}\n\n\
             [[stage]]\nname = \"grade\"\nplugin = \"rgb-process\"\ninputs = [\"gen\"]\nreplicas = 6\n"
        )
    };
    for (gen_depth, slots) in [("", "8 slots"), ("depth = 3\n", "3 slots")] {
        let file = pipeline(&dir, "p.toml", &chain(gen_depth));
        let out = run(&dir, &["validate", &file.to_string_lossy()]);
        assert_eq!(out.status.code(), Some(0), "{}", out.output());
        let link = out.stdout.lines().find(|l| l.trim_start().starts_with("gen -> grade")).expect("the link's line");
        assert!(link.contains(&format!("{slots} x")), "{gen_depth:?}: {link}");
    }
}
