//! Passing GPU link objects between stage processes: each end of a GPU link exports its
//! memory and events to the host; once every end process of a link has, the host hands each
//! what the others exported (descriptors by SCM_RIGHTS, handles as bytes). The host never
//! opens any of them. A stage with replicas is one end with a process per replica: a producer
//! stage's replicas export a part of the ring's slots each, which consumers import together;
//! a consumer stage's replicas export a set of `released` events each, and the producer waits
//! on all of them.
//!
//! The host keeps what each live end process exported. When a restarted process exports
//! again, it gets the others' objects, and every live end gets the link's objects anew (an
//! update): a consumer re-imports a producer part whose process changed, a producer opens its
//! consumers' events again. When a consumer process dies or joins, the ring's consumer epoch
//! moves first ([`RingMap::consumers_changed`]), and a producer reuses no slot until it holds
//! the events current for it: a producer whose consumer died gets the live ones' at once, so
//! it does not wait for the restart. The live stage learns of an update through its
//! statistics block (`StageStats::updates`), so it looks at its socket only then.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

use super::spawn::StageProcess;
use crate::control::{Export, Import, LinkEnd, ToStage};
use crate::link::{RingMap, StatsMap};
use crate::plan::{Plan, ProcessPlan};

/// What the live end processes of one GPU link exported.
#[derive(Default)]
struct LinkExports {
    /// By process, with a producer's descriptors.
    exports: BTreeMap<usize, (Export, Vec<OwnedFd>)>,
    /// The processes that hold the link's current objects.
    served: BTreeSet<usize>,
}

#[derive(Default)]
pub struct Broker {
    links: HashMap<usize, LinkExports>,
    /// Processes that will not export again (ended, or failed for good): nobody waits for them.
    gone: BTreeSet<usize>,
}

/// What the broker reaches the stages through, by process: their processes, statistics
/// blocks and plans; and the rings, by link.
pub struct Reach<'a> {
    pub stages: &'a [StageProcess],
    pub stats: &'a [StatsMap],
    pub procs: &'a [ProcessPlan],
    pub rings: &'a [RingMap],
}

impl Broker {
    /// Take one export from process `from`; when every end process of its link has exported,
    /// send the new ones their imports and the live ones an update.
    pub fn export(
        &mut self,
        plan: &Plan,
        reach: &Reach<'_>,
        from: usize,
        export: Export,
        fds: Vec<OwnedFd>,
    ) -> Result<(), String> {
        let link_index = export.link;
        let link = plan.links.get(link_index).ok_or_else(|| format!("exported unknown link {link_index}"))?;
        let stage = reach.procs[from].stage;
        let is_end = match export.end {
            LinkEnd::Producer => link.producer == stage,
            LinkEnd::Consumer(c) => link.consumers.get(c) == Some(&stage),
        };
        if !is_end {
            return Err(format!("exported {:?} of link {}, which it is not", export.end, plan.link_name(link_index)));
        }
        let entry = self.links.entry(link_index).or_default();
        entry.exports.insert(from, (export, fds));
        entry.served.remove(&from);
        let waiting_for = ends(plan, reach.procs, link_index)
            .filter(|p| !self.gone.contains(p) && !entry.exports.contains_key(p))
            .count();
        if waiting_for > 0 {
            return Ok(());
        }
        let consumer_joins =
            entry.exports.iter().any(|(p, (e, _))| matches!(e.end, LinkEnd::Consumer(_)) && !entry.served.contains(p));
        if consumer_joins {
            // Before anyone gets its objects: the producers wait for the new events before
            // they reuse a slot the new consumer may read.
            if let Some(ring) = reach.rings.get(link_index) {
                ring.consumers_changed();
            }
        }
        let to_all: Vec<usize> = entry.exports.keys().copied().collect();
        send_imports(plan, reach, link_index, entry, &to_all)
    }

    /// Process `process` died (`for_good`: it will not run again): what it exported for its
    /// links is gone with it. The producers of a link it consumed get the live consumers'
    /// events at once (the host moved the ring's consumer epoch when it took back the dead
    /// one's claims), so they go on without waiting for a restart.
    pub fn forget(&mut self, plan: &Plan, reach: &Reach<'_>, process: usize, for_good: bool) {
        if for_good {
            self.gone.insert(process);
        }
        let stage = reach.procs[process].stage;
        for (index, link) in plan.links.iter().enumerate() {
            let Some(entry) = self.links.get_mut(&index) else { continue };
            entry.served.remove(&process);
            let was_consumer =
                matches!(entry.exports.remove(&process), Some((e, _)) if matches!(e.end, LinkEnd::Consumer(_)));
            if !was_consumer || !link.consumers.contains(&stage) {
                continue;
            }
            let producers: Vec<usize> =
                entry.served.iter().copied().filter(|p| reach.procs[*p].stage == link.producer).collect();
            if let Err(e) = send_imports(plan, reach, index, entry, &producers) {
                tracing::warn!("{e}");
            }
        }
    }
}

/// The processes at the ends of link `link`: its producer stage's, then its consumers'.
fn ends<'p>(plan: &Plan, procs: &'p [ProcessPlan], link: usize) -> impl Iterator<Item = usize> + 'p {
    let l = &plan.links[link];
    let stages: Vec<usize> = std::iter::once(l.producer).chain(l.consumers.iter().copied()).collect();
    (0..procs.len()).filter(move |&p| stages.contains(&procs[p].stage))
}

/// Send each of `to` (end processes of `link`) the other ends' current objects: a producer
/// every consumer process's events, a consumer every producer part. One that held objects of
/// the link already is told of the update.
fn send_imports(
    plan: &Plan,
    reach: &Reach<'_>,
    link: usize,
    entry: &mut LinkExports,
    to: &[usize],
) -> Result<(), String> {
    let producer_stage = plan.links[link].producer;
    // In process order: a producer stage's replicas in replica order, its parts in slot order.
    let (producers, consumers): (Vec<_>, Vec<_>) =
        entry.exports.iter().partition(|(p, _)| reach.procs[**p].stage == producer_stage);
    let parts: Vec<Export> = producers.iter().map(|(_, (e, _))| e.clone()).collect();
    let part_fds: Vec<_> = producers.iter().flat_map(|(_, (_, fds))| fds.iter().map(|f| f.as_fd())).collect();
    let consumer_events: Vec<Export> = consumers.iter().map(|(_, (e, _))| e.clone()).collect();
    let epoch = reach.rings.get(link).map(RingMap::consumer_epoch);
    for &p in to {
        let (import, fds) = if reach.procs[p].stage == producer_stage {
            (Import { link, producers: Vec::new(), consumers: consumer_events.clone(), epoch }, &[][..])
        } else {
            (Import { link, producers: parts.clone(), consumers: Vec::new(), epoch: None }, &part_fds[..])
        };
        if !send(&reach.stages[p], import, fds)? {
            // That end has exited (a stage that finished while its neighbour restarted): its
            // exit is judged when it is reaped, and it needs no objects any more.
            tracing::debug!("stage '{}' has exited; its link objects are not passed on", reach.stages[p].name);
            continue;
        }
        if !entry.served.insert(p) {
            // A live end: it looks at its socket when this count moves.
            reach.stats[p].get().updates.fetch_add(1, Ordering::Release);
        }
    }
    Ok(())
}

/// Send `stage` its imports. `Ok(false)`: its end of the socket is closed (the process has
/// exited), which is not an error of the run.
fn send(stage: &StageProcess, import: Import, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<bool, String> {
    use crate::control::SocketError;
    match stage.socket.send(&ToStage::Import(Box::new(import)), fds) {
        Ok(()) => Ok(true),
        Err(SocketError::Closed) => Ok(false),
        Err(SocketError::Io(e))
            if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) =>
        {
            Ok(false)
        }
        Err(e) => Err(format!("cannot pass link objects to stage '{}': {e}", stage.name)),
    }
}
