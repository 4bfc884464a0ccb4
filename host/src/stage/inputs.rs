//! Taking one frame from each input link, aligned by sequence number (fan-in).
//!
//! The rule (docs/links.md, "Fan-in"): the stage takes the frames numbered `target` from
//! every input, where `target` is the oldest number every input can still deliver (a number an
//! input holds now, or may publish later), or with `latest` on every input, the newest number
//! every input holds now when there is one. An input that has not published `target` yet is
//! waited for while the frames the others hold for it are claimed, so a `drop_oldest` or
//! `latest` producer cannot overwrite them meanwhile. Nothing is taken and then thrown away:
//! a frame passed over is given up on its own link, where the next frame taken counts it as
//! dropped, once.

use crate::link::ring::Offer;
use crate::link::{Consumer, LinkError, ReadSlot};

/// Frames with one sequence number, one per input; `None` once an input has ended and can
/// no longer deliver a number the others can. Frames passed over to reach a common number
/// are counted as dropped on their own links (`Consumer::dropped`): a frame is never taken
/// and then passed over. The frames go into `spare` (emptied first), whose room a stage reuses
/// from frame to frame: one allocation less a frame where a frame costs well under a µs.
pub fn acquire_aligned(inputs: &mut [Consumer], mut spare: Vec<ReadSlot>) -> Result<Option<Vec<ReadSlot>>, LinkError> {
    spare.clear();
    if let [input] = inputs {
        return Ok(input.acquire(0, None)?.map(|slot| {
            spare.push(slot);
            spare
        }));
    }
    // Replicas sharing the inputs: from where the siblings left them.
    for input in inputs.iter_mut() {
        input.catch_up();
    }
    let mut held: Vec<Option<ReadSlot>> = (0..inputs.len()).map(|_| None).collect();
    match align(inputs, &mut held) {
        Ok(true) => {
            spare.extend(held.into_iter().map(|s| s.expect("every input holds a frame")));
            for (input, slot) in inputs.iter_mut().zip(&spare) {
                input.take(slot);
            }
            Ok(Some(spare))
        }
        // Dropping `held` releases whatever it holds.
        Ok(false) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Claim into `held` the frame numbered `target` on every input (see the module's rule);
/// `false` when no number can be delivered by every input any more (end of stream).
fn align(inputs: &mut [Consumer], held: &mut [Option<ReadSlot>]) -> Result<bool, LinkError> {
    let want = inputs.iter().map(Consumer::next_seq).max().expect("at least one input");
    let newest = inputs.iter().all(Consumer::is_latest);
    loop {
        let offers = inputs
            .iter()
            .zip(held.iter())
            .map(|(input, own)| input.offer_holding(want, own.as_ref().map(ReadSlot::index)))
            .collect::<Result<Vec<Offer>, LinkError>>()?;
        let Some(target) = target(&offers, newest) else { return Ok(false) };
        let mut lacking = Vec::new();
        let mut look_again = false;
        for (k, input) in inputs.iter_mut().enumerate() {
            if held[k].as_ref().is_some_and(|s| s.meta().seq == target) {
                continue;
            }
            // Held for a number no longer the target: given up, counted with the next frame taken.
            // Dropping the guard releases it.
            held[k] = None;
            // Also gives up this input's frames older than the target, so a `block` producer
            // waiting for them goes on.
            match input.claim_seq(target) {
                Some(slot) => held[k] = Some(slot),
                // Overwritten since the survey: the target may have changed.
                None if offers[k].ready().binary_search(&target).is_ok() => look_again = true,
                None => lacking.push(k),
            }
        }
        if look_again {
            continue;
        }
        let Some((&first, rest)) = lacking.split_first() else { return Ok(true) };
        // Sleep on one lacking input; the others are checked at every wake, spin and slice.
        inputs[first]
            .wait_for_change(&offers[first], None, || rest.iter().any(|&k| inputs[k].changed_since(&offers[k])))?;
    }
}

/// The number to take next (see the module's rule), or `None` when no number is deliverable
/// by every input: one has ended and holds nothing the others can still deliver.
fn target(offers: &[Offer], newest: bool) -> Option<u64> {
    if newest {
        let held_everywhere = |s: &u64| offers.iter().all(|o| o.ready().binary_search(s).is_ok());
        if let Some(&s) = offers[0].ready().iter().rev().find(|s| held_everywhere(s)) {
            return Some(s);
        }
    }
    // The numbers that can start a run every input delivers: one held somewhere, or the
    // first one some input may publish later. Their least deliverable one is the oldest
    // common number (every number past the largest `future_from` is deliverable, so with
    // every input open this always finds one).
    offers
        .iter()
        .flat_map(|o| o.ready().iter().copied().chain(o.future_from))
        .filter(|&s| offers.iter().all(|o| o.can_deliver(s)))
        .min()
}

#[cfg(test)]
mod tests {
    //! What a join takes, decided from offers; then joins over real rings with threads standing
    //! in for the stages, some in lockstep so the interleaving that lost frames is forced.
    use std::sync::mpsc;
    use std::thread;
    use std::time::{Duration, Instant};

    use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

    use super::*;
    use crate::link::header::{POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST, RingParams};
    use crate::link::wait::Waiter;
    use crate::link::{Producer, RingMap};

    fn offer(ready: &[u64], future_from: Option<u64>) -> Offer {
        Offer::for_test(ready, future_from)
    }

    #[test]
    fn the_oldest_number_every_input_can_still_deliver() {
        // A diamond: the source holds 5..=8, the slow branch has published up to 4.
        let offers = [offer(&[5, 6, 7, 8], Some(9)), offer(&[], Some(5))];
        assert_eq!(target(&offers, false), Some(5));
        assert_eq!(target(&offers, true), Some(5), "latest waits for the branch behind");
        // The branch behind skipped 5 and 6 (it drops): 7 is the first both deliver.
        let offers = [offer(&[5, 6, 7, 8], Some(9)), offer(&[7], Some(8))];
        assert_eq!(target(&offers, false), Some(7));
        // A source far ahead: the other must reach its oldest frame.
        let offers = [offer(&[40, 41, 42], Some(43)), offer(&[3], Some(4))];
        assert_eq!(target(&offers, false), Some(40));
    }

    #[test]
    fn latest_takes_the_newest_number_held_everywhere() {
        let offers = [offer(&[5, 6, 7, 8], Some(9)), offer(&[6, 7], Some(8))];
        assert_eq!(target(&offers, true), Some(7));
        assert_eq!(target(&offers, false), Some(6));
    }

    #[test]
    fn an_ended_input_ends_the_join_once_nothing_common_is_left() {
        // Ended, holding its last frame: the other may still deliver it.
        let offers = [offer(&[299], None), offer(&[], Some(290))];
        assert_eq!(target(&offers, true), Some(299));
        // Ended, holding nothing the other can deliver.
        assert_eq!(target(&[offer(&[], None), offer(&[4], Some(5))], false), None);
        assert_eq!(target(&[offer(&[3], None), offer(&[4], Some(5))], false), None);
    }

    /// Bound on every wait in these tests: reaching it means the join hangs.
    const HANG: Duration = Duration::from_secs(20);

    fn ring(depth: u32, policies: &[u8]) -> RingMap {
        let format = FrameFormat::new(PixelFormat::Gray8, 8, 8);
        let layout = FrameLayout::for_format(format).unwrap();
        let params = RingParams { format, layout, depth, policies: policies.to_vec(), host_data: false };
        RingMap::create("gpuipc-test-fan-in", &params).unwrap()
    }

    fn reopen(map: &RingMap) -> RingMap {
        map.reopen(crate::link::FrameAccess::Write)
    }

    fn consumer(map: &RingMap, index: usize) -> Consumer {
        Consumer::new(reopen(map), index, Waiter::new(5)).unwrap()
    }

    fn producer(map: &RingMap) -> Producer {
        Producer::new(reopen(map), Waiter::new(5))
    }

    fn publish(p: &mut Producer, seq: u64) {
        let slot = p.acquire(Some(Instant::now() + HANG)).unwrap();
        p.publish(slot, seq, 0);
    }

    /// Whether consumer `c` holds a claim on the frame numbered `seq`.
    fn claims(map: &RingMap, c: usize, seq: u64) -> bool {
        map.header().slots[..map.depth()].iter().any(|s| {
            let st = s.0.state.load(std::sync::atomic::Ordering::Acquire);
            st & crate::link::header::claim_bit(c) != 0 && s.0.seq.load(std::sync::atomic::Ordering::Relaxed) == seq
        })
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + HANG;
        while !done() {
            assert!(Instant::now() < deadline, "{what}: not within {HANG:?}");
            thread::yield_now();
        }
    }

    /// A joining stage on its own thread: every aligned set's sequence number is sent as soon
    /// as the frames are released. Returns each input's dropped count at the end.
    fn join(mut inputs: Vec<Consumer>) -> (thread::JoinHandle<Vec<u64>>, mpsc::Receiver<u64>) {
        let (tx, rx) = mpsc::channel();
        let handle = thread::spawn(move || {
            while let Some(frames) = acquire_aligned(&mut inputs, Vec::new()).unwrap() {
                let seq = frames[0].meta().seq;
                assert!(
                    frames.iter().all(|f| f.meta().seq == seq),
                    "not aligned: {:?}",
                    frames.iter().map(|f| f.meta().seq).collect::<Vec<_>>()
                );
                drop(frames);
                if tx.send(seq).is_err() {
                    break;
                }
            }
            inputs.iter().map(Consumer::dropped).collect()
        });
        (handle, rx)
    }

    /// The diamond source -> branch -> join, source -> join, inputs in the order (branch,
    /// source), with this test's thread as the branch. After taking each frame, the branch
    /// waits until the join holds the source's copy of it: releasing its own claim then lets
    /// the source overwrite that frame at once (only a dropping consumer still wants it), so a
    /// join that waits for the branch without holding the source's frame loses it.
    fn diamond_in_lockstep(policy: u8, frames: u64) {
        let source = ring(4, &[POLICY_BLOCK, policy]);
        let branch_out = ring(4, &[policy]);
        let (joined, delivered) = join(vec![consumer(&branch_out, 0), consumer(&source, 1)]);
        let mut source_end = producer(&source);
        let feeder = thread::spawn(move || {
            for seq in 0..frames {
                publish(&mut source_end, seq);
            }
            source_end.close();
        });
        let mut branch_in = Consumer::new(reopen(&source), 0, Waiter::new(5)).unwrap();
        let mut branch = producer(&branch_out);
        for k in 0..frames {
            let slot = branch_in.acquire(0, Some(Instant::now() + HANG)).unwrap().unwrap();
            assert_eq!(slot.meta().seq, k);
            wait_until(&format!("policy {policy}: the join holds the source's frame {k}"), || claims(&source, 1, k));
            publish(&mut branch, k);
            drop(slot);
            assert_eq!(delivered.recv_timeout(HANG), Ok(k), "policy {policy}");
        }
        branch.close();
        feeder.join().unwrap();
        assert_eq!(joined.join().unwrap(), [0, 0], "policy {policy}: nothing lost on either link");
    }

    #[test]
    fn a_diamond_joins_every_frame_when_the_join_keeps_up() {
        for policy in [POLICY_LATEST, POLICY_DROP_OLDEST, POLICY_BLOCK] {
            diamond_in_lockstep(policy, 200);
        }
    }

    #[test]
    fn a_source_far_ahead_is_met_at_its_oldest_frame() {
        // `a` made 0..=10 before the join started; its ring of 4 holds 7..=10.
        let a = ring(4, &[POLICY_LATEST]);
        let b = ring(4, &[POLICY_LATEST]);
        let (mut pa, mut pb) = (producer(&a), producer(&b));
        for seq in 0..=10 {
            publish(&mut pa, seq);
        }
        pa.close();
        let (joined, delivered) = join(vec![consumer(&a, 0), consumer(&b, 0)]);
        for seq in 0..=7 {
            publish(&mut pb, seq);
        }
        assert_eq!(delivered.recv_timeout(HANG), Ok(7));
        for seq in 8..=10 {
            publish(&mut pb, seq);
            assert_eq!(delivered.recv_timeout(HANG), Ok(seq));
        }
        pb.close();
        // 11 frames on each link: 4 joined, 7 dropped, each counted once.
        assert_eq!(joined.join().unwrap(), [7, 7]);
    }

    /// Free-running threads: source -> branch (`block`) -> join, source -> join, both join
    /// links `policy`. Timing decides what is lost; the accounting is exact on each link.
    fn free_running_diamond(policy: u8, frames: u64) {
        let source = ring(3, &[POLICY_BLOCK, policy]);
        let branch_out = ring(3, &[policy]);
        let (joined, delivered) = join(vec![consumer(&branch_out, 0), consumer(&source, 1)]);
        let mut source_end = producer(&source);
        let feeder = thread::spawn(move || {
            for seq in 0..frames {
                publish(&mut source_end, seq);
            }
            source_end.close();
        });
        let mut branch_in = consumer(&source, 0);
        let mut branch = producer(&branch_out);
        let relay = thread::spawn(move || {
            while let Some(slot) = branch_in.acquire(0, Some(Instant::now() + HANG)).unwrap() {
                publish(&mut branch, slot.meta().seq);
                drop(slot);
            }
            branch.close();
        });
        feeder.join().unwrap();
        relay.join().unwrap();
        let dropped = joined.join().unwrap();
        let got: Vec<u64> = delivered.try_iter().collect();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "policy {policy}: out of order");
        assert_eq!(got.last(), Some(&(frames - 1)), "policy {policy}: the last frame is joined");
        for (link, d) in dropped.iter().enumerate() {
            assert_eq!(got.len() as u64 + d, frames, "policy {policy}, link {link}: delivered + dropped = published");
        }
    }

    #[test]
    fn a_free_running_diamond_accounts_for_every_frame_on_each_link() {
        for policy in [POLICY_LATEST, POLICY_DROP_OLDEST, POLICY_BLOCK] {
            free_running_diamond(policy, 5_000);
        }
    }
}
