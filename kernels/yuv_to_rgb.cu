// yuv_to_rgb.cu: the yuv-to-rgb stage, an i420 or nv12 frame to rgb8 or rgba8 (alpha 255).
//
// Mirrors plugins/yuv-to-rgb/src/yuv_to_rgb.rs `convert`: every pixel takes the U and V of
// its 2x2 block (sample (x / 2, y / 2)) and becomes, with `Coefficients::new(matrix, range)`,
//   t = y_mul (Y - y_offset) + 2^15
//   R = clamp(max(t + r_v (V - 128), 0) >> 16, 0, 255)
//   G = clamp(max(t + g_u (U - 128) + g_v (V - 128), 0) >> 16, 0, 255)
//   B = clamp(max(t + b_u (U - 128), 0) >> 16, 0, 255)
// Fixed point with 16 fractional bits, integer only: the output is the CPU's byte for byte.
//
// Entry point:
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
//   11  layout     u32        0 i420, 1 nv12 (`ChromaLayout` in declaration order); any other
//                             value writes nothing
//   12..17                    the fields of `Coefficients::new(matrix, range)` in declaration
//                             order, each an i32: y_offset, y_mul, r_v, g_u, g_v, b_u
//
// Launch: one thread per chroma sample, that is per 2x2 block of pixels (cut to the frame at
// an odd right column or bottom row), 1-D blocks, a 2-D grid:
//   block = (128, 1, 1)                                   (any blockDim.x works)
//   grid  = (ceil(ceil(width / 2) / block.x), min(ceil(height / 2), 65535), 1)
// Both grid dimensions are grid-stride loops, so a smaller grid is also correct. No shared
// memory.
//
// Memory: reads the bytes of the block's pixels and its chroma sample only, byte by byte;
// writes exactly the `row_bytes` bytes of each output row, never row padding.
//
// Range: |y_mul| < 2^17, |r_v|, |g_u|, |g_v|, |b_u| < 2^18 (coefficients of at most 2.2 scaled
// by 2^16), factors |Y - y_offset| <= 255 and |U - 128|, |V - 128| <= 128: every sum is below
// 2^17 * 255 + 2 * 2^18 * 128 + 2^15 < 2^27 in size, in 32 bits, as on the CPU. Clamping a
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

// One channel: clamp(max(sum, 0) >> 16, 0, 255).
__device__ __forceinline__ u8 channel(i32 sum) {
    return (u8)min(max(sum, 0) >> 16, 255);
}

template <u32 BPP>
__device__ __forceinline__ void put(u8* p, const Coeffs& c, i32 y, i32 dr, i32 dg, i32 db) {
    const i32 t = c.y_mul * (y - c.y_offset) + (1 << 15);
    p[0] = channel(t + dr);
    p[1] = channel(t + dg);
    p[2] = channel(t + db);
    if (BPP == 4) p[3] = 255;
}

template <u32 BPP, u32 LAYOUT>
__device__ __forceinline__ void convert(const u8* y_plane, u64 y_pitch, const u8* u_plane,
                                        u64 u_pitch, const u8* v_plane, u64 v_pitch, u8* out,
                                        u64 out_pitch, u32 width, u32 height, const Coeffs& c) {
    const u32 cw = (width + 1) / 2, ch = (height + 1) / 2;
    for (u32 cy = blockIdx.y; cy < ch; cy += gridDim.y) {
        for (u32 cx = blockIdx.x * blockDim.x + threadIdx.x; cx < cw;
             cx += gridDim.x * blockDim.x) {
            i32 u, v;
            if (LAYOUT == LAYOUT_I420) {
                u = u_plane[(u64)cy * u_pitch + cx];
                v = v_plane[(u64)cy * v_pitch + cx];
            } else {
                u = u_plane[(u64)cy * u_pitch + 2 * cx];
                v = u_plane[(u64)cy * u_pitch + 2 * cx + 1];
            }
            const i32 dr = c.r_v * (v - 128);
            const i32 dg = c.g_u * (u - 128) + c.g_v * (v - 128);
            const i32 db = c.b_u * (u - 128);
            const u32 x0 = 2 * cx;
            const bool right = x0 + 1 < width; // false on the last column of an odd width
            for (u32 y = 2 * cy; y < min(2 * cy + 2, height); ++y) {
                const u8* src = y_plane + (u64)y * y_pitch + x0;
                u8* dst = out + (u64)y * out_pitch + (u64)x0 * BPP;
                put<BPP>(dst, c, src[0], dr, dg, db);
                if (right) put<BPP>(dst + BPP, c, src[1], dr, dg, db);
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
        convert<3, LAYOUT_I420>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                out_pitch, width, height, c);
    } else if (out_bpp == 3 && layout == LAYOUT_NV12) {
        convert<3, LAYOUT_NV12>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                out_pitch, width, height, c);
    } else if (out_bpp == 4 && layout == LAYOUT_I420) {
        convert<4, LAYOUT_I420>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                out_pitch, width, height, c);
    } else if (out_bpp == 4 && layout == LAYOUT_NV12) {
        convert<4, LAYOUT_NV12>(y_plane, y_pitch, u_plane, u_pitch, v_plane, v_pitch, out,
                                out_pitch, width, height, c);
    }
}
