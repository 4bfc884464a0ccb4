//! Taking one frame from each input link, aligned by sequence number (fan-in).

use crate::link::{Consumer, LinkError, ReadSlot};

/// Frames with one sequence number, one per input; `None` once any input has ended. Frames
/// taken and passed over to reach a common sequence number are released and counted in
/// `skipped`.
pub fn acquire_aligned(inputs: &mut [Consumer], skipped: &mut u64) -> Result<Option<Vec<ReadSlot>>, LinkError> {
    let mut held: Vec<Option<ReadSlot>> = (0..inputs.len()).map(|_| None).collect();
    let mut target = 0u64;
    loop {
        for (k, input) in inputs.iter_mut().enumerate() {
            if held[k].as_ref().is_some_and(|s| s.meta().seq >= target) {
                continue;
            }
            if held[k].take().is_some() {
                // Dropped: released.
                *skipped += 1;
            }
            match input.acquire(target, None)? {
                Some(slot) => held[k] = Some(slot),
                None => return Ok(None),
            }
        }
        let newest = held.iter().flatten().map(|s| s.meta().seq).max().expect("at least one input");
        if held.iter().flatten().all(|s| s.meta().seq == newest) {
            return Ok(Some(held.into_iter().map(|s| s.expect("every input holds a frame")).collect()));
        }
        target = newest;
    }
}
