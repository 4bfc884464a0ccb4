//! `device = "auto"` on a machine without CUDA (`GPUIPC_NO_CUDA=1` makes any machine one):
//! `run` says, once, that the stages fell back to the cpu domain and why, as validate's plan does.

mod common;

use std::process::Stdio;

use common::{RUN_TIMEOUT, pipeline, scratch, start_wrapped};

/// `gen` -> `grade` -> `sink`, `sink` on `sink_device`, the others on the pipeline's `auto`.
fn chain(sink_device: &str) -> String {
    format!(
        r#"
[pipeline]
name = "auto-cpu"
frames = 3
device = "auto"
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = 64, height = 48, pattern = "box" }}
[[stage]]
name = "grade"
plugin = "rgb-process"
inputs = ["gen"]
[[stage]]
name = "sink"
plugin = "null"
inputs = ["grade"]
{sink_device}
"#
    )
}

/// `gpuipc-host run FILE ARGS` without CUDA: its stderr, after checking that it succeeded.
fn run_without_cuda(name: &str, text: &str, args: &[&str]) -> String {
    let dir = scratch(name);
    let file = pipeline(&dir, "p.toml", text);
    let mut all = vec!["run", file.to_str().unwrap(), "--quiet"];
    all.extend_from_slice(args);
    let done = start_wrapped(&dir, &["env", "GPUIPC_NO_CUDA=1"], &all, Stdio::null()).finish(RUN_TIMEOUT);
    assert!(done.status.success(), "{}", done.output());
    done.stderr
}

#[test]
fn run_says_that_auto_fell_back_to_the_cpu() {
    let line = "device \"auto\": CUDA is disabled by GPUIPC_NO_CUDA, so every stage runs in the cpu domain";
    for args in [&[][..], &["--in-process"][..]] {
        let stderr = run_without_cuda("auto-cpu-every", &chain(""), args);
        assert_eq!(stderr.matches(line).count(), 1, "run {args:?}: once `{line}`\n{stderr}");
    }
}

#[test]
fn run_names_the_stages_that_fell_back_when_others_asked_for_the_cpu() {
    let stderr = run_without_cuda("auto-cpu-some", &chain("device = \"cpu\""), &[]);
    let line = "device \"auto\": CUDA is disabled by GPUIPC_NO_CUDA, so stages 'gen', 'grade' run in the cpu domain";
    assert!(stderr.contains(line), "`{line}`\n{stderr}");
    assert!(!stderr.contains("'sink'"), "'sink' asked for the cpu\n{stderr}");
}

#[test]
fn a_pipeline_on_the_cpu_by_its_own_choice_gets_no_such_line() {
    let stderr = run_without_cuda("auto-cpu-none", &chain("").replace("device = \"auto\"", "device = \"cpu\""), &[]);
    assert!(!stderr.contains("cpu domain"), "{stderr}");
}
