//! [`PinnedHost`]: host memory registered with the driver as pinned, for fast asynchronous
//! copies between a host ring's slots and the GPU.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Gpu;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;
use crate::memory::nonzero;

/// A range of host memory (typically a memfd mapping: a host ring's slots) registered with
/// the driver as pinned (`CU_MEMHOSTREGISTER_PORTABLE`: pinned for every context), so copies
/// to and from it are DMA and truly asynchronous. Unregistered on drop.
///
/// This does not own the memory: whoever mapped it keeps it mapped for as long as this lives
/// (registering touches no bytes; the bounds-checked copies below rely on it).
#[derive(Debug)]
pub struct PinnedHost {
    gpu: Arc<Gpu>,
    ptr: *mut u8,
    len: usize,
    access: Access,
}

/// How a range was registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Pinned for copies both ways.
    ReadWrite,
    /// Pinned, and the GPU only reads it (`CU_MEMHOSTREGISTER_READ_ONLY`): the range may be
    /// mapped read-only, as a consumer maps a ring's slots.
    ReadOnly,
    /// Not registered: the device cannot pin read-only memory, so uploads copy from pageable
    /// memory (the driver stages them; slower, still correct).
    Pageable,
}

// SAFETY: an address range and the Gpu; copies are enqueued through the thread-safe driver.
unsafe impl Send for PinnedHost {}
// SAFETY: as above.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    /// Register `len` bytes at `ptr`. The driver refuses a range that is not mapped, or
    /// already registered.
    ///
    /// # Safety
    /// `ptr..ptr+len` is host memory that stays mapped while the result lives, and no Rust
    /// reference to it is used while a copy enqueued through the result may still be running
    /// (wait for the stream or an event recorded after the copy first).
    pub unsafe fn register(gpu: &Arc<Gpu>, ptr: *mut u8, len: usize) -> Result<PinnedHost, CudaError> {
        const OP: &str = "cuMemHostRegister";
        nonzero(OP, len)?;
        if ptr.is_null() {
            return Err(CudaError::Invalid { op: OP, reason: "null host pointer".into() });
        }
        gpu.bind()?;
        // SAFETY: the driver page-locks the range (validating that it is mapped) and reads or
        // writes none of it.
        check(OP, Some(gpu.ordinal()), unsafe {
            sys::cuMemHostRegister_v2(ptr as *mut c_void, len, sys::CU_MEMHOSTREGISTER_PORTABLE)
        })?;
        Ok(PinnedHost { gpu: gpu.clone(), ptr, len, access: Access::ReadWrite })
    }

    /// Register `len` bytes at `ptr` for uploads only: the range may be mapped read-only. Where
    /// the device cannot pin read-only memory, nothing is registered and uploads copy from
    /// pageable memory; [`download`](Self::download) is refused either way.
    ///
    /// # Safety
    /// As [`register`](Self::register).
    pub unsafe fn register_for_upload(gpu: &Arc<Gpu>, ptr: *const u8, len: usize) -> Result<PinnedHost, CudaError> {
        const OP: &str = "cuMemHostRegister";
        nonzero(OP, len)?;
        if ptr.is_null() {
            return Err(CudaError::Invalid { op: OP, reason: "null host pointer".into() });
        }
        let ptr = ptr as *mut u8;
        if !gpu.pins_read_only_memory()? {
            return Ok(PinnedHost { gpu: gpu.clone(), ptr, len, access: Access::Pageable });
        }
        gpu.bind()?;
        let flags = sys::CU_MEMHOSTREGISTER_PORTABLE | sys::CU_MEMHOSTREGISTER_READ_ONLY;
        // SAFETY: as in `register`; with READ_ONLY the driver pins the pages for reading only,
        // which a read-only mapping allows.
        check(OP, Some(gpu.ordinal()), unsafe { sys::cuMemHostRegister_v2(ptr as *mut c_void, len, flags) })?;
        Ok(PinnedHost { gpu: gpu.clone(), ptr, len, access: Access::ReadOnly })
    }

    /// Whether copies from this range run as DMA, truly asynchronous (not pageable).
    pub fn is_pinned(&self) -> bool {
        self.access != Access::Pageable
    }

    fn range(&self, op: &'static str, offset: usize, bytes: usize) -> Result<*mut u8, CudaError> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.len => Ok(self.ptr.wrapping_add(offset)),
            _ => Err(CudaError::Invalid {
                op,
                reason: format!("{bytes} bytes at offset {offset} exceed the {} registered", self.len),
            }),
        }
    }

    /// Enqueue, on the Gpu's stream, a copy of `bytes` bytes at `offset` in this range to
    /// device address `dst`. The host bytes must stay unchanged until the copy has run.
    pub fn upload(&self, dst: u64, offset: usize, bytes: usize) -> Result<(), CudaError> {
        let src = self.range("upload", offset, bytes)?;
        // SAFETY: inside the registered range, which stays mapped and unreferenced while
        // copies may run (the contract of `register`).
        unsafe { self.gpu.copy_htod_async(dst, src, bytes) }
    }

    /// Enqueue, on the Gpu's stream, a copy of `bytes` bytes from device address `src` to
    /// `offset` in this range. Read the bytes only after the copy has run.
    pub fn download(&self, offset: usize, src: u64, bytes: usize) -> Result<(), CudaError> {
        if self.access != Access::ReadWrite {
            return Err(CudaError::Invalid {
                op: "download",
                reason: "the range was registered for uploads only".into(),
            });
        }
        let dst = self.range("download", offset, bytes)?;
        // SAFETY: as for `upload`: the contract of `register`.
        unsafe { self.gpu.copy_dtoh_async(dst, src, bytes) }
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        if self.access == Access::Pageable {
            return;
        }
        if let Err(e) = self.gpu.bind() {
            log::release_failed(Some("unregistering pinned host memory"), &e);
        }
        // SAFETY: the base address we registered. Copies still queued from or to it must be
        // waited for by the owner before the mapping itself goes; unregistering is safe.
        let r = unsafe { sys::cuMemHostUnregister(self.ptr as *mut c_void) };
        if let Err(e) = check("cuMemHostUnregister", Some(self.gpu.ordinal()), r) {
            log::release_failed(None, &e);
        }
    }
}
