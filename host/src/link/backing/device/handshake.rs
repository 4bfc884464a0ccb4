//! The descriptor handshake of GPU links, stage side: each end of a GPU ring exports its
//! objects to the host (the producer its slot memory and `ready` events, each consumer its
//! `released` events); once every end of a link has, the host brings each end what the others
//! exported (`crate::supervisor`'s broker), and the ends become
//! [`DeviceRead`]/[`DeviceWrite`] backings. The messages travel over the control socket
//! (`crate::control`), which only carries them.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use super::{DeviceRead, DeviceWrite, import_part, open_events};
use crate::config::Transport;
use crate::control::{ControlSocket, Export, FromStage, Handle64, Import, LinkEnd, SlotMemory, ToStage};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent};
use crate::link::{HandshakeError, RingMap};

/// A GPU link end exported, waiting for the host to bring the other ends' objects.
pub enum Half {
    Input {
        link: usize,
        released: Vec<IpcEvent>,
    },
    /// `first_slot`: where the producer's part of the ring starts (replicas each write their
    /// own part; a lone producer writes all of it, from 0).
    Output {
        link: usize,
        first_slot: usize,
        memory: Vec<DeviceMemory>,
        ready: Vec<IpcEvent>,
    },
}

fn create_events(gpu: &Arc<Gpu>, n: usize) -> Result<Vec<(IpcEvent, Handle64)>, GpuError> {
    (0..n)
        .map(|_| {
            let (event, handle) = IpcEvent::create(gpu)?;
            Ok((event, Handle64(handle)))
        })
        .collect()
}

fn send_export(socket: &ControlSocket, export: Export, fds: &[BorrowedFd<'_>]) -> Result<(), HandshakeError> {
    socket
        .send(&FromStage::Exported(Box::new(export)), fds)
        .map_err(|e| HandshakeError::Protocol(format!("cannot export a GPU link: {e}")))
}

/// Export consumer `consumer`'s `released` events for `link`, one per slot.
pub fn export_input(
    gpu: &Arc<Gpu>,
    socket: &ControlSocket,
    link: usize,
    consumer: usize,
    depth: usize,
) -> Result<Half, HandshakeError> {
    let events = create_events(gpu, depth)?;
    let export = Export {
        link,
        end: LinkEnd::Consumer(consumer),
        events: events.iter().map(|(_, h)| *h).collect(),
        memory: None,
        generation: 0,
    };
    send_export(socket, export, &[])?;
    Ok(Half::Input { link, released: events.into_iter().map(|(e, _)| e).collect() })
}

/// Where a producer makes its slots: shared by `transport`, on GPU `home` (its own, or its
/// consumers' for a pushed ring; legacy memory is always on its own).
#[derive(Debug, Clone, Copy)]
pub struct SlotsAt {
    pub transport: Transport,
    pub home: u32,
}

/// Allocate the slots and `ready` events of a GPU ring and export them, as the producer
/// process of `generation` (`Producer::generation`) writing `slots` of the ring (all of them,
/// or a replica's part).
pub fn export_output(
    gpu: &Arc<Gpu>,
    socket: &ControlSocket,
    link: usize,
    ring: &RingMap,
    slots: std::ops::Range<usize>,
    at: SlotsAt,
    generation: u32,
) -> Result<Half, HandshakeError> {
    let SlotsAt { transport, home } = at;
    let first_slot = slots.start;
    let depth = slots.len();
    let bytes = ring.layout().total_bytes as usize;
    let use_vmm = match transport {
        Transport::Vmm => true,
        Transport::Legacy => false,
        Transport::Auto => gpu.supports_vmm_fd(),
    };
    let mut memory = Vec::with_capacity(depth);
    let mut fds: Vec<OwnedFd> = Vec::new();
    let mut legacy = Vec::new();
    for _ in 0..depth {
        if use_vmm {
            let (m, fd) = DeviceMemory::vmm_at(gpu, home, bytes)?;
            memory.push(m);
            fds.push(fd);
        } else {
            let (m, handle) = DeviceMemory::legacy(gpu, bytes)?;
            memory.push(m);
            legacy.push(Handle64(handle));
        }
    }
    let slot_bytes = bytes as u64;
    let shared =
        if use_vmm { SlotMemory::Vmm { slot_bytes } } else { SlotMemory::Legacy { slot_bytes, handles: legacy } };
    tracing::info!(
        "output ring: {depth} slots ({slots:?} of {}) of {bytes} bytes in GPU memory, shared by {}",
        ring.depth(),
        if use_vmm { "VMM POSIX file descriptors" } else { "legacy CUDA IPC handles" }
    );
    let events = create_events(gpu, depth)?;
    let export = Export {
        link,
        end: LinkEnd::Producer,
        events: events.iter().map(|(_, h)| *h).collect(),
        memory: Some(shared),
        generation,
    };
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    send_export(socket, export, &borrowed)?;
    Ok(Half::Output { link, first_slot, memory, ready: events.into_iter().map(|(e, _)| e).collect() })
}

/// The GPU ends a stage got: (link, read end) per input, and its output's write end.
pub type Completed = (Vec<(usize, DeviceRead)>, Option<DeviceWrite>);

/// Wait for the host to bring the other ends' objects for every exported half, and finish the
/// ends: (link, read end) pairs for the inputs, and the write end of the output.
pub fn complete(gpu: &Arc<Gpu>, socket: &ControlSocket, halves: Vec<Half>) -> Result<Completed, HandshakeError> {
    let mut halves: Vec<Option<Half>> = halves.into_iter().map(Some).collect();
    let mut inputs = Vec::new();
    let mut output = None;
    while halves.iter().any(Option::is_some) {
        let (import, fds) = match socket.recv::<ToStage>() {
            Ok((ToStage::Import(import), fds)) => (*import, fds),
            Ok((other, _)) => {
                return Err(HandshakeError::Protocol(format!("expected GPU link objects, got {other:?}")));
            }
            Err(e) => return Err(HandshakeError::Protocol(format!("waiting for GPU link objects: {e}"))),
        };
        let position = halves
            .iter()
            .position(
                |h| matches!(h, Some(Half::Input { link, .. } | Half::Output { link, .. }) if *link == import.link),
            )
            .ok_or_else(|| {
                HandshakeError::Protocol(format!("received objects of link {} it does not use", import.link))
            })?;
        match halves[position].take().expect("found above") {
            Half::Input { link, released } => inputs.push((link, import_input(gpu, import, fds, released)?)),
            Half::Output { first_slot, memory, ready, .. } => {
                let released =
                    import.consumers.iter().map(|c| open_events(gpu, &c.events)).collect::<Result<_, _>>()?;
                output = Some(DeviceWrite {
                    gpu: gpu.clone(),
                    first_slot,
                    memory,
                    ready,
                    released,
                    current_for: import.epoch,
                    copy_out: None,
                });
            }
        }
    }
    Ok((inputs, output))
}

/// A consumer's read end: every producer part's memory and `ready` events imported (one
/// part, or one per replica of the producer stage), and its own `released` events.
pub(crate) fn import_input(
    gpu: &Arc<Gpu>,
    import: Import,
    fds: Vec<OwnedFd>,
    released: Vec<IpcEvent>,
) -> Result<DeviceRead, HandshakeError> {
    let parts = import.producers;
    let Some(first) = parts.first() else {
        return Err(HandshakeError::Protocol("no producer objects for an input".into()));
    };
    let part_slots = first.events.len();
    if part_slots == 0
        || parts.iter().any(|p| p.events.len() != part_slots)
        || part_slots * parts.len() != released.len()
    {
        let shared: Vec<usize> = parts.iter().map(|p| p.events.len()).collect();
        return Err(HandshakeError::Protocol(format!(
            "the producers shared {shared:?} slots for a ring of {}",
            released.len()
        )));
    }
    let mut fds = fds.into_iter();
    let (mut memory, mut ready) = (Vec::with_capacity(released.len()), Vec::with_capacity(released.len()));
    for part in &parts {
        let (m, r) = import_part(gpu, part, &mut fds)?;
        memory.extend(m);
        ready.extend(r);
    }
    let generations = parts.iter().map(|p| p.generation).collect();
    // The stage sets how long to poll on the host from its tuning.
    Ok(DeviceRead {
        gpu: gpu.clone(),
        memory,
        ready,
        released,
        generations,
        part_slots,
        ready_spin: std::time::Duration::ZERO,
        copy_in: None,
    })
}
