//! [`DeviceAlloc`]: device memory allocated in a context someone else owns and freed on drop,
//! what [`ScratchBuffer`](crate::ScratchBuffer) and [`DeviceTable`](crate::DeviceTable) are
//! made of.
#![allow(unsafe_code)]

use cudarc::driver::sys;

use crate::context::RawStream;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;

/// `len` bytes (at least 1) of `cuMemAlloc` memory in a context someone else owns (a stage's),
/// freed when dropped, with that context current, as the runner leaves it when it destroys the
/// plugin. `what` names it in messages (`scratch buffer`, `device table`).
#[derive(Debug)]
pub(crate) struct DeviceAlloc {
    addr: u64,
    len: usize,
    what: &'static str,
}

impl DeviceAlloc {
    /// Allocate `len` bytes in `on.context`, which must be current on this thread, for work on
    /// `on.stream`, which must be a stream (not 0, the legacy default stream). The contents are
    /// whatever the allocation held. `op` names the operation in errors.
    pub(crate) fn new(
        op: &'static str,
        what: &'static str,
        on: RawStream,
        len: usize,
    ) -> Result<DeviceAlloc, CudaError> {
        if len == 0 {
            return Err(CudaError::Invalid { op, reason: format!("a {what} cannot be empty") });
        }
        if on.stream == 0 {
            return Err(CudaError::Invalid { op, reason: "no stream (the legacy default stream is refused)".into() });
        }
        on.require_current()?;
        let mut addr: sys::CUdeviceptr = 0;
        // SAFETY: the driver is loaded (checked by `require_current`) and a context current;
        // writes the new allocation's address into `addr`.
        check("cuMemAlloc", None, unsafe { sys::cuMemAlloc_v2(&mut addr, len) })?;
        Ok(DeviceAlloc { addr, len, what })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.addr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        // SAFETY: `addr` came from cuMemAlloc and is freed once, here. The runner synchronises
        // its stream before destroying the plugin, and cuMemFree itself waits for the
        // context's pending work, so no kernel or copy still uses the memory. Needs the
        // memory's context current, as the runner leaves it when destroying the plugin.
        if let Err(e) = check("cuMemFree", None, unsafe { sys::cuMemFree_v2(self.addr) }) {
            log::release_failed(Some(&format!("freeing a {}-byte {}", self.len, self.what)), &e);
        }
    }
}
