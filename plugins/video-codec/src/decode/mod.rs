//! The two decoders behind one face: ffmpeg in the cpu domain, NVDEC in the cuda domain, each
//! giving display frames in order, one pass over the file at a time.

pub mod cpu;
pub mod cuda;
pub mod live;

use gpuipc_plugin_api::{FrameFormat, OutputFrame, PixelFormat, Result, bail};

use crate::container::{Chroma, Entry, StreamInfo};

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

/// The frames the decoders make of a stream (`nv12` at 8 bits, `p010` at 10, of the picture's
/// size), or why `source` (`video`, `rtsp`) cannot give them, naming `what` (the file, the
/// camera).
pub fn frame_format(info: &StreamInfo, what: &dyn std::fmt::Display, source: &str) -> Result<FrameFormat> {
    if info.chroma != Chroma::C420 {
        bail!(
            "{what}: {} {} has {} chroma; the {source} source makes nv12 and p010 frames (4:2:0) only",
            info.codec.name(),
            info.profile,
            info.chroma.name()
        );
    }
    let pixel = match info.bit_depth {
        8 => PixelFormat::Nv12,
        10 => PixelFormat::P010,
        depth => bail!(
            "{what}: {} {} is {depth}-bit; the {source} source decodes 8-bit (nv12) and 10-bit (p010) video only",
            info.codec.name(),
            info.profile
        ),
    };
    // H.264 and HEVC crop 4:2:0 pictures in steps of 2; VP9 and AV1 may have odd sizes, which
    // NVDEC rounds up and the sources do not take yet.
    if info.width == 0 || info.height == 0 || !info.width.is_multiple_of(2) || !info.height.is_multiple_of(2) {
        bail!(
            "{what}: a picture of {}x{}; the {source} source decodes pictures of an even width and height only",
            info.width,
            info.height
        );
    }
    Ok(FrameFormat::new(pixel, info.width, info.height))
}
