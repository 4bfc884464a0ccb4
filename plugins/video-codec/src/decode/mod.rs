//! The two decoders behind one face: ffmpeg in the cpu domain, NVDEC in the cuda domain, each
//! giving display frames in order, one pass over the file at a time.

pub mod cpu;
pub mod cuda;
pub mod live;

use gpuipc_plugin_api::{OutputFrame, Result};

use crate::container::Entry;

pub use cpu::Read1;

/// A stage's decoder.
pub enum Decoder {
    Cpu(cpu::CpuDecoder),
    Cuda(cuda::GpuDecoder),
}

impl Decoder {
    /// Start decoding at `entry`, ending any pass under way.
    pub fn start_pass(&mut self, entry: Entry) -> Result<()> {
        match self {
            Decoder::Cpu(d) => d.start_pass(entry),
            Decoder::Cuda(d) => d.start_pass(entry),
        }
    }

    /// The display number of the next frame of the pass under way, if one is.
    pub fn position(&self) -> Option<usize> {
        match self {
            Decoder::Cpu(d) => d.position(),
            Decoder::Cuda(d) => d.position(),
        }
    }

    /// The next display frame into `out`, or past it for `None`.
    pub fn next_frame(&mut self, out: Option<&mut OutputFrame<'_>>) -> Result<Read1> {
        match self {
            Decoder::Cpu(d) => d.next_frame(out),
            Decoder::Cuda(d) => d.next_frame(out),
        }
    }
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decoder::Cpu(_) => "Decoder::Cpu",
            Decoder::Cuda(_) => "Decoder::Cuda",
        })
    }
}
