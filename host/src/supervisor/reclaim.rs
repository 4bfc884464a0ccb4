//! After a stage's process died: take back its ends of every link, and count the frames that
//! died with it.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;

use crate::link::{RingMap, StatsMap};
use crate::plan::{LinkMemory, Plan};

/// Take back stage `i`'s link ends; `group` are the stages restarting with it (all dead by
/// now). Returns the frames lost inside the dead process: taken from an input and never done.
pub fn reclaim_stage(plan: &Plan, i: usize, group: &[usize], stats: &StatsMap, rings: &[RingMap], taps: Option<&Path>) -> u64 {
    let stage = &plan.stages[i];
    let whole_ring_dead = |link: usize| {
        let l = &plan.links[link];
        matches!(l.memory, LinkMemory::Device { .. })
            && group.contains(&l.producer)
            && l.consumers.iter().all(|c| group.contains(c))
    };
    let mut held = BTreeSet::new();
    for input in &stage.inputs {
        if whole_ring_dead(input.link) {
            // Emptied once, by its producer's turn below.
            continue;
        }
        held.extend(rings[input.link].reclaim_consumer(input.consumer));
    }
    let output = stage.output.as_ref().and_then(|o| o.link);
    if let Some(link) = output {
        if whole_ring_dead(link) { rings[link].reset_slots() } else { rings[link].reclaim_producer() }
    }
    // A frame was done when the stage said so, when its output reached the ring, or, for a
    // sink, when its tap line was written (the last thing before "done").
    let done_below = stats.get().last_seq_plus_one.load(Ordering::Acquire);
    let published_below = output.map_or(0, |l| rings[l].header().producer.0.seq_end.load(Ordering::Acquire));
    let tapped = if output.is_none() { taps.and_then(|dir| crate::stage::tap::last_recorded(dir, stage.name.as_str())) } else { None };
    let lost = held.iter().filter(|&&seq| seq >= done_below && seq >= published_below && tapped != Some(seq)).count() as u64;
    stats.get().lost.fetch_add(lost, Ordering::Relaxed);
    lost
}
