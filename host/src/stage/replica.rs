//! A replica's part in its stage's work queue (docs/links.md, "Replicas"): take the next
//! frame (a sibling's owed one first) under the take lock, and publish in ticket order.

use std::sync::Arc;

use super::StageError;
use super::inputs::acquire_aligned;
use crate::link::queue::{Held, QueueMap, Turn};
use crate::link::wakes::Waiter;
use crate::link::{Consumer, ReadSlot};

/// Which replica this process is, and the queue block it shares with its siblings.
pub struct Replica {
    pub queue: Arc<QueueMap>,
    pub index: u32,
    /// This process's pid: the take lock names its holder by it.
    pub pid: u32,
    pub waiter: Waiter,
    /// Whether its outputs go into a ring in turn (a sink's replicas take no turn).
    pub has_turn: bool,
}

/// What a take found.
pub enum Take {
    /// An aligned set of frames, one per input, and the ticket they were taken under.
    Frames(Vec<ReadSlot>, Held),
    /// The inputs ended and nothing is owed.
    End,
}

impl Replica {
    /// Take the next frames: an owed frame first (a dead or yielding sibling's, under its
    /// ticket), else the next aligned set no sibling holds, under a new ticket.
    pub fn take(&self, inputs: &mut [Consumer]) -> Result<Take, StageError> {
        loop {
            let guard = self.queue.lock(self.pid, &self.waiter, || inputs.iter().any(|c| c.ring().is_aborted()))?;
            if let Some(owed) = guard.take_owed(self.index) {
                // Claimed under the lock: out of the owed list and not yet claimed, the frame
                // would be given up by a sibling's take passing over it.
                let claimed = claim_everywhere(inputs, owed.seq);
                drop(guard);
                match claimed {
                    Some(held) => {
                        self.queue.claimed(self.index);
                        return Ok(Take::Frames(held, owed));
                    }
                    None => {
                        // Overwritten upstream before it was taken again: given up, counted
                        // (once: a full abandoned list owes it again, to be given up later).
                        tracing::debug!(
                            "owed frame {} (ticket {}) gone from an input: given up",
                            owed.seq,
                            owed.ticket
                        );
                        if self.queue.give_up(self.index, self.pid, owed, self.has_turn) {
                            for input in inputs.iter() {
                                input.count_dropped(1);
                            }
                        } else {
                            std::thread::yield_now();
                        }
                        continue;
                    }
                }
            }
            // Waits for the inputs holding the lock: the siblings wait for their turn to take.
            return Ok(match acquire_aligned(inputs, Vec::new())? {
                None => Take::End,
                Some(held) => {
                    let ticket = guard.hold_new(self.index, held[0].meta().seq);
                    Take::Frames(held, ticket)
                }
            });
        }
    }

    /// Wait for `held`'s turn to publish; `Turn::Yield` when the turn waits on an owed frame
    /// this replica must give its own back for.
    pub fn wait_turn(&self, held: Held, aborted: impl Fn() -> bool) -> Result<Turn, StageError> {
        Ok(self.queue.wait_turn(held.ticket, &self.waiter, aborted)?)
    }

    /// Published (or nothing to publish): the turn moves on.
    pub fn finish(&self, held: Held) {
        self.queue.finish(self.index, held.ticket);
    }

    /// The frames taken under `held` cannot be read (made by a producer process that died):
    /// the ticket is abandoned, so the turn moves past it.
    pub fn lost(&self, held: Held) {
        // Owed again where the abandoned list is full: a sibling finds the frame gone and
        // gives it up in turn.
        let _ = self.queue.give_up(self.index, self.pid, held, self.has_turn);
    }

    /// Give the frames back unread, to be taken again under their ticket. Owed first, then
    /// let go: a frame unclaimed and not yet owed would be given up by a sibling's take passing
    /// over it. A sibling that takes the owed frame meanwhile waits for the claim to go.
    pub fn give_back(&self, frames: Vec<ReadSlot>, held: Held) {
        self.queue.give_back(self.index, self.pid, held);
        for slot in frames {
            slot.release_unread();
        }
    }
}

/// Claim and take the frame numbered `seq` on every input; `None` (nothing held) when one no
/// longer has it.
fn claim_everywhere(inputs: &mut [Consumer], seq: u64) -> Option<Vec<ReadSlot>> {
    let mut held = Vec::with_capacity(inputs.len());
    for input in inputs.iter() {
        let slot = loop {
            if let Some(slot) = input.claim_seq(seq) {
                break slot;
            }
            // Owed, but its last holder has yet to let go of it (it gives frames back owed
            // first, and the host settles a dead one the same way): a moment.
            if !input.claimed_under_index(seq) || input.ring().is_aborted() {
                return None;
            }
            std::thread::yield_now();
        };
        held.push(slot);
    }
    for (input, slot) in inputs.iter_mut().zip(&held) {
        input.take(slot);
    }
    Some(held)
}
