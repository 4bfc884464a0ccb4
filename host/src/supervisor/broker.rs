//! Passing GPU link objects between stages: each end of a GPU link exports its memory and
//! events to the host; once every end of a link has, the host hands each end what the others
//! exported (descriptors by SCM_RIGHTS, handles as bytes). The host never opens any of them.
//!
//! The host keeps what each live end exported. When a restarted end exports again, the new
//! end gets the others' objects, and every live end gets the link's objects anew (an update):
//! a consumer re-imports its producer's memory and events if they changed, a producer opens
//! its consumers' events again. The live stage learns of the update through its statistics
//! block (`StageStats::updates`), so it looks at its socket only then.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;

use super::spawn::StageProcess;
use crate::control::{Export, Import, LinkEnd, ToStage};
use crate::link::StatsMap;
use crate::plan::Plan;

#[derive(Default)]
struct LinkExports {
    producer: Option<(Export, Vec<OwnedFd>)>,
    consumers: HashMap<usize, Export>,
    /// The ends (`None`: the producer) that hold the link's current objects.
    served: Vec<Option<usize>>,
}

#[derive(Default)]
pub struct Broker {
    links: HashMap<usize, LinkExports>,
}

/// What the broker reaches the stages through: their processes and statistics blocks (by
/// process), rings (by link), and each stage's process (stages at GPU links run one).
pub struct Reach<'a> {
    pub stages: &'a [StageProcess],
    pub stats: &'a [StatsMap],
    pub rings: &'a [crate::link::RingMap],
    pub process_of: &'a [Option<usize>],
}

impl Broker {
    /// Take one export from stage `from`; when every end of its link has exported, send the
    /// new ends their imports and the live ends an update.
    pub fn export(&mut self, plan: &Plan, reach: &Reach<'_>, from: usize, export: Export, fds: Vec<OwnedFd>) -> Result<(), String> {
        let Reach { stages, stats, rings, process_of } = *reach;
        let link_index = export.link;
        let link = plan.links.get(link_index).ok_or_else(|| format!("exported unknown link {link_index}"))?;
        let entry = self.links.entry(link_index).or_default();
        let end = match export.end {
            LinkEnd::Producer if link.producer == from => {
                entry.producer = Some((export, fds));
                None
            }
            LinkEnd::Consumer(c) if link.consumers.get(c) == Some(&from) => {
                entry.consumers.insert(c, export);
                Some(c)
            }
            end => return Err(format!("exported {end:?} of link {}, which it is not", plan.link_name(link_index))),
        };
        entry.served.retain(|&e| e != end);
        if entry.producer.is_none() || entry.consumers.len() < link.consumers.len() {
            return Ok(());
        }
        let (producer, fds) = entry.producer.as_ref().expect("checked");
        let consumers: Vec<Export> = (0..link.consumers.len()).map(|c| entry.consumers[&c].clone()).collect();
        let ends = std::iter::once(None).chain((0..link.consumers.len()).map(Some));
        for end in ends {
            let (stage, import, fds) = match end {
                None => (
                    link.producer,
                    Import {
                        link: link_index,
                        producer: None,
                        consumers: consumers.clone(),
                        epoch: rings.get(link_index).map(crate::link::RingMap::epoch),
                    },
                    &[][..],
                ),
                Some(c) => (
                    link.consumers[c],
                    Import { link: link_index, producer: Some(producer.clone()), consumers: Vec::new(), epoch: None },
                    &fds[..],
                ),
            };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            let Some(stage) = process_of[stage] else {
                return Err(format!("link {} joins a stage with replicas, which GPU links do not support yet", plan.link_name(link_index)));
            };
            if !send(&stages[stage], import, &borrowed)? {
                // That end has exited (a stage that finished while its neighbour restarted):
                // its exit is judged when it is reaped, and it needs no objects any more.
                tracing::debug!("stage '{}' has exited; its link objects are not passed on", stages[stage].name);
                continue;
            }
            if entry.served.contains(&end) {
                // A live end: it looks at its socket when this count moves.
                stats[stage].get().updates.fetch_add(1, Ordering::Release);
            }
        }
        entry.served = std::iter::once(None).chain((0..link.consumers.len()).map(Some)).collect();
        Ok(())
    }

    /// Stage `stage`'s process died: what it exported for its links is gone with it.
    pub fn forget(&mut self, plan: &Plan, stage: usize) {
        for (index, link) in plan.links.iter().enumerate() {
            let Some(entry) = self.links.get_mut(&index) else { continue };
            if link.producer == stage {
                entry.producer = None;
                entry.served.retain(|&e| e.is_some());
            }
            for (c, _) in link.consumers.iter().enumerate().filter(|(_, s)| **s == stage) {
                entry.consumers.remove(&c);
                entry.served.retain(|&e| e != Some(c));
            }
        }
    }
}

/// Send `stage` its imports. `Ok(false)`: its end of the socket is closed (the process has
/// exited), which is not an error of the run.
fn send(stage: &StageProcess, import: Import, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<bool, String> {
    use crate::control::SocketError;
    match stage.socket.send(&ToStage::Import(Box::new(import)), fds) {
        Ok(()) => Ok(true),
        Err(SocketError::Closed) => Ok(false),
        Err(SocketError::Io(e)) if matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset) => {
            Ok(false)
        }
        Err(e) => Err(format!("cannot pass link objects to stage '{}': {e}", stage.name)),
    }
}
