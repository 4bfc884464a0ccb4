//! NCCL as the `nccl` links between hosts use it: [`NcclPair`], a communicator of two ranks
//! (a sender and a receiver) created non-blocking so that every wait on it has a deadline
//! and an abort check, and aborted (`ncclCommAbort`) when it is dropped; [`NcclId`], the
//! unique id one end makes and sends to the other out of band; [`nccl_available`] and
//! [`nccl_version`].
//!
//! # Loading
//!
//! The types and constants are cudarc's (`cudarc::nccl::sys`, feature `nccl`: NCCL 2.30's
//! headers), but the functions are looked up here, in a library this module opens itself:
//! cudarc's own loader tries `libnccl.so`, `libnccl.so.13`, ... `libnccl.so.1` and panics when
//! none opens, and never tries `libnccl.so.2`, the one name NCCL's runtime packages ship (the
//! `libnccl2` deb, the PyPI wheel `nvidia-nccl-cu13`). The candidates are `libnccl.so.2` and
//! then cudarc's names, the first that the dynamic loader opens wins (`LD_LIBRARY_PATH`
//! applies), and every function called is looked up once before any is called: a missing
//! library is [`CudaError::NoNccl`] and a missing function [`CudaError::MissingSymbol`],
//! never a panic. Results cross as plain integers, never as Rust enums, so a code a newer
//! NCCL adds cannot be undefined behaviour.
//!
//! # Two processes on one machine
//!
//! NCCL refuses two ranks on the same GPU of one host ("Duplicate GPU detected"); ranks whose
//! `NCCL_HOSTID` differ count as different hosts (and talk over the network transport). Each
//! agent that shares a machine with another needs its own `NCCL_HOSTID` in its environment
//! (docs/multi-host.md); nothing here sets it.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cudarc::driver::sys::{self, CUevent, CUresult};
use cudarc::nccl::sys::{ncclComm_t, ncclConfig_t, ncclDataType_t, ncclUniqueId};

use crate::context::RawStream;
use crate::driver::check;
use crate::error::CudaError;
use crate::library::Library;
use crate::log;

/// `ncclSuccess`.
const SUCCESS: c_int = 0;
/// `ncclInProgress`: a non-blocking communicator is still working on the last call.
const IN_PROGRESS: c_int = 7;
/// `NCCL_CONFIG_UNDEF_INT`: let NCCL choose.
const UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_VERSION(2, 30, 0)`: the headers cudarc's `ncclConfig_t` follows. An older library
/// reads only the part of the struct it knows (it copies `min(size, its own size)` bytes).
const CONFIG_VERSION: u32 = 2 * 10000 + 30 * 100;
/// Bytes of an `ncclUniqueId`.
pub const NCCL_ID_BYTES: usize = 128;
/// How long a wait sleeps between two looks at the communicator or the GPU.
const POLL_EVERY: Duration = Duration::from_micros(50);

type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetUniqueId = unsafe extern "C" fn(*mut ncclUniqueId) -> c_int;
type CommInitRankConfig = unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int, *mut ncclConfig_t) -> c_int;
type CommGetAsyncError = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> c_int;
type CommAbort = unsafe extern "C" fn(ncclComm_t) -> c_int;
type Send = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, ncclComm_t, *mut c_void) -> c_int;
type Recv = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, ncclComm_t, *mut c_void) -> c_int;
type GetErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type GetLastError = unsafe extern "C" fn(ncclComm_t) -> *const c_char;

/// The NCCL functions this module calls, looked up once in the library it keeps open for
/// the life of the process.
struct Api {
    _lib: libloading::Library,
    get_version: GetVersion,
    get_unique_id: GetUniqueId,
    comm_init_rank_config: CommInitRankConfig,
    comm_get_async_error: CommGetAsyncError,
    comm_abort: CommAbort,
    send: Send,
    recv: Recv,
    get_error_string: GetErrorString,
    get_last_error: GetLastError,
}

/// Every NCCL function this module calls (a test keeps the list and [`Api`] in step).
const FUNCTIONS: [&str; 9] = [
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRankConfig",
    "ncclCommGetAsyncError",
    "ncclCommAbort",
    "ncclSend",
    "ncclRecv",
    "ncclGetErrorString",
    "ncclGetLastError",
];

/// The loaded library, or why it cannot be used; found once per process.
fn api() -> Result<&'static Api, CudaError> {
    static API: OnceLock<Result<Api, CudaError>> = OnceLock::new();
    API.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Api, CudaError> {
    let file = Library::Nccl.file()?;
    // SAFETY: `file` opened just now (`Library::file`); opening NCCL runs its initialisers,
    // which create no CUDA context. Kept open for the life of the process (in `API`), so
    // the function pointers below stay valid.
    let lib = unsafe { libloading::Library::new(file) }.map_err(|_| CudaError::NoNccl)?;
    fn get<T: Copy>(lib: &libloading::Library, file: &str, symbol: &'static str) -> Result<T, CudaError> {
        // SAFETY: a dlsym lookup; `T` is the function's type as nccl.h declares it, with
        // enums as the C `int` they are.
        unsafe { lib.get::<T>(symbol.as_bytes()) }.map(|s| *s).map_err(|_| CudaError::MissingSymbol {
            library: Library::Nccl,
            file: file.to_owned(),
            symbol,
            needs: "NCCL 2.19 or newer (non-blocking communicators with ncclCommInitRankConfig)",
        })
    }
    Ok(Api {
        get_version: get(&lib, file, FUNCTIONS[0])?,
        get_unique_id: get(&lib, file, FUNCTIONS[1])?,
        comm_init_rank_config: get(&lib, file, FUNCTIONS[2])?,
        comm_get_async_error: get(&lib, file, FUNCTIONS[3])?,
        comm_abort: get(&lib, file, FUNCTIONS[4])?,
        send: get(&lib, file, FUNCTIONS[5])?,
        recv: get(&lib, file, FUNCTIONS[6])?,
        get_error_string: get(&lib, file, FUNCTIONS[7])?,
        get_last_error: get(&lib, file, FUNCTIONS[8])?,
        _lib: lib,
    })
}

/// Whether NCCL can be loaded by the rule above and has every function this module calls.
/// Never panics; cheap after the first call.
pub fn nccl_available() -> bool {
    api().is_ok()
}

/// The loaded NCCL's (major, minor, patch).
pub fn nccl_version() -> Result<(u32, u32, u32), CudaError> {
    let api = api()?;
    let mut code: c_int = 0;
    // SAFETY: a loaded function writing one int.
    checked(api, "ncclGetVersion", std::ptr::null_mut(), unsafe { (api.get_version)(&mut code) })?;
    let code = code.max(0) as u32;
    // NCCL_VERSION(X, Y, Z) is X * 10000 + Y * 100 + Z since 2.9 (X * 1000 + Y * 100 + Z before).
    Ok(if code >= 10000 {
        (code / 10000, code / 100 % 100, code % 100)
    } else {
        (code / 1000, code / 100 % 10, code % 100)
    })
}

/// NCCL's name of a result code.
fn result_name(code: c_int) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "an unknown ncclResult_t",
    }
}

/// `Ok` for `ncclSuccess` (and `ncclInProgress`, which the caller then waits out); the error
/// with NCCL's text and its last message otherwise. `comm` may be null.
fn checked(api: &Api, op: &'static str, comm: ncclComm_t, code: c_int) -> Result<(), CudaError> {
    if code == SUCCESS || code == IN_PROGRESS {
        return Ok(());
    }
    Err(nccl_error(api, op, comm, code))
}

fn nccl_error(api: &Api, op: &'static str, comm: ncclComm_t, code: c_int) -> CudaError {
    let text = |ptr: *const c_char| {
        if ptr.is_null() {
            return String::new();
        }
        // SAFETY: NCCL returns NUL-terminated strings that stay valid until its next call on
        // this thread; copied at once.
        unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
    };
    // SAFETY: loaded functions; any code is accepted (an unknown one has a generic text).
    let description = text(unsafe { (api.get_error_string)(code) });
    // SAFETY: as above; a null communicator asks for the last error of any.
    let last = text(unsafe { (api.get_last_error)(comm) });
    CudaError::Nccl { op, code, name: result_name(code), description, last }
}

/// An NCCL unique id: what the rank that makes it sends to the other, out of band, for both
/// to create their communicator from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclId([u8; NCCL_ID_BYTES]);

impl std::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The id holds the bootstrap root's address; its bytes say nothing to a reader.
        write!(f, "NcclId(..)")
    }
}

impl NcclId {
    /// A new id (`ncclGetUniqueId`): this process becomes the bootstrap root the other rank
    /// connects to.
    pub fn new() -> Result<NcclId, CudaError> {
        let api = api()?;
        let mut id = ncclUniqueId { internal: [0; NCCL_ID_BYTES] };
        // SAFETY: a loaded function writing one ncclUniqueId.
        let code = unsafe { (api.get_unique_id)(&mut id) };
        if code != SUCCESS {
            return Err(nccl_error(api, "ncclGetUniqueId", std::ptr::null_mut(), code));
        }
        Ok(NcclId(id.internal.map(|b| b as u8)))
    }

    pub fn from_bytes(bytes: [u8; NCCL_ID_BYTES]) -> NcclId {
        NcclId(bytes)
    }

    pub fn to_bytes(&self) -> [u8; NCCL_ID_BYTES] {
        self.0
    }

    fn raw(&self) -> ncclUniqueId {
        ncclUniqueId { internal: self.0.map(|b| b as c_char) }
    }
}

/// A communicator of two ranks, this process's end of it: rank 0 sends, rank 1 receives (or
/// either, as the caller decides). Created non-blocking; every wait on it polls with a deadline
/// and the caller's abort check. Dropped (or on [`NcclPair::abort`]) it is aborted with
/// `ncclCommAbort`, which also ends a send or receive the GPU is still blocked in (the peer
/// died): a broken link never leaves a kernel waiting forever.
///
/// Sends and receives go on the stream given at [`NcclPair::connect`] and only on it (another
/// is refused before NCCL sees it, as [`ScratchBuffer`](crate::ScratchBuffer) does).
#[derive(Debug)]
pub struct NcclPair {
    on: RawStream,
    comm: ncclComm_t,
    rank: u32,
    /// Recorded after a transfer to see, without blocking, when the GPU is past it.
    done: CUevent,
}

// SAFETY: the communicator and the event are this value's only; NCCL and the driver accept
// calls on them from any thread as long as calls on one communicator are not concurrent,
// which `&mut self` on every method that uses it (and no `Sync`) guarantees.
unsafe impl std::marker::Send for NcclPair {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api")
    }
}

impl NcclPair {
    /// A new unique id for a pair; see [`NcclId::new`].
    pub fn unique_id() -> Result<NcclId, CudaError> {
        NcclId::new()
    }

    /// Join the two-rank communicator of `id` as `rank` (0 or 1) on `on`'s device, whose
    /// context must be current on this thread. Returns once both ranks have joined, or fails
    /// at `deadline` or when `abort` returns true (the other end is gone), aborting what was
    /// made.
    pub fn connect(
        on: RawStream,
        id: &NcclId,
        rank: u32,
        deadline: Instant,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<NcclPair, CudaError> {
        const OP: &str = "ncclCommInitRankConfig";
        if rank > 1 {
            return Err(CudaError::Invalid { op: OP, reason: format!("rank {rank} of a pair (0 or 1)") });
        }
        if on.stream == 0 {
            return Err(CudaError::Invalid {
                op: OP,
                reason: "no stream (the legacy default stream is refused)".into(),
            });
        }
        let api = api()?;
        on.require_current()?;
        let mut done: CUevent = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: the driver is loaded and `on.context` current (checked above); writes one
        // CUevent, destroyed in `Drop` (or just below).
        check("cuEventCreate", None, unsafe { sys::cuEventCreate(&mut done, flags) })?;
        let mut config = config();
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: a loaded function; `comm` and `config` are valid for the call (NCCL copies
        // the config), the id is passed by value. The current context's device is the
        // communicator's (NCCL asks the runtime, which uses the current context).
        let code = unsafe { (api.comm_init_rank_config)(&mut comm, 2, id.raw(), rank as c_int, &mut config) };
        // From here on `Drop` aborts the communicator and destroys the event.
        let pair = NcclPair { on, comm, rank, done };
        if code != SUCCESS && code != IN_PROGRESS {
            return Err(nccl_error(api, OP, comm, code));
        }
        if comm.is_null() {
            return Err(CudaError::Invalid { op: OP, reason: "NCCL returned no communicator".into() });
        }
        pair.wait_ready(api, OP, deadline, abort)?;
        Ok(pair)
    }

    /// This end's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The other end's rank.
    fn peer(&self) -> c_int {
        1 - self.rank as c_int
    }

    /// Enqueue sending `bytes` bytes from device address `src` to the other rank on `stream`,
    /// which must be the pair's. Returns once NCCL has taken the call (waiting, within
    /// `deadline` and while `abort` says no, while the first transfer sets up its connection
    /// with the peer); the GPU does the send in stream order.
    ///
    /// `src` cannot be checked here: pass the address of a frame handed to the plugin, or of
    /// memory of its own, holding at least `bytes` bytes.
    pub fn send(
        &mut self,
        src: u64,
        bytes: usize,
        stream: usize,
        deadline: Instant,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), CudaError> {
        const OP: &str = "ncclSend";
        let api = self.ready_for(OP, stream)?;
        let uint8 = ncclDataType_t::ncclUint8 as c_int;
        // SAFETY: a loaded function and our live communicator; `stream` is the pair's, of the
        // current context; NCCL reads `bytes` bytes at `src` in stream order (the caller's
        // promise that they are device memory of this context).
        let code =
            unsafe { (api.send)(src as *const c_void, bytes, uint8, self.peer(), self.comm, stream as *mut c_void) };
        checked(api, OP, self.comm, code)?;
        self.wait_ready(api, OP, deadline, abort)
    }

    /// Enqueue receiving `bytes` bytes from the other rank into device address `dst` on
    /// `stream`, as [`send`](Self::send) does for sending. [`wait_done`](Self::wait_done)
    /// says when the bytes are there.
    pub fn recv(
        &mut self,
        dst: u64,
        bytes: usize,
        stream: usize,
        deadline: Instant,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), CudaError> {
        const OP: &str = "ncclRecv";
        let api = self.ready_for(OP, stream)?;
        let uint8 = ncclDataType_t::ncclUint8 as c_int;
        // SAFETY: as in `send`; NCCL writes `bytes` bytes at `dst` in stream order.
        let code =
            unsafe { (api.recv)(dst as *mut c_void, bytes, uint8, self.peer(), self.comm, stream as *mut c_void) };
        checked(api, OP, self.comm, code)?;
        self.wait_ready(api, OP, deadline, abort)
    }

    /// Wait until the GPU is past everything enqueued on the pair's stream so far (the last
    /// transfer among it), polling so that an error of the communicator, the `deadline` or
    /// `abort` ends the wait. On an error, abort the pair: a transfer whose peer is gone would
    /// block its stream for ever.
    pub fn wait_done(&mut self, deadline: Instant, abort: &mut dyn FnMut() -> bool) -> Result<(), CudaError> {
        const OP: &str = "waiting for an NCCL transfer";
        let api = self.ready_for("cuEventRecord", self.on.stream)?;
        // SAFETY: our live event and the pair's stream, of the current context (checked).
        check("cuEventRecord", None, unsafe { sys::cuEventRecord(self.done, self.on.stream as sys::CUstream) })?;
        loop {
            // SAFETY: our live event.
            match unsafe { sys::cuEventQuery(self.done) } {
                CUresult::CUDA_SUCCESS => return self.check(),
                CUresult::CUDA_ERROR_NOT_READY => {}
                other => check("cuEventQuery", None, other)?,
            }
            self.async_error(api, OP)?;
            give_up(OP, deadline, abort)?;
            std::thread::sleep(POLL_EVERY);
        }
    }

    /// `Ok` while the communicator has no error (it may still be working).
    pub fn check(&self) -> Result<(), CudaError> {
        self.async_error(api()?, "ncclCommGetAsyncError").map(drop)
    }

    /// Abort the communicator now (`ncclCommAbort`), ending any transfer still pending on the
    /// GPU. Dropping the pair does the same.
    pub fn abort(self) {
        drop(self)
    }

    /// The API, after checking `stream` is the pair's and its context current.
    fn ready_for(&self, op: &'static str, stream: usize) -> Result<&'static Api, CudaError> {
        if stream != self.on.stream {
            return Err(CudaError::Invalid {
                op,
                reason: format!(
                    "stream {stream:#x} is not the stage's stream {:#x}, the one the pair was made on",
                    self.on.stream
                ),
            });
        }
        self.on.require_current()?;
        api()
    }

    /// The communicator's state: `Ok(true)` ready, `Ok(false)` still working, or its error.
    fn async_error(&self, api: &Api, op: &'static str) -> Result<bool, CudaError> {
        let mut state: c_int = SUCCESS;
        // SAFETY: a loaded function and our live communicator; writes one int.
        let code = unsafe { (api.comm_get_async_error)(self.comm, &mut state) };
        if code != SUCCESS {
            return Err(nccl_error(api, "ncclCommGetAsyncError", self.comm, code));
        }
        match state {
            SUCCESS => Ok(true),
            IN_PROGRESS => Ok(false),
            error => Err(nccl_error(api, op, self.comm, error)),
        }
    }

    /// Poll until the last call on the non-blocking communicator is done.
    fn wait_ready(
        &self,
        api: &Api,
        op: &'static str,
        deadline: Instant,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<(), CudaError> {
        while !self.async_error(api, op)? {
            give_up(op, deadline, abort)?;
            std::thread::sleep(POLL_EVERY);
        }
        Ok(())
    }
}

/// `Err` once `deadline` has passed or `abort` says to stop.
fn give_up(op: &'static str, deadline: Instant, abort: &mut dyn FnMut() -> bool) -> Result<(), CudaError> {
    if abort() {
        return Err(CudaError::Interrupted { op, reason: "stopped: the other end is gone".into() });
    }
    if Instant::now() >= deadline {
        return Err(CudaError::Interrupted { op, reason: "no progress before the deadline".into() });
    }
    Ok(())
}

/// `NCCL_CONFIG_INITIALIZER` with `blocking = 0`.
fn config() -> ncclConfig_t {
    ncclConfig_t {
        size: std::mem::size_of::<ncclConfig_t>(),
        magic: 0xcafe_beef,
        version: CONFIG_VERSION,
        blocking: 0,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: UNDEF_INT,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
        graphUsageMode: UNDEF_INT,
        numRmaCtx: UNDEF_INT,
        maxP2pPeers: UNDEF_INT,
    }
}

impl Drop for NcclPair {
    fn drop(&mut self) {
        if !self.comm.is_null()
            && let Ok(api) = api()
        {
            // SAFETY: our live communicator, aborted once; NCCL ends its pending kernels and
            // frees it. Nothing uses `comm` after this.
            let code = unsafe { (api.comm_abort)(self.comm) };
            if code != SUCCESS {
                log::warn(&nccl_error(api, "ncclCommAbort", std::ptr::null_mut(), code).to_string());
            }
            self.comm = std::ptr::null_mut();
        }
        if !self.done.is_null() {
            // SAFETY: our live event, destroyed once.
            if let Err(e) = check("cuEventDestroy", None, unsafe { sys::cuEventDestroy_v2(self.done) }) {
                log::warn(&e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Here (CI, the development machine) there is no NCCL: the answer is a clean `false` and
    /// every entry point a clean error, never cudarc's panic.
    #[test]
    fn without_nccl_everything_fails_cleanly() {
        if nccl_available() {
            eprintln!("NCCL is present ({:?}); the no-NCCL paths are not exercised here", nccl_version());
            return;
        }
        assert!(!nccl_available());
        assert!(matches!(nccl_version(), Err(CudaError::NoNccl)));
        let e = NcclId::new().unwrap_err();
        assert!(matches!(e, CudaError::NoNccl));
        assert!(e.to_string().contains("libnccl.so.2"), "{e}");
        assert!(e.to_string().contains("LD_LIBRARY_PATH"), "{e}");
        let id = NcclId::from_bytes([7; NCCL_ID_BYTES]);
        let on = RawStream { context: 0x1000, stream: 0x2000 };
        let e = NcclPair::connect(on, &id, 0, Instant::now(), &mut || false).unwrap_err();
        assert!(matches!(e, CudaError::NoNccl), "{e}");
    }

    #[test]
    fn a_third_rank_and_the_default_stream_are_refused_before_nccl_is_asked() {
        let id = NcclId::from_bytes([0; NCCL_ID_BYTES]);
        let on = RawStream { context: 0x1000, stream: 0x2000 };
        let e = NcclPair::connect(on, &id, 2, Instant::now(), &mut || false).unwrap_err();
        assert!(e.to_string().contains("rank 2 of a pair"), "{e}");
        let e = NcclPair::connect(RawStream { stream: 0, ..on }, &id, 0, Instant::now(), &mut || false).unwrap_err();
        assert!(e.to_string().contains("legacy default stream"), "{e}");
    }

    #[test]
    fn the_config_is_nccls_initializer_non_blocking() {
        let c = config();
        assert_eq!((c.magic, c.version, c.blocking), (0xcafe_beef, 23000, 0));
        assert_eq!(c.size, std::mem::size_of::<ncclConfig_t>());
        assert_eq!((c.minCTAs, c.CTAPolicy), (c_int::MIN, c_int::MIN));
    }

    #[test]
    fn an_id_round_trips_through_bytes_and_gives_nothing_away() {
        let bytes: [u8; NCCL_ID_BYTES] = std::array::from_fn(|i| i as u8);
        let id = NcclId::from_bytes(bytes);
        assert_eq!(id.to_bytes(), bytes);
        assert_eq!(id.raw().internal.map(|b| b as u8), bytes);
        assert_eq!(format!("{id:?}"), "NcclId(..)");
    }

    #[test]
    fn waits_give_up_at_the_deadline_or_when_told() {
        let e = give_up("x", Instant::now(), &mut || false).unwrap_err();
        assert!(e.to_string().contains("deadline"), "{e}");
        let e = give_up("x", Instant::now() + Duration::from_secs(60), &mut || true).unwrap_err();
        assert!(e.to_string().contains("the other end is gone"), "{e}");
        assert!(give_up("x", Instant::now() + Duration::from_secs(60), &mut || false).is_ok());
    }

    /// On a GPU with NCCL: a pair whose peer never comes gives up at its deadline, and one
    /// whose abort check says the peer is gone gives up at once; dropping either returns (the
    /// communicator is aborted, not waited for). Two ranks need two processes (or two
    /// `NCCL_HOSTID`s): the frames themselves are checked by the GPU check's section 11.
    #[test]
    fn gpu_a_pair_without_its_peer_gives_up_at_the_deadline_and_aborts() {
        let Some(gpu) = crate::testing::gpu_for_test() else { return };
        if !crate::testing::nccl_for_test() {
            return;
        }
        eprintln!("NCCL {:?}", nccl_version().unwrap());
        gpu.bind().unwrap();
        let on = gpu.raw_stream();
        let id = NcclId::new().unwrap();
        let started = Instant::now();
        let e = NcclPair::connect(on, &id, 0, Instant::now() + Duration::from_secs(2), &mut || false).unwrap_err();
        assert!(matches!(e, CudaError::Interrupted { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(60), "the deadline was not kept");
        let id = NcclId::new().unwrap();
        let e = NcclPair::connect(on, &id, 1, Instant::now() + Duration::from_secs(60), &mut || true).unwrap_err();
        assert!(e.to_string().contains("the other end is gone"), "{e}");
    }

    #[test]
    fn result_codes_are_named() {
        assert_eq!(result_name(6), "ncclRemoteError");
        assert_eq!(result_name(8), "ncclTimeout");
        assert_eq!(result_name(99), "an unknown ncclResult_t");
    }

    /// The functions in [`FUNCTIONS`] are the ones [`load`] looks up.
    #[test]
    fn every_function_looked_up_is_listed() {
        let source = include_str!("nccl.rs");
        let body = &source[source.find("fn load()").unwrap()..source.find("pub fn nccl_available").unwrap()];
        assert_eq!(body.matches("FUNCTIONS[").count(), FUNCTIONS.len());
    }
}
