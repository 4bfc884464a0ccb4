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
