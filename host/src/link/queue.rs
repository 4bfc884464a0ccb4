//! The queue block: what the replicas of one stage share besides its rings (docs/links.md,
//! "Replicas"). The host creates it in a memfd before the replicas start; each replica maps it.
//!
//! - The **take lock** serialises taking frames from the inputs (a shared consumer index), so
//!   fan-in sets stay whole and tickets follow the input order. It holds the taker's pid, so
//!   the host can break it when its holder died.
//! - A **ticket** is handed out with each frame taken; the output is published in ticket order:
//!   a replica waits until `turn` is its ticket, publishes, and moves the turn on.
//! - What each replica **holds** (ticket and sequence number) lets the host tell what a dead
//!   replica took. Its frame is **owed** (taken again first, under the same ticket) or its
//!   ticket is **abandoned** (the turn moves past it).
//! - `left` counts replicas still running; the last to end closes the output ring.
//!
//! The owed, abandoned and holding lists change under a second lock, the list lock, held for a
//! few stores and never across a wait, by replicas and by the host (reclaiming a dead replica,
//! which it does without the take lock: a replica may hold that one while it waits for input).
//! A process that dies holding either lock has it broken by the host. Entries are written
//! sequence number first, ticket last, so one half-written by a process that died reads as
//! empty, and the host, finding the replica's frame neither owed nor cleared, settles it.
#![allow(unsafe_code)]

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::error::LinkError;
use super::header::CacheLine;
use super::shm::SharedMemory;
use super::wait::wake_all;
use super::wakes::Waiter;

const MAGIC: u64 = u64::from_le_bytes(*b"GPUIPCQB");
const VERSION: u32 = 1;
/// Most replicas of one stage (and entries of each list: at most one per replica is in flight).
pub const MAX_REPLICAS: usize = 64;
/// An empty entry; entries hold a ticket plus one.
const NONE: u64 = 0;

/// A futex word with its sleepers' count, as `wait` uses them.
#[repr(C)]
struct Futex {
    word: AtomicU32,
    sleepers: AtomicU32,
}

impl Futex {
    fn wake(&self) {
        wake_all(&self.word, &self.sleepers);
    }
}

/// A ticket and the sequence number of the frame (or aligned set) it was given for.
#[repr(C)]
struct Entry {
    /// Ticket + 1; 0: empty. Written last (Release) when an entry is filled, so a reader that
    /// sees it (Acquire) sees `seq`.
    ticket: AtomicU64,
    seq: AtomicU64,
    /// In `holding`: 1 once the replica has claimed the frame on its inputs (a frame taken
    /// again from the owed list is held before it is claimed).
    claimed: AtomicU64,
}

#[repr(C)]
struct QueueHeader {
    magic: u64,
    version: AtomicU32,
    replicas: u32,
    /// The pid of the replica holding the take lock; 0: free.
    lock_holder: CacheLine<AtomicU32>,
    lock: CacheLine<Futex>,
    /// The next new ticket (changed under the take lock only).
    next_ticket: CacheLine<AtomicU64>,
    /// The ticket whose output is published next.
    turn: CacheLine<AtomicU64>,
    turn_futex: CacheLine<Futex>,
    /// Replicas that have not ended.
    left: CacheLine<AtomicU32>,
    /// The pid holding the lists (owed, abandoned, holding) for a change of a few words; 0:
    /// free. Spun on, never slept on: nobody holds it across a wait.
    lists_holder: CacheLine<AtomicU32>,
    holding: [CacheLine<Entry>; MAX_REPLICAS],
    /// 1 once replica r has ended (a restarted process of an ended replica counts once).
    ended: [AtomicU32; MAX_REPLICAS],
    owed: [Entry; MAX_REPLICAS],
    /// Ticket + 1 of tickets nobody will publish.
    abandoned: [AtomicU64; MAX_REPLICAS],
}

// SAFETY: shared only through atomics.
unsafe impl Sync for QueueHeader {}

/// A mapped queue block.
pub struct QueueMap {
    shm: SharedMemory,
    replicas: u32,
}

/// What a replica holds, as the host found it when the replica died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub ticket: u64,
    pub seq: u64,
}

/// What became of a dead replica's frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// It held nothing.
    Nothing,
    /// Its output was published already; the turn moved past it.
    Published(Held),
    /// Owed: a sibling takes the frame again under the same ticket.
    Owed(Held),
    /// Abandoned: the frame is given up and counted dropped.
    Abandoned(Held),
}

/// How far a dead replica got with its frames: what its output ring shows published
/// (`published_below`: the ring's `seq_end`; `None` for a stage without output) and the last
/// frame it counted done (`counted`).
#[derive(Debug, Clone, Copy)]
pub struct DoneBelow {
    pub published_below: Option<u64>,
    pub counted: Option<u64>,
}

/// How a wait for the turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// It is this ticket's turn: publish, then [`QueueMap::finish`].
    Mine,
    /// The turn waits for an owed ticket, which only a free replica can redo: give the frame
    /// held back ([`QueueMap::give_back`]) and take again.
    Yield,
}

impl QueueMap {
    /// Create the queue block of a stage with `replicas` processes (the host, before they start).
    pub fn create(name: &str, replicas: u32) -> Result<QueueMap, LinkError> {
        if !(1..=MAX_REPLICAS as u32).contains(&replicas) {
            return Err(LinkError::Invalid(format!("{replicas} replicas; at most {MAX_REPLICAS}")));
        }
        let shm = SharedMemory::create(name, size_of::<QueueHeader>())?;
        let h = shm.as_ptr() as *mut QueueHeader;
        // SAFETY: fresh zeroed memory, at least a header long and page-aligned, not yet shared;
        // zero is a valid value of every field.
        unsafe {
            (*h).magic = MAGIC;
            (*h).replicas = replicas;
            (*h).left.0.store(replicas, Ordering::Relaxed);
            // Last: pairs with the Acquire in `open`.
            (*h).version.store(VERSION, Ordering::Release);
        }
        Ok(QueueMap { shm, replicas })
    }

    /// Map a queue block received as a descriptor, checking it is one made for `replicas`.
    pub fn open(fd: OwnedFd, replicas: u32) -> Result<QueueMap, LinkError> {
        let shm = SharedMemory::open(fd)?;
        if shm.len() < size_of::<QueueHeader>() {
            return Err(LinkError::Invalid(format!("queue block of {} bytes, smaller than its header", shm.len())));
        }
        let map = QueueMap { shm, replicas };
        let h = map.header();
        if h.version.load(Ordering::Acquire) != VERSION || h.magic != MAGIC {
            return Err(LinkError::Invalid("not a queue block of this version".into()));
        }
        if h.replicas != replicas {
            return Err(LinkError::Invalid(format!(
                "queue block for {} replicas, the plan says {replicas}",
                h.replicas
            )));
        }
        Ok(map)
    }

    fn header(&self) -> &QueueHeader {
        // SAFETY: the mapping is page-aligned and at least a header long (checked in `open`,
        // sized in `create`); shared state is changed only through atomics.
        unsafe { &*(self.shm.as_ptr() as *const QueueHeader) }
    }

    pub fn shared_memory(&self) -> &SharedMemory {
        &self.shm
    }

    #[cfg(test)]
    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    // ---- the take lock ----

    /// Take the lock as process `pid`, waiting while a sibling holds it. `aborted` ends the
    /// wait (the run is aborted).
    pub fn lock(&self, pid: u32, waiter: &Waiter, aborted: impl Fn() -> bool) -> Result<TakeGuard<'_>, LinkError> {
        let h = self.header();
        waiter.wait(&h.lock.0.word, &h.lock.0.sleepers, None, || {
            if aborted() {
                return Some(Err(LinkError::Aborted));
            }
            // Acquire: what the last holder did under the lock happens before our take.
            h.lock_holder.0.compare_exchange(0, pid, Ordering::Acquire, Ordering::Relaxed).ok().map(|_| Ok(()))
        })??;
        Ok(TakeGuard { queue: self, pid })
    }

    /// The host, settling replica process `dead_pid`: take the lock as `pid` if it comes
    /// within `within`, so no live sibling is between claiming a frame on the inputs and
    /// recording it in its holding entry while the host tells the dead one's claims from
    /// theirs. `None` where the dead one holds it (then nobody else is taking) or a sibling
    /// keeps it longer (waiting for input: on a one-input stage it has claimed nothing yet).
    pub fn lock_for_settling(&self, pid: u32, dead_pid: u32, within: Duration) -> Option<TakeGuard<'_>> {
        let h = self.header();
        let deadline = Instant::now() + within;
        loop {
            // Acquire: the last holder's takes happen before what the host reads.
            match h.lock_holder.0.compare_exchange(0, pid, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(TakeGuard { queue: self, pid }),
                Err(holder) if holder == dead_pid => return None,
                Err(_) if Instant::now() >= deadline => return None,
                Err(_) => std::thread::sleep(Duration::from_micros(20)),
            }
        }
    }

    /// The host: free the lock if `dead_pid` held it when it died.
    pub fn break_lock_of(&self, dead_pid: u32) {
        let h = self.header();
        if h.lock_holder.0.compare_exchange(dead_pid, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            h.lock.0.word.fetch_add(1, Ordering::SeqCst);
            h.lock.0.wake();
        }
    }

    // ---- the turn ----

    /// Wait until it is `ticket`'s turn to publish, moving the turn past abandoned tickets.
    pub fn wait_turn(&self, ticket: u64, waiter: &Waiter, aborted: impl Fn() -> bool) -> Result<Turn, LinkError> {
        let h = self.header();
        waiter.wait(&h.turn_futex.0.word, &h.turn_futex.0.sleepers, None, || {
            if aborted() {
                return Some(Err(LinkError::Aborted));
            }
            self.skip_abandoned();
            // Acquire: the previous ticket's publish happens before ours.
            let turn = h.turn.0.load(Ordering::Acquire);
            if turn == ticket {
                return Some(Ok(Turn::Mine));
            }
            (turn < ticket && self.is_owed(turn)).then_some(Ok(Turn::Yield))
        })?
    }

    /// Replica `replica` published the output of `ticket` (its turn), or made none: the turn
    /// moves on.
    pub fn finish(&self, replica: u32, ticket: u64) {
        let h = self.header();
        // The turn first, then the holding: a replica killed between the two leaves a ticket
        // the host finds published (by its sequence number) and settles; the other order left
        // the turn on a ticket nobody held (a hang seen once in ~50 runs of the kill tests).
        // Release: our publish happens before the next ticket's holder sees its turn.
        let _ = h.turn.0.compare_exchange(ticket, ticket + 1, Ordering::AcqRel, Ordering::Relaxed);
        h.holding[replica as usize].0.ticket.store(NONE, Ordering::Release);
        self.skip_abandoned();
        self.wake_turn();
    }

    /// A replica that was told to [`Turn::Yield`] gives its frame back: owed under its ticket,
    /// to be taken again (its input slots are the caller's to release unclaimed).
    pub fn give_back(&self, replica: u32, pid: u32, held: Held) {
        self.with_lists(pid, || {
            self.push_owed(held);
            self.header().holding[replica as usize].0.ticket.store(NONE, Ordering::Release);
        });
        self.wake_turn();
    }

    /// A replica took its owed frame again and found it gone from an input (overwritten
    /// upstream meanwhile), or cannot read what it took: its ticket is abandoned. `false`:
    /// the abandoned list was full, and the frame is owed again instead (tried again once the
    /// turn has moved on; not counted as dropped yet).
    pub fn give_up(&self, replica: u32, pid: u32, held: Held, has_turn: bool) -> bool {
        let abandoned = self.with_lists(pid, || {
            let abandoned = !has_turn || self.abandon(held.ticket);
            if !abandoned {
                self.push_owed(held);
            }
            self.header().holding[replica as usize].0.ticket.store(NONE, Ordering::Release);
            abandoned
        });
        self.skip_abandoned();
        self.wake_turn();
        abandoned
    }

    /// Replica `replica` is done with a frame that has no turn (a sink's).
    pub fn release(&self, replica: u32) {
        self.header().holding[replica as usize].0.ticket.store(NONE, Ordering::Release);
    }

    /// Whether process `pid` holds the take lock.
    pub fn lock_held_by(&self, pid: u32) -> bool {
        self.header().lock_holder.0.load(Ordering::Acquire) == pid
    }

    /// Run `change` holding the list lock as `pid`.
    fn with_lists<T>(&self, pid: u32, change: impl FnOnce() -> T) -> T {
        self.with_lists_breaking(pid, |_| false, change)
    }

    /// As [`with_lists`](Self::with_lists), breaking the list lock of a holder `is_dead` says
    /// died (the host: two replicas may die at once, and it settles them one at a time).
    fn with_lists_breaking<T>(&self, pid: u32, is_dead: impl Fn(u32) -> bool, change: impl FnOnce() -> T) -> T {
        let holder = &self.header().lists_holder.0;
        // Acquire: the last holder's changes happen before ours.
        while let Err(now) = holder.compare_exchange_weak(0, pid, Ordering::Acquire, Ordering::Relaxed) {
            if now != 0 && is_dead(now) {
                // Every list change is safe to cut short (entries are written ticket last).
                let _ = holder.compare_exchange(now, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            std::thread::yield_now();
        }
        let out = change();
        // Release: our changes happen before the next holder's.
        holder.store(0, Ordering::Release);
        out
    }

    /// Whether ticket `ticket` is abandoned and the turn has yet to pass it.
    fn is_abandoned(&self, ticket: u64) -> bool {
        self.header().abandoned.iter().any(|e| e.load(Ordering::Acquire) == ticket + 1)
    }

    /// Whether ticket `ticket` waits in the owed list.
    fn is_owed(&self, ticket: u64) -> bool {
        self.header().owed.iter().any(|e| e.ticket.load(Ordering::Acquire) == ticket + 1)
    }

    /// Move the turn past every abandoned ticket it stands on. Anyone may: a compare-and-swap
    /// from the exact ticket moves it once however many try.
    fn skip_abandoned(&self) {
        let h = self.header();
        loop {
            let turn = h.turn.0.load(Ordering::Acquire);
            let Some(entry) = h.abandoned.iter().find(|e| e.load(Ordering::Acquire) == turn + 1) else { return };
            if h.turn.0.compare_exchange(turn, turn + 1, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                let _ = entry.compare_exchange(turn + 1, NONE, Ordering::AcqRel, Ordering::Relaxed);
                self.wake_turn();
            }
        }
    }

    fn wake_turn(&self) {
        let f = &self.header().turn_futex.0;
        f.word.fetch_add(1, Ordering::SeqCst);
        f.wake();
    }

    /// Give up ticket `ticket`: nobody will publish it (list lock held). `false` when the list
    /// is full: tickets given up wait there until the turn passes them, and more than fit can
    /// pile up behind one slow turn (replicas dying again and again under `on_loss = "drop"`);
    /// the caller then owes the frame instead (a sibling takes it again), so nothing fails.
    fn abandon(&self, ticket: u64) -> bool {
        let h = self.header();
        match h.abandoned.iter().find(|e| e.load(Ordering::Acquire) == NONE) {
            Some(free) => {
                free.store(ticket + 1, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Put `held` on the owed list (list lock held).
    fn push_owed(&self, held: Held) {
        let h = self.header();
        let free = h.owed.iter().find(|e| e.ticket.load(Ordering::Acquire) == NONE);
        let e = free.expect("more owed frames than replicas");
        e.seq.store(held.seq, Ordering::Relaxed);
        // Release, last: an entry counts once its ticket is set, with its seq.
        e.ticket.store(held.ticket + 1, Ordering::Release);
    }

    // ---- the host's side ----

    /// Replica `replica` (process `pid`) died. Its frame is owed or abandoned by `on_loss`
    /// (`retry`), unless it was done with it already (`done`). `untracked`: a frame the host found
    /// claimed under the stage's consumer index that no replica holds: the dead one took it
    /// and died before it could draw its ticket (it held the take lock then). A take lock the
    /// dead one holds stays held: break it ([`QueueMap::break_lock_of`]) once its claims on
    /// the inputs are settled too, or a sibling takes past a frame still claimed for it.
    pub fn settle_dead(
        &self,
        replica: u32,
        pid: u32,
        retry: bool,
        done: DoneBelow,
        untracked: Option<u64>,
        is_dead: impl Fn(u32) -> bool,
    ) -> Settled {
        let h = self.header();
        let died_taking = h.lock_holder.0.load(Ordering::Acquire) == pid;
        let _ = h.lists_holder.0.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        let settled = self.with_lists_breaking(std::process::id(), is_dead, || {
            let holding = &h.holding[replica as usize].0;
            let ticket = holding.ticket.load(Ordering::Acquire);
            let held = if ticket != NONE {
                let held = Held { ticket: ticket - 1, seq: holding.seq.load(Ordering::Relaxed) };
                // Died between recording its ticket and moving `next_ticket` past it.
                h.next_ticket.0.fetch_max(held.ticket + 1, Ordering::AcqRel);
                held
            } else if let (true, Some(seq)) = (died_taking, untracked) {
                // Nobody can draw a ticket meanwhile: the dead process still holds the lock.
                Held { ticket: h.next_ticket.0.fetch_add(1, Ordering::AcqRel), seq }
            } else {
                return Settled::Nothing;
            };
            holding.ticket.store(NONE, Ordering::Release);
            if self.is_owed(held.ticket) {
                // It died giving the frame back, after the frame was owed.
                return Settled::Owed(held);
            }
            if self.is_abandoned(held.ticket) {
                // It died giving up a frame gone upstream, after the ticket was abandoned.
                return Settled::Abandoned(held);
            }
            if done.published_below.is_some_and(|below| held.seq < below) || done.counted == Some(held.seq) {
                // Died between its publish (a sink: counting the frame done) and moving the
                // turn on.
                let _ = h.turn.0.compare_exchange(held.ticket, held.ticket + 1, Ordering::AcqRel, Ordering::Relaxed);
                Settled::Published(held)
            } else if retry {
                self.push_owed(held);
                Settled::Owed(held)
            } else {
                // A stage without output has no turn to move past the ticket.
                if done.published_below.is_some() && !self.abandon(held.ticket) {
                    // No room: owed instead, so the turn still reaches it (see `abandon`).
                    self.push_owed(held);
                    return Settled::Owed(held);
                }
                Settled::Abandoned(held)
            }
        });
        // The dead process's take lock stays: it keeps takers out until the caller has also
        // repaired the claims on the inputs, then breaks it (`break_lock_of`).
        self.skip_abandoned();
        self.wake_turn();
        settled
    }

    /// What live replicas but `dead` hold: (sequence number, whether they claimed it yet). A
    /// claim under the stage's consumer index on none of the claimed ones is the dead one's.
    pub fn held_by_others(&self, dead: u32) -> Vec<(u64, bool)> {
        let h = self.header();
        (0..self.replicas as usize)
            .filter(|&r| r != dead as usize)
            .filter(|&r| h.holding[r].0.ticket.load(Ordering::Acquire) != NONE)
            .map(|r| (h.holding[r].0.seq.load(Ordering::Relaxed), h.holding[r].0.claimed.load(Ordering::Acquire) != 0))
            .collect()
    }

    /// Replica `replica` claimed the frame it holds (one taken again from the owed list).
    pub fn claimed(&self, replica: u32) {
        self.header().holding[replica as usize].0.claimed.store(1, Ordering::Release);
    }

    /// Replica `replica` ended for good (finished, or died without a restart to come). Returns
    /// whether none is left: then the caller closes the output ring. Counted once per replica,
    /// and asked again gives the same answer: a replica killed after it ended, before it
    /// closed the ring, is restarted, ends again and closes it then.
    pub fn replica_ended(&self, replica: u32) -> bool {
        let h = self.header();
        if h.ended[replica as usize].swap(1, Ordering::AcqRel) == 0 {
            h.left.0.fetch_sub(1, Ordering::AcqRel);
        }
        h.left.0.load(Ordering::Acquire) == 0
    }

    /// Owed frames nobody will take (every replica ended): their tickets are abandoned and
    /// they are returned, to be given up on the inputs and counted.
    pub fn abandon_all_owed(&self) -> Vec<Held> {
        let h = self.header();
        let out = self.with_lists(std::process::id(), || {
            let mut out = Vec::new();
            for e in &h.owed {
                let t = e.ticket.swap(NONE, Ordering::AcqRel);
                if t != NONE {
                    let held = Held { ticket: t - 1, seq: e.seq.load(Ordering::Relaxed) };
                    self.abandon(held.ticket);
                    out.push(held);
                }
            }
            out
        });
        self.skip_abandoned();
        self.wake_turn();
        out
    }

    /// Whether sequence number `seq` is owed: a frame a shared consumer must not give up.
    pub fn owes(&self, seq: u64) -> bool {
        self.header()
            .owed
            .iter()
            .any(|e| e.ticket.load(Ordering::Acquire) != NONE && e.seq.load(Ordering::Relaxed) == seq)
    }
}

/// The take lock, held: taking frames and tickets happens through it.
pub struct TakeGuard<'q> {
    queue: &'q QueueMap,
    pid: u32,
}

impl TakeGuard<'_> {
    /// The oldest owed frame, removed from the list: take it again under its ticket, and
    /// hold it as replica `replica` (in one change, so the host never finds it in neither).
    pub fn take_owed(&self, replica: u32) -> Option<Held> {
        let q = self.queue;
        let h = q.header();
        q.with_lists(self.pid, || {
            let (entry, t) = h
                .owed
                .iter()
                .filter_map(|e| {
                    let t = e.ticket.load(Ordering::Acquire);
                    (t != NONE).then_some((e, t))
                })
                .min_by_key(|&(_, t)| t)?;
            let held = Held { ticket: t - 1, seq: entry.seq.load(Ordering::Relaxed) };
            h.holding[replica as usize].0.claimed.store(0, Ordering::Release);
            self.hold(replica, held);
            entry.ticket.store(NONE, Ordering::Release);
            Some(held)
        })
    }

    /// Draw a new ticket for the frame numbered `seq`, taken fresh from the inputs, and hold
    /// it as replica `replica`. Recorded before `next_ticket` moves, so a replica that dies in
    /// between leaves its ticket where the host finds it (and repairs `next_ticket`).
    pub fn hold_new(&self, replica: u32, seq: u64) -> Held {
        let h = self.queue.header();
        // Only takers change it, one at a time under the lock.
        let held = Held { ticket: h.next_ticket.0.load(Ordering::Acquire), seq };
        h.holding[replica as usize].0.claimed.store(1, Ordering::Release);
        self.hold(replica, held);
        h.next_ticket.0.store(held.ticket + 1, Ordering::Release);
        held
    }

    fn hold(&self, replica: u32, held: Held) {
        let e = &self.queue.header().holding[replica as usize].0;
        e.seq.store(held.seq, Ordering::Relaxed);
        // Release: the host that sees the ticket sees the seq.
        e.ticket.store(held.ticket + 1, Ordering::Release);
    }
}

impl Drop for TakeGuard<'_> {
    fn drop(&mut self) {
        let h = self.queue.header();
        // Release: our takes happen before the next holder's. Only if still ours: the host
        // breaks the lock of a dead holder only, so a live one always finds its pid here.
        let _ = h.lock_holder.0.compare_exchange(self.pid, 0, Ordering::Release, Ordering::Relaxed);
        h.lock.0.word.fetch_add(1, Ordering::SeqCst);
        h.lock.0.wake();
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::sync::{Arc, Mutex};
    use std::thread;

    use super::*;

    fn reopen(q: &QueueMap) -> QueueMap {
        QueueMap::open(q.shared_memory().as_fd().try_clone_to_owned().unwrap(), q.replicas()).unwrap()
    }

    #[test]
    fn a_block_for_other_replicas_or_too_short_is_refused() {
        let q = QueueMap::create("gpuipc-test-queue", 2).unwrap();
        assert!(QueueMap::open(q.shared_memory().as_fd().try_clone_to_owned().unwrap(), 3).is_err());
        let short = SharedMemory::create("gpuipc-test-queue-short", 64).unwrap();
        assert!(QueueMap::open(short.as_fd().try_clone_to_owned().unwrap(), 2).is_err());
        assert!(QueueMap::create("gpuipc-test-queue", 0).is_err());
        assert!(QueueMap::create("gpuipc-test-queue", 65).is_err());
    }

    /// `replicas` threads take tickets under the lock, work, and publish in turn into a log;
    /// a "host" kills some of them at chosen points (`die_at`: after how many frames each one
    /// dies, and where), then settles them; a killed thread is "restarted" (carries on under a
    /// new pid). Returns the published tickets in order, and the abandoned ones.
    fn run(replicas: u32, tickets: u64, retry: bool, kills: &[(u32, u64, &'static str)]) -> (Vec<u64>, Vec<u64>) {
        let q = QueueMap::create("gpuipc-test-queue", replicas).unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let abandoned = Arc::new(Mutex::new(Vec::new()));
        let next_input = Arc::new(AtomicU64::new(0));
        // Frames each thread has done: a thread takes a new ticket only while it is at most
        // `FAIR_SLACK` frames ahead of the slowest, so one the scheduler starves (a loaded
        // machine) still reaches the frame of its kill, which the kill tests count on.
        const FAIR_SLACK: u64 = 16;
        let progress: Arc<Vec<AtomicU64>> = Arc::new((0..replicas).map(|_| AtomicU64::new(0)).collect());
        let threads: Vec<_> = (0..replicas)
            .map(|r| {
                let q = reopen(&q);
                let log = log.clone();
                let abandoned = abandoned.clone();
                let next_input = next_input.clone();
                let progress = progress.clone();
                let kills: Vec<(u64, &'static str)> = kills.iter().filter(|k| k.0 == r).map(|k| (k.1, k.2)).collect();
                thread::spawn(move || {
                    let waiter = Waiter::new(2);
                    let mut pid = 1000 + r;
                    let mut done = 0u64;
                    loop {
                        progress[r as usize].store(done, Ordering::Relaxed);
                        let die = kills.iter().find(|k| k.0 == done).map(|k| k.1);
                        let guard = q.lock(pid, &waiter, || false).unwrap();
                        let held = match guard.take_owed(r) {
                            Some(h) => h,
                            None => {
                                let seq = next_input.load(Ordering::Relaxed);
                                let slowest = progress.iter().map(|p| p.load(Ordering::Relaxed)).min().unwrap_or(0);
                                if seq < tickets && done > slowest + FAIR_SLACK {
                                    drop(guard);
                                    thread::yield_now();
                                    continue;
                                }
                                if seq >= tickets {
                                    drop(guard);
                                    // Owed frames may still come from a sibling that dies later;
                                    // the test ends when every ticket is settled instead.
                                    if log.lock().unwrap().len() as u64 + abandoned.lock().unwrap().len() as u64
                                        >= tickets
                                    {
                                        return;
                                    }
                                    thread::yield_now();
                                    continue;
                                }
                                next_input.store(seq + 1, Ordering::Relaxed);
                                guard.hold_new(r, seq)
                            }
                        };
                        if die == Some("holding the lock") {
                            std::mem::forget(guard);
                            settle(&q, r, pid, retry, &abandoned, Some(0));
                            pid += 100;
                            done += 1;
                            continue;
                        }
                        drop(guard);
                        if die == Some("after taking") {
                            settle(&q, r, pid, retry, &abandoned, Some(0));
                            pid += 100;
                            done += 1;
                            continue;
                        }
                        match q.wait_turn(held.ticket, &waiter, || false).unwrap() {
                            Turn::Yield => {
                                q.give_back(r, pid, held);
                                continue;
                            }
                            Turn::Mine => {}
                        }
                        log.lock().unwrap().push(held.ticket);
                        if die == Some("after moving the turn") {
                            // Half of `finish`: the turn moved, the holding not yet cleared.
                            let _ = q.header().turn.0.compare_exchange(
                                held.ticket,
                                held.ticket + 1,
                                Ordering::AcqRel,
                                Ordering::Relaxed,
                            );
                            q.wake_turn();
                            settle(&q, r, pid, retry, &abandoned, Some(held.seq + 1));
                            pid += 100;
                            done += 1;
                            continue;
                        }
                        if die == Some("after publishing") {
                            // The output ring's `seq_end`: past the frame just published.
                            settle(&q, r, pid, retry, &abandoned, Some(held.seq + 1));
                            pid += 100;
                            done += 1;
                            continue;
                        }
                        q.finish(r, held.ticket);
                        done += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let log = log.lock().unwrap().clone();
        let abandoned = abandoned.lock().unwrap().clone();
        (log, abandoned)
    }

    /// The host's part for a thread that "died".
    fn settle(q: &QueueMap, r: u32, pid: u32, retry: bool, abandoned: &Mutex<Vec<u64>>, published_below: Option<u64>) {
        if let Settled::Abandoned(h) =
            q.settle_dead(r, pid, retry, DoneBelow { published_below, counted: None }, None, |_| false)
        {
            abandoned.lock().unwrap().push(h.ticket);
        }
        q.break_lock_of(pid);
    }

    #[test]
    fn tickets_are_published_once_each_and_in_order() {
        for replicas in [1, 2, 4, 8] {
            let (log, abandoned) = run(replicas, 3000, true, &[]);
            assert_eq!(log, (0..3000).collect::<Vec<u64>>(), "{replicas} replicas");
            assert!(abandoned.is_empty());
        }
    }

    #[test]
    fn a_dead_replicas_ticket_is_redone_in_its_place_with_retry() {
        let kills = [
            (0, 10, "after taking"),
            (1, 20, "holding the lock"),
            (2, 30, "after publishing"),
            (3, 40, "after moving the turn"),
            (0, 400, "after taking"),
            (3, 700, "holding the lock"),
        ];
        let (log, abandoned) = run(4, 2000, true, &kills);
        assert_eq!(log, (0..2000).collect::<Vec<u64>>());
        assert!(abandoned.is_empty());
    }

    #[test]
    fn a_dead_replicas_ticket_is_skipped_with_drop() {
        let kills = [
            (0, 10, "after taking"),
            (1, 20, "holding the lock"),
            (2, 30, "after publishing"),
            (3, 40, "after moving the turn"),
            (1, 300, "after taking"),
        ];
        let (log, abandoned) = run(4, 2000, false, &kills);
        assert!(log.windows(2).all(|w| w[0] < w[1]), "published out of order: {log:?}");
        let mut all: Vec<u64> = log.iter().chain(&abandoned).copied().collect();
        all.sort_unstable();
        let twice: Vec<u64> = all.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).collect();
        let missing: Vec<u64> = (0..2000).filter(|t| all.binary_search(t).is_err()).collect();
        assert!(
            twice.is_empty() && missing.is_empty(),
            "twice {twice:?}, missing {missing:?}, abandoned {abandoned:?}"
        );
        // Each kill before a publish abandons one ticket (a thread that runs out of frames
        // before its kill's turn is not killed: the threads share 2,000 frames as they go).
        assert!((1..=3).contains(&abandoned.len()), "{abandoned:?}");
    }

    #[test]
    fn the_host_settles_a_dead_replica_with_the_take_lock_unless_the_dead_one_or_a_slow_taker_holds_it() {
        let q = QueueMap::create("gpuipc-test-queue", 2).unwrap();
        let h = q.header();
        let (host, dead, live) = (100, 7, 8);
        // Free: the host holds it until it is done, and a sibling's take waits for that.
        let guard = q.lock_for_settling(host, dead, Duration::from_millis(50)).expect("a free lock");
        assert_eq!(h.lock_holder.0.load(Ordering::Acquire), host);
        drop(guard);
        assert_eq!(h.lock_holder.0.load(Ordering::Acquire), 0);
        // The dead one holds it: nobody else can be taking, so no wait (the host breaks it once
        // the dead one's frames are settled).
        h.lock_holder.0.store(dead, Ordering::Release);
        assert!(q.lock_for_settling(host, dead, Duration::from_secs(60)).is_none());
        // A live sibling keeps it past the wait (waiting for input): settled without it.
        h.lock_holder.0.store(live, Ordering::Release);
        assert!(q.lock_for_settling(host, dead, Duration::from_millis(5)).is_none());
        assert_eq!(h.lock_holder.0.load(Ordering::Acquire), live, "a live holder's lock stays its own");
        // One that lets go within the wait: the host gets it.
        let q2 = reopen(&q);
        let letting_go = thread::spawn(move || {
            thread::sleep(Duration::from_millis(5));
            q2.header().lock_holder.0.store(0, Ordering::Release);
        });
        assert!(q.lock_for_settling(host, dead, Duration::from_secs(60)).is_some());
        letting_go.join().unwrap();
    }

    #[test]
    fn tickets_given_up_beyond_the_abandoned_list_are_owed_instead() {
        let q = QueueMap::create("gpuipc-test-queue", 2).unwrap();
        let h = q.header();
        // The turn waits on ticket 0 (a slow sibling); tickets 1..=64 are given up.
        for ticket in 1..=MAX_REPLICAS as u64 {
            assert!(q.give_up(1, 7, Held { ticket, seq: ticket }, true), "ticket {ticket} abandoned");
        }
        let one_more = Held { ticket: 65, seq: 65 };
        assert!(!q.give_up(1, 7, one_more, true), "no room: owed, not failed");
        assert!(q.is_owed(65) && !q.is_abandoned(65));
        // The sibling publishes ticket 0: the turn runs through the abandoned ones, up to the
        // owed one, and the list has room again.
        q.finish(0, 0);
        assert_eq!(h.turn.0.load(Ordering::Acquire), 65);
        assert!(h.abandoned.iter().all(|e| e.load(Ordering::Acquire) == NONE));
    }

    #[test]
    fn the_last_replica_to_end_is_told_so_once_per_replica() {
        let q = QueueMap::create("gpuipc-test-queue", 3).unwrap();
        assert!(!q.replica_ended(0));
        // Replica 0 restarted after it ended (killed before it could close the ring).
        assert!(!q.replica_ended(0));
        assert!(!q.replica_ended(2));
        assert!(q.replica_ended(1));
        assert!(q.replica_ended(0), "asked again after the last ended: still none left");
    }
}
