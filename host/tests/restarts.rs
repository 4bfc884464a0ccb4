//! Stages that come back: with a restart policy, a stage that crashes, is killed or stalls is
//! started again while the rest of the pipeline keeps running. Frames that died with it are
//! counted, never delivered half-made, and every frame that reaches the end is the one the
//! in-process reference makes for its sequence number. The stages are real processes.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use rustix::process::Signal;

/// 40 frames through a faulty stage into a `null` sink, with `supervision` keys.
fn faulty_run(mode: &str, at: u64, supervision: &str) -> String {
    faulty_chain("restarts", &format!("frames = 40\n{supervision}"), mode, at, "plugin = \"null\"")
}

#[test]
fn a_stage_that_dies_once_is_restarted_and_the_run_finishes_counting_the_lost_frame() {
    for mode in ["sigkill_at", "panic_at", "error_at", "abort_at", "exit_at"] {
        let dir = scratch(&format!("restart-once-{mode}"));
        let file =
            pipeline(&dir, "p.toml", &faulty_run(mode, 5, "restart = \"on-failure\"\nrestart_backoff = \"1ms\""));
        let run = run_file(&dir, &file, &SUMS_AND_REPORT);
        assert_eq!(run.status.code(), Some(0), "{mode}:\n{}", run.output());
        assert!(run.stderr.contains("stage 'bad' restarted (restart 1)"), "{mode}:\n{}", run.output());
        let report = report(&dir);
        let bad = stage_row(&report, "bad");
        assert_eq!((bad["restarts"].as_u64(), bad["lost"].as_u64()), (Some(1), Some(1)), "{mode}: {bad}");
        assert_eq!(bad["outcome"], "finished", "{mode}");
        // Frame 5 died inside 'bad'; every other frame reached the sink, in order.
        let sink: Vec<u64> = sum_lines(&dir.join("sums/sink.sum")).into_iter().map(|(seq, _)| seq).collect();
        assert_eq!(sink, (0..40).filter(|&s| s != 5).collect::<Vec<u64>>(), "{mode}");
        assert_nothing_left(run.pid);
    }
}

#[test]
fn without_a_restart_policy_a_failure_still_stops_the_run() {
    let dir = scratch("restart-never");
    let file = pipeline(&dir, "p.toml", &faulty_run("sigkill_at", 5, ""));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(1, "run 'restarts' failed: stage 'bad' killed by SIGKILL");
}

#[test]
fn the_host_gives_up_after_max_restarts_within_the_window() {
    let dir = scratch("restart-budget");
    let supervision = "restart = \"always\"\nmax_restarts = 2\nrestart_backoff = \"1ms\"";
    let file = pipeline(&dir, "p.toml", &faulty_run("error_on_create", 0, supervision));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(
        1,
        "run 'restarts' failed: stage 'bad' got an error from the plugin's `create`: refusing to start, as asked; gave up after 2 restarts within 60.0 s",
    );
    assert_eq!(run.stderr.matches("refusing to start, as asked; restarting it").count(), 2, "{}", run.output());
}

#[test]
fn on_failure_does_not_restart_a_stage_that_never_started() {
    let dir = scratch("restart-not-started");
    let file = pipeline(&dir, "p.toml", &faulty_run("error_on_create", 0, "restart = \"on-failure\""));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(1, "failed: stage 'bad' got an error from the plugin's `create`");
    assert!(!run.stderr.contains("restarting it"), "{}", run.output());
}

#[test]
fn the_watchdog_names_a_stalled_stage_and_stops_the_run_without_a_restart_policy() {
    let dir = scratch("stall-never");
    let file = pipeline(&dir, "p.toml", &faulty_run("hang_at", 3, "stall_timeout = \"300ms\""));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(1, "run 'restarts' failed: stage 'bad' stalled: no progress for 300 ms (in the plugin's process at frame 3); killed by the watchdog");
}

#[test]
fn the_watchdog_ends_a_setup_that_never_finishes() {
    let dir = scratch("stall-setup");
    let file = pipeline(&dir, "p.toml", &faulty_run("hang_on_create", 0, "stall_timeout = \"300ms\""));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(1, "run 'restarts' failed: stage 'bad' stalled: not ready 10.0 s after its process started");
}

#[test]
fn a_stalled_stage_is_restarted_and_the_run_finishes() {
    let dir = scratch("stall-restart");
    let supervision = "stall_timeout = \"300ms\"\nrestart = \"on-failure\"\nrestart_backoff = \"1ms\"";
    let file = pipeline(&dir, "p.toml", &faulty_run("hang_at", 3, supervision));
    let run = run_file(&dir, &file, &["--report", "report.json"]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    let report = report(&dir);
    let bad = stage_row(&report, "bad");
    assert_eq!((bad["restarts"].as_u64(), bad["lost"].as_u64()), (Some(1), Some(1)), "{bad}");
    assert_eq!(stage_row(&report, "sink")["frames"].as_u64(), Some(39));
    assert_nothing_left(run.pid);
}

const CHAIN: &str = r#"
[pipeline]
name = "chain"
restart = "on-failure"
restart_backoff = "2ms"
restart_window = "1s"
max_restarts = 50
stall_timeout = "500ms"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 32, height = 24, pattern = "gradient" }

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
params = { brightness = 0.1, contrast = 1.2 }

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["grade"]

[[stage]]
name = "sink"
plugin = "null"
inputs = ["yuv"]
"#;

const STAGES: [&str; 4] = ["gen", "grade", "yuv", "sink"];

#[test]
fn twenty_random_kills_and_a_stop_lose_only_counted_frames_and_deliver_only_right_ones() {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    println!("fault injection seed {seed}");
    let mut dice = Dice(seed);
    let dir = scratch("fault-injection");
    let file = pipeline(&dir, "p.toml", CHAIN);
    let mut host = start_running(&dir, &file, &SUMS_AND_REPORT);
    let mut restarts: BTreeMap<&str, u64> = BTreeMap::new();
    for kill in 0..21 {
        // A random moment: a pause of up to 30 ms, then a random stage.
        std::thread::sleep(Duration::from_millis(dice.roll(30)));
        let victim = STAGES[dice.roll(4) as usize];
        let n = restarts.entry(victim).or_default();
        *n += 1;
        let signal = if kill == 10 { Signal::STOP } else { Signal::KILL };
        println!("{signal:?} to '{victim}'");
        rustix::process::kill_process(pid_of(host.pid(), victim), signal).unwrap();
        if signal == Signal::STOP {
            host.wait_for_stderr(&format!("stage '{victim}' stalled: no progress for"), RUN_TIMEOUT);
        }
        host.wait_for_stderr(&format!("stage '{victim}' restarted (restart {n})"), RUN_TIMEOUT);
    }
    host.signal(Signal::TERM);
    let finished = host.finish(RUN_TIMEOUT);
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    assert!(finished.stdout.contains("run 'chain' stopped by a stop signal and drained"), "{}", finished.output());
    let report = report(&dir);
    for (&name, &n) in &restarts {
        assert_eq!(stage_row(&report, name)["restarts"].as_u64(), Some(n), "restarts of '{name}'");
    }

    let sums = dir.join("sums");
    let made = sums_by_seq(&sums.join("gen.sum"));
    let produced = made.len() as u64;
    assert_eq!(
        made.keys().copied().collect::<Vec<_>>(),
        (0..produced).collect::<Vec<_>>(),
        "the source made every number once"
    );
    let delivered = sum_lines(&sums.join("sink.sum"));
    let seqs: Vec<u64> = delivered.iter().map(|(s, _)| *s).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "the sink got each frame once, in order: {seqs:?}");
    let counted: u64 = STAGES
        .iter()
        .map(|s| stage_row(&report, s)["dropped"].as_u64().unwrap() + stage_row(&report, s)["lost"].as_u64().unwrap())
        .sum();
    assert_eq!(produced, seqs.len() as u64 + counted, "produced = delivered + dropped + lost\n{}", finished.stdout);
    assert_links_balance(&report, &finished.output());

    // The reference: the same frames in one process.
    let reference = reference_run(&dir, &file, Some(produced));
    for name in STAGES {
        let want = sums_by_seq(&reference.join(format!("{name}.sum")));
        for (seq, hash) in sums_by_seq(&sums.join(format!("{name}.sum"))) {
            assert_eq!(want.get(&seq), Some(&hash), "stage '{name}' frame {seq} differs from the in-process reference");
        }
    }
    assert_nothing_left(finished.pid);
}

/// A generator paced at 400 frames/s into two file sinks that restart: a checksum file, and an
/// I420 stream in a .y4m file.
const FILE_SINKS: &str = r#"
[pipeline]
name = "sinks"
frames = 800
restart = "on-failure"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 32, height = 16, pattern = "noise", fps = 400.0 }

[[stage]]
name = "hashes"
plugin = "checksum"
inputs = ["gen"]
params = { path = "out/hashes.sum" }

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
params = { layout = "i420" }

[[stage]]
name = "file"
plugin = "y4m"
inputs = ["yuv"]
params = { path = "out/video.y4m" }
"#;

#[test]
fn restarted_file_sinks_keep_every_frame_delivered_to_them_once() {
    let dir = scratch("file-sinks");
    let file = pipeline(&dir, "p.toml", FILE_SINKS);
    let mut host = start_running(&dir, &file, &SUMS_AND_REPORT);
    for round in 1..=3 {
        for sink in ["hashes", "file"] {
            let tap = dir.join("sums").join(format!("{sink}.sum"));
            let want = 100 * round;
            wait_until(RUN_TIMEOUT, "frames at the sink", || {
                std::fs::read_to_string(&tap).is_ok_and(|t| t.lines().count() >= want)
            });
            rustix::process::kill_process(pid_of(host.pid(), sink), Signal::KILL).unwrap();
            host.wait_for_stderr(&format!("stage '{sink}' restarted (restart {round})"), RUN_TIMEOUT);
        }
    }
    let finished = host.finish(RUN_TIMEOUT);
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    let report = report(&dir);

    // The checksum file: every frame delivered to the stage, once, in order; at most the
    // frames counted lost besides (written by a process killed before it was done with them).
    let delivered: Vec<u64> = sum_lines(&dir.join("sums/hashes.sum")).iter().map(|(s, _)| *s).collect();
    let written: Vec<u64> = sum_lines(&dir.join("out/hashes.sum")).iter().map(|(s, _)| *s).collect();
    assert!(written.windows(2).all(|w| w[0] < w[1]), "each frame once, in order: {written:?}");
    assert!(delivered.iter().all(|s| written.contains(s)), "every delivered frame is in the file");
    let lost = stage_row(&report, "hashes")["lost"].as_u64().unwrap();
    assert!(
        written.len() as u64 <= delivered.len() as u64 + lost,
        "{} written, {} delivered, {lost} lost",
        written.len(),
        delivered.len()
    );

    // The y4m stream: its header once, then whole frames, as many as were delivered (and at
    // most the lost ones besides).
    let bytes = std::fs::read(dir.join("out/video.y4m")).unwrap();
    let header = b"YUV4MPEG2 W32 H16 F30:1 Ip A1:1 C420jpeg\n";
    assert!(bytes.starts_with(header));
    let frame = 6 + 32 * 16 * 3 / 2;
    assert_eq!((bytes.len() - header.len()) % frame, 0, "whole frames only");
    let frames = ((bytes.len() - header.len()) / frame) as u64;
    let delivered = sum_lines(&dir.join("sums/file.sum")).len() as u64;
    let lost = stage_row(&report, "file")["lost"].as_u64().unwrap();
    assert!(
        (delivered..=delivered + lost).contains(&frames),
        "{frames} frames in the file, {delivered} delivered, {lost} lost"
    );
    assert_eq!(bytes.windows(header.len()).filter(|w| *w == header).count(), 1, "one header");
    assert_nothing_left(finished.pid);
}

/// Every link's frames at each consumer, from the run's report: `produced = delivered +
/// dropped + lost`, exactly, and the source's own count agrees.
fn assert_links_balance(report: &serde_json::Value, output: &str) {
    let links = report["links"].as_array().unwrap_or_else(|| panic!("no links in the report\n{output}"));
    assert!(!links.is_empty(), "{output}");
    for link in links {
        let count = |field: &str| link[field].as_u64().unwrap();
        assert_eq!(
            count("produced"),
            count("delivered") + count("dropped") + count("lost"),
            "produced = delivered + dropped + lost on {link}\n{output}"
        );
        let producer = link["producer"].as_str().unwrap();
        let made: u64 = report["stages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["name"].as_str().unwrap().split('#').next() == Some(producer))
            .map(|s| s["frames"].as_u64().unwrap())
            .sum();
        assert_eq!(made, count("produced"), "{link}");
    }
    assert_eq!(report["warnings"].as_array().map_or(0, Vec::len), 0, "{output}");
}

/// A diamond whose join takes `latest`, and a sink: every stage SIGKILLed at random moments,
/// many times, without `--checksums` (whose tap lines the host also reads to tell a done frame
/// from a lost one). Each link's books must balance exactly at the end: a count a kill cut in
/// two (published but not counted, counted twice, given up after its producer died, lost by a
/// join between its inputs' takes) shows as a frame too many or too few.
#[test]
fn random_kills_keep_every_links_books_exact() {
    kill_and_check_the_books(1);
}

/// The same with the branch as two replicas, each killed as often. (It failed about one run in
/// ten: a replica killed while it held the take lock had a sibling's finished frame, whose
/// claim the sibling had not let go of yet, taken for its own, and counted twice or given up.)
#[test]
fn random_kills_of_replicas_keep_every_links_books_exact() {
    kill_and_check_the_books(2);
}

fn kill_and_check_the_books(yuv_replicas: u32) {
    let diamond = format!(
        r#"
[pipeline]
name = "books"
restart = "on-failure"
restart_backoff = "2ms"
restart_window = "1s"
max_restarts = 100
stall_timeout = "2s"

[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = 32, height = 24, pattern = "gradient" }}

[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
params = {{ brightness = 0.1 }}

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["grade"]
replicas = {yuv_replicas}

[[stage]]
name = "join"
plugin = "checksum"
inputs = ["yuv", "gen"]
policy = "latest"
params = {{ path = "join.sum" }}
"#
    );
    let yuv: Vec<String> =
        if yuv_replicas == 1 { vec!["yuv".into()] } else { (0..yuv_replicas).map(|r| format!("yuv#{r}")).collect() };
    let processes: Vec<&str> = ["gen", "grade", "join"].into_iter().chain(yuv.iter().map(String::as_str)).collect();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    println!("fault injection seed {seed}");
    let mut dice = Dice(seed);
    let dir = scratch(&format!("books-{yuv_replicas}"));
    let file = pipeline(&dir, "p.toml", &diamond);
    let mut host = start_running(&dir, &file, &["--report", "report.json"]);
    let mut restarts: BTreeMap<&str, u64> = BTreeMap::new();
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(dice.roll(20)));
        let victim = processes[dice.roll(processes.len() as u64) as usize];
        let n = restarts.entry(victim).or_default();
        *n += 1;
        println!("SIGKILL to '{victim}'");
        rustix::process::kill_process(pid_of(host.pid(), victim), Signal::KILL).unwrap();
        host.wait_for_stderr(&format!("'{victim}' restarted (restart {n})"), RUN_TIMEOUT);
    }
    host.signal(Signal::TERM);
    let finished = host.finish(RUN_TIMEOUT);
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    assert_links_balance(&report(&dir), &finished.output());
    assert_nothing_left(finished.pid);
}
