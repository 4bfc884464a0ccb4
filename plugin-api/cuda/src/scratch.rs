//! [`ScratchBuffer`]: device memory a plugin allocates in the context it was handed and works
//! on with fills and copies enqueued on the stream it was handed (a reduction's accumulators,
//! a histogram, an intermediate frame), so that a plugin needs no `unsafe` for its own memory.
#![allow(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::c_void;

use cudarc::driver::sys::{self, CUevent, CUresult};

use crate::alloc::DeviceAlloc;
use crate::args::KernelArg;
use crate::context::RawStream;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;
use crate::target::{DeviceBuffer, DeviceBytes, Target};

/// Device memory of a cuda stage (of a context someone else owns), freed when dropped, with
/// that context current, as the runner leaves it when it destroys the plugin.
///
/// Allocate it in `Plugin::create` and keep it in the plugin: an allocation per frame would
/// cost the frame loop a driver call that may synchronise. Every operation is enqueued on the
/// stage's stream, the `stream` argument, which must be the stream the buffer was allocated
/// for (`ProcessContext::cuda_stream`, the same as `CreateContext::cuda_stream`): another
/// value is refused before it reaches the driver, which would dereference any value as a
/// stream handle. So it is ordered with the stage's kernels and with its neighbours' work
/// like everything else the stage does, and none of them waits for the GPU, except
/// [`copy_to_host`](Self::copy_to_host) and [`to_vec`](Self::to_vec).
///
/// What is checked: the stream, and that every offset and length lies inside this buffer
/// (and, for frames, inside the frame's buffer as its layout says). The other end of a
/// device-to-device copy (a frame's address) cannot be checked here, as for a kernel's
/// pointer arguments ([`Kernel`](crate::Kernel)); and a kernel given [`addr`](Self::addr) or
/// [`arg`](Self::arg) may still write past the end of the buffer: keep its indices below
/// [`len`](Self::len), as for frames.
///
/// Uploads from host memory do not wait for the GPU: the bytes are first copied into host
/// memory this value owns and keeps until an event recorded after the copy has completed,
/// since the driver may read a pageable source after the call returns.
///
/// ```ignore
/// use gpuipc_plugin_api::cuda::{KernelArg, ScratchBuffer};
///
/// // create: one u64 accumulator.
/// let sum = ScratchBuffer::zeroed(ctx, 8)?;
/// // process (a sink in the cuda domain):
/// sum.memset(ctx.cuda_stream, 0)?;
/// kernel.launch(ctx.cuda_stream, grid, block, 0, &[KernelArg::DevicePtr(plane.addr), sum.arg()])?;
/// let mut total = [0u8; 8];
/// sum.copy_to_host(ctx.cuda_stream, 0, &mut total)?; // waits for the GPU
/// ```
#[derive(Debug)]
pub struct ScratchBuffer {
    on: RawStream,
    /// Freed after `Drop` below has waited for the uploads still reading staged bytes.
    memory: DeviceAlloc,
    /// Host copies of uploaded bytes, oldest first, each until its copy has run.
    staged: VecDeque<Staged>,
    /// Events of completed uploads, recorded again by later ones.
    spare_events: Vec<CUevent>,
}

#[derive(Debug)]
struct Staged {
    bytes: Box<[u8]>,
    /// Recorded on the stream after the copy from `bytes`.
    copied: CUevent,
}

// SAFETY: the allocation, the events and the staged bytes are owned by this value; driver
// handles may be used from any thread (the caller makes the context current, which every
// call checks), and the staged bytes are only freed once the GPU is done reading them.
unsafe impl Send for ScratchBuffer {}

impl ScratchBuffer {
    /// `len` bytes (at least 1) in `on`'s context (current on this thread, as the runner
    /// leaves it for `create`), every one set to 0 on its stream before anything enqueued
    /// later.
    pub fn zeroed(on: &impl Target, len: usize) -> Result<ScratchBuffer, CudaError> {
        ScratchBuffer::filled(on, len, 0)
    }

    /// `len` bytes (at least 1) in `on`'s context, every one set to `value` on its stream
    /// before anything enqueued later.
    pub fn filled(on: &impl Target, len: usize, value: u8) -> Result<ScratchBuffer, CudaError> {
        let made = on.raw_stream().and_then(|on| {
            let buffer = ScratchBuffer::alloc(on, len)?;
            buffer.memset(on.stream, value)?;
            Ok(buffer)
        });
        made.map_err(|e| e.during(format!("allocating a {len}-byte scratch buffer")))
    }

    /// Allocate `len` bytes (at least 1) in `on.context`, which must be current on this
    /// thread. The contents are whatever the allocation held.
    fn alloc(on: RawStream, len: usize) -> Result<ScratchBuffer, CudaError> {
        let memory = DeviceAlloc::new("scratch buffer allocation", "scratch buffer", on, len)?;
        Ok(ScratchBuffer { on, memory, staged: VecDeque::new(), spare_events: Vec::new() })
    }

    /// The buffer's device address.
    pub fn addr(&self) -> u64 {
        self.memory.addr()
    }

    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Never true: an empty buffer is refused.
    pub fn is_empty(&self) -> bool {
        self.memory.len() == 0
    }

    /// The stream every operation is enqueued on.
    pub fn stream(&self) -> usize {
        self.on.stream
    }

    /// The buffer as a kernel's pointer argument.
    pub fn arg(&self) -> KernelArg {
        KernelArg::DevicePtr(self.addr())
    }

    /// The device address of `offset..offset + len` after checking that `stream` is the
    /// buffer's, the range lies inside it, and the context is current.
    fn at(&self, op: &'static str, stream: usize, offset: usize, len: usize) -> Result<u64, CudaError> {
        if stream != self.on.stream {
            return Err(CudaError::Invalid {
                op,
                reason: format!(
                    "stream {stream:#x} is not the stage's stream {:#x}, the one the buffer was allocated for",
                    self.on.stream
                ),
            });
        }
        check_range(op, self.len(), offset, len)?;
        self.on.require_current()?;
        Ok(self.addr() + offset as u64)
    }

    /// Enqueue setting every byte to `value`.
    pub fn memset(&self, stream: usize, value: u8) -> Result<(), CudaError> {
        self.memset_range(stream, 0, self.len(), value)
    }

    /// Enqueue setting `len` bytes from `offset` to `value`.
    pub fn memset_range(&self, stream: usize, offset: usize, len: usize, value: u8) -> Result<(), CudaError> {
        let dst = self.at("cuMemsetD8Async", stream, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: device memory of ours only, inside the allocation; the stream is the one
        // the buffer was allocated for, of the current context.
        check("cuMemsetD8Async", None, unsafe { sys::cuMemsetD8Async(dst, value, len, stream as sys::CUstream) })
    }

    /// Enqueue copying `bytes` from host memory to `offset`. Does not wait for the GPU: the
    /// bytes are copied into host memory the buffer keeps until the GPU has read them, so
    /// `bytes` may change as soon as this returns. For small per-frame values (a table, a
    /// few params); a frame's worth each frame is the cpu domain's job.
    pub fn copy_from_host(&mut self, stream: usize, offset: usize, bytes: &[u8]) -> Result<(), CudaError> {
        const OP: &str = "cuMemcpyHtoDAsync";
        let dst = self.at(OP, stream, offset, bytes.len())?;
        self.reclaim()?;
        if bytes.is_empty() {
            return Ok(());
        }
        let copied = match self.spare_events.pop() {
            Some(event) => event,
            None => new_event()?,
        };
        let staged: Box<[u8]> = bytes.into();
        // SAFETY: `staged` is host memory of ours that nothing writes and that is freed only
        // once `copied`, recorded after this copy, has completed (or leaked where that cannot
        // be known); the destination lies inside our allocation; the stream is checked.
        let enqueued = unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, staged.as_ptr().cast::<c_void>(), staged.len(), stream as sys::CUstream)
        };
        if let Err(e) = check(OP, None, enqueued) {
            self.spare_events.push(copied);
            return Err(e);
        }
        // SAFETY: a live event of the current context and the buffer's stream.
        let recorded = unsafe { sys::cuEventRecord(copied, stream as sys::CUstream) };
        if let Err(e) = check("cuEventRecord", None, recorded) {
            // Nothing will say when the copy has read `staged`: never free it.
            Box::leak(staged);
            destroy_event(copied);
            return Err(e);
        }
        self.staged.push_back(Staged { bytes: staged, copied });
        Ok(())
    }

    /// Free the host copies whose uploads have run, oldest first, without waiting.
    fn reclaim(&mut self) -> Result<(), CudaError> {
        while let Some(oldest) = self.staged.front() {
            // SAFETY: a live event of ours.
            match unsafe { sys::cuEventQuery(oldest.copied) } {
                CUresult::CUDA_SUCCESS => {
                    let done = self.staged.pop_front().expect("the front was just read");
                    self.spare_events.push(done.copied);
                }
                CUresult::CUDA_ERROR_NOT_READY => break,
                other => return check("cuEventQuery", None, other),
            }
        }
        Ok(())
    }

    /// Enqueue copying the bytes of `src`, a device frame (every plane, padding included, as
    /// its layout places them) or a [`DeviceBuffer`], to the start of this buffer, which must
    /// hold them. Returns the number of bytes copied.
    pub fn copy_from(&self, stream: usize, src: &impl DeviceBytes) -> Result<usize, CudaError> {
        let src = src.device_bytes()?;
        self.copy_from_device(stream, 0, src)?;
        host_len(src.len)
    }

    /// Enqueue copying the start of this buffer over `dst`, a device frame (every plane,
    /// padding included, as its layout places them; e.g. a frame made in scratch memory) or
    /// a [`DeviceBuffer`]. Returns the number of bytes copied.
    pub fn copy_to(&self, stream: usize, dst: &mut impl DeviceBytes) -> Result<usize, CudaError> {
        let dst = dst.device_bytes()?;
        self.copy_to_device(stream, 0, dst)?;
        host_len(dst.len)
    }

    /// Enqueue copying all of device buffer `src` (a frame's, or part of one) to `offset`.
    /// `src` itself cannot be checked: pass addresses of the frames handed to `process`.
    pub fn copy_from_device(&self, stream: usize, offset: usize, src: DeviceBuffer) -> Result<(), CudaError> {
        let len = host_len(src.len)?;
        let dst = self.at("cuMemcpyDtoDAsync", stream, offset, len)?;
        dtod(dst, src.addr, len, stream)
    }

    /// Enqueue copying `dst.len` bytes from `offset` to device buffer `dst`. `dst` itself
    /// cannot be checked: pass addresses of the frames handed to `process`.
    pub fn copy_to_device(&self, stream: usize, offset: usize, dst: DeviceBuffer) -> Result<(), CudaError> {
        let len = host_len(dst.len)?;
        let src = self.at("cuMemcpyDtoDAsync", stream, offset, len)?;
        dtod(dst.addr, src, len, stream)
    }

    /// The whole buffer in host memory; waits for the GPU as
    /// [`copy_to_host`](Self::copy_to_host) does.
    pub fn to_vec(&self, stream: usize) -> Result<Vec<u8>, CudaError> {
        let mut bytes = vec![0; self.len()];
        self.copy_to_host(stream, 0, &mut bytes)?;
        Ok(bytes)
    }

    /// Copy `dst.len()` bytes from `offset` to host memory once everything enqueued on the
    /// stream so far (the kernels that wrote them) has run.
    ///
    /// **This waits for the GPU**: a synchronisation point, for sinks (a reduction's result,
    /// a statistic per frame) and tests only. In a filter or a source it stalls the stage
    /// and every stage after it until the GPU catches up, which is what the cuda domain's
    /// links exist to avoid.
    pub fn copy_to_host(&self, stream: usize, offset: usize, dst: &mut [u8]) -> Result<(), CudaError> {
        const OP: &str = "cuMemcpyDtoHAsync";
        let src = self.at(OP, stream, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `dst` is borrowed mutably until we return, and we return only after the
        // stream (and so the copy) is done. If synchronising fails the context has hit a
        // sticky error and runs nothing more, so the copy cannot land later.
        check(OP, None, unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast::<c_void>(), src, dst.len(), stream as sys::CUstream)
        })?;
        // SAFETY: the buffer's stream, checked above.
        check("cuStreamSynchronize", None, unsafe { sys::cuStreamSynchronize(stream as sys::CUstream) })
    }
}

/// `offset..offset + len` lies inside a buffer of `size` bytes.
fn check_range(op: &'static str, size: usize, offset: usize, len: usize) -> Result<(), CudaError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(CudaError::Invalid {
            op,
            reason: format!("{len} bytes at offset {offset} do not fit in the {size}-byte scratch buffer"),
        }),
    }
}

fn host_len(len: u64) -> Result<usize, CudaError> {
    usize::try_from(len).map_err(|_| CudaError::Invalid {
        op: "cuMemcpyDtoDAsync",
        reason: format!("{len} bytes do not fit in this host's address space"),
    })
}

fn dtod(dst: u64, src: u64, len: usize, stream: usize) -> Result<(), CudaError> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: device addresses only (a wrong one is a driver error or a GPU fault, never a
    // write to this process's Rust memory); the stream was checked by the caller.
    check("cuMemcpyDtoDAsync", None, unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream as sys::CUstream) })
}

fn new_event() -> Result<CUevent, CudaError> {
    let mut event: CUevent = std::ptr::null_mut();
    let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
    // SAFETY: a context is current (the caller checked); writes one CUevent.
    check("cuEventCreate", None, unsafe { sys::cuEventCreate(&mut event, flags) })?;
    Ok(event)
}

fn destroy_event(event: CUevent) {
    // SAFETY: a live event of ours, not used after this.
    if let Err(e) = check("cuEventDestroy", None, unsafe { sys::cuEventDestroy_v2(event) }) {
        log::release_failed(Some("destroying a scratch buffer's event"), &e);
    }
}

impl Drop for ScratchBuffer {
    fn drop(&mut self) {
        for Staged { bytes, copied } in self.staged.drain(..) {
            // SAFETY: a live event of ours; only waits.
            match check("cuEventSynchronize", None, unsafe { sys::cuEventSynchronize(copied) }) {
                Ok(()) => drop(bytes),
                Err(e) => {
                    log::release_failed(Some("waiting for a scratch buffer's upload"), &e);
                    // Whether the copy may still read the bytes cannot be known.
                    Box::leak(bytes);
                }
            }
            destroy_event(copied);
        }
        for event in self.spare_events.drain(..) {
            destroy_event(event);
        }
        // `memory` is freed after this, as a field.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        assert!(check_range("op", 16, 0, 16).is_ok());
        assert!(check_range("op", 16, 16, 0).is_ok());
        assert!(check_range("op", 16, 8, 8).is_ok());
        let e = check_range("op", 16, 8, 9).unwrap_err();
        assert_eq!(e.to_string(), "op: 9 bytes at offset 8 do not fit in the 16-byte scratch buffer");
        assert!(check_range("op", 16, usize::MAX, 2).is_err());
    }

    /// On a GPU: fills, uploads (many, their host copies reclaimed and their events reused),
    /// copies both ways between device buffers and read-backs, checked byte
    /// for byte; wrong streams and ranges refused; a buffer dropped with uploads in flight.
    /// Skipped without a GPU unless GPUIPC_REQUIRE_GPU=1.
    #[test]
    fn gpu_scratch_fills_copies_and_reads_back() {
        let Some(gpu) = crate::testing::gpu_for_test() else { return };
        gpu.bind().unwrap();
        let on = gpu.raw_stream();
        let stream = on.stream;
        let mut a = ScratchBuffer::alloc(on, 256).unwrap();
        let b = ScratchBuffer::alloc(on, 256).unwrap();
        a.memset(stream, 0xee).unwrap();
        let ramp: Vec<u8> = (0..=255).collect();
        for round in 0..200u32 {
            let bytes: Vec<u8> = ramp.iter().map(|&x| x.wrapping_add(round as u8)).collect();
            a.copy_from_host(stream, 0, &bytes[..128]).unwrap();
        }
        b.memset(stream, 0).unwrap();
        b.copy_from_device(stream, 16, DeviceBuffer { addr: a.addr(), len: 64 }).unwrap();
        let mut back = vec![0u8; 256];
        b.copy_to_host(stream, 0, &mut back).unwrap();
        let last: Vec<u8> = ramp.iter().map(|&x| x.wrapping_add(199)).collect();
        assert!(back[..16].iter().all(|&x| x == 0));
        assert_eq!(back[16..80], last[..64]);
        assert!(back[80..].iter().all(|&x| x == 0));
        b.copy_to_device(stream, 16, DeviceBuffer { addr: a.addr() + 128, len: 8 }).unwrap();
        let mut tail = [0u8; 128];
        a.copy_to_host(stream, 128, &mut tail).unwrap();
        assert_eq!(tail[..8], last[..8]);
        assert!(tail[8..].iter().all(|&x| x == 0xee));
        // The stream is idle after a read-back: the next upload frees every host copy.
        a.copy_from_host(stream, 0, &[]).unwrap();
        assert!(a.staged.is_empty() && !a.spare_events.is_empty());

        let e = a.memset_range(stream + 8, 0, 1, 0).unwrap_err();
        assert!(e.to_string().contains("is not the stage's stream"), "{e}");
        assert!(a.copy_from_host(stream, 200, &[0; 57]).is_err());
        assert!(a.copy_to_host(stream, 257, &mut []).is_err());
        assert!(ScratchBuffer::alloc(on, 0).is_err());
        // Dropped with uploads perhaps still in flight: waits for them, then frees.
        let mut c = ScratchBuffer::alloc(on, 1 << 20).unwrap();
        for _ in 0..4 {
            c.copy_from_host(stream, 0, &vec![7; 1 << 20]).unwrap();
        }
        drop(c);
        gpu.synchronize().unwrap();
    }
}
