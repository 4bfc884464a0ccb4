//! The protocol under stress: threads stand in for processes, each end maps the memfd on
//! its own, and every frame's bytes carry its sequence number so a torn, repeated,
//! reordered or lost frame is caught.
#![allow(unsafe_code)]

use std::sync::Arc;
use std::thread;
use std::time::Instant;

use gpuipc_plugin_api::{FrameFormat, FrameLayout, PixelFormat};

use super::*;
use crate::link::LinkError;
use crate::link::header::{POLICY_BLOCK, POLICY_DROP_OLDEST, POLICY_LATEST, RingParams};
use crate::link::wakes::Waiter;

fn ring(depth: u32, policies: &[u8]) -> RingMap {
    let format = FrameFormat::new(PixelFormat::Gray8, 64, 64);
    let layout = FrameLayout::for_format(format).unwrap();
    let params = RingParams { format, layout, depth, policies: policies.to_vec(), host_data: true };
    RingMap::create("gpuipc-test-ring", &params).unwrap()
}

/// The producer's end of `map`.
fn reopen(map: &RingMap) -> RingMap {
    map.reopen(FrameAccess::Write)
}

/// A consumer's end of `map`: frames read-only.
fn reopen_to_read(map: &RingMap) -> RingMap {
    map.reopen(FrameAccess::Read)
}

fn fill(map: &RingMap, slot: usize, seq: u64) {
    let (ptr, len) = map.slot_data(slot).unwrap();
    #[allow(unsafe_code)]
    // SAFETY: (test) the producer owns the slot while writing.
    let bytes = unsafe { std::slice::from_raw_parts_mut(ptr, len as usize) };
    for chunk in bytes.chunks_exact_mut(8) {
        chunk.copy_from_slice(&seq.to_le_bytes());
    }
}

fn check(map: &RingMap, slot: &ReadSlot) {
    let (ptr, len) = map.slot_data(slot.index()).unwrap();
    #[allow(unsafe_code)]
    // SAFETY: (test) the consumer's claim keeps the producer out.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len as usize) };
    for chunk in bytes.chunks_exact(8) {
        assert_eq!(u64::from_le_bytes(chunk.try_into().unwrap()), slot.meta().seq, "torn frame");
    }
}

/// Run `frames` through a ring; returns each consumer's received sequence numbers.
fn pump(depth: u32, policies: &[u8], frames: u64, slow: &[bool]) -> (Vec<Vec<u64>>, Vec<u64>) {
    pump_stride(depth, policies, frames, slow, 1)
}

/// As `pump`, publishing sequence numbers 0, stride, 2 * stride, ... (a stage after a
/// dropping link passes on the numbers it got).
fn pump_stride(depth: u32, policies: &[u8], frames: u64, slow: &[bool], stride: u64) -> (Vec<Vec<u64>>, Vec<u64>) {
    let map = ring(depth, policies);
    let waiter = Waiter::new(5);
    let consumers: Vec<_> = (0..policies.len())
        .map(|c| {
            let mut consumer = Consumer::new(reopen_to_read(&map), c, waiter.clone()).unwrap();
            let slow = slow[c];
            thread::spawn(move || {
                let mut got = Vec::new();
                let deadline = Some(Instant::now() + std::time::Duration::from_secs(60));
                while let Some(slot) = consumer.acquire(0, deadline).unwrap() {
                    check(consumer.ring(), &slot);
                    got.push(slot.meta().seq);
                    if slow {
                        let t = Instant::now();
                        while t.elapsed().as_micros() < 50 {
                            std::hint::spin_loop();
                        }
                    }
                    drop(slot);
                }
                (got, consumer.dropped())
            })
        })
        .collect();
    let mut producer = Producer::new(reopen(&map), waiter);
    for seq in (0..frames).map(|i| i * stride) {
        let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
        fill(producer.ring(), slot.index(), seq);
        producer.publish(slot, seq, seq * 10);
    }
    producer.close();
    consumers.into_iter().map(|t| t.join().unwrap()).unzip()
}

#[test]
fn replicas_sharing_a_consumer_each_take_different_frames_and_together_all() {
    for replicas in [1, 2, 4] {
        let map = ring(4, &[POLICY_BLOCK]);
        let waiter = Waiter::new(5);
        // Stands in for the replicas' take lock (`queue`): acquire to take, one at a time.
        let take_lock = Arc::new(std::sync::Mutex::new(()));
        let takers: Vec<_> = (0..replicas)
            .map(|_| {
                let mut consumer = Consumer::new_shared(reopen_to_read(&map), 0, waiter.clone(), None).unwrap();
                let take_lock = take_lock.clone();
                thread::spawn(move || {
                    let mut got = Vec::new();
                    let deadline = Some(Instant::now() + std::time::Duration::from_secs(60));
                    loop {
                        let slot = {
                            let _taking = take_lock.lock().unwrap();
                            consumer.acquire(0, deadline).unwrap()
                        };
                        let Some(slot) = slot else { break };
                        check(consumer.ring(), &slot);
                        got.push(slot.meta().seq);
                        drop(slot);
                    }
                    (got, consumer.dropped())
                })
            })
            .collect();
        let mut producer = Producer::new(reopen(&map), waiter);
        for seq in 0..2000 {
            let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
            fill(producer.ring(), slot.index(), seq);
            producer.publish(slot, seq, seq);
        }
        producer.close();
        let results: Vec<(Vec<u64>, u64)> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        let mut all: Vec<u64> = results.iter().flat_map(|(got, _)| got.iter().copied()).collect();
        for (got, dropped) in &results {
            assert!(got.windows(2).all(|w| w[0] < w[1]), "{replicas} replicas: one took out of order: {got:?}");
            assert_eq!(*dropped, 0);
        }
        all.sort_unstable();
        assert_eq!(all, (0..2000).collect::<Vec<u64>>(), "{replicas} replicas: every frame taken exactly once");
    }
}

#[test]
fn producers_taking_turns_publish_one_stream() {
    // One slot each: the turn's holder always has its own slot written.
    let map = ring(3, &[POLICY_BLOCK]);
    let waiter = Waiter::new(5);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, waiter.clone()).unwrap();
    // Stands in for the replicas' turn (`queue`): producer r publishes the numbers n with
    // n % 3 == r, each when the turn reaches it; each writes its slot before its turn.
    let turn = Arc::new((std::sync::Mutex::new(0u64), std::sync::Condvar::new()));
    let producers: Vec<_> = (0..3u64)
        .map(|r| {
            let mut producer = Producer::with_slots(reopen(&map), waiter.clone(), r as usize..r as usize + 1).unwrap();
            let turn = turn.clone();
            thread::spawn(move || {
                for seq in (r..600).step_by(3) {
                    let slot = producer.acquire(Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap();
                    fill(producer.ring(), slot.index(), seq);
                    let (lock, changed) = &*turn;
                    let mut now = changed.wait_while(lock.lock().unwrap(), |t| *t != seq).unwrap();
                    producer.publish(slot, seq, seq);
                    *now += 1;
                    changed.notify_all();
                }
            })
        })
        .collect();
    let mut got = Vec::new();
    while got.len() < 600 {
        let slot = consumer.acquire(0, Some(Instant::now() + std::time::Duration::from_secs(60))).unwrap().unwrap();
        check(consumer.ring(), &slot);
        got.push(slot.meta().seq);
    }
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(got, (0..600).collect::<Vec<u64>>());
    assert_eq!(consumer.dropped(), 0, "the publish ordinals run on across producers");
}

#[test]
fn block_consumers_get_every_frame_in_order_at_every_depth() {
    for depth in [1, 2, 3, 8] {
        let (got, dropped) = pump(depth, &[POLICY_BLOCK; 3], 10_000, &[false, false, true]);
        for (c, seqs) in got.iter().enumerate() {
            assert_eq!(seqs.len(), 10_000, "depth {depth} consumer {c}");
            assert!(seqs.iter().enumerate().all(|(i, &s)| s == i as u64), "depth {depth} consumer {c}");
            assert_eq!(dropped[c], 0);
        }
    }
}

#[test]
fn sequence_numbers_with_gaps_are_not_mistaken_for_drops() {
    let (got, dropped) = pump_stride(2, &[POLICY_BLOCK; 2], 5_000, &[false, true], 3);
    for seqs in got {
        assert_eq!(seqs, (0..5_000).map(|i| i * 3).collect::<Vec<u64>>());
    }
    assert_eq!(dropped, [0, 0]);
}

#[test]
fn dropping_consumers_account_for_every_frame_and_keep_order() {
    for policy in [POLICY_DROP_OLDEST, POLICY_LATEST] {
        let frames = 5_000;
        let (got, dropped) = pump(3, &[policy, POLICY_BLOCK], frames, &[true, false]);
        let seqs = &got[0];
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "policy {policy}: out of order");
        assert_eq!(*seqs.last().unwrap(), frames - 1, "policy {policy}: the last frame is never lost");
        assert_eq!(seqs.len() as u64 + dropped[0], frames, "policy {policy}");
        assert_eq!(got[1].len() as u64, frames, "the block consumer beside it loses nothing");
    }
}

#[test]
fn abort_wakes_a_waiting_consumer_and_producer() {
    let map = ring(1, &[POLICY_BLOCK]);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let waiting = thread::spawn(move || consumer.acquire(0, None));
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    let slot = producer.acquire(None).unwrap();
    producer.publish(slot, 0, 0);
    // The consumer holds frame 0 (its guard is kept until the end); the ring of one is full.
    let held = waiting.join().unwrap().unwrap().expect("frame 0");
    let blocked = thread::spawn(move || producer.acquire(None).map(|_| ()));
    map.abort();
    assert!(matches!(blocked.join().unwrap(), Err(LinkError::Aborted)));
    drop(held);
}

#[test]
fn a_closed_producer_waits_until_its_consumers_released_every_frame() {
    let map = ring(2, &[POLICY_BLOCK]);
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    for seq in 0..2 {
        let slot = producer.acquire(None).unwrap();
        producer.publish(slot, seq, 0);
    }
    producer.close();
    let (events, order) = std::sync::mpsc::channel();
    let (go, wait_for_go) = std::sync::mpsc::channel::<()>();
    let consumer_events = events.clone();
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let reader = thread::spawn(move || {
        let first = consumer.acquire(0, None).unwrap().unwrap();
        drop(first);
        let last = consumer.acquire(0, None).unwrap().unwrap();
        wait_for_go.recv().unwrap();
        consumer_events.send("releasing the last frame").unwrap();
        drop(last);
        assert!(consumer.acquire(0, None).unwrap().is_none());
    });
    let drainer = thread::spawn(move || {
        producer.wait_drained(None).unwrap();
        events.send("drained").unwrap();
    });
    go.send(()).unwrap();
    assert_eq!(order.recv().unwrap(), "releasing the last frame");
    assert_eq!(order.recv().unwrap(), "drained");
    reader.join().unwrap();
    drainer.join().unwrap();
}

#[test]
fn a_deadline_ends_a_wait_for_a_silent_peer() {
    let map = ring(2, &[POLICY_BLOCK]);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let deadline = Some(Instant::now() + std::time::Duration::from_millis(20));
    assert!(matches!(consumer.acquire(0, deadline), Err(LinkError::TimedOut)));
}

/// Frames in host memory are a memfd of their own: the producer writes them, each consumer
/// reads them through a mapping it cannot make writable and holds no descriptor of them,
/// and the descriptor consumers are given refuses a writable shared mapping.
#[test]
fn consumers_read_the_frames_the_producer_wrote_through_memory_they_cannot_write() {
    use rustix::io::Errno;
    use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

    let map = ring(2, &[POLICY_BLOCK, POLICY_BLOCK]);
    assert_eq!(map.fds_for(FrameAccess::Write).len(), 2, "control block and data memfd");
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    let mut consumers: Vec<_> =
        (0..2).map(|c| Consumer::new(reopen_to_read(&map), c, Waiter::new(0)).unwrap()).collect();
    let slot = producer.acquire(None).unwrap();
    fill(producer.ring(), slot.index(), 41);
    producer.publish(slot, 41, 0);
    let page = rustix::param::page_size();
    for consumer in &mut consumers {
        let slot = consumer.acquire(0, None).unwrap().expect("frame 41");
        check(consumer.ring(), &slot);
        assert_eq!(slot.meta().seq, 41);
        assert_eq!(consumer.ring().fds_for(FrameAccess::Read).len(), 1, "no descriptor of the frames kept");
        let (ptr, _) = consumer.ring().slot_data(slot.index()).unwrap();
        // SAFETY: (test) the page holding the frame, in the consumer's mapping; if the
        // kernel allowed it, nothing would write there.
        let made_writable = unsafe {
            rustix::mm::mprotect(
                (ptr as usize / page * page) as *mut _,
                page,
                MprotectFlags::READ | MprotectFlags::WRITE,
            )
        };
        assert_eq!(made_writable.err(), Some(Errno::ACCESS));
    }
    let given = map.fds_for(FrameAccess::Read)[1];
    // SAFETY: (test) a fresh mapping, if the kernel made one; it is not used.
    let writable = unsafe {
        rustix::mm::mmap(std::ptr::null_mut(), page, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, given, 0)
    };
    assert_eq!(writable.err(), Some(Errno::ACCESS));
}

#[test]
fn claiming_one_number_gives_up_older_frames_and_counts_them_once() {
    let map = ring(2, &[POLICY_BLOCK]);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    let soon = || Some(Instant::now() + std::time::Duration::from_secs(10));
    for seq in [0, 1] {
        let slot = producer.acquire(soon()).unwrap();
        producer.publish(slot, seq, 0);
    }
    let offer = consumer.offer(0).unwrap();
    assert_eq!((offer.ready(), offer.future_from), (&[0, 1][..], Some(2)));
    let one = consumer.claim_seq(1).unwrap();
    assert_eq!(one.meta().seq, 1);
    assert!(consumer.claim_seq(1).is_none(), "claimed already");
    // Frame 0 was given up on the way: the `block` producer has a slot again.
    let slot = producer.acquire(soon()).unwrap();
    producer.publish(slot, 2, 0);
    // Let go untaken (a fan-in chose another number): counted with the next frame taken.
    drop(one);
    let two = consumer.claim_seq(2).unwrap();
    consumer.take(&two);
    assert_eq!((consumer.dropped(), consumer.next_seq()), (2, 3));
    drop(two);
    assert!(consumer.claim_seq(3).is_none(), "not published yet");
    producer.close();
    let offer = consumer.offer(0).unwrap();
    assert_eq!((offer.ready(), offer.future_from), (&[][..], None));
    assert!(consumer.changed_since(&offer));
    map.abort();
    assert!(matches!(consumer.offer(0), Err(LinkError::Aborted)));
}

#[test]
fn a_wait_for_change_ends_on_a_publish_elsewhere_and_on_abort() {
    let map = ring(2, &[POLICY_LATEST]);
    let consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let seen = consumer.offer(0).unwrap();
    assert!(!consumer.changed_since(&seen));
    let deadline = Some(Instant::now() + std::time::Duration::from_millis(20));
    assert!(matches!(consumer.wait_for_change(&seen, deadline, || false), Err(LinkError::TimedOut)));
    consumer.wait_for_change(&seen, None, || true).unwrap();
    let waiting = thread::spawn(move || consumer.wait_for_change(&seen, None, || false));
    map.abort();
    assert!(matches!(waiting.join().unwrap(), Err(LinkError::Aborted)));
}

/// An in-order consumer claims the frame it wants in the slot the producer prefers for it
/// (sequence number modulo depth) and scans when it is elsewhere; frames older than the one
/// it wants are left pending by a claim in place and given up by the next scan, which comes
/// at the latest when the `block` producer has no slot: no frame is held for ever, and each
/// is counted once.
#[test]
fn the_wanted_frame_is_claimed_in_place_else_found_by_a_scan() {
    let map = ring(4, &[POLICY_BLOCK]);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    let soon = || Some(Instant::now() + std::time::Duration::from_secs(10));
    for seq in 0..4 {
        let slot = producer.acquire(soon()).unwrap();
        assert_eq!(slot.index(), seq as usize, "the producer's preferred slot");
        producer.publish(slot, seq, 100 + seq);
    }
    // Wanting 3: found in place; 0 to 2 stay pending, so the ring stays full.
    let three = consumer.acquire(3, soon()).unwrap().unwrap();
    assert_eq!((three.index(), three.meta().seq, three.meta().timestamp_ns, three.meta().ordinal), (3, 3, 103, 3));
    assert_eq!(consumer.dropped(), 3, "passed over, counted when 3 was taken");
    drop(three);
    // Frames 0 to 2 are still pending: slot 3, just read, is the only one free.
    let only = producer.acquire(soon()).unwrap();
    assert_eq!(only.index(), 3);
    producer.cancel(only);
    // Wanting 4, which is not there: the scan gives 0 to 2 up and the producer has slots again.
    assert!(matches!(consumer.acquire(0, Some(Instant::now())), Err(LinkError::TimedOut)));
    let slot = producer.acquire(soon()).unwrap();
    assert_eq!(slot.index(), 0);
    producer.publish(slot, 4, 104);
    let four = consumer.acquire(0, soon()).unwrap().unwrap();
    assert_eq!((four.index(), four.meta().seq), (0, 4));
    assert_eq!(consumer.dropped(), 3, "counted once");
    drop(four);

    // A producer writing another part of the ring (a replica's slots 2 and 3): frame 5 lands in
    // slot 3, not 5 mod 4 = 1, and the scan finds it.
    let mut part = Producer::with_slots(reopen(&map), Waiter::new(0), 2..4).unwrap();
    let slot = part.acquire(soon()).unwrap();
    assert_eq!(slot.index(), 3);
    part.publish(slot, 5, 105);
    let five = consumer.acquire(0, soon()).unwrap().unwrap();
    assert_eq!((five.index(), five.meta().seq, five.meta().timestamp_ns), (3, 5, 105));
}

/// Only a frame's own fields of a slot's metadata are written per frame: the format and
/// layout every slot carries are the ring's, as its creator wrote them.
#[test]
fn a_publish_writes_the_frames_own_metadata_and_keeps_the_rings_format() {
    let map = ring(2, &[POLICY_BLOCK]);
    let mut consumer = Consumer::new(reopen_to_read(&map), 0, Waiter::new(0)).unwrap();
    let mut producer = Producer::new(reopen(&map), Waiter::new(0));
    let soon = || Some(Instant::now() + std::time::Duration::from_secs(10));
    for seq in [7, 9] {
        let slot = producer.acquire(soon()).unwrap();
        producer.publish_born(slot, seq, 1000 + seq, 2000 + seq);
        let got = consumer.acquire(0, soon()).unwrap().unwrap();
        let want = crate::link::header::FrameMeta {
            seq,
            ordinal: if seq == 7 { 0 } else { 1 },
            timestamp_ns: 1000 + seq,
            born_ns: 2000 + seq,
            flags: producer.generation(),
        };
        assert_eq!(*got.meta(), want);
    }
    for i in 0..map.depth() {
        // SAFETY: (test) no end writes the slots now.
        let meta = unsafe { *map.header().slots[i].0.meta.get() };
        assert_eq!((meta.format, meta.layout), (map.format(), map.layout()), "slot {i}");
    }
}
