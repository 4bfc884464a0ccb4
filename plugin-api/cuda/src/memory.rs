//! [`DeviceMemory`]: device memory for frame slots, shared between processes or private.
//!
//! Sharing, preferred first (DESIGN.md, "Links"):
//! - VMM: `cuMemCreate` with POSIX file-descriptor handles. Only a process handed the fd (over
//!   the Unix socket, SCM_RIGHTS) can map the memory.
//! - legacy IPC: `cuMemAlloc` + `cuIpcGetMemHandle`; any process of the user that learns the 64
//!   handle bytes can open it. Used where the device lacks VMM fd support.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr, CUmemGenericAllocationHandle};

use crate::context::Gpu;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;
use crate::target::DeviceBuffer;

/// How a [`DeviceMemory`] was made, which decides how it is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryKind {
    /// `cuMemCreate` here, exported as a POSIX fd.
    VmmExported,
    /// Imported from another process's POSIX fd.
    VmmImported,
    /// `cuMemAlloc` here, exported as a legacy IPC handle.
    LegacyExported,
    /// Opened from another process's legacy IPC handle.
    LegacyImported,
    /// `cuMemAlloc`, not shared.
    Private,
}

/// One device allocation, usable as a frame slot: `len()` bytes at device address `addr()`.
///
/// Holds an `Arc<Gpu>`, so the context is alive (and made current) for the release in `Drop`
/// whatever order the owner drops things in. What other processes imported stays theirs: a
/// VMM importer holds its own handle, so the memory lives until the last process releases it.
/// A legacy export is different: the driver leaves freeing it while another process still has
/// it open undefined, so a legacy exporter must outlive its importers' use.
#[derive(Debug)]
pub struct DeviceMemory {
    gpu: Arc<Gpu>,
    addr: CUdeviceptr,
    len: usize,
    kind: MemoryKind,
    release: Release,
}

/// What `Drop` undoes.
#[derive(Debug, Clone, Copy)]
enum Release {
    /// `cuMemFree`.
    Free,
    /// `cuIpcCloseMemHandle`.
    IpcClose,
    /// Unmap and free the `size` bytes of address space, release the allocation handle.
    Vmm { handle: CUmemGenericAllocationHandle, size: usize },
}

// SAFETY: plain numbers naming driver objects; every use binds the context first (through
// the Gpu), and the driver API is thread-safe.
unsafe impl Send for DeviceMemory {}
// SAFETY: as above; `&DeviceMemory` only reads the numbers.
unsafe impl Sync for DeviceMemory {}

impl DeviceMemory {
    /// Device address (a `CUdeviceptr`).
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Usable bytes (as asked for; a VMM mapping is rounded up to the granularity behind it).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true for memory made here (zero bytes are refused); an imported legacy range the
    /// driver reports as empty would be.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn kind(&self) -> MemoryKind {
        self.kind
    }

    /// The whole allocation as a [`DeviceBuffer`], as a frame in it is handed to a plugin.
    pub fn buffer(&self) -> DeviceBuffer {
        DeviceBuffer { addr: self.addr, len: self.len as u64 }
    }

    /// A private allocation (`cuMemAlloc`), e.g. a staging buffer or an unread output.
    pub fn private(gpu: &Arc<Gpu>, bytes: usize) -> Result<DeviceMemory, CudaError> {
        let addr = mem_alloc(gpu, bytes)?;
        Ok(DeviceMemory { gpu: gpu.clone(), addr, len: bytes, kind: MemoryKind::Private, release: Release::Free })
    }

    /// A VMM allocation of at least `bytes` on `gpu`'s device, mapped read/write for it, and a
    /// POSIX fd (close-on-exec) another process passes to [`DeviceMemory::import_vmm`].
    pub fn vmm(gpu: &Arc<Gpu>, bytes: usize) -> Result<(DeviceMemory, OwnedFd), CudaError> {
        DeviceMemory::vmm_at(gpu, gpu.ordinal(), bytes)
    }

    /// As [`DeviceMemory::vmm`], the memory on device `home` (another GPU `gpu`'s device
    /// reaches by peer access, or its own), mapped read/write for `gpu`'s device: a producer
    /// writing a ring that lives on its consumer's GPU.
    pub fn vmm_at(gpu: &Arc<Gpu>, home: u32, bytes: usize) -> Result<(DeviceMemory, OwnedFd), CudaError> {
        const OP: &str = "VMM allocation";
        nonzero(OP, bytes)?;
        if !gpu.supports_vmm_fd() {
            return Err(CudaError::Invalid {
                op: OP,
                reason: format!("cuda:{} does not support VMM with POSIX file descriptors", gpu.ordinal()),
            });
        }
        gpu.bind()?;
        let mut prop = allocation_prop(gpu);
        prop.location.id = home as i32;
        let size = round_up(bytes, granularity(gpu, &prop)?);
        let mut build = VmmBuild::new(gpu);
        let mut handle: CUmemGenericAllocationHandle = 0;
        // SAFETY: `prop` describes pinned device memory on `home` with POSIX fd handles;
        // size is a multiple of the minimum granularity; writes one handle.
        check("cuMemCreate", Some(gpu.ordinal()), unsafe { sys::cuMemCreate(&mut handle, size, &prop, 0) })?;
        build.handle = Some(handle);
        let mut raw_fd: std::ffi::c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver writes an int fd to
        // the location given; `handle` is live.
        check("cuMemExportToShareableHandle", Some(gpu.ordinal()), unsafe {
            sys::cuMemExportToShareableHandle(
                &mut raw_fd as *mut std::ffi::c_int as *mut c_void,
                handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        })?;
        if raw_fd < 0 {
            return Err(CudaError::Invalid {
                op: "cuMemExportToShareableHandle",
                reason: format!("returned fd {raw_fd}"),
            });
        }
        // SAFETY: the driver just created this descriptor for us; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw_fd) };
        // The driver does not promise O_CLOEXEC; a stage must not leak frame memory into
        // whatever it might exec.
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| CudaError::Os { op: "setting close-on-exec on an exported VMM fd", reason: e.to_string() })?;
        let addr = build.map(size)?;
        let (handle, size) = build.finish();
        Ok((
            DeviceMemory {
                gpu: gpu.clone(),
                addr,
                len: bytes,
                kind: MemoryKind::VmmExported,
                release: Release::Vmm { handle, size },
            },
            fd,
        ))
    }

    /// Map memory another process exported with [`DeviceMemory::vmm`] (`bytes` as it asked
    /// for), read/write for `gpu`'s device. The memory may live on another device, which
    /// `gpu`'s device must then reach by peer access (the plan checks that). The fd is closed
    /// once imported: the imported handle keeps the memory alive by itself.
    pub fn import_vmm(gpu: &Arc<Gpu>, fd: OwnedFd, bytes: usize) -> Result<DeviceMemory, CudaError> {
        nonzero("VMM import", bytes)?;
        gpu.bind()?;
        let mut build = VmmBuild::new(gpu);
        let mut handle: CUmemGenericAllocationHandle = 0;
        // The driver takes a POSIX fd as the pointer-sized value of the int itself.
        let os_handle = fd.as_raw_fd() as isize as *mut c_void;
        // SAFETY: `fd` is open (we own it) for the duration of the call; writes one handle.
        check("cuMemImportFromShareableHandle", Some(gpu.ordinal()), unsafe {
            sys::cuMemImportFromShareableHandle(
                &mut handle,
                os_handle,
                sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        })?;
        drop(fd);
        build.handle = Some(handle);
        // The mapping must cover the allocation's whole size, which follows the granularity
        // of the device it lives on: ask the handle, not our own device.
        let mut prop = allocation_prop(gpu);
        // SAFETY: `handle` is live; writes one property struct.
        check("cuMemGetAllocationPropertiesFromHandle", Some(gpu.ordinal()), unsafe {
            sys::cuMemGetAllocationPropertiesFromHandle(&mut prop, handle)
        })?;
        let size = round_up(bytes, granularity(gpu, &prop)?);
        let addr = build.map(size)?;
        let (handle, size) = build.finish();
        Ok(DeviceMemory {
            gpu: gpu.clone(),
            addr,
            len: bytes,
            kind: MemoryKind::VmmImported,
            release: Release::Vmm { handle, size },
        })
    }

    /// A `cuMemAlloc` allocation and its legacy IPC handle, for devices without VMM fd support.
    /// Another process opens it with [`DeviceMemory::import_legacy`]; this allocation must stay
    /// alive while they use it (the driver leaves freeing it earlier undefined).
    pub fn legacy(gpu: &Arc<Gpu>, bytes: usize) -> Result<(DeviceMemory, [u8; 64]), CudaError> {
        let addr = mem_alloc(gpu, bytes)?;
        let memory = DeviceMemory {
            gpu: gpu.clone(),
            addr,
            len: bytes,
            kind: MemoryKind::LegacyExported,
            release: Release::Free,
        };
        let mut handle = sys::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: `addr` is the base of a live cuMemAlloc allocation; writes one handle. On
        // error `memory` is dropped, which frees the allocation.
        check("cuIpcGetMemHandle", Some(gpu.ordinal()), unsafe { sys::cuIpcGetMemHandle(&mut handle, addr) })?;
        Ok((memory, handle_bytes(&handle.reserved)))
    }

    /// Open memory another process exported with [`DeviceMemory::legacy`]. Peer access to
    /// another device is enabled lazily if needed (`CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`).
    /// A handle cannot be opened in the process that made it (the driver refuses).
    pub fn import_legacy(gpu: &Arc<Gpu>, handle: [u8; 64]) -> Result<DeviceMemory, CudaError> {
        gpu.bind()?;
        let raw = sys::CUipcMemHandle { reserved: handle_chars(&handle) };
        let mut addr: CUdeviceptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: the context is current; writes one device pointer.
        check("cuIpcOpenMemHandle", Some(gpu.ordinal()), unsafe { sys::cuIpcOpenMemHandle_v2(&mut addr, raw, flags) })?;
        // Closes the mapping if the size query below fails.
        let mut memory = DeviceMemory {
            gpu: gpu.clone(),
            addr,
            len: 0,
            kind: MemoryKind::LegacyImported,
            release: Release::IpcClose,
        };
        let (mut base, mut size): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: `addr` is a live mapping in the current context; writes two values.
        check("cuMemGetAddressRange", Some(gpu.ordinal()), unsafe {
            sys::cuMemGetAddressRange_v2(&mut base, &mut size, addr)
        })?;
        memory.len = size - (addr - base) as usize;
        Ok(memory)
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let ordinal = Some(self.gpu.ordinal());
        if let Err(e) = self.gpu.bind() {
            log::release_failed(Some("releasing device memory"), &e);
        }
        let result = match self.release {
            Release::Vmm { handle, size } => {
                unmap_and_release(&self.gpu, self.addr, size, Some(handle), true);
                return;
            }
            // SAFETY: a live cuMemAlloc allocation of ours; nothing uses it after this.
            Release::Free => check("cuMemFree", ordinal, unsafe { sys::cuMemFree_v2(self.addr) }),
            // SAFETY: a live mapping from cuIpcOpenMemHandle; nothing uses it after this.
            Release::IpcClose => check("cuIpcCloseMemHandle", ordinal, unsafe { sys::cuIpcCloseMemHandle(self.addr) }),
        };
        if let Err(e) = result {
            log::release_failed(None, &e);
        }
    }
}

/// Undo a (possibly partial) VMM mapping: unmap if `mapped`, free the address range if
/// `addr` is set, release the handle if given. Errors are logged: this runs in `Drop`.
fn unmap_and_release(
    gpu: &Gpu,
    addr: CUdeviceptr,
    size: usize,
    handle: Option<CUmemGenericAllocationHandle>,
    mapped: bool,
) {
    let ordinal = Some(gpu.ordinal());
    if mapped {
        // SAFETY: [addr, addr+size) was mapped by cuMemMap and nothing uses it after this.
        if let Err(e) = check("cuMemUnmap", ordinal, unsafe { sys::cuMemUnmap(addr, size) }) {
            log::release_failed(None, &e);
        }
    }
    if addr != 0 {
        // SAFETY: the same range cuMemAddressReserve returned, now unmapped.
        if let Err(e) = check("cuMemAddressFree", ordinal, unsafe { sys::cuMemAddressFree(addr, size) }) {
            log::release_failed(None, &e);
        }
    }
    if let Some(handle) = handle {
        // SAFETY: our handle from cuMemCreate/cuMemImportFromShareableHandle, no longer
        // mapped here; the memory itself lives on while other processes hold theirs.
        if let Err(e) = check("cuMemRelease", ordinal, unsafe { sys::cuMemRelease(handle) }) {
            log::release_failed(None, &e);
        }
    }
}

/// The steps of a VMM mapping so far; dropping it undoes them (so every `?` cleans up).
struct VmmBuild<'a> {
    gpu: &'a Gpu,
    handle: Option<CUmemGenericAllocationHandle>,
    addr: CUdeviceptr,
    size: usize,
    mapped: bool,
}

impl<'a> VmmBuild<'a> {
    fn new(gpu: &'a Gpu) -> Self {
        VmmBuild { gpu, handle: None, addr: 0, size: 0, mapped: false }
    }

    /// Reserve `size` bytes of address space, map the handle there and allow our device to
    /// read and write it.
    fn map(&mut self, size: usize) -> Result<CUdeviceptr, CudaError> {
        let ordinal = self.gpu.ordinal();
        let handle = self.handle.expect("map after create or import");
        let mut addr: CUdeviceptr = 0;
        // SAFETY: size is a multiple of the granularity; default alignment, no fixed address,
        // flags 0; writes one address.
        check("cuMemAddressReserve", Some(ordinal), unsafe { sys::cuMemAddressReserve(&mut addr, size, 0, 0, 0) })?;
        (self.addr, self.size) = (addr, size);
        // SAFETY: maps the whole allocation (offset 0, size <= its size) onto the range just
        // reserved, which nothing else maps.
        check("cuMemMap", Some(ordinal), unsafe { sys::cuMemMap(addr, size, 0, handle, 0) })?;
        self.mapped = true;
        let access = sys::CUmemAccessDesc {
            location: device_location(self.gpu),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the mapped range and one access descriptor for our device.
        check("cuMemSetAccess", Some(ordinal), unsafe { sys::cuMemSetAccess(addr, size, &access, 1) })?;
        Ok(addr)
    }

    /// The handle and mapped size, now owned by a `DeviceMemory`.
    fn finish(mut self) -> (CUmemGenericAllocationHandle, usize) {
        let handle = self.handle.take().expect("finished after mapping");
        self.mapped = false;
        self.addr = 0;
        (handle, self.size)
    }
}

impl Drop for VmmBuild<'_> {
    fn drop(&mut self) {
        if self.handle.is_some() || self.addr != 0 {
            unmap_and_release(self.gpu, self.addr, self.size, self.handle, self.mapped);
        }
    }
}

fn device_location(gpu: &Gpu) -> sys::CUmemLocation {
    sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: gpu.ordinal() as i32 }
}

/// Pinned device memory on our device, shareable as a POSIX fd.
fn allocation_prop(gpu: &Gpu) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        requestedHandleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: device_location(gpu),
        win32HandleMetaData: std::ptr::null_mut(),
        allocFlags: sys::CUmemAllocationProp_st__bindgen_ty_1 {
            compressionType: 0,
            gpuDirectRDMACapable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// The minimum granularity for `prop` (2 MiB on current GPUs).
fn granularity(gpu: &Gpu, prop: &sys::CUmemAllocationProp) -> Result<usize, CudaError> {
    let mut g: usize = 0;
    // SAFETY: a fully initialised property struct; writes one size_t.
    check("cuMemGetAllocationGranularity", Some(gpu.ordinal()), unsafe {
        sys::cuMemGetAllocationGranularity(
            &mut g,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        )
    })?;
    if g == 0 {
        return Err(CudaError::Invalid { op: "cuMemGetAllocationGranularity", reason: "granularity 0".into() });
    }
    Ok(g)
}

fn mem_alloc(gpu: &Gpu, bytes: usize) -> Result<CUdeviceptr, CudaError> {
    nonzero("cuMemAlloc", bytes)?;
    gpu.bind()?;
    let mut addr: CUdeviceptr = 0;
    // SAFETY: the context is current; writes one device pointer.
    check("cuMemAlloc", Some(gpu.ordinal()), unsafe { sys::cuMemAlloc_v2(&mut addr, bytes) })?;
    Ok(addr)
}

pub(crate) fn nonzero(op: &'static str, bytes: usize) -> Result<(), CudaError> {
    if bytes == 0 { Err(CudaError::Invalid { op, reason: "zero bytes".into() }) } else { Ok(()) }
}

fn round_up(bytes: usize, granularity: usize) -> usize {
    bytes.div_ceil(granularity) * granularity
}

/// The driver's 64 `c_char`s (signed on x86-64, unsigned on aarch64) as bytes, and back.
pub(crate) fn handle_bytes(raw: &[std::ffi::c_char; 64]) -> [u8; 64] {
    raw.map(|c| c as u8)
}

pub(crate) fn handle_chars(bytes: &[u8; 64]) -> [std::ffi::c_char; 64] {
    bytes.map(|b| b as std::ffi::c_char)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_the_granularity() {
        const G: usize = 2 << 20;
        assert_eq!(round_up(1, G), G);
        assert_eq!(round_up(G, G), G);
        assert_eq!(round_up(G + 1, G), 2 * G);
        assert_eq!(round_up(3840 * 2160 * 3, G), 12 * G);
    }

    #[test]
    fn handles_round_trip_through_c_chars() {
        let bytes: [u8; 64] = std::array::from_fn(|i| (i * 37 + 200) as u8);
        assert_eq!(handle_bytes(&handle_chars(&bytes)), bytes);
        let all: [u8; 64] = std::array::from_fn(|i| if i % 2 == 0 { 0xff } else { 0x80 });
        assert_eq!(handle_bytes(&handle_chars(&all)), all);
    }
}
