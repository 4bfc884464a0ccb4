//! The corpus of bad pipeline files: every `bad-pipelines/*.toml` breaks one rule (a few break
//! several), and `gpuipc-host validate` must report exactly the errors its header names, at the
//! named line and column, in file order.
//!
//! A file's header is its leading comment lines; each `# expect: LINE:COL: MESSAGE` line is one
//! error, whose message must contain MESSAGE. Files in `bad-pipelines/pending/` describe
//! diagnostics the host does not give yet; they are skipped until they are moved up.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Validation loads plugins but runs no frames; a file that takes longer has hung a plugin.
const VALIDATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Fewer files than this means the listing is broken, not that the corpus passed.
const MIN_CORPUS_FILES: usize = 30;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad-pipelines")
}

fn toml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    files
}

/// One error as a file's header expects it, or as `validate` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Located {
    line: usize,
    column: usize,
    message: String,
}

impl std::fmt::Display for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Split `LINE:COL: REST` into its parts.
fn line_col_rest(text: &str) -> Option<(usize, usize, &str)> {
    let (line, rest) = text.split_once(':')?;
    let (column, rest) = rest.split_once(':')?;
    Some((line.trim().parse().ok()?, column.trim().parse().ok()?, rest))
}

/// The `# expect:` lines of a file's leading comments, in order.
fn expectations(text: &str) -> Result<Vec<Located>, String> {
    let mut expected = Vec::new();
    let mut in_header = true;
    for (i, line) in text.lines().enumerate() {
        let is_comment = line.trim_start().starts_with('#');
        in_header &= is_comment;
        let Some(spec) = line.trim_start().strip_prefix("# expect:") else { continue };
        if !in_header {
            return Err(format!("line {}: `# expect:` after the header comments", i + 1));
        }
        let (line_no, column, message) = line_col_rest(spec)
            .ok_or_else(|| format!("line {}: expected `# expect: LINE:COL: MESSAGE`, got `{line}`", i + 1))?;
        let message = message.trim();
        if message.is_empty() {
            return Err(format!("line {}: `# expect:` without a message", i + 1));
        }
        expected.push(Located { line: line_no, column, message: message.to_owned() });
    }
    if expected.is_empty() {
        return Err("no `# expect: LINE:COL: MESSAGE` line in the header".to_owned());
    }
    Ok(expected)
}

struct Validated {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `gpuipc-host validate FILE`, killing it if it does not finish in time.
fn validate(file: &str) -> Result<Validated, String> {
    let child = Command::new(env!("CARGO_BIN_EXE_gpuipc-host"))
        .args(["validate", file])
        // Built-in and test plugins come from next to the binary, whatever the caller's setup;
        // no error in the corpus may depend on whether this machine has a GPU.
        .env_remove("GPUIPC_PLUGIN_PATH")
        .env("GPUIPC_NO_CUDA", "1")
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start gpuipc-host: {e}"))?;
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let output = match rx.recv_timeout(VALIDATE_TIMEOUT) {
        Ok(output) => output.map_err(|e| format!("waiting for gpuipc-host: {e}"))?,
        Err(_) => {
            if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            let _ = waiter.join();
            return Err(format!("`validate {file}` did not finish within {VALIDATE_TIMEOUT:?}"));
        }
    };
    let _ = waiter.join();
    Ok(Validated {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// Every `FILE:LINE:COL: error: MESSAGE` line of `stderr`, and every unlocated `error: ...`
/// line (which no corpus file expects, so it always fails the comparison).
fn reported_errors(stderr: &str, file: &str) -> Vec<Option<Located>> {
    let prefix = format!("{file}:");
    stderr
        .lines()
        .filter_map(|line| {
            if line.starts_with("error: ") {
                return Some(None);
            }
            let (line_no, column, rest) = line_col_rest(line.strip_prefix(&prefix)?)?;
            let message = rest.strip_prefix(" error: ")?;
            Some(Some(Located { line: line_no, column, message: message.to_owned() }))
        })
        .collect()
}

fn summary(n: usize) -> String {
    if n == 1 { "1 error".to_owned() } else { format!("{n} errors") }
}

/// What is wrong with `validate`'s answer for `path`, if anything.
fn check(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let expected = expectations(&text).map_err(|e| format!("bad header: {e}"))?;
    let file = path.to_str().expect("the corpus path is UTF-8");
    let out = validate(file)?;
    let reported = reported_errors(&out.stderr, file);
    let mut problems = Vec::new();
    if out.code != Some(2) {
        problems.push(format!("exit code {:?}, expected 2", out.code));
    }
    if reported.len() != expected.len() {
        problems.push(format!("{} error(s) reported, {} expected", reported.len(), expected.len()));
    }
    for (i, want) in expected.iter().enumerate() {
        match reported.get(i) {
            Some(Some(got))
                if got.line == want.line && got.column == want.column && got.message.contains(&want.message) => {}
            Some(Some(got)) => problems.push(format!("error {}: expected {want}\n    got {got}", i + 1)),
            Some(None) => {
                problems.push(format!("error {}: expected {want}\n    got an error without a location", i + 1))
            }
            None => problems.push(format!("error {}: expected {want}\n    got nothing", i + 1)),
        }
    }
    let want_summary = summary(expected.len());
    let got_summary = out.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    if got_summary != want_summary {
        problems.push(format!("last line `{got_summary}`, expected `{want_summary}`"));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let mut report = String::new();
    for p in &problems {
        let _ = writeln!(report, "  - {p}");
    }
    let _ = writeln!(report, "  expected:");
    for e in &expected {
        let _ = writeln!(report, "    {file}:{e}");
    }
    let _ = writeln!(report, "  --- stderr\n{}", out.stderr.trim_end());
    if !out.stdout.is_empty() {
        let _ = writeln!(report, "  --- stdout\n{}", out.stdout.trim_end());
    }
    Err(report)
}

#[test]
fn every_bad_pipeline_reports_its_expected_errors() {
    let files = toml_files(&corpus_dir());
    assert!(
        files.len() >= MIN_CORPUS_FILES,
        "found {} files in {}, expected at least {MIN_CORPUS_FILES}",
        files.len(),
        corpus_dir().display()
    );
    let mut failures = Vec::new();
    for path in &files {
        if let Err(report) = check(path) {
            failures.push(format!("{}:\n{report}", path.display()));
        }
    }
    // Pending files are not run, but their headers must stay well formed for when they are.
    let pending = corpus_dir().join("pending");
    if pending.is_dir() {
        let pending_files = toml_files(&pending);
        for path in &pending_files {
            let text = std::fs::read_to_string(path).unwrap();
            if let Err(e) = expectations(&text) {
                failures.push(format!("{}:\n  - bad header: {e}", path.display()));
            }
        }
        eprintln!("skipped {} pending file(s) in {}", pending_files.len(), pending.display());
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad pipeline files failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn the_shipped_example_validates() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../pipelines/4k-yuv.toml");
    let out = validate(file).unwrap();
    assert_eq!(out.code, Some(0), "validate {file} failed:\n{}", out.stderr);
    assert!(reported_errors(&out.stderr, file).is_empty(), "{}", out.stderr);
    let stage_lines: Vec<&str> = out
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("stages"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    let names: Vec<&str> = stage_lines.iter().filter_map(|l| l.split_whitespace().next()).collect();
    assert_eq!(names, ["gen", "grade", "yuv"], "stages in run order:\n{}", out.stdout);
}

#[test]
fn headers_are_parsed_as_written() {
    let text = "# expect: 3:10: frames must be at least 1\n# expect: 7:1: unknown field `x`\n# a note\n\n[pipeline]\n# expect: 9:9: not a header\n";
    assert!(expectations(text).unwrap_err().contains("after the header"));
    let text =
        "# expect: 3:10: frames must be at least 1\n# expect: 7:1: unknown field `x`: y\n# a note\n\n[pipeline]\n";
    assert_eq!(
        expectations(text).unwrap(),
        [
            Located { line: 3, column: 10, message: "frames must be at least 1".to_owned() },
            Located { line: 7, column: 1, message: "unknown field `x`: y".to_owned() },
        ]
    );
    assert!(expectations("# just a note\n[pipeline]\n").is_err());
    assert!(expectations("# expect: 3: no column\n").is_err());
    let stderr = "f.toml:3:10: error: frames must be at least 1\n  |\n3 | frames = 0\n  |          ^\nerror: cannot read\nother.toml:1:1: error: x\n1 error";
    assert_eq!(
        reported_errors(stderr, "f.toml"),
        [Some(Located { line: 3, column: 10, message: "frames must be at least 1".to_owned() }), None]
    );
}

/// What `validate` prints stays linear in the file: a long line is quoted as an excerpt, and
/// past the kept errors the rest are counted. (A 40 KB line of dots printed 2.4 GB; 5,000
/// unknown inputs on one line over 64 MiB.)
#[test]
fn error_output_stays_small_for_huge_lines_and_many_errors() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("huge-errors");
    std::fs::create_dir_all(&dir).unwrap();
    let dots = dir.join("dots.toml");
    std::fs::write(&dots, format!("[pipeline]\nname = {}\n", ".".repeat(40_000))).unwrap();
    let names: Vec<String> = (0..5000).map(|i| format!("\"u{i}\"")).collect();
    let inputs = dir.join("inputs.toml");
    let text = format!(
        "[[stage]]\nname = \"gen\"\nplugin = \"generator\"\n[[stage]]\nname = \"x\"\nplugin = \"null\"\ninputs = [{}]\n",
        names.join(",")
    );
    std::fs::write(&inputs, text).unwrap();
    for file in [&dots, &inputs] {
        let run = validate(&file.to_string_lossy()).unwrap();
        assert_eq!(run.code, Some(2), "{}", run.stderr.chars().take(2000).collect::<String>());
        assert!(run.stderr.len() < 64 * 1024, "{}: {} bytes of errors", file.display(), run.stderr.len());
    }
    let run = validate(&inputs.to_string_lossy()).unwrap();
    assert!(
        run.stderr.contains("stage 'x' has unknown input 'u0'"),
        "{}",
        run.stderr.chars().take(2000).collect::<String>()
    );
    assert!(
        run.stderr.contains("... and 4950 more errors not shown\n5000 errors"),
        "{}",
        &run.stderr[run.stderr.len().saturating_sub(300)..]
    );
}
