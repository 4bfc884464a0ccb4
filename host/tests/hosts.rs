//! Stages on several hosts: what the plan says of them (docs/hosts.md). Running them needs the
//! agents, which do not exist yet: `run` refuses such a plan, naming the stage.

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
    assert!(out.stdout.contains("gen -> grade  rgb8 3840x2160, 4 slots x 24.88 MB, host shared memory\n"), "{}", out.stdout);
}

#[test]
fn run_refuses_stages_on_other_hosts_until_agents_exist() {
    let dir = scratch("hosts-run");
    let file = pipeline(&dir, "p.toml", TWO_HOSTS);
    let out = run(&dir, &["run", file.to_str().unwrap(), "--quiet"]);
    assert_eq!(out.status.code(), Some(2), "{}", out.output());
    assert!(out.stderr.contains("error: stage 'grade' runs on host `gpu1`: stages on other hosts run through an agent there"), "{}", out.output());
    assert_nothing_left(out.pid);
}

/// A TCP port nobody listens on now (the OS's pick of a free one).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn an_agent_announces_itself_and_validate_asks_it_what_it_is() {
    let dir = scratch("hosts-agent");
    let (up, down) = (free_port(), free_port());
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
