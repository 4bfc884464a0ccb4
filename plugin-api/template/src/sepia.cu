// sepia.cu: the sepia stage's kernel, the same integer arithmetic as `tone` in sepia.rs, so
// the output is the cpu path's byte for byte.
//
// Entry point:
//
//   extern "C" __global__ void sepia(const u8* in, u64 in_pitch, u8* out, u64 out_pitch,
//                                    u32 width, u32 height, u32 channels, u32 k)
//
//    #  name       type       value
//    0  in         const u8*  device address of the input plane's first row
//    1  in_pitch   u64        bytes from one input row to the next
//    2  out        u8*        device address of the output plane's first row
//    3  out_pitch  u64        bytes from one output row to the next
//    4  width      u32        pixels
//    5  height     u32        rows
//    6  channels   u32        3 (rgb8) or 4 (rgba8: alpha copied)
//    7  k          u32        round(strength * 256), 0..=256
//
// Launch: one thread per pixel, grid-stride in both dimensions:
//   block = (128, 1, 1), grid = (ceil(width / 128), min(height, 65535), 1)
// Writes the pixels of each output row, never its padding.

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ u32 mix(u32 v, u32 s, u32 k) {
    return (v * (256u - k) + s * k + 128u) >> 8;
}

extern "C" __global__ void sepia(const u8* in, u64 in_pitch, u8* out, u64 out_pitch,
                                 u32 width, u32 height, u32 channels, u32 k) {
    for (u32 y = blockIdx.y; y < height; y += gridDim.y) {
        const u8* src = in + y * in_pitch;
        u8* dst = out + y * out_pitch;
        for (u32 x = blockIdx.x * blockDim.x + threadIdx.x; x < width; x += gridDim.x * blockDim.x) {
            const u8* p = src + (u64)x * channels;
            u8* q = dst + (u64)x * channels;
            u32 r = p[0], g = p[1], b = p[2];
            u32 sr = min(255u, (393u * r + 769u * g + 189u * b + 500u) / 1000u);
            u32 sg = min(255u, (349u * r + 686u * g + 168u * b + 500u) / 1000u);
            u32 sb = min(255u, (272u * r + 534u * g + 131u * b + 500u) / 1000u);
            q[0] = (u8)mix(r, sr, k);
            q[1] = (u8)mix(g, sg, k);
            q[2] = (u8)mix(b, sb, k);
            if (channels == 4) q[3] = p[3];
        }
    }
}
