//! The GPU side of a stage's link ends.
//!
//! A link whose ends are both on one GPU keeps its frames in device memory the producer
//! exports (VMM file descriptors, or legacy IPC handles), with one interprocess `ready` event
//! per slot (recorded by the producer) and one `released` event per slot and consumer
//! (recorded by that consumer). The ring in host shared memory still carries the counters.
//! Order per frame, so no host thread waits for the GPU:
//!
//! - producer: take the slot (host), make its stream wait on every consumer's `released`
//!   event of that slot, run the plugin, record `ready`, publish (host);
//! - consumer: take the frame (host), make its stream wait on `ready`, run the plugin, record
//!   its `released`, release (host).
//!
//! An event only means its latest record; the host counters make sure a record is never
//! replaced before the other side has enqueued its wait on it.
//!
//! A cuda stage on a ring in host memory (the other end is cpu) copies through a device
//! staging buffer and waits for the copy before it publishes or releases: a cpu stage cannot
//! wait on the GPU.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use gpuipc_plugin_api::abi::{self, RawFrame};

use super::StageError;
use crate::config::Transport;
use crate::control::{ControlSocket, Export, FromStage, Handle64, Import, LinkEnd, SlotMemory, ToStage};
use crate::gpu::{DeviceMemory, Gpu, GpuError, IpcEvent, PinnedHost};
use crate::link::{ReadSlot, RingMap};

impl From<GpuError> for StageError {
    fn from(e: GpuError) -> StageError {
        StageError::Gpu(e.to_string())
    }
}

/// How a stage reads one input.
pub enum InputEnd {
    /// A cpu stage reading a ring in host memory.
    Host,
    /// A cuda stage reading a ring in host memory: copy in first.
    Staged { staging: DeviceMemory, copied: IpcEvent, pinned: PinnedHost },
    /// A cuda stage reading GPU memory shared by its producer.
    Device { memory: Vec<DeviceMemory>, ready: Vec<IpcEvent>, released: Vec<IpcEvent> },
}

/// How a stage writes its output ring.
pub enum OutputEnd {
    Host,
    /// A cuda stage writing a ring in host memory: copy out after the plugin.
    Staged { staging: DeviceMemory, copied: IpcEvent, pinned: PinnedHost },
    /// `released[consumer][slot]`.
    Device { memory: Vec<DeviceMemory>, ready: Vec<IpcEvent>, released: Vec<Vec<IpcEvent>> },
}

fn host_frame(ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
    let (ptr, len) = ring.slot_data(slot).expect("host rings carry frame data");
    RawFrame { format: ring.format(), layout: ring.layout(), domain: abi::DOMAIN_CPU, addr: ptr as u64, len, seq, timestamp_ns }
}

fn device_frame(ring: &RingMap, memory: &DeviceMemory, seq: u64, timestamp_ns: u64) -> RawFrame {
    RawFrame {
        format: ring.format(),
        layout: ring.layout(),
        domain: abi::DOMAIN_CUDA,
        addr: memory.addr(),
        len: memory.len() as u64,
        seq,
        timestamp_ns,
    }
}

/// Register a host ring's slot data as pinned memory, for fast asynchronous copies.
fn pin_ring(gpu: &Arc<Gpu>, ring: &RingMap) -> Result<PinnedHost, StageError> {
    let (first, slot_bytes) = ring.slot_data(0).expect("host rings carry frame data");
    let bytes = slot_bytes as usize * ring.depth();
    #[allow(unsafe_code)]
    // SAFETY: the ring's mapping outlives the end that holds this: the frame loop and
    // `Output::Ring` declare the end before the ring's owner, so it drops first. Slot data is
    // only ever touched through raw pointers handed to plugins for a taken slot, after the
    // copies into it are waited for.
    let pinned = unsafe { PinnedHost::register(gpu, first, bytes)? };
    Ok(pinned)
}

/// Where `slot`'s frame data starts in the range [`pin_ring`] registered.
fn slot_offset(ring: &RingMap, slot: usize) -> usize {
    let (first, _) = ring.slot_data(0).expect("host rings carry frame data");
    let (ptr, _) = ring.slot_data(slot).expect("host rings carry frame data");
    ptr as usize - first as usize
}

fn handles(events: &[(IpcEvent, Handle64)]) -> Vec<Handle64> {
    events.iter().map(|(_, h)| *h).collect()
}

fn create_events(gpu: &Arc<Gpu>, n: usize) -> Result<Vec<(IpcEvent, Handle64)>, StageError> {
    (0..n)
        .map(|_| {
            let (event, handle) = IpcEvent::create(gpu)?;
            Ok((event, Handle64(handle)))
        })
        .collect()
}

fn open_events(gpu: &Arc<Gpu>, handles: &[Handle64]) -> Result<Vec<IpcEvent>, StageError> {
    handles.iter().map(|h| Ok(IpcEvent::open(gpu, h.0)?)).collect()
}

/// A GPU link end exported, waiting for the host to bring the other ends' objects.
pub enum Half {
    Input { link: usize, released: Vec<IpcEvent> },
    Output { link: usize, memory: Vec<DeviceMemory>, ready: Vec<IpcEvent> },
}

impl InputEnd {
    /// The end of a cuda stage on a host ring.
    pub fn staged(gpu: &Arc<Gpu>, ring: &RingMap) -> Result<InputEnd, StageError> {
        let staging = DeviceMemory::private(gpu, ring.layout().total_bytes as usize)?;
        let (copied, _) = IpcEvent::create(gpu)?;
        Ok(InputEnd::Staged { staging, copied, pinned: pin_ring(gpu, ring)? })
    }

    /// Export this consumer's `released` events for `link`.
    pub fn export(gpu: &Arc<Gpu>, socket: &ControlSocket, link: usize, consumer: usize, depth: usize) -> Result<Half, StageError> {
        let events = create_events(gpu, depth)?;
        let export = Export { link, end: LinkEnd::Consumer(consumer), events: handles(&events), memory: None };
        send_export(socket, export, &[])?;
        Ok(Half::Input { link, released: events.into_iter().map(|(e, _)| e).collect() })
    }

    /// The frame in `slot`, ready for the plugin on `gpu`'s stream.
    pub fn frame(&self, gpu: Option<&Arc<Gpu>>, ring: &RingMap, slot: &ReadSlot) -> Result<RawFrame, StageError> {
        let (seq, ts) = (slot.meta().seq, slot.meta().timestamp_ns);
        Ok(match self {
            InputEnd::Host => host_frame(ring, slot.index(), seq, ts),
            InputEnd::Staged { staging, copied, pinned } => {
                let gpu = gpu.expect("staged ends belong to cuda stages");
                pinned.upload(staging.addr(), slot_offset(ring, slot.index()), ring.layout().total_bytes as usize)?;
                // The host slot is released after `process`; the copy must be done by then.
                copied.record(gpu.stream())?;
                copied.synchronize()?;
                device_frame(ring, staging, seq, ts)
            }
            InputEnd::Device { memory, ready, .. } => {
                let gpu = gpu.expect("device ends belong to cuda stages");
                ready[slot.index()].wait_on(gpu.stream())?;
                device_frame(ring, &memory[slot.index()], seq, ts)
            }
        })
    }

    /// The plugin's work on `slot` is enqueued: mark the slot released on the GPU.
    pub fn done(&self, gpu: Option<&Arc<Gpu>>, slot: usize) -> Result<(), StageError> {
        if let InputEnd::Device { released, .. } = self {
            released[slot].record(gpu.expect("device ends belong to cuda stages").stream())?;
        }
        Ok(())
    }
}

impl OutputEnd {
    pub fn staged(gpu: &Arc<Gpu>, ring: &RingMap) -> Result<OutputEnd, StageError> {
        let staging = DeviceMemory::private(gpu, ring.layout().total_bytes as usize)?;
        let (copied, _) = IpcEvent::create(gpu)?;
        Ok(OutputEnd::Staged { staging, copied, pinned: pin_ring(gpu, ring)? })
    }

    /// Allocate the slots and `ready` events of a GPU ring and export them.
    pub fn export(gpu: &Arc<Gpu>, socket: &ControlSocket, link: usize, ring: &RingMap, transport: Transport) -> Result<Half, StageError> {
        let depth = ring.depth();
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
                let (m, fd) = DeviceMemory::vmm(gpu, bytes)?;
                memory.push(m);
                fds.push(fd);
            } else {
                let (m, handle) = DeviceMemory::legacy(gpu, bytes)?;
                memory.push(m);
                legacy.push(Handle64(handle));
            }
        }
        let slot_bytes = bytes as u64;
        let slots = if use_vmm { SlotMemory::Vmm { slot_bytes } } else { SlotMemory::Legacy { slot_bytes, handles: legacy } };
        tracing::info!(
            "output ring: {depth} slots of {bytes} bytes in GPU memory, shared by {}",
            if use_vmm { "VMM POSIX file descriptors" } else { "legacy CUDA IPC handles" }
        );
        let events = create_events(gpu, depth)?;
        let export = Export { link, end: LinkEnd::Producer, events: handles(&events), memory: Some(slots) };
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        send_export(socket, export, &borrowed)?;
        Ok(Half::Output { link, memory, ready: events.into_iter().map(|(e, _)| e).collect() })
    }

    /// Before the plugin writes `slot`: the GPU waits until every consumer is done with it.
    pub fn prepare(&self, gpu: Option<&Arc<Gpu>>, slot: usize) -> Result<(), StageError> {
        if let OutputEnd::Device { released, .. } = self {
            let gpu = gpu.expect("device ends belong to cuda stages");
            for consumer in released {
                consumer[slot].wait_on(gpu.stream())?;
            }
        }
        Ok(())
    }

    pub fn frame(&self, ring: &RingMap, slot: usize, seq: u64, timestamp_ns: u64) -> RawFrame {
        match self {
            OutputEnd::Host => host_frame(ring, slot, seq, timestamp_ns),
            OutputEnd::Staged { staging, .. } => device_frame(ring, staging, seq, timestamp_ns),
            OutputEnd::Device { memory, .. } => device_frame(ring, &memory[slot], seq, timestamp_ns),
        }
    }

    /// After the plugin wrote `slot`, before it is published.
    pub fn finish(&self, gpu: Option<&Arc<Gpu>>, ring: &RingMap, slot: usize) -> Result<(), StageError> {
        match self {
            OutputEnd::Host => {}
            OutputEnd::Staged { staging, copied, pinned } => {
                let gpu = gpu.expect("staged ends belong to cuda stages");
                pinned.download(slot_offset(ring, slot), staging.addr(), ring.layout().total_bytes as usize)?;
                copied.record(gpu.stream())?;
                // A cpu consumer cannot wait on the GPU: the bytes must be there at publish.
                copied.synchronize()?;
            }
            OutputEnd::Device { ready, .. } => ready[slot].record(gpu.expect("device ends belong to cuda stages").stream())?,
        }
        Ok(())
    }
}

fn send_export(socket: &ControlSocket, export: Export, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<(), StageError> {
    socket
        .send(&FromStage::Exported(Box::new(export)), fds)
        .map_err(|e| StageError::Setup(format!("cannot export a GPU link: {e}")))
}

/// Wait for the host to bring the other ends' objects for every exported half, and finish
/// the ends. Returns (link, end) pairs.
pub fn complete(gpu: &Arc<Gpu>, socket: &ControlSocket, halves: Vec<Half>) -> Result<(Vec<(usize, InputEnd)>, Option<OutputEnd>), StageError> {
    let mut halves: Vec<Option<Half>> = halves.into_iter().map(Some).collect();
    let mut inputs = Vec::new();
    let mut output = None;
    while halves.iter().any(Option::is_some) {
        let (import, fds) = match socket.recv::<ToStage>() {
            Ok((ToStage::Import(import), fds)) => (*import, fds),
            Ok((other, _)) => return Err(StageError::Setup(format!("expected GPU link objects, got {other:?}"))),
            Err(e) => return Err(StageError::Setup(format!("waiting for GPU link objects: {e}"))),
        };
        let position = halves
            .iter()
            .position(|h| matches!(h, Some(Half::Input { link, .. } | Half::Output { link, .. }) if *link == import.link))
            .ok_or_else(|| StageError::Setup(format!("received objects of link {} it does not use", import.link)))?;
        match halves[position].take().expect("found above") {
            Half::Input { link, released } => inputs.push((link, import_input(gpu, import, fds, released)?)),
            Half::Output { memory, ready, .. } => {
                let released = import.consumers.iter().map(|c| open_events(gpu, &c.events)).collect::<Result<_, _>>()?;
                output = Some(OutputEnd::Device { memory, ready, released });
            }
        }
    }
    Ok((inputs, output))
}

fn import_input(gpu: &Arc<Gpu>, import: Import, fds: Vec<OwnedFd>, released: Vec<IpcEvent>) -> Result<InputEnd, StageError> {
    let producer = import.producer.ok_or_else(|| StageError::Setup("no producer objects for an input".into()))?;
    let memory = match producer.memory {
        Some(SlotMemory::Vmm { slot_bytes }) => {
            fds.into_iter().map(|fd| Ok(DeviceMemory::import_vmm(gpu, fd, slot_bytes as usize)?)).collect::<Result<Vec<_>, StageError>>()?
        }
        Some(SlotMemory::Legacy { handles, .. }) => {
            handles.iter().map(|h| Ok(DeviceMemory::import_legacy(gpu, h.0)?)).collect::<Result<Vec<_>, StageError>>()?
        }
        None => return Err(StageError::Setup("the producer shared no memory".into())),
    };
    let ready = open_events(gpu, &producer.events)?;
    if memory.len() != ready.len() || ready.len() != released.len() {
        return Err(StageError::Setup(format!(
            "the producer shared {} slots and {} events for a ring of {}",
            memory.len(),
            ready.len(),
            released.len()
        )));
    }
    Ok(InputEnd::Device { memory, ready, released })
}
