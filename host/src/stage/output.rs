//! Where a stage writes its output frame: a ring slot (host or GPU memory), or private memory
//! when nobody reads the output (the stage still does its work, so it is measured like the
//! others).

use std::sync::Arc;

use gpuipc_plugin_api::abi::{self, RawFrame};
use gpuipc_plugin_api::{FrameFormat, FrameLayout};

use super::StageError;
use crate::gpu::{DeviceMemory, Gpu};
use crate::link::backing::WriteEnd;
use crate::link::{Producer, WriteSlot};

pub enum PrivateMemory {
    Host(Vec<u8>),
    Device(DeviceMemory),
}

pub enum Output {
    None,
    /// The end first: fields drop in order, and a staged end unregisters the ring's pinned
    /// memory, which must still be mapped then.
    Ring(Box<dyn WriteEnd>, Producer),
    Private {
        format: FrameFormat,
        layout: FrameLayout,
        memory: PrivateMemory,
    },
}

/// The output frame being written for one sequence number.
pub enum Pending {
    None,
    Ring(WriteSlot),
    Private,
}

impl Output {
    pub fn new(
        producer: Option<(Box<dyn WriteEnd>, Producer)>,
        format: Option<FrameFormat>,
        gpu: Option<&Arc<Gpu>>,
    ) -> Result<Output, StageError> {
        Ok(match (producer, format) {
            (Some((end, p)), _) => Output::Ring(end, p),
            (None, None) => Output::None,
            (None, Some(format)) => {
                let layout = FrameLayout::for_format(format)
                    .ok_or_else(|| StageError::Setup(format!("output format {format} has no layout")))?;
                let memory = match gpu {
                    Some(gpu) => PrivateMemory::Device(DeviceMemory::private(gpu, layout.total_bytes as usize)?),
                    None => PrivateMemory::Host(vec![0; layout.total_bytes as usize]),
                };
                Output::Private { format, layout, memory }
            }
        })
    }

    /// Take a slot for the next output frame (then [`Output::prepare`] it). A slot not
    /// published is given back when `Pending` drops.
    pub fn acquire(&mut self) -> Result<Pending, StageError> {
        Ok(match self {
            Output::None => Pending::None,
            Output::Ring(_, p) => Pending::Ring(p.acquire(None).map_err(StageError::from)?),
            Output::Private { .. } => Pending::Private,
        })
    }

    /// Before the plugin writes the slot: on a GPU ring, the stream waits until every
    /// consumer is done with it.
    pub fn prepare(&mut self, pending: &Pending) -> Result<(), StageError> {
        if let (Output::Ring(end, _), Pending::Ring(slot)) = (self, pending) {
            end.prepare(slot.index())?;
        }
        Ok(())
    }

    /// Wake the output ring's consumers ahead of a frame (see `link::wait::Waiter::waking_ahead`).
    pub fn wake_ahead(&self) {
        if let Output::Ring(_, p) = self {
            p.wake_ahead();
        }
    }

    /// The ring whose consumers' objects this output holds (a GPU ring), if any.
    pub fn followed_ring(&self) -> Option<&crate::link::RingMap> {
        match self {
            Output::Ring(end, p) if end.follows_the_other_end() => Some(p.ring()),
            _ => None,
        }
    }

    /// Whether the consumers' objects this output holds are current for its ring's consumer
    /// epoch (always, where it holds none).
    pub fn consumers_current(&self) -> bool {
        match self {
            Output::Ring(end, p) if end.follows_the_other_end() => {
                end.consumers_current_for().is_none_or(|e| e == p.ring().consumer_epoch())
            }
            _ => true,
        }
    }

    /// The output link's objects, sent again after a consumer was restarted.
    pub fn update(&mut self, import: crate::control::Import, fds: Vec<std::os::fd::OwnedFd>) -> Result<(), StageError> {
        match self {
            Output::Ring(end, _) => Ok(end.update(import, fds)?),
            _ => Err(StageError::Setup("new objects for an output without a ring".into())),
        }
    }

    /// The raw frame the plugin writes into.
    pub fn raw_frame(&mut self, pending: &Pending, seq: u64, timestamp_ns: u64) -> Option<RawFrame> {
        match (self, pending) {
            (Output::Ring(end, p), Pending::Ring(slot)) => Some(end.frame(p.ring(), slot.index(), seq, timestamp_ns)),
            (Output::Private { format, layout, memory }, Pending::Private) => {
                let (domain, addr, len) = match memory {
                    PrivateMemory::Host(bytes) => (abi::DOMAIN_CPU, bytes.as_mut_ptr() as u64, bytes.len() as u64),
                    PrivateMemory::Device(m) => (abi::DOMAIN_CUDA, m.addr(), m.len() as u64),
                };
                Some(RawFrame { format: *format, layout: *layout, domain, addr, len, seq, timestamp_ns })
            }
            _ => None,
        }
    }

    /// The plugin's work is enqueued: make the frame visible to consumers' streams or copy it
    /// out to host memory.
    pub fn finish(&mut self, pending: &Pending) -> Result<(), StageError> {
        if let (Output::Ring(end, p), Pending::Ring(slot)) = (self, pending) {
            end.finish(p.ring(), slot.index())?;
        }
        Ok(())
    }

    /// [`gpuipc_plugin_api::pixel_hash`] of the frame being written (`None`: no output). A
    /// frame on the GPU is copied back first (`run --checksums` only: it waits for the GPU).
    pub fn pixel_hash(&self, gpu: Option<&Arc<Gpu>>, frame: Option<&RawFrame>) -> Result<Option<u64>, StageError> {
        let Some(frame) = frame else { return Ok(None) };
        let mut copy;
        let bytes: &[u8] = if frame.domain == abi::DOMAIN_CUDA {
            let gpu = gpu.expect("device frames belong to cuda stages");
            copy = vec![0u8; frame.len as usize];
            gpu.download(frame.addr, &mut copy)?;
            &copy
        } else {
            #[allow(unsafe_code)]
            // SAFETY: a host frame we are writing: a taken ring slot (no other process reads
            // or writes it until `publish`) or our private buffer, valid for `len` bytes.
            unsafe {
                std::slice::from_raw_parts(frame.addr as *const u8, frame.len as usize)
            }
        };
        Ok(gpuipc_plugin_api::pixel_hash(&frame.layout, bytes))
    }

    pub fn publish(&mut self, pending: Pending, seq: u64, timestamp_ns: u64, born_ns: u64) {
        if let (Output::Ring(_, p), Pending::Ring(slot)) = (self, pending) {
            p.publish_born(slot, seq, timestamp_ns, born_ns);
        }
    }

    pub fn cancel(&mut self, pending: Pending) {
        if let (Output::Ring(_, p), Pending::Ring(slot)) = (self, pending) {
            p.cancel(slot);
        }
    }

    /// The wake-ups the output ring's producer holds back, if it does.
    pub fn held_wakes(&self) -> Option<&Arc<crate::link::wakes::HeldWakes>> {
        match self {
            Output::Ring(_, p) => p.held_wakes(),
            _ => None,
        }
    }

    /// Whether frames go into a ring someone reads.
    pub fn has_ring(&self) -> bool {
        matches!(self, Output::Ring(..))
    }

    /// The sequence number the output ring expects next, if there is a ring.
    pub fn next_seq(&self) -> Option<u64> {
        match self {
            Output::Ring(_, p) => Some(p.next_seq()),
            _ => None,
        }
    }

    /// End of stream for consumers (`end_stream`: a replica other than the last to end leaves
    /// the stream open for its siblings). A producer whose consumers read objects only it
    /// keeps alive (GPU memory, events) waits until they are done: until each of its slots is
    /// released, and its stream until their GPU work on them is (the stage synchronises before
    /// it exits).
    pub fn close(&mut self, end_stream: bool) -> Result<(), StageError> {
        if let Output::Ring(end, p) = self {
            if end_stream {
                p.close();
            }
            if end.outlived_by_consumers() {
                p.wait_drained(None)?;
                end.drain(p.ring().depth())?;
            }
        }
        Ok(())
    }
}
