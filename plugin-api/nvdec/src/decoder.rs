//! [`Decoder`]: one NVDEC parser and decoder on a stage's context and stream, fed packets,
//! handing each displayed picture to the caller mapped, as a [`DecodedFrame`] it copies from.
//!
//! The parser calls back into this module (`on_sequence`, `on_decode`, `on_display`) from
//! inside `cuvidParseVideoData`, on the calling thread, with a pointer to the decoder's
//! [`State`]. A callback never unwinds into the parser: each runs under `catch_unwind`, and
//! the first error (or panic) is kept in the state, the callback answers 0 (failure), and
//! [`Decoder::decode`] returns the error (or resumes the panic) once the parser has returned.
#![allow(unsafe_code)]

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::ptr::NonNull;

use gpuipc_cuda::CudaError;

use crate::error::NvdecError;
use crate::ffi::*;
use crate::format::{self, Codec, DecodeStatus, Sequence, Surface, VideoFormat};
use crate::library::{self, Api};

/// What a [`Decoder`] decodes, and where its work goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecoderOptions {
    pub codec: Codec,
    /// The raw `CUstream` the stage's work goes on (post-processing of every mapped picture,
    /// and every [`DecodedFrame::copy_to`]); the stage's `CUcontext` is current on the calling
    /// thread.
    pub stream: usize,
    /// How many pictures the parser decodes ahead of the one it displays
    /// (`ulMaxDisplayDelay`): 0 displays each as soon as display order allows (lowest latency,
    /// the engine idle while the caller maps and copies); a few keep NVDEC busy while the
    /// caller works on the picture before. Decode surfaces grow by as many.
    pub display_delay: u32,
}

impl DecoderOptions {
    /// `codec` on `stream`, displaying each picture as soon as it may be (no delay).
    pub fn new(codec: Codec, stream: usize) -> DecoderOptions {
        DecoderOptions { codec, stream, display_delay: 0 }
    }
}

/// Bitstream handed to [`Decoder::decode`].
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// Annex-B (start codes) for H.264 and HEVC; one frame (or superframe) for VP9; OBUs for
    /// AV1. May be empty when `end_of_stream` is set.
    pub data: &'a [u8],
    /// The presentation time of the picture that starts in this packet (an MP4 sample's pts),
    /// in any unit. The parser takes packets' timestamps as presentation times and hands them
    /// out in increasing order as it displays pictures (reordering them itself, within its
    /// reorder window), so each picture gets its own when every packet carries its picture's
    /// presentation time; values that are not (decode order, say) come back reordered, not
    /// attached to their packet's picture (seen on an H100, driver 580). A picture that does
    /// not start a packet (several in one chunk) gets one the parser makes up.
    pub pts: i64,
    /// The last packet: every picture still held is displayed before `decode` returns.
    pub end_of_stream: bool,
}

/// What became of a decoder made by [`Decoder::prepare`], before the stream's first packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prepared {
    /// None was made ahead (no `prepare`, or it failed).
    No,
    /// Made; no sequence header parsed yet.
    Waiting,
    /// The first sequence header had the format it was made for, and needed no more decode
    /// surfaces than it has: kept. `needed`: what the header alone would have made it with.
    Kept { needed: u32 },
    /// The first sequence header had another (said): it was made anew.
    MadeAnew(String),
}

/// The consumer's handler for each displayed picture.
pub type OnFrame<'f> = dyn FnMut(DecodedFrame<'_>) -> Result<(), NvdecError> + 'f;

/// One NVDEC parser, and the decoder it makes at the first sequence header. Not `Sync`: one
/// thread uses it at a time, with the stage's context current (see the crate's docs).
pub struct Decoder {
    api: &'static Api,
    context: usize,
    parser: CUvideoparser,
    /// Owned (from `Box::into_raw`), freed in `Drop` after the parser; the parser's callbacks
    /// get it as their user data. Only reached through this pointer: `decode` never holds a
    /// reference to it across `cuvidParseVideoData`, when the callbacks use it.
    state: NonNull<State>,
    one_picture_per_packet: bool,
    /// The error that stopped this decoder, if one did.
    stopped: Option<NvdecError>,
}

// SAFETY: the parser, the decoder and the state are owned by this value and used only through
// `&mut self` (or in `Drop`); NVDEC and driver handles are not tied to the thread that made
// them, only to the context, which the caller makes current on whatever thread calls (checked
// on every `decode`). Not `Sync`: the callbacks' state is not shared.
unsafe impl Send for Decoder {}

/// What the parser's callbacks work on.
struct State {
    api: &'static Api,
    codec: Codec,
    stream: usize,
    /// The parser's display delay: decode surfaces beyond the stream's minimum for it.
    display_delay: u32,
    /// Null until the first sequence header.
    decoder: CUvideodecoder,
    format: Option<VideoFormat>,
    surface: Option<Surface>,
    decode_surfaces: u32,
    /// What became of a decoder made by [`Decoder::prepare`].
    prepared: Prepared,
    /// During `cuvidParseVideoData` only: points at a `&mut OnFrame` on `decode`'s stack.
    on_frame: *mut c_void,
    /// Pictures displayed during a [`Decoder::push`], not yet taken by [`Decoder::pop_frame`].
    queued: std::collections::VecDeque<CUVIDPARSERDISPINFO>,
    /// A [`Decoder::push`] is parsing: displayed pictures are queued, not handed on.
    queueing: bool,
    error: Option<NvdecError>,
    panic: Option<Box<dyn Any + Send>>,
}

/// Timestamp units of the parser (its default, 10 MHz). Given timestamps come back unchanged in
/// value, whatever their unit (see [`Packet::pts`]); only pictures without one of their own get
/// one interpolated in these units.
const CLOCK_RATE: u32 = 10_000_000;

/// Call `pfnDecodePicture` for every picture, however corrupt (percent of errors tolerated):
/// damage is then reported through [`DecodeStatus`] instead of pictures silently missing.
const ERROR_THRESHOLD: u32 = 100;

impl Decoder {
    /// A parser for `options.codec`; the decoder itself is made at the first sequence header.
    /// The stage's context must be current on this thread: it is the one the decoder is made
    /// in and every later call must find current.
    pub fn new(options: DecoderOptions) -> Result<Decoder, NvdecError> {
        let api = library::api()?;
        let context = api.current_context()?;
        let state = Box::new(State {
            api,
            codec: options.codec,
            stream: options.stream,
            display_delay: options.display_delay,
            decoder: std::ptr::null_mut(),
            format: None,
            surface: None,
            decode_surfaces: 0,
            prepared: Prepared::No,
            on_frame: std::ptr::null_mut(),
            queued: std::collections::VecDeque::new(),
            queueing: false,
            error: None,
            panic: None,
        });
        // From here on `Drop` frees the state (and destroys whatever was made).
        let mut decoder = Decoder {
            api,
            context,
            parser: std::ptr::null_mut(),
            state: NonNull::from(Box::leak(state)),
            one_picture_per_packet: false,
            stopped: None,
        };
        let mut params = CUVIDPARSERPARAMS {
            CodecType: options.codec.raw(),
            // The sequence callback's answer sets the real number (nvcuvid.h).
            ulMaxNumDecodeSurfaces: 1,
            ulClockRate: CLOCK_RATE,
            ulErrorThreshold: ERROR_THRESHOLD,
            // 0: a picture is displayed as soon as display order allows; more: the parser
            // decodes that many ahead. It reorders into display order either way.
            ulMaxDisplayDelay: options.display_delay,
            bitfields: 0,
            uReserved1: [0; 4],
            pUserData: decoder.state.as_ptr().cast(),
            pfnSequenceCallback: Some(on_sequence),
            pfnDecodePicture: Some(on_decode),
            pfnDisplayPicture: Some(on_display),
            pfnGetOperatingPoint: None,
            pfnGetSEIMsg: None,
            pvReserved2: [std::ptr::null_mut(); 5],
            pExtVideoInfo: std::ptr::null_mut(),
        };
        // SAFETY: the state lives until `Drop`, which destroys the parser first; the callbacks
        // are this module's, which take exactly this `State`.
        decoder.parser = unsafe { api.create_video_parser(&mut params)? };
        Ok(decoder)
    }

    /// Make the decoder now, before any packet, for the stream `sequence` describes (from a
    /// description's parameter sets), so that its making is out of the stream's time. The
    /// first sequence header the parser reads decides: a format equal to this one, needing no
    /// more decode surfaces than it was made with, keeps the decoder; any other makes it anew,
    /// as without this call ([`Decoder::prepared`] says which). An error leaves no decoder
    /// made; the parser makes it at the first sequence header then, as without this call.
    pub fn prepare(&mut self, sequence: &Sequence) -> Result<(), NvdecError> {
        if sequence.codec != self.codec() {
            return Err(NvdecError::WrongCodec { expected: self.codec(), found: sequence.codec.raw() });
        }
        let current = self.api.current_context()?;
        if current != self.context {
            return Err(CudaError::NotCurrent { expected: self.context, current }.into());
        }
        // SAFETY: `&mut self`: no parse is running, so no callback uses the state.
        let state = unsafe { self.state.as_mut() };
        if state.format.is_some() || self.stopped.is_some() {
            return Err(NvdecError::Invalid { op: "Decoder::prepare", reason: "the decoder is already made".into() });
        }
        let raw = format::sequence_format(sequence)?;
        state.make(&raw)?;
        state.prepared = Prepared::Waiting;
        Ok(())
    }

    /// What became of the decoder [`Decoder::prepare`] made.
    pub fn prepared(&self) -> Prepared {
        // SAFETY: `&self` excludes `decode`, so no callback is using the state.
        unsafe { self.state.as_ref() }.prepared.clone()
    }

    fn codec(&self) -> Codec {
        // SAFETY: as in `prepared`.
        unsafe { self.state.as_ref() }.codec
    }

    /// Say whether every packet holds exactly one whole picture (an MP4 sample, one access
    /// unit with both fields of a field pair excepted). The parser then decodes a picture as
    /// soon as its packet arrives (`CUVID_PKT_ENDOFPICTURE`) instead of when the next one
    /// starts. Off by default, which is right for any chunking of an Annex-B stream.
    pub fn set_one_picture_per_packet(&mut self, one: bool) {
        self.one_picture_per_packet = one;
    }

    /// Feed one packet (an MP4 sample / whole access unit, or any chunk of an Annex-B stream);
    /// every picture that becomes ready for display is handed to `on_frame` in display order,
    /// mapped, then unmapped when `on_frame` returns. `end_of_stream` flushes every remaining
    /// picture (with empty `data` too).
    ///
    /// The first error of `on_frame` or of a parser callback (decoder creation, a format
    /// change, a failed map) is returned, and stops the decoder: every later call returns
    /// [`NvdecError::Stopped`]. A panic in `on_frame` is resumed here, after the parser has
    /// returned, and stops it too. An error of `cuvidParseVideoData` alone does not.
    pub fn decode(&mut self, packet: Packet<'_>, on_frame: &mut OnFrame<'_>) -> Result<(), NvdecError> {
        let mut sink: &mut OnFrame<'_> = on_frame;
        // The pointer is to `sink`, which outlives the parse; `parse` clears it right after.
        self.parse(packet, (&mut sink as *mut &mut OnFrame<'_>).cast(), false)
    }

    /// Feed one packet holding at most one picture (one access unit, one MP4 sample) and keep
    /// the pictures it makes ready for display, in display order, for [`Decoder::pop_frame`].
    /// The caller takes every one of them before the next `push`: a displayed picture's decode
    /// surface is the parser's to decode into again, so a queued picture is safe only while no
    /// packet is parsed, and `push` refuses a packet while pictures wait. With packets of one
    /// picture each, a parse decodes at most that picture, before it displays any: nothing it
    /// queues can be overwritten in the same parse. Errors as for [`Decoder::decode`].
    pub fn push(&mut self, packet: Packet<'_>) -> Result<(), NvdecError> {
        // SAFETY: `&mut self`: no parse is running, so no callback uses the state.
        if !unsafe { self.state.as_ref() }.queued.is_empty() {
            return Err(NvdecError::Invalid {
                op: "Decoder::push",
                reason: "pictures of the last packet are still waiting to be taken (pop_frame)".into(),
            });
        }
        self.parse(packet, std::ptr::null_mut(), true)
    }

    /// The next picture ready for display after [`Decoder::push`], mapped (unmapped when the
    /// frame is dropped), or `None` when none waits.
    pub fn pop_frame(&mut self) -> Result<Option<DecodedFrame<'_>>, NvdecError> {
        if let Some(e) = &self.stopped {
            return Err(NvdecError::Stopped(Box::new(e.clone())));
        }
        // SAFETY: `&mut self`: no parse is running, so no callback uses the state.
        let state = unsafe { self.state.as_mut() };
        let Some(info) = state.queued.pop_front() else { return Ok(None) };
        let (mapping, mut frame) = state.map(&info)?;
        frame.owned = Some(mapping);
        Ok(Some(frame))
    }

    /// Parse one packet, displayed pictures going to `on_frame` (a `*mut &mut OnFrame` that
    /// outlives the call) or, when `queueing`, to the queue of [`Decoder::pop_frame`].
    fn parse(&mut self, packet: Packet<'_>, on_frame: *mut c_void, queueing: bool) -> Result<(), NvdecError> {
        if let Some(e) = &self.stopped {
            return Err(NvdecError::Stopped(Box::new(e.clone())));
        }
        if packet.data.is_empty() && !packet.end_of_stream {
            return Ok(());
        }
        let current = self.api.current_context()?;
        if current != self.context {
            return Err(CudaError::NotCurrent { expected: self.context, current }.into());
        }
        let mut raw = CUVIDSOURCEDATAPACKET {
            flags: format::packet_flags(!packet.data.is_empty(), packet.end_of_stream, self.one_picture_per_packet),
            payload_size: packet.data.len() as tcu_ulong,
            payload: if packet.data.is_empty() { std::ptr::null() } else { packet.data.as_ptr() },
            timestamp: packet.pts,
        };
        let state = self.state.as_ptr();
        // SAFETY: no reference to the state is alive (see `state`'s field docs); `on_frame`
        // outlives the parse (the caller's contract) and is cleared right after it.
        unsafe {
            (*state).on_frame = on_frame;
            (*state).queueing = queueing;
        }
        // SAFETY: the parser is live; `raw` names `packet.data`, borrowed for this call; the
        // callbacks may use the state now and nothing else does.
        let parsed = unsafe { self.api.parse_video_data(self.parser, &mut raw) };
        // SAFETY: the parser has returned, so no callback holds a reference to the state.
        let state = unsafe { &mut *state };
        state.on_frame = std::ptr::null_mut();
        state.queueing = false;
        if let Some(panic) = state.panic.take() {
            self.stopped = Some(NvdecError::Frame("a frame handler panicked".into()));
            resume_unwind(panic);
        }
        if let Some(e) = state.error.take() {
            state.queued.clear();
            self.stopped = Some(e.clone());
            return Err(e);
        }
        parsed
    }

    /// The stream's format, once its first sequence header has been parsed.
    pub fn format(&self) -> Option<VideoFormat> {
        // SAFETY: `&self` excludes `decode`, so no callback is using the state.
        unsafe { self.state.as_ref() }.format
    }

    /// The decode surfaces the decoder was made with (0 before the first sequence header).
    pub fn decode_surfaces(&self) -> u32 {
        // SAFETY: as in `format`.
        unsafe { self.state.as_ref() }.decode_surfaces
    }
}

impl Drop for Decoder {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no parse is running, so no callback uses the state.
        let state = unsafe { self.state.as_mut() };
        let decoder = std::mem::replace(&mut state.decoder, std::ptr::null_mut());
        let parser = std::mem::replace(&mut self.parser, std::ptr::null_mut());
        let api = self.api;
        if !decoder.is_null() {
            // The decoder belongs to the stage's context; the caller may have another current.
            let destroyed = api.with_context(self.context, || {
                // SAFETY: live, nothing mapped (frames are unmapped before their callback
                // returns), and the parser that could use it is not running.
                unsafe { api.destroy_decoder(decoder) }
            });
            if let Err(e) = destroyed.and_then(|r| r) {
                gpuipc_cuda::log::warn(&format!("destroying an NVDEC decoder: {e}"));
            }
        }
        if !parser.is_null() {
            // SAFETY: live; nothing uses it after this. Its callbacks, should it make any,
            // find no decoder and no frame handler and fail cleanly.
            if let Err(e) = unsafe { api.destroy_video_parser(parser) } {
                gpuipc_cuda::log::warn(&format!("destroying an NVDEC parser: {e}"));
            }
        }
        // SAFETY: from `Box::leak` in `new`; the parser that held the pointer is gone.
        drop(unsafe { Box::from_raw(self.state.as_ptr()) });
    }
}

/// Run one callback's work on the decoder's state: the first error or panic is kept, later
/// callbacks of the same parse do nothing, and the parser gets 0 (failure) or the work's
/// answer (at least 1).
///
/// # Safety
/// `user` is the `State` the parser was made with, and no reference to it is alive.
unsafe fn callback(user: *mut c_void, work: impl FnOnce(&mut State) -> Result<c_int, NvdecError>) -> c_int {
    // SAFETY: the caller's contract.
    let Some(state) = (unsafe { user.cast::<State>().as_mut() }) else {
        return 0;
    };
    if state.error.is_some() || state.panic.is_some() {
        return 0;
    }
    match catch_unwind(AssertUnwindSafe(|| work(&mut *state))) {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            state.error = Some(e);
            0
        }
        Err(panic) => {
            state.panic = Some(panic);
            0
        }
    }
}

/// `pfnSequenceCallback`.
///
/// # Safety
/// Called by the parser only: `user` is its `State`, `format` valid for the call.
unsafe extern "C" fn on_sequence(user: *mut c_void, format: *mut CUVIDEOFORMAT) -> c_int {
    // SAFETY: the parser hands a valid format for the duration of the call (or null).
    let format = unsafe { format.as_ref() }.copied();
    // SAFETY: the parser's user data is the state (`Decoder::new`).
    unsafe {
        callback(user, |state| match format {
            Some(format) => state.sequence(&format),
            None => Err(NvdecError::Invalid { op: "the sequence callback", reason: "no format".into() }),
        })
    }
}

/// `pfnDecodePicture`.
///
/// # Safety
/// Called by the parser only: `user` is its `State`, `params` valid for the call.
unsafe extern "C" fn on_decode(user: *mut c_void, params: *mut CUVIDPICPARAMS) -> c_int {
    // SAFETY: as in `on_sequence`.
    unsafe { callback(user, |state| state.decode_picture(params)) }
}

/// `pfnDisplayPicture`.
///
/// # Safety
/// Called by the parser only: `user` is its `State`, `info` valid for the call (or null at
/// the end of a stream with `CUVID_PKT_NOTIFY_EOS`, which this crate does not set).
unsafe extern "C" fn on_display(user: *mut c_void, info: *mut CUVIDPARSERDISPINFO) -> c_int {
    // SAFETY: the parser hands a valid picture for the duration of the call (or null).
    let info = unsafe { info.as_ref() }.copied();
    // SAFETY: as in `on_sequence`.
    unsafe {
        callback(user, |state| match info {
            Some(info) => state.display(&info),
            None => Ok(1),
        })
    }
}

impl State {
    /// A sequence header: make the decoder at the first, and check that a later one keeps
    /// the format. Answers the number of decode surfaces, which the parser then cycles
    /// through.
    fn sequence(&mut self, raw: &CUVIDEOFORMAT) -> Result<c_int, NvdecError> {
        let codec = Codec::from_raw(raw.codec)
            .filter(|&c| c == self.codec)
            .ok_or(NvdecError::WrongCodec { expected: self.codec, found: raw.codec })?;
        let format = format::video_format(codec, raw)?;
        if self.prepared == Prepared::Waiting {
            // Made ahead from the description: kept only if it is exactly the decoder this
            // header would make (the same format and surface), with surfaces enough for it.
            let needed = format::decode_surfaces(raw.min_num_decode_surfaces, self.display_delay);
            let surface = format::plan_surface(&format, raw).ok();
            let made_for = self.format.expect("a prepared decoder has its format");
            if made_for == format && surface.is_some() && surface == self.surface && needed <= self.decode_surfaces {
                self.prepared = Prepared::Kept { needed };
                return Ok(self.decode_surfaces as c_int);
            }
            self.prepared = Prepared::MadeAnew(if made_for != format || surface != self.surface {
                format!("the stream is {format}, the decoder was made for {made_for}")
            } else {
                format!("the stream needs {needed} decode surfaces, the decoder was made with {}", self.decode_surfaces)
            });
            let decoder = std::mem::replace(&mut self.decoder, std::ptr::null_mut());
            (self.format, self.surface, self.decode_surfaces) = (None, None, 0);
            // SAFETY: live, made by `prepare`; no picture was decoded or mapped with it.
            unsafe { self.api.destroy_decoder(decoder)? };
        }
        if let Some(current) = self.format {
            if current != format {
                return Err(NvdecError::FormatChanged { from: current, to: format });
            }
            if u32::from(raw.min_num_decode_surfaces) > self.decode_surfaces {
                return Err(NvdecError::Unsupported {
                    format,
                    reason: format!(
                        "a later sequence header needs {} decode surfaces; the decoder was made with {}",
                        raw.min_num_decode_surfaces, self.decode_surfaces
                    ),
                });
            }
            return Ok(self.decode_surfaces as c_int);
        }
        self.make(raw).map(|surfaces| surfaces as c_int)
    }

    /// Make the decoder for `raw` (the first sequence header's format, or one built ahead);
    /// answers its number of decode surfaces.
    fn make(&mut self, raw: &CUVIDEOFORMAT) -> Result<u32, NvdecError> {
        let codec = self.codec;
        let format = format::video_format(codec, raw)?;
        let surface = format::plan_surface(&format, raw)?;
        let caps = self.api.decoder_caps(codec.raw(), raw.chroma_format, format.bit_depth)?;
        format::check_caps(&format, &format::Caps::from_raw(&caps), caps.nOutputFormatMask, surface.surface_format)?;
        let decode_surfaces = format::decode_surfaces(raw.min_num_decode_surfaces, self.display_delay);
        let mut info = CUVIDDECODECREATEINFO {
            ulWidth: raw.coded_width.into(),
            ulHeight: raw.coded_height.into(),
            ulNumDecodeSurfaces: decode_surfaces.into(),
            CodecType: codec.raw(),
            ChromaFormat: raw.chroma_format,
            ulCreationFlags: cudaVideoCreate_PreferCUVID,
            bitDepthMinus8: raw.bit_depth_luma_minus8.into(),
            ulIntraDecodeOnly: 0,
            // No reconfiguring: a later size is a format change, refused above.
            ulMaxWidth: raw.coded_width.into(),
            ulMaxHeight: raw.coded_height.into(),
            Reserved1: 0,
            display_area: surface.display_area,
            OutputFormat: surface.surface_format,
            DeinterlaceMode: cudaVideoDeinterlaceMode_Weave,
            // The display area's own size: cropping, never scaling.
            ulTargetWidth: surface.target_width.into(),
            ulTargetHeight: surface.target_height.into(),
            ulNumOutputSurfaces: format::OUTPUT_SURFACES.into(),
            vidLock: std::ptr::null_mut(),
            target_rect: CUVIDSHORTRECT::default(),
            enableHistogram: 0,
            Reserved2: [0; 4],
        };
        self.decoder = self.api.create_decoder(&mut info)?;
        self.format = Some(format);
        self.surface = Some(surface);
        self.decode_surfaces = decode_surfaces;
        Ok(decode_surfaces)
    }

    /// A picture to decode, in decode order: start the hardware on it.
    fn decode_picture(&mut self, params: *mut CUVIDPICPARAMS) -> Result<c_int, NvdecError> {
        if self.decoder.is_null() {
            return Err(NvdecError::Invalid {
                op: "cuvidDecodePicture",
                reason: "the parser has a picture to decode before any sequence header made the decoder".into(),
            });
        }
        // SAFETY: the decoder is live; `params` is what the parser just handed this callback.
        unsafe { self.api.decode_picture(self.decoder, params)? };
        Ok(1)
    }

    /// A picture to display, in display order: map it, hand it to the consumer, unmap it.
    ///
    /// This happens here, inside the parser's callback, rather than after
    /// `cuvidParseVideoData` returns: one packet may hold many pictures, and the parser reuses
    /// a decode surface as soon as its picture has been displayed and is no longer referenced,
    /// so a picture kept for later could be overwritten by a later picture of the same packet
    /// before it is mapped. NVIDIA's NvDecoder maps inside the callback for the same reason.
    fn display(&mut self, info: &CUVIDPARSERDISPINFO) -> Result<c_int, NvdecError> {
        if self.queueing {
            self.queued.push_back(*info);
            return Ok(1);
        }
        if self.on_frame.is_null() {
            return Err(NvdecError::Invalid {
                op: "cuvidMapVideoFrame64",
                reason: "the parser displayed a picture outside `Decoder::decode`".into(),
            });
        }
        let (mapping, frame) = self.map(info)?;
        // SAFETY: `on_frame` points at `decode`'s `sink` while the parser runs, which it does:
        // this is its callback. Nothing else refers to `sink` meanwhile.
        let on_frame = unsafe { &mut *self.on_frame.cast::<&mut OnFrame<'_>>() };
        let handled = on_frame(frame);
        let unmapped = mapping.unmap();
        handled?;
        unmapped?;
        Ok(1)
    }

    /// Map a displayed picture (its post-processing enqueued on the stage's stream) and read
    /// its decode status.
    fn map(&self, info: &CUVIDPARSERDISPINFO) -> Result<(Mapping, DecodedFrame<'static>), NvdecError> {
        let (Some(surface), false) = (self.surface, self.decoder.is_null()) else {
            return Err(NvdecError::Invalid {
                op: "cuvidMapVideoFrame64",
                reason: "the parser has a picture to display before any sequence header made the decoder".into(),
            });
        };
        let mut params = CUVIDPROCPARAMS::zeroed();
        params.progressive_frame = info.progressive_frame;
        params.top_field_first = info.top_field_first;
        // As NvDecoder sets them (ignored with Weave, which shows both fields as one frame).
        params.second_field = info.repeat_first_field + 1;
        params.unpaired_field = c_int::from(info.repeat_first_field < 0);
        // The post-processing into the output surface is enqueued on the stage's stream, as
        // is every copy out of it (`DecodedFrame::copy_to`).
        params.output_stream = self.stream as CUstream;
        // SAFETY: the decoder is live; the mapping is undone by `Mapping` on every path.
        let (ptr, pitch) = unsafe { self.api.map_video_frame(self.decoder, info.picture_index, &mut params)? };
        let mapping = Mapping { api: self.api, decoder: self.decoder, ptr, unmapped: false };
        // After the map, which waits for the picture's decode or orders after it.
        // SAFETY: the decoder is live.
        let status = match unsafe { self.api.decode_status(self.decoder, info.picture_index) } {
            Ok(status) => DecodeStatus::from_raw(status),
            Err(_) => DecodeStatus::Unknown,
        };
        let frame = DecodedFrame {
            api: self.api,
            ptr,
            pitch: pitch.into(),
            surface,
            bit_depth: self.format.map_or(8, |f| f.bit_depth),
            pts: info.timestamp,
            status,
            stream: self.stream,
            owned: None,
            _mapped: PhantomData,
        };
        Ok((mapping, frame))
    }
}

/// A mapped output surface; unmapped by [`Mapping::unmap`], or on drop if a panic or an early
/// return skips that.
struct Mapping {
    api: &'static Api,
    decoder: CUvideodecoder,
    ptr: u64,
    unmapped: bool,
}

impl Mapping {
    fn unmap(mut self) -> Result<(), NvdecError> {
        self.unmapped = true;
        // SAFETY: mapped from this live decoder. The surface returns to the decoder's pool at
        // once, while our copies out of it may still be queued: see the crate's docs on
        // surface ordering for why the next post-processing into it waits for them.
        unsafe { self.api.unmap_video_frame(self.decoder, self.ptr) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.unmapped {
            // SAFETY: as in `unmap`.
            if let Err(e) = unsafe { self.api.unmap_video_frame(self.decoder, self.ptr) } {
                gpuipc_cuda::log::warn(&format!("unmapping an NVDEC picture: {e}"));
            }
        }
    }
}

/// A decoded picture, mapped: its output surface holds the display area, luma rows then
/// interleaved chroma rows, NV12 (8-bit) or P016 (more: samples in the high bits of 16, as
/// `p010`), on the decoder's stream. Valid only inside `on_frame`: the surface is unmapped
/// when `on_frame` returns.
pub struct DecodedFrame<'a> {
    api: &'static Api,
    ptr: u64,
    pitch: u64,
    surface: Surface,
    bit_depth: u32,
    pts: i64,
    status: DecodeStatus,
    stream: usize,
    /// A frame from [`Decoder::pop_frame`] holds its mapping and unmaps it when dropped; one
    /// handed to `on_frame` does not (its callback unmaps it).
    owned: Option<Mapping>,
    _mapped: PhantomData<&'a Mapping>,
}

impl Drop for DecodedFrame<'_> {
    fn drop(&mut self) {
        if let Some(Err(e)) = self.owned.take().map(Mapping::unmap) {
            gpuipc_cuda::log::warn(&format!("unmapping an NVDEC picture: {e}"));
        }
    }
}

impl std::fmt::Debug for DecodedFrame<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DecodedFrame")
            .field("pts", &self.pts)
            .field("width", &self.surface.width)
            .field("height", &self.surface.height)
            .field("bit_depth", &self.bit_depth)
            .field("status", &self.status)
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("pitch", &self.pitch)
            .finish()
    }
}

impl DecodedFrame<'_> {
    /// The picture's presentation time, as [`Packet::pts`] says.
    pub fn pts(&self) -> i64 {
        self.pts
    }

    /// The display area's width.
    pub fn width(&self) -> u32 {
        self.surface.width
    }

    /// The display area's height.
    pub fn height(&self) -> u32 {
        self.surface.height
    }

    pub fn bit_depth(&self) -> u32 {
        self.bit_depth
    }

    /// 1 (NV12) or 2 (P016).
    pub fn bytes_per_sample(&self) -> u32 {
        self.surface.bytes_per_sample
    }

    pub fn status(&self) -> DecodeStatus {
        self.status
    }

    /// The mapped surface as (luma address, chroma address, pitch), for a kernel of the
    /// consumer's own. Read it only from work enqueued on the decoder's stream before
    /// `on_frame` returns (see the crate's docs on surface ordering).
    pub fn surface(&self) -> (u64, u64, u64) {
        (self.ptr, self.ptr + self.surface.chroma_offset(self.pitch), self.pitch)
    }

    /// Enqueue on the decoder's stream a copy of the picture (display area only) into two
    /// planes: luma rows of width*bytes_per_sample bytes x height, chroma (interleaved UV)
    /// rows of the same byte width (ceil(width/2) pairs for an odd width, as gpuipc's `nv12`)
    /// x ceil(height/2). Destination addresses and pitches are device memory.
    pub fn copy_to(&self, luma: u64, luma_pitch: u64, chroma: u64, chroma_pitch: u64) -> Result<(), NvdecError> {
        const OP: &str = "copying a decoded picture";
        let ((luma_row, luma_rows), (chroma_row, chroma_rows)) =
            format::copy_extents(self.surface.width, self.surface.height, self.surface.bytes_per_sample);
        if luma == 0 || chroma == 0 {
            return Err(NvdecError::Invalid { op: OP, reason: "a null destination".into() });
        }
        if luma_pitch < luma_row || chroma_pitch < chroma_row {
            return Err(NvdecError::Invalid {
                op: OP,
                reason: format!(
                    "pitches {luma_pitch} (luma) and {chroma_pitch} (chroma) are below the rows' {luma_row} and \
                     {chroma_row} bytes"
                ),
            });
        }
        // Both copies go on the stream the map's post-processing went on, after it. The
        // surface is unmapped once `on_frame` returns, before these copies may have run; the
        // next post-processing into the same output surface is enqueued on that same stream
        // by a later map, so it runs after them (the crate's docs say more).
        let (luma_src, chroma_src, pitch) = self.surface();
        self.api.copy_2d_async((luma_src, pitch), (luma, luma_pitch), luma_row, luma_rows, self.stream)?;
        self.api.copy_2d_async((chroma_src, pitch), (chroma, chroma_pitch), chroma_row, chroma_rows, self.stream)
    }
}
