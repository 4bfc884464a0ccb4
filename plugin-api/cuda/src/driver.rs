//! The driver itself: initialising it once, its version, the devices and what each supports,
//! and `check`, which turns a `CUresult` into a [`CudaError`] keeping the code and the
//! driver's name for it.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute, CUresult};

use crate::error::CudaError;
use crate::library;

/// `CUDA_SUCCESS` or the error, named by the driver, with the operation and device.
pub(crate) fn check(op: &'static str, device: Option<u32>, result: CUresult) -> Result<(), CudaError> {
    if result == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let (name, description) = describe(result);
    Err(CudaError::Driver { op, device, code: result as u32, name, description })
}

/// What `cuEventQuery` answered: the latest record has completed (also true if the event was
/// never recorded), not yet, or the error.
pub(crate) fn event_done(device: Option<u32>, result: CUresult) -> Result<bool, CudaError> {
    match result {
        CUresult::CUDA_SUCCESS => Ok(true),
        CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => check("cuEventQuery", device, other).map(|()| true),
    }
}

/// The driver's name and text for `result`. Only called once the library is loaded (a
/// `CUresult` other than success only comes from it).
fn describe(result: CUresult) -> (String, String) {
    let text = |get: unsafe fn(CUresult, *mut *const c_char) -> CUresult| {
        let mut ptr: *const c_char = std::ptr::null();
        // SAFETY: the library is loaded (we hold a result from it); the driver writes a
        // pointer to a static NUL-terminated string, or fails and leaves it null.
        let r = unsafe { get(result, &mut ptr) };
        if r != CUresult::CUDA_SUCCESS || ptr.is_null() {
            return None;
        }
        // SAFETY: non-null, static and NUL-terminated per the driver API.
        Some(unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
    };
    let name = text(sys::cuGetErrorName).unwrap_or_else(|| format!("{result:?}"));
    let description = text(sys::cuGetErrorString).unwrap_or_else(|| "unknown error".into());
    (name, description)
}

/// Load the library and `cuInit` it, once per process. Creates no context.
pub(crate) fn init() -> Result<(), CudaError> {
    library::driver()?;
    static INIT: OnceLock<Result<(), CudaError>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: the library is loaded with all our symbols; cuInit takes flags 0.
        check("cuInit", None, unsafe { sys::cuInit(0) })
    })
    .clone()
}

/// The CUDA version the installed driver supports, as (major, minor), e.g. (13, 0). Does not
/// initialise the driver.
pub fn driver_version() -> Result<(u32, u32), CudaError> {
    library::driver()?;
    let mut version: c_int = 0;
    // SAFETY: library loaded; writes one int. Allowed before cuInit.
    check("cuDriverGetVersion", None, unsafe { sys::cuDriverGetVersion(&mut version) })?;
    Ok(split_version(version as u32))
}

/// The CUDA version gpuipc's bindings were generated for (the `cuda-13000` feature of cudarc).
pub fn built_for_cuda() -> (u32, u32) {
    split_version(sys::CUDA_VERSION)
}

/// 13000 → (13, 0); 12080 → (12, 8).
fn split_version(v: u32) -> (u32, u32) {
    (v / 1000, (v % 1000) / 10)
}

/// One device and what gpuipc can use on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: u32,
    pub name: String,
    /// e.g. "0000:19:00.0"; empty if the driver would not say.
    pub pci_bus_id: String,
    pub compute_capability: (u32, u32),
    pub total_memory: u64,
    /// Virtual memory management with POSIX file-descriptor handles: the preferred transport.
    pub vmm_posix_fd: bool,
    /// Interprocess events (`cuIpcGetEventHandle`).
    pub ipc_events: bool,
    /// Legacy `cuIpcGetMemHandle` memory sharing (needs unified addressing).
    pub legacy_ipc: bool,
    pub compute_mode: ComputeMode,
}

/// Which processes may create a context on a device (set with `nvidia-smi -c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeMode {
    /// Any number of processes.
    Default,
    /// One process at a time (several stages on the device then need MPS).
    ExclusiveProcess,
    /// No process at all.
    Prohibited,
    Other(i32),
}

impl std::fmt::Display for ComputeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComputeMode::Default => f.write_str("default"),
            ComputeMode::ExclusiveProcess => f.write_str("exclusive-process"),
            ComputeMode::Prohibited => f.write_str("prohibited"),
            ComputeMode::Other(n) => write!(f, "unknown ({n})"),
        }
    }
}

impl ComputeMode {
    fn from_attribute(value: i32) -> ComputeMode {
        // CUcomputemode: 0 default, 2 prohibited, 3 exclusive process (1 was exclusive thread).
        match value {
            0 => ComputeMode::Default,
            2 => ComputeMode::Prohibited,
            3 => ComputeMode::ExclusiveProcess,
            n => ComputeMode::Other(n),
        }
    }
}

/// The devices the driver sees, in ordinal order. Initialises the driver; creates no context.
pub fn devices() -> Result<Vec<DeviceInfo>, CudaError> {
    init()?;
    (0..device_count()?).map(device_info).collect()
}

pub(crate) fn device_count() -> Result<u32, CudaError> {
    let mut count: c_int = 0;
    // SAFETY: initialised; writes one int.
    check("cuDeviceGetCount", None, unsafe { sys::cuDeviceGetCount(&mut count) })?;
    Ok(count.max(0) as u32)
}

/// The `CUdevice` of `ordinal`, checked against the device count for a clear error.
pub(crate) fn device(ordinal: u32) -> Result<CUdevice, CudaError> {
    init()?;
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::NoSuchDevice { ordinal, count });
    }
    let mut dev: CUdevice = 0;
    // SAFETY: initialised; ordinal < count; writes one CUdevice.
    check("cuDeviceGet", Some(ordinal), unsafe { sys::cuDeviceGet(&mut dev, ordinal as c_int) })?;
    Ok(dev)
}

/// One attribute of `dev`; `ordinal` only names the device in an error.
pub(crate) fn attribute(dev: CUdevice, ordinal: Option<u32>, attr: CUdevice_attribute) -> Result<i32, CudaError> {
    let mut value: c_int = 0;
    // SAFETY: initialised; `dev` came from the driver (cuDeviceGet or cuCtxGetDevice); writes
    // one int.
    check("cuDeviceGetAttribute", ordinal, unsafe { sys::cuDeviceGetAttribute(&mut value, attr, dev) })?;
    Ok(value)
}

/// (major, minor) compute capability of `dev`.
pub(crate) fn compute_capability(dev: CUdevice, ordinal: Option<u32>) -> Result<(u32, u32), CudaError> {
    use CUdevice_attribute::*;
    Ok((
        attribute(dev, ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as u32,
        attribute(dev, ordinal, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as u32,
    ))
}

/// What a device supports, from its attributes (shared by `devices` and `Gpu::open`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Support {
    pub compute_capability: (u32, u32),
    pub vmm_posix_fd: bool,
    pub ipc_events: bool,
    pub legacy_ipc: bool,
}

pub(crate) fn support(dev: CUdevice, ordinal: u32) -> Result<Support, CudaError> {
    use CUdevice_attribute::*;
    let flag = |a| attribute(dev, Some(ordinal), a).map(|v| v != 0);
    Ok(Support {
        compute_capability: compute_capability(dev, Some(ordinal))?,
        // Attribute 102, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED in cuda.h; a
        // Rust enum cannot hold two names for one value, and cudarc kept the older alias.
        vmm_posix_fd: flag(CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED)?
            && flag(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED)?,
        ipc_events: flag(CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED)?,
        // cuIpcGetMemHandle: "restricted to devices with support for unified addressing on
        // Linux" (driver API docs). The self-test in `doctor` is the real proof.
        legacy_ipc: flag(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
    })
}

fn device_info(ordinal: u32) -> Result<DeviceInfo, CudaError> {
    let dev = device(ordinal)?;
    let mut name = [0 as c_char; 256];
    // SAFETY: writes at most `len` bytes, NUL-terminated, into our buffer.
    check("cuDeviceGetName", Some(ordinal), unsafe {
        sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev)
    })?;
    let mut bus = [0 as c_char; 32];
    // SAFETY: as above; the driver documents 13 bytes as enough.
    let bus_ok =
        unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as c_int, dev) } == CUresult::CUDA_SUCCESS;
    let mut total: usize = 0;
    // SAFETY: writes one size_t.
    check("cuDeviceTotalMem", Some(ordinal), unsafe { sys::cuDeviceTotalMem_v2(&mut total, dev) })?;
    let s = support(dev, ordinal)?;
    let mode = attribute(dev, Some(ordinal), CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_MODE)?;
    Ok(DeviceInfo {
        ordinal,
        name: c_string(&name),
        pci_bus_id: if bus_ok { c_string(&bus) } else { String::new() },
        compute_capability: s.compute_capability,
        total_memory: total as u64,
        vmm_posix_fd: s.vmm_posix_fd,
        ipc_events: s.ipc_events,
        legacy_ipc: s.legacy_ipc,
        compute_mode: ComputeMode::from_attribute(mode),
    })
}

/// A NUL-terminated C string in a fixed buffer (the whole buffer if it has no NUL).
fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// How many CUDA devices the driver sees. Initialises the driver; creates no context.
pub fn count_devices() -> Result<u32, CudaError> {
    init()?;
    device_count()
}

/// Whether device `ordinal` supports VMM allocations shareable as POSIX file descriptors, the
/// preferred GPU link transport. Creates no context.
pub fn vmm_fd_supported(ordinal: u32) -> Result<bool, CudaError> {
    Ok(support(device(ordinal)?, ordinal)?.vmm_posix_fd)
}

/// Whether device `a` can access memory on device `b` directly (peer access). Creates no
/// context.
pub fn can_access_peer(a: u32, b: u32) -> Result<bool, CudaError> {
    let (da, db) = (device(a)?, device(b)?);
    let mut can: c_int = 0;
    // SAFETY: initialised; both devices came from cuDeviceGet; writes one int.
    check("cuDeviceCanAccessPeer", Some(a), unsafe { sys::cuDeviceCanAccessPeer(&mut can, da, db) })?;
    Ok(can != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_split() {
        assert_eq!(split_version(13000), (13, 0));
        assert_eq!(split_version(12080), (12, 8));
        assert_eq!(split_version(11040), (11, 4));
    }

    #[test]
    fn compute_modes_follow_cuda_h() {
        assert_eq!(ComputeMode::from_attribute(0), ComputeMode::Default);
        assert_eq!(ComputeMode::from_attribute(3), ComputeMode::ExclusiveProcess);
        assert_eq!(ComputeMode::from_attribute(2).to_string(), "prohibited");
        assert_eq!(ComputeMode::from_attribute(1), ComputeMode::Other(1));
    }

    #[test]
    fn c_strings_stop_at_nul() {
        let buf: Vec<c_char> = b"H100\0junk".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_string(&buf), "H100");
        let full: Vec<c_char> = b"abc".iter().map(|&b| b as c_char).collect();
        assert_eq!(c_string(&full), "abc");
    }
}
