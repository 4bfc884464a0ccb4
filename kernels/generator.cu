// generator.cu: the generator stage's test patterns, drawn straight into an rgb8, rgba8 or
// gray8 plane.
//
// Mirrors plugins/generator/src/generator.rs: `PatternFrame::fill_row` for every row, i.e.
// `bars_rgb`, `gradient_rgb`, `noise_rgb` (MurmurHash3_x86_32 continued from `noise_state`),
// `box_rgb`, plus `luma` for gray8 and alpha 255 for rgba8. Byte for byte the same output;
// all integer arithmetic, 32 bits is enough because width and height are <= 32768 (MAX_SIZE).
//
// Entry points, one per output format (the same argument list for all three):
//
//   extern "C" __global__ void gen_rgb8 (u8* out, u64 pitch, u32 width, u32 height,
//                                        u32 pattern, u64 seq, u32 noise_state,
//                                        u32 box_x0, u32 box_y0, u32 box_width, u32 box_height)
//   extern "C" __global__ void gen_rgba8(... same ...)
//   extern "C" __global__ void gen_gray8(... same ...)
//
//    #  name         type  value
//    0  out          u8*   device address of the plane's first row (frame base + plane offset)
//    1  pitch        u64   bytes from one row to the next
//    2  width        u32   pixels, 1..=32768
//    3  height       u32   rows, 1..=32768
//    4  pattern      u32   0 bars, 1 gradient, 2 noise, 3 box (`Pattern` in declaration
//                          order); any other value writes nothing
//    5  seq          u64   the frame's sequence number (gradient uses its low 32 bits)
//    6  noise_state  u32   `PatternFrame::noise_state` = `noise_state(seed, seq)`
//    7  box_x0       u32   `PatternFrame::box_place.x0`
//    8  box_y0       u32   `PatternFrame::box_place.y0`
//    9  box_width    u32   `PatternFrame::box_place.box_width`
//   10  box_height   u32   `PatternFrame::box_place.box_height`
//
// Every argument is what `PatternFrame::new(pattern, width, height, seq, seed)` holds, so the
// launcher computes the per-frame values (hash state, box corner) with the CPU code.
//
// Launch: one thread per 16 bytes of a row (rgb8: 16 bytes = 5 1/3 pixels, rgba8: 4 pixels,
// gray8: 16 pixels), 1-D blocks, a 2-D grid:
//   block = (128, 1, 1)                                   (any blockDim.x works)
//   row_bytes = width * {3, 4, 1}
//   grid  = (ceil(ceil(row_bytes / 16) / block.x), min(height, 65535), 1)
// Both grid dimensions are grid-stride loops, so a smaller grid is also correct. The plugin
// launches a quarter of that grid's x (4 pieces a thread: 8 % faster at 4K on an H100,
// plugins/generator/src/cuda.rs). No shared memory, no dynamic shared memory.
//
// Memory: writes exactly the `row_bytes` pixel bytes of each row, never the row padding.
// When `out` and `pitch` are multiples of 16 (always, with the layout rule's 64-byte pitch
// and 256-byte plane offsets), full 16-byte pieces are stored as one uint4; the last, partial
// piece of a row and every piece of a misaligned plane are stored byte by byte.

typedef unsigned int u32;
typedef unsigned char u8;
typedef unsigned long long u64;

enum : u32 { PATTERN_BARS = 0, PATTERN_GRADIENT = 1, PATTERN_NOISE = 2, PATTERN_BOX = 3 };
enum : u32 { FMT_RGB8 = 3, FMT_RGBA8 = 4, FMT_GRAY8 = 1 }; // template tag = bytes per pixel

// A colour is packed as 0x00BBGGRR: its bytes in memory order, little-endian.
__device__ __forceinline__ u32 pack_rgb(u32 r, u32 g, u32 b) { return r | (g << 8) | (b << 16); }

// Everything a frame needs besides (x, y).
struct PatternArgs {
    u32 width, height, pattern, seq_lo, noise_state, box_x0, box_y0, box_width, box_height;
};

// BARS[i] for i < 8 from the bits of i (white, yellow, cyan, green, magenta, red, blue, black):
// R is on when bit 1 is clear, G when bit 2 is clear, B when bit 0 is clear. For i >= 8
// (pixels past the row end, never stored) it gives some colour instead of reading past a table.
__device__ __forceinline__ u32 bar_colour(u32 i) {
    return pack_rgb((i & 2) ? 0u : 255u, (i & 4) ? 0u : 255u, (i & 1) ? 0u : 255u);
}

__device__ __forceinline__ u32 rotl32(u32 x, u32 r) { return (x << r) | (x >> (32 - r)); }

// generator.rs `murmur3_block`.
__device__ __forceinline__ u32 murmur3_block(u32 h, u32 k) {
    k *= 0xcc9e2d51u;
    k = rotl32(k, 15);
    k *= 0x1b873593u;
    h ^= k;
    h = rotl32(h, 13);
    return h * 5u + 0xe6546b64u;
}

// generator.rs `murmur3_fmix32`.
__device__ __forceinline__ u32 murmur3_fmix32(u32 h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    return h ^ (h >> 16);
}

// generator.rs `luma`: (77 R + 150 G + 29 B + 128) >> 8 of a packed colour.
__device__ __forceinline__ u32 luma(u32 c) {
    return (77u * (c & 255u) + 150u * ((c >> 8) & 255u) + 29u * (c >> 16) + 128u) >> 8;
}

// Advance the exact quotient q and remainder r of `num / d` to those of `(num + add) / d`.
// Runs at most once per call when d >= add, the usual case; small frames loop a few times.
__device__ __forceinline__ void div_step(u32& q, u32& r, u32 add, u32 d) {
    r += add;
    while (r >= d) {
        r -= d;
        ++q;
    }
}

// The packed colours of the N pixels (x0 .. x0 + N - 1, y) into c. Pixels past the row end
// are computed too (without reading anything out of bounds) and left for the caller to drop.
// Divisions are done once per span and stepped per pixel, so the pattern costs a few
// instructions per pixel and the kernel stays memory-bound (noise excepted).
template <int N>
__device__ __forceinline__ void pattern_span(const PatternArgs& a, u32 x0, u32 y, u32 (&c)[N]) {
    switch (a.pattern) {
    case PATTERN_BARS: {
        // bars_rgb: BARS[x * 8 / width]
        u32 q = x0 * 8u / a.width;
        u32 r = x0 * 8u - q * a.width;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            c[i] = bar_colour(q);
            div_step(q, r, 8u, a.width);
        }
        break;
    }
    case PATTERN_GRADIENT: {
        // gradient_rgb: R = x * 255 / max(w - 1, 1), G = y * 255 / max(h - 1, 1),
        // B = (x + y + 4 * (u32)seq) & 255, all u32 with wrapping.
        const u32 dx = a.width > 1 ? a.width - 1 : 1u;
        const u32 dy = a.height > 1 ? a.height - 1 : 1u;
        const u32 g = y * 255u / dy;
        const u32 b0 = x0 + y + a.seq_lo * 4u;
        u32 q = x0 * 255u / dx;
        u32 r = x0 * 255u - q * dx;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            c[i] = pack_rgb(q & 255u, g, (b0 + (u32)i) & 255u);
            div_step(q, r, 255u, dx);
        }
        break;
    }
    case PATTERN_NOISE: {
        // noise_rgb: channel k is the low byte of
        // fmix32(block(block(block(state, x), y), k) ^ 28).
#pragma unroll
        for (int i = 0; i < N; ++i) {
            const u32 h = murmur3_block(murmur3_block(a.noise_state, x0 + (u32)i), y);
            const u32 r = murmur3_fmix32(murmur3_block(h, 0u) ^ 28u) & 255u;
            const u32 g = murmur3_fmix32(murmur3_block(h, 1u) ^ 28u) & 255u;
            const u32 b = murmur3_fmix32(murmur3_block(h, 2u) ^ 28u) & 255u;
            c[i] = pack_rgb(r, g, b);
        }
        break;
    }
    default: { // PATTERN_BOX (the kernels return early on unknown patterns)
        // box_rgb: inside where (x + w - x0) % w < bw and (y + h - y0) % h < bh.
        const bool inside_y = (y + a.height - a.box_y0) % a.height < a.box_height;
        u32 mx = (x0 + a.width - a.box_x0) % a.width;
#pragma unroll
        for (int i = 0; i < N; ++i) {
            c[i] = (inside_y && mx < a.box_width) ? pack_rgb(255u, 255u, 255u)
                                                  : pack_rgb(64u, 64u, 64u);
            if (++mx == a.width) mx = 0;
        }
        break;
    }
    }
}

// Store the 16 bytes w[0..4] (little-endian words) at p, or only the first n of them.
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

// The 16 bytes at row offset 16 * k of a row in format FMT.
template <u32 FMT>
__device__ __forceinline__ void chunk(const PatternArgs& a, u32 k, u32 y, u32 (&w)[4]) {
    if constexpr (FMT == FMT_RGB8) {
        // Bytes 16k .. 16k + 15 start inside pixel x0 = 16k / 3, o = 16k mod 3 bytes in, and
        // touch pixels x0 .. x0 + 5. Lay those six pixels out as the 18-byte stream
        // R0 G0 B0 R1 G1 B1 ... in five words s[0..5], then take 16 bytes from byte o.
        const u32 x0 = 16u * k / 3u;
        const u32 shift = 8u * (16u * k - 3u * x0);
        u32 c[6];
        pattern_span<6>(a, x0, y, c);
        const u32 s[5] = {
            c[0] | (c[1] << 24),
            (c[1] >> 8) | (c[2] << 16),
            (c[2] >> 16) | (c[3] << 8),
            c[4] | (c[5] << 24),
            c[5] >> 8,
        };
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = (u32)((((u64)s[i + 1] << 32) | s[i]) >> shift);
        }
    } else if constexpr (FMT == FMT_RGBA8) {
        u32 c[4];
        pattern_span<4>(a, 4u * k, y, c);
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = c[i] | 0xff000000u;
    } else { // FMT_GRAY8
        u32 c[16];
        pattern_span<16>(a, 16u * k, y, c);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            w[i] = luma(c[4 * i]) | (luma(c[4 * i + 1]) << 8) | (luma(c[4 * i + 2]) << 16) |
                   (luma(c[4 * i + 3]) << 24);
        }
    }
}

template <u32 FMT>
__device__ __forceinline__ void generate(u8* out, u64 pitch, const PatternArgs& a) {
    if (a.pattern > PATTERN_BOX || a.width == 0 || a.height == 0) return;
    const u32 row_bytes = a.width * FMT;
    const u32 chunks = (row_bytes + 15u) / 16u;
    const bool vec = (((u64)out | pitch) & 15u) == 0;
    for (u32 y = blockIdx.y; y < a.height; y += gridDim.y) {
        u8* row = out + (u64)y * pitch;
        for (u32 k = blockIdx.x * blockDim.x + threadIdx.x; k < chunks;
             k += gridDim.x * blockDim.x) {
            u32 w[4];
            chunk<FMT>(a, k, y, w);
            store16(row + 16u * k, w, row_bytes - 16u * k, vec);
        }
    }
}

#define GEN_ENTRY(NAME, FMT)                                                                   \
    extern "C" __global__ void NAME(u8* out, u64 pitch, u32 width, u32 height, u32 pattern,   \
                                    u64 seq, u32 noise_state, u32 box_x0, u32 box_y0,         \
                                    u32 box_width, u32 box_height) {                          \
        const PatternArgs a = {width,  height, pattern,   (u32)seq, noise_state,              \
                               box_x0, box_y0, box_width, box_height};                        \
        generate<FMT>(out, pitch, a);                                                          \
    }

GEN_ENTRY(gen_rgb8, FMT_RGB8)
GEN_ENTRY(gen_rgba8, FMT_RGBA8)
GEN_ENTRY(gen_gray8, FMT_GRAY8)
