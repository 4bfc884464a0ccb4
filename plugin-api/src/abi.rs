//! The C ABI between the host and a plugin cdylib: one entry symbol returning a descriptor.
//!
//! Everything here is `#[repr(C)]` and plain data. Status codes and enums cross as integers.
//! The host checks [`PluginDescriptor::abi_major`] before it touches any other field; a minor
//! bump may only append fields, and `size` says how many bytes the plugin's descriptor has.

use std::ffi::c_void;

use crate::format::{FrameFormat, FrameLayout};

/// Incompatible changes bump the major version; the host refuses any other major.
pub const ABI_MAJOR: u32 = 1;
/// Compatible additions (fields appended to the descriptor, status codes a plugin may return)
/// bump the minor version.
///
/// - 1.1: [`PluginDescriptor::param_info`], the declared params; [`STATUS_END_OF_STREAM`], a
///   source ending its stream.
/// - 1.2: [`PluginDescriptor::flags`], with [`FLAG_REPLICABLE`].
/// - 1.3: a source may write `seq` and `timestamp_ns` of its output [`RawFrame`] in `process`
///   (it relays frames made elsewhere: `OutputFrame::relay`); the host reads them back from
///   plugins built for 1.3 or later only, so an older plugin's frames stay numbered by the host.
/// - 1.4: pixel format `p010` (code 6); [`STATUS_DAMAGED`], a frame made from damaged data.
/// - 1.5: [`FLAG_LIVE`], a live source; [`STATUS_NO_FRAME`], a live source with no frame yet.
pub const ABI_MINOR: u32 = 5;

/// The one symbol a plugin exports: `extern "C" fn() -> *const PluginDescriptor`.
pub const ENTRY_SYMBOL: &str = "gpuipc_plugin_entry_v1";

/// The type of the entry symbol.
pub type EntryFn = extern "C" fn() -> *const PluginDescriptor;

/// Status codes returned by the descriptor's functions.
pub const STATUS_OK: i32 = 0;
/// The plugin reported an error; `last_error` has the text.
pub const STATUS_ERROR: i32 = 1;
/// The plugin panicked; the panic was caught at the boundary and `last_error` has the message.
pub const STATUS_PANIC: i32 = 2;
/// `process` of a source made no frame: its stream is over (a file ran out). The host
/// publishes nothing for the call and ends the source as if it had emitted its frame count.
/// Only a source (a stage without inputs) may return it; for any other stage it is an error.
/// Since ABI 1.1.
pub const STATUS_END_OF_STREAM: i32 = 3;
/// `process` made its output frame, but from damaged data (a decoder concealed errors in it):
/// the host publishes it as usual and counts it in the stage's `damaged` frames. A host older
/// than 1.4 never sees it: it comes only from plugins that call `OutputFrame::mark_damaged`,
/// which a host checks is built for 1.4 or later. Since ABI 1.4.
pub const STATUS_DAMAGED: i32 = 4;

/// `process` of a live source ([`FLAG_LIVE`]) made no frame this call: none came in the short
/// while it waited (its camera is away, or slower than that while). The host publishes
/// nothing, leaves the number unused, pulses the stage's heartbeat (the stage is alive, waiting
/// on its network, so its stall watchdog does not kill it), looks for a stop, and calls
/// `process` again. A plugin that waits longer than the stage's `stall_timeout` inside one call
/// is still killed as stuck. From any other plugin, or one built for an ABI before 1.5, it is
/// an unknown status. Since ABI 1.5.
pub const STATUS_NO_FRAME: i32 = 5;

/// Domain bits, used in [`PluginDescriptor::domains`] and [`RawFrame::domain`].
pub const DOMAIN_CPU: u32 = 1;
pub const DOMAIN_CUDA: u32 = 2;

/// [`PluginDescriptor::flags`]: its instances keep no state from one frame to the next, so a
/// stage may run several of them as replicas (`replicas = N`), each given some of the frames.
pub const FLAG_REPLICABLE: u32 = 1;
/// [`PluginDescriptor::flags`]: a live source (a camera), which relays its frames
/// (`OutputFrame::relay`) with stamps on the host's wall clock that say when each frame came
/// into being. The host takes a frame's stamp as its birth, so latency counts from it (not
/// from when `process` began, which for a live source includes waiting for the camera); counts
/// the numbers its relayed frames skip as frames the source dropped (it could not hand them
/// on). An older host ignores the flag. Since ABI 1.5.
pub const FLAG_LIVE: u32 = 2;

/// Log levels of the host's log callback.
pub const LOG_ERROR: u32 = 1;
pub const LOG_WARN: u32 = 2;
pub const LOG_INFO: u32 = 3;
pub const LOG_DEBUG: u32 = 4;

/// A borrowed UTF-8 string: pointer and length, no terminator.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawStr {
    pub ptr: *const u8,
    pub len: usize,
}

impl RawStr {
    pub const fn from_str(s: &str) -> RawStr {
        RawStr { ptr: s.as_ptr(), len: s.len() }
    }

    /// # Safety
    /// `ptr` must point to `len` bytes of UTF-8 that stay valid for `'a`. A null pointer with
    /// zero length is the empty string. Invalid UTF-8 is replaced, not trusted.
    #[allow(unsafe_code)]
    pub unsafe fn to_string_lossy(&self) -> String {
        if self.ptr.is_null() || self.len == 0 {
            return String::new();
        }
        // SAFETY: the caller guarantees `ptr` points to `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        String::from_utf8_lossy(bytes).into_owned()
    }
}

/// A list of pixel format codes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawFormats {
    pub ptr: *const u32,
    pub len: usize,
}

/// One declared param ([`crate::ParamInfo`]), its strings borrowed from the plugin's static
/// data for as long as the library is loaded.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawParamInfo {
    pub name: RawStr,
    pub kind: RawStr,
    pub default: RawStr,
    pub range: RawStr,
    pub description: RawStr,
}

/// The host's log sink, callable from any thread of the stage process.
pub type LogFn = extern "C" fn(level: u32, message: RawStr);

/// What a plugin is given when an instance is created.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawCreateContext {
    /// The stage's name from the pipeline file.
    pub stage: RawStr,
    /// `DOMAIN_CPU` or `DOMAIN_CUDA`: where frames live for this instance.
    pub domain: u32,
    /// CUDA device ordinal, or -1 in the cpu domain.
    pub device_ordinal: i32,
    /// The CUDA context (`CUcontext`) made current on the calling thread, or null.
    pub cuda_context: *mut c_void,
    /// The CUDA stream (`CUstream`) the plugin must launch its work on, or null.
    pub cuda_stream: *mut c_void,
    /// Directory where compiled kernels may be cached (empty: no cache).
    pub kernel_cache_dir: RawStr,
    pub log: Option<LogFn>,
}

/// One frame handed to `process`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawFrame {
    pub format: FrameFormat,
    pub layout: FrameLayout,
    /// `DOMAIN_CPU`: `addr` is a host pointer. `DOMAIN_CUDA`: `addr` is a device address.
    pub domain: u32,
    pub addr: u64,
    /// Bytes readable (inputs) or writable (outputs) from `addr`.
    pub len: u64,
    /// Sequence number: a source numbers its frames 0, 1, 2, ...; other stages pass it on.
    /// Since 1.3 a source's `process` may overwrite it in its output frame (a relayed frame's
    /// own number, never lower than the one given).
    pub seq: u64,
    /// When the source produced the frame, nanoseconds since the Unix epoch. Since 1.3 a
    /// source's `process` may overwrite it in its output frame, with `seq`.
    pub timestamp_ns: u64,
}

/// Per-call context of `process`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RawProcessContext {
    /// How many frames this instance has processed before this call.
    pub frame_index: u64,
    /// The CUDA stream to launch on, or null in the cpu domain.
    pub cuda_stream: *mut c_void,
}

/// What the entry symbol returns. Lives as long as the library is loaded.
#[repr(C)]
#[derive(Debug)]
pub struct PluginDescriptor {
    pub abi_major: u32,
    pub abi_minor: u32,
    /// `size_of::<PluginDescriptor>()` as the plugin was built.
    pub size: usize,
    pub name: RawStr,
    pub version: RawStr,
    pub description: RawStr,
    /// `DOMAIN_*` bits this plugin can run in.
    pub domains: u32,
    pub min_inputs: u32,
    pub max_inputs: u32,
    /// Pixel formats accepted on every input.
    pub accepts: RawFormats,
    /// Pixel formats the output may have; empty for a sink.
    pub produces: RawFormats,
    /// Describe the output for these params and inputs. Writes `*has_output` (0 for a sink) and
    /// `*output`.
    pub negotiate: unsafe extern "C" fn(
        params: RawStr,
        inputs: *const FrameFormat,
        n_inputs: usize,
        output: *mut FrameFormat,
        has_output: *mut u32,
    ) -> i32,
    /// Create an instance. `output` is null for a sink.
    pub create: unsafe extern "C" fn(
        params: RawStr,
        inputs: *const FrameFormat,
        n_inputs: usize,
        output: *const FrameFormat,
        ctx: *const RawCreateContext,
        instance: *mut *mut c_void,
    ) -> i32,
    /// Process one set of aligned input frames into `output` (null for a sink).
    pub process: unsafe extern "C" fn(
        instance: *mut c_void,
        inputs: *const RawFrame,
        n_inputs: usize,
        output: *mut RawFrame,
        ctx: *const RawProcessContext,
    ) -> i32,
    /// End of stream: no more frames will come.
    pub flush: unsafe extern "C" fn(instance: *mut c_void) -> i32,
    pub destroy: unsafe extern "C" fn(instance: *mut c_void),
    /// The text of the last error or panic on the calling thread; valid until the next call.
    pub last_error: unsafe extern "C" fn(len: *mut usize) -> *const u8,
    // ABI 1.0 ends here ([`DESCRIPTOR_1_0_SIZE`]); the host reads a field below only when
    // `size` covers it.
    /// Since 1.1. Writes declared param number `index` to `*out` and returns 1, or returns 0
    /// when there are no more (`index` is the count). Never fails or panics.
    pub param_info: unsafe extern "C" fn(index: usize, out: *mut RawParamInfo) -> u32,
    // ABI 1.1 ends here ([`DESCRIPTOR_1_1_SIZE`]).
    /// Since 1.2. `FLAG_*` bits; unknown bits are ignored.
    pub flags: u32,
}

/// `size` of a 1.0 descriptor: every field up to `last_error`. A descriptor this size or larger
/// has all of them.
pub const DESCRIPTOR_1_0_SIZE: usize = std::mem::offset_of!(PluginDescriptor, param_info);

/// `size` of a 1.1 descriptor: every field up to `param_info`.
pub const DESCRIPTOR_1_1_SIZE: usize = std::mem::offset_of!(PluginDescriptor, flags);

/// Lets a descriptor full of raw pointers live in a `static`.
pub struct DescriptorCell(pub PluginDescriptor);

// SAFETY: the descriptor only points at `'static` data that is never written after start-up
// (string literals, format lists, functions), so sharing it between threads is sound.
#[allow(unsafe_code)]
unsafe impl Sync for DescriptorCell {}
