//! After a stage's process died: take back its ends of every link, and count the frames that
//! died with it.

use std::path::Path;
use std::sync::atomic::Ordering;

use crate::link::{RingMap, StatsMap};
use crate::plan::{LinkMemory, Plan};

/// Take back stage `i`'s link ends; `group` are the stages restarting with it (all dead by
/// now). Returns the frames lost inside the dead process: at most one, the last frame it
/// took from its inputs, if it was not done.
pub fn reclaim_stage(plan: &Plan, i: usize, group: &[usize], stats: &StatsMap, rings: &[RingMap], taps: Option<&Path>) -> u64 {
    let stage = &plan.stages[i];
    let whole_ring_dead = |link: usize| {
        let l = &plan.links[link];
        matches!(l.memory, LinkMemory::Device { .. })
            && group.contains(&l.producer)
            && l.consumers.iter().all(|c| group.contains(c))
    };
    // The last frame taken: a stage works on one frame (one aligned set) at a time.
    let taken = stage
        .inputs
        .iter()
        .map(|input| rings[input.link].header().consumers[input.consumer].0.next_seq.load(Ordering::Acquire))
        .max()
        .and_then(|next| next.checked_sub(1));
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
    let Some(seq) = taken else { return 0 };
    // Done when the stage said so, when its output reached the ring, or, for a sink, when its
    // tap line was written (the last thing before "done"); counted once even if the stage
    // dies again before it takes another frame.
    let s = stats.get();
    let done_below = s.last_seq_plus_one.load(Ordering::Acquire).max(s.lost_below.load(Ordering::Acquire));
    let published_below = output.map_or(0, |l| rings[l].header().producer.0.seq_end.load(Ordering::Acquire));
    let tapped = if output.is_none() { taps.and_then(|dir| crate::stage::tap::last_recorded(dir, stage.name.as_str())) } else { None };
    if seq < done_below || seq < published_below || tapped == Some(seq) {
        return 0;
    }
    s.lost_below.store(seq + 1, Ordering::Release);
    s.lost.fetch_add(1, Ordering::Relaxed);
    1
}
