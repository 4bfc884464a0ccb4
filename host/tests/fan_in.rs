//! Fan-in between real stage processes with dropping policies: a diamond (source -> branch ->
//! join, source -> join) and two free-running sources.
//!
//! Every joined line is checked against what each input's producer made (`run --checksums`),
//! so a misaligned, torn or invented frame shows. Timing decides how many frames a join whose
//! inputs never wait for it gets; the accounting does not: on each input link, frames published
//! = frames joined + frames counted as dropped (the report's link rows), and the join's own
//! `dropped` counts a number missed on every input once.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;

const FRAMES: u64 = 300;

/// Run `stages` with a `checksum` stage named 'join' reading `inputs` with `policy`, for
/// [`FRAMES`], in a fresh folder (it must finish and leave nothing behind), and check the
/// join's frames ([`check_join`]); how many it got.
fn run_join(name: &str, stages: &str, inputs: &[&str], policy: &str) -> u64 {
    let dir = scratch(name);
    let quoted: Vec<String> = inputs.iter().map(|i| format!("\"{i}\"")).collect();
    let text = format!(
        r#"
[pipeline]
frames = {FRAMES}{stages}[[stage]]
name = "join"
plugin = "checksum"
inputs = [{}]
policy = "{policy}"
params = {{ path = "join.sum" }}
"#,
        quoted.join(", ")
    );
    run_ok(&dir, &pipeline(&dir, "p.toml", &text), &SUMS_AND_REPORT);
    check_join(&dir, inputs)
}

/// The join's frames, checked: numbers increasing up to the last one, each input's hash the
/// one its producer made for that number, and the report's counts agreeing with what every
/// input link published (`FRAMES` each). Returns how many frames the join got.
fn check_join(dir: &Path, inputs: &[&str]) -> u64 {
    let made: Vec<HashMap<u64, String>> = inputs.iter().map(|s| made_by(dir, s)).collect();
    let lines = sum_lines(&dir.join("join.sum"));
    assert!(!lines.is_empty(), "the join got nothing");
    for pair in lines.windows(2) {
        assert!(pair[0].0 < pair[1].0, "join: {} then {}", pair[0].0, pair[1].0);
    }
    for (seq, hashes) in &lines {
        let hashes: Vec<&str> = hashes.split(' ').collect();
        assert_eq!(hashes.len(), inputs.len(), "join frame {seq}");
        for ((hash, made), input) in hashes.iter().zip(&made).zip(inputs) {
            assert_eq!(Some(*hash), made.get(seq).map(String::as_str), "join frame {seq}, input {input}");
        }
    }
    assert_eq!(lines.last().unwrap().0, FRAMES - 1, "the last frame reaches the join");
    let report = report(dir);
    let join = stage_row(&report, "join");
    let got = join["frames"].as_u64().unwrap();
    assert_eq!(got, lines.len() as u64);
    // Each input link published FRAMES: what the join did not get is counted dropped on each
    // link, and once in the join's row (every number was published on every input).
    assert_eq!(join["dropped"].as_u64().unwrap(), FRAMES - got, "join: {join}");
    for input in inputs {
        let link = report["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["producer"] == *input && l["consumer"] == "join")
            .unwrap();
        let count = |field: &str| link[field].as_u64().unwrap();
        assert_eq!(
            (count("produced"), count("delivered"), count("dropped"), count("lost")),
            (FRAMES, got, FRAMES - got, 0),
            "{link}"
        );
    }
    got
}

/// The diamond of issue 7: generator -> yuv420 -> join, generator -> join, with the join's
/// inputs in that order. Both branches run at full speed; yuv420 is the slower, so the
/// generator's newest frame is always ahead of it.
#[test]
fn a_latest_diamond_joins_what_both_branches_deliver() {
    let got = run_join(
        "fan-in-latest-diamond",
        r#"
[[stage]]
name = "gen"
plugin = "generator"
params = { width = 320, height = 180, pattern = "bars" }
[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
"#,
        &["yuv", "gen"],
        "latest",
    );
    // The join waits for the branch behind instead of chasing the source's newest frame, so it
    // loses frames only where it falls behind itself (a loaded machine); it used to chase the
    // source and get about one frame in four.
    assert!(got > FRAMES / 2, "the join got {got} of {FRAMES} frames");
}

/// A diamond with a slow branch and `drop_oldest`, the branch first among the join's inputs:
/// the join holds the source's frame while the branch works on it, so the source cannot
/// overwrite it the moment the branch lets go. (The join used to wait for the branch without
/// holding it and lost about a fifth of the frames here; a count cannot tell that apart from
/// a loaded machine, so this checks the accounting, and the ring-level lockstep test in
/// stage::inputs the mechanism.)
#[test]
fn a_drop_oldest_diamond_with_a_slow_branch_joins_what_the_branch_makes() {
    let got = run_join(
        "fan-in-drop-oldest-diamond",
        r#"
[[stage]]
name = "gen"
plugin = "generator"
params = { width = 64, height = 64, pattern = "noise", seed = 5 }
[[stage]]
name = "slow"
plugin = "test-faulty"
inputs = ["gen"]
params = { delay_us = 2000 }
"#,
        &["slow", "gen"],
        "drop_oldest",
    );
    assert!(got > FRAMES / 2, "the join got {got} of {FRAMES} frames");
}

/// Two free-running sources of different sizes joined with `latest`: neither waits for the
/// join or the other, so where one runs a ring ahead the frames between are lost; what is
/// joined is aligned, the last frames meet, and every frame is accounted for on each link.
#[test]
fn two_free_running_sources_with_latest_account_for_every_frame() {
    run_join(
        "fan-in-two-sources",
        r#"
[[stage]]
name = "a"
plugin = "generator"
params = { width = 64, height = 64, pattern = "noise", seed = 1 }
[[stage]]
name = "b"
plugin = "generator"
params = { width = 96, height = 64, pattern = "gradient" }
"#,
        &["a", "b"],
        "latest",
    );
}
