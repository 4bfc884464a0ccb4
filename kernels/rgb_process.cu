// rgb_process.cu: the rgb-process stage, every colour byte of a frame mapped through a
// 256-entry table (brightness, contrast, gamma, invert folded into it on the CPU).
//
// Mirrors plugins/rgb-process/src/rgb_process.rs `apply_row` for every row: rgb8 and gray8
// map every byte, rgba8 maps R, G, B and copies A. The table itself is `lut(&params)`, made
// on the CPU once at stage start; the kernel does no floating point, so the output is the
// CPU's byte for byte.
//
// Entry point:
//
//   extern "C" __global__ void rgb_process_lut(const u8* in, u64 in_pitch, u8* out,
//                                              u64 out_pitch, u32 width, u32 height,
//                                              u32 format, const u8* lut)
//
//    #  name       type       value
//    0  in         const u8*  device address of the input plane's first row
//    1  in_pitch   u64        bytes from one input row to the next
//    2  out        u8*        device address of the output plane's first row
//    3  out_pitch  u64        bytes from one output row to the next
//    4  width      u32        pixels
//    5  height     u32        rows
//    6  format     u32        the PixelFormat ABI code: 1 rgb8, 2 rgba8, 3 gray8; any other
//                             value writes nothing
//    7  lut        const u8*  device address of the 256-byte table `lut(&params)` (upload it
//                             once at create; any alignment)
//
// The table goes by pointer rather than by value so the launcher can pass a plain device
// buffer; each block copies it into 256 bytes of shared memory first, where the data-dependent
// lookups are cheap (by value it would sit in the constant bank, which serialises a warp's
// differing addresses).
//
// Launch: one thread per 16 bytes of a row, 1-D blocks, a 2-D grid:
//   block = (128, 1, 1)                                   (any blockDim.x works)
//   row_bytes = width * {3, 4, 1}
//   grid  = (ceil(ceil(row_bytes / 16) / block.x), min(height, 65535), 1)
// Both grid dimensions are grid-stride loops, so a smaller grid is also correct. 256 bytes
// of static shared memory, no dynamic shared memory.
//
// Memory: in == out with the same pitch (in place) is allowed. Writes exactly `row_bytes`
// bytes of each output row, never its padding. When a plane's address and pitch are multiples
// of 16 (always, with the layout rule), it is read and written in 16-byte uint4 pieces; the
// last read of a row may then cover up to 15 padding bytes after `row_bytes` (inside the
// pitch, ignored). Misaligned planes are read and written byte by byte.

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;

enum : u32 { PIXEL_RGB8 = 1, PIXEL_RGBA8 = 2, PIXEL_GRAY8 = 3 };

// The first n (<= 16) bytes at p as four little-endian words; the rest are zero. A full uint4
// when vec, which may read past n but never past the next 16-byte boundary.
__device__ __forceinline__ void load16(const u8* p, u32 n, bool vec, u32 (&w)[4]) {
    if (vec) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
        return;
    }
#pragma unroll
    for (u32 i = 0; i < 4; ++i) w[i] = 0;
#pragma unroll
    for (u32 j = 0; j < 16; ++j) {
        if (j < n) w[j >> 2] |= (u32)p[j] << (8 * (j & 3));
    }
}

// Store the 16 bytes w[0..4] at p, or only the first n of them.
__device__ __forceinline__ void store16(u8* p, const u32 (&w)[4], u32 n, bool vec) {
    if (vec && n >= 16) {
        *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
        return;
    }
#pragma unroll
    for (u32 j = 0; j < 16; ++j) {
        if (j < n) p[j] = (u8)(w[j >> 2] >> (8 * (j & 3)));
    }
}

extern "C" __global__ void rgb_process_lut(const u8* in, u64 in_pitch, u8* out, u64 out_pitch,
                                           u32 width, u32 height, u32 format, const u8* lut) {
    __shared__ u8 table[256];
    for (u32 i = threadIdx.x; i < 256; i += blockDim.x) table[i] = lut[i];
    __syncthreads();

    const u32 bpp = format == PIXEL_RGB8 ? 3u : format == PIXEL_RGBA8 ? 4u
                  : format == PIXEL_GRAY8 ? 1u : 0u;
    // Alpha is every 4th byte; a 16-byte piece starts on a pixel, so it is bytes 3, 7, 11, 15.
    const bool keep_alpha = format == PIXEL_RGBA8;
    const u32 row_bytes = width * bpp;
    const u32 chunks = (row_bytes + 15u) / 16u;
    const bool vec_in = (((u64)in | in_pitch) & 15u) == 0;
    const bool vec_out = (((u64)out | out_pitch) & 15u) == 0;

    for (u32 y = blockIdx.y; y < height; y += gridDim.y) {
        const u8* src = in + (u64)y * in_pitch;
        u8* dst = out + (u64)y * out_pitch;
        for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < chunks;
             k += gridDim.x * blockDim.x) {
            const u32 n = row_bytes - 16u * k; // bytes of this piece inside the row, >= 1
            u32 w[4];
            load16(src + 16u * k, n, vec_in, w);
#pragma unroll
            for (u32 i = 0; i < 4; ++i) {
                const u32 v = w[i];
                const u32 a = keep_alpha ? (v & 0xff000000u) : ((u32)table[v >> 24] << 24);
                w[i] = (u32)table[v & 255u] | ((u32)table[(v >> 8) & 255u] << 8) |
                       ((u32)table[(v >> 16) & 255u] << 16) | a;
            }
            store16(dst + 16u * k, w, n, vec_out);
        }
    }
}
