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
// Both grid dimensions are grid-stride loops, so a smaller grid is also correct (the
// launcher's `per_thread` divides grid.x). No shared memory. A thread covers 8 whole 2x2
// blocks rather than one, so that with the layout rule (pitches multiples of 64, planes on
// 256-byte boundaries) every access is a full uint4 (input rows, Y rows, nv12 UV rows) or
// uint2 (i420 U and V rows).
//
// Memory: writes exactly the `row_bytes` bytes of each output row, never row padding. When
// every used plane address and pitch is a multiple of 16, rows are read in uint4 pieces (the
// last piece of a row may cover up to 15 padding bytes after the pixels, inside the pitch,
// ignored) and written in uint4/uint2 pieces, with byte stores for a row's partial last
// piece; otherwise everything is read and written byte by byte.
//
// Speed (kernel-bench, scripts/bench-kernels.sh, on an H200): rgb8 to i420 BT.709 limited,
// 5.40 us at 1080p and 12.21 us at 4K with the code before this arithmetic (kept as
// kernels/bench/variants/yuv420_before.cu, bench variant "before"), 3.96 and 8.73 us with it.
//
// Arithmetic. A thread's group takes one of two paths between the same loads and stores:
//
// The fast path, for whole groups (about 300 SASS instructions a thread for an rgb8 group on
// sm_90 with NVRTC 13.0, 160 of them dp2a, against about 600 for the general path):
//
// - Y of a pixel is two dp2a (16-bit x 8-bit two-way dot products accumulated in 32 bits):
//   the pixel's three channel bytes, read straight from the loaded words, against the
//   coefficients packed as 16-bit pairs. With the coefficients' bounds checked once (below)
//   the sum is in [0, 2^24), so Y is its byte 2 without a clamp, and four Y bytes are packed
//   with three byte permutes.
// - U and V of a 2x2 block are three dp2a a row (the block's 6 bytes of a row are three whole
//   16-bit halves of the words for rgb8; four dp2a for rgba8), against the negated
//   coefficients (signed 16-bit; see below), accumulated from ~K so that the accumulator is
//   ~numerator and an arithmetic shift gives ~floor(numerator / 2^18): clamped to
//   [-256, -1], its low bytes packed and inverted are the CPU's min(max(num, 0) / 2^18, 255).
//
// It runs for a thread's group when all of these hold: every used plane address and pitch is
// a multiple of 16, the group's 16 pixels are inside the row (not a row's partial last
// group), the row pair has two rows (not the last row of an odd height), and the
// coefficients are in range: 0 <= y_r, y_g, y_b <= 65535, 0 <= y_offset <= 255,
// (y_offset << 16) + 255 (y_r + y_g + y_b) + 32768 < 2^24 (Y cannot clamp), and
// -32767 <= each of u_*, v_* <= 32768 (the negation fits a signed 16-bit half). Every
// `Coefficients::new(matrix, range)` is in range (BT.601 and BT.709, limited and full: the
// chroma coefficient 0.5 of full range is 32768, which is why the negated ones are used);
// plugins/yuv420/src/cuda.rs tests this and the chroma arithmetic below.
//
// The general path, for everything else (a partial group, the last row of an odd height,
// misaligned planes, coefficients out of the fast path's range): per pixel the bytes are
// extracted, Y is `luma` (three multiply-adds and a clamp), and each block's chroma is
// `chroma` of its sums with selects for its pixel count.
//
// Exactness of the fast path: the dp2a sums are the CPU's integer sums (every product and
// partial sum below 2^31 in range), only added in another order. Chroma: with
// num = 128 one + one / 2 + c_r R + c_g G + c_b B (R, G, B sums of the block's 4 pixels,
// one = 2^18), the accumulator is acc = ~(128 one + one / 2) + (-c_r) R + (-c_g) G +
// (-c_b) B = -num - 1 = ~num, and for any integer x, (~x) >> 18 == ~(x >> 18) (arithmetic
// shifts), so s = acc >> 18 = ~q with q = floor(num / 2^18); clamp(q, 0, 255) =
// ~clamp(s, -256, -1), whose low byte is 255 - (low byte of clamp(s, -256, -1)). For num < 0
// the CPU clamps num to 0 first, giving 0, as does clamp(q, 0, 255).
//
// Range of the general path: the chroma numerator 128 * n * 2^16 + c_r R + c_g G + c_b B +
// n * 2^15 (R, G, B sums of up to 4 pixels) is computed in 32 bits, like luma on the CPU.
// `Coefficients::new` makes every coefficient round(k * 2^16) with |k| <= 1, so
// |numerator| < 2^26: no overflow, and the CPU's i64 arithmetic gives the same value.
// Dividing the (clamped, non-negative) numerator by n * 2^16 with n in {1, 2, 4} is the right
// shift by 16 + log2(n).

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

// ---- the fast path (see the header) ------------------------------------------------------

// dp2a: c + a.lo16 * b.byte(k) + a.hi16 * b.byte(k + 1), k = 0 (lo) or 2 (hi); b's bytes
// unsigned, a's halves unsigned (luma) or signed (chroma).
template <bool HI> __device__ __forceinline__ u32 dp2a_uu(u32 a, u32 b, u32 c) {
    u32 d;
    if (HI) {
        asm("dp2a.hi.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    } else {
        asm("dp2a.lo.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    }
    return d;
}

template <bool HI> __device__ __forceinline__ i32 dp2a_su(u32 a, u32 b, i32 c) {
    i32 d;
    if (HI) {
        asm("dp2a.hi.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    } else {
        asm("dp2a.lo.s32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    }
    return d;
}

// The 16-bit pair (k[lo], k[hi]) for dp2a's a; channel 3 is "no channel" (weight 0).
__device__ __forceinline__ u32 pair(const u32 (&k)[3], u32 lo, u32 hi) {
    return (lo < 3 ? k[lo] & 0xffffu : 0u) | (hi < 3 ? k[hi] << 16 : 0u);
}

// Which channel (0 R, 1 G, 2 B) byte i of a row is, counting only the pixels [p0, p0 + np)
// and 3 for any other byte (alpha, or outside those pixels). All compile-time after unrolling.
template <u32 BPP> __device__ __forceinline__ u32 channel_of(u32 i, u32 p0, u32 np) {
    if (i < BPP * p0 || i >= BPP * (p0 + np)) return 3;
    const u32 ch = (i - BPP * p0) % BPP;
    return ch < 3 ? ch : 3;
}

// acc + sum over the channel bytes of pixels [p0, p0 + np) of row words w of weight[channel],
// one dp2a per 16-bit half holding any of them. SIGNED: k holds signed 16-bit weights.
template <u32 BPP, bool SIGNED, typename T>
__device__ __forceinline__ T dot(const u32* w, u32 p0, u32 np, const u32 (&k)[3], T acc) {
    const u32 first = (BPP * p0) >> 1, last = (BPP * (p0 + np) - 1) >> 1;
#pragma unroll
    for (u32 h = first; h <= last; ++h) {
        const u32 lo = channel_of<BPP>(2 * h, p0, np), hi = channel_of<BPP>(2 * h + 1, p0, np);
        if (lo == 3 && hi == 3) continue;
        const u32 a = pair(k, lo, hi), b = w[h >> 1];
        if constexpr (SIGNED) {
            acc = (h & 1) ? dp2a_su<true>(a, b, acc) : dp2a_su<false>(a, b, acc);
        } else {
            acc = (h & 1) ? dp2a_uu<true>(a, b, acc) : dp2a_uu<false>(a, b, acc);
        }
    }
    return acc;
}

// Byte 2 of each of s0..s3 (Y values), as one word.
__device__ __forceinline__ u32 pack_byte2(u32 s0, u32 s1, u32 s2, u32 s3) {
    return __byte_perm(__byte_perm(s0, s1, 0x0062), __byte_perm(s2, s3, 0x0062), 0x5410);
}

// Byte 0 of each of s0..s3, as one word.
__device__ __forceinline__ u32 pack_byte0(u32 s0, u32 s1, u32 s2, u32 s3) {
    return __byte_perm(__byte_perm(s0, s1, 0x0040), __byte_perm(s2, s3, 0x0040), 0x5410);
}

// ~clamp(q, 0, 255) of the chroma accumulator acc = ~num: clamp(acc >> 18, -256, -1).
__device__ __forceinline__ u32 chroma_not(i32 acc) {
    return (u32)min(max(acc >> 18, -256), -1);
}

// The fast path's constants: coefficient pairs' ingredients and the accumulators' starts.
struct Fast {
    u32 y[3];    // y_r, y_g, y_b (each in [0, 65535])
    u32 nu[3];   // -u_r, -u_g, -u_b (each a signed 16-bit value)
    u32 nv[3];   // -v_r, -v_g, -v_b
    u32 y_start; // (y_offset << 16) + 32768
    i32 c_start; // ~(128 * 2^18 + 2^17)
};

// Whether the fast path's arithmetic is exact for these coefficients (see the header).
__device__ __forceinline__ bool fast_coeffs(const Coeffs& c) {
    const long long y_max =
        ((long long)c.y_offset << 16) + 255ll * ((long long)c.y_r + c.y_g + c.y_b) + 32768;
    bool ok = c.y_offset >= 0 && c.y_offset <= 255 && y_max < (1ll << 24);
    const i32 yk[3] = {c.y_r, c.y_g, c.y_b};
    const i32 ck[6] = {c.u_r, c.u_g, c.u_b, c.v_r, c.v_g, c.v_b};
#pragma unroll
    for (int i = 0; i < 3; ++i) ok = ok && yk[i] >= 0 && yk[i] <= 65535;
#pragma unroll
    for (int i = 0; i < 6; ++i) ok = ok && ck[i] >= -32767 && ck[i] <= 32768;
    return ok;
}

// One whole group (16 pixels of two rows, all inside the frame) from the loaded words a (row
// 0) and b (row 1): both Y rows, and U and V (i420) or UV (nv12) of its 8 blocks, stored as
// uint4 / uint2 (every address a multiple of 16, checked by the caller).
template <u32 BPP, u32 LAYOUT>
__device__ __forceinline__ void fast_group(const u32* a, const u32* b, const Fast& f,
                                           u8* dst_y0, u8* dst_y1, u8* dst_u, u8* dst_v) {
    u32 y0w[4], y1w[4];
#pragma unroll
    for (u32 q = 0; q < 4; ++q) { // Y of pixels 4q .. 4q + 3
        u32 s0[4], s1[4];
#pragma unroll
        for (u32 i = 0; i < 4; ++i) {
            s0[i] = dot<BPP, false>(a, 4 * q + i, 1, f.y, f.y_start);
            s1[i] = dot<BPP, false>(b, 4 * q + i, 1, f.y, f.y_start);
        }
        y0w[q] = pack_byte2(s0[0], s0[1], s0[2], s0[3]);
        y1w[q] = pack_byte2(s1[0], s1[1], s1[2], s1[3]);
    }
    *reinterpret_cast<uint4*>(dst_y0) = make_uint4(y0w[0], y0w[1], y0w[2], y0w[3]);
    *reinterpret_cast<uint4*>(dst_y1) = make_uint4(y1w[0], y1w[1], y1w[2], y1w[3]);

    u32 un[8], vn[8]; // ~U, ~V of blocks 0..7 in their low bytes
#pragma unroll
    for (u32 j = 0; j < 8; ++j) {
        i32 u = dot<BPP, true>(a, 2 * j, 2, f.nu, f.c_start);
        u = dot<BPP, true>(b, 2 * j, 2, f.nu, u);
        i32 v = dot<BPP, true>(a, 2 * j, 2, f.nv, f.c_start);
        v = dot<BPP, true>(b, 2 * j, 2, f.nv, v);
        un[j] = chroma_not(u);
        vn[j] = chroma_not(v);
    }
    if (LAYOUT == LAYOUT_I420) {
        *reinterpret_cast<uint2*>(dst_u) = make_uint2(~pack_byte0(un[0], un[1], un[2], un[3]),
                                                      ~pack_byte0(un[4], un[5], un[6], un[7]));
        *reinterpret_cast<uint2*>(dst_v) = make_uint2(~pack_byte0(vn[0], vn[1], vn[2], vn[3]),
                                                      ~pack_byte0(vn[4], vn[5], vn[6], vn[7]));
    } else {
        u32 uv[4];
#pragma unroll
        for (u32 k = 0; k < 4; ++k) {
            uv[k] = ~pack_byte0(un[2 * k], vn[2 * k], un[2 * k + 1], vn[2 * k + 1]);
        }
        *reinterpret_cast<uint4*>(dst_u) = make_uint4(uv[0], uv[1], uv[2], uv[3]);
    }
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
    // The fast path's constants (loop-invariant; see the header).
    const bool fast = vec && fast_coeffs(c);
    const Fast f = {{(u32)c.y_r, (u32)c.y_g, (u32)c.y_b},
                    {(u32)-c.u_r, (u32)-c.u_g, (u32)-c.u_b},
                    {(u32)-c.v_r, (u32)-c.v_g, (u32)-c.v_b},
                    ((u32)c.y_offset << 16) + 32768u,
                    ~(128 * (1 << 18) + (1 << 17))};

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

            if (fast && valid == 16 && has_row1) {
                u8* dst_u = u_plane + (u64)cy * u_pitch + (LAYOUT == LAYOUT_I420 ? 8 : 16) * gx;
                u8* dst_v = LAYOUT == LAYOUT_I420 ? v_plane + (u64)cy * v_pitch + 8 * gx : nullptr;
                fast_group<BPP, LAYOUT>(a, b, f, dst_y0 + x0, dst_y1 + x0, dst_u, dst_v);
                continue;
            }

            // The general path: a partial group, the last row of an odd height, misaligned
            // planes or coefficients out of the fast path's range.
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
