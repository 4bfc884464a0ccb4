//! Following a restarted neighbour on a GPU link. When the process at the other end of a GPU
//! ring dies, the host takes back its slots and bumps the ring's epoch; once it is restarted,
//! the host sends this stage the link's objects anew (`supervisor::broker`). Until then this
//! stage must not use the dead process's memory or events for the new process's frames:
//!
//! - a consumer reads a frame only through the objects of the producer process that made it
//!   (each frame carries its producer's generation): a frame of a newer producer waits for the
//!   update; a frame of the dead one is not read at all (its GPU work may never have run) and
//!   counts as lost;
//! - a producer whose output ring's consumer epoch moved (a consumer process died or joined)
//!   waits for the current consumers' events before it makes its stream wait on them.
//!
//! The waits pulse the watchdog, and an abort ends them.

use std::sync::atomic::Ordering;

use rustix::event::{PollFd, PollFlags};

use super::StageError;
use super::output::Output;
use crate::control::{ControlSocket, StageSetup, ToStage};
use crate::link::backing::ReadEnd;
use crate::link::{Consumer, LinkError, ReadSlot, RingMap, StatsMap};

pub struct Follower<'s> {
    socket: &'s ControlSocket,
    updates_seen: u32,
    input_links: Vec<usize>,
    output_link: Option<usize>,
}

impl<'s> Follower<'s> {
    /// `None` when no link of the stage needs following.
    pub fn new(
        socket: &'s ControlSocket,
        setup: &StageSetup,
        stats: &StatsMap,
        input_ends: &[Box<dyn ReadEnd>],
        output: &Output,
    ) -> Option<Follower<'s>> {
        if !input_ends.iter().any(|e| e.follows_the_other_end()) && output.followed_ring().is_none() {
            return None;
        }
        Some(Follower {
            socket,
            updates_seen: stats.get().updates.load(Ordering::Acquire),
            input_links: setup.inputs.iter().map(|i| i.link).collect(),
            output_link: setup.output.as_ref().and_then(|o| o.link),
        })
    }

    /// Before reading the held frames: each can be read through the objects its input end
    /// holds. `false`: one of them was made by a producer process that died; none is read.
    pub fn inputs_current(
        &mut self,
        stats: &StatsMap,
        inputs: &[Consumer],
        held: &[ReadSlot],
        input_ends: &mut [Box<dyn ReadEnd>],
        output: &mut Output,
    ) -> Result<bool, StageError> {
        for k in 0..held.len() {
            let made_by = held[k].meta().flags;
            while let Some(current) = input_ends[k].producer_generation(held[k].index())
                && made_by != current
            {
                if made_by < current {
                    return Ok(false);
                }
                self.await_update(stats, inputs[k].ring(), self.input_links[k], input_ends, output)?;
            }
        }
        Ok(true)
    }

    /// Before writing the output: its consumers' objects are current.
    pub fn output_current(
        &mut self,
        stats: &StatsMap,
        input_ends: &mut [Box<dyn ReadEnd>],
        output: &mut Output,
    ) -> Result<(), StageError> {
        // Updates that came while nothing waited for them are taken now, so objects are never
        // older than what the host has sent.
        if stats.get().updates.load(Ordering::Acquire) != self.updates_seen {
            self.apply(stats, input_ends, output)?;
        }
        let Some(link) = self.output_link else { return Ok(()) };
        // Until the consumers' objects are current for the ring's consumer epoch: each update
        // says the epoch it is current for (the write end keeps it), and a consumer that died
        // or joined after the host sent it moves the ring past that, to wait for the next.
        while !output.consumers_current() {
            // The ring is `output`'s, which the update changes: looked up again each time.
            self.await_update_with(stats, link, input_ends, output, |o| {
                o.followed_ring().is_some_and(RingMap::is_aborted)
            })?;
        }
        Ok(())
    }

    fn await_update(
        &mut self,
        stats: &StatsMap,
        ring: &RingMap,
        link: usize,
        input_ends: &mut [Box<dyn ReadEnd>],
        output: &mut Output,
    ) -> Result<(), StageError> {
        let aborted = ring.is_aborted();
        self.await_update_with(stats, link, input_ends, output, |_| aborted || ring.is_aborted())
    }

    /// Apply updates until one for `link` came.
    fn await_update_with(
        &mut self,
        stats: &StatsMap,
        link: usize,
        input_ends: &mut [Box<dyn ReadEnd>],
        output: &mut Output,
        aborted: impl Fn(&Output) -> bool,
    ) -> Result<(), StageError> {
        tracing::info!("the other end of link {link} was restarted; waiting for its new objects");
        loop {
            if self.apply(stats, input_ends, output)?.contains(&link) {
                return Ok(());
            }
            if aborted(output) {
                return Err(LinkError::Aborted.into());
            }
            stats.pulse();
            let mut fds = [PollFd::from_borrowed_fd(std::os::fd::AsFd::as_fd(self.socket), PollFlags::IN)];
            let slice = rustix::time::Timespec { tv_sec: 0, tv_nsec: 50_000_000 };
            let _ = rustix::event::poll(&mut fds, Some(&slice));
        }
    }

    /// Take every update the host has sent; returns the links they were for.
    fn apply(
        &mut self,
        stats: &StatsMap,
        input_ends: &mut [Box<dyn ReadEnd>],
        output: &mut Output,
    ) -> Result<Vec<usize>, StageError> {
        let updates = stats.get().updates.load(Ordering::Acquire);
        let mut links = Vec::new();
        if updates == self.updates_seen {
            return Ok(links);
        }
        loop {
            let received =
                self.socket.try_recv::<ToStage>().map_err(|e| StageError::Setup(format!("the host's socket: {e}")))?;
            let Some((message, fds)) = received else { break };
            let ToStage::Import(import) = message else {
                return Err(StageError::Setup(format!("expected new GPU link objects, got {message:?}")));
            };
            let link = import.link;
            if Some(link) == self.output_link {
                // Taken here, perhaps while waiting for an input's update: the output's
                // consumers are current as of the epoch the host sent them for, so
                // `output_current` does not wait for this update again (it would wait for
                // ever: a drained run hung there), but does for a consumer that died since.
                output.update(*import, fds)?;
            } else if let Some(k) = self.input_links.iter().position(|&l| l == link) {
                input_ends[k].update(*import, fds)?;
            } else {
                return Err(StageError::Setup(format!("new objects for link {link}, which this stage does not use")));
            }
            links.push(link);
        }
        self.updates_seen = updates;
        Ok(links)
    }
}
