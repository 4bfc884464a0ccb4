// yuv_to_rgb_x16.cu: a candidate for kernels/yuv_to_rgb.cu (kernel-bench variant "x16"), the
// same output byte for byte.
//
// The 8-bit entry point takes one thread per 8 chroma samples of a row pair (16 x 2 pixels)
// instead of one per sample: Y read as one uint4 a row, the 8 U and V as one uint2 each
// (i420) or one uint4 (nv12), and the 16 pixels of a row stored as 3 (rgb8) or 4 (rgba8)
// uint4; every byte's place is fixed at compile time. Where a plane or pitch is not
// 16-aligned, or at a row's partial last group, bytes are read and written one by one.
// p010_to_rgb is yuv_to_rgb.cu's, unchanged (the launcher loads both entry points).
//
// Entry points (yuv_to_rgb.cu's argument lists):
//
//   extern "C" __global__ void yuv420_to_rgb(
//       const u8* y_plane, u64 y_pitch, const u8* u_plane, u64 u_pitch,
//       const u8* v_plane, u64 v_pitch, u8* out, u64 out_pitch, u32 out_bpp,
//       u32 width, u32 height, u32 layout,
//       i32 y_offset, i32 y_mul, i32 r_v, i32 g_u, i32 g_v, i32 b_u)
//   extern "C" __global__ void p010_to_rgb(
//       const u8* y_plane, u64 y_pitch, const u8* uv_plane, u64 uv_pitch,
//       u8* out, u64 out_pitch, u32 out_bpp, u32 width, u32 height,
//       i32 y_offset, i32 y_mul, i32 r_v, i32 g_u, i32 g_v, i32 b_u)
//
// Launch: 1-D blocks, grid (ceil(ceil(width / 2) / (8 * block.x)), min(ceil(height / 2),
// 65535), 1) (the launcher's per_thread 8); both dimensions are grid-stride loops. Reads may
// cover padding after a row's last pixel (inside the pitch, ignored); writes exactly the
// row's pixel bytes.

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

__device__ __forceinline__ i32 byte_of(const u32* w, u32 i) {
    return (i32)((w[i >> 2] >> (8 * (i & 3))) & 255u);
}

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
