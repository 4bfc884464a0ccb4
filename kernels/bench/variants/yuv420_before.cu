// yuv420_before.cu: kernels/yuv420.cu as it was before the dp2a fast path (kernel-bench
// variant "before", so that one run shows the production kernel beside its predecessor); the
// same output byte for byte, the same entry point, arguments and launch. What follows is its
// header as it was.
//
// yuv420.cu: the yuv420 stage, an rgb8 or rgba8 frame (alpha ignored) to i420 or nv12.
//
// Mirrors plugins/yuv420/src/yuv420.rs `convert`: Y of every pixel with
// `Coefficients::luma`, and (U, V) of every 2x2 block, cut to the frame at an odd right
// column or bottom row, with `Coefficients::chroma` of the block's channel sums and pixel
// count n (4, 2 or 1). Fixed point with 16 fractional bits, integer only: the output is the
// CPU's byte for byte.
//
// Entry point:
//
//   extern "C" __global__ void rgb_to_yuv420(
//       const u8* in, u64 in_pitch, u32 in_bpp,
//       u8* y_plane, u64 y_pitch, u8* u_plane, u64 u_pitch, u8* v_plane, u64 v_pitch,
//       u32 width, u32 height, u32 layout,
//       i32 y_offset, i32 y_r, i32 y_g, i32 y_b,
//       i32 u_r, i32 u_g, i32 u_b, i32 v_r, i32 v_g, i32 v_b)
//
//    #  name      type       value
//    0  in        const u8*  device address of the rgb8/rgba8 plane's first row
//    1  in_pitch  u64        bytes from one input row to the next
//    2  in_bpp    u32        3 (rgb8) or 4 (rgba8); any other value writes nothing
//    3  y_plane   u8*        device address of the Y plane's first row
//    4  y_pitch   u64
//    5  u_plane   u8*        i420: the U plane; nv12: the interleaved UV plane
//    6  u_pitch   u64        its pitch
//    7  v_plane   u8*        i420: the V plane; nv12: unused (pass 0)
//    8  v_pitch   u64        i420: its pitch; nv12: unused (pass 0)
//    9  width     u32        pixels, 1..=32768
//   10  height    u32        rows, 1..=32768
//   11  layout    u32        0 i420, 1 nv12 (`ChromaLayout` in declaration order); any other
//                            value writes nothing
//   12..21                   the fields of `Coefficients::new(matrix, range)` in declaration
//                            order, each an i32: y_offset, y_r, y_g, y_b, u_r, u_g, u_b, v_r,
//                            v_g, v_b
//
// Launch: one thread per 16 x 2 pixels (two rows of 16 Y bytes, 8 chroma samples), 1-D
// blocks, a 2-D grid:
//   block = (128, 1, 1)                                   (any blockDim.x works)
//   grid  = (ceil(ceil(width / 16) / block.x), min(ceil(height / 2), 65535), 1)
// Both grid dimensions are grid-stride loops, so a smaller grid is also correct. No shared
// memory. A thread covers 8 whole 2x2 blocks rather than one, so that with the layout rule
// (pitches multiples of 64, planes on 256-byte boundaries) every access is a full uint4
// (input rows, Y rows, nv12 UV rows) or uint2 (i420 U and V rows).
//
// Memory: writes exactly the `row_bytes` bytes of each output row, never row padding. When
// every used plane address and pitch is a multiple of 16, rows are read in uint4 pieces (the
// last piece of a row may cover up to 15 padding bytes after the pixels, inside the pitch,
// ignored) and written in uint4/uint2 pieces, with byte stores for a row's partial last
// piece; otherwise everything is read and written byte by byte.
//
// Range: the chroma numerator 128 * n * 2^16 + c_r R + c_g G + c_b B + n * 2^15 (R, G, B sums
// of up to 4 pixels) is computed in 32 bits, like luma on the CPU. `Coefficients::new` makes
// every coefficient round(k * 2^16) with |k| <= 1, so |numerator| < 2^26: no overflow, and
// the CPU's i64 arithmetic gives the same value. Dividing the (clamped, non-negative)
// numerator by n * 2^16 with n in {1, 2, 4} is the right shift by 16 + log2(n).

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;
typedef int i32;

enum : u32 { LAYOUT_I420 = 0, LAYOUT_NV12 = 1 };

struct Coeffs {
    i32 y_offset, y_r, y_g, y_b, u_r, u_g, u_b, v_r, v_g, v_b;
};

// Coefficients::luma: ((y_offset << 16) + y_r R + y_g G + y_b B + 32768) >> 16, clamped.
__device__ __forceinline__ u32 luma(const Coeffs& c, i32 r, i32 g, i32 b) {
    const i32 sum = (c.y_offset << 16) + c.y_r * r + c.y_g * g + c.y_b * b + (1 << 15);
    return (u32)min(max(sum, 0) >> 16, 255);
}

// One output of Coefficients::chroma: (max(128 one + cr R + cg G + cb B + one / 2, 0) / one)
// clamped to 255, with one = n << 16 and n = 1 << log2n.
__device__ __forceinline__ u32 chroma(i32 cr, i32 cg, i32 cb, i32 r, i32 g, i32 b, u32 log2n) {
    const i32 one = 1 << (16 + log2n);
    const i32 num = 128 * one + cr * r + cg * g + cb * b + one / 2;
    return (u32)min(max(num, 0) >> (16 + log2n), 255);
}

// The first n bytes at p as little-endian words, the rest zero; nothing is read when n == 0.
// A full uint4 when vec, which may read past n but never past the next 16-byte boundary.
__device__ __forceinline__ void load16(const u8* p, i32 n, bool vec, u32* w) {
    w[0] = w[1] = w[2] = w[3] = 0;
    if (n <= 0) return;
    if (vec) {
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
        return;
    }
#pragma unroll
    for (i32 j = 0; j < 16; ++j) {
        if (j < n) w[j >> 2] |= (u32)p[j] << (8 * (j & 3));
    }
}

// Store the first n (<= 4 * W) bytes of the W words w at p: one uint4 (W == 4) or uint2
// (W == 2) when they are all wanted and vec, else byte by byte.
template <int W>
__device__ __forceinline__ void store(u8* p, const u32 (&w)[W], u32 n, bool vec) {
    if (vec && n >= 4 * W) {
        if constexpr (W == 4) {
            *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
            *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
        }
        return;
    }
#pragma unroll
    for (u32 j = 0; j < 4 * W; ++j) {
        if (j < n) p[j] = (u8)(w[j >> 2] >> (8 * (j & 3)));
    }
}

// Byte i of the little-endian words w (i known at compile time after unrolling).
__device__ __forceinline__ i32 byte_at(const u32* w, u32 i) {
    return (i32)((w[i >> 2] >> (8 * (i & 3))) & 255u);
}

template <u32 BPP, u32 LAYOUT>
__device__ __forceinline__ void convert(const u8* in, u64 in_pitch, u8* y_plane, u64 y_pitch,
                                        u8* u_plane, u64 u_pitch, u8* v_plane, u64 v_pitch,
                                        u32 width, u32 height, const Coeffs& c) {
    const u32 cw = (width + 1) / 2, ch = (height + 1) / 2;
    const u32 groups = (width + 15) / 16;
    const u32 in_row_bytes = width * BPP;
    u64 align = (u64)in | in_pitch | (u64)y_plane | y_pitch | (u64)u_plane | u_pitch;
    if (LAYOUT == LAYOUT_I420) align |= (u64)v_plane | v_pitch;
    const bool vec = (align & 15u) == 0;

    for (u32 cy = blockIdx.y; cy < ch; cy += gridDim.y) {
        const u32 y0 = 2 * cy;
        const bool has_row1 = y0 + 1 < height; // false on the last row of an odd height
        const u8* src0 = in + (u64)y0 * in_pitch;
        const u8* src1 = src0 + in_pitch;
        u8* dst_y0 = y_plane + (u64)y0 * y_pitch;
        u8* dst_y1 = dst_y0 + y_pitch;

        for (u32 gx = blockIdx.x * blockDim.x + threadIdx.x; gx < groups;
             gx += gridDim.x * blockDim.x) {
            const u32 x0 = 16 * gx;
            const u32 valid = min(width - x0, 16u); // pixels of this group inside the row
            const u32 base = x0 * BPP;

            // The group's 16 pixels of both rows, as the words of BPP uint4 pieces each.
            u32 a[4 * BPP], b[4 * BPP];
#pragma unroll
            for (u32 q = 0; q < BPP; ++q) {
                const i32 n = (i32)in_row_bytes - (i32)(base + 16 * q);
                load16(src0 + base + 16 * q, n, vec, a + 4 * q);
                load16(src1 + base + 16 * q, has_row1 ? n : 0, vec, b + 4 * q);
            }

            u32 y0w[4] = {0, 0, 0, 0}, y1w[4] = {0, 0, 0, 0};
            u32 uw[2] = {0, 0}, vw[2] = {0, 0}, uvw[4] = {0, 0, 0, 0};
#pragma unroll
            for (u32 j = 0; j < 8; ++j) { // chroma block j: pixels 2j, 2j + 1 of both rows
                const u32 p = 2 * j;
                const i32 r00 = byte_at(a, BPP * p), g00 = byte_at(a, BPP * p + 1),
                          b00 = byte_at(a, BPP * p + 2);
                const i32 r01 = byte_at(a, BPP * p + BPP), g01 = byte_at(a, BPP * p + BPP + 1),
                          b01 = byte_at(a, BPP * p + BPP + 2);
                const i32 r10 = byte_at(b, BPP * p), g10 = byte_at(b, BPP * p + 1),
                          b10 = byte_at(b, BPP * p + 2);
                const i32 r11 = byte_at(b, BPP * p + BPP), g11 = byte_at(b, BPP * p + BPP + 1),
                          b11 = byte_at(b, BPP * p + BPP + 2);
                // Pixels 2j and 2j + 1 share a Y word (p is even): bytes p & 3, (p & 3) + 1.
                y0w[p >> 2] |= (luma(c, r00, g00, b00) | (luma(c, r01, g01, b01) << 8))
                               << (8 * (p & 3));
                y1w[p >> 2] |= (luma(c, r10, g10, b10) | (luma(c, r11, g11, b11) << 8))
                               << (8 * (p & 3));

                // The block cut to the frame: the right pixel only if inside the row, the
                // lower row only if there is one. Pixels outside count 0 and add nothing
                // (their bytes may be row padding). Sums are exact, so order is irrelevant.
                const bool right = p + 1 < valid;
                i32 sr = r00, sg = g00, sb = b00;
                if (right) sr += r01, sg += g01, sb += b01;
                if (has_row1) {
                    sr += r10, sg += g10, sb += b10;
                    if (right) sr += r11, sg += g11, sb += b11;
                }
                const u32 log2n = (right ? 1u : 0u) + (has_row1 ? 1u : 0u);
                const u32 u = chroma(c.u_r, c.u_g, c.u_b, sr, sg, sb, log2n);
                const u32 v = chroma(c.v_r, c.v_g, c.v_b, sr, sg, sb, log2n);
                if (LAYOUT == LAYOUT_I420) {
                    uw[j >> 2] |= u << (8 * (j & 3));
                    vw[j >> 2] |= v << (8 * (j & 3));
                } else {
                    uvw[j >> 1] |= (u | (v << 8)) << (16 * (j & 1));
                }
            }

            store<4>(dst_y0 + x0, y0w, valid, vec);
            if (has_row1) store<4>(dst_y1 + x0, y1w, valid, vec);
            const u32 cvalid = min(cw - 8 * gx, 8u); // chroma samples of this group
            if (LAYOUT == LAYOUT_I420) {
                store<2>(u_plane + (u64)cy * u_pitch + 8 * gx, uw, cvalid, vec);
                store<2>(v_plane + (u64)cy * v_pitch + 8 * gx, vw, cvalid, vec);
            } else {
                store<4>(u_plane + (u64)cy * u_pitch + 16 * gx, uvw, 2 * cvalid, vec);
            }
        }
    }
}

extern "C" __global__ void rgb_to_yuv420(const u8* in, u64 in_pitch, u32 in_bpp, u8* y_plane,
                                         u64 y_pitch, u8* u_plane, u64 u_pitch, u8* v_plane,
                                         u64 v_pitch, u32 width, u32 height, u32 layout,
                                         i32 y_offset, i32 y_r, i32 y_g, i32 y_b, i32 u_r,
                                         i32 u_g, i32 u_b, i32 v_r, i32 v_g, i32 v_b) {
    const Coeffs c = {y_offset, y_r, y_g, y_b, u_r, u_g, u_b, v_r, v_g, v_b};
    // Uniform branches: every thread takes the same one.
    if (in_bpp == 3 && layout == LAYOUT_I420) {
        convert<3, LAYOUT_I420>(in, in_pitch, y_plane, y_pitch, u_plane, u_pitch, v_plane,
                                v_pitch, width, height, c);
    } else if (in_bpp == 3 && layout == LAYOUT_NV12) {
        convert<3, LAYOUT_NV12>(in, in_pitch, y_plane, y_pitch, u_plane, u_pitch, v_plane,
                                v_pitch, width, height, c);
    } else if (in_bpp == 4 && layout == LAYOUT_I420) {
        convert<4, LAYOUT_I420>(in, in_pitch, y_plane, y_pitch, u_plane, u_pitch, v_plane,
                                v_pitch, width, height, c);
    } else if (in_bpp == 4 && layout == LAYOUT_NV12) {
        convert<4, LAYOUT_NV12>(in, in_pitch, y_plane, y_pitch, u_plane, u_pitch, v_plane,
                                v_pitch, width, height, c);
    }
}
