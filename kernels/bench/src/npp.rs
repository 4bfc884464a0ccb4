//! NVIDIA's NPP (`libnppicc`, `libnppc`), loaded at run time with libloading: the colour
//! conversions the built-in kernels are measured against. NPP is no dependency of any
//! plugin; without it the benchmark says so and times the built-in kernels alone.
//!
//! Since CUDA 13 NPP exports only the `_Ctx` entry points, which take an
//! [`NppStreamContext`] by value (nppdefs.h); every function here is one of those. Their
//! declarations (nppi_color_conversion.h):
//!
//! ```c
//! NppStatus nppiRGBToYCbCr420_8u_C3P3R_Ctx(const Npp8u *pSrc, int nSrcStep, Npp8u *pDst[3],
//!     int rDstStep[3], NppiSize oSizeROI, NppStreamContext nppStreamCtx);
//! NppStatus nppiNV12ToRGB_8u_P2C3R_Ctx(const Npp8u *const pSrc[2], int rSrcStep, Npp8u *pDst,
//!     int nDstStep, NppiSize oSizeROI, NppStreamContext nppStreamCtx);
//! ```
//!
//! and the same argument lists for the `_JPEG_`, `BGR..._709CSC_`, `_709CSC_`, `_709HDTV_`
//! and `_601_` variants named in [`TO_YUV`] and [`TO_RGB`]. The unsafe calls are the three
//! `call_*` functions and [`Npp::load`]'s symbol look-ups.

use std::path::{Path, PathBuf};

use gpuipc_plugin_api::color::{ColorRange, Matrix};
use libloading::Library;

/// `NppStatus`: 0 success, > 0 a warning, < 0 an error.
pub type NppStatus = i32;

/// nppdefs.h `NppiSize`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NppiSize {
    pub width: i32,
    pub height: i32,
}

/// nppdefs.h `NppStreamContext` (CUDA 11.0 and later, unchanged in 13):
///
/// ```c
/// typedef struct {
///     cudaStream_t hStream;
///     int nCudaDeviceId;                       /* From cudaGetDevice() */
///     int nMultiProcessorCount;                /* From cudaGetDeviceProperties() */
///     int nMaxThreadsPerMultiProcessor;
///     int nMaxThreadsPerBlock;
///     size_t nSharedMemPerBlock;
///     int nCudaDevAttrComputeCapabilityMajor;  /* From cudaGetDeviceAttribute() */
///     int nCudaDevAttrComputeCapabilityMinor;
///     unsigned int nStreamFlags;               /* From cudaStreamGetFlags() */
///     int nReserved0;
/// } NppStreamContext;
/// ```
///
/// 48 bytes on a 64-bit target, 8-aligned (checked by a test).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NppStreamContext {
    /// The `CUstream` (a `cudaStream_t` is the same handle).
    pub h_stream: usize,
    pub cuda_device_id: i32,
    pub multi_processor_count: i32,
    pub max_threads_per_multi_processor: i32,
    pub max_threads_per_block: i32,
    pub shared_mem_per_block: usize,
    pub compute_capability_major: i32,
    pub compute_capability_minor: i32,
    /// `cudaStreamNonBlocking` (1) for the benchmark's stream.
    pub stream_flags: u32,
    pub reserved0: i32,
}

/// An NPP function converting packed 8-bit RGB (or BGR) to planar YCbCr 4:2:0 (i420).
type ToYuvFn =
    unsafe extern "C" fn(*const u8, i32, *const *mut u8, *const i32, NppiSize, NppStreamContext) -> NppStatus;
/// An NPP function converting NV12 to packed 8-bit RGB.
type ToRgbFn = unsafe extern "C" fn(*const *const u8, i32, *mut u8, i32, NppiSize, NppStreamContext) -> NppStatus;
/// `nppGetLibVersion`: a pointer to `{ int major, minor, build }`.
type VersionFn = unsafe extern "C" fn() -> *const [i32; 3];
/// The driver's `cuDeviceGet` and `cuDeviceGetAttribute`, for the stream context.
type DeviceGetFn = unsafe extern "C" fn(*mut i32, i32) -> i32;
type AttributeFn = unsafe extern "C" fn(*mut i32, i32, i32) -> i32;

/// What an NPP conversion computes, as documented, in the built-in stages' terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meaning {
    pub matrix: Matrix,
    pub range: ColorRange,
    /// The input is BGR: the benchmark hands it the same frame with R and B swapped.
    pub bgr_input: bool,
    /// What NPP's documentation says, for the report.
    pub note: &'static str,
}

const fn meaning(matrix: Matrix, range: ColorRange, bgr_input: bool, note: &'static str) -> Meaning {
    Meaning { matrix, range, bgr_input, note }
}

/// RGB → i420, against the yuv420 stage: name and meaning.
pub const TO_YUV: [(&str, Meaning); 3] = [
    (
        "nppiRGBToYCbCr420_8u_C3P3R_Ctx",
        meaning(Matrix::Bt601, ColorRange::Limited, false, "YCbCr: BT.601, video range (Y 16..235)"),
    ),
    (
        "nppiRGBToYCbCr420_JPEG_8u_C3P3R_Ctx",
        meaning(Matrix::Bt601, ColorRange::Full, false, "JPEG: BT.601, full range"),
    ),
    (
        "nppiBGRToYCbCr420_709CSC_8u_C3P3R_Ctx",
        meaning(Matrix::Bt709, ColorRange::Limited, true, "709CSC: BT.709, video range; BGR input"),
    ),
];

/// NV12 → RGB, against the yuv-to-rgb stage: name and meaning.
pub const TO_RGB: [(&str, Meaning); 4] = [
    (
        "nppiNV12ToRGB_709CSC_8u_P2C3R_Ctx",
        meaning(Matrix::Bt709, ColorRange::Limited, false, "709CSC: BT.709, limited range"),
    ),
    (
        "nppiNV12ToRGB_709HDTV_8u_P2C3R_Ctx",
        meaning(Matrix::Bt709, ColorRange::Full, false, "709HDTV: BT.709, 'assumes full color range'"),
    ),
    (
        "nppiNV12ToRGB_8u_P2C3R_Ctx",
        meaning(Matrix::Bt601, ColorRange::Limited, false, "plain: matrix not documented; BT.601 limited assumed"),
    ),
    ("nppiNV12ToRGB_601_8u_P2C3R_Ctx", meaning(Matrix::Bt601, ColorRange::Limited, false, "601 (NPP 13.2+)")),
];

/// The libraries and the conversions found in them.
pub struct Npp {
    /// Where `libnppicc` was loaded from.
    pub path: String,
    /// `nppGetLibVersion`, when `libnppc` has it.
    pub version: Option<(i32, i32, i32)>,
    /// The conversions of [`TO_YUV`] that the library has (others are listed as missing).
    pub to_yuv: Vec<(&'static str, Meaning, ToYuvFn)>,
    pub to_rgb: Vec<(&'static str, Meaning, ToRgbFn)>,
    pub missing: Vec<&'static str>,
    /// Kept loaded while the function pointers above are used.
    _libraries: Vec<Library>,
}

/// Where `libnppicc` is looked for: `dir` first when given, then the dynamic loader's path
/// (LD_LIBRARY_PATH, the system's), then the toolkit's folders. CUDA 13 first, then 12 (whose
/// `_Ctx` functions are the same).
pub fn candidates(dir: Option<&Path>) -> Vec<(PathBuf, PathBuf)> {
    let mut dirs: Vec<Option<PathBuf>> = Vec::new();
    if let Some(d) = dir {
        dirs.push(Some(d.to_path_buf()));
    }
    dirs.push(None);
    for d in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"] {
        dirs.push(Some(PathBuf::from(d)));
    }
    let mut out = Vec::new();
    for suffix in [".so.13", ".so", ".so.12"] {
        for d in &dirs {
            let name = |lib: &str| {
                let file = format!("{lib}{suffix}");
                d.as_ref().map_or_else(|| PathBuf::from(&file), |d| d.join(&file))
            };
            out.push((name("libnppc"), name("libnppicc")));
        }
    }
    out
}

impl Npp {
    /// Load NPP and look up every conversion; `Err` (with every place tried) when no
    /// `libnppicc` opens.
    #[allow(unsafe_code)]
    pub fn load(dir: Option<&Path>) -> Result<Npp, String> {
        let mut tried = Vec::new();
        for (core_path, cc_path) in candidates(dir) {
            // SAFETY: loading NPP runs its initialisers, which only set up the library; the
            // core library first, so that libnppicc's dependency on it resolves by soname.
            let core = unsafe { Library::new(&core_path) };
            // SAFETY: as above.
            let cc = match unsafe { Library::new(&cc_path) } {
                Ok(cc) => cc,
                Err(e) => {
                    tried.push(format!("{}: {e}", cc_path.display()));
                    continue;
                }
            };
            let core = core.ok();
            let version = core.as_ref().and_then(|core| {
                // SAFETY: `nppGetLibVersion` has this signature in every NPP release
                // (nppcore.h) and returns a pointer to a static struct of three ints.
                let f = unsafe { core.get::<VersionFn>(b"nppGetLibVersion\0") }.ok()?;
                // SAFETY: as above; the pointer is checked for null before it is read.
                let p = unsafe { f() };
                // SAFETY: non-null, a static `NppLibraryVersion` of three ints.
                (!p.is_null()).then(|| unsafe { *p }).map(|[a, b, c]| (a, b, c))
            });
            let mut npp = Npp {
                path: cc_path.display().to_string(),
                version,
                to_yuv: Vec::new(),
                to_rgb: Vec::new(),
                missing: Vec::new(),
                _libraries: Vec::new(),
            };
            for (name, m) in TO_YUV {
                let symbol = format!("{name}\0");
                // SAFETY: every name in TO_YUV is declared in nppi_color_conversion.h with
                // the argument list of `ToYuvFn` (see the module's docs).
                match unsafe { cc.get::<ToYuvFn>(symbol.as_bytes()) } {
                    Ok(f) => npp.to_yuv.push((name, m, *f)),
                    Err(_) => npp.missing.push(name),
                }
            }
            for (name, m) in TO_RGB {
                let symbol = format!("{name}\0");
                // SAFETY: every name in TO_RGB is declared with the argument list of
                // `ToRgbFn`.
                match unsafe { cc.get::<ToRgbFn>(symbol.as_bytes()) } {
                    Ok(f) => npp.to_rgb.push((name, m, *f)),
                    Err(_) => npp.missing.push(name),
                }
            }
            npp._libraries.push(cc);
            npp._libraries.extend(core);
            return Ok(npp);
        }
        Err(format!("libnppicc not found; tried {}", tried.join("; ")))
    }
}

/// The stream context for `stream` (non-blocking) on device `ordinal`, its fields from the
/// driver's device attributes, as `cudaGetDeviceProperties` would give them.
#[allow(unsafe_code)]
pub fn stream_context(ordinal: i32, stream: usize) -> Result<NppStreamContext, String> {
    // SAFETY: the CUDA driver is already loaded and initialised (the benchmark opened a
    // context with it); opening it again only takes a reference.
    let cuda = unsafe { Library::new("libcuda.so.1") }.map_err(|e| format!("libcuda.so.1: {e}"))?;
    // SAFETY: cuda.h declares `CUresult cuDeviceGet(CUdevice *, int)` and
    // `CUresult cuDeviceGetAttribute(int *, CUdevice_attribute, CUdevice)`; CUdevice is an int.
    let (get, attribute) = unsafe {
        (
            cuda.get::<DeviceGetFn>(b"cuDeviceGet\0").map_err(|e| e.to_string())?,
            cuda.get::<AttributeFn>(b"cuDeviceGetAttribute\0").map_err(|e| e.to_string())?,
        )
    };
    let mut device = 0;
    // SAFETY: writes one int.
    let r = unsafe { get(&mut device, ordinal) };
    if r != 0 {
        return Err(format!("cuDeviceGet({ordinal}): CUresult {r}"));
    }
    let attr = |code: i32, what: &str| -> Result<i32, String> {
        let mut value = 0;
        // SAFETY: writes one int; `device` came from cuDeviceGet.
        let r = unsafe { attribute(&mut value, code, device) };
        if r == 0 { Ok(value) } else { Err(format!("cuDeviceGetAttribute({what}): CUresult {r}")) }
    };
    // CUdevice_attribute codes (cuda.h): MAX_THREADS_PER_BLOCK 1, MAX_SHARED_MEMORY_PER_BLOCK 8,
    // MULTIPROCESSOR_COUNT 16, MAX_THREADS_PER_MULTIPROCESSOR 39, COMPUTE_CAPABILITY_MAJOR 75,
    // COMPUTE_CAPABILITY_MINOR 76.
    Ok(NppStreamContext {
        h_stream: stream,
        cuda_device_id: ordinal,
        multi_processor_count: attr(16, "MULTIPROCESSOR_COUNT")?,
        max_threads_per_multi_processor: attr(39, "MAX_THREADS_PER_MULTIPROCESSOR")?,
        max_threads_per_block: attr(1, "MAX_THREADS_PER_BLOCK")?,
        shared_mem_per_block: attr(8, "MAX_SHARED_MEMORY_PER_BLOCK")? as usize,
        compute_capability_major: attr(75, "COMPUTE_CAPABILITY_MAJOR")?,
        compute_capability_minor: attr(76, "COMPUTE_CAPABILITY_MINOR")?,
        stream_flags: 1,
        reserved0: 0,
    })
}

/// A device plane for NPP: address and step (NPP takes steps as `int`).
#[derive(Debug, Clone, Copy)]
pub struct NppPlane {
    pub addr: u64,
    pub step: i32,
}

/// Step of a plane, refused where it does not fit NPP's `int`.
pub fn step(pitch: u64) -> Result<i32, String> {
    i32::try_from(pitch).map_err(|_| format!("pitch {pitch} does not fit NPP's int step"))
}

fn status(name: &str, s: NppStatus) -> Result<(), String> {
    match s {
        0 => Ok(()),
        s if s > 0 => Err(format!("{name}: NPP warning {s}")),
        s => Err(format!("{name}: NPP error {s}")),
    }
}

/// Enqueue `f` (one of [`TO_YUV`]) converting `src` into the three planes `dst` on the
/// context's stream.
///
/// The caller makes sure every address is device memory of the context's device holding a
/// `size` frame at those steps (the benchmark's own frames, laid out by `FrameLayout`).
#[allow(unsafe_code)]
pub fn call_to_yuv(
    name: &str,
    f: ToYuvFn,
    src: NppPlane,
    dst: [NppPlane; 3],
    size: NppiSize,
    ctx: NppStreamContext,
) -> Result<(), String> {
    let planes = dst.map(|p| p.addr as *mut u8);
    let steps = dst.map(|p| p.step);
    // SAFETY: `f` has this signature (`Npp::load`); NPP reads the 3 plane pointers and steps
    // from host arrays alive for the call and enqueues device work on `ctx.h_stream`; the
    // device addresses hold the frames (the caller's promise above).
    status(name, unsafe { f(src.addr as *const u8, src.step, planes.as_ptr(), steps.as_ptr(), size, ctx) })
}

/// Enqueue `f` (one of [`TO_RGB`]) converting the nv12 planes `src` (Y, interleaved UV; one
/// step for both, as NPP takes it) into `dst` on the context's stream. Same promise as
/// [`call_to_yuv`].
#[allow(unsafe_code)]
pub fn call_to_rgb(
    name: &str,
    f: ToRgbFn,
    src: [u64; 2],
    src_step: i32,
    dst: NppPlane,
    size: NppiSize,
    ctx: NppStreamContext,
) -> Result<(), String> {
    let planes = src.map(|a| a as *const u8);
    // SAFETY: as in `call_to_yuv`: the signature is `ToRgbFn`'s, the pointer array lives for
    // the call, the device addresses hold the frames.
    status(name, unsafe { f(planes.as_ptr(), src_step, dst.addr as *mut u8, dst.step, size, ctx) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn stream_context_has_nppdefs_layout() {
        assert_eq!(size_of::<NppStreamContext>(), 48);
        assert_eq!(align_of::<NppStreamContext>(), 8);
        assert_eq!(offset_of!(NppStreamContext, h_stream), 0);
        assert_eq!(offset_of!(NppStreamContext, cuda_device_id), 8);
        assert_eq!(offset_of!(NppStreamContext, multi_processor_count), 12);
        assert_eq!(offset_of!(NppStreamContext, max_threads_per_multi_processor), 16);
        assert_eq!(offset_of!(NppStreamContext, max_threads_per_block), 20);
        assert_eq!(offset_of!(NppStreamContext, shared_mem_per_block), 24);
        assert_eq!(offset_of!(NppStreamContext, compute_capability_major), 32);
        assert_eq!(offset_of!(NppStreamContext, compute_capability_minor), 36);
        assert_eq!(offset_of!(NppStreamContext, stream_flags), 40);
        assert_eq!(offset_of!(NppStreamContext, reserved0), 44);
        assert_eq!(size_of::<NppiSize>(), 8);
    }

    #[test]
    fn looks_in_the_given_folder_first_and_cuda_13_first() {
        let c = candidates(Some(Path::new("/opt/npp")));
        assert_eq!(c[0].1, PathBuf::from("/opt/npp/libnppicc.so.13"));
        assert_eq!(c[0].0, PathBuf::from("/opt/npp/libnppc.so.13"));
        assert_eq!(c[1].1, PathBuf::from("libnppicc.so.13"));
        assert!(c.iter().any(|(_, cc)| cc == Path::new("/usr/local/cuda/lib64/libnppicc.so.13")));
        assert!(c.last().unwrap().1.to_string_lossy().ends_with(".so.12"));
    }

    #[test]
    fn warnings_and_errors_are_refused() {
        assert!(status("f", 0).is_ok());
        assert_eq!(status("f", 1).unwrap_err(), "f: NPP warning 1");
        assert_eq!(status("f", -4).unwrap_err(), "f: NPP error -4");
        assert_eq!(step(1 << 31).unwrap_err(), "pitch 2147483648 does not fit NPP's int step");
    }

    #[test]
    fn missing_library_is_an_error_naming_the_places_tried() {
        let e = match Npp::load(Some(Path::new("/nonexistent-npp"))) {
            Ok(_) => return, // a machine with NPP installed
            Err(e) => e,
        };
        assert!(e.starts_with("libnppicc not found; tried /nonexistent-npp/libnppicc.so.13"), "{e}");
    }
}
