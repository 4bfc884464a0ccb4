//! The run's watchdog over its links: a run in which no frame moves on any link while every
//! stage waits for one will never move again, and a drain that moves nothing will never end.
//! The per-stage watchdog ([`super::watchdog`]) sees neither: a waiting stage pulses its
//! heartbeat every sleep slice, however long it waits (issue 25: a ring's control block
//! written over stopped every stage in a wait, at 0 % CPU, and the run waited for ever).
//!
//! When nothing can move, for certain: every process of the run not yet over is running its
//! frame loop (none starting, restarting or being killed: the host is not changing anything)
//! and, at every look for a whole stall timeout, was waiting on a ring (for a frame, or for a
//! slot to write into); each of them pulsed its heartbeat meanwhile (its wait runs: a stage
//! that stopped itself is the per-stage watchdog's to name); and no word that a frame's
//! passage changes moved on any ring (a publish, a take, a claim, a release, a close: the
//! publish count and `seq_end`, `closed`, each consumer's position and counts, each slot's
//! state word), nor any stage's frame count. A stage leaves a ring wait only when a word of
//! that ring changes or the host aborts the run, and every process that could change one
//! waits too, so no frame will ever move again.
//!
//! What does not look stuck: legitimate slowness always has a stage outside a ring wait. A
//! paced source (`fps`, `realtime` video) waits for its frame's time inside the plugin's
//! `process`; a live camera with no frame to give waits there too, returning now and then
//! with none (`STATUS_NO_FRAME`: its heartbeat pulses, so the per-stage watchdog, which
//! governs it there, sees it alive); `bench` pacing waits before the frame, in the phase of the last one ("in the
//! plugin's process"); a slow plugin is in `process`; a `latest` join waits for a branch whose
//! stage is in `process` or for a source that is; replicas wait for their turn after
//! `process`, in that phase too. Phases are sampled, but a stage that left its wait between
//! two looks moved a frame, which the words show.
//!
//! A drain is held to less: once a stop signal has asked sources to end their streams, it is
//! given up when no word moved for the stall timeout (counted from the drain's start at the
//! earliest) whatever the stages are doing, except while one whose own watchdog is off is in
//! its plugin (which may take as long as it takes) or while the host starts or restarts a
//! process. A stage with a watchdog is killed by it before its plugin holds a frame (or its
//! flush lasts) that long, so a drain that moves nothing for that long is one whose stages
//! wait for what will never come: a source waiting for a slot of a broken ring never gets to
//! the stop.
//!
//! The timeout is the longest `stall_timeout` of the run's stages (a stage's own watchdog
//! bounds each of its frames by its own, so no hop of a frame takes longer); with every
//! stage's watchdog off (`stall_timeout = "off"`), neither check runs.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::config::format_duration;
use crate::link::header::{self, ABORTED, WRITING};
use crate::link::stats::{PHASE_FLUSH, PHASE_PROCESS, PHASE_WAITING_INPUT, PHASE_WAITING_OUTPUT, phase_name};
use crate::link::{RingMap, StatsMap};
use crate::plan::{Plan, ProcessPlan};

/// One process of the run as the watch loop sees it at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// Over for this run: it moves nothing any more.
    Ended,
    /// Its frame loop runs, in `phase` (`PHASE_*`), its heartbeat at `heartbeat`; `watchdog`:
    /// whether its own stall watchdog is on.
    Running { phase: u32, heartbeat: u64, watchdog: bool },
    /// Starting, restarting, or killed and not yet reaped: the host is changing the run.
    Changing,
}

/// What the watch found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every process left waits on a ring that nobody will change: nothing will ever move.
    Stuck,
    /// A drain moved nothing for the timeout: it will not finish.
    DrainStopped,
}

/// The run-level watch: what the links looked like when they last moved, and since when.
#[derive(Debug)]
pub struct Standstill {
    timeout: Duration,
    seen: Vec<u64>,
    since: Instant,
    /// Each process's heartbeat when the window began (`None`: not running then).
    beats: Vec<Option<u64>>,
    /// Whether the window is a drain's: a drain gets a whole window of its own.
    draining: bool,
}

impl Standstill {
    pub fn new(timeout: Duration, now: Instant) -> Standstill {
        Standstill { timeout, seen: Vec::new(), since: now, beats: Vec::new(), draining: false }
    }

    /// The run's timeout: the longest stall timeout of its stages; `None` when no stage has
    /// a watchdog, or the run has no link to watch.
    pub fn timeout_of(plan: &Plan) -> Option<Duration> {
        if plan.links.is_empty() {
            return None;
        }
        plan.stages.iter().filter_map(|s| s.supervision.stall_timeout).max()
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Look once: `words`, the links' words ([`words`]); `processes`, where each process of
    /// the run stands; `draining`, whether a stop signal asked for a drain. `Some` once the
    /// run is stuck (see the module's rules).
    pub fn look(&mut self, words: &[u64], processes: &[Process], draining: bool, now: Instant) -> Option<Verdict> {
        let beats: Vec<Option<u64>> = processes
            .iter()
            .map(|p| match *p {
                Process::Running { heartbeat, .. } => Some(heartbeat),
                _ => None,
            })
            .collect();
        let anyone_left = processes.iter().any(|p| *p != Process::Ended);
        let may_move = processes.iter().any(|p| match *p {
            Process::Ended => false,
            Process::Changing => true,
            Process::Running { phase, watchdog, .. } if draining => {
                !watchdog && matches!(phase, PHASE_PROCESS | PHASE_FLUSH)
            }
            Process::Running { phase, .. } => !matches!(phase, PHASE_WAITING_INPUT | PHASE_WAITING_OUTPUT),
        });
        let changed = words != self.seen.as_slice() || beats.len() != self.beats.len() || draining != self.draining;
        if changed || !anyone_left || may_move {
            self.seen = words.to_vec();
            self.since = now;
            self.beats = beats;
            self.draining = draining;
            return None;
        }
        if now.duration_since(self.since) < self.timeout {
            return None;
        }
        if draining {
            return Some(Verdict::DrainStopped);
        }
        // Every wait ran through the window. One that stood still belongs to a stage that
        // stopped itself (SIGSTOP): its own watchdog names it; until then, not stuck.
        let all_pulsed = beats.iter().zip(&self.beats).all(|(now, then)| now.is_none() || now != then);
        all_pulsed.then_some(Verdict::Stuck)
    }
}

/// The words of every ring that a frame's passage changes, and every process's frame count:
/// two equal lists, nothing moved between them. Each word is only compared, never trusted.
pub fn words(rings: &[RingMap], stats: &[StatsMap]) -> Vec<u64> {
    let mut out = Vec::new();
    for ring in rings {
        let h = ring.header();
        let p = &h.producer.0;
        out.push(p.published.load(Ordering::Relaxed));
        out.push(p.seq_end.load(Ordering::Relaxed));
        out.push(h.stream.0.closed.load(Ordering::Relaxed) as u64);
        // Counts and depth from the ring's checked copy, not from the shared header.
        for c in 0..ring.n_consumers() {
            let c = &h.consumers[c].0;
            out.extend([&c.next_seq, &c.next_ordinal, &c.received, &c.dropped].map(|w| w.load(Ordering::Relaxed)));
        }
        out.extend((0..ring.depth()).map(|i| h.slots[i].0.state.load(Ordering::Relaxed)));
    }
    out.extend(stats.iter().map(|s| s.get().frames.load(Ordering::Relaxed)));
    out
}

/// The message of a verdict: how long nothing moved, and for each link, what its ends wait
/// for, how many of its slots are in use, and whether its control block holds words that no
/// end writes (written over from outside, or by a stage's stray write). `signal`: what asked
/// for the drain.
pub fn explain(verdict: Verdict, timeout: Duration, signal: &str, run: Run<'_>) -> String {
    let links = (0..run.plan.links.len()).map(|l| describe_link(&run, l)).collect::<Vec<_>>().join("; ");
    let still = format_duration(timeout);
    match verdict {
        Verdict::Stuck => format!("no frame moved on any link for {still} while every stage waited for one: {links}"),
        Verdict::DrainStopped => {
            format!(
                "{signal} asked for a drain, which did not finish: no frame moved on any link for {still}; aborted: {links}"
            )
        }
    }
}

/// What [`explain`] reads.
pub struct Run<'a> {
    pub plan: &'a Plan,
    pub procs: &'a [ProcessPlan],
    pub rings: &'a [RingMap],
    pub stats: &'a [StatsMap],
    /// Where each process stands, as in [`Standstill::look`].
    pub processes: &'a [Process],
}

/// Which end of a link a process is.
#[derive(Clone, Copy)]
enum End {
    Producer,
    Consumer,
}

fn describe_link(run: &Run<'_>, l: usize) -> String {
    let link = &run.plan.links[l];
    let ring = &run.rings[l];
    let ends: Vec<String> = std::iter::once((link.producer, End::Producer))
        .chain(link.consumers.iter().map(|&c| (c, End::Consumer)))
        .flat_map(|(stage, end)| {
            run.procs.iter().enumerate().filter(move |(_, p)| p.stage == stage).map(move |(i, _)| (i, end))
        })
        .map(|(i, end)| {
            let role = match end {
                End::Producer => "producer",
                End::Consumer => "consumer",
            };
            format!("{role} '{}' {}", run.procs[i].name, waits_for(run, i, end))
        })
        .collect();
    let h = ring.header();
    let in_use = (0..ring.depth())
        .filter(|&i| {
            let st = h.slots[i].0.state.load(Ordering::Relaxed);
            st & WRITING != 0 || header::claims(st) != 0 || header::pendings(st) != 0
        })
        .count();
    let mut out = format!(
        "link '{}' ({in_use} of its {} slots in use): {}",
        run.plan.link_name(l),
        ring.depth(),
        ends.join(", ")
    );
    let bad = written_over(ring);
    if !bad.is_empty() {
        out += &format!("; its control block holds words no end writes ({}): it was written over", bad.join(", "));
    }
    out
}

/// What process `i`, one end of a link, is doing, in words.
fn waits_for(run: &Run<'_>, i: usize, end: End) -> String {
    match run.processes.get(i) {
        Some(Process::Ended) => "has ended".to_owned(),
        Some(Process::Changing) | None => "is starting or stopping".to_owned(),
        Some(Process::Running { .. }) => {
            // Read afresh: the phase the stage is in now.
            let phase = run.stats[i].get().phase.load(Ordering::Relaxed);
            match (phase, end) {
                (PHASE_WAITING_OUTPUT, End::Producer) => "waits for a free slot".to_owned(),
                (PHASE_WAITING_INPUT, End::Consumer) => "waits for a frame".to_owned(),
                (PHASE_WAITING_INPUT, End::Producer) => "waits for a frame on its input".to_owned(),
                (PHASE_WAITING_OUTPUT, End::Consumer) => "waits for a free slot on its output".to_owned(),
                (phase, _) => format!("is {}", phase_name(phase)),
            }
        }
    }
}

/// Words of `ring` that no end of a ring ever writes, at most a few: `closed` beyond the
/// values it has, and slot state words with claim or pending bits of consumers the ring does
/// not have, or being written (a producer's take writes exactly `WRITING`) with other bits.
pub fn written_over(ring: &RingMap) -> Vec<String> {
    const SHOWN: usize = 3;
    let h = ring.header();
    let mut bad = Vec::new();
    let closed = h.stream.0.closed.load(Ordering::Relaxed);
    if closed > ABORTED {
        bad.push(format!("closed = {closed:#x}"));
    }
    let consumers = (1u64 << ring.n_consumers()) - 1;
    let known = consumers | (consumers << 16);
    for i in 0..ring.depth() {
        let st = h.slots[i].0.state.load(Ordering::Relaxed);
        let strangers = st & 0xffff_ffff & !known != 0;
        let torn = st & WRITING != 0 && st != WRITING;
        if strangers || torn {
            bad.push(format!("slot {i}'s state {st:#018x}"));
        }
    }
    if bad.len() > SHOWN {
        let more = bad.len() - SHOWN;
        bad.truncate(SHOWN);
        bad.push(format!("{more} more"));
    }
    bad
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(2);

    fn waiting(phase: u32, heartbeat: u64) -> Process {
        Process::Running { phase, heartbeat, watchdog: true }
    }

    /// Looks every 200 ms from `t0` for `span`, each with the processes `at(k)` gives for look
    /// `k` and the same words; the first verdict and the look it came at.
    fn watch(span: Duration, draining: bool, mut at: impl FnMut(u64) -> Vec<Process>) -> Option<(Verdict, u64)> {
        let t0 = Instant::now();
        let mut s = Standstill::new(T, t0);
        let tick = Duration::from_millis(200);
        (0..=(span.as_millis() / tick.as_millis()) as u64)
            .find_map(|k| s.look(&[1, 2, 3], &at(k), draining, t0 + tick * k as u32).map(|v| (v, k)))
    }

    #[test]
    fn every_stage_waiting_with_nothing_moving_is_stuck_after_the_timeout() {
        let found = watch(T * 3, false, |k| {
            vec![waiting(PHASE_WAITING_OUTPUT, k), waiting(PHASE_WAITING_INPUT, k), Process::Ended]
        });
        // The window opens at the first look; ten looks later it is 2 s long.
        assert_eq!(found, Some((Verdict::Stuck, 10)));
    }

    #[test]
    fn a_frame_moving_opens_the_window_again() {
        let t0 = Instant::now();
        let mut s = Standstill::new(T, t0);
        let procs = [waiting(PHASE_WAITING_OUTPUT, 1), waiting(PHASE_WAITING_INPUT, 1)];
        let pulsed = [waiting(PHASE_WAITING_OUTPUT, 2), waiting(PHASE_WAITING_INPUT, 2)];
        assert_eq!(s.look(&[7], &procs, false, t0), None);
        // A slot's state word moved just before the timeout.
        assert_eq!(s.look(&[8], &pulsed, false, t0 + T - Duration::from_millis(1)), None);
        assert_eq!(
            s.look(&[8], &[waiting(PHASE_WAITING_OUTPUT, 3), waiting(PHASE_WAITING_INPUT, 3)], false, t0 + T),
            None
        );
        let later = t0 + T * 2;
        assert_eq!(
            s.look(&[8], &[waiting(PHASE_WAITING_OUTPUT, 4), waiting(PHASE_WAITING_INPUT, 4)], false, later),
            Some(Verdict::Stuck)
        );
    }

    #[test]
    fn legitimate_slowness_is_never_stuck() {
        // A paced source, a camera with no frame, realtime video, a slow plugin: in `process`.
        // `bench` pacing: the phase of the last frame, in `process`. A stage in its flush.
        for busy in [PHASE_PROCESS, PHASE_FLUSH, crate::link::stats::PHASE_STARTING] {
            let found = watch(T * 5, false, |k| vec![waiting(busy, k), waiting(PHASE_WAITING_INPUT, k)]);
            assert_eq!(found, None, "phase {busy}");
        }
        // Seen in its plugin once in the window (a source paced at 1 frame/s, sampled while
        // it waited for a slot most of the time): the window starts again there.
        let found = watch(T * 5, false, |k| {
            let source = if k % 5 == 4 { PHASE_PROCESS } else { PHASE_WAITING_OUTPUT };
            vec![waiting(source, k), waiting(PHASE_WAITING_INPUT, k)]
        });
        assert_eq!(found, None);
        // A process starting or restarting: the host is changing the run.
        let found = watch(T * 5, false, |k| vec![Process::Changing, waiting(PHASE_WAITING_INPUT, k)]);
        assert_eq!(found, None);
        // Everything ended: the run is over, not stuck.
        assert_eq!(watch(T * 5, false, |_| vec![Process::Ended, Process::Ended]), None);
    }

    #[test]
    fn a_wait_that_stood_still_is_left_to_the_stages_own_watchdog() {
        // The consumer was stopped (SIGSTOP) in its wait: its heartbeat does not move.
        let found = watch(T * 5, false, |k| vec![waiting(PHASE_WAITING_OUTPUT, k), waiting(PHASE_WAITING_INPUT, 0)]);
        assert_eq!(found, None);
    }

    #[test]
    fn a_drain_that_moves_nothing_is_given_up_whatever_the_stages_do() {
        // The source never saw the stop (it waits for a slot for ever); its consumer is in a
        // plugin that its own watchdog governs; the sink ended.
        let found =
            watch(T * 3, true, |_| vec![waiting(PHASE_WAITING_OUTPUT, 0), waiting(PHASE_PROCESS, 0), Process::Ended]);
        assert_eq!(found, Some((Verdict::DrainStopped, 10)));
        // A stage without a watchdog in its plugin may take as long as it takes.
        let found = watch(T * 5, true, |_| {
            vec![
                waiting(PHASE_WAITING_OUTPUT, 0),
                Process::Running { phase: PHASE_PROCESS, heartbeat: 0, watchdog: false },
            ]
        });
        assert_eq!(found, None);
        // Waiting for a restart to come up.
        assert_eq!(watch(T * 5, true, |_| vec![waiting(PHASE_WAITING_OUTPUT, 0), Process::Changing]), None);
    }

    #[test]
    fn a_drain_gets_a_whole_window_of_its_own() {
        let t0 = Instant::now();
        let mut s = Standstill::new(T, t0);
        // A stage stopped in its wait while running: not stuck (its own watchdog's), but the
        // window is open.
        let procs = [waiting(PHASE_WAITING_OUTPUT, 0), waiting(PHASE_WAITING_INPUT, 0)];
        assert_eq!(s.look(&[1], &procs, false, t0), None);
        assert_eq!(s.look(&[1], &procs, false, t0 + T * 3), None);
        // The drain begins: its window starts there.
        assert_eq!(s.look(&[1], &procs, true, t0 + T * 3), None);
        assert_eq!(s.look(&[1], &procs, true, t0 + T * 4 - Duration::from_millis(1)), None);
        assert_eq!(s.look(&[1], &procs, true, t0 + T * 4), Some(Verdict::DrainStopped));
    }

    #[test]
    fn the_timeout_is_the_longest_watchdogs_and_none_without_links_or_watchdogs() {
        let plan = |text: &str| crate::plan::split::tests::plan_of(text).0;
        let chain = "[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\nstall_timeout = \"3s\"\n[[stage]]\nname = \"sink\"\nplugin = \"null.so\"\ninputs = [\"gen\"]\n";
        assert_eq!(Standstill::timeout_of(&plan(chain)), Some(Duration::from_secs(30)));
        let off = format!("[pipeline]\nname = \"p\"\nstall_timeout = \"off\"\n{chain}");
        assert_eq!(Standstill::timeout_of(&plan(&off)), Some(Duration::from_secs(3)));
        let all_off = off.replace("stall_timeout = \"3s\"", "stall_timeout = \"off\"");
        assert_eq!(Standstill::timeout_of(&plan(&all_off)), None);
        let alone = "[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\n";
        assert_eq!(Standstill::timeout_of(&plan(alone)), None);
    }

    /// `host/tests/stuck_links.rs` writes over a ring's control block from outside, at these
    /// offsets: a change of the header's layout must change them there too.
    #[test]
    fn the_offsets_the_stuck_links_test_writes_at() {
        use crate::link::header::{RingHeader, SlotState, StreamState};
        use std::mem::{offset_of, size_of};
        assert_eq!(offset_of!(RingHeader, producer), 256);
        assert_eq!(offset_of!(RingHeader, stream) + offset_of!(StreamState, closed), 320);
        assert_eq!(offset_of!(RingHeader, slots), 1472);
        assert_eq!(size_of::<crate::link::header::CacheLine<SlotState>>(), 256);
        assert_eq!(offset_of!(SlotState, state), 0);
    }
}
