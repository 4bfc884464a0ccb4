//! After a stage's process died: take back its ends of every link, and count the frames that
//! died with it.

use std::path::Path;
use std::sync::atomic::Ordering;

use crate::link::queue::{DoneBelow, QueueMap, Settled};
use crate::link::{RingMap, StatsMap};
use crate::plan::{LinkMemory, Plan};

/// Take back stage `i`'s link ends; `group` are the stages restarting with it (all dead by
/// now). Returns the frames lost inside the dead process: at most one, the last frame it
/// took from its inputs, if it was not done.
pub fn reclaim_stage(
    plan: &Plan,
    i: usize,
    group: &[usize],
    stats: &StatsMap,
    rings: &[RingMap],
    taps: Option<&Path>,
) -> u64 {
    let stage = &plan.stages[i];
    let whole_ring_dead = |link: usize| {
        let l = &plan.links[link];
        matches!(l.memory, LinkMemory::Device { .. })
            && group.contains(&l.producer)
            && l.consumers.iter().all(|c| group.contains(c))
    };
    // The last frame taken: a stage works on one frame (one aligned set) at a time.
    let next_seq = |input: &crate::plan::InputPlan| {
        rings[input.link].header().consumers[input.consumer].0.next_seq.load(Ordering::Acquire)
    };
    let taken = stage.inputs.iter().map(next_seq).max().and_then(|next| next.checked_sub(1));
    for input in &stage.inputs {
        // A ring whose every end died is emptied by its producer's turn below.
        if !whole_ring_dead(input.link) {
            rings[input.link].reclaim_consumer(input.consumer);
        }
    }
    let output = stage.output.as_ref().and_then(|o| o.link);
    if let Some(link) = output {
        if whole_ring_dead(link) {
            rings[link].reset_slots();
        } else {
            rings[link].reclaim_producer();
            if matches!(plan.links[link].memory, LinkMemory::Device { .. }) {
                rings[link].discard_unclaimed();
            }
        }
    }
    stats.settle_after_death();
    // A frame published, or a sink's frame whose tap line was written (the last thing before
    // "done"), is done though the process died before it counted it.
    let published_below = output.map_or(0, |l| rings[l].header().producer.0.seq_end.load(Ordering::Acquire));
    if let Some(seq) = published_below.checked_sub(1).filter(|&seq| !stats.settled(seq)) {
        stats.count_done_by_host(seq);
    }
    let Some(seq) = taken else { return 0 };
    let tapped = if output.is_none() {
        taps.and_then(|dir| crate::stage::tap::last_recorded(dir, stage.name.as_str()))
    } else {
        None
    };
    if tapped == Some(seq) && !stats.settled(seq) {
        stats.count_done_by_host(seq);
    }
    // Taken and neither done nor counted lost already (the process may die again before it
    // takes another frame): lost with the process.
    if stats.settled(seq) {
        return 0;
    }
    let s = stats.get();
    s.lost_below.store(seq + 1, Ordering::Release);
    s.lost.fetch_add(1, Ordering::Relaxed);
    // On each link it took the frame from: a join killed between its inputs' takes took it
    // from some only, and the others give it up (dropped) when the stage carries on.
    for input in &stage.inputs {
        if next_seq(input) == seq + 1 {
            rings[input.link].count_lost(input.consumer);
        }
    }
    1
}

/// How long the host waits for a live replica's take to end before it settles a dead one
/// (a take that has its frame ends in microseconds; one waiting for input may not end soon).
const SETTLING_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// After one of a stage's replicas died (process `pid`, replica `replica` of stage `stage`):
/// settle the frame it held through the queue block (owed to a sibling, given up, or already
/// published), release its claims under the stage's shared consumer indices (siblings' stay),
/// and empty the output slot it was writing in its own part of the ring. Returns the frames
/// given up (counted dropped on the stage's input links).
pub fn reclaim_replica(
    plan: &Plan,
    stage: usize,
    replica: u32,
    pid: u32,
    stats: &StatsMap,
    queue: &QueueMap,
    rings: &[RingMap],
) -> u64 {
    let s = &plan.stages[stage];
    // Hold off the live siblings' takes while the dead one's claims are told from theirs: a
    // sibling that had claimed its next frame and not yet recorded it had its claim taken for
    // the dead one's and the frame given up (1 of 60 runs of the replica kill test under load
    // dropped a frame with `on_loss = "retry"`). Held to the end of the settling.
    let _takes = queue.lock_for_settling(std::process::id(), pid, SETTLING_LOCK_WAIT);
    stats.settle_after_death();
    let counted = stats.get().last_seq_plus_one.load(Ordering::Acquire).checked_sub(1);
    let died_taking = queue.lock_held_by(pid);
    let others = queue.held_by_others(replica);
    let claimed_by_others = |seq: &u64| others.iter().any(|&(s, claimed)| s == *seq && claimed);
    // A frame a sibling took from the owed list and waits to claim: the dead one may hold the
    // claim still (it gave the frame back and died before it let go).
    let awaited = |seq: u64| others.iter().any(|&(s, claimed)| s == seq && !claimed);
    // Frames claimed under the stage's index that no live sibling has claimed: the dead one's.
    let stray: Vec<Vec<u64>> = s
        .inputs
        .iter()
        .map(|input| {
            rings[input.link].claimed_seqs(input.consumer).into_iter().filter(|seq| !claimed_by_others(seq)).collect()
        })
        .collect();
    // Where the stage's shared position stands: frames numbered below it were taken.
    let next_seq: Vec<u64> = s
        .inputs
        .iter()
        .map(|input| rings[input.link].header().consumers[input.consumer].0.next_seq.load(Ordering::Acquire))
        .collect();
    // The dead one's frame without a ticket: the last one taken, if it still holds a claim on
    // it. Not merely the newest claim no live sibling has marked: a sibling that finished its
    // frame (its holding cleared) may not have let go of its claim yet, and that frame, done
    // and counted, was taken for the dead one's (counted twice, or given up: issue 25).
    let untracked = if died_taking {
        let last_taken = next_seq.first().and_then(|n| n.checked_sub(1));
        stray.first().and_then(|seqs| seqs.iter().max().copied()).filter(|&seq| Some(seq) == last_taken)
    } else {
        None
    };
    let output = s.output.as_ref().and_then(|o| o.link);
    let published_below = output.map(|l| rings[l].header().producer.0.seq_end.load(Ordering::Acquire));
    let retry = s.on_loss() == crate::config::OnLoss::Retry;
    let settled =
        queue.settle_dead(replica, pid, retry, DoneBelow { published_below, counted }, untracked, process_is_dead);
    if let Settled::Published(held) = settled
        && counted != Some(held.seq)
    {
        // Published, and the process died before it counted the frame.
        stats.count_done_by_host(held.seq);
    }
    let owed = match settled {
        Settled::Owed(held) => Some(held.seq),
        _ => None,
    };
    for ((input, seqs), &next) in s.inputs.iter().zip(&stray).zip(&next_seq) {
        for &seq in seqs {
            // A frame claimed and not taken yet stays for a sibling to take.
            let keep = owed == Some(seq) || awaited(seq) || seq >= next;
            rings[input.link].release_replica_claim(input.consumer, seq, keep);
        }
    }
    let dropped = match settled {
        Settled::Abandoned(held) => {
            for input in &s.inputs {
                // Given up on every input: a frame nobody will take again.
                rings[input.link].release_replica_claim(input.consumer, held.seq, false);
                rings[input.link].count_dropped(input.consumer, 1);
            }
            1
        }
        _ => 0,
    };
    if let Some(link) = output {
        let each = s.slots_each() as usize;
        let part = replica as usize * each..(replica as usize + 1) * each;
        rings[link].reclaim_producer_slots(part.clone());
        if matches!(plan.links[link].memory, LinkMemory::Device { .. }) {
            // As for a lone producer on a GPU: what it published and nobody holds yet may
            // never have been written.
            rings[link].discard_unclaimed_slots(part);
        }
    }
    for input in s.inputs.iter().filter(|i| matches!(plan.links[i.link].memory, LinkMemory::Device { .. })) {
        // Its `released` events went with it: the producer takes the live replicas' anew.
        rings[input.link].consumers_changed();
    }
    tracing::debug!("stage '{}', replica {replica}: {settled:?}", s.name);
    // Last: until now the dead one's take lock (or the host's) kept takers out of what was
    // repaired above. A sibling let in before its claims went took the next frame past one
    // still claimed for the dead one, and that one was dropped (2 of 150 kill tests).
    queue.break_lock_of(pid);
    dropped
}

/// Whether process `pid` has died (gone, or a zombie not yet reaped).
fn process_is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may hold spaces.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => true,
    }
}

/// A replica that will not run again counts as ended; when it was the last, its stage's
/// stream ends here: owed frames are given up (counted dropped) and the output ring closed.
pub fn replica_gone(plan: &Plan, stage: usize, replica: u32, queue: &QueueMap, rings: &[RingMap]) {
    if !queue.replica_ended(replica) {
        return;
    }
    let s = &plan.stages[stage];
    for owed in queue.abandon_all_owed() {
        for input in &s.inputs {
            rings[input.link].release_replica_claim(input.consumer, owed.seq, false);
            rings[input.link].give_up_pending(input.consumer, owed.seq);
            rings[input.link].count_dropped(input.consumer, 1);
        }
    }
    if let Some(link) = s.output.as_ref().and_then(|o| o.link) {
        rings[link].close_for_producer();
    }
}
