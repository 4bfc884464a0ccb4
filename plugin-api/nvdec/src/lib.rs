//! NVDEC, the NVIDIA driver's video decoder (`libnvcuvid`), loaded at run time and wrapped in a
//! small safe API: a [`Decoder`] takes H.264, HEVC, VP9 or AV1 bitstream in [`Packet`]s and
//! hands every picture, in display order, to the caller as a mapped [`DecodedFrame`] that it
//! copies ([`DecodedFrame::copy_to`]) into its own device memory on the stage's stream.
//!
//! What this crate owns:
//! - loading ([`available`]): `libnvcuvid.so.1` (then `libnvcuvid.so`) opened on first use and
//!   every function this crate calls looked up at once, with the few CUDA driver functions it
//!   needs taken from the driver gpuipc-cuda finds (so `GPUIPC_NO_CUDA` applies); a missing
//!   library or function is an [`NvdecError`], never a panic. Nothing is needed at build time;
//! - the raw types of `cuviddec.h` and `nvcuvid.h` ([`ffi`]), their layout checked against the
//!   real headers on every test run (`layout/layout.c`);
//! - [`caps`]: what the GPU's NVDEC decodes;
//! - [`Decoder`]: a parser, and the decoder it makes at the first sequence header (checked
//!   against the caps; NV12 for 8-bit content, P016 for 10-bit, the display area cropped,
//!   never scaled), in the stage's context, working on the stage's stream. A caller that knows
//!   the stream's format before its first packet ([`Sequence`], from a description's parameter
//!   sets) may make the decoder ahead ([`Decoder::prepare`]); the first sequence header keeps
//!   it only if it is exactly the decoder that header would make, with surfaces enough.
//!
//! # Threads and contexts
//!
//! NVDEC works in the CUDA context current when the decoder is made, and this crate uses no
//! context lock: the stage's context must be current on the calling thread for
//! [`Decoder::new`], every [`Decoder::decode`] (checked: another context is
//! [`gpuipc_cuda::CudaError::NotCurrent`]) and [`caps`]. One `Decoder` per thread at a time: it
//! is `Send` (a stage may be moved to its worker thread) but not `Sync`. The parser's callbacks
//! run on the calling thread, inside `decode`, and so does `on_frame`. Dropping a `Decoder`
//! pushes its context if another is current, so it may be dropped anywhere, as long as the
//! context itself is still alive.
//!
//! # Surface ordering
//!
//! A displayed picture is mapped (`cuvidMapVideoFrame64`) with `output_stream` set to the
//! stage's stream: NVDEC enqueues the post-processing that writes the picture into one of its
//! two output surfaces on that stream, after the picture's decode. `copy_to` enqueues its
//! copies out of that surface on the same stream, so they run after the post-processing. The
//! surface is unmapped as soon as `on_frame` returns, which hands it back to NVDEC before the
//! copies have necessarily run; that is safe because the only thing that writes an output
//! surface is the post-processing of a later map, and every map of this decoder enqueues it on
//! the same stream, after the copies already there. So anything that reads a mapped surface
//! must be enqueued on the decoder's stream (or ordered before later work on it, e.g. by an
//! event recorded there) before `on_frame` returns; `copy_to` is.
//!
//! Pictures are mapped inside the parser's display callback, not queued for after
//! `cuvidParseVideoData`: a packet holding many pictures could otherwise see a displayed
//! picture's decode surface reused by a later one before it was mapped.
#![deny(unsafe_code)]

mod decoder;
mod error;
pub mod ffi;
mod format;
mod library;

pub use decoder::{DecodedFrame, Decoder, DecoderOptions, Packet, Prepared};
pub use error::NvdecError;
pub use format::{Caps, Codec, DecodeStatus, Sequence, VideoFormat, copy_extents};

/// Whether NVDEC can be used here: `libnvcuvid` loads, the CUDA driver loads, and every
/// function this crate calls resolves. Cheap after the first call. Creates no context.
pub fn available() -> Result<(), NvdecError> {
    library::api().map(drop)
}

/// What this GPU's NVDEC can do for 4:2:0 at `bit_depth`; needs a CUDA context current on the
/// calling thread (its device is the one asked).
pub fn caps(codec: Codec, bit_depth: u32) -> Result<Caps, NvdecError> {
    if !(8..=16).contains(&bit_depth) {
        return Err(NvdecError::Invalid { op: "cuvidGetDecoderCaps", reason: format!("a bit depth of {bit_depth}") });
    }
    let api = library::api()?;
    api.current_context()?;
    let raw = api.decoder_caps(codec.raw(), ffi::cudaVideoChromaFormat_420, bit_depth)?;
    Ok(Caps::from_raw(&raw))
}

/// The name `libnvcuvid` was opened by (`libnvcuvid.so.1` normally), once loaded.
pub fn library_file() -> Result<&'static str, NvdecError> {
    library::api().map(|api| api.file())
}

#[cfg(test)]
mod tests;
