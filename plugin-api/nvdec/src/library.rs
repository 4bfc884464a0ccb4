//! Loading `libnvcuvid` and the few CUDA driver functions this crate calls, once per process,
//! every function looked up before the first call; and the checked calls themselves, each
//! turning a `CUresult` into an error that keeps the code and the driver's name for it.
//!
//! `libnvcuvid.so.1` comes with the NVIDIA driver (not the toolkit), so it is opened by that
//! name first, then `libnvcuvid.so`; `LD_LIBRARY_PATH` and the system's paths apply. The
//! driver's functions come from the library cudarc (and so gpuipc-cuda) loads, by gpuipc-cuda's
//! rule, which also honours `GPUIPC_NO_CUDA`. Nothing is needed at build time.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

use cudarc::driver::sys::{CUDA_MEMCPY2D, CUmemorytype};
use gpuipc_cuda::CudaError;

use crate::error::NvdecError;
use crate::ffi::*;

/// The names `libnvcuvid` is opened by, in order.
pub(crate) const LIBRARY_NAMES: [&str; 2] = ["libnvcuvid.so.1", "libnvcuvid.so"];

/// Every `libnvcuvid` function this crate calls.
pub(crate) const NVCUVID_SYMBOLS: [&str; 10] = [
    "cuvidCreateVideoParser",
    "cuvidParseVideoData",
    "cuvidDestroyVideoParser",
    "cuvidCreateDecoder",
    "cuvidDestroyDecoder",
    "cuvidDecodePicture",
    "cuvidGetDecodeStatus",
    "cuvidGetDecoderCaps",
    "cuvidMapVideoFrame64",
    "cuvidUnmapVideoFrame64",
];

/// Every CUDA driver function this crate calls.
pub(crate) const DRIVER_SYMBOLS: [&str; 6] = [
    "cuGetErrorName",
    "cuGetErrorString",
    "cuCtxGetCurrent",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuMemcpy2DAsync_v2",
];

type CUcontext = *mut c_void;

/// The functions, resolved once; the library stays loaded for the life of the process.
pub(crate) struct Api {
    _library: libloading::Library,
    file: &'static str,
    create_video_parser: unsafe extern "C" fn(*mut CUvideoparser, *mut CUVIDPARSERPARAMS) -> CUresult,
    parse_video_data: unsafe extern "C" fn(CUvideoparser, *mut CUVIDSOURCEDATAPACKET) -> CUresult,
    destroy_video_parser: unsafe extern "C" fn(CUvideoparser) -> CUresult,
    create_decoder: unsafe extern "C" fn(*mut CUvideodecoder, *mut CUVIDDECODECREATEINFO) -> CUresult,
    destroy_decoder: unsafe extern "C" fn(CUvideodecoder) -> CUresult,
    decode_picture: unsafe extern "C" fn(CUvideodecoder, *mut CUVIDPICPARAMS) -> CUresult,
    get_decode_status: unsafe extern "C" fn(CUvideodecoder, c_int, *mut CUVIDGETDECODESTATUS) -> CUresult,
    get_decoder_caps: unsafe extern "C" fn(*mut CUVIDDECODECAPS) -> CUresult,
    map_video_frame:
        unsafe extern "C" fn(CUvideodecoder, c_int, *mut c_ulonglong, *mut c_uint, *mut CUVIDPROCPARAMS) -> CUresult,
    unmap_video_frame: unsafe extern "C" fn(CUvideodecoder, c_ulonglong) -> CUresult,
    get_error_name: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
    get_error_string: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
    ctx_get_current: unsafe extern "C" fn(*mut CUcontext) -> CUresult,
    ctx_push_current: unsafe extern "C" fn(CUcontext) -> CUresult,
    ctx_pop_current: unsafe extern "C" fn(*mut CUcontext) -> CUresult,
    memcpy_2d_async: unsafe extern "C" fn(*const CUDA_MEMCPY2D, CUstream) -> CUresult,
}

/// The loaded API, or why it cannot be loaded (the same answer for the life of the process).
pub(crate) fn api() -> Result<&'static Api, NvdecError> {
    static API: OnceLock<Result<Api, NvdecError>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

/// One function of `library` as the type `T` (an `unsafe extern "C" fn` of the header's
/// signature), or the error naming it.
///
/// # Safety
/// `T` must be the function's real signature.
unsafe fn function<T: Copy>(library: &libloading::Library, name: &'static str, file: &str) -> Result<T, NvdecError> {
    // SAFETY: a dlsym lookup; the caller vouches for the type.
    match unsafe { library.get::<T>(name) } {
        Ok(symbol) => Ok(*symbol),
        Err(_) => Err(NvdecError::MissingSymbol {
            library: file.to_owned(),
            symbol: name,
            needs: "the video decoder of an NVIDIA driver for CUDA 12 or newer (Video Codec SDK 12)",
        }),
    }
}

/// The dynamic loader's own words (libloading keeps them in the error's source).
fn loader_message(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

fn load() -> Result<Api, NvdecError> {
    let mut first_error = None;
    let mut opened = None;
    for name in LIBRARY_NAMES {
        // SAFETY: opening the driver's library runs its initialisers, as any NVDEC program
        // does; they create no CUDA context.
        match unsafe { libloading::Library::new(name) } {
            Ok(library) => {
                opened = Some((name, library));
                break;
            }
            Err(e) => {
                first_error.get_or_insert_with(|| loader_message(&e));
            }
        }
    }
    let Some((file, library)) = opened else {
        return Err(NvdecError::NoLibrary {
            file: LIBRARY_NAMES[0],
            reason: first_error.unwrap_or_else(|| "not found".into()),
        });
    };
    if !gpuipc_cuda::driver_available() {
        let disabled = std::env::var_os("GPUIPC_NO_CUDA").is_some();
        return Err(NvdecError::NoDriver(CudaError::NoDriver { disabled }));
    }
    // SAFETY: gpuipc-cuda just found a driver library by cudarc's own names and order, so
    // cudarc opens it instead of panicking.
    let driver = unsafe { cudarc::driver::sys::culib() };
    const DRIVER: &str = "the CUDA driver";
    // SAFETY: (every lookup below) each type is the function's signature in cuviddec.h,
    // nvcuvid.h or cuda.h, with C enums as `CUresult` integers and pointers as the headers
    // declare them; src/ffi.rs's layout test checks the structs they take.
    unsafe {
        Ok(Api {
            create_video_parser: function(&library, NVCUVID_SYMBOLS[0], file)?,
            parse_video_data: function(&library, NVCUVID_SYMBOLS[1], file)?,
            destroy_video_parser: function(&library, NVCUVID_SYMBOLS[2], file)?,
            create_decoder: function(&library, NVCUVID_SYMBOLS[3], file)?,
            destroy_decoder: function(&library, NVCUVID_SYMBOLS[4], file)?,
            decode_picture: function(&library, NVCUVID_SYMBOLS[5], file)?,
            get_decode_status: function(&library, NVCUVID_SYMBOLS[6], file)?,
            get_decoder_caps: function(&library, NVCUVID_SYMBOLS[7], file)?,
            map_video_frame: function(&library, NVCUVID_SYMBOLS[8], file)?,
            unmap_video_frame: function(&library, NVCUVID_SYMBOLS[9], file)?,
            get_error_name: function(driver, DRIVER_SYMBOLS[0], DRIVER)?,
            get_error_string: function(driver, DRIVER_SYMBOLS[1], DRIVER)?,
            ctx_get_current: function(driver, DRIVER_SYMBOLS[2], DRIVER)?,
            ctx_push_current: function(driver, DRIVER_SYMBOLS[3], DRIVER)?,
            ctx_pop_current: function(driver, DRIVER_SYMBOLS[4], DRIVER)?,
            memcpy_2d_async: function(driver, DRIVER_SYMBOLS[5], DRIVER)?,
            _library: library,
            file,
        })
    }
}

impl Api {
    /// The file name the library was opened by.
    pub(crate) fn file(&self) -> &'static str {
        self.file
    }

    /// `CUDA_SUCCESS`, or the error naming `op`, the code and the driver's name and text.
    pub(crate) fn check(&self, op: &'static str, result: CUresult) -> Result<(), NvdecError> {
        if result == 0 {
            return Ok(());
        }
        let text = |get: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult| {
            let mut ptr: *const c_char = std::ptr::null();
            // SAFETY: the driver writes a pointer to a static NUL-terminated string, or fails
            // (an unknown code) and leaves it null.
            let r = unsafe { get(result, &mut ptr) };
            if r != 0 || ptr.is_null() {
                return None;
            }
            // SAFETY: non-null, static and NUL-terminated per the driver API.
            Some(unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
        };
        Err(NvdecError::Cuda(CudaError::Driver {
            op,
            device: None,
            code: result,
            name: text(self.get_error_name).unwrap_or_else(|| "an unknown CUresult".into()),
            description: text(self.get_error_string).unwrap_or_else(|| "unknown error".into()),
        }))
    }

    /// The context current on this thread, or an error if there is none.
    pub(crate) fn current_context(&self) -> Result<usize, NvdecError> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null if none is current).
        self.check("cuCtxGetCurrent", unsafe { (self.ctx_get_current)(&mut current) })?;
        if current.is_null() {
            return Err(NvdecError::Invalid {
                op: "NVDEC",
                reason: "no CUDA context is current on this thread; NVDEC works in the stage's context, which must be \
                         current on the calling thread"
                    .into(),
            });
        }
        Ok(current as usize)
    }

    /// Run `f` with `context` current on this thread, pushing it for the call if another (or
    /// none) is current. For `Drop`, which may run where the caller left another context.
    pub(crate) fn with_context<R>(&self, context: usize, f: impl FnOnce() -> R) -> Result<R, NvdecError> {
        let mut current: CUcontext = std::ptr::null_mut();
        // SAFETY: writes one CUcontext (null if none is current).
        self.check("cuCtxGetCurrent", unsafe { (self.ctx_get_current)(&mut current) })?;
        if current as usize == context {
            return Ok(f());
        }
        // SAFETY: `context` is the context our objects were made in, which the caller keeps
        // alive while they exist (the documented rule).
        self.check("cuCtxPushCurrent", unsafe { (self.ctx_push_current)(context as CUcontext) })?;
        let result = f();
        let mut popped: CUcontext = std::ptr::null_mut();
        // SAFETY: pops what we pushed; writes one CUcontext.
        self.check("cuCtxPopCurrent", unsafe { (self.ctx_pop_current)(&mut popped) })?;
        Ok(result)
    }

    /// `cuvidGetDecoderCaps` for a codec, chroma format and bit depth. Needs a context.
    pub(crate) fn decoder_caps(
        &self,
        codec: cudaVideoCodec,
        chroma_format: cudaVideoChromaFormat,
        bit_depth: u32,
    ) -> Result<CUVIDDECODECAPS, NvdecError> {
        let mut caps = CUVIDDECODECAPS {
            eCodecType: codec,
            eChromaFormat: chroma_format,
            nBitDepthMinus8: bit_depth.saturating_sub(8),
            ..Default::default()
        };
        // SAFETY: a whole CUVIDDECODECAPS (layout checked), inputs set, the rest zero; the
        // driver writes the outputs into it.
        self.check("cuvidGetDecoderCaps", unsafe { (self.get_decoder_caps)(&mut caps) })?;
        Ok(caps)
    }

    /// `cuvidCreateVideoParser`.
    ///
    /// # Safety
    /// `params.pUserData` and the callbacks must stay valid for as long as the parser lives,
    /// and the callbacks must match the state `pUserData` points to.
    pub(crate) unsafe fn create_video_parser(
        &self,
        params: &mut CUVIDPARSERPARAMS,
    ) -> Result<CUvideoparser, NvdecError> {
        let mut parser: CUvideoparser = std::ptr::null_mut();
        // SAFETY: a whole CUVIDPARSERPARAMS; writes one handle; the caller vouches for the
        // user data and callbacks.
        self.check("cuvidCreateVideoParser", unsafe { (self.create_video_parser)(&mut parser, params) })?;
        Ok(parser)
    }

    /// `cuvidParseVideoData`: runs the parser's callbacks, on this thread, before it returns.
    ///
    /// # Safety
    /// `parser` is live, `packet.payload` points to `packet.payload_size` readable bytes (or is
    /// null with size 0), and the parser's user data may be used by its callbacks now.
    pub(crate) unsafe fn parse_video_data(
        &self,
        parser: CUvideoparser,
        packet: &mut CUVIDSOURCEDATAPACKET,
    ) -> Result<(), NvdecError> {
        // SAFETY: the caller's contract.
        self.check("cuvidParseVideoData", unsafe { (self.parse_video_data)(parser, packet) })
    }

    /// `cuvidDestroyVideoParser`.
    ///
    /// # Safety
    /// `parser` is live and used by nothing after this.
    pub(crate) unsafe fn destroy_video_parser(&self, parser: CUvideoparser) -> Result<(), NvdecError> {
        // SAFETY: the caller's contract.
        self.check("cuvidDestroyVideoParser", unsafe { (self.destroy_video_parser)(parser) })
    }

    /// `cuvidCreateDecoder`, in the current context.
    pub(crate) fn create_decoder(&self, info: &mut CUVIDDECODECREATEINFO) -> Result<CUvideodecoder, NvdecError> {
        let mut decoder: CUvideodecoder = std::ptr::null_mut();
        // SAFETY: a whole CUVIDDECODECREATEINFO (layout checked; vidLock null); writes one
        // handle.
        self.check("cuvidCreateDecoder", unsafe { (self.create_decoder)(&mut decoder, info) })?;
        Ok(decoder)
    }

    /// `cuvidDestroyDecoder`.
    ///
    /// # Safety
    /// `decoder` is live, none of its frames is mapped, and nothing uses it after this.
    pub(crate) unsafe fn destroy_decoder(&self, decoder: CUvideodecoder) -> Result<(), NvdecError> {
        // SAFETY: the caller's contract.
        self.check("cuvidDestroyDecoder", unsafe { (self.destroy_decoder)(decoder) })
    }

    /// `cuvidDecodePicture`.
    ///
    /// # Safety
    /// `decoder` is live and `params` is what the parser's decode callback was just handed.
    pub(crate) unsafe fn decode_picture(
        &self,
        decoder: CUvideodecoder,
        params: *mut CUVIDPICPARAMS,
    ) -> Result<(), NvdecError> {
        // SAFETY: the caller's contract.
        self.check("cuvidDecodePicture", unsafe { (self.decode_picture)(decoder, params) })
    }

    /// `cuvidGetDecodeStatus`' status for one picture.
    ///
    /// # Safety
    /// `decoder` is live.
    pub(crate) unsafe fn decode_status(
        &self,
        decoder: CUvideodecoder,
        picture_index: c_int,
    ) -> Result<cuvidDecodeStatus, NvdecError> {
        let mut status = CUVIDGETDECODESTATUS::zeroed();
        // SAFETY: the caller's contract; writes one whole CUVIDGETDECODESTATUS (layout checked).
        self.check("cuvidGetDecodeStatus", unsafe { (self.get_decode_status)(decoder, picture_index, &mut status) })?;
        Ok(status.decodeStatus)
    }

    /// `cuvidMapVideoFrame64`: (device address, pitch) of the post-processed picture.
    ///
    /// # Safety
    /// `decoder` is live; the mapping must be undone with [`Api::unmap_video_frame`].
    pub(crate) unsafe fn map_video_frame(
        &self,
        decoder: CUvideodecoder,
        picture_index: c_int,
        params: &mut CUVIDPROCPARAMS,
    ) -> Result<(u64, u32), NvdecError> {
        let (mut ptr, mut pitch): (c_ulonglong, c_uint) = (0, 0);
        // SAFETY: the caller's contract; a whole CUVIDPROCPARAMS (layout checked); writes a
        // device address and a pitch.
        self.check("cuvidMapVideoFrame64", unsafe {
            (self.map_video_frame)(decoder, picture_index, &mut ptr, &mut pitch, params)
        })?;
        Ok((ptr, pitch))
    }

    /// `cuvidUnmapVideoFrame64`.
    ///
    /// # Safety
    /// `ptr` was mapped from `decoder` and is used by nothing enqueued later.
    pub(crate) unsafe fn unmap_video_frame(&self, decoder: CUvideodecoder, ptr: u64) -> Result<(), NvdecError> {
        // SAFETY: the caller's contract.
        self.check("cuvidUnmapVideoFrame64", unsafe { (self.unmap_video_frame)(decoder, ptr) })
    }

    /// Enqueue on `stream` a device-to-device copy of `rows` rows of `row_bytes` bytes.
    /// Device addresses cannot be checked here: a bad one is a driver error or a GPU fault,
    /// never host memory touched.
    pub(crate) fn copy_2d_async(
        &self,
        (src, src_pitch): (u64, u64),
        (dst, dst_pitch): (u64, u64),
        row_bytes: u64,
        rows: u64,
        stream: usize,
    ) -> Result<(), NvdecError> {
        let copy = CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: src_pitch as usize,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dst_pitch as usize,
            WidthInBytes: row_bytes as usize,
            Height: rows as usize,
        };
        // SAFETY: a whole CUDA_MEMCPY2D (cudarc's bindgen of cuda.h) naming device memory only.
        self.check("cuMemcpy2DAsync", unsafe { (self.memcpy_2d_async)(&copy, stream as CUstream) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_the_drivers_soname_first() {
        assert_eq!(LIBRARY_NAMES[0], "libnvcuvid.so.1");
    }
}
