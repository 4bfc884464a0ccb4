//! Work on a frame's parts spread over threads, for the stripes of a link of several
//! connections and the copy a sender keeps: each part on a thread of its own while the
//! calling thread does its own share, and a part whose thread cannot be had done by the
//! calling thread after, so a machine short of threads still moves every frame.

use std::sync::Mutex;

/// Frames from this size on have their parts worked by threads of their own (a thread's
/// start, some 30 µs, is then under 10 % of a part's copy); smaller ones by the calling
/// thread alone.
pub const THREADS_FROM: usize = 1 << 20;

/// Run `work` on each of `parts`, each on a thread named `name`, while this thread runs
/// `here`; then wait for every thread. Returns `here`'s value and the first failure of the
/// parts (a thread that panicked is a failure).
pub fn on_threads<T: Send, R>(
    name: &str,
    parts: Vec<T>,
    work: impl Fn(T) -> std::io::Result<()> + Sync,
    here: impl FnOnce() -> R,
) -> (R, std::io::Result<()>) {
    // Each part in a cell its thread takes it from, so that a thread that cannot be had
    // leaves it to this one.
    let cells: Vec<Mutex<Option<T>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let take = |cell: &Mutex<Option<T>>| cell.lock().ok().and_then(|mut c| c.take());
    let run = |cell: &Mutex<Option<T>>| take(cell).map_or(Ok(()), &work);
    std::thread::scope(|scope| {
        let spawned: Vec<_> = cells
            .iter()
            .map(|cell| (cell, std::thread::Builder::new().name(name.into()).spawn_scoped(scope, || run(cell))))
            .collect();
        let own = here();
        let mut parts = Ok(());
        for (cell, thread) in spawned {
            let done = match thread {
                Ok(thread) => {
                    thread.join().unwrap_or_else(|_| Err(std::io::Error::other(format!("a {name} thread panicked"))))
                }
                // No thread to be had: this one does that part.
                Err(_) => run(cell),
            };
            parts = parts.and(done);
        }
        (own, parts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_is_worked_once_and_the_first_failure_told() {
        let mut out = vec![0u8; 8];
        let parts: Vec<(usize, &mut [u8])> = out.chunks_mut(2).enumerate().collect();
        let (own, parts) = on_threads(
            "test",
            parts,
            |(i, part)| {
                part.fill(i as u8 + 1);
                if i == 2 { Err(std::io::Error::other("part 2")) } else { Ok(()) }
            },
            || 7,
        );
        assert_eq!(own, 7);
        assert_eq!(parts.unwrap_err().to_string(), "part 2");
        assert_eq!(out, [1, 1, 2, 2, 3, 3, 4, 4]);
    }
}
