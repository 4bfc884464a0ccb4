//! Stages on several hosts (docs/multi-host.md): what the plan says of them, and runs whose
//! parts real agents run: on loopback, and in network namespaces where this user can make them.

mod common;

use common::*;

const TWO_HOSTS: &str = r#"
[pipeline]
device = "cpu"
frames = 10

[[host]]
name = "gpu1"
control = "tcp/10.0.0.3:7447"
link_gbps = 25.0

[[host]]
name = "edge"
control = "tcp/[fd00::7]:9000"
data = "[fd00::7]:9100"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 3840, height = 2160 }

[[stage]]
name = "grade"
plugin = "rgb-process"
host = "gpu1"
device = "cuda:3"
inputs = ["gen"]

[[stage]]
name = "yuv"
plugin = "yuv420"
host = "gpu1"
device = "cuda:3"
inputs = ["grade"]

[[stage]]
name = "sink"
plugin = "null"
host = "edge"
inputs = ["yuv"]
"#;

#[test]
fn validate_shows_each_link_that_crosses_hosts_and_what_its_network_link_allows() {
    let dir = scratch("hosts-validate");
    let file = pipeline(&dir, "p.toml", TWO_HOSTS);
    let out = run(&dir, &["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    for line in [
        "grade  rgb-process 0.1.0  cuda:3 on host gpu1",
        "gpu1  control tcp/10.0.0.3:7447, frames to 10.0.0.3:7448, 25 Gb/s link",
        "edge  control tcp/[fd00::7]:9000, frames to [fd00::7]:9100, link speed not given",
        // 4K RGB8 over 25 Gb/s; after yuv420 (I420, half the bytes) the other link, of unknown speed.
        "crosses hosts local -> gpu1: TCP to 10.0.0.3:7448, 24.88 MB a frame; at most 125.6 frames/s on the 25 Gb/s link",
        "crosses hosts gpu1 -> edge: TCP to [fd00::7]:9100, 12.44 MB a frame; at most 251.2 frames/s on the 25 Gb/s link",
    ] {
        assert!(out.stdout.contains(line), "wanted {line:?} in\n{}", out.stdout);
    }
    // A ring read only from another host is in host memory, for the sender to read.
    assert!(
        out.stdout.contains("gen -> grade  rgb8 3840x2160, 4 slots x 24.88 MB, host shared memory\n"),
        "{}",
        out.stdout
    );
}

#[test]
fn run_says_how_to_start_an_agent_that_does_not_answer() {
    let dir = scratch("hosts-run-down");
    let port = free_ports(2);
    let text = format!(
        "[pipeline]\ndevice = \"cpu\"\nframes = 3\n\n[[host]]\nname = \"gone\"\ncontrol = \"tcp/127.0.0.1:{port}\"\n\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"gone\"\n\n[[stage]]\nname = \"sink\"\nplugin = \"null\"\nhost = \"gone\"\ninputs = [\"gen\"]\n"
    );
    let file = pipeline(&dir, "p.toml", &text);
    let out = run_file(&dir, &file, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(
        out.stderr.contains(&format!("error: host `gone`: no agent answered at tcp/127.0.0.1:{port} within 10 s (start it there: gpuipc-host agent --name gone --listen tcp/127.0.0.1:{port})")),
        "{}",
        out.output()
    );
    assert_nothing_left(out.pid);
}

#[test]
fn a_link_from_another_host_into_this_machine_is_refused_at_plan_time() {
    let dir = scratch("hosts-into-local");
    let text = "[pipeline]\ndevice = \"cpu\"\n\n[[host]]\nname = \"a\"\ncontrol = \"tcp/127.0.0.1:1\"\n\n\
                [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"a\"\n\n[[stage]]\nname = \"sink\"\nplugin = \"null\"\ninputs = [\"gen\"]\n";
    let file = pipeline(&dir, "p.toml", text);
    for command in ["validate", "run"] {
        let out = run(&dir, &[command, file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{}", out.output());
        assert!(
            out.stderr.contains("error: link gen -> sink goes from host `a` into stage 'sink' on the machine `run` starts on, which has no data address for frames: put 'sink' on a [[host]]"),
            "{}",
            out.output()
        );
    }
}

#[test]
fn an_agent_announces_itself_and_validate_asks_it_what_it_is() {
    let dir = scratch("hosts-agent");
    let (up, down) = (free_ports(1), free_ports(1));
    let mut agent = start(&dir, &["agent", "--name", "gpu1", "--listen", &format!("tcp/127.0.0.1:{up}")]);
    agent.wait_for_stderr(&format!("agent 'gpu1' listening on tcp/127.0.0.1:{up}"), std::time::Duration::from_secs(30));
    let text = format!(
        "[pipeline]\ndevice = \"cpu\"\n\n[[host]]\nname = \"gpu1\"\ncontrol = \"tcp/127.0.0.1:{up}\"\n\n[[host]]\nname = \"gone\"\ncontrol = \"tcp/127.0.0.1:{down}\"\n\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\n\n[[stage]]\nname = \"sink\"\nplugin = \"null\"\nhost = \"gpu1\"\ninputs = [\"gen\"]\n"
    );
    let file = pipeline(&dir, "p.toml", &text);
    let out = run(&dir, &["validate", file.to_str().unwrap(), "--ask-hosts"]);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert!(out.stdout.contains(&format!("  gpu1  up: gpuipc {} on ", env!("CARGO_PKG_VERSION"))), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!("  gone  not reachable at tcp/127.0.0.1:{down}: no agent answered within 2.0 s (start it there: gpuipc-host agent --name gone --listen tcp/127.0.0.1:{down})")),
        "{}",
        out.stdout
    );
    agent.signal(rustix::process::Signal::TERM);
    let finished = agent.finish(std::time::Duration::from_secs(30));
    assert_eq!(finished.status.code(), Some(0), "{}", finished.output());
    assert!(finished.stderr.contains("agent 'gpu1' stopped"), "{}", finished.output());
}

#[test]
fn an_agent_with_a_bad_endpoint_says_so() {
    let dir = scratch("hosts-agent-bad");
    let out = run(&dir, &["agent", "--name", "gpu1", "--listen", "tcp/127.0.0.1:99999"]);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(out.stderr.contains("error: agent 'gpu1': cannot listen on tcp/127.0.0.1:99999"), "{}", out.output());
}

/// Two chains, one on each agent, and one on this machine: nothing crosses hosts, so this
/// checks the agents' part of a run (start, outcome, report) apart from the link stages.
fn three_chains(a: &Agent, b: &Agent, frames: Option<u64>, fps: Option<u32>) -> String {
    let frames = frames.map_or(String::new(), |f| format!("frames = {f}\n"));
    let fps = fps.map_or(String::new(), |f| format!(", fps = {f}.0"));
    let mut text =
        format!("[pipeline]\nname = \"three\"\ndevice = \"cpu\"\n{frames}\n{}\n{}\n", a.host_table(), b.host_table());
    for (host, seed) in [("a", 1), ("b", 2), ("local", 3)] {
        text.push_str(&format!(
            "[[stage]]\nname = \"gen_{host}\"\nplugin = \"generator\"\nhost = \"{host}\"\nparams = {{ width = 40, height = 24, pattern = \"noise\", seed = {seed}{fps} }}\n\n\
             [[stage]]\nname = \"grade_{host}\"\nplugin = \"rgb-process\"\nhost = \"{host}\"\ninputs = [\"gen_{host}\"]\nparams = {{ brightness = 0.1 }}\n\n\
             [[stage]]\nname = \"sink_{host}\"\nplugin = \"null\"\nhost = \"{host}\"\ninputs = [\"grade_{host}\"]\n\n"
        ));
    }
    text
}

/// The same pipeline without hosts: the reference, run `--in-process`.
fn without_hosts(text: &str) -> String {
    let mut out = String::new();
    let mut skip = false;
    for line in text.lines() {
        if line.starts_with("[[host]]") {
            skip = true;
            continue;
        }
        if line.starts_with('[') {
            skip = false;
        }
        if !skip && !line.starts_with("host = ") {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `(host, stage)` → checksum lines, from a multi-host run's `--checksums DIR` (`DIR/HOST/STAGE.sum`).
fn sums_by_host(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    files_under(dir).into_iter().filter(|(k, _)| k.ends_with(".sum")).collect()
}

/// Start `gpuipc-host run FILE --quiet ARGS` in `dir`, in the network namespace of `side`.
fn start_in(dir: &std::path::Path, side: &netns::Side, file: &std::path::Path, args: &[&str]) -> Running {
    let file = file.to_string_lossy();
    let mut all = vec!["run", &file, "--quiet"];
    all.extend_from_slice(args);
    start_wrapped(dir, &side.exec(), &all, std::process::Stdio::null())
}

#[test]
fn each_agent_runs_its_part_and_the_coordinator_reports_every_host() {
    let dir = scratch("hosts-parts");
    let (a, b) = (Agent::start(&dir, "a"), Agent::start(&dir, "b"));
    let text = three_chains(&a, &b, Some(25), None);
    let file = pipeline(&dir, "p.toml", &text);
    let sums = dir.join("sums");
    let out = run_file(&dir, &file, &SUMS_AND_REPORT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    for (host, stage) in [("a", "gen_a"), ("a", "sink_a"), ("b", "grade_b"), ("local", "sink_local")] {
        let row = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().take(2).eq([host, stage]))
            .unwrap_or_else(|| panic!("no row of {stage} on {host}:\n{}", out.stdout));
        assert!(row.contains(" 25 ") && row.ends_with("finished"), "{row}");
    }
    assert!(out.stdout.contains("run 'three' finished"), "{}", out.stdout);
    // The report merges the parts', each stage with its host.
    let json = report(&dir);
    let stages = json["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 9, "{json}");
    assert!(stages.iter().any(|s| s["name"] == "grade_b" && s["host"] == "b" && s["frames"] == 25), "{json}");

    // Every stage's every frame equals the run in one process of the same stages.
    let got = sums_by_host(&sums);
    for (stage, want) in reference_sums(&dir, &text, None) {
        let host = stage.split('_').nth(1).unwrap().trim_end_matches(".sum");
        assert_eq!(got.get(&format!("{host}/{stage}")), Some(&want), "{host}/{stage}");
    }
    assert_nothing_left(out.pid);
    for agent in [&a, &b] {
        assert_eq!(parts_left_after(agent.pid(), RUN_TIMEOUT), vec![], "agent {}", agent.name);
    }
    // An agent's stderr carries its part's, prefixed with the run and the host.
    let a_log = a.stop();
    assert_eq!(a_log.status.code(), Some(0), "{}", a_log.output());
    assert!(
        a_log
            .stderr
            .lines()
            .any(|l| l.starts_with("[run ") && l.contains(" host a] ") && l.contains("all 3 stages ready")),
        "{}",
        a_log.stderr
    );
}

#[test]
fn ctrl_c_at_the_coordinator_drains_every_host() {
    let dir = scratch("hosts-ctrl-c");
    let (mut a, mut b) = (Agent::start(&dir, "a"), Agent::start(&dir, "b"));
    let text = three_chains(&a, &b, None, Some(200));
    let file = pipeline(&dir, "p.toml", &text);
    let sums = dir.join("sums");
    let coordinator = start_running(&dir, &file, &["--checksums", "sums"]);
    for agent in [&mut a, &mut b] {
        agent.running().wait_for_stderr("stages ready; running", RUN_TIMEOUT);
    }
    // Stopped once every host's sink has taken frames, so the prefixes say something.
    for host in ["a", "b", "local"] {
        wait_until(RUN_TIMEOUT, &format!("frames in {host}'s sink"), || {
            std::fs::metadata(sums.join(host).join(format!("sink_{host}.sum"))).is_ok_and(|m| m.len() > 0)
        });
    }
    coordinator.signal(rustix::process::Signal::INT);
    let out = coordinator.finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert!(out.stdout.contains("run 'three' stopped by"), "{}", out.stdout);
    // What each host's sink took is a prefix of what the same stages make in one process.
    let got = sums_by_host(&sums);
    let most = got.values().map(|v| v.iter().filter(|&&c| c == b'\n').count()).max().unwrap() as u64;
    assert!(most > 0, "no frames at all: {}", out.output());
    for (stage, want) in reference_sums(&dir, &text.replace(", fps = 200.0", ""), Some(most)) {
        let host = stage.split('_').nth(1).unwrap().trim_end_matches(".sum");
        let have = got.get(&format!("{host}/{stage}")).unwrap_or_else(|| panic!("no {host}/{stage}"));
        assert!(
            !have.is_empty() && want.starts_with(have),
            "{host}/{stage} ({} bytes) is not a prefix of the reference ({} bytes): its last line {:?}",
            have.len(),
            want.len(),
            String::from_utf8_lossy(have).lines().last()
        );
    }
    assert_nothing_left(out.pid);
    for agent in [&a, &b] {
        assert_eq!(parts_left_after(agent.pid(), RUN_TIMEOUT), vec![], "agent {}", agent.name);
    }
}

#[test]
fn an_agent_killed_mid_run_stops_the_run_naming_its_host() {
    let dir = scratch("hosts-agent-killed");
    let (mut a, mut b) = (Agent::start(&dir, "a"), Agent::start(&dir, "b"));
    let text = three_chains(&a, &b, None, Some(200));
    let file = pipeline(&dir, "p.toml", &text);
    let coordinator = start(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    for agent in [&mut a, &mut b] {
        agent.running.as_mut().unwrap().wait_for_stderr("stages ready; running", RUN_TIMEOUT);
    }
    let b_pid = b.pid();
    b.running.as_ref().unwrap().signal(rustix::process::Signal::KILL);
    let out = coordinator.finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(1), "{}", out.output());
    assert!(
        out.stderr.contains("host `b` was lost: its agent's liveliness token vanished (on_host_loss = \"stop\")"),
        "{}",
        out.output()
    );
    assert!(out.stdout.contains("host `b`: lost"), "{}", out.stdout);
    assert_nothing_left(out.pid);
    // Nothing of the run is left on either host: a's part was ended, b's died with its agent.
    assert_eq!(parts_left_after(a.pid(), RUN_TIMEOUT), vec![], "agent a");
    assert_eq!(parts_left_after(b_pid, RUN_TIMEOUT), vec![], "agent b");
    let a_log = a.stop();
    assert_eq!(a_log.status.code(), Some(0), "{}", a_log.output());
}

/// `generator` on a → `rgb-process` on b → `yuv420` on a: two links cross hosts, one each way.
fn split_chain(a: &Agent, b: &Agent, frames: Option<u64>, size: (u32, u32), extra: &str) -> String {
    let frames = frames.map_or(String::new(), |f| format!("frames = {f}\n"));
    let (w, h) = size;
    format!(
        "[pipeline]\nname = \"cross\"\ndevice = \"cpu\"\n{frames}{extra}\n{}\n{}\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"a\"\nparams = {{ width = {w}, height = {h}, pattern = \"noise\", seed = 5 }}\n\n\
         [[stage]]\nname = \"grade\"\nplugin = \"rgb-process\"\nhost = \"b\"\ninputs = [\"gen\"]\nparams = {{ brightness = 0.2, contrast = 1.1 }}\n\n\
         [[stage]]\nname = \"yuv\"\nplugin = \"yuv420\"\nhost = \"a\"\ninputs = [\"grade\"]\n",
        a.host_table(),
        b.host_table()
    )
}

/// The frames of every stage of `text` run in one process, `--checksums` into `dir/reference`.
fn reference_sums(
    dir: &std::path::Path,
    text: &str,
    frames: Option<u64>,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    let one = pipeline(dir, "one.toml", &without_hosts(text));
    files_under(&reference_run(dir, &one, frames))
}

/// Each stage's frames on the host it ran on, and the same frames on the host its receiver
/// passed them to, equal the reference byte for byte (`--checksums` hashes every frame).
fn assert_split_chain_sums(sums: &std::path::Path, reference: &std::collections::BTreeMap<String, Vec<u8>>) {
    let got = sums_by_host(sums);
    for (file, hosts) in [("gen.sum", ["a", "b"]), ("grade.sum", ["b", "a"]), ("yuv.sum", ["a", "a"])] {
        let want = &reference[file];
        assert!(want.iter().filter(|&&c| c == b'\n').count() > 0, "no frames in the reference's {file}");
        for host in hosts {
            assert_eq!(got.get(&format!("{host}/{file}")), Some(want), "{host}/{file}");
        }
    }
}

#[test]
fn a_pipeline_split_over_two_agents_on_loopback_makes_the_in_process_frames() {
    let dir = scratch("hosts-cross-loopback");
    let (a, mut b) = (Agent::start(&dir, "a"), Agent::start(&dir, "b"));
    let text = split_chain(&a, &b, Some(40), (64, 48), "");
    let file = pipeline(&dir, "p.toml", &text);
    let sums = dir.join("sums");
    let out = run_file(&dir, &file, &SUMS_AND_REPORT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert_split_chain_sums(&sums, &reference_sums(&dir, &text, None));
    // The bridge stages are rows of their hosts, every frame through them.
    for (host, stage, plugin) in [
        ("a", "gen-to-b", "tcp-send"),
        ("b", "gen", "tcp-receive"),
        ("b", "grade-to-a", "tcp-send"),
        ("a", "grade", "tcp-receive"),
    ] {
        let row = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().take(3).eq([host, stage, plugin]))
            .unwrap_or_else(|| panic!("no {stage} row on {host}:\n{}", out.stdout));
        assert!(row.contains(" 40 ") && row.ends_with("finished"), "{row}");
    }
    // b's receiver took gen's frames from a's sender, on b's data port.
    b.running().wait_for_stderr("link 'gen->b': connection 1 from 127.0.0.1:", RUN_TIMEOUT);
    assert!(b.running().stderr_so_far().contains(&format!("to {}", b.data)), "{}", b.running().stderr_so_far());
    assert_nothing_left(out.pid);
    for agent in [&a, &b] {
        assert_eq!(parts_left_after(agent.pid(), RUN_TIMEOUT), vec![], "agent {}", agent.name);
    }
}

#[test]
fn a_pipeline_split_over_two_network_namespaces_sends_its_frames_over_the_veth() {
    let Some(net) = netns::Pair::create("cross", 1) else { return };
    let dir = scratch("hosts-cross-netns");
    let (a, mut b) = (Agent::start_in(&dir, "a", &net.a), Agent::start_in(&dir, "b", &net.b));
    let (frames, (w, h)) = (30u64, (320u32, 240u32));
    let text = split_chain(&a, &b, Some(frames), (w, h), "");
    let file = pipeline(&dir, "p.toml", &text);
    let sums = dir.join("sums");
    let (before_a, before_b) = (net.a.bytes(), net.b.bytes());
    let out = start_in(&dir, &net.a, &file, &["--checksums", "sums"]).finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert_split_chain_sums(&sums, &reference_sums(&dir, &text, None));
    // The frames crossed the veth: gen's (RGB8) from a to b, grade's (RGB8) back.
    let (after_a, after_b) = (net.a.bytes(), net.b.bytes());
    let frame_bytes = u64::from(w * h * 3);
    let least = frames * frame_bytes;
    assert!(
        after_a.1 - before_a.1 >= least && after_b.0 - before_b.0 >= least,
        "a sent {} and b took {} bytes; {frames} frames are {least}",
        after_a.1 - before_a.1,
        after_b.0 - before_b.0
    );
    assert!(
        after_b.1 - before_b.1 >= least && after_a.0 - before_a.0 >= least,
        "b sent {} and a took {} bytes; {frames} frames are {least}",
        after_b.1 - before_b.1,
        after_a.0 - before_a.0
    );
    // b's receiver names the peer: a's veth address.
    b.running().wait_for_stderr(&format!("link 'gen->b': connection 1 from {}:", net.a.address), RUN_TIMEOUT);
    assert_nothing_left(out.pid);
    for agent in [&a, &b] {
        assert_eq!(parts_left_after(agent.pid(), RUN_TIMEOUT), vec![], "agent {}", agent.name);
    }
}

/// `generator` on a → `rgb-process` on b (with `policy` on its input), the veth rate-limited.
fn over_a_slow_link(a: &Agent, b: &Agent, frames: u64, policy: &str) -> String {
    format!(
        "[pipeline]\nname = \"slow\"\ndevice = \"cpu\"\nframes = {frames}\n\n{}\n{}\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"a\"\nparams = {{ width = 320, height = 240, pattern = \"noise\", seed = 9 }}\n\n\
         [[stage]]\nname = \"grade\"\nplugin = \"rgb-process\"\nhost = \"b\"\ninputs = [\"gen\"]\npolicy = \"{policy}\"\nparams = {{ brightness = 0.2 }}\n",
        a.host_table(),
        b.host_table()
    )
}

/// A report row's field: `(host, stage)` → its value of `field`.
fn report_field(report: &serde_json::Value, host: &str, stage: &str, field: &str) -> u64 {
    let rows = report["stages"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|s| s["host"] == host && s["name"] == stage)
        .unwrap_or_else(|| panic!("no {stage} on {host} in {report}"));
    row[field].as_u64().unwrap()
}

/// The run's report (`gen` on a, `grade` on b): the source made `frames`, and each reached
/// grade or was counted lost.
fn every_frame_accounted_for(report: &std::path::Path, frames: u64) {
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(report).unwrap()).unwrap();
    let (produced, delivered) =
        (report_field(&json, "a", "gen", "frames"), report_field(&json, "b", "grade", "frames"));
    let lost: u64 = json["stages"].as_array().unwrap().iter().map(|s| s["lost"].as_u64().unwrap()).sum();
    assert_eq!(produced, frames, "{json}");
    assert_eq!(delivered + lost, produced, "{json}");
}

/// What arrived at grade on b (its checksum file `taken`) is the reference's frames of the
/// same numbers.
fn grade_on_b_took_the_reference_frames(dir: &std::path::Path, text: &str, taken: &std::path::Path) {
    let want = sum_lines_of(&reference_sums(dir, text, None)["grade.sum"]);
    for (seq, hash) in sum_lines_of(&std::fs::read(taken).unwrap()) {
        assert_eq!(want.get(&seq), Some(&hash), "frame {seq} on b");
    }
}

#[test]
fn a_rate_limited_link_holds_the_producer_back_or_drops_whole_frames_on_the_sending_host() {
    let Some(net) = netns::Pair::create("tbf", 2) else { return };
    let dir = scratch("hosts-tbf");
    let (a, b) = (Agent::start_in(&dir, "a", &net.a), Agent::start_in(&dir, "b", &net.b));
    // 50 Mb/s: about 27 frames of 320x240 RGB8 a second, far fewer than the generator makes.
    net.a.tc(&[
        "qdisc",
        "add",
        "dev",
        &net.a.veth,
        "root",
        "tbf",
        "rate",
        "50mbit",
        "burst",
        "32kbit",
        "latency",
        "400ms",
    ]);
    let reference = |frames: u64, policy: &str| reference_sums(&dir, &over_a_slow_link(&a, &b, frames, policy), None);
    let run_over = |frames: u64, policy: &str| {
        let file = pipeline(&dir, "p.toml", &over_a_slow_link(&a, &b, frames, policy));
        let sums = dir.join(format!("sums-{policy}"));
        let report = dir.join(format!("report-{policy}.json"));
        let args = [
            "run",
            file.to_str().unwrap(),
            "--quiet",
            "--checksums",
            sums.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
        ];
        let out = start_wrapped(&dir, &net.a.exec(), &args, std::process::Stdio::null()).finish(RUN_TIMEOUT);
        assert_eq!(out.status.code(), Some(0), "{}", out.output());
        assert_nothing_left(out.pid);
        (
            sums_by_host(&sums),
            serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&report).unwrap()).unwrap(),
        )
    };

    // block: the receiver's ring full holds the sender, and its ring the generator: nothing
    // is dropped anywhere and every frame arrives, equal to the one-process run's.
    let (sums, report) = run_over(40, "block");
    let want = reference(40, "block");
    assert_eq!(sums.get("b/gen.sum"), Some(&want["gen.sum"]), "b's received frames");
    assert_eq!(sums.get("b/grade.sum"), Some(&want["grade.sum"]), "b's graded frames");
    for (host, stage) in [("a", "gen"), ("a", "gen-to-b"), ("b", "gen"), ("b", "grade")] {
        assert_eq!(report_field(&report, host, stage, "dropped"), 0, "{host}/{stage}: {report}");
        assert_eq!(report_field(&report, host, stage, "frames"), 40, "{host}/{stage}: {report}");
    }

    // drop_oldest on grade's input: the sender takes gen's ring with it, so frames are dropped
    // on a, counted there, and every frame b gets is whole: its hash is the reference's frame
    // of the same number.
    let frames = 400;
    let (sums, report) = run_over(frames, "drop_oldest");
    let want: std::collections::BTreeMap<u64, String> = sum_lines_of(&reference(frames, "drop_oldest")["gen.sum"]);
    let got = sum_lines_of(&sums["b/gen.sum"]);
    assert!(!got.is_empty(), "b got no frames: {report}");
    for (seq, hash) in &got {
        assert_eq!(want.get(seq), Some(hash), "frame {seq} on b");
    }
    let (sent, dropped) =
        (report_field(&report, "a", "gen-to-b", "frames"), report_field(&report, "a", "gen-to-b", "dropped"));
    assert_eq!(report_field(&report, "a", "gen", "frames"), frames, "{report}");
    assert!(dropped > 0, "nothing dropped on a over a 50 Mb/s link: {report}");
    assert_eq!(sent + dropped, frames, "a's sender sent {sent} and dropped {dropped} of {frames}: {report}");
    assert_eq!(got.len() as u64, sent, "b got {} of the {sent} frames a sent", got.len());
}

/// `seq hash` lines as a map.
fn sum_lines_of(text: &[u8]) -> std::collections::BTreeMap<u64, String> {
    String::from_utf8_lossy(text)
        .lines()
        .map(|l| {
            let (seq, hash) = l.split_once(' ').unwrap();
            (seq.parse().unwrap(), hash.to_owned())
        })
        .collect()
}

/// Lines of a file (0 when it does not exist yet).
fn lines_in(path: &std::path::Path) -> usize {
    std::fs::read(path).map_or(0, |t| t.iter().filter(|&&c| c == b'\n').count())
}

#[test]
fn the_link_down_and_up_mid_run_delays_frames_and_loses_none() {
    let Some(net) = netns::Pair::create("updown", 3) else { return };
    let dir = scratch("hosts-link-down");
    let (a, b) = (Agent::start_in(&dir, "a", &net.a), Agent::start_in(&dir, "b", &net.b));
    let frames = 300;
    let text = format!(
        "[pipeline]\nname = \"updown\"\ndevice = \"cpu\"\nframes = {frames}\nrestart = \"on-failure\"\n\n{}\n{}\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"a\"\ndepth = 8\nparams = {{ width = 64, height = 48, pattern = \"noise\", seed = 3, fps = 100.0 }}\n\n\
         [[stage]]\nname = \"grade\"\nplugin = \"rgb-process\"\nhost = \"b\"\ninputs = [\"gen\"]\nparams = {{ brightness = 0.2 }}\n",
        a.host_table(),
        b.host_table()
    );
    let file = pipeline(&dir, "p.toml", &text);
    let (sums, report) = (dir.join("sums"), dir.join("report.json"));
    let run = start_in(&dir, &net.a, &file, &SUMS_AND_REPORT);
    let (made, taken) = (sums.join("a").join("gen.sum"), sums.join("b").join("grade.sum"));
    wait_until(RUN_TIMEOUT, "frames on b", || lines_in(&taken) > 0);
    net.a.ip(&["link", "set", &net.a.veth, "down"]);
    // While the link is down b gets nothing, and a goes on making frames until gen's ring of 8
    // is full (the sender has one frame in flight, unacknowledged): a gets 7 frames ahead at
    // least, which at 100 frames a second over a working veth it never is.
    wait_until(RUN_TIMEOUT, "a getting ahead of b while the link is down", || lines_in(&made) >= lines_in(&taken) + 7);
    net.a.ip(&["link", "set", &net.a.veth, "up"]);
    let out = run.finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    every_frame_accounted_for(&report, frames);
    grade_on_b_took_the_reference_frames(&dir, &text, &taken);
    assert_nothing_left(out.pid);
}

#[test]
fn with_on_host_loss_wait_a_host_cut_off_past_the_lease_is_waited_for_and_the_run_completes() {
    let Some(net) = netns::Pair::create("wait", 4) else { return };
    let dir = scratch("hosts-wait");
    let (a, b) = (Agent::start_in(&dir, "a", &net.a), Agent::start_in(&dir, "b", &net.b));
    let frames = 300;
    let text = format!(
        "[pipeline]\nname = \"wait\"\ndevice = \"cpu\"\nframes = {frames}\non_host_loss = \"wait\"\n\n{}\n{}\n\
         [[stage]]\nname = \"gen\"\nplugin = \"generator\"\nhost = \"a\"\nparams = {{ width = 64, height = 48, pattern = \"noise\", seed = 4, fps = 100.0 }}\n\n\
         [[stage]]\nname = \"grade\"\nplugin = \"rgb-process\"\nhost = \"b\"\ninputs = [\"gen\"]\nparams = {{ brightness = 0.2 }}\n",
        a.host_table(),
        b.host_table()
    );
    let file = pipeline(&dir, "p.toml", &text);
    let (sums, report) = (dir.join("sums"), dir.join("report.json"));
    let mut run = start_in(&dir, &net.a, &file, &SUMS_AND_REPORT);
    let taken = sums.join("b").join("grade.sum");
    wait_until(RUN_TIMEOUT, "frames on b", || lines_in(&taken) > 0);
    // Down until Zenoh's lease ends and b's token vanishes for the coordinator; the frames
    // wait (block), and the run goes on.
    net.a.ip(&["link", "set", &net.a.veth, "down"]);
    run.wait_for_stderr("host `b` was lost; the others run on until it is back (on_host_loss = \"wait\")", RUN_TIMEOUT);
    net.a.ip(&["link", "set", &net.a.veth, "up"]);
    let back = run.wait_for_either("host `b` is back", "host `b` came back without its part", RUN_TIMEOUT);
    assert!(
        back,
        "b came back without its part:\n{}\nb's agent said:\n{}",
        run.stderr_so_far(),
        b.running.as_ref().unwrap().stderr_so_far()
    );
    let out = run.finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    every_frame_accounted_for(&report, frames);
    grade_on_b_took_the_reference_frames(&dir, &text, &taken);
    assert_nothing_left(out.pid);
}

/// A scrape's samples: `name{labels}` → value.
fn scraped(text: &str) -> std::collections::BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.rsplit_once(' ').map(|(series, value)| (series.to_owned(), value.parse().unwrap())))
        .collect()
}

/// A stage's series as the endpoints label it.
fn series(metric: &str, host: &str, stage: &str) -> String {
    format!(r#"{metric}{{pipeline="cross",host="{host}",stage="{stage}",replica="0"}}"#)
}

#[test]
fn the_coordinator_serves_every_hosts_stages_live_and_final_figures_that_agree_with_the_report() {
    let Some(net) = netns::Pair::create("metrics", 5) else { return };
    let dir = scratch("hosts-metrics");
    // b also serves its part's figures, in its namespace.
    let a = Agent::start_in(&dir, "a", &net.a);
    let b = Agent::start_in_with(&dir, "b", &net.b, &["--metrics", "9465"]);
    // Unbounded and paced: it runs until it is stopped, however slow the machine.
    let text = split_chain(&a, &b, None, (64, 48), "").replace("seed = 5 }", "seed = 5, fps = 100.0 }");
    let file = pipeline(&dir, "p.toml", &text);
    let coordinator =
        start_in(&dir, &net.a, &file, &["--metrics", "9464", "--metrics-linger", "10m", "--report", "report.json"]);
    let (at, agent_at) = ("127.0.0.1:9464", "127.0.0.1:9465");

    // Live: both hosts' stages, each labelled with its host, frames moving on each.
    let mut live = String::new();
    wait_until(RUN_TIMEOUT, "both hosts' stages doing frames on the coordinator's endpoint", || {
        let Ok((200, text)) = net.a.get(at, "/metrics") else { return false };
        let got = scraped(&text);
        live = text;
        let frames = |host: &str, stage: &str| got.get(&series("gpuipc_stage_frames_total", host, stage)).copied();
        frames("a", "gen").is_some_and(|f| f > 0.0)
            && frames("b", "grade").is_some_and(|f| f > 0.0)
            && frames("a", "yuv").is_some_and(|f| f > 0.0)
            && got.get(r#"gpuipc_run_state{pipeline="cross",state="running"}"#) == Some(&1.0)
    });
    assert!(!live.contains(r#"host="local""#), "a run without local stages shows none:\n{live}");
    wait_until(RUN_TIMEOUT, "the run ready", || net.a.get(at, "/readyz").is_ok_and(|(s, _)| s == 200));
    assert_eq!(net.a.get(at, "/healthz").unwrap(), (200, "ok\n".to_owned()));
    // The agent serves its own part, its stages labelled with its name.
    let (status, text) = net.b.get(agent_at, "/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    let got = scraped(&text);
    assert!(got.contains_key(&series("gpuipc_stage_frames_total", "b", "grade")), "{text}");
    assert!(!got.contains_key(&series("gpuipc_stage_frames_total", "a", "gen")), "{text}");

    // Stopped, drained, reported: the final figures are the report's, for every host's stages.
    coordinator.signal(rustix::process::Signal::TERM);
    let mut coordinator = coordinator;
    coordinator.wait_for_stderr("serving the run's final metrics", RUN_TIMEOUT);
    let (status, text) = net.a.get(at, "/metrics").unwrap();
    assert_eq!(status, 200, "{text}");
    let got = scraped(&text);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    let rows = report["stages"].as_array().unwrap();
    for host in ["a", "b"] {
        assert!(
            rows.iter().any(|r| r["host"] == host),
            "no stage of {host} in {report}\n{}",
            coordinator.stderr_so_far()
        );
    }
    for row in rows {
        let (host, stage) = (row["host"].as_str().unwrap(), row["name"].as_str().unwrap());
        for (metric, field) in [
            ("gpuipc_stage_frames_total", "frames"),
            ("gpuipc_stage_dropped_frames_total", "dropped"),
            ("gpuipc_stage_lost_frames_total", "lost"),
            ("gpuipc_stage_latency_seconds_count", "frames"),
        ] {
            let name = series(metric, host, stage);
            assert_eq!(got.get(&name), Some(&row[field].as_f64().unwrap()), "{name} in:\n{text}");
        }
    }
    assert!(report_field(&report, "a", "yuv", "frames") > 0, "{report}");
    assert_eq!(got[r#"gpuipc_run_state{pipeline="cross",state="stopped"}"#], 1.0, "{text}");
    // A second signal ends the lingering.
    coordinator.signal(rustix::process::Signal::TERM);
    let out = coordinator.finish(RUN_TIMEOUT);
    assert_eq!(out.status.code(), Some(0), "{}", out.output());
    assert!(net.a.get(at, "/metrics").is_err(), "the endpoint answers after its run ended");
    assert_nothing_left(out.pid);
    for agent in [&a, &b] {
        assert_eq!(parts_left_after(agent.pid(), RUN_TIMEOUT), vec![], "agent {}", agent.name);
    }
}
