//! The two `__doctor-peer` processes of the IPC self-test, joined by a socketpair on fd 3:
//! the exporter shares GPU memory (a VMM fd and a legacy handle) and a `ready` event the way
//! a producer stage does; the importer maps them, waits on the event on its own stream,
//! copies back and checks every byte, then shares a `released` event that the exporter waits
//! on, the way a consumer stage does. Each prints one JSON line ([`PeerOutput`]) on stdout.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitCode;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::control::{ControlSocket, Handle64};
use crate::gpu::{DeviceMemory, Gpu, IpcEvent, MemoryKind, PinnedHost};

/// The descriptor number of the peer's socket.
pub const PEER_FD: i32 = 3;
/// Bytes in each shared buffer: enough for the importer's timed copies to show the link's
/// bandwidth rather than the cost of a copy call.
pub const TEST_BYTES: usize = 32 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerRole {
    Exporter,
    Importer,
}

/// How one check went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Pass(String),
    Fail(String),
    Skipped(String),
}

/// What a peer prints, as its last line of stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PeerOutput {
    Importer {
        vmm: Outcome,
        legacy: Outcome,
    },
    Exporter {
        released: Outcome,
    },
    /// The peer could not take part at all.
    Fatal(String),
}

/// How the exporter offers one transport.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Offered {
    /// The fd is attached to the message.
    Fd,
    Handle(Handle64),
    Skipped(String),
    Failed(String),
}

#[derive(Debug, Serialize, Deserialize)]
enum Message {
    /// Exporter → importer: everything to import; the `ready` event is recorded after the
    /// buffers were filled.
    Offer { bytes: u64, ready: Handle64, vmm: Offered, legacy: Offered },
    /// Importer → exporter: checked and closed its imports; here is its `released` event,
    /// recorded after its copies.
    Done { released: Option<Handle64> },
    /// Exporter → importer: done with the `released` event.
    Finished,
}

/// Seeds of the two buffers' patterns, different so that crossed buffers are caught.
const SEED_VMM: u8 = 0x5a;
const SEED_LEGACY: u8 = 0xc3;

/// A byte pattern that is neither constant nor periodic at any small stride.
pub fn pattern(seed: u8, i: usize) -> u8 {
    let x = (i as u32).wrapping_add(u32::from(seed).wrapping_mul(0x0101_0101)).wrapping_mul(0x9e37_79b1);
    ((x >> 24) as u8) ^ ((x >> 11) as u8)
}

/// `None` if `bytes` is the pattern, else a description of the first difference.
pub fn mismatch(seed: u8, bytes: &[u8]) -> Option<String> {
    let wrong = bytes.iter().enumerate().filter(|&(i, &b)| b != pattern(seed, i)).count();
    let first = bytes.iter().enumerate().position(|(i, &b)| b != pattern(seed, i))?;
    Some(format!(
        "{wrong} of {} bytes differ; first at offset {first}: {:#04x}, expected {:#04x}",
        bytes.len(),
        bytes[first],
        pattern(seed, first)
    ))
}

/// Entry of `gpuipc-host __doctor-peer`.
pub fn main(role: PeerRole, device: u32) -> ExitCode {
    let Some(socket) = inherited_socket() else {
        eprintln!("gpuipc doctor peer: no socket on fd {PEER_FD}; this command is started by `gpuipc-host doctor`");
        return ExitCode::from(2);
    };
    // The importer prints its report itself, before it waits for the exporter to finish.
    let result = match role {
        PeerRole::Exporter => {
            exporter(device, &socket).map(|released| print_output(&PeerOutput::Exporter { released }))
        }
        PeerRole::Importer => importer(device, &socket),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_output(&PeerOutput::Fatal(e));
            ExitCode::FAILURE
        }
    }
}

fn print_output(output: &PeerOutput) {
    let line = serde_json::to_string(output).expect("peer output serialises");
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn inherited_socket() -> Option<ControlSocket> {
    use std::os::fd::{BorrowedFd, FromRawFd};
    #[allow(unsafe_code)]
    // SAFETY: a borrow for one fcntl probe; a closed descriptor makes it fail with EBADF.
    let probe = unsafe { BorrowedFd::borrow_raw(PEER_FD) };
    rustix::io::fcntl_getfd(probe).ok()?;
    #[allow(unsafe_code)]
    // SAFETY: the doctor mapped our end of the socketpair to this descriptor for exactly
    // this purpose, nothing else in the process owns it, and it is open (checked above).
    let fd = unsafe { OwnedFd::from_raw_fd(PEER_FD) };
    Some(ControlSocket::from_fd(fd))
}

/// Waits for the stream when dropped, so host memory that queued copies read or write is
/// freed only after them, whichever way a function returns.
struct WaitOnDrop<'a>(&'a Gpu);

impl Drop for WaitOnDrop<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.synchronize() {
            tracing::warn!("waiting for the stream: {e}");
        }
    }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The producer's side. Keeps every shared object alive until the importer has finished with
/// it (the driver leaves freeing an exported legacy allocation or event earlier undefined).
fn exporter(device: u32, socket: &ControlSocket) -> Result<Outcome, String> {
    let gpu = Arc::new(Gpu::open(device).map_err(text)?);
    let (major, minor) = gpu.compute_capability();
    tracing::debug!("doctor exporter on cuda:{device} (sm_{major}{minor})");
    let n = TEST_BYTES;
    // Both patterns in one pinned host buffer, uploaded to a private staging buffer; each
    // shared buffer is cleared and then filled from staging, all on the stream, unsynchronised:
    // only the `ready` event tells the importer that the bytes are there.
    let mut host: Vec<u8> =
        (0..2 * n).map(|i| if i < n { pattern(SEED_VMM, i) } else { pattern(SEED_LEGACY, i - n) }).collect();
    #[allow(unsafe_code)]
    // SAFETY: `host` outlives `pinned` (declared before it) and is not touched again; on
    // every way out, `_wait` (dropped before both) lets the copies from it finish first.
    let pinned = unsafe { PinnedHost::register(&gpu, host.as_mut_ptr(), host.len()).map_err(text)? };
    let _wait = WaitOnDrop(&gpu);
    let staging = DeviceMemory::private(&gpu, 2 * n).map_err(text)?;
    pinned.upload(staging.addr(), 0, 2 * n).map_err(text)?;
    let fill = |memory: &DeviceMemory, from: u64| -> Result<(), String> {
        gpu.memset_d8_async(memory.addr(), 0, n).map_err(text)?;
        gpu.copy_dtod_async(memory.addr(), from, n).map_err(text)
    };

    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut keep: Vec<DeviceMemory> = Vec::new();
    let vmm = if !gpu.supports_vmm_fd() {
        Offered::Skipped("the device does not support VMM with POSIX file descriptors".into())
    } else {
        match DeviceMemory::vmm(&gpu, n).map_err(text).and_then(|(m, fd)| fill(&m, staging.addr()).map(|()| (m, fd))) {
            Ok((memory, fd)) => {
                keep.push(memory);
                fds.push(fd);
                Offered::Fd
            }
            Err(e) => Offered::Failed(e),
        }
    };
    let legacy = if !gpu.supports_legacy_ipc() {
        Offered::Skipped("the device has no unified addressing, so no legacy IPC".into())
    } else {
        match DeviceMemory::legacy(&gpu, n)
            .map_err(text)
            .and_then(|(m, h)| fill(&m, staging.addr() + n as u64).map(|()| (m, h)))
        {
            Ok((memory, handle)) => {
                keep.push(memory);
                Offered::Handle(Handle64(handle))
            }
            Err(e) => Offered::Failed(e),
        }
    };
    let (ready, ready_handle) =
        IpcEvent::create(&gpu).map_err(|e| format!("cannot create an interprocess event: {e}"))?;
    ready.record(gpu.stream()).map_err(text)?;
    let offer = Message::Offer { bytes: n as u64, ready: Handle64(ready_handle), vmm, legacy };
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    socket.send(&offer, &borrowed).map_err(|e| format!("cannot send to the importer: {e}"))?;
    drop(fds);

    let released = match socket.recv::<Message>() {
        Ok((Message::Done { released: Some(handle) }, _)) => wait_released(&gpu, handle, &keep),
        Ok((Message::Done { released: None }, _)) => Outcome::Skipped("the importer shared no event".into()),
        Ok((other, _)) => Outcome::Fail(format!("unexpected message from the importer: {other:?}")),
        Err(e) => Outcome::Fail(format!("the importer did not answer: {e}")),
    };
    let _ = socket.send(&Message::Finished, &[]);
    // The whole upload must be done before `host` and `pinned` go.
    gpu.synchronize().map_err(text)?;
    drop((pinned, staging, keep, ready));
    drop(host);
    Ok(released)
}

/// Open the importer's `released` event, make our stream wait on it, then overwrite the
/// shared buffers (what a producer does with a released slot) and let it all finish.
fn wait_released(gpu: &Arc<Gpu>, handle: Handle64, buffers: &[DeviceMemory]) -> Outcome {
    let run = || -> Result<(), String> {
        let released = IpcEvent::open(gpu, handle.0).map_err(text)?;
        released.wait_on(gpu.stream()).map_err(text)?;
        for b in buffers {
            gpu.memset_d8_async(b.addr(), 0xff, b.len()).map_err(text)?;
        }
        gpu.synchronize().map_err(text)?;
        if !released.query().map_err(text)? {
            return Err("the event is still pending after the stream that waited on it finished".into());
        }
        Ok(())
    };
    match run() {
        Ok(()) => Outcome::Pass("the exporter's stream waited on the importer's event, then reused the buffers".into()),
        Err(e) => Outcome::Fail(e),
    }
}

/// The consumer's side.
fn importer(device: u32, socket: &ControlSocket) -> Result<(), String> {
    let gpu = Arc::new(Gpu::open(device).map_err(text)?);
    let (offer, mut fds) = socket.recv::<Message>().map_err(|e| format!("no offer from the exporter: {e}"))?;
    let Message::Offer { bytes, ready, vmm, legacy } = offer else {
        return Err(format!("expected an offer, got {offer:?}"));
    };
    let n = bytes as usize;
    let ready = IpcEvent::open(&gpu, ready.0).map_err(|e| format!("cannot open the exporter's event: {e}"))?;
    ready.wait_on(gpu.stream()).map_err(text)?;

    let mut host = vec![0u8; 2 * n];
    #[allow(unsafe_code)]
    // SAFETY: `host` outlives `pinned` (declared before it) and is read only after
    // `gpu.synchronize()` below, when the copies into it are done; on an early return,
    // `_wait` (dropped before both) lets them finish before `host` is freed.
    let pinned = unsafe { PinnedHost::register(&gpu, host.as_mut_ptr(), host.len()).map_err(text)? };
    let _wait = WaitOnDrop(&gpu);
    let mut imported: Vec<DeviceMemory> = Vec::new();
    // Import and enqueue the copy back of one transport; the check comes after the sync.
    let mut import = |offered: Offered, offset: usize| -> Outcome {
        let (memory, kind) = match offered {
            Offered::Fd => match fds.pop() {
                Some(fd) => (DeviceMemory::import_vmm(&gpu, fd, n), MemoryKind::VmmImported),
                None => return Outcome::Fail("the VMM fd did not arrive with the offer".into()),
            },
            Offered::Handle(h) => (DeviceMemory::import_legacy(&gpu, h.0), MemoryKind::LegacyImported),
            Offered::Skipped(why) => return Outcome::Skipped(why),
            Offered::Failed(why) => return Outcome::Fail(format!("exporter: {why}")),
        };
        let memory = match memory {
            Ok(m) if m.len() >= n && m.kind() == kind => m,
            Ok(m) if m.kind() != kind => {
                return Outcome::Fail(format!("imported memory of kind {:?}, expected {kind:?}", m.kind()));
            }
            Ok(m) => return Outcome::Fail(format!("imported {} bytes, expected {n}", m.len())),
            Err(e) => return Outcome::Fail(e.to_string()),
        };
        if let Err(e) = pinned.download(offset, memory.addr(), n) {
            return Outcome::Fail(e.to_string());
        }
        imported.push(memory);
        Outcome::Pass(String::new())
    };
    let vmm = import(vmm, 0);
    let legacy = import(legacy, n);

    let (released, released_handle) = IpcEvent::create(&gpu).map_err(text)?;
    released.record(gpu.stream()).map_err(text)?;
    gpu.synchronize().map_err(|e| format!("waiting for the copies back: {e}"))?;
    let waited = ready.query().map_err(text)?;
    let check = |outcome: Outcome, seed: u8, range: std::ops::Range<usize>, how: &str| match outcome {
        Outcome::Pass(_) if !waited => {
            Outcome::Fail("the exporter's event is still pending after our stream waited on it".into())
        }
        Outcome::Pass(_) => match mismatch(seed, &host[range]) {
            None => {
                Outcome::Pass(format!("{} MiB {how}, read back intact after waiting on the exporter's event", n >> 20))
            }
            Some(m) => Outcome::Fail(m),
        },
        other => other,
    };
    let vmm = match check(vmm, SEED_VMM, 0..n, "through a VMM POSIX fd") {
        Outcome::Pass(text) => {
            match imported.iter().find(|m| m.kind() == MemoryKind::VmmImported).map(|m| read_rate(&gpu, m, n)) {
                Some(Ok(gb_per_s)) => Outcome::Pass(format!(
                    "{text}; copies out of it into cuda:{device}'s own memory: {gb_per_s:.0} GB/s"
                )),
                Some(Err(e)) => Outcome::Fail(format!("timing copies out of the imported memory: {e}")),
                None => Outcome::Pass(text),
            }
        }
        other => other,
    };
    let legacy = check(legacy, SEED_LEGACY, n..2 * n, "through a legacy IPC handle");
    // Close our imports before the exporter may free them.
    drop((pinned, imported, ready));
    print_output(&PeerOutput::Importer { vmm, legacy });
    socket.send(&Message::Done { released: Some(Handle64(released_handle)) }, &[]).map_err(text)?;
    // Keep `released` until the exporter is done with it (or gone).
    let _ = socket.recv::<Message>();
    drop(released);
    drop(host);
    Ok(())
}

/// Bytes per second read out of `memory` (imported; on another device, read by peer access)
/// by device-to-device copies into this device's own memory, timed with events after a
/// warm-up: what a consumer's kernels can read from a producer's ring at most.
fn read_rate(gpu: &Arc<Gpu>, memory: &DeviceMemory, n: usize) -> Result<f64, crate::gpu::GpuError> {
    const COPIES: u32 = 20;
    let local = DeviceMemory::private(gpu, n)?;
    let seconds = crate::gpu::time_copies(gpu, local.addr(), memory.addr(), n, COPIES)?;
    Ok(n as f64 * f64::from(COPIES) / seconds / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_not_trivial() {
        let a: Vec<u8> = (0..4096).map(|i| pattern(SEED_VMM, i)).collect();
        let b: Vec<u8> = (0..4096).map(|i| pattern(SEED_LEGACY, i)).collect();
        assert!(a.iter().zip(&b).filter(|(x, y)| x == y).count() < 100, "the seeds give unrelated patterns");
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() > 200, "{} distinct bytes", distinct.len());
        for stride in [1, 2, 4, 8, 256, 4096 / 2] {
            assert!((0..4096 - stride).any(|i| a[i] != a[i + stride]), "period {stride}");
        }
    }

    #[test]
    fn mismatches_are_counted_and_located() {
        let mut bytes: Vec<u8> = (0..1000).map(|i| pattern(7, i)).collect();
        assert_eq!(mismatch(7, &bytes), None);
        bytes[10] ^= 1;
        bytes[900] ^= 0x80;
        let m = mismatch(7, &bytes).expect("differs");
        assert!(m.starts_with("2 of 1000 bytes differ; first at offset 10"), "{m}");
        assert!(mismatch(8, &bytes).is_some());
    }

    #[test]
    fn outputs_round_trip_as_json() {
        let out = PeerOutput::Importer { vmm: Outcome::Pass("ok".into()), legacy: Outcome::Skipped("no".into()) };
        let line = serde_json::to_string(&out).unwrap();
        assert!(!line.contains('\n'));
        let back: PeerOutput = serde_json::from_str(&line).unwrap();
        assert!(matches!(back, PeerOutput::Importer { vmm: Outcome::Pass(_), legacy: Outcome::Skipped(_) }));
    }
}
