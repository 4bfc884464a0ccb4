//! The split checked on the parsed TOML of the parts it writes.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::*;
use crate::config::SourceFile;

/// Where the workspace's plugin libraries are: beside the folder of this test binary.
fn plugins() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(Path::parent).unwrap().to_owned()
}

/// A plan of `text`, whose `plugin = "NAME"` lines are paths to the built plugins.
pub(crate) fn plan_of(text: &str) -> (Plan, String) {
    let text = text.replace("plugin = \"", &format!("plugin = \"{}/libgpuipc_", plugins().display()));
    let source = SourceFile::new(Path::new("/nowhere/p.toml"), text.clone());
    let parsed = crate::config::parse(&source).unwrap_or_else(|d| panic!("{d}"));
    let plan = crate::plan::build(&source, parsed)
        .unwrap_or_else(|d| panic!("{d}\nbuild the plugins first: cargo build --workspace"));
    (plan, text)
}

fn stages(part: &Part) -> Vec<Table> {
    let doc: Table = part.toml.parse().unwrap();
    doc["stage"].as_array().unwrap().iter().map(|s| s.as_table().unwrap().clone()).collect()
}

fn stage<'a>(stages: &'a [Table], name: &str) -> &'a Table {
    stages.iter().find(|s| s["name"].as_str() == Some(name)).unwrap_or_else(|| panic!("no stage {name} in {stages:?}"))
}

pub(crate) const HOSTS: &str = r#"
[pipeline]
name = "split"
device = "cpu"
frames = 7
restart = "on-failure"
on_host_loss = "wait"

[[host]]
name = "a"
control = "tcp/10.77.0.1:7447"

[[host]]
name = "b"
control = "tcp/10.77.0.2:7447"
data = "10.77.0.2:9000"
"#;

#[test]
fn each_host_gets_its_stages_and_a_sender_and_receiver_per_crossing_link() {
    let text = format!(
        "{HOSTS}\n{}",
        r#"
[[stage]]
name = "gen"
plugin = "generator.so"
host = "a"
depth = 3
params = { width = 64, height = 48, pattern = "box" }

[[stage]]
name = "grade"
plugin = "rgb_process.so"
host = "b"
inputs = ["gen"]
policy = "drop_oldest"
max_restarts = 2
params = { brightness = 0.25 }

[[stage]]
name = "yuv"
plugin = "yuv420.so"
host = "a"
inputs = ["grade"]

[[stage]]
name = "other"
plugin = "null.so"
host = "b"
inputs = ["gen"]
"#
    );
    let (plan, text) = plan_of(&text);
    let parts = split(&plan, &text).unwrap();
    assert_eq!(parts.iter().map(|p| p.host_name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    let (a, b) = (stages(&parts[0]), stages(&parts[1]));

    // Host a: gen and yuv as written (no `host`, plugin paths absolute), the receiver of
    // grade named like it, and one sender of gen for both of gen's consumers on b.
    let gen_ = stage(&a, "gen");
    assert_eq!(gen_["depth"].as_integer(), Some(3));
    assert_eq!(gen_["params"]["pattern"].as_str(), Some("box"));
    assert!(gen_.get("host").is_none());
    assert!(gen_["plugin"].as_str().unwrap().starts_with('/'));
    let sender = stage(&a, "gen-to-b");
    assert_eq!(sender["plugin"].as_str(), Some("tcp-send"));
    assert_eq!(sender["inputs"].as_array().unwrap(), &vec![Value::from("gen")]);
    assert_eq!(sender["restart"].as_str(), Some("on-failure"));
    assert_eq!(sender["params"]["to"].as_str(), Some("10.77.0.2:9000"));
    assert_eq!(sender["params"]["link"].as_str(), Some("gen->b"));
    // grade drops the oldest: the sender does, on a, whole frames.
    assert_eq!(sender["policy"].as_str(), Some("drop_oldest"));
    let grade_in = stage(&a, "grade");
    assert_eq!(grade_in["plugin"].as_str(), Some("tcp-receive"));
    assert_eq!(grade_in["params"]["listen"].as_str(), Some("10.77.0.1:7448"));
    assert_eq!(grade_in["params"]["link"].as_str(), Some("grade->a"));
    assert_eq!(grade_in["params"]["format"].as_str(), Some("rgb8"));
    assert_eq!(
        (grade_in["params"]["width"].as_integer(), grade_in["params"]["height"].as_integer()),
        (Some(64), Some(48))
    );
    assert_eq!(stage(&a, "yuv")["inputs"].as_array().unwrap(), &vec![Value::from("grade")]);
    assert_eq!(a.len(), 4, "{a:?}");

    // Host b: the receiver of gen (b's first crossing link: its data port), grade and other
    // as written, and the sender of grade back to a.
    let gen_in = stage(&b, "gen");
    assert_eq!(gen_in["params"]["listen"].as_str(), Some("10.77.0.2:9000"));
    assert_eq!(gen_in["restart"].as_str(), Some("on-failure"));
    let grade = stage(&b, "grade");
    assert_eq!(grade["policy"].as_str(), Some("drop_oldest"));
    assert_eq!(grade["max_restarts"].as_integer(), Some(2));
    assert_eq!(grade["params"]["brightness"].as_float(), Some(0.25));
    assert_eq!(stage(&b, "grade-to-a")["params"]["to"].as_str(), Some("10.77.0.1:7448"));
    assert!(stage(&b, "grade-to-a").get("policy").is_none());
    assert_eq!(stage(&b, "other")["inputs"].as_array().unwrap(), &vec![Value::from("gen")]);
    assert_eq!(b.len(), 4, "{b:?}");

    // Each part keeps the [pipeline] settings, and is a pipeline of its own.
    for part in &parts {
        let doc: Table = part.toml.parse().unwrap();
        assert_eq!(doc["pipeline"]["frames"].as_integer(), Some(7));
        assert_eq!(doc["pipeline"]["name"].as_str(), Some("split"));
        assert_eq!(doc["pipeline"]["restart"].as_str(), Some("on-failure"));
        assert!(doc["pipeline"].get("on_host_loss").is_none());
        assert!(doc.get("host").is_none());
    }
    // Receivers first, then the host's stages in plan order, then senders.
    assert_eq!(parts[1].stages.first().map(String::as_str), Some("gen"));
    assert_eq!(parts[1].stages.last().map(String::as_str), Some("grade-to-a"));
}

#[test]
fn crossing_links_into_one_host_take_its_next_ports_and_sender_names_stay_free() {
    let text = format!(
        "{HOSTS}\n{}",
        r#"
[[stage]]
name = "gen"
plugin = "generator.so"
host = "a"
params = { width = 32, height = 16 }

[[stage]]
name = "gen-to-b"
plugin = "null.so"
host = "a"
inputs = ["gen"]

[[stage]]
name = "gen2"
plugin = "generator.so"
host = "a"
params = { width = 32, height = 16 }

[[stage]]
name = "s1"
plugin = "null.so"
host = "b"
inputs = ["gen"]

[[stage]]
name = "s2"
plugin = "null.so"
host = "b"
inputs = ["gen2"]
"#
    );
    let (plan, text) = plan_of(&text);
    let parts = split(&plan, &text).unwrap();
    let (a, b) = (stages(&parts[0]), stages(&parts[1]));
    // Each producer's sender sends to the port its receiver on b listens on; the two crossing
    // links into b take its data port and the next, in plan order.
    let (to_1, to_2) = (
        stage(&a, "gen-to-b-2")["params"]["to"].as_str().unwrap(),
        stage(&a, "gen2-to-b")["params"]["to"].as_str().unwrap(),
    );
    assert_eq!(stage(&b, "gen")["params"]["listen"].as_str(), Some(to_1));
    assert_eq!(stage(&b, "gen2")["params"]["listen"].as_str(), Some(to_2));
    let mut ports = [to_1, to_2];
    ports.sort();
    assert_eq!(ports, ["10.77.0.2:9000", "10.77.0.2:9001"]);
}

#[test]
fn a_link_from_another_host_into_this_machine_is_refused() {
    let text = format!(
        "{HOSTS}\n{}",
        r#"
[[stage]]
name = "gen"
plugin = "generator.so"
host = "a"
params = { width = 32, height = 16 }

[[stage]]
name = "sink"
plugin = "null.so"
inputs = ["gen"]
"#
    );
    let (plan, text) = plan_of(&text);
    let e = split(&plan, &text).unwrap_err();
    assert_eq!(e, SplitError::IntoLocal { link: "gen -> sink".into(), from: "a".into(), stage: "sink".into() });
    assert!(e.to_string().contains("put 'sink' on a [[host]]"), "{e}");
}

#[test]
fn a_link_from_this_machine_to_a_host_is_split() {
    let text = format!(
        "{HOSTS}\n{}",
        r#"
[[stage]]
name = "gen"
plugin = "generator.so"
params = { width = 32, height = 16 }

[[stage]]
name = "sink"
plugin = "null.so"
host = "b"
inputs = ["gen"]
"#
    );
    let (plan, text) = plan_of(&text);
    let parts = split(&plan, &text).unwrap();
    assert_eq!(parts.iter().map(|p| p.host_name.as_str()).collect::<Vec<_>>(), ["local", "b"]);
    assert_eq!(parts[0].stages, ["gen", "gen-to-b"]);
    assert_eq!(parts[1].stages, ["gen", "sink"]);
}

#[test]
fn hosts_on_one_address_may_not_share_a_port() {
    // Two agents on one machine, control ports 7711 and 7712: host a's frames would go to
    // 7712 (its control port + 1), which is host b's control endpoint.
    let hosts = r#"
[pipeline]
name = "collide"
device = "cpu"

[[host]]
name = "a"
control = "tcp/127.0.0.1:7711"

[[host]]
name = "b"
control = "tcp/127.0.0.1:7712"

[[stage]]
name = "gen"
plugin = "generator.so"
host = "b"

[[stage]]
name = "sink"
plugin = "null.so"
host = "a"
inputs = ["gen"]
"#;
    let (plan, text) = plan_of(hosts);
    let e = split(&plan, &text).unwrap_err();
    assert_eq!(
        e.to_string(),
        "frames into host `a` (its 1st crossing link) and host `b`'s control endpoint both use 127.0.0.1:7712; give host `a` a `data` address on another port (hosts on one address need ports of their own)"
    );
    // Its own data address, elsewhere: no clash. Loopback names are one address.
    let (plan, text) = plan_of(
        &hosts
            .replace("control = \"tcp/127.0.0.1:7711\"", "control = \"tcp/127.0.0.1:7711\"\ndata = \"127.0.0.1:7800\""),
    );
    split(&plan, &text).unwrap();
    let (plan, text) = plan_of(
        &hosts
            .replace("control = \"tcp/127.0.0.1:7711\"", "control = \"tcp/127.0.0.1:7711\"\ndata = \"localhost:7712\""),
    );
    let e = split(&plan, &text).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "frames into host `a` (its 1st crossing link) and host `b`'s control endpoint both use 127.0.0.1:7712"
        ),
        "{e}"
    );
}

#[test]
fn ports_count_up_from_the_data_port() {
    assert_eq!(ordinal(1), "1st");
    assert_eq!(ordinal(12), "12th");
    assert_eq!(ordinal(23), "23rd");
    assert_eq!(port_above("10.0.0.1:7448", 2).as_deref(), Some("10.0.0.1:7450"));
    assert_eq!(port_above("[fd00::7]:9100", 1).as_deref(), Some("[fd00::7]:9101"));
    assert_eq!(port_above("10.0.0.1:65535", 1), None);
}

/// The 4K chain of the GPU check, split a -> b -> a with both crossing links over NCCL.
const NCCL_CHAIN: &str = r#"
[[stage]]
name = "gen"
plugin = "generator.so"
host = "a"
device = "cuda:1"
params = { width = 64, height = 48 }

[[stage]]
name = "grade"
plugin = "rgb_process.so"
host = "b"
device = "cuda:0"
inputs = ["gen"]
input_transport = "nccl"

[[stage]]
name = "yuv"
plugin = "yuv420.so"
host = "a"
device = "cuda:1"
inputs = ["grade"]
input_transport = "nccl"
"#;

#[test]
fn nccl_links_get_nccl_bridges_on_each_ends_device_and_the_rings_stay_in_device_memory() {
    let text = format!("{HOSTS}\n{NCCL_CHAIN}").replace("device = \"cpu\"\n", "");
    let (plan, text) = plan_of(&text);
    // The producers' rings, read by nccl senders, live in device memory.
    for link in &plan.links {
        assert!(matches!(link.memory, crate::plan::LinkMemory::Device { .. }), "{:?}", link.memory);
    }
    let shown = crate::plan::render_text(&plan);
    assert!(shown.contains("crosses hosts a -> b: NCCL GPU to GPU (control over TCP to 10.77.0.2:9000)"), "{shown}");
    let parts = split(&plan, &text).unwrap();
    let (a, b) = (stages(&parts[0]), stages(&parts[1]));
    let sender = stage(&a, "gen-to-b");
    assert_eq!(sender["plugin"].as_str(), Some("nccl-send"));
    assert_eq!(sender["device"].as_str(), Some("cuda:1"));
    assert_eq!(sender["params"]["to"].as_str(), Some("10.77.0.2:9000"));
    let receiver = stage(&b, "gen");
    assert_eq!(receiver["plugin"].as_str(), Some("nccl-receive"));
    assert_eq!(receiver["device"].as_str(), Some("cuda:0"));
    assert_eq!(receiver["params"]["listen"].as_str(), Some("10.77.0.2:9000"));
    assert_eq!(receiver["params"]["format"].as_str(), Some("rgb8"));
    assert_eq!(
        (stage(&b, "grade-to-a")["plugin"].as_str(), stage(&b, "grade-to-a")["device"].as_str()),
        (Some("nccl-send"), Some("cuda:0"))
    );
    assert_eq!(
        (stage(&a, "grade")["plugin"].as_str(), stage(&a, "grade")["device"].as_str()),
        (Some("nccl-receive"), Some("cuda:1"))
    );
    // The consumers read their receivers on their own host: the key has done its work.
    assert!(stage(&b, "grade").get("input_transport").is_none());
    assert!(stage(&a, "yuv").get("input_transport").is_none());
    assert_eq!(parts[1].stages, ["gen", "grade", "grade-to-a"]);
}

#[test]
fn tcp_is_the_default_and_keeps_a_cuda_producers_ring_in_host_memory() {
    let text =
        format!("{HOSTS}\n{NCCL_CHAIN}").replace("device = \"cpu\"\n", "").replace("input_transport = \"nccl\"\n", "");
    let (plan, text) = plan_of(&text);
    for link in &plan.links {
        assert!(matches!(link.memory, crate::plan::LinkMemory::HostStaged { .. }), "{:?}", link.memory);
    }
    let parts = split(&plan, &text).unwrap();
    assert_eq!(stage(&stages(&parts[0]), "gen-to-b")["plugin"].as_str(), Some("tcp-send"));
    assert!(stage(&stages(&parts[0]), "gen-to-b").get("device").is_none());
}
