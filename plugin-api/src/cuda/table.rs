//! [`DeviceTable`] for plugins: a small read-only device buffer (a lookup table) uploaded once
//! at create into the stage's context.

use gpuipc_cuda::{KernelArg, RawStream};

use crate::error::{Error, Result};
use crate::plugin::{CreateContext, Domain};

/// Device memory holding a copy of some bytes, freed on drop.
#[derive(Debug)]
pub struct DeviceTable(gpuipc_cuda::DeviceTable);

impl DeviceTable {
    /// Allocate `bytes.len()` bytes in the stage's context (current on this thread) and copy
    /// `bytes` there on `stream` (the stage's stream, `ctx.cuda_stream`), waiting until the
    /// copy is done. For `create`: it blocks the thread.
    pub fn upload(ctx: &CreateContext<'_>, stream: usize, bytes: &[u8]) -> Result<DeviceTable> {
        super::bridge_logs();
        DeviceTable::upload_inner(ctx, stream, bytes)
            .map_err(|e| e.context(format!("uploading a {}-byte table for stage `{}`", bytes.len(), ctx.stage)))
    }

    fn upload_inner(ctx: &CreateContext<'_>, stream: usize, bytes: &[u8]) -> Result<DeviceTable> {
        if ctx.domain != Domain::Cuda || ctx.cuda_context == 0 {
            return Err(Error::new(format!("the stage runs in the {} domain", ctx.domain.name())));
        }
        if stream != ctx.cuda_stream {
            return Err(Error::new(format!("stream {stream:#x} is not the stage's stream {:#x}", ctx.cuda_stream)));
        }
        let on = RawStream { context: ctx.cuda_context, stream };
        Ok(DeviceTable(gpuipc_cuda::DeviceTable::upload(on, bytes)?))
    }

    /// The table's device address.
    pub fn addr(&self) -> u64 {
        self.0.addr()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The table as a kernel's pointer argument.
    pub fn arg(&self) -> KernelArg {
        self.0.arg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_stage_has_no_tables() {
        let ctx = crate::testing::cpu_context();
        let e = DeviceTable::upload(&ctx, 0, &[1, 2]).unwrap_err();
        assert_eq!(e.message(), "uploading a 2-byte table for stage `test`: the stage runs in the cpu domain");
    }
}
