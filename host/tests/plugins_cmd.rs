//! `gpuipc-host plugins` and `gpuipc-host inspect`, run as the real binary: what they list and
//! describe, the lookup rule they share with pipelines (a built-in name means the library
//! beside gpuipc-host; other names take the first folder of the search path), and the warning
//! for a library that another of the same name hides.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{host_bin, scratch};

/// Listing loads every plugin library once; far longer than this is a hang.
const TIMEOUT: Duration = Duration::from_secs(60);

const BUILTINS: [&str; 8] = ["generator", "rgb-process", "yuv420", "yuv-to-rgb", "null", "checksum", "y4m", "png"];

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Output {
    fn text(&self) -> String {
        format!("exit {:?}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// `gpuipc-host ARGS` in `dir` with `GPUIPC_PLUGIN_PATH` set to `plugin_path` (or unset).
fn host(dir: &Path, args: &[&str], plugin_path: Option<&str>) -> Output {
    let mut command = Command::new(host_bin());
    command.args(args).current_dir(dir).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    match plugin_path {
        Some(p) => command.env("GPUIPC_PLUGIN_PATH", p),
        None => command.env_remove("GPUIPC_PLUGIN_PATH"),
    };
    let child = command.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(TIMEOUT) else {
        let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        panic!("gpuipc-host {args:?} took more than {TIMEOUT:?}");
    };
    let output = output.unwrap();
    Output {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// The folder holding gpuipc-host and the plugins a workspace build made.
fn bin_dir() -> PathBuf {
    Path::new(host_bin()).parent().unwrap().to_owned()
}

fn library(name: &str) -> String {
    format!("libgpuipc_{}.so", name.replace('-', "_"))
}

/// A copy of the workspace-built library of `name` in `dir`.
fn copy_plugin(name: &str, dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let to = dir.join(library(name));
    std::fs::copy(bin_dir().join(library(name)), &to).unwrap();
    to
}

/// The line of the listing that names plugin `name`, and the line after it (its file).
fn listed<'a>(listing: &'a str, name: &str) -> Option<(&'a str, &'a str)> {
    let lines: Vec<&str> = listing.lines().collect();
    let at = lines.iter().position(|l| l.split_whitespace().next() == Some(name))?;
    Some((lines[at], lines.get(at + 1)?.trim()))
}

#[test]
fn plugins_lists_every_built_in_with_its_file() {
    let dir = scratch("plugins-list");
    let out = host(&dir, &["plugins"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    let (builtins, others) = out.stdout.split_once("other plugins on the search path:").expect("two sections");
    for name in BUILTINS {
        let (line, file) = listed(builtins, name).unwrap_or_else(|| panic!("`{name}` not listed:\n{}", out.text()));
        assert!(line.contains(" 0.1.0 "), "{line}");
        assert_eq!(file, bin_dir().join(library(name)).display().to_string());
    }
    // The test plugins are no built-ins, but lookup finds them beside the binary; the ones that
    // are no plugin at all say why.
    let (faulty, _) = listed(others, "test-faulty").unwrap_or_else(|| panic!("{}", out.text()));
    assert!(faulty.contains("fails on request"), "{faulty}");
    let (no_entry, _) = listed(others, "test-no-entry").unwrap();
    assert!(no_entry.contains("cannot load: ") && no_entry.contains("is not a gpuipc plugin"), "{no_entry}");
    assert!(out.stdout.contains("search path: GPUIPC_PLUGIN_PATH (not set) or beside gpuipc-host ("), "{}", out.text());
    assert!(!out.stdout.contains("warning:"), "{}", out.text());
}

#[test]
fn a_copy_of_a_built_in_on_the_search_path_is_reported_and_not_used() {
    let dir = scratch("plugins-shadow-builtin");
    let copy = copy_plugin("null", &dir.join("mine"));
    let path = dir.join("mine").display().to_string();
    let builtin = bin_dir().join(library("null"));
    let warning = format!(
        "plugin `null` is {}; {} has the same name and is not used (`null` is a built-in, and a built-in name always means the library beside gpuipc-host",
        builtin.display(),
        copy.display()
    );
    let missing = dir.join("not-made");
    let out = host(&dir, &["plugins"], Some(&format!("{path}:{}", missing.display())));
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains(&format!("warning: {warning}")), "{}", out.text());
    let not_a_folder = format!("warning: GPUIPC_PLUGIN_PATH names {}, which is not a folder\n", missing.display());
    assert!(out.stdout.contains(&not_a_folder), "{}", out.text());
    let (builtins, _) = out.stdout.split_once("other plugins").unwrap();
    assert_eq!(listed(builtins, "null").unwrap().1, builtin.display().to_string());

    // A pipeline naming it gets the built-in, and `validate` shows the same warning.
    let file = dir.join("p.toml");
    std::fs::write(&file, "[[stage]]\nname = \"gen\"\nplugin = \"generator\"\n[[stage]]\nname = \"sink\"\nplugin = \"null\"\ninputs = [\"gen\"]\n").unwrap();
    let out = host(&dir, &["validate", "p.toml"], Some(&path));
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stderr.contains(&format!("p.toml:6:10: stage 'sink': {warning}")), "{}", out.text());

    // inspect says it too.
    let out = host(&dir, &["inspect", "null"], Some(&path));
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains(&format!("warning: {warning}")), "{}", out.text());
}

#[test]
fn of_two_same_named_plugins_on_the_search_path_the_first_folder_wins() {
    let dir = scratch("plugins-shadow-path");
    let first = copy_plugin("test-faulty", &dir.join("a"));
    let second = copy_plugin("test-faulty", &dir.join("b"));
    let path = format!("{}:{}", dir.join("a").display(), dir.join("b").display());
    let out = host(&dir, &["plugins"], Some(&path));
    assert_eq!(out.code, Some(0), "{}", out.text());
    let (_, others) = out.stdout.split_once("other plugins").unwrap();
    assert_eq!(listed(others, "test-faulty").unwrap().1, first.display().to_string(), "{}", out.text());
    let warning = format!(
        "warning: plugin `test-faulty` is {}; {}, {} has the same name and is not used (the first folder of the search path that has it wins",
        first.display(),
        second.display(),
        bin_dir().join(library("test-faulty")).display()
    );
    assert!(out.stdout.contains(&warning), "{}", out.text());
}

#[test]
fn inspect_shows_a_plugins_formats_and_every_param_with_its_default() {
    let dir = scratch("inspect-generator");
    let out = host(&dir, &["inspect", "generator"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    for expected in [
        "generator 0.1.0\n",
        &format!("file        {} (built-in)\n", bin_dir().join(library("generator")).display()),
        "plugin ABI  1.5\n",
        "domains     cpu, cuda\n",
        "inputs      none (a source)\n",
        "replicas    one instance only (a source)\n",
        "produces    rgb8, rgba8, gray8\n",
        "  width: integer, 1..=32768, default 1280\n      frame width in pixels\n",
        "  height: integer, 1..=32768, default 720\n",
        "  pattern: \"bars\" | \"gradient\" | \"noise\" | \"box\", default \"bars\"\n",
        "  format: \"rgb8\" | \"rgba8\" | \"gray8\", default \"rgb8\"\n",
        "  fps: float, >= 0.001, optional\n",
        "  seed: integer, 0..=2^63-1, default 0\n",
        "  threads: integer, 0..=256, default 0\n",
    ] {
        assert!(out.stdout.contains(expected), "missing {expected:?}:\n{}", out.text());
    }
    let out = host(&dir, &["inspect", "checksum"], None);
    assert!(out.stdout.contains("inputs      1 to 8 (aligned by sequence number)\n"), "{}", out.text());
    assert!(out.stdout.contains("produces    nothing (a sink)\n"), "{}", out.text());
    assert!(out.stdout.contains("  path: string, required\n"), "{}", out.text());
    assert!(
        out.stdout.contains("replicas    one instance only (it keeps state from one frame to the next)\n"),
        "{}",
        out.text()
    );
    let out = host(&dir, &["inspect", "yuv420"], None);
    assert!(
        out.stdout.contains("replicas    allowed (replicas = N shares its frames among N processes)\n"),
        "{}",
        out.text()
    );
    let out = host(&dir, &["inspect", "test-abi-1-0"], None);
    assert!(
        out.stdout.contains("replicas    one instance only (built for plugin ABI 1.0, which cannot say otherwise)\n"),
        "{}",
        out.text()
    );
}

#[test]
fn inspect_takes_a_path_too() {
    let dir = scratch("inspect-path");
    copy_plugin("null", &dir);
    let out = host(&dir, &["inspect", "./libgpuipc_null.so"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.starts_with("null 0.1.0\n"), "{}", out.text());
    assert!(
        out.stdout.contains(&format!("file        {}\n", dir.join("libgpuipc_null.so").display())),
        "{}",
        out.text()
    );
    assert!(out.stdout.contains("params: none declared\n"), "{}", out.text());
}

#[test]
fn inspect_of_a_missing_plugin_names_the_file_and_gpuipc_plugin_path() {
    let dir = scratch("inspect-missing");
    let out = host(&dir, &["inspect", "sepia-tone"], Some(&dir.display().to_string()));
    assert_eq!(out.code, Some(1), "{}", out.text());
    let expected = format!(
        "error: unknown plugin `sepia-tone`: no libgpuipc_sepia_tone.so in GPUIPC_PLUGIN_PATH ({}) or beside gpuipc-host ({}, ",
        dir.display(),
        bin_dir().display()
    );
    assert!(out.stderr.starts_with(&expected), "{}", out.text());
    assert!(out.stderr.contains("put its library in a folder on GPUIPC_PLUGIN_PATH"), "{}", out.text());
    assert!(out.stdout.is_empty(), "{}", out.text());
}

#[test]
fn each_subcommands_help_has_an_example() {
    let dir = scratch("plugins-help");
    for (command, example) in [("plugins", "gpuipc-host plugins"), ("inspect", "gpuipc-host inspect generator")] {
        let out = host(&dir, &[command, "--help"], None);
        assert_eq!(out.code, Some(0), "{}", out.text());
        assert!(out.stdout.contains("Example: ") && out.stdout.contains(example), "{}", out.text());
    }
}

#[test]
fn a_plugin_built_for_abi_1_0_loads_runs_and_declares_no_params() {
    let dir = scratch("abi-1-0");
    let out = host(&dir, &["inspect", "test-abi-1-0"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("plugin ABI  1.0\n"), "{}", out.text());
    assert!(
        out.stdout.contains(
            "params: not declared (built for plugin ABI 1.0, which cannot carry them; see the plugin's docs)"
        ),
        "{}",
        out.text()
    );
    let file = dir.join("p.toml");
    std::fs::write(
        &file,
        "[pipeline]\nframes = 5\n[[stage]]\nname = \"gen\"\nplugin = \"generator\"\nparams = { width = 64, height = 48 }\n\
         [[stage]]\nname = \"old\"\nplugin = \"test-abi-1-0\"\ninputs = [\"gen\"]\n",
    )
    .unwrap();
    let out = host(&dir, &["validate", "p.toml"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("old  test-abi-1-0 0.1.0"), "{}", out.text());
    let out = host(&dir, &["run", "p.toml", "--quiet"], None);
    assert_eq!(out.code, Some(0), "{}", out.text());
    assert!(out.stdout.contains("finished"), "{}", out.text());
}
