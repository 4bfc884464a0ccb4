//! The shape most multi-process tests share: run a pipeline file, then read back what the run
//! recorded: the frames' hashes (`--checksums DIR`, a `STAGE.sum` file a stage) and the
//! report (`--report FILE`).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Finished, RUN_TIMEOUT, Running, assert_nothing_left, run, start, sum_lines};

/// The arguments that record a run in its folder: the frames' hashes into `sums/`
/// (read by [`made_by`]) and the report into `report.json` (read by [`report`]).
pub const SUMS_AND_REPORT: [&str; 4] = ["--checksums", "sums", "--report", "report.json"];

/// `gpuipc-host run FILE --quiet ARGS` in `dir`, to its end.
pub fn run_file(dir: &Path, file: &Path, args: &[&str]) -> Finished {
    let file = file.to_string_lossy();
    let mut all = vec!["run", &file, "--quiet"];
    all.extend_from_slice(args);
    run(dir, &all)
}

impl Finished {
    /// The run exited with `code`, its standard output says `said`, and it left nothing
    /// behind.
    pub fn assert_ended(&self, code: i32, said: &str) {
        assert_eq!(self.status.code(), Some(code), "{}", self.output());
        assert!(self.stdout.contains(said), "expected `{said}` on stdout:\n{}", self.output());
        assert_nothing_left(self.pid);
    }
}

/// [`run_file`], which must succeed and leave nothing behind.
pub fn run_ok(dir: &Path, file: &Path, args: &[&str]) -> Finished {
    let done = run_file(dir, file, args);
    assert!(done.status.success(), "{}: {}", file.display(), done.output());
    assert_nothing_left(done.pid);
    done
}

/// Start `gpuipc-host run FILE --quiet ARGS` in `dir` and wait until its stages are ready.
pub fn start_running(dir: &Path, file: &Path, args: &[&str]) -> Running {
    let file = file.to_string_lossy();
    let mut all = vec!["run", &file, "--quiet"];
    all.extend_from_slice(args);
    let mut host = start(dir, &all);
    host.wait_for_stderr("stages ready; running", RUN_TIMEOUT);
    host
}

/// The in-process reference of `file`: every stage once, in one process (`--in-process`), for
/// `frames` (or the file's own count), its checksums into `dir/reference`, which it returns.
/// The run must succeed.
pub fn reference_run(dir: &Path, file: &Path, frames: Option<u64>) -> PathBuf {
    let frames = frames.map(|n| n.to_string());
    let mut args = vec!["--in-process", "--checksums", "reference"];
    if let Some(n) = &frames {
        args.extend(["--frames", n]);
    }
    let done = run_file(dir, file, &args);
    assert!(done.status.success(), "{}", done.output());
    dir.join("reference")
}

/// The report a run wrote to `dir/report.json` (`--report report.json` in `dir`).
pub fn report(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap()
}

/// The row of stage `name` in a report.
pub fn stage_row<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no row of stage '{name}' in the report"))
}

/// Seq → hash of the frames `stage` made in a run with `--checksums sums` in `dir`.
pub fn made_by(dir: &Path, stage: &str) -> HashMap<u64, String> {
    sum_lines(&dir.join("sums").join(format!("{stage}.sum"))).into_iter().collect()
}

/// Seq → hash of a checksum file; a seq written twice (a restarted stage made the frame
/// again) must carry one hash.
pub fn sums_by_seq(path: &Path) -> BTreeMap<u64, String> {
    let mut map = BTreeMap::new();
    for (seq, hash) in sum_lines(path) {
        if let Some(before) = map.insert(seq, hash.clone()) {
            assert_eq!(before, hash, "{} has two frames {seq}", path.display());
        }
    }
    map
}

/// Run ffmpeg with `args` in `dir` (quiet, overwriting, not reading standard input); fails the
/// test with its message.
pub fn ffmpeg_in<S: AsRef<OsStr> + std::fmt::Debug>(dir: &Path, args: &[S]) {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-nostdin", "-y"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "ffmpeg {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}
