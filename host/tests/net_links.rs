//! Links between hosts, on one machine: two `gpuipc-host run` processes on 127.0.0.1, one
//! running `generator -> tcp-send`, the other `tcp-receive -> null`. What crosses is checked
//! frame by frame against an in-process reference run; a sender or receiver killed mid-run
//! restarts and the link reconnects, losing only counted frames and delivering only right ones.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use rustix::process::Signal;

const LINK: &str = "gen->b";

/// The producer's host: a 64x48 generator into a tcp-send to `port`; `frames`: a `frames =`
/// line or nothing (run until stopped).
fn sender(port: u16, frames: &str, size: (u32, u32), extra: &str) -> String {
    let (w, h) = size;
    format!(
        r#"
[pipeline]
name = "a"
device = "cpu"
restart_backoff = "1ms"
{frames}
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = {w}, height = {h}, pattern = "gradient" }}

[[stage]]
name = "gen-to-b"
plugin = "tcp-send"
inputs = ["gen"]
{extra}
params = {{ to = "127.0.0.1:{port}", link = "{LINK}", connect_timeout_s = 20.0 }}
"#
    )
}

/// The consumer's host: a tcp-receive named like the producer on `port`, into a null sink.
fn receiver(port: u16, size: (u32, u32), timeout_s: f64, extra: &str) -> String {
    let (w, h) = size;
    format!(
        r#"
[pipeline]
name = "b"
device = "cpu"
restart_backoff = "1ms"

[[stage]]
name = "gen"
plugin = "tcp-receive"
{extra}
params = {{ listen = "127.0.0.1:{port}", link = "{LINK}", format = "rgb8", width = {w}, height = {h}, reconnect_timeout_s = {timeout_s:?} }}

[[stage]]
name = "sink"
plugin = "null"
inputs = ["gen"]
"#
    )
}

/// The generator's first `frames` frames of 64x48 made in one process: seq → hash.
fn reference(dir: &Path, frames: u64) -> BTreeMap<u64, String> {
    reference_of(dir, frames, (64, 48))
}

/// The generator's first `frames` frames of `size` made in one process: seq → hash.
fn reference_of(dir: &Path, frames: u64, size: (u32, u32)) -> BTreeMap<u64, String> {
    let (w, h) = size;
    let text = format!(
        r#"
[pipeline]
name = "reference"
device = "cpu"
[[stage]]
name = "gen"
plugin = "generator"
params = {{ width = {w}, height = {h}, pattern = "gradient" }}
[[stage]]
name = "sink"
plugin = "null"
inputs = ["gen"]
"#
    );
    let file = pipeline(dir, "reference.toml", &text);
    sums_by_seq(&reference_run(dir, &file, Some(frames)).join("gen.sum"))
}

/// Frames counted lost or dropped by every stage of a run's report.
fn counted(report: &serde_json::Value) -> u64 {
    report["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["lost"].as_u64().unwrap() + s["dropped"].as_u64().unwrap())
        .sum()
}

/// Start the receiver's run, then the sender's, in `dir`/b and `dir`/a.
fn start_both(dir: &Path, sender_text: &str, receiver_text: &str, sender_args: &[&str]) -> (Running, Running) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let rfile = pipeline(&b, "p.toml", receiver_text);
    let sfile = pipeline(&a, "p.toml", sender_text);
    let receiving = start_running(&b, &rfile, &SUMS_AND_REPORT);
    let mut args = vec!["run", sfile.to_str().unwrap(), "--quiet", "--report", "report.json", "--checksums", "sums"];
    args.extend_from_slice(sender_args);
    let sending = start(&a, &args);
    (sending, receiving)
}

#[test]
fn frames_cross_between_two_runs_exactly_as_one_process_makes_them() {
    let dir = scratch("net-plain");
    let port = free_ports(1);
    let (sending, mut receiving) =
        start_both(&dir, &sender(port, "frames = 60", (64, 48), ""), &receiver(port, (64, 48), 20.0, ""), &[]);
    receiving.wait_for_stderr(&format!("link '{LINK}': connection 1 from 127.0.0.1:"), RUN_TIMEOUT);
    let sent = sending.finish(RUN_TIMEOUT);
    let received = receiving.finish(RUN_TIMEOUT);
    assert_eq!(sent.status.code(), Some(0), "{}", sent.output());
    assert_eq!(received.status.code(), Some(0), "{}", received.output());
    assert!(received.stderr.contains(&format!(" to 127.0.0.1:{port}")), "{}", received.output());

    let want = reference(&dir, 60);
    assert_eq!(want.len(), 60);
    // The receiving source relays each frame under its own number; the sink behind it gets
    // every one, in order.
    assert_eq!(sums_by_seq(&dir.join("b/sums/gen.sum")), want);
    let sink = sum_lines(&dir.join("b/sums/sink.sum"));
    assert_eq!(sink.iter().map(|(s, _)| *s).collect::<Vec<_>>(), (0..60).collect::<Vec<u64>>());
    assert_eq!(sums_by_seq(&dir.join("a/sums/gen.sum")), want);
    assert_nothing_left(sent.pid);
    assert_nothing_left(received.pid);
}

/// Wait until the tap at `path` has at least `n` lines, at most `RUN_TIMEOUT`: the frames
/// crossed. (A bounded wait on what the runs wrote; the taps are written a line per frame.)
fn wait_for_frames(path: &Path, n: usize) -> usize {
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    loop {
        let lines = std::fs::read_to_string(path).map_or(0, |t| t.lines().count());
        if lines >= n {
            return lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} has {lines} frames, not {n}, after {RUN_TIMEOUT:?}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// What a fault test does to the link once frames flow.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// SIGKILL the sender stage; its host restarts it.
    KillSender,
    /// SIGKILL the receiver stage; its host restarts it.
    KillReceiver,
    /// SIGSTOP the sender stage: to the receiver its connection goes silent, with no FIN or
    /// reset (a half-open connection); the receiver's stall watchdog kills it and its host
    /// restarts it; then SIGCONT: the sender finds its connection gone and connects again.
    FreezeSender,
}

/// Do `fault` to the link once frames flow, wait for the restart and the link's new
/// connection, stop the sender's run, and check the books of both runs.
fn fault_and_check(name: &str, fault: Fault) {
    fault_and_check_of(name, fault, (64, 48), "")
}

/// [`fault_and_check`] with frames of `size` and `more` params of the sender (`, connections = 3`).
fn fault_and_check_of(name: &str, fault: Fault, size: (u32, u32), more: &str) {
    let dir = scratch(name);
    let port = free_ports(1);
    let restart = "restart = \"on-failure\"";
    // A frozen sender must outlast the receiver's watchdog, not meet its own.
    let frozen = "restart = \"on-failure\"\nstall_timeout = \"2s\"\nmax_restarts = 20";
    let (s_extra, r_extra) = match fault {
        Fault::KillSender => (restart, ""),
        Fault::KillReceiver => ("", restart),
        Fault::FreezeSender => ("stall_timeout = \"off\"", frozen),
    };
    // With the sender alive, a window of frames in flight goes again whole after the
    // receiver's restart. A killed sender loses its window's frames still in its kernel's
    // send buffer, uncounted (docs/plugins.md, tcp-send): that fault runs the default, 1.
    let mut sender_text = sender(port, "", size, s_extra);
    if fault != Fault::KillSender {
        sender_text = sender_text.replace("connect_timeout_s = 20.0 }", "connect_timeout_s = 20.0, window = 4 }");
        assert!(sender_text.contains("window = 4"));
    }
    sender_text = sender_text.replace("connect_timeout_s = 20.0", &format!("connect_timeout_s = 20.0{more}"));
    let (mut sending, mut receiving) = start_both(&dir, &sender_text, &receiver(port, size, 20.0, r_extra), &[]);
    receiving.wait_for_stderr(&format!("link '{LINK}': connection 1 from"), RUN_TIMEOUT);
    // A stage killed before it is ready is not restarted (it never started): wait for both.
    sending.wait_for_stderr("stages ready; running", RUN_TIMEOUT);
    let published = dir.join("b/sums/gen.sum");
    wait_for_frames(&published, 100);
    match fault {
        Fault::KillSender => {
            rustix::process::kill_process(pid_of(sending.pid(), "gen-to-b"), Signal::KILL).unwrap();
            sending.wait_for_stderr("stage 'gen-to-b' restarted (restart 1)", RUN_TIMEOUT);
        }
        Fault::KillReceiver => {
            rustix::process::kill_process(pid_of(receiving.pid(), "gen"), Signal::KILL).unwrap();
            receiving.wait_for_stderr("stage 'gen' restarted (restart 1)", RUN_TIMEOUT);
        }
        Fault::FreezeSender => {
            let frozen = pid_of(sending.pid(), "gen-to-b");
            rustix::process::kill_process(frozen, Signal::STOP).unwrap();
            receiving.wait_for_stderr("stalled: no progress for 2.0 s", RUN_TIMEOUT);
            receiving.wait_for_stderr("stage 'gen' restarted (restart 1)", RUN_TIMEOUT);
            rustix::process::kill_process(frozen, Signal::CONT).unwrap();
        }
    }
    // A restarted receiver counts its connections from 1 again; a sender's new one is the
    // receiver's second.
    let again = format!("link '{LINK}': connection {} from", if fault == Fault::KillSender { 2 } else { 1 });
    receiving.wait_for_stderr(&again, RUN_TIMEOUT);
    let before = std::fs::read_to_string(&published).unwrap().lines().count();
    wait_for_frames(&published, before + 100);
    // The link carries frames again: stop the source's run; its end of stream ends the other.
    sending.signal(Signal::TERM);
    let sent = sending.finish(RUN_TIMEOUT);
    let received = receiving.finish(RUN_TIMEOUT);
    assert_eq!(sent.status.code(), Some(0), "{}", sent.output());
    assert_eq!(received.status.code(), Some(0), "{}", received.output());
    assert!(received.stderr.contains(&again), "{}", received.output());
    if fault == Fault::FreezeSender {
        // The sender was never restarted: it reconnected by itself and sent its window again.
        assert!(!sent.stderr.contains("restarted (restart"), "{}", sent.output());
        assert!(sent.stderr.contains(&format!("link '{LINK}': connection 2 to 127.0.0.1:{port}")), "{}", sent.output());
    }

    let made = sums_by_seq(&dir.join("a/sums/gen.sum"));
    let produced = made.len() as u64;
    assert_eq!(
        made.keys().copied().collect::<Vec<_>>(),
        (0..produced).collect::<Vec<_>>(),
        "the source made every number once"
    );
    let delivered = sum_lines(&dir.join("b/sums/sink.sum"));
    let seqs: Vec<u64> = delivered.iter().map(|(s, _)| *s).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "the sink got each frame once, in order: {seqs:?}");
    let lost = counted(&report(&dir.join("a"))) + counted(&report(&dir.join("b")));
    // A sender's host marks a frame done when its `process` has returned (its tap line is the
    // last thing before): a sender killed after the frame's last byte went out and before
    // that has it delivered and counted lost both. At most the one frame it was taking, and
    // it shows as a frame the sink got that the sender never tapped.
    let sender_done: std::collections::BTreeSet<u64> =
        sum_lines(&dir.join("a/sums/gen-to-b.sum")).iter().map(|(s, _)| *s).collect();
    let twice: Vec<u64> = seqs.iter().copied().filter(|s| !sender_done.contains(s)).collect();
    let most = if fault == Fault::KillSender { 1 } else { 0 };
    assert!(twice.len() <= most, "frames delivered that the sender never finished: {twice:?}");
    assert_eq!(
        produced + twice.len() as u64,
        seqs.len() as u64 + lost,
        "produced = delivered + lost (less {twice:?}, delivered and counted lost)\n{}\n{}",
        sent.stdout,
        received.stdout
    );
    if fault != Fault::KillSender {
        // The sender lived: its window went again over the new connection, and nothing was lost.
        assert_eq!(lost, 0, "{}\n{}", sent.stdout, received.stdout);
    }
    // What the receiving source published (a sink's tap has no hashes): every frame the
    // reference's, and every frame the sink got among them.
    let want = reference_of(&dir, produced, size);
    let relayed = sums_by_seq(&dir.join("b/sums/gen.sum"));
    for (seq, hash) in &relayed {
        assert_eq!(want.get(seq), Some(hash), "frame {seq} differs from the in-process reference");
    }
    assert!(seqs.iter().all(|s| relayed.contains_key(s)), "the sink got frames the receiver never published");
    assert_nothing_left(sent.pid);
    assert_nothing_left(received.pid);
}

#[test]
fn a_killed_sender_restarts_and_the_link_reconnects() {
    fault_and_check("net-kill-sender", Fault::KillSender);
}

#[test]
fn a_killed_receiver_restarts_and_the_link_reconnects() {
    fault_and_check("net-kill-receiver", Fault::KillReceiver);
}

/// Frames of 1024x512 (1.5 MiB: each stripe written and read by a thread of its own) over three
/// connections; the receiver killed: the sender's new set of connections takes its window again.
#[test]
fn a_killed_receiver_of_a_link_of_three_connections_restarts_and_large_frames_come_whole() {
    fault_and_check_of("net-kill-receiver-3", Fault::KillReceiver, (1024, 512), ", connections = 3");
}

/// As above, the sender killed.
#[test]
fn a_killed_sender_of_a_link_of_three_connections_restarts_and_large_frames_come_whole() {
    fault_and_check_of("net-kill-sender-3", Fault::KillSender, (1024, 512), ", connections = 3");
}

#[test]
fn a_half_open_connection_is_caught_by_the_receivers_watchdog_and_healed_by_its_restart() {
    fault_and_check("net-half-open", Fault::FreezeSender);
}

#[test]
fn a_format_mismatch_fails_both_ends_naming_both_formats_and_the_link() {
    let dir = scratch("net-mismatch");
    let port = free_ports(1);
    let (sending, receiving) =
        start_both(&dir, &sender(port, "frames = 5", (32, 32), ""), &receiver(port, (64, 64), 20.0, ""), &[]);
    let sent = sending.finish(RUN_TIMEOUT);
    let received = receiving.finish(RUN_TIMEOUT);
    let why = format!("link '{LINK}': the sender sends rgb8 32x32 (");
    for (run, end) in [(&sent, "sender"), (&received, "receiver")] {
        assert_eq!(run.status.code(), Some(1), "{end}: {}", run.output());
        assert!(run.stdout.contains(&why), "{end}: {}", run.output());
        assert!(run.stdout.contains("the receiver expects rgb8 64x64 ("), "{end}: {}", run.output());
    }
    assert!(
        sent.stdout.contains(&format!("the receiver at 127.0.0.1:{port} refused the connection")),
        "{}",
        sent.output()
    );
    assert_nothing_left(sent.pid);
    assert_nothing_left(received.pid);
}

#[test]
fn a_receiver_nobody_connects_to_fails_naming_its_address() {
    let dir = scratch("net-nobody");
    let port = free_ports(1);
    let file = pipeline(&dir, "p.toml", &receiver(port, (64, 48), 0.3, ""));
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(1, &format!("no sender connected to 127.0.0.1:{port} for link '{LINK}' within 0.3 s"));
}
