// yuv_to_rgb.cu: the yuv-to-rgb stage, an i420, nv12 or p010 frame to rgb8 or rgba8 (alpha
// 255).
//
// Mirrors plugins/yuv-to-rgb/src/yuv_to_rgb.rs `convert`: every pixel takes the U and V of
// its 2x2 block (sample (x / 2, y / 2)) and becomes, with `Coefficients::for_bits(matrix,
// range, bits)`,
//   t = y_mul (Y - y_offset) + 2^(F - 1)
//   R = clamp(max(t + r_v (V - C), 0) >> F, 0, 255)
//   G = clamp(max(t + g_u (U - C) + g_v (V - C), 0) >> F, 0, 255)
//   B = clamp(max(t + b_u (U - C), 0) >> F, 0, 255)
// where the entry point fixes the samples' depth, and with it the coefficients' `frac_bits` F
// and `c_offset` C: yuv420_to_rgb takes 8-bit samples (i420, nv12; bits 8), F = 16, C = 128;
// p010_to_rgb takes 10-bit ones (p010; bits 10), each the little-endian u16 at its two bytes
// shifted right by 6, F = 18, C = 512. Fixed point, integer only: the output is the CPU's
// byte for byte.
//
// Entry points:
//
//   extern "C" __global__ void yuv420_to_rgb(
//       const u8* y_plane, u64 y_pitch, const u8* u_plane, u64 u_pitch,
//       const u8* v_plane, u64 v_pitch, u8* out, u64 out_pitch, u32 out_bpp,
//       u32 width, u32 height, u32 layout,
//       i32 y_offset, i32 y_mul, i32 r_v, i32 g_u, i32 g_v, i32 b_u)
//
//    #  name       type       value
//    0  y_plane    const u8*  device address of the Y plane's first row
//    1  y_pitch    u64        bytes from one Y row to the next
//    2  u_plane    const u8*  i420: the U plane; nv12: the interleaved UV plane (U first)
//    3  u_pitch    u64        its pitch
//    4  v_plane    const u8*  i420: the V plane; nv12: unused (pass 0)
//    5  v_pitch    u64        i420: its pitch; nv12: unused (pass 0)
//    6  out        u8*        device address of the rgb8/rgba8 plane's first row
//    7  out_pitch  u64
//    8  out_bpp    u32        3 (rgb8) or 4 (rgba8, alpha written 255); any other value
//                             writes nothing
//    9  width      u32        pixels, 1..=32768
//   10  height     u32        rows, 1..=32768
//   11  layout     u32        0 i420, 1 nv12 (`layout_code` in cuda.rs); any other value
//                             writes nothing
//   12..17                    fields of `Coefficients::for_bits(matrix, range, 8)`, each an
//                             i32: y_offset, y_mul, r_v, g_u, g_v, b_u
//
//   extern "C" __global__ void p010_to_rgb(
//       const u8* y_plane, u64 y_pitch, const u8* uv_plane, u64 uv_pitch,
//       u8* out, u64 out_pitch, u32 out_bpp, u32 width, u32 height,
//       i32 y_offset, i32 y_mul, i32 r_v, i32 g_u, i32 g_v, i32 b_u)
//
//    #  name       type       value
//    0  y_plane    const u8*  device address of the Y plane's first row
//    1  y_pitch    u64        bytes from one Y row to the next
//    2  uv_plane   const u8*  the interleaved UV plane (U first)
//    3  uv_pitch   u64        its pitch
//    4  out        u8*        device address of the rgb8/rgba8 plane's first row
//    5  out_pitch  u64
//    6  out_bpp    u32        3 (rgb8) or 4 (rgba8, alpha written 255); any other value
//                             writes nothing
//    7  width      u32        pixels, 1..=32768
//    8  height     u32        rows, 1..=32768
//    9..14                    fields of `Coefficients::for_bits(matrix, range, 10)`, each an
//                             i32: y_offset, y_mul, r_v, g_u, g_v, b_u
//
// Two entry points rather than a third layout: each is compiled on its own, so the 8-bit one
// is not slowed by p010's code (with one thread per chroma sample, nv12 to rgba8 at 4K took
// 32.8 us on an H200; one kernel holding both layouts took 38.6 to 41.5).
//
// Launch: 1-D blocks, a 2-D grid, both grid dimensions grid-stride loops (so a smaller grid
// is also correct); no shared memory. The two entry points split the work differently:
//
//   yuv420_to_rgb: one thread per 8 chroma samples of a row pair, that is 16 x 2 pixels (cut
//   to the frame at the row's end and at an odd bottom row):
//     block = (128, 1, 1)                                 (any blockDim.x works)
//     grid  = (ceil(ceil(width / 16) / block.x), min(ceil(height / 2), 65535), 1)
//   (cuda.rs: `per_thread` 8 chroma samples.)
//
//   p010_to_rgb: one thread per chroma sample, that is per 2x2 block of pixels (cut to the
//   frame at an odd right column or bottom row):
//     block = (128, 1, 1)                                 (any blockDim.x works)
//     grid  = (ceil(ceil(width / 2) / block.x), min(ceil(height / 2), 65535), 1)
//
// Memory: both write exactly the `row_bytes` bytes of each output row, never row padding.
//   yuv420_to_rgb: when every used plane address and pitch is a multiple of 16 (always, with
//   the layout rule's 64-byte pitches and 256-byte plane offsets), a thread reads a Y row's 16
//   bytes as one uint4, its 8 U and 8 V as one uint2 each (i420) or its 16 UV bytes as one
//   uint4 (nv12), and stores each row's 16 pixels as 3 (rgb8) or 4 (rgba8) uint4; every
//   byte's place is fixed at compile time. A row's partial last group reads whole pieces too
//   (up to 15 padding bytes after the pixels, inside the pitch, ignored) and stores byte by
//   byte. Where any plane address or pitch is not a multiple of 16, everything is read and
//   written byte by byte.
//   p010_to_rgb: reads the bytes of the block's pixels and its chroma sample only, byte by
//   byte (so any pitch works, even an odd one for p010's two-byte samples; 4-byte loads where
//   aligned ran no faster on an H200).
//
// Speed (kernel-bench, scripts/bench-kernels.sh, on an H200): nv12 BT.709 limited to rgb8,
// 8.06 us at 1080p and 23.26 us at 4K with one thread per chroma sample and byte accesses
// (the code before, kept as kernels/bench/variants/yuv_to_rgb_before.cu, bench variant
// "before"), 5.52 and 13.31 us with 16 x 2 pixels a thread.
//
// Range: |y_mul| < 2^17, |r_v|, |g_u|, |g_v|, |b_u| < 2^18 (coefficients of at most 2.2 scaled
// by 2^16 for 8-bit samples, of at most 0.55 scaled by 2^18 for 10-bit ones), factors
// |Y - y_offset| <= 1023 and |U - C|, |V - C| <= 512: every sum is below
// 2^17 * 1023 + 2 * 2^18 * 512 + 2^17 < 2^29 in size, in 32 bits, as on the CPU. Clamping a
// negative sum to 0 before the shift makes the result the floor the clamp to 0 needs, with no
// shift of a negative number.

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;
typedef int i32;

enum : u32 { LAYOUT_I420 = 0, LAYOUT_NV12 = 1 };

struct Coeffs {
    i32 y_offset, y_mul, r_v, g_u, g_v, b_u;
};

// One channel: clamp(max(sum, 0) >> F, 0, 255).
template <u32 F> __device__ __forceinline__ u8 channel(i32 sum) {
    return (u8)min(max(sum, 0) >> F, 255);
}

// A pixel of luma `y` and chroma sums dr, dg, db into p[0..BPP], with F fractional bits.
template <u32 BPP, u32 F>
__device__ __forceinline__ void put(u8* p, const Coeffs& c, i32 y, i32 dr, i32 dg, i32 db) {
    const i32 t = c.y_mul * (y - c.y_offset) + (1 << (F - 1));
    p[0] = channel<F>(t + dr);
    p[1] = channel<F>(t + dg);
    p[2] = channel<F>(t + db);
    if (BPP == 4) p[3] = 255;
}

// The first n bytes at p as words (vec: a full W-word load, which may read past n but not
// past the pitch), the rest zero.
template <int W>
__device__ __forceinline__ void load(const u8* p, u32 n, bool vec, u32 (&w)[W]) {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = 0;
    if (vec) {
        if constexpr (W == 4) {
            const uint4 v = *reinterpret_cast<const uint4*>(p);
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
        } else {
            const uint2 v = *reinterpret_cast<const uint2*>(p);
            w[0] = v.x, w[1] = v.y;
        }
        return;
    }
#pragma unroll
    for (u32 j = 0; j < 4 * W; ++j) {
        if (j < n) w[j >> 2] |= (u32)p[j] << (8 * (j & 3));
    }
}

// Byte i of the little-endian words w (i known at compile time after unrolling).
__device__ __forceinline__ i32 byte_of(const u32* w, u32 i) {
    return (i32)((w[i >> 2] >> (8 * (i & 3))) & 255u);
}

// 8-bit samples: F = 16, C = 128. A thread converts group g of a row pair: chroma samples
// 8g .. 8g + 7 of chroma row cy, pixels 16g .. 16g + 15 of rows 2cy and 2cy + 1.
template <u32 BPP, u32 LAYOUT>
__device__ __forceinline__ void convert16(const u8* y_plane, u64 y_pitch, const u8* u_plane,
                                          u64 u_pitch, const u8* v_plane, u64 v_pitch,
                                          u8* out, u64 out_pitch, u32 width, u32 height,
                                          const Coeffs& c) {
    const u32 cw = (width + 1) / 2, ch = (height + 1) / 2;
    const u32 groups = (cw + 7) / 8;
    u64 align = (u64)y_plane | y_pitch | (u64)u_plane | u_pitch | (u64)out | out_pitch;
    if (LAYOUT == LAYOUT_I420) align |= (u64)v_plane | v_pitch;
    const bool vec = (align & 15u) == 0;
    for (u32 cy = blockIdx.y; cy < ch; cy += gridDim.y) {
        for (u32 g = blockIdx.x * blockDim.x + threadIdx.x; g < groups;
             g += gridDim.x * blockDim.x) {
            const u32 cx0 = 8 * g, x0 = 16 * g;
            const u32 cvalid = min(cw - cx0, 8u);
            const u32 valid = min(width - x0, 16u);
            u32 uw[2], vw[2], uvw[4];
            if (LAYOUT == LAYOUT_I420) {
                load<2>(u_plane + (u64)cy * u_pitch + cx0, cvalid, vec, uw);
                load<2>(v_plane + (u64)cy * v_pitch + cx0, cvalid, vec, vw);
            } else {
                load<4>(u_plane + (u64)cy * u_pitch + 2 * cx0, 2 * cvalid, vec, uvw);
            }
            i32 dr[8], dg[8], db[8];
#pragma unroll
            for (u32 j = 0; j < 8; ++j) {
                i32 u, v;
                if (LAYOUT == LAYOUT_I420) {
                    u = byte_of(uw, j);
                    v = byte_of(vw, j);
                } else {
                    u = byte_of(uvw, 2 * j);
                    v = byte_of(uvw, 2 * j + 1);
                }
                dr[j] = c.r_v * (v - 128);
                dg[j] = c.g_u * (u - 128) + c.g_v * (v - 128);
                db[j] = c.b_u * (u - 128);
            }
            for (u32 y = 2 * cy; y < min(2 * cy + 2, height); ++y) {
                u32 yw[4];
                load<4>(y_plane + (u64)y * y_pitch + x0, valid, vec, yw);
                u32 o[4 * BPP];
#pragma unroll
                for (u32 i = 0; i < 4 * BPP; ++i) o[i] = 0;
#pragma unroll
                for (u32 i = 0; i < 16; ++i) {
                    const i32 t = c.y_mul * (byte_of(yw, i) - c.y_offset) + (1 << 15);
                    const u32 px = (u32)channel<16>(t + dr[i / 2]) |
                                   ((u32)channel<16>(t + dg[i / 2]) << 8) |
                                   ((u32)channel<16>(t + db[i / 2]) << 16) |
                                   (BPP == 4 ? 0xff000000u : 0u);
#pragma unroll
                    for (u32 k = 0; k < BPP; ++k) {
                        const u32 b = BPP * i + k;
                        o[b >> 2] |= ((px >> (8 * k)) & 255u) << (8 * (b & 3));
                    }
                }
                u8* dst = out + (u64)y * out_pitch + (u64)x0 * BPP;
                if (vec && valid == 16) {
#pragma unroll
                    for (u32 q = 0; q < BPP; ++q) {
                        reinterpret_cast<uint4*>(dst)[q] =
                            make_uint4(o[4 * q], o[4 * q + 1], o[4 * q + 2], o[4 * q + 3]);
                    }
                } else {
#pragma unroll
                    for (u32 j = 0; j < 16 * BPP; ++j) {
                        if (j < valid * BPP) dst[j] = (u8)(o[j >> 2] >> (8 * (j & 3)));
                    }
                }
            }
        }
    }
}

// The p010 sample at `p`: the high 10 bits of the little-endian u16 at p[0], p[1].
__device__ __forceinline__ i32 p010_sample(const u8* p) {
    return (i32)(((u32)p[0] | ((u32)p[1] << 8)) >> 6);
}

// The p010 samples at `p` and `p + 2`, from the 4 bytes read as one little-endian word. (Read
// as two samples apart, 4K to rgba8 took 47.5 us instead of 35.7 on an H200, to rgb8 25.0
// instead of 29.9: how the compiler schedules the byte loads and stores.)
__device__ __forceinline__ void p010_pair(const u8* p, i32& a, i32& b) {
    const u32 w = (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
    a = (i32)((w & 0xffff) >> 6);
    b = (i32)(w >> 22);
}

// 10-bit samples: F = 18, C = 512.
template <u32 BPP>
__device__ __forceinline__ void convert_p010(const u8* y_plane, u64 y_pitch, const u8* uv_plane,
                                             u64 uv_pitch, u8* out, u64 out_pitch, u32 width,
                                             u32 height, const Coeffs& c) {
    const u32 cw = (width + 1) / 2, ch = (height + 1) / 2;
    for (u32 cy = blockIdx.y; cy < ch; cy += gridDim.y) {
        for (u32 cx = blockIdx.x * blockDim.x + threadIdx.x; cx < cw;
             cx += gridDim.x * blockDim.x) {
            i32 u, v;
            p010_pair(uv_plane + (u64)cy * uv_pitch + 4 * (u64)cx, u, v);
            const i32 dr = c.r_v * (v - 512);
            const i32 dg = c.g_u * (u - 512) + c.g_v * (v - 512);
            const i32 db = c.b_u * (u - 512);
            const u32 x0 = 2 * cx;
            const bool right = x0 + 1 < width; // false on the last column of an odd width
            for (u32 y = 2 * cy; y < min(2 * cy + 2, height); ++y) {
                const u8* src = y_plane + (u64)y * y_pitch + 2 * (u64)x0;
                u8* dst = out + (u64)y * out_pitch + (u64)x0 * BPP;
                if (right) {
                    i32 y0, y1;
                    p010_pair(src, y0, y1);
                    put<BPP, 18>(dst, c, y0, dr, dg, db);
                    put<BPP, 18>(dst + BPP, c, y1, dr, dg, db);
                } else {
                    put<BPP, 18>(dst, c, p010_sample(src), dr, dg, db);
                }
            }
        }
    }
}

extern "C" __global__ void yuv420_to_rgb(const u8* y_plane, u64 y_pitch, const u8* u_plane,
                                         u64 u_pitch, const u8* v_plane, u64 v_pitch, u8* out,
                                         u64 out_pitch, u32 out_bpp, u32 width, u32 height,
                                         u32 layout, i32 y_offset, i32 y_mul, i32 r_v, i32 g_u,
                                         i32 g_v, i32 b_u) {
    const Coeffs c = {y_offset, y_mul, r_v, g_u, g_v, b_u};
    // Uniform branches: every thread takes the same one.
    if (out_bpp == 3 && layout == LAYOUT_I420) {
        convert16<3, LAYOUT_I420>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                  out_pitch, width, height, c);
    } else if (out_bpp == 3 && layout == LAYOUT_NV12) {
        convert16<3, LAYOUT_NV12>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                  out_pitch, width, height, c);
    } else if (out_bpp == 4 && layout == LAYOUT_I420) {
        convert16<4, LAYOUT_I420>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                  out_pitch, width, height, c);
    } else if (out_bpp == 4 && layout == LAYOUT_NV12) {
        convert16<4, LAYOUT_NV12>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                  out_pitch, width, height, c);
    }
}

extern "C" __global__ void p010_to_rgb(const u8* y_plane, u64 y_pitch, const u8* uv_plane,
                                       u64 uv_pitch, u8* out, u64 out_pitch, u32 out_bpp,
                                       u32 width, u32 height, i32 y_offset, i32 y_mul, i32 r_v,
                                       i32 g_u, i32 g_v, i32 b_u) {
    const Coeffs c = {y_offset, y_mul, r_v, g_u, g_v, b_u};
    // Uniform branches: every thread takes the same one.
    if (out_bpp == 3) {
        convert_p010<3>(y_plane, y_pitch, uv_plane, uv_pitch, out, out_pitch, width, height, c);
    } else if (out_bpp == 4) {
        convert_p010<4>(y_plane, y_pitch, uv_plane, uv_pitch, out, out_pitch, width, height, c);
    }
}
