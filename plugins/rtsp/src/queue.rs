//! The bounded queue between the thread that receives a camera's stream and the decoder: the
//! receiving side never waits. When the queue is full (the pipeline fell behind) whole access
//! units are dropped up to the next key frame, and counted; at a key frame that finds it full,
//! what it holds is dropped for the fresher picture. Frames a broken connection lost are counted
//! here too. Each access unit is numbered as it comes, every frame missed taking a number too,
//! so the frames handed on are numbered as if none had been missed (the decoder's delay does not
//! move a number across a gap).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpuipc_video_codec::decode::live::{AccessUnit, Next};

/// Why access units are not decodable until the next key frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gap {
    /// The queue overflowed: the pipeline is behind (counted dropped).
    Behind,
    /// A connection began (counted lost).
    Start,
}

#[derive(Debug, Default)]
struct Inner {
    units: VecDeque<AccessUnit>,
    /// Dropping until a key frame, and why.
    dropping: Option<Gap>,
    /// The number the next access unit gets, and the numbers of those queued or in the decoder,
    /// by key.
    next_number: u64,
    numbers: std::collections::BTreeMap<u64, u64>,
    /// Access units dropped because the pipeline was behind, in all.
    dropped: u64,
    /// Frames lost to broken connections and to a connection's start before its first key
    /// frame, in all.
    lost: u64,
    closed: bool,
    /// Why the stream cannot go on, if the receiving side found it so (the stage fails).
    failure: Option<String>,
}

/// Access units waiting to be decoded, at most `capacity`.
#[derive(Debug)]
pub struct Queue {
    inner: Mutex<Inner>,
    ready: Condvar,
    capacity: usize,
}

/// What a [`Queue`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub dropped: u64,
    pub lost: u64,
}

impl Queue {
    pub fn new(capacity: usize) -> Queue {
        let inner = Inner { dropping: Some(Gap::Start), ..Inner::default() };
        Queue { inner: Mutex::new(inner), ready: Condvar::new(), capacity: capacity.max(1) }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("no holder of the queue's lock panics")
    }

    /// Queue `unit`, never waiting.
    pub fn push(&self, unit: AccessUnit, key_frame: bool) {
        let mut q = self.lock();
        if q.closed {
            return;
        }
        if key_frame {
            q.dropping = None;
            if q.units.len() >= self.capacity {
                let n = q.units.len() as u64;
                for unit in std::mem::take(&mut q.units) {
                    q.numbers.remove(&unit.key);
                }
                q.dropped += n;
            }
        } else if q.dropping.is_some() || q.units.len() >= self.capacity {
            // A picture after a dropped one may refer to it: nothing until the next key frame.
            let gap = *q.dropping.get_or_insert(Gap::Behind);
            match gap {
                Gap::Behind => q.dropped += 1,
                Gap::Start => q.lost += 1,
            }
            q.next_number += 1;
            return;
        }
        let number = q.next_number;
        q.next_number += 1;
        q.numbers.insert(unit.key, number);
        // Units the decoder never showed must not pile up.
        while q.numbers.len() > 4 * self.capacity + 64 {
            q.numbers.pop_first();
        }
        q.units.push_back(unit);
        drop(q);
        self.ready.notify_one();
    }

    /// A new connection: nothing is decodable before its first key frame, and `lost` frames
    /// were missed while there was none.
    pub fn reconnected(&self, lost: u64) {
        let mut q = self.lock();
        q.dropping = Some(Gap::Start);
        q.lost += lost;
        q.next_number += lost;
    }

    /// The next access unit, waiting for one at most `wait`; `Over` once the queue is closed.
    pub fn pop(&self, wait: Duration) -> Next<AccessUnit> {
        let deadline = Instant::now() + wait;
        let mut q = self.lock();
        loop {
            if q.closed {
                return Next::Over;
            }
            if let Some(unit) = q.units.pop_front() {
                return Next::Got(unit);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Next::NotYet;
            }
            q = self.ready.wait_timeout(q, left).expect("no holder of the queue's lock panics").0;
        }
    }

    /// The number of the frame made from the access unit keyed `key` (`None` if unknown); the
    /// numbers of units keyed before it are forgotten (they will not be shown).
    pub fn number_of(&self, key: u64) -> Option<u64> {
        let mut q = self.lock();
        let number = q.numbers.remove(&key);
        while q.numbers.first_key_value().is_some_and(|(k, _)| *k < key) {
            q.numbers.pop_first();
        }
        number
    }

    pub fn counts(&self) -> Counts {
        let q = self.lock();
        Counts { dropped: q.dropped, lost: q.lost }
    }

    /// The stream cannot go on, for `why`: no more units, and the stage fails saying why.
    pub fn fail(&self, why: String) {
        self.lock().failure.get_or_insert(why);
        self.close();
    }

    /// Why the stream could not go on, if it could not.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// No more units: every [`Queue::pop`] returns `Over`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(next: Next<AccessUnit>) -> Option<u64> {
        match next {
            Next::Got(unit) => Some(unit.key),
            _ => None,
        }
    }

    fn unit(key: u64) -> AccessUnit {
        AccessUnit { data: vec![key as u8], key, arrival_ns: key }
    }

    #[test]
    fn a_full_queue_drops_up_to_the_next_key_frame_and_counts() {
        let q = Queue::new(2);
        // Nothing before the first key frame.
        q.push(unit(0), false);
        q.push(unit(1), true);
        q.push(unit(2), false);
        // Full: 3 and 4 dropped (4 may refer to 3), 5 a key frame clears the queue.
        q.push(unit(3), false);
        assert_eq!(key(q.pop(Duration::ZERO)), Some(1));
        q.push(unit(4), false);
        q.push(unit(5), true);
        assert_eq!(key(q.pop(Duration::ZERO)), Some(2));
        assert_eq!(key(q.pop(Duration::ZERO)), Some(5));
        assert_eq!(q.counts(), Counts { dropped: 2, lost: 1 });
        // 0 was lost, 3 and 4 dropped: each took a number.
        assert_eq!([1, 2, 5].map(|k| q.number_of(k)), [Some(1), Some(2), Some(5)]);
        // Full at a key frame: what it holds goes.
        q.push(unit(6), false);
        q.push(unit(7), false);
        q.push(unit(8), true);
        assert_eq!(q.counts().dropped, 4);
        assert_eq!(key(q.pop(Duration::ZERO)), Some(8));
        q.reconnected(30);
        q.push(unit(9), false);
        assert_eq!(q.counts(), Counts { dropped: 4, lost: 32 });
        q.push(unit(10), true);
        assert_eq!(q.number_of(8), Some(8));
        assert_eq!(q.number_of(10), Some(8 + 1 + 30 + 1));
        assert_eq!(key(q.pop(Duration::ZERO)), Some(10));
        // Empty: a bounded wait comes back with nothing.
        assert_eq!(q.pop(Duration::from_millis(1)), Next::NotYet);
        q.close();
        assert_eq!(q.pop(Duration::from_secs(1)), Next::Over);
    }
}
