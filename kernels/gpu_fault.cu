// gpu_fault.cu: the test-gpu-fault stage, a pass-through copy of every plane of a frame, and
// a kernel that faults on purpose so that the host's handling of a fatal GPU error can be
// tested (tests only; see plugins/testing/gpu-fault).
//
// `gpu_fault_copy` mirrors the cpu path of plugins/testing/gpu-fault/src/gpu_fault.rs: each
// row's `row_bytes` pixel bytes copied, row padding never written. `gpu_fault_poison` either
// writes one byte through a pointer the caller makes illegal (the plugin passes device
// address 0), so the driver reports CUDA_ERROR_ILLEGAL_ADDRESS, or executes `__trap()`, a
// launch failure. Both are sticky: the context is unusable afterwards, and under MPS the
// fault ends every client on the GPU.
//
// Entry points:
//
//   extern "C" __global__ void gpu_fault_copy(const u8* in, u64 in_pitch, u8* out,
//                                             u64 out_pitch, u32 row_bytes, u32 rows)
//
//    #  name       type       value
//    0  in         const u8*  device address of the input plane's first row
//    1  in_pitch   u64        bytes from one input row to the next
//    2  out        u8*        device address of the output plane's first row
//    3  out_pitch  u64        bytes from one output row to the next
//    4  row_bytes  u32        pixel bytes in a row (the same for input and output)
//    5  rows       u32        rows of the plane
//
//   extern "C" __global__ void gpu_fault_poison(u8* target, u32 how)
//
//    #  name    type  value
//    0  target  u8*   how = 1: the address written (pass 0: never mapped, so the write
//                     faults whatever the system; not checked here); otherwise unused
//    1  how     u32   1 write one byte at `target`; 2 `__trap()`; any other value does
//                     nothing
//
//   extern "C" __global__ void gpu_fault_busy(u64 ns)
//
//    #  name  type  value
//    0  ns    u64   nanoseconds to spin on the GPU's global timer (%globaltimer)
//
// Launch:
//   gpu_fault_copy, once per plane: one thread per 16 bytes of a row, 1-D blocks, a 2-D grid:
//     block = (128, 1, 1)                                 (any blockDim.x works)
//     grid  = (ceil(ceil(row_bytes / 16) / block.x), min(rows, 65535), 1)
//   Both grid dimensions are grid-stride loops, so a smaller grid is also correct. No shared
//   memory.
//   gpu_fault_poison: grid (1, 1, 1), block (1, 1, 1); every thread does the same.
//   gpu_fault_busy: grid (blocks, 1, 1), block (32, 1, 1): one block is one warp on one SM,
//     so that several processes' busy kernels run at once under MPS; thousands of blocks fill
//     the GPU (a GPU-bound stage of a chosen length and width, to measure replicas). Every
//     thread spins alone. Writes no memory.
//
// Memory: gpu_fault_copy reads and writes exactly `row_bytes` bytes of each row; planes must
// not overlap. When both planes' addresses and pitches are multiples of 16 (always, with the
// layout rule) whole 16-byte pieces move as uint4 and a row's partial last piece byte by
// byte; otherwise everything moves byte by byte.

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;

enum : u32 { POISON_WRITE = 1, POISON_TRAP = 2 };

extern "C" __global__ void gpu_fault_copy(const u8* in, u64 in_pitch, u8* out, u64 out_pitch,
                                          u32 row_bytes, u32 rows) {
    const u32 chunks = (row_bytes + 15u) / 16u;
    const bool vec = ((((u64)in | in_pitch) | ((u64)out | out_pitch)) & 15u) == 0;
    for (u32 y = blockIdx.y; y < rows; y += gridDim.y) {
        const u8* src = in + (u64)y * in_pitch;
        u8* dst = out + (u64)y * out_pitch;
        for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < chunks;
             k += gridDim.x * blockDim.x) {
            const u32 start = 16u * k;
            const u32 n = min(row_bytes - start, 16u); // bytes of this piece inside the row
            if (vec && n == 16u) {
                *reinterpret_cast<uint4*>(dst + start) =
                    *reinterpret_cast<const uint4*>(src + start);
            } else {
                for (u32 j = 0; j < n; ++j) dst[start + j] = src[start + j];
            }
        }
    }
}

extern "C" __global__ void gpu_fault_poison(u8* target, u32 how) {
    if (how == POISON_WRITE) {
        // Volatile, so the store is made even though nothing reads it back.
        *reinterpret_cast<volatile u8*>(target) = 0xa5;
    } else if (how == POISON_TRAP) {
        __trap();
    }
}

extern "C" __global__ void gpu_fault_busy(u64 ns) {
    u64 start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
