//! Small read-only device buffers a stage uploads once at create (lookup tables).
#![allow(unsafe_code)]

use std::ffi::c_void;

use cudarc::driver::sys::{self, CUresult};

use super::driver;
use super::kernel::KernelArg;
use crate::error::{Error, Result};
use crate::plugin::{CreateContext, Domain};

/// Device memory holding a copy of some bytes, freed on drop.
#[derive(Debug)]
pub struct DeviceTable {
    addr: u64,
    len: usize,
}

impl DeviceTable {
    /// Allocate `bytes.len()` bytes in the stage's context (current on this thread) and copy
    /// `bytes` there on `stream` (the stage's stream, `ctx.cuda_stream`), waiting until the
    /// copy is done. For `create`: it blocks the thread.
    pub fn upload(ctx: &CreateContext<'_>, stream: usize, bytes: &[u8]) -> Result<DeviceTable> {
        DeviceTable::upload_inner(ctx, stream, bytes).map_err(|e| {
            e.context(format!(
                "uploading a {}-byte table for stage `{}`",
                bytes.len(),
                ctx.stage
            ))
        })
    }

    fn upload_inner(ctx: &CreateContext<'_>, stream: usize, bytes: &[u8]) -> Result<DeviceTable> {
        if ctx.domain != Domain::Cuda || ctx.cuda_context == 0 {
            return Err(Error::new(format!(
                "the stage runs in the {} domain",
                ctx.domain.name()
            )));
        }
        if stream != ctx.cuda_stream {
            return Err(Error::new(format!(
                "stream {stream:#x} is not the stage's stream {:#x}",
                ctx.cuda_stream
            )));
        }
        if bytes.is_empty() {
            return Err(Error::new("a device table cannot be empty"));
        }
        driver::ensure_loaded()?;
        let current = driver::current_context()?;
        if current != ctx.cuda_context {
            return Err(Error::new(format!(
                "the stage's CUDA context {:#x} is not current on this thread (current: {current:#x})",
                ctx.cuda_context
            )));
        }
        let mut addr: sys::CUdeviceptr = 0;
        // SAFETY: writes the new allocation's address into `addr`.
        driver::check("cuMemAlloc", unsafe {
            sys::cuMemAlloc_v2(&mut addr, bytes.len())
        })?;
        // From here on, dropping `table` frees the allocation, whatever fails next.
        let table = DeviceTable {
            addr,
            len: bytes.len(),
        };
        // SAFETY: `addr` has `bytes.len()` bytes of device memory we own; `bytes` is readable
        // for that length and outlives the copy, which is waited for below before returning.
        // `stream` is the runner's stream of the current context (checked equal above).
        let copied = unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                addr,
                bytes.as_ptr().cast::<c_void>(),
                bytes.len(),
                stream as sys::CUstream,
            )
        };
        driver::check("cuMemcpyHtoDAsync", copied)?;
        // SAFETY: a valid stream handle (as above); only waits.
        let synced = unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) };
        driver::check("cuStreamSynchronize", synced)?;
        Ok(table)
    }

    /// The table's device address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The table as a kernel's pointer argument.
    pub fn arg(&self) -> KernelArg {
        KernelArg::DevicePtr(self.addr)
    }
}

impl Drop for DeviceTable {
    fn drop(&mut self) {
        // SAFETY: `addr` came from cuMemAlloc and is freed once, here. The runner synchronises
        // its stream before destroying the plugin, and cuMemFree itself waits for the
        // context's pending work, so no kernel still reads the table. Needs the stage's context
        // current, as the runner leaves it when destroying the plugin.
        let result = unsafe { sys::cuMemFree_v2(self.addr) };
        if result != CUresult::CUDA_SUCCESS {
            crate::log::warn(&format!(
                "cuMemFree of a {}-byte device table failed: {}",
                self.len,
                driver::describe(result)
            ));
        }
    }
}
