//! Where a stage writes its output frame: a ring slot, or private memory when nobody reads
//! the output (the stage still does its work, so it is measured like the others).

use gpuipc_plugin_api::abi::{self, RawFrame};
use gpuipc_plugin_api::{FrameFormat, FrameLayout};

use super::StageError;
use crate::link::{LinkError, Producer, WriteSlot};

pub enum Output {
    None,
    Ring(Producer),
    Private { format: FrameFormat, layout: FrameLayout, bytes: Vec<u8> },
}

/// The output frame being written for one sequence number.
pub enum Pending {
    None,
    Ring(WriteSlot),
    Private,
}

impl Output {
    pub fn new(producer: Option<Producer>, format: Option<FrameFormat>) -> Result<Output, StageError> {
        Ok(match (producer, format) {
            (Some(p), _) => Output::Ring(p),
            (None, None) => Output::None,
            (None, Some(format)) => {
                let layout = FrameLayout::for_format(format)
                    .ok_or_else(|| StageError::Setup(format!("output format {format} has no layout")))?;
                Output::Private { format, layout, bytes: vec![0; layout.total_bytes as usize] }
            }
        })
    }

    /// Take memory for the next output frame.
    pub fn acquire(&mut self) -> Result<Pending, LinkError> {
        Ok(match self {
            Output::None => Pending::None,
            Output::Ring(p) => Pending::Ring(p.acquire(None)?),
            Output::Private { .. } => Pending::Private,
        })
    }

    /// The raw frame the plugin writes into.
    pub fn raw_frame(&mut self, pending: &Pending, seq: u64, timestamp_ns: u64) -> Option<RawFrame> {
        let (format, layout, addr, len) = match (self, pending) {
            (Output::Ring(p), Pending::Ring(slot)) => {
                let (ptr, len) = p.ring().slot_data(slot.index).expect("host rings carry frame data");
                (p.ring().format(), p.ring().layout(), ptr as u64, len)
            }
            (Output::Private { format, layout, bytes }, Pending::Private) => {
                (*format, *layout, bytes.as_mut_ptr() as u64, bytes.len() as u64)
            }
            _ => return None,
        };
        Some(RawFrame { format, layout, domain: abi::DOMAIN_CPU, addr, len, seq, timestamp_ns })
    }

    /// [`gpuipc_plugin_api::pixel_hash`] of the frame being written (`None`: no output).
    pub fn pixel_hash(&self, pending: &Pending) -> Option<u64> {
        let (layout, bytes): (FrameLayout, &[u8]) = match (self, pending) {
            (Output::Ring(p), Pending::Ring(slot)) => {
                let (ptr, len) = p.ring().slot_data(slot.index).expect("host rings carry frame data");
                #[allow(unsafe_code)]
                // SAFETY: the slot is ours (taken, not yet published): no other process reads
                // or writes it until `publish`, and the ring's mapping outlives the borrow.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, len as usize) };
                (p.ring().layout(), bytes)
            }
            (Output::Private { layout, bytes, .. }, Pending::Private) => (*layout, bytes),
            _ => return None,
        };
        gpuipc_plugin_api::pixel_hash(&layout, bytes)
    }

    pub fn publish(&mut self, pending: Pending, seq: u64, timestamp_ns: u64) {
        if let (Output::Ring(p), Pending::Ring(slot)) = (self, pending) {
            p.publish(slot, seq, timestamp_ns);
        }
    }

    pub fn cancel(&mut self, pending: Pending) {
        if let (Output::Ring(p), Pending::Ring(slot)) = (self, pending) {
            p.cancel(slot);
        }
    }

    /// End of stream for consumers.
    pub fn close(&mut self) {
        if let Output::Ring(p) = self {
            p.close();
        }
    }
}
