//! Links between real stage processes: fan-out, fan-in, and each flow-control policy.
//!
//! The generator's own output checksums (`run --checksums`) are the truth every consumer's
//! frames are checked against: a frame that arrives torn, twice, out of order or misaligned
//! shows up as a wrong hash or sequence number. Timing decides how many frames a dropping
//! consumer misses, so tests assert the accounting, never a count.

mod common;

use std::path::Path;

use common::*;

#[test]
fn fan_out_delivers_every_frame_to_every_consumer() {
    let dir = scratch("fan-out");
    let file = pipeline(
        &dir,
        "p.toml",
        r#"
[pipeline]
frames = 200
[[stage]]
name = "gen"
plugin = "generator"
depth = 2
params = { width = 64, height = 48, pattern = "noise" }
[[stage]]
name = "a"
plugin = "checksum"
inputs = ["gen"]
params = { path = "a.sum" }
[[stage]]
name = "b"
plugin = "checksum"
inputs = ["gen"]
params = { path = "b.sum" }
[[stage]]
name = "c"
plugin = "null"
inputs = ["gen"]
"#,
    );
    run_ok(&dir, &file, &SUMS_AND_REPORT);
    let made = made_by(&dir, "gen");
    assert_eq!(made.len(), 200);
    for sink in ["a.sum", "b.sum"] {
        let lines = sum_lines(&dir.join(sink));
        assert_eq!(lines.len(), 200, "{sink}");
        for (i, (seq, hash)) in lines.iter().enumerate() {
            assert_eq!(*seq, i as u64, "{sink}");
            assert_eq!(hash, &made[seq], "{sink} frame {seq}");
        }
    }
    let r = report(&dir);
    assert_eq!(stage_row(&r, "c")["frames"], 200);
    assert_eq!(stage_row(&r, "c")["dropped"], 0);
}

/// Frames a dropping consumer got: in increasing order, intact, the last one included, and
/// received + dropped = sent.
fn check_dropping_consumer(dir: &Path, stage: &str, sent: u64) {
    let made = made_by(dir, "gen");
    let got = sum_lines(&dir.join("sums").join(format!("{stage}.sum")));
    assert!(!got.is_empty(), "{stage} received nothing");
    for pair in got.windows(2) {
        assert!(pair[0].0 < pair[1].0, "{stage}: {} then {}", pair[0].0, pair[1].0);
    }
    for (seq, hash) in &got {
        assert_eq!(hash, &made[seq], "{stage}: frame {seq} differs from what the generator made");
    }
    assert_eq!(got.last().unwrap().0, sent - 1, "{stage} must end with the last frame");
    let r = report(dir);
    let s = stage_row(&r, stage);
    let received = s["frames"].as_u64().unwrap();
    assert_eq!(received, got.len() as u64);
    assert_eq!(received + s["dropped"].as_u64().unwrap(), sent, "{stage}: {s}");
}

fn policy_pipeline(policy: &str) -> String {
    format!(
        r#"
[pipeline]
frames = 300
[[stage]]
name = "gen"
plugin = "generator"
depth = 3
params = {{ width = 64, height = 64, pattern = "gradient" }}
[[stage]]
name = "all"
plugin = "checksum"
inputs = ["gen"]
params = {{ path = "all.sum" }}
[[stage]]
name = "slow"
plugin = "test-faulty"
inputs = ["gen"]
policy = "{policy}"
params = {{ delay_us = 500 }}
[[stage]]
name = "tail"
plugin = "null"
inputs = ["slow"]
"#
    )
}

#[test]
fn block_policy_loses_nothing() {
    let dir = scratch("policy-block");
    let file = pipeline(&dir, "p.toml", &policy_pipeline("block"));
    run_ok(&dir, &file, &SUMS_AND_REPORT);
    check_dropping_consumer(&dir, "slow", 300);
    let r = report(&dir);
    assert_eq!(stage_row(&r, "slow")["dropped"], 0);
    assert_eq!(stage_row(&r, "slow")["frames"], 300);
}

#[test]
fn drop_oldest_and_latest_never_hold_the_producer_and_account_for_every_frame() {
    for policy in ["drop_oldest", "latest"] {
        let dir = scratch(&format!("policy-{policy}"));
        let file = pipeline(&dir, "p.toml", &policy_pipeline(policy));
        run_ok(&dir, &file, &SUMS_AND_REPORT);
        // The blocking consumer beside the dropping one still gets everything, intact.
        let made = made_by(&dir, "gen");
        let all = sum_lines(&dir.join("all.sum"));
        assert_eq!(all.len(), 300, "{policy}");
        assert!(all.iter().enumerate().all(|(i, (seq, h))| *seq == i as u64 && h == &made[seq]), "{policy}");
        check_dropping_consumer(&dir, "slow", 300);
        // The link after the dropping one loses nothing, though its sequence numbers have gaps.
        assert_eq!(stage_row(&report(&dir), "tail")["dropped"], 0, "{policy}");
        // What the slow stage passed on is what it was given.
        let slow = made_by(&dir, "slow");
        for (seq, hash) in sum_lines(&dir.join("sums/tail.sum")) {
            assert_eq!(hash, "-");
            assert!(slow.contains_key(&seq), "{policy}: tail got frame {seq} that slow never made");
        }
    }
}

#[test]
fn fan_in_aligns_inputs_by_sequence_number_even_when_one_branch_drops() {
    let dir = scratch("fan-in-drops");
    let file = pipeline(
        &dir,
        "p.toml",
        r#"
[pipeline]
frames = 200
[[stage]]
name = "gen"
plugin = "generator"
depth = 3
params = { width = 32, height = 32, pattern = "noise", seed = 3 }
[[stage]]
name = "slow"
plugin = "test-faulty"
inputs = ["gen"]
policy = "latest"
params = { delay_us = 300 }
[[stage]]
name = "fast"
plugin = "test-faulty"
inputs = ["gen"]
[[stage]]
name = "join"
plugin = "checksum"
inputs = ["slow", "fast"]
params = { path = "join.sum" }
"#,
    );
    run_ok(&dir, &file, &SUMS_AND_REPORT);
    let made = made_by(&dir, "gen");
    let lines = sum_lines(&dir.join("join.sum"));
    assert!(!lines.is_empty());
    let mut last = None;
    for (seq, hashes) in &lines {
        assert!(last < Some(*seq), "join: {last:?} then {seq}");
        last = Some(*seq);
        let hashes: Vec<&str> = hashes.split(' ').collect();
        assert_eq!(hashes.len(), 2);
        assert_eq!(hashes[0], made[seq], "join frame {seq}, input slow");
        assert_eq!(hashes[1], made[seq], "join frame {seq}, input fast");
    }
    assert_eq!(last, Some(199), "the last frame reaches the join");
}
