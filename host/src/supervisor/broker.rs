//! Passing GPU link objects between stages: each end of a GPU link exports its memory and
//! events to the host; once every end of a link has, the host hands each end what the others
//! exported (descriptors by SCM_RIGHTS, handles as bytes). The host never opens any of them.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use super::spawn::StageProcess;
use crate::control::{Export, Import, LinkEnd, ToStage};
use crate::plan::Plan;

#[derive(Default)]
struct LinkExports {
    producer: Option<(Export, Vec<OwnedFd>)>,
    consumers: HashMap<usize, Export>,
}

#[derive(Default)]
pub struct Broker {
    links: HashMap<usize, LinkExports>,
}

impl Broker {
    /// Take one export from stage `from`; when its link is complete, send the imports.
    pub fn export(
        &mut self,
        plan: &Plan,
        stages: &[StageProcess],
        from: usize,
        export: Export,
        fds: Vec<OwnedFd>,
    ) -> Result<(), String> {
        let link_index = export.link;
        let link = plan.links.get(link_index).ok_or_else(|| format!("exported unknown link {link_index}"))?;
        let entry = self.links.entry(link_index).or_default();
        match export.end {
            LinkEnd::Producer if link.producer == from => entry.producer = Some((export, fds)),
            LinkEnd::Consumer(c) if link.consumers.get(c) == Some(&from) => {
                entry.consumers.insert(c, export);
            }
            end => return Err(format!("exported {end:?} of link {}, which it is not", plan.link_name(link_index))),
        }
        if entry.producer.is_none() || entry.consumers.len() < link.consumers.len() {
            return Ok(());
        }
        let complete = self.links.remove(&link_index).expect("just filled");
        let (producer, fds) = complete.producer.expect("checked");
        let consumers: Vec<Export> =
            (0..link.consumers.len()).map(|c| complete.consumers[&c].clone()).collect();
        let to_producer = Import { link: link_index, producer: None, consumers };
        send(&stages[link.producer], to_producer, &[])?;
        for &stage in &link.consumers {
            let import = Import { link: link_index, producer: Some(producer.clone()), consumers: Vec::new() };
            let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            send(&stages[stage], import, &borrowed)?;
        }
        Ok(())
    }
}

impl Broker {
    /// A process at one end of `link` died: what it exported is gone with it.
    pub fn forget(&mut self, link: usize) {
        self.links.remove(&link);
    }
}

fn send(stage: &StageProcess, import: Import, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<(), String> {
    stage
        .socket
        .send(&ToStage::Import(Box::new(import)), fds)
        .map_err(|e| format!("cannot pass link objects to stage '{}': {e}", stage.name))
}
