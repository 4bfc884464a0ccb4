//! Helpers shared by the multi-process tests: running the real `gpuipc-host` binary with a
//! bound on every wait, and checking that a run left nothing behind.
#![allow(dead_code)]

pub mod netns;
pub mod rtsp_server;
mod runs;

// Each test crate uses some of these, as with `dead_code` above.
#[allow(unused_imports)]
pub use runs::*;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Every test run gets this long before it is called hung.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

pub fn host_bin() -> &'static str {
    env!("CARGO_BIN_EXE_gpuipc-host")
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// A fresh folder under the target dir, removed first if a previous run left it.
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub pid: u32,
}

impl Finished {
    pub fn output(&self) -> String {
        format!("--- stdout\n{}--- stderr\n{}", self.stdout, self.stderr)
    }
}

/// A `gpuipc-host` process under test: stdout to a file, stderr read line by line by a
/// thread so a test can wait for a line (a real event, not a sleep).
pub struct Running {
    pub child: Child,
    stdout: PathBuf,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

/// Start `gpuipc-host ARGS` in `dir`.
pub fn start(dir: &Path, args: &[&str]) -> Running {
    start_with_stdin(dir, args, Stdio::null())
}

/// Start `gpuipc-host ARGS` in `dir` reading `stdin` (a file, a pipe) as its standard input.
pub fn start_with_stdin(dir: &Path, args: &[&str], stdin: Stdio) -> Running {
    start_wrapped(dir, &[], args, stdin)
}

/// Start `WRAP... gpuipc-host ARGS` in `dir` (`wrap`: a command that runs another, such as
/// `ip netns exec NS`, and execs it, so the pid is gpuipc-host's).
pub fn start_wrapped(dir: &Path, wrap: &[&str], args: &[&str], stdin: Stdio) -> Running {
    // Under the target dir, not `dir`: a run from the repository's root leaves nothing there.
    let stdout = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("stdout-{}-{}.txt", std::process::id(), unique()));
    let mut command = match wrap.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(host_bin());
            c
        }
        None => Command::new(host_bin()),
    };
    let mut child = command
        .args(args)
        .current_dir(dir)
        // The host's lines are what tests wait for; GPUIPC_TEST_LOG adds more (a filter in
        // GPUIPC_LOG's syntax, e.g. `info,gpuipc_host=debug`) to find why a test failed.
        .env("GPUIPC_LOG", std::env::var("GPUIPC_TEST_LOG").unwrap_or_else(|_| "info".to_owned()))
        .stdin(stdin)
        .stdout(fs::File::create(&stdout).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    let stderr = Arc::new(Mutex::new(String::new()));
    let sink = stderr.clone();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push_str(&(line.clone() + "\n"));
            let _ = tx.send(line);
        }
    });
    Running { child, stdout, lines, stderr, reader: Some(reader) }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

impl Running {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Block until stderr has a line containing `needle`, at most `timeout`.
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(needle) => return,
                Ok(_) => continue,
                Err(_) => panic!("no `{needle}` on stderr within {timeout:?}:\n{}", self.stderr.lock().unwrap()),
            }
        }
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Wait for the process to exit, at most `timeout` (then kill it and fail the test).
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let pid = self.child.id();
        let pidfd = rustix::process::pidfd_open(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::PidfdFlags::empty(),
        )
        .unwrap();
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("gpuipc-host did not finish within {timeout:?}\n{}", self.stderr.lock().unwrap());
            }
            let mut fds = [rustix::event::PollFd::new(&pidfd, rustix::event::PollFlags::IN)];
            let ts = rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos() as i64 };
            let _ = rustix::event::poll(&mut fds, Some(&ts));
        };
        // The pipe closes when the host and every stage (which inherit stderr) are gone; a
        // stage left behind keeps it open, which `assert_nothing_left` then reports.
        let drain_deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = drain_deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if let Some(reader) = self.reader.take() {
                        reader.join().unwrap();
                    }
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => break,
            }
        }
        let stderr = self.stderr.lock().unwrap().clone();
        let stdout = fs::read_to_string(&self.stdout).unwrap();
        let _ = fs::remove_file(&self.stdout);
        Finished { status, stdout, stderr, pid }
    }
}

/// Run `gpuipc-host ARGS` in `dir` to completion.
pub fn run(dir: &Path, args: &[&str]) -> Finished {
    start(dir, args).finish(RUN_TIMEOUT)
}

/// Processes that are stages of the host with pid `host` (they carry its pid in their
/// environment), still alive. A zombie still being reaped counts (its cmdline is empty): it is
/// gone in a moment, but it is still a process.
pub fn stages_of(host: u32) -> Vec<(u32, String)> {
    processes_with_env("GPUIPC_HOST_PID", &host.to_string())
}

/// Shared memory of the host with pid `host` still open anywhere (memfds are named
/// `gpuipc-<host pid>-...`), plus anything gpuipc left in /dev/shm.
pub fn shared_memory_of(host: u32) -> Vec<String> {
    let prefix = format!("/memfd:gpuipc-{host}-");
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(fds) = fs::read_dir(entry.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if let Ok(target) = fs::read_link(fd.path())
                && target.to_string_lossy().starts_with(&prefix)
            {
                found.push(format!("{} -> {}", fd.path().display(), target.display()));
            }
        }
    }
    for entry in fs::read_dir("/dev/shm").into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().contains("gpuipc") {
            found.push(entry.path().display().to_string());
        }
    }
    found
}

/// The run of host `pid` left no stage process and no shared memory behind.
pub fn assert_nothing_left(pid: u32) {
    let stages = stages_of(pid);
    assert!(stages.is_empty(), "stage processes left behind: {stages:?}");
    let shm = shared_memory_of(pid);
    assert!(shm.is_empty(), "shared memory left behind: {shm:?}");
}

/// `generator` (48x32, ring of 2) -> `test-faulty` named 'bad' (`mode` at frame `at`) -> a sink
/// named 'sink' (`sink`: its `plugin` and `params` lines); `pipeline` holds the `[pipeline]`
/// keys besides `name`.
pub fn faulty_chain(name: &str, pipeline: &str, mode: &str, at: u64, sink: &str) -> String {
    format!(
        r#"
[pipeline]
name = "{name}"
{pipeline}
[[stage]]
name = "gen"
plugin = "generator"
depth = 2
params = {{ width = 48, height = 32, pattern = "box" }}
[[stage]]
name = "bad"
plugin = "test-faulty"
inputs = ["gen"]
params = {{ mode = "{mode}", at = {at} }}
[[stage]]
name = "sink"
inputs = ["bad"]
{sink}
"#
    )
}

/// Write a pipeline file into `dir`.
pub fn pipeline(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

/// Every file under `dir`, relative path → contents.
pub fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().into_owned();
                out.insert(rel, fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// `seq hash...` lines of a checksum file.
pub fn sum_lines(path: &Path) -> Vec<(u64, String)> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| {
            let (seq, rest) = l.split_once(' ').unwrap();
            (seq.parse().unwrap(), rest.to_owned())
        })
        .collect()
}

/// A small deterministic generator for the moments and victims of fault injection; tests print
/// the seed, so a failing run can be repeated.
pub struct Dice(pub u64);

impl Dice {
    pub fn roll(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The pid of process `process` (a stage, or a replica `name#N`) of the host with pid `host`.
pub fn pid_of(host: u32, process: &str) -> rustix::process::Pid {
    let marker = format!("__stage {process} ");
    let (pid, _) = stages_of(host)
        .into_iter()
        .find(|(_, cmd)| format!("{cmd} ").contains(&marker))
        .unwrap_or_else(|| panic!("'{process}' is not running"));
    rustix::process::Pid::from_raw(pid as i32).unwrap()
}

/// Processes whose environment holds `VAR=VALUE`, still alive: pid and command line.
pub fn processes_with_env(var: &str, value: &str) -> Vec<(u32, String)> {
    let marker = format!("{var}={value}");
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(environ) = fs::read(entry.path().join("environ")) else { continue };
        if environ.split(|&b| b == 0).any(|v| v == marker.as_bytes()) {
            let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// The runs a coordinator or an agent with pid `parent` started for parts of runs, and their
/// stages (which inherit the variable), that are still alive after at most `timeout`.
pub fn parts_left_after(parent: u32, timeout: Duration) -> Vec<(u32, String)> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = processes_with_env("GPUIPC_PART_OF", &parent.to_string());
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ports `port..port + n` on 127.0.0.1 that nobody listens on now: the OS picks the first,
/// the others are checked, and another pick is made where one is taken.
pub fn free_ports(n: u16) -> u16 {
    for _ in 0..100 {
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = first.local_addr().unwrap().port();
        if port.checked_add(n).is_none() {
            continue;
        }
        if (1..n).all(|k| std::net::TcpListener::bind(("127.0.0.1", port + k)).is_ok()) {
            return port;
        }
    }
    panic!("no {n} free consecutive ports on 127.0.0.1");
}

/// A `gpuipc-host agent` under test; killed when dropped, so a failing test leaves none.
pub struct Agent {
    pub name: String,
    /// Its control endpoint, `tcp/127.0.0.1:PORT`; its data address is the next port.
    pub control: String,
    pub data: String,
    pub running: Option<Running>,
}

impl Agent {
    /// An agent named `name` on free loopback ports (the control port, then 4 for frames),
    /// once it says it listens.
    pub fn start(dir: &Path, name: &str) -> Agent {
        for _ in 0..10 {
            let port = free_ports(5);
            let control = format!("tcp/127.0.0.1:{port}");
            let mut running = start(dir, &["agent", "--name", name, "--listen", &control]);
            match running.wait_for_either("listening on", "cannot listen", Duration::from_secs(30)) {
                true => {
                    return Agent {
                        name: name.to_owned(),
                        control,
                        data: format!("127.0.0.1:{}", port + 1),
                        running: Some(running),
                    };
                }
                // Another process took the port between the check and the agent: pick again.
                false => drop(running.finish(Duration::from_secs(10))),
            }
        }
        panic!("agent '{name}' could not listen on any free port");
    }

    /// An agent named `name` in the namespace of `side`, on its veth address: control port
    /// 7447, frames from 7448 (the namespace is the test's own, so they are free).
    pub fn start_in(dir: &Path, name: &str, side: &netns::Side) -> Agent {
        Agent::start_in_with(dir, name, side, &[])
    }

    /// [`Agent::start_in`], with more arguments to `agent`.
    pub fn start_in_with(dir: &Path, name: &str, side: &netns::Side, extra: &[&str]) -> Agent {
        let control = format!("tcp/{}:7447", side.address);
        let args = [&["agent", "--name", name, "--listen", &control], extra].concat();
        let mut running = start_wrapped(dir, &side.exec(), &args, Stdio::null());
        running.wait_for_stderr("listening on", Duration::from_secs(30));
        Agent { name: name.to_owned(), control, data: format!("{}:7448", side.address), running: Some(running) }
    }

    pub fn pid(&self) -> u32 {
        self.running.as_ref().unwrap().pid()
    }

    pub fn running(&mut self) -> &mut Running {
        self.running.as_mut().unwrap()
    }

    /// The `[[host]]` table of this agent, named `host`.
    pub fn host_table(&self) -> String {
        format!("[[host]]\nname = \"{}\"\ncontrol = \"{}\"\ndata = \"{}\"\n", self.name, self.control, self.data)
    }

    /// Stop it with SIGTERM and wait for it to exit.
    pub fn stop(mut self) -> Finished {
        let running = self.running.take().unwrap();
        running.signal(rustix::process::Signal::TERM);
        running.finish(Duration::from_secs(60))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut running) = self.running.take() {
            let _ = running.child.kill();
            let _ = running.child.wait();
        }
    }
}

impl Running {
    /// Block until stderr has a line containing `yes` (true) or `no` (false), at most `timeout`.
    pub fn wait_for_either(&mut self, yes: &str, no: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(yes) => return true,
                Ok(line) if line.contains(no) => return false,
                Ok(_) => continue,
                Err(_) => {
                    panic!("neither `{yes}` nor `{no}` on stderr within {timeout:?}:\n{}", self.stderr.lock().unwrap())
                }
            }
        }
    }

    /// What it wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// Block until `ready()` holds, looking again every 20 ms, at most `timeout` (then fail
/// naming `what`): for states only files show, such as frames a stage wrote.
pub fn wait_until(timeout: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "no {what} within {timeout:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Set to 1 where ffmpeg must be there (CI): tests needing ffmpeg and ffprobe then fail
/// without them instead of saying they are skipped.
pub const REQUIRE_FFMPEG_ENV: &str = "GPUIPC_REQUIRE_FFMPEG";

/// Whether ffmpeg and ffprobe run here. Without them: `false` and a line saying `test` is
/// skipped, or a panic where `GPUIPC_REQUIRE_FFMPEG=1`.
pub fn ffmpeg_tools_for_test(test: &str) -> bool {
    let works = |tool: &str| {
        Command::new(tool)
            .arg("-version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works("ffmpeg") && works("ffprobe") {
        return true;
    }
    if std::env::var(REQUIRE_FFMPEG_ENV).is_ok_and(|v| v == "1") {
        panic!("{REQUIRE_FFMPEG_ENV}=1 but ffmpeg or ffprobe does not run (install Debian's ffmpeg package)");
    }
    eprintln!("skipped {test}: ffmpeg and ffprobe are not installed ({REQUIRE_FFMPEG_ENV}=1 makes this a failure)");
    false
}

/// ffprobe's view of the first video stream of `path`, every frame decoded and counted:
/// `codec_name`, `width`, `height`, `pix_fmt`, `r_frame_rate`, `nb_read_frames`. Fails the
/// test if ffprobe fails or takes more than a minute.
pub fn ffprobe_video(path: &Path) -> serde_json::Value {
    let child = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries"])
        .args(["stream=codec_name,width,height,pix_fmt,r_frame_rate,nb_read_frames", "-of", "json"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(output) = rx.recv_timeout(Duration::from_secs(60)) else {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).unwrap(),
            rustix::process::Signal::KILL,
        );
        panic!("ffprobe {} took more than a minute", path.display());
    };
    let output = output.unwrap();
    assert!(output.status.success(), "ffprobe {}: {}", path.display(), String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    json["streams"][0].clone()
}

/// Set to 1 where strace must be there (CI): tests that inject signals with strace then fail
/// without it instead of saying they are skipped.
pub const REQUIRE_STRACE_ENV: &str = "GPUIPC_REQUIRE_STRACE";

/// Whether strace can trace a program here (installed, and ptrace allowed). Without it:
/// `false` and a line saying `test` is skipped, or a panic where `GPUIPC_REQUIRE_STRACE=1`.
pub fn strace_for_test(test: &str) -> bool {
    let works = Command::new("strace")
        .args(["-qq", "-o", "/dev/null", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        return true;
    }
    if std::env::var(REQUIRE_STRACE_ENV).is_ok_and(|v| v == "1") {
        panic!(
            "{REQUIRE_STRACE_ENV}=1 but strace does not run here (install Debian's strace package; ptrace must be allowed)"
        );
    }
    eprintln!(
        "skipped {test}: strace is not installed or cannot trace here ({REQUIRE_STRACE_ENV}=1 makes this a failure)"
    );
    false
}
