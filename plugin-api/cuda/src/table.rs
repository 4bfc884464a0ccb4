//! [`DeviceTable`]: small read-only device buffers a plugin uploads once at create (lookup
//! tables), in the context it was handed.
#![allow(unsafe_code)]

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::alloc::DeviceAlloc;
use crate::args::KernelArg;
use crate::context::RawStream;
use crate::driver::check;
use crate::error::CudaError;
use crate::target::Target;

/// Device memory holding a copy of some bytes, freed on drop (with its context current, as a
/// plugin's is when the runner destroys it).
#[derive(Debug)]
pub struct DeviceTable(DeviceAlloc);

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
        // From here on, dropping `table` frees the allocation, whatever fails next.
        let table = DeviceTable(DeviceAlloc::new("device table upload", "device table", on, bytes.len())?);
        let addr = table.addr();
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
        self.0.addr()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: an empty table is refused.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The table as a kernel's pointer argument.
    pub fn arg(&self) -> KernelArg {
        KernelArg::DevicePtr(self.0.addr())
    }
}
