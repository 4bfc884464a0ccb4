//! [`ScratchBuffer`]: a cuda stage's own device memory (a reduction's accumulators, a
//! histogram, an intermediate frame), allocated at create in the stage's context and filled,
//! copied and read back on the stage's stream without `unsafe`.

use gpuipc_cuda::{KernelArg, RawStream};

use crate::error::{Error, Result};
use crate::format::FrameLayout;
use crate::frame::{DeviceBuffer, InputFrame, OutputFrame};
use crate::plugin::{CreateContext, Domain};

/// Device memory of a cuda stage, freed when dropped.
///
/// Allocate it in [`Plugin::create`](crate::Plugin::create) and keep it in the plugin: an
/// allocation per frame would cost the frame loop a driver call that may synchronise. Every
/// operation is enqueued on the stage's stream, the `stream` argument, which must be the
/// stage's (`ProcessContext::cuda_stream`, the same as `CreateContext::cuda_stream`; another
/// value is refused), so it is ordered with the stage's kernels and with its neighbours'
/// work like everything else the stage does, and none of them waits for the GPU, except
/// [`copy_to_host`](Self::copy_to_host) and [`to_vec`](Self::to_vec).
///
/// What is checked: the stream, and that every offset and length lies inside this buffer
/// (and, for frames, inside the frame's buffer as its layout says). A kernel given
/// [`addr`](Self::addr) or [`arg`](Self::arg) may still write past the end of the buffer:
/// keep its indices below [`len`](Self::len), as for frames (see [`Kernel`](super::Kernel)).
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
pub struct ScratchBuffer(gpuipc_cuda::Scratch);

impl ScratchBuffer {
    /// `len` bytes in the stage's context (current on this thread, as the runner leaves it for
    /// `create`), every one set to 0 on the stage's stream before anything enqueued later.
    pub fn zeroed(ctx: &CreateContext<'_>, len: usize) -> Result<ScratchBuffer> {
        ScratchBuffer::filled(ctx, len, 0)
    }

    /// `len` bytes in the stage's context, every one set to `value` on the stage's stream
    /// before anything enqueued later.
    pub fn filled(ctx: &CreateContext<'_>, len: usize, value: u8) -> Result<ScratchBuffer> {
        super::bridge_logs();
        let what = || format!("allocating a {len}-byte scratch buffer for stage `{}`", ctx.stage);
        if ctx.domain != Domain::Cuda || ctx.cuda_context == 0 {
            return Err(Error::new(format!("the stage runs in the {} domain", ctx.domain.name())).context(what()));
        }
        let on = RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream };
        let scratch = gpuipc_cuda::Scratch::alloc(on, len).map_err(|e| Error::from(e).context(what()))?;
        scratch.memset_async(on.stream, 0, len, value)?;
        Ok(ScratchBuffer(scratch))
    }

    /// The buffer's device address, for a kernel's pointer argument.
    pub fn addr(&self) -> u64 {
        self.0.addr()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The buffer as a kernel's pointer argument.
    pub fn arg(&self) -> KernelArg {
        self.0.arg()
    }

    /// Enqueue setting every byte to `value`.
    pub fn memset(&self, stream: usize, value: u8) -> Result<()> {
        Ok(self.0.memset_async(stream, 0, self.len(), value)?)
    }

    /// Enqueue setting `len` bytes from `offset` to `value`.
    pub fn memset_range(&self, stream: usize, offset: usize, len: usize, value: u8) -> Result<()> {
        Ok(self.0.memset_async(stream, offset, len, value)?)
    }

    /// Enqueue copying `bytes` from host memory to `offset`. Does not wait for the GPU: the
    /// bytes are copied into host memory the buffer keeps until the GPU has read them, so
    /// `bytes` may change as soon as this returns. For small per-frame values (a table, a
    /// few params); a frame's worth each frame is the cpu domain's job.
    pub fn copy_from_host(&mut self, stream: usize, offset: usize, bytes: &[u8]) -> Result<()> {
        Ok(self.0.upload_async(stream, offset, bytes)?)
    }

    /// Copy `dst.len()` bytes from `offset` to host memory once everything enqueued on the
    /// stage's stream so far (the kernels that wrote them) has run.
    ///
    /// **This waits for the GPU**: a synchronisation point, for sinks (a reduction's result,
    /// a statistic per frame) and tests only. In a filter or a source it stalls the stage
    /// and every stage after it until the GPU catches up, which is what the cuda domain's
    /// links exist to avoid.
    pub fn copy_to_host(&self, stream: usize, offset: usize, dst: &mut [u8]) -> Result<()> {
        Ok(self.0.download(stream, offset, dst)?)
    }

    /// The whole buffer in host memory; waits for the GPU as
    /// [`copy_to_host`](Self::copy_to_host) does.
    pub fn to_vec(&self, stream: usize) -> Result<Vec<u8>> {
        let mut bytes = vec![0; self.len()];
        self.copy_to_host(stream, 0, &mut bytes)?;
        Ok(bytes)
    }

    /// Enqueue copying the bytes of device frame `input` (every plane, padding included, as
    /// its layout places them) to the start of this buffer, which must hold them. Returns
    /// the number of bytes copied.
    pub fn copy_from(&self, stream: usize, input: &InputFrame<'_>) -> Result<usize> {
        let buffer = device_frame(input.device_buffer(), "input")?;
        let len = frame_bytes(&input.info.layout, buffer)?;
        self.copy_from_device(stream, 0, DeviceBuffer { addr: buffer.addr, len: len as u64 })?;
        Ok(len)
    }

    /// Enqueue copying the start of this buffer over device frame `output` (every plane,
    /// padding included, as its layout places them), e.g. a frame made in scratch memory.
    /// Returns the number of bytes copied.
    pub fn copy_to(&self, stream: usize, output: &mut OutputFrame<'_>) -> Result<usize> {
        let buffer = device_frame(output.device_buffer(), "output")?;
        let len = frame_bytes(&output.info().layout, buffer)?;
        self.copy_to_device(stream, 0, DeviceBuffer { addr: buffer.addr, len: len as u64 })?;
        Ok(len)
    }

    /// Enqueue copying all of device buffer `src` (a frame's, or part of one) to `offset`.
    /// `src` itself cannot be checked: pass addresses of the frames handed to `process`.
    pub fn copy_from_device(&self, stream: usize, offset: usize, src: DeviceBuffer) -> Result<()> {
        let len = host_len(src.len)?;
        Ok(self.0.copy_from_device_async(stream, offset, src.addr, len)?)
    }

    /// Enqueue copying `dst.len` bytes from `offset` to device buffer `dst`. `dst` itself
    /// cannot be checked: pass addresses of the frames handed to `process`.
    pub fn copy_to_device(&self, stream: usize, offset: usize, dst: DeviceBuffer) -> Result<()> {
        let len = host_len(dst.len)?;
        Ok(self.0.copy_to_device_async(stream, offset, dst.addr, len)?)
    }
}

fn device_frame(buffer: Option<DeviceBuffer>, which: &str) -> Result<DeviceBuffer> {
    buffer.ok_or_else(|| Error::new(format!("the {which} frame is in host memory, not on the GPU (cpu domain)")))
}

fn host_len(len: u64) -> Result<usize> {
    usize::try_from(len).map_err(|_| Error::new(format!("{len} bytes do not fit in this host's address space")))
}

/// The bytes of a frame of `layout` in `buffer`: its total size, or less where the buffer is
/// shorter but still holds every plane's last row.
fn frame_bytes(layout: &FrameLayout, buffer: DeviceBuffer) -> Result<usize> {
    let needed =
        layout.planes().iter().map(|p| p.offset + p.pitch * p.rows.saturating_sub(1) + p.row_bytes).max().unwrap_or(0);
    if needed > buffer.len {
        return Err(Error::new(format!(
            "the frame's layout needs {needed} bytes, its device buffer has {}",
            buffer.len
        )));
    }
    host_len(layout.total_bytes.min(buffer.len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{FrameFormat, PixelFormat};
    use crate::frame::FrameInfo;

    #[test]
    fn a_cpu_stage_has_no_scratch_buffers() {
        let ctx = crate::testing::cpu_context();
        let e = ScratchBuffer::zeroed(&ctx, 8).unwrap_err();
        assert_eq!(
            e.message(),
            "allocating a 8-byte scratch buffer for stage `test`: the stage runs in the cpu domain"
        );
    }

    #[test]
    fn frames_are_copied_as_their_layout_places_them() {
        let layout = FrameLayout::for_format(FrameFormat::new(PixelFormat::I420, 5, 3)).unwrap();
        let whole = DeviceBuffer { addr: 0x1000, len: layout.total_bytes + 4096 };
        assert_eq!(frame_bytes(&layout, whole).unwrap() as u64, layout.total_bytes);
        // A buffer cut after the last plane's last row still holds the frame.
        let last = layout.planes[2];
        let tight = DeviceBuffer { len: last.offset + last.pitch + last.row_bytes, ..whole };
        assert_eq!(frame_bytes(&layout, tight).unwrap() as u64, tight.len);
        let short = DeviceBuffer { len: tight.len - 1, ..whole };
        let e = frame_bytes(&layout, short).unwrap_err();
        assert!(e.message().contains("needs 579 bytes"), "{e}");
        let info = FrameInfo::new(FrameFormat::new(PixelFormat::Gray8, 2, 2), 0, 0).unwrap();
        let bytes = vec![0u8; info.layout.total_bytes as usize];
        let host = InputFrame::host(info, &bytes).unwrap();
        let e = device_frame(host.device_buffer(), "input").unwrap_err();
        assert!(e.message().contains("host memory"), "{e}");
    }

    /// On a GPU: a reduction (the sum of a gray frame's pixels, by a kernel adding into a
    /// zeroed scratch buffer) read back for each of several frames, and a frame copied into
    /// scratch memory and out to another frame, every byte checked; host uploads, fills and
    /// the stream check. Skipped without a GPU unless GPUIPC_REQUIRE_GPU=1; needs NVRTC.
    #[test]
    fn gpu_scratch_buffers_reduce_copy_and_read_back() {
        use crate::cuda::testing::GpuHarness;
        use crate::cuda::{Kernels, device_plane, row_grid};
        let Some(gpu) = GpuHarness::for_test() else { return };
        let source = r#"
            extern "C" __global__ void sum(const unsigned char* plane, unsigned long long pitch,
                                           unsigned long long row_bytes, unsigned long long rows,
                                           unsigned long long* total) {
                for (unsigned long long y = blockIdx.y; y < rows; y += gridDim.y) {
                    unsigned long long s = 0;
                    for (unsigned long long x = blockIdx.x * blockDim.x + threadIdx.x; x < row_bytes;
                         x += (unsigned long long)gridDim.x * blockDim.x) {
                        s += plane[y * pitch + x];
                    }
                    if (s) atomicAdd(total, s);
                }
            }
        "#;
        let ctx = gpu.create_context("test").unwrap();
        let kernels = Kernels::load(&ctx, "kernels/sum.cu", source, &["sum"]).unwrap();
        let sum = kernels.get("sum").unwrap();
        let total = ScratchBuffer::zeroed(&ctx, 8).unwrap();
        assert_eq!(total.to_vec(ctx.cuda_stream).unwrap(), [0; 8]);
        let stream = gpu.process_context(0).cuda_stream;
        let format = FrameFormat::new(PixelFormat::Gray8, 641, 479);
        for seq in 0..3u64 {
            let info = FrameInfo::new(format, seq, 0).unwrap();
            let bytes: Vec<u8> = (0..info.layout.total_bytes).map(|i| (i * 7 + seq) as u8).collect();
            let plane = info.layout.planes[0];
            let want: u64 = (0..plane.rows as usize)
                .flat_map(|y| &bytes[y * plane.pitch as usize..][..plane.row_bytes as usize])
                .map(|&b| b as u64)
                .sum();
            let frame = gpu.upload(&bytes).unwrap();
            let p = device_plane(frame.buffer(), &info.layout, 0).unwrap();
            total.memset(stream, 0).unwrap();
            let args = [
                KernelArg::DevicePtr(p.addr),
                KernelArg::U64(p.pitch),
                KernelArg::U64(p.row_bytes),
                KernelArg::U64(p.rows),
                total.arg(),
            ];
            sum.launch(stream, row_grid(p.row_bytes, p.rows, 128), (128, 1, 1), 0, &args).unwrap();
            let mut got = [0u8; 8];
            total.copy_to_host(stream, 0, &mut got).unwrap();
            assert_eq!(u64::from_ne_bytes(got), want, "frame {seq}");
        }

        let info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 33, 17), 0, 0).unwrap();
        let bytes: Vec<u8> = (0..info.layout.total_bytes).map(|i| (i * 13) as u8).collect();
        let src = gpu.upload(&bytes).unwrap();
        let dst = gpu.upload(&vec![0xa5; bytes.len()]).unwrap();
        let mut copy = ScratchBuffer::filled(&ctx, bytes.len() + 64, 0x11).unwrap();
        let n = copy.copy_from(stream, &InputFrame::device(info, src.buffer())).unwrap();
        assert_eq!(n, bytes.len());
        copy.copy_from_host(stream, 0, &[1, 2, 3]).unwrap();
        copy.memset_range(stream, 3, 1, 4).unwrap();
        copy.copy_to(stream, &mut OutputFrame::device(info, dst.buffer())).unwrap();
        let mut want = bytes.clone();
        want[..4].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(gpu.download(&dst).unwrap(), want);
        let all = copy.to_vec(stream).unwrap();
        assert_eq!(all[..bytes.len()], want);
        assert!(all[bytes.len()..].iter().all(|&b| b == 0x11));

        let e = copy.memset(stream + 8, 0).unwrap_err();
        assert!(e.message().contains("is not the stage's stream"), "{e}");
        assert!(copy.copy_from_host(stream, copy.len(), &[1]).is_err());
        let small = ScratchBuffer::zeroed(&ctx, 16).unwrap();
        let e = small.copy_from(stream, &InputFrame::device(info, src.buffer())).unwrap_err();
        assert!(e.message().contains("do not fit in the 16-byte scratch buffer"), "{e}");
    }
}
