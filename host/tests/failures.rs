//! When a stage fails, however it fails, the run stops with a message naming the stage and
//! the cause, a non-zero exit code, and nothing left behind: no process, no shared memory.
//! Signals drain the pipeline; a second signal aborts it. The stages are real processes
//! running the misbehaving `test-faulty` plugin.

mod common;

use common::*;
use rustix::process::Signal;

fn faulty_pipeline(mode: &str, frames: Option<u64>) -> String {
    faulty_pipeline_at(mode, 3, frames)
}

fn faulty_pipeline_at(mode: &str, at: u64, frames: Option<u64>) -> String {
    let frames = frames.map_or(String::new(), |n| format!("frames = {n}"));
    faulty_chain("faults", &frames, mode, at, "plugin = \"checksum\"\nparams = { path = \"sink.sum\" }")
}

#[test]
fn every_kind_of_stage_failure_ends_the_run_naming_the_stage_and_cause() {
    let cases = [
        ("error_at", "stage 'bad' got an error from the plugin's `process` at frame 3: failing at frame 3, as asked"),
        (
            "panic_at",
            "stage 'bad' got an error from the plugin's `process` at frame 3: plugin panicked: panicking at frame 3, as asked",
        ),
        ("abort_at", "stage 'bad' killed by SIGABRT"),
        ("exit_at", "stage 'bad' exited with code 7"),
        ("sigkill_at", "stage 'bad' killed by SIGKILL"),
        // Input frames are mapped read-only: the write faults rather than change the frame.
        ("write_input_at", "stage 'bad' killed by SIGSEGV"),
        // Only a source may end its stream; a filter that tries fails, naming the call.
        (
            "end_stream_at",
            "stage 'bad' got an error from the plugin's `process` at frame 3: ended its stream (OutputFrame::end_stream), which only a source (a stage without inputs) may do",
        ),
        ("error_on_create", "stage 'bad' got an error from the plugin's `create`: refusing to start, as asked"),
        (
            "panic_on_create",
            "stage 'bad' got an error from the plugin's `create`: plugin panicked: panicking in create, as asked",
        ),
        ("error_in_flush", "stage 'bad' got an error from the plugin's `flush`: failing in flush, as asked"),
    ];
    for (mode, expected) in cases {
        let dir = scratch(&format!("fail-{mode}"));
        let file = pipeline(&dir, "p.toml", &faulty_pipeline(mode, Some(50)));
        let run = run_file(&dir, &file, &[]);
        assert_eq!(run.status.code(), Some(1), "{mode}:\n{}", run.output());
        assert!(
            run.stdout.contains(&format!("run 'faults' failed: {expected}")),
            "{mode}: expected `{expected}`:\n{}",
            run.output()
        );
        // The other stages stopped; they did not fail.
        for line in run.stdout.lines().filter(|l| l.starts_with("gen ") || l.starts_with("sink ")) {
            assert!(line.ends_with("stopped") || line.ends_with("finished"), "{mode}: {line}");
        }
        assert_nothing_left(run.pid);
    }
}

/// No code in a consuming stage can change the frames its link's other consumers read.
/// 'bad' runs hostile code (`tamper_input_at`): it tries to map its input's memory again
/// writable through every descriptor of its process open on it, as it is and opened again for
/// writing through /proc/self/fd, and to make its own mapping writable. Every attempt is
/// refused, and 'good', which reads gen's frame N only once 'bad' is done with it (it joins
/// it with bad's frame N), reads what the generator made.
#[test]
fn a_consumer_cannot_make_its_input_frames_writable() {
    let dir = scratch("tamper-input");
    let text = r#"
[pipeline]
name = "tamper"
frames = 8
[[stage]]
name = "gen"
plugin = "generator"
depth = 2
params = { width = 48, height = 32, pattern = "box" }
[[stage]]
name = "bad"
plugin = "test-faulty"
inputs = ["gen"]
params = { mode = "tamper_input_at", at = 3 }
[[stage]]
name = "good"
plugin = "test-faulty"
inputs = ["gen", "bad"]
[[stage]]
name = "sink"
plugin = "null"
inputs = ["good"]
"#;
    let file = pipeline(&dir, "p.toml", text);
    let run = run_file(&dir, &file, &["--checksums", "sums"]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    let tried: Vec<&str> = run.stderr.lines().filter(|l| l.contains("tamper: ")).collect();
    let saw = |what: &str| tried.iter().any(|l| l.contains(what));
    assert!(
        saw("tamper: mprotect(PROT_READ|PROT_WRITE) of the input's page: refused (EACCES)"),
        "{tried:#?}\n{}",
        run.output()
    );
    // The consumer keeps no descriptor of its frames: none to map again, none to reopen.
    assert!(saw("tamper: mmap(PROT_WRITE) of the input's memory: no descriptor of /memfd:gpuipc-"), "{tried:#?}");
    assert!(!saw("succeeded") && !saw("opened"), "an attempt got through: {tried:#?}");
    let made = sum_lines(&dir.join("sums/gen.sum"));
    assert_eq!(made.len(), 8);
    assert_eq!(sum_lines(&dir.join("sums/good.sum")), made, "'good' read the frames 'gen' made");
    assert_nothing_left(run.pid);
}

/// A process a plugin starts (the `encode` sink's ffmpeg, the `video` source's decoder) gets
/// standard input, output and error only: not the stage's control socket (fd 3, mapped by
/// the host without close-on-exec), nor its rings and stats, nor a blocked stop signal.
#[test]
fn a_child_a_plugin_starts_holds_nothing_of_its_stage() {
    let dir = scratch("child-of-plugin");
    let file = pipeline(&dir, "p.toml", &faulty_pipeline("spawn_child_at", Some(10)));
    let run = run_file(&dir, &file, &[]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    assert!(
        run.stderr.contains("a child of the stage holds descriptors 0, 1 and 2 only"),
        "the check did not run:\n{}",
        run.output()
    );
    assert_nothing_left(run.pid);
}

#[test]
fn a_stage_killed_from_outside_mid_run_ends_the_run_cleanly() {
    let dir = scratch("sigkill-outside");
    let file = pipeline(&dir, "p.toml", &faulty_pipeline("ok", None));
    let host = start_running(&dir, &file, &[]);
    let stages = stages_of(host.pid());
    let (victim, _) = stages.iter().find(|(_, cmd)| cmd.contains("__stage bad")).expect("stage 'bad' is running");
    rustix::process::kill_process(rustix::process::Pid::from_raw(*victim as i32).unwrap(), Signal::KILL).unwrap();
    let run = host.finish(RUN_TIMEOUT);
    run.assert_ended(1, "run 'faults' failed: stage 'bad' killed by SIGKILL");
}

#[test]
fn a_signal_drains_the_pipeline_and_every_frame_made_reaches_the_sink() {
    for signal in [Signal::INT, Signal::TERM, Signal::HUP] {
        let dir = scratch(&format!("drain-{signal:?}"));
        let file = pipeline(&dir, "p.toml", &faulty_pipeline("ok", None));
        let host = start_running(&dir, &file, &["--report", "report.json"]);
        host.signal(signal);
        let run = host.finish(RUN_TIMEOUT);
        assert!(run.status.success(), "{signal:?}:\n{}", run.output());
        assert!(run.stdout.contains("run 'faults' stopped by a stop signal and drained"), "{}", run.output());
        let made = report(&dir)["stages"][0]["frames"].as_u64().unwrap();
        let lines = sum_lines(&dir.join("sink.sum"));
        assert_eq!(lines.len() as u64, made, "{signal:?}: every frame the source made reached the sink");
        assert!(lines.iter().enumerate().all(|(i, (seq, _))| *seq == i as u64));
        assert_nothing_left(run.pid);
    }
}

#[test]
fn a_second_signal_aborts_a_pipeline_that_cannot_drain() {
    let dir = scratch("hang-abort");
    let file = pipeline(&dir, "p.toml", &faulty_pipeline_at("hang_at", 0, None));
    let mut host = start(&dir, &["run", &file.to_string_lossy(), "--quiet"]);
    host.wait_for_stderr("hanging at frame 0, as asked", RUN_TIMEOUT);
    host.signal(Signal::TERM);
    // Signals of one kind do not queue: send the second once the first was seen.
    host.wait_for_stderr("the pipeline drains; signal again to abort", RUN_TIMEOUT);
    host.signal(Signal::TERM);
    let run = host.finish(RUN_TIMEOUT);
    run.assert_ended(1, "run 'faults' stopped: interrupted");
}

#[test]
fn stages_die_with_a_killed_host() {
    let dir = scratch("host-killed");
    let file = pipeline(&dir, "p.toml", &faulty_pipeline("ok", None));
    let host = start_running(&dir, &file, &[]);
    let stages = stages_of(host.pid());
    assert_eq!(stages.len(), 3, "{stages:?}");
    let pidfds: Vec<_> = stages
        .iter()
        .map(|(pid, _)| {
            rustix::process::pidfd_open(
                rustix::process::Pid::from_raw(*pid as i32).unwrap(),
                rustix::process::PidfdFlags::empty(),
            )
            .unwrap()
        })
        .collect();
    host.signal(Signal::KILL);
    let run = host.finish(RUN_TIMEOUT);
    assert!(run.status.code().is_none());
    // A pidfd becomes readable when its process exits: wait for each, bounded.
    for fd in &pidfds {
        let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
        let ts = rustix::time::Timespec { tv_sec: 30, tv_nsec: 0 };
        let ready = rustix::event::poll(&mut fds, Some(&ts)).unwrap();
        assert_eq!(ready, 1, "a stage outlived its host by 30 s");
    }
    assert_nothing_left(run.pid);
}

#[test]
fn the_host_refuses_plugins_that_do_not_speak_its_abi() {
    let dir = scratch("abi");
    std::fs::write(dir.join("not-a-library.so"), b"plain text").unwrap();
    use gpuipc_plugin_api::abi::{ABI_MAJOR, ABI_MINOR};
    let wrong_abi = format!("was built for plugin ABI 2.7; this host speaks {ABI_MAJOR}.{ABI_MINOR}");
    let cases = [
        ("test-wrong-abi", wrong_abi.as_str()),
        ("test-no-entry", "is not a gpuipc plugin: it has no `gpuipc_plugin_entry_v1` symbol"),
        ("./not-a-library.so", "cannot load plugin"),
    ];
    for (plugin, expected) in cases {
        let file = pipeline(
            &dir,
            "p.toml",
            &format!(
                "[[stage]]\nname = \"gen\"\nplugin = \"generator\"\n[[stage]]\nname = \"x\"\nplugin = \"{plugin}\"\ninputs = [\"gen\"]\n"
            ),
        );
        for command in ["validate", "run"] {
            let run = run(&dir, &[command, &file.to_string_lossy()]);
            assert_eq!(run.status.code(), Some(2), "{plugin} {command}:\n{}", run.output());
            assert!(run.stderr.contains("p.toml:6:10: error: stage 'x': "), "{plugin}:\n{}", run.output());
            assert!(run.stderr.contains(expected), "{plugin}: expected `{expected}`:\n{}", run.output());
        }
    }
}

#[test]
fn a_closed_stdout_is_not_a_failure_and_the_report_is_still_written() {
    use std::process::{Command, Stdio};
    let dir = scratch("closed-stdout");
    let file = pipeline(&dir, "p.toml", &faulty_pipeline("ok", Some(20)));
    let mut child = Command::new(host_bin())
        .args(["run", &file.to_string_lossy(), "--quiet", "--report", "report.json"])
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // `run ... | true`: the reader is gone before the table is printed.
    drop(child.stdout.take());
    let pid = child.id();
    let pidfd =
        rustix::process::pidfd_open(rustix::process::Pid::from_child(&child), rustix::process::PidfdFlags::empty())
            .unwrap();
    let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
    let limit = rustix::time::Timespec { tv_sec: RUN_TIMEOUT.as_secs() as i64, tv_nsec: 0 };
    rustix::event::poll(&mut fds, Some(&limit)).unwrap();
    let status = child.try_wait().unwrap().expect("the host ended within the time limit");
    assert_eq!(status.code(), Some(0), "{status}");
    assert_eq!(report(&dir)["stages"][0]["frames"].as_u64(), Some(20));
    assert_nothing_left(pid);
}

#[test]
fn a_plugin_given_by_a_bare_file_name_is_the_file_beside_the_pipeline() {
    let dir = scratch("bare-plugin-name");
    // A name the system's loader would look up in its own folders if it were handed over bare.
    let plugins = std::path::Path::new(host_bin()).parent().unwrap();
    std::fs::copy(plugins.join("libgpuipc_null.so"), dir.join("libz.so")).unwrap();
    pipeline(
        &dir,
        "p.toml",
        "[[stage]]\nname = \"gen\"\nplugin = \"generator\"\n[[stage]]\nname = \"x\"\nplugin = \"libz.so\"\ninputs = [\"gen\"]\n",
    );
    // The file named without a folder, as `gpuipc-host validate p.toml` from its folder.
    let run = run(&dir, &["validate", "p.toml"]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    assert!(run.stdout.contains("  x    null 0.1.0"), "the plan runs the copy beside the file:\n{}", run.output());
}

#[test]
fn a_stage_with_params_larger_than_a_socket_message_starts() {
    let dir = scratch("large-setup");
    let note = "x".repeat(70_000);
    let text = faulty_chain("large", "frames = 5", "ok", 0, "plugin = \"null\"")
        .replace("at = 0 }", &format!("at = 0, note = \"{note}\" }}"));
    let file = pipeline(&dir, "p.toml", &text);
    let run = run_file(&dir, &file, &[]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output().chars().take(2000).collect::<String>());
    assert!(run.stdout.contains("run 'large' finished"), "{}", run.stdout);
    assert_nothing_left(run.pid);
}

#[test]
fn a_plan_that_cannot_fit_in_memory_is_refused_before_anything_starts() {
    let dir = scratch("memory-budget");
    // Four rings of 64 slots of 4 GiB: 1 TiB, more than any machine that runs these tests.
    let mut text = String::new();
    for i in 0..4 {
        text += &format!(
            "[[stage]]\nname = \"gen{i}\"\nplugin = \"generator\"\ndepth = 64\nparams = {{ width = 32768, height = 32768, format = \"rgba8\" }}\n"
        );
        text += &format!("[[stage]]\nname = \"sink{i}\"\nplugin = \"null\"\ninputs = [\"gen{i}\"]\n");
    }
    let file = pipeline(&dir, "p.toml", &text);
    for command in ["validate", "run"] {
        let run = run(&dir, &[command, &file.to_string_lossy()]);
        assert_eq!(run.status.code(), Some(2), "{command}:\n{}", run.output());
        assert!(
            run.stderr.contains("error: the pipeline needs 1024.00 GiB of host memory"),
            "{command}:\n{}",
            run.output()
        );
        assert!(
            run.stderr.contains("lower its `depth` or the frame size, or pass --no-budget-check"),
            "{}",
            run.output()
        );
        assert_nothing_left(run.pid);
    }
    let run = run(&dir, &["validate", &file.to_string_lossy(), "--no-budget-check"]);
    assert_eq!(run.status.code(), Some(0), "{}", run.output());
    assert!(run.stdout.contains("memory:\n  host    1024.00 GiB needed"), "{}", run.output());
}

#[test]
fn a_file_that_is_not_utf8_and_a_library_that_will_not_load_are_explained() {
    let dir = scratch("utf8-dlopen");
    std::fs::write(dir.join("bad.toml"), b"[pipeline]\nname = \"a\xff\"\n").unwrap();
    let not_utf8 = run(&dir, &["validate", "bad.toml"]);
    assert_eq!(not_utf8.status.code(), Some(2), "{}", not_utf8.output());
    assert!(
        not_utf8.stderr.contains("bad.toml:2:10: error: the file is not UTF-8 text: byte 0xff here"),
        "{}",
        not_utf8.output()
    );
    std::fs::write(dir.join("notlib.so"), b"plain text").unwrap();
    pipeline(&dir, "p.toml", "[[stage]]\nname = \"x\"\nplugin = \"./notlib.so\"\n");
    let run = run(&dir, &["validate", "p.toml"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.output());
    assert!(run.stderr.contains("cannot load plugin"), "{}", run.output());
    // The loader's own reason, not libloading's bare "dlopen failed".
    assert!(!run.stderr.contains("dlopen failed"), "{}", run.output());
}

#[test]
fn running_out_of_file_descriptors_says_which_limit_to_raise() {
    let dir = scratch("fd-limit");
    let file = repo_root().join("pipelines/noise-y4m.toml");
    let run = start_wrapped(
        &dir,
        &["prlimit", "--nofile=16:16", "--"],
        &["run", &file.to_string_lossy(), "--quiet", "--frames", "3"],
        std::process::Stdio::null(),
    )
    .finish(RUN_TIMEOUT);
    assert_eq!(run.status.code(), Some(1), "{}", run.output());
    assert!(run.stderr.contains("Too many open files"), "{}", run.output());
    assert!(run.stderr.contains("`ulimit -n` shows it"), "{}", run.output());
    assert_nothing_left(run.pid);
}
