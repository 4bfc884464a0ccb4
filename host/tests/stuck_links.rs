//! A run in which no frame moves (issue 25, item 10): a ring's control block written over from
//! outside stopped every stage in a wait, pulsing its heartbeat at 0 % CPU; the per-stage
//! watchdog never fired, and a Ctrl-C drained for ever. The host now fails such a run naming
//! the links that stopped, and gives up a drain that moves nothing.
//!
//! How the run is stopped, for certain: bytes 256..4096 of the `gen -> grade` ring's control
//! block (its producer's and consumers' words, and its slots', up to slot 10) are written over
//! with seeded random bytes, except two kinds of words, which are chosen:
//!
//! - every slot's state word has its WRITING bit set. A producer takes only a slot without it,
//!   a consumer claims only a slot without it, and only the producer that took a slot clears
//!   it, by publishing it or giving it back: so if `gen` holds no slot when the bytes land,
//!   no slot is ever taken or read again, and every wait on the ring sleeps for ever. Random
//!   state words did stop the run in the issue, but not every time: a slot `gen` held at that
//!   moment was published by it over the random word, and the ring went on with that slot.
//!   So `grade` is stopped (SIGSTOP) first, and the bytes are written once `gen` has filled
//!   the ring and waits for a slot (every slot published and unread, or held by `grade`);
//!   then `grade` goes on. Its claim on a slot, if it held one, is cleared by a `fetch_and`
//!   that leaves the WRITING bit;
//! - `closed` is not END_OF_STREAM or ABORTED (these would end or abort the stream: another
//!   way to fail); any other value reads as open.
//!
//! The other random words (publish count, `seq_end`, futex words and sleeper counts, epochs,
//! consumers' positions and counts) do not stop the run by themselves, and nothing reads them
//! once no slot moves. The offsets are the header's layout (`link::header`), pinned by the
//! unit test `supervisor::standstill::tests::the_offsets_the_stuck_links_test_writes_at`.

mod common;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

use common::*;
use rustix::process::{Pid, Signal};

/// `gen -> grade -> sink`, with a 2 s stall timeout (the run's watchdog uses it too).
const CHAIN: &str = r#"
[pipeline]
name = "stuck"
stall_timeout = "2s"
[[stage]]
name = "gen"
plugin = "generator"
depth = 2
params = { width = 48, height = 32, pattern = "box" }
[[stage]]
name = "grade"
plugin = "test-faulty"
inputs = ["gen"]
[[stage]]
name = "sink"
plugin = "null"
inputs = ["grade"]
"#;

/// The bytes written over, from the start of the control block.
const OVER: std::ops::Range<u64> = 256..4096;
/// `ProducerState::published` and `StreamState::closed`, from the start of the control block.
const PUBLISHED: u64 = 256;
const CLOSED: u64 = 320;
/// Slot 0's state word, and the distance from one slot's to the next.
const SLOTS: u64 = 1472;
const SLOT_STRIDE: u64 = 256;
const DEPTH: u64 = 2;
const WRITING: u64 = 1 << 32;
const ABORTED: u32 = 2;
/// The seed of the random bytes.
const SEED: u64 = 0x2510_2026;

/// The control block of the ring named `gen`'s in the host `host`, opened read-write through
/// a descriptor stage `holder` holds (a memfd has no other name).
fn open_ring(host: u32, holder: Pid) -> File {
    let name = format!("/memfd:gpuipc-{host}-ring-gen");
    let fds = format!("/proc/{}/fd", holder.as_raw_nonzero());
    let fd = std::fs::read_dir(&fds)
        .unwrap()
        .flatten()
        // Not its frames' memfd beside it (`…-ring-gen-data`).
        .find(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|t| [name.clone(), format!("{name} (deleted)")].contains(&t.to_string_lossy().into_owned()))
        })
        .unwrap_or_else(|| panic!("no {name} among {fds}"));
    OpenOptions::new().read(true).write(true).open(fd.path()).unwrap()
}

fn word(ring: &File, at: u64) -> u64 {
    let mut bytes = [0u8; 8];
    ring.read_exact_at(&mut bytes, at).unwrap();
    u64::from_le_bytes(bytes)
}

/// Whether the producer can take no slot now, and holds none: each is published and pending
/// for the consumer, or claimed by it.
fn full(ring: &File) -> bool {
    (0..DEPTH).all(|i| {
        let st = word(ring, SLOTS + i * SLOT_STRIDE);
        st & WRITING == 0 && st & 0xffff_ffff != 0
    })
}

/// Whether every thread of process `pid` is stopped (SIGSTOP).
fn stopped(pid: Pid) -> bool {
    let tasks = format!("/proc/{}/task", pid.as_raw_nonzero());
    std::fs::read_dir(tasks).unwrap().flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command's name, which is in parentheses and may hold any.
        stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('T'))
    })
}

/// The bytes written over `OVER` (see the module's comment).
fn garbage() -> Vec<u8> {
    let mut dice = Dice(SEED);
    let mut bytes: Vec<u8> = OVER.map(|_| dice.roll(256) as u8).collect();
    let at = |offset: u64| (offset - OVER.start) as usize;
    for i in 0..DEPTH {
        let o = at(SLOTS + i * SLOT_STRIDE);
        let st = u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) | WRITING;
        bytes[o..o + 8].copy_from_slice(&st.to_le_bytes());
    }
    let c = at(CLOSED);
    let closed = u32::from_le_bytes(bytes[c..c + 4].try_into().unwrap());
    if closed <= ABORTED {
        bytes[c..c + 4].copy_from_slice(&(closed + ABORTED + 1).to_le_bytes());
    }
    bytes
}

/// Start the chain, write over its `gen -> grade` ring as the module says, and return the
/// run with `grade` stopped still when `keep_stopped`, else going on.
fn start_and_write_over(name: &str, keep_stopped: bool) -> (Running, Pid) {
    let dir = scratch(name);
    let file = pipeline(&dir, "p.toml", CHAIN);
    let host = start_running(&dir, &file, &[]);
    let grade = pid_of(host.pid(), "grade");
    let ring = open_ring(host.pid(), grade);
    // Mid-run, as in the issue.
    wait_until(RUN_TIMEOUT, "1,000 frames published by 'gen'", || word(&ring, PUBLISHED) >= 1000);
    rustix::process::kill_process(grade, Signal::STOP).unwrap();
    wait_until(RUN_TIMEOUT, "'grade' stopped", || stopped(grade));
    wait_until(RUN_TIMEOUT, "'gen' waiting for a slot of a full ring", || full(&ring));
    ring.write_all_at(&garbage(), OVER.start).unwrap();
    if !keep_stopped {
        rustix::process::kill_process(grade, Signal::CONT).unwrap();
    }
    (host, grade)
}

/// The run fails by itself, naming the links that stopped, what each end waits for, and
/// the ring whose control block was written over.
#[test]
fn a_run_where_no_frame_moves_fails_naming_the_links_that_stopped() {
    let (host, _) = start_and_write_over("stuck-run", false);
    let run = host.finish(RUN_TIMEOUT);
    let said = "run 'stuck' stopped: no frame moved on any link for 2.0 s while every stage waited for one: \
                link 'gen -> grade' (2 of its 2 slots in use): producer 'gen' waits for a free slot, consumer 'grade' waits for a frame; \
                its control block holds words no end writes (";
    run.assert_ended(1, said);
    assert!(run.stdout.contains("): it was written over; link 'grade -> sink' ("), "{}", run.output());
    assert!(
        run.stdout.contains("producer 'grade' waits for a frame on its input, consumer 'sink' waits for a frame"),
        "{}",
        run.output()
    );
}

/// A stop signal after the bytes landed asks for a drain that cannot finish (`gen` never gets
/// the slot it waits for, so it never sees the stop): the host gives it up and aborts, saying
/// so and naming what still holds frames. The signal is sent while `grade` is still stopped
/// (its wait stands still, so the run is not yet seen stuck) and `grade` goes on once the
/// host has begun the drain, so the drain is what ends the run.
#[test]
fn a_drain_that_cannot_finish_is_aborted_saying_so() {
    let (mut host, grade) = start_and_write_over("stuck-drain", true);
    host.signal(Signal::INT);
    host.wait_for_stderr("the pipeline drains; signal again to abort", RUN_TIMEOUT);
    rustix::process::kill_process(grade, Signal::CONT).unwrap();
    let run = host.finish(RUN_TIMEOUT);
    let said = "run 'stuck' stopped: a stop signal asked for a drain, which did not finish: no frame moved on any link for 2.0 s; aborted: \
                link 'gen -> grade' (2 of its 2 slots in use): producer 'gen' waits for a free slot, consumer 'grade' waits for a frame; \
                its control block holds words no end writes (";
    run.assert_ended(1, said);
}

/// The pipeline of these tests drains whole when its rings are sound: the drain's bound does
/// not cut a drain that moves.
#[test]
fn the_same_pipeline_drains_when_its_rings_are_sound() {
    let dir = scratch("stuck-sound");
    let file = pipeline(&dir, "p.toml", CHAIN);
    let host = start_running(&dir, &file, &[]);
    host.signal(Signal::INT);
    let run = host.finish(RUN_TIMEOUT);
    run.assert_ended(0, "run 'stuck' stopped by a stop signal and drained");
}

/// A source paced slower than the stall timeout (its own watchdog off), with every other
/// stage waiting for it: no link moves for longer than the timeout, and the run is not stuck.
#[test]
fn a_source_slower_than_the_stall_timeout_is_not_stuck() {
    let dir = scratch("stuck-paced");
    let text = CHAIN
        .replace("stall_timeout = \"2s\"", "stall_timeout = \"300ms\"\nframes = 3")
        .replace("pattern = \"box\" }", "pattern = \"box\", fps = 1.0 }\nstall_timeout = \"off\"");
    let file = pipeline(&dir, "p.toml", &text);
    let run = run_file(&dir, &file, &[]);
    run.assert_ended(0, "run 'stuck' finished");
}
