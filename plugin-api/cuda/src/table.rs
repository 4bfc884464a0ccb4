//! [`DeviceTable`]: small read-only device buffers a plugin uploads once at create (lookup
//! tables), in the context it was handed.
#![allow(unsafe_code)]

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::args::KernelArg;
use crate::context::RawStream;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;
use crate::target::Target;

/// Device memory holding a copy of some bytes, freed on drop (with its context current, as a
/// plugin's is when the runner destroys it).
#[derive(Debug)]
pub struct DeviceTable {
    addr: u64,
    len: usize,
}

impl DeviceTable {
    /// Allocate `bytes.len()` bytes in `on`'s context (which must be current on this thread,
    /// as the runner leaves it for `create`) and copy `bytes` there on its stream, waiting
    /// until the copy is done: it blocks the thread, so it is for `create`, not for the frame
    /// loop.
    pub fn upload(on: &impl Target, bytes: &[u8]) -> Result<DeviceTable, CudaError> {
        let uploaded = on.raw_stream().and_then(|on| DeviceTable::upload_to(on, bytes));
        uploaded.map_err(|e| e.during(format!("uploading a {}-byte table", bytes.len())))
    }

    fn upload_to(on: RawStream, bytes: &[u8]) -> Result<DeviceTable, CudaError> {
        const OP: &str = "device table upload";
        if bytes.is_empty() {
            return Err(CudaError::Invalid { op: OP, reason: "a device table cannot be empty".into() });
        }
        if on.stream == 0 {
            return Err(CudaError::Invalid {
                op: OP,
                reason: "no stream (the legacy default stream is refused)".into(),
            });
        }
        on.require_current()?;
        let mut addr: sys::CUdeviceptr = 0;
        // SAFETY: the driver is loaded (checked by `require_current`) and a context current;
        // writes the new allocation's address into `addr`.
        check("cuMemAlloc", None, unsafe { sys::cuMemAlloc_v2(&mut addr, bytes.len()) })?;
        // From here on, dropping `table` frees the allocation, whatever fails next.
        let table = DeviceTable { addr, len: bytes.len() };
        // SAFETY: `addr` has `bytes.len()` bytes of device memory we own; `bytes` is readable
        // for that length and outlives the copy, which is waited for below before returning.
        // `on.stream` is a stream of the current context, as the caller's `RawStream` says.
        let copied = unsafe {
            sys::cuMemcpyHtoDAsync_v2(addr, bytes.as_ptr().cast::<c_void>(), bytes.len(), on.stream as sys::CUstream)
        };
        check("cuMemcpyHtoDAsync", None, copied)?;
        // SAFETY: the same stream handle; only waits. If this fails the context has a sticky
        // error and the copy will never read `bytes`.
        let synced = unsafe { sys::cuStreamSynchronize(on.stream as sys::CUstream) };
        check("cuStreamSynchronize", None, synced)?;
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
        // context's pending work, so no kernel still reads the table. Needs the table's
        // context current, as the runner leaves it when destroying the plugin.
        let result = unsafe { sys::cuMemFree_v2(self.addr) };
        if let Err(e) = check("cuMemFree", None, result) {
            log::release_failed(Some(&format!("freeing a {}-byte device table", self.len)), &e);
        }
    }
}
