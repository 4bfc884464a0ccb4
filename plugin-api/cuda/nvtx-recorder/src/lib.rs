//! A tool for NVTX, loaded the way Nsight Systems is: a process whose environment has
//! `NVTX_INJECTION64_PATH=.../libnvtx_recorder.so` and makes its first NVTX call has
//! NVTX open this library and call [`InitializeInjectionNvtx2`], which puts the recorder's
//! functions in NVTX's table of core functions. From then on every `nvtxRangePushA`,
//! `nvtxRangePop` and `nvtxNameOsThreadA` of the process lands here and is written, one line
//! each, to `$GPUIPC_NVTX_RECORD/nvtx-<pid>.txt`:
//!
//! ```text
//! thread <tid> <name>
//! push <tid> <name>
//! pop <tid>
//! ```
//!
//! Each line is one `write` to a file opened for appending, so the lines of a process that is
//! killed are all there, and threads' lines never interleave. It is slow (a system call a
//! range): a tool for tests and checks (plugin-api/cuda's nvtx tests, `scripts/gpu-check.sh`),
//! not for measuring. Without `GPUIPC_NVTX_RECORD` it declines to attach.
//!
//! The protocol is NVTX 3's (nvtxDetail/nvtxTypes.h, Apache-2.0 WITH LLVM-exception): the
//! numbers below are the ids of its export table, module and callbacks, fixed by NVTX's ABI.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::fs::File;
use std::io::Write;
use std::sync::OnceLock;

/// `NVTX_ETID_CALLBACKS`: the export table that hands out the function tables.
const EXPORT_TABLE_CALLBACKS: u32 = 1;
/// `NVTX_CB_MODULE_CORE`: the module of `nvtxRangePushA` and friends.
const MODULE_CORE: c_int = 1;
/// `NVTX_CBID_CORE_RangePushA`, `..._RangePop`, `..._NameOsThreadA`: slots in that module.
const CORE_RANGE_PUSH_A: usize = 9;
const CORE_RANGE_POP: usize = 11;
const CORE_NAME_OS_THREAD_A: usize = 14;

type FunctionPointer = unsafe extern "C" fn();
/// `NvtxFunctionTable`: an array of pointers to NVTX's function-pointer slots.
type FunctionTable = *mut *mut Option<FunctionPointer>;
type GetExportTable = unsafe extern "C" fn(u32) -> *const c_void;

/// `NvtxExportTableCallbacks`.
#[repr(C)]
struct ExportTableCallbacks {
    struct_size: usize,
    get_module_function_table: unsafe extern "C" fn(c_int, *mut FunctionTable, *mut c_uint) -> c_int,
}

static RECORD: OnceLock<File> = OnceLock::new();

fn record(line: String) {
    if let Some(mut file) = RECORD.get() {
        // A failed write loses a line of a test's record; nothing else is to be done here.
        let _ = file.write_all(line.as_bytes());
    }
}

fn tid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// # Safety
/// `message` is NULL or a NUL-terminated string (NVTX's contract for its callers).
unsafe fn text(message: *const c_char) -> String {
    if message.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated, by the caller's contract.
    unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
}

unsafe extern "C" fn range_push_a(message: *const c_char) -> c_int {
    // SAFETY: NVTX passes its caller's message through unchanged.
    record(format!("push {} {}\n", tid(), unsafe { text(message) }));
    0
}

unsafe extern "C" fn range_pop() -> c_int {
    record(format!("pop {}\n", tid()));
    0
}

unsafe extern "C" fn name_os_thread_a(thread: u32, name: *const c_char) {
    // SAFETY: as in `range_push_a`.
    record(format!("thread {thread} {}\n", unsafe { text(name) }));
}

/// Called by NVTX when it loads this library; returns 1 to attach, 0 to decline.
///
/// # Safety
/// Called by NVTX only, with its own `get_export_table`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn InitializeInjectionNvtx2(get_export_table: Option<GetExportTable>) -> c_int {
    let Some(dir) = std::env::var_os("GPUIPC_NVTX_RECORD") else { return 0 };
    let path = std::path::Path::new(&dir).join(format!("nvtx-{}.txt", std::process::id()));
    let Ok(file) = File::options().create(true).append(true).open(&path) else { return 0 };
    let _ = RECORD.set(file);
    let Some(get_export_table) = get_export_table else { return 0 };
    // SAFETY: NVTX's function, asked for the table its ABI gives this id.
    let callbacks = unsafe { get_export_table(EXPORT_TABLE_CALLBACKS) }.cast::<ExportTableCallbacks>();
    if callbacks.is_null() {
        return 0;
    }
    // SAFETY: NVTX returned a valid table for this id, which lives as long as NVTX does.
    let callbacks = unsafe { &*callbacks };
    if callbacks.struct_size < std::mem::size_of::<ExportTableCallbacks>() {
        return 0;
    }
    let mut table: FunctionTable = std::ptr::null_mut();
    let mut size: c_uint = 0;
    // SAFETY: NVTX's function, with out-pointers to locals.
    if unsafe { (callbacks.get_module_function_table)(MODULE_CORE, &mut table, &mut size) } == 0 || table.is_null() {
        return 0;
    }
    // Each function goes into the slot of its own C type (nvtxTypes.h).
    let push: FunctionPointer =
        // SAFETY: NVTX casts the slot back to the function's own type before calling it.
        unsafe { std::mem::transmute::<unsafe extern "C" fn(*const c_char) -> c_int, FunctionPointer>(range_push_a) };
    let pop: FunctionPointer =
        // SAFETY: as for `push`.
        unsafe { std::mem::transmute::<unsafe extern "C" fn() -> c_int, FunctionPointer>(range_pop) };
    let name: FunctionPointer =
        // SAFETY: as for `push`.
        unsafe { std::mem::transmute::<unsafe extern "C" fn(u32, *const c_char), FunctionPointer>(name_os_thread_a) };
    let ours = [(CORE_RANGE_PUSH_A, push), (CORE_RANGE_POP, pop), (CORE_NAME_OS_THREAD_A, name)];
    for (slot, function) in ours {
        if slot >= size as usize {
            return 0;
        }
        // SAFETY: `table` has `size` entries (NVTX says so), each a pointer to one of NVTX's
        // function-pointer slots, written here before NVTX calls through any of them.
        unsafe {
            let entry = *table.add(slot);
            if !entry.is_null() {
                *entry = Some(function);
            }
        }
    }
    1
}
