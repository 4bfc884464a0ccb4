//! The cuda decoder: NVDEC through the driver's libnvcuvid (crate `gpuipc-nvdec`), on the
//! stage's own context and stream. Each picture the parser hands out for display is mapped,
//! copied device to device into the output slot on the stage's stream, and unmapped at once.
//!
//! Packets are fed only while no decoded picture waits to be taken, so a picture the parser
//! queued for display is never a surface a later decode writes into: one picture leaves per
//! `process` call, and the engine decodes ahead only as far as the parser's display delay and
//! reordering need.

use std::sync::Arc;

use gpuipc_nvdec as nvdec;
use gpuipc_plugin_api::cuda::device_plane;
use gpuipc_plugin_api::{CreateContext, Error, OutputFrame, Result, bail};

use crate::container::{Entry, Index, Packets, StreamInfo};
use crate::decode::cpu::Read1;

/// Pictures NVDEC decodes ahead of the one handed on, so the engine has work while the stage
/// maps, copies and publishes the picture before. One stream's rate is one decode engine's
/// (NVDEC does not split a stream over engines): on an H100, 0 and 4 gave the same 284 frames/s
/// of 1080p H.264. It costs as many decode surfaces and frames of latency.
const DECODE_AHEAD: u32 = 4;

/// Decodes a file with NVDEC, one display frame at a time.
pub struct GpuDecoder {
    index: Arc<Index>,
    packets: Packets,
    stream: usize,
    decoder: Option<nvdec::Decoder>,
    /// The display number of the next frame of the current pass.
    read: usize,
    /// The end of the file was fed: what is left comes out of the parser.
    flushed: bool,
    buf: Vec<u8>,
    what: String,
}

fn nvdec_error(what: &str, e: nvdec::NvdecError) -> Error {
    Error::new(format!("{what}: {e}"))
}

/// Whether this GPU's NVDEC can decode `info` (named `what` in errors): its library loads, and
/// the codec, bit depth and size are within what it reports.
pub fn check_caps(info: &StreamInfo, what: &str) -> Result<()> {
    nvdec::available().map_err(|e| nvdec_error(what, e))?;
    let caps = nvdec::caps(info.codec, info.bit_depth).map_err(|e| nvdec_error(what, e))?;
    if !caps.supported {
        bail!(
            "{what}: this GPU's NVDEC cannot decode {}-bit {} {} ({}); use device = \"cpu\" for this stage",
            info.bit_depth,
            info.chroma.name(),
            info.codec.name(),
            info.profile
        );
    }
    let fits = (caps.min_width..=caps.max_width).contains(&info.width)
        && (caps.min_height..=caps.max_height).contains(&info.height);
    if !fits {
        bail!(
            "{what}: {}x{} is outside what this GPU's NVDEC decodes for {} ({}x{} to {}x{})",
            info.width,
            info.height,
            info.codec.name(),
            caps.min_width,
            caps.min_height,
            caps.max_width,
            caps.max_height
        );
    }
    Ok(())
}

/// A decoded picture must have the size and depth the stream was planned for.
pub fn check_picture(frame: &nvdec::DecodedFrame<'_>, info: &StreamInfo, what: &str, n: usize) -> Result<()> {
    if (frame.width(), frame.height(), frame.bit_depth()) != (info.width, info.height, info.bit_depth) {
        bail!(
            "{what}: frame {n} is {}x{} {}-bit, but the stream was planned as {}x{} {}-bit; a change of size or depth mid-stream is not supported",
            frame.width(),
            frame.height(),
            frame.bit_depth(),
            info.width,
            info.height,
            info.bit_depth
        );
    }
    Ok(())
}

/// Copy a decoded picture into the output slot, on the stage's stream.
pub fn copy_picture(frame: &nvdec::DecodedFrame<'_>, out: &mut OutputFrame<'_>) -> Result<()> {
    let Some(buffer) = out.device_buffer() else { bail!("the cuda decoder writes device frames only") };
    let layout = out.info().layout;
    let (luma, chroma) = (device_plane(buffer, &layout, 0)?, device_plane(buffer, &layout, 1)?);
    frame.copy_to(luma.addr, luma.pitch, chroma.addr, chroma.pitch).map_err(|e| Error::new(e.to_string()))
}

impl GpuDecoder {
    /// A decoder for `index` on the stage's stream. Checks this GPU's NVDEC can decode it.
    pub fn new(index: Arc<Index>, path: &std::path::Path, ctx: &CreateContext<'_>) -> Result<GpuDecoder> {
        let what = path.display().to_string();
        check_caps(&index.info, &what)?;
        Ok(GpuDecoder {
            packets: Packets::open(path)?,
            index,
            stream: ctx.cuda_stream,
            decoder: None,
            read: 0,
            flushed: false,
            buf: Vec::new(),
            what,
        })
    }

    /// The display number of the next frame of the current pass, if one is under way.
    pub fn position(&self) -> Option<usize> {
        self.decoder.as_ref().map(|_| self.read)
    }

    /// Start decoding at `entry`, with a new decoder.
    pub fn start_pass(&mut self, entry: Entry) -> Result<()> {
        // The old decoder's pictures and surfaces go first.
        self.decoder = None;
        let options =
            nvdec::DecoderOptions { codec: self.index.info.codec, stream: self.stream, display_delay: DECODE_AHEAD };
        let mut decoder = nvdec::Decoder::new(options).map_err(|e| nvdec_error(&self.what, e))?;
        // Each packet is one access unit (an MP4 sample, or one cut here from an elementary
        // stream): the parser decodes it at once instead of when the next one starts.
        decoder.set_one_picture_per_packet(true);
        self.decoder = Some(decoder);
        self.packets.start_at(entry.sample);
        self.read = entry.display;
        self.flushed = false;
        Ok(())
    }

    /// Decode the next display frame into `out` (or past it, for `None`).
    pub fn next_frame(&mut self, mut out: Option<&mut OutputFrame<'_>>) -> Result<Read1> {
        loop {
            if let Some(read) = self.take_frame(out.as_deref_mut())? {
                return Ok(read);
            }
            if self.flushed {
                let frames = self.index.info.frames as usize;
                if self.read < frames {
                    gpuipc_plugin_api::warn!(
                        "{}: NVDEC's frames ended at display frame {} of the file's {frames}; the rest could not be decoded",
                        self.what,
                        self.read
                    );
                }
                self.decoder = None;
                return Ok(Read1::End);
            }
            self.feed()?;
        }
    }

    /// The next picture the decoder has ready, into `out`; `None` when it has none.
    fn take_frame(&mut self, out: Option<&mut OutputFrame<'_>>) -> Result<Option<Read1>> {
        let Some(decoder) = self.decoder.as_mut() else { bail!("no pass of the decoder is under way") };
        let popped = decoder.pop_frame().map_err(|e| Error::new(format!("{}: frame {}: {e}", self.what, self.read)))?;
        let Some(frame) = popped else { return Ok(None) };
        let info = &self.index.info;
        check_picture(&frame, info, &self.what, self.read)?;
        if let Some(out) = out {
            copy_picture(&frame, out).map_err(|e| Error::new(format!("{}: frame {}: {e}", self.what, self.read)))?;
        }
        let damaged = matches!(frame.status(), nvdec::DecodeStatus::Concealed | nvdec::DecodeStatus::Error);
        // Unmapped here: the copy is on the stage's stream, before any later map's work.
        drop(frame);
        self.read += 1;
        Ok(Some(Read1::Frame { damaged }))
    }

    /// Feed the decoder the next sample, or the end of the stream after the last.
    fn feed(&mut self) -> Result<()> {
        let Some(decoder) = self.decoder.as_mut() else { bail!("no pass of the decoder is under way") };
        match self.packets.next(&self.index, &mut self.buf)? {
            Some(n) => {
                let packet = nvdec::Packet { data: &self.buf, pts: n as i64, end_of_stream: false };
                decoder.push(packet).map_err(|e| Error::new(format!("{}: sample {n}: {e}", self.what)))?;
            }
            None => {
                let packet = nvdec::Packet { data: &[], pts: 0, end_of_stream: true };
                decoder
                    .push(packet)
                    .map_err(|e| Error::new(format!("{}: at the end of the stream: {e}", self.what)))?;
                self.flushed = true;
            }
        }
        Ok(())
    }
}
