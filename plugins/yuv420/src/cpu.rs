//! The yuv420 stage's cpu path: the frame cut into bands of row pairs (a chroma row and its
//! two luma rows), each converted by its own thread with loops the compiler can vectorise.
//!
//! The bytes are those of [`Coefficients::luma`] and [`Coefficients::chroma`] on every pixel
//! and 2x2 block, as the GPU kernel's are; the tests compare against a per-pixel reference.
//! Two facts make the loops simple:
//!
//! - The integer formulas fit in 32 bits (the ranges [`RowCoefficients::new`] checks), so the
//!   i64 of [`Coefficients::chroma`] is not needed, and its division by `n << 16` of a
//!   non-negative numerator is a right shift by `16 + log2 n`.
//! - A block cut by the frame's edge gives what the same block gives with its pixels
//!   repeated to fill 2x2: the sums and `n` grow by the same factor `k` (2 or 4), the
//!   numerator `128 n 2^16 + c_r R + c_g G + c_b B + n 2^15` too, so the quotient by
//!   `n 2^16` is unchanged. Every block is computed as a full one; the last row of an odd
//!   height is paired with itself, the last column of an odd width with itself.

use gpuipc_plugin_api::{Error, InputFrame, OutputFrame, PixelFormat, Plane, Result, bail};

use crate::bands::{self, RowsMut};
use crate::yuv420::{Coefficients, FRAC_BITS};

/// Pixels a band must have for the default `threads` to give it a thread of its own: starting
/// a thread takes 20 to 50 us (measured on a 2-core VM), and 2^18 pixels take 200 to 250 us.
/// (A pool of threads kept from frame to frame would start faster, but lending it the
/// frame's rows needs `unsafe` or a crate this workspace does not have.)
pub const MIN_BAND_PIXELS: usize = 1 << 18;

/// [`Coefficients`] as the row loops take them, checked to keep every intermediate in 32 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowCoefficients {
    /// `(y_offset << 16) + 2^15`: the luma sum before the products.
    y_add: u32,
    /// Luma multipliers; as `u16` so that the compiler can multiply 16-bit lanes.
    y: [u16; 3],
    u: [i32; 3],
    v: [i32; 3],
}

/// Largest magnitude of a chroma coefficient the 32-bit loops take: `Coefficients::new`
/// makes each `round(k 2^16)` with `|k| <= 1/2`.
const MAX_CHROMA_COEFFICIENT: i32 = 1 << (FRAC_BITS - 1);

impl RowCoefficients {
    /// With `y_offset` in 0..=255, luma multipliers in 0..2^16 and chroma multipliers in
    /// -2^15..=2^15, the luma sum is below `2^24 + 3 * 2^16 * 255 + 2^15 < 2^26` and never
    /// negative (so `max(0)` is a no-op and unsigned arithmetic gives the same bits), and the
    /// numerator of a block of 4 is below `2^25 + 3 * 2^15 * 1020 + 2^17 < 2^27` in size.
    pub fn new(c: &Coefficients) -> Result<RowCoefficients> {
        let chroma = [c.u_r, c.u_g, c.u_b, c.v_r, c.v_g, c.v_b];
        let luma = [c.y_r, c.y_g, c.y_b].map(u16::try_from);
        let in_range = (0..=255).contains(&c.y_offset) && chroma.iter().all(|m| m.abs() <= MAX_CHROMA_COEFFICIENT);
        let (true, [Ok(y_r), Ok(y_g), Ok(y_b)]) = (in_range, luma) else {
            bail!("yuv420 coefficients out of the range of the 32-bit loops: {c:?}");
        };
        Ok(RowCoefficients {
            y_add: ((c.y_offset as u32) << FRAC_BITS) + (1 << (FRAC_BITS - 1)),
            y: [y_r, y_g, y_b],
            u: [c.u_r, c.u_g, c.u_b],
            v: [c.v_r, c.v_g, c.v_b],
        })
    }

    /// [`Coefficients::luma`] of the pixel in `word` (see [`words_of_row`]).
    #[inline(always)]
    fn luma(&self, word: u32) -> u8 {
        let [cr, cg, cb] = self.y;
        let (r, g, b) = (word & 0xff, (word >> 8) & 0xff, (word >> 16) & 0xff);
        let sum = self.y_add + u32::from(cr) * r + u32::from(cg) * g + u32::from(cb) * b;
        (sum >> FRAC_BITS).min(255) as u8
    }

    /// [`Coefficients::chroma`] of the 2x2 block of pixels `p0`, `p1` over `q0`, `q1`.
    #[inline(always)]
    fn chroma(&self, p0: u32, p1: u32, q0: u32, q1: u32) -> (u8, u8) {
        // R and B side by side in 16-bit lanes: a sum of four bytes cannot carry out.
        const RB: u32 = 0x00ff_00ff;
        let rb = (p0 & RB) + (p1 & RB) + (q0 & RB) + (q1 & RB);
        let g = ((p0 >> 8) & 0xff) + ((p1 >> 8) & 0xff) + ((q0 >> 8) & 0xff) + ((q1 >> 8) & 0xff);
        let (r, g, b) = ((rb & 0xffff) as i32, g as i32, (rb >> 16) as i32);
        const ONE: i32 = 4 << FRAC_BITS;
        let value = |[cr, cg, cb]: [i32; 3]| {
            let num = 128 * ONE + cr * r + cg * g + cb * b + ONE / 2;
            (num.max(0) >> (FRAC_BITS + 2)).min(255) as u8
        };
        (value(self.u), value(self.v))
    }
}

/// One row of `BPP`-byte pixels as one little-endian word a pixel: R in bits 0..8, G in
/// 8..16, B in 16..24, and whatever follows B in the top byte (ignored). Words, because the
/// compiler vectorises loops over them, where it would not over 3-byte pixels.
fn words_of_row<const BPP: usize>(src: &[u8], words: &mut [u32]) {
    if BPP == 4 {
        for (w, px) in words.iter_mut().zip(src.chunks_exact(4)) {
            *w = u32::from_le_bytes([px[0], px[1], px[2], px[3]]);
        }
        return;
    }
    // Four bytes from each pixel's first; the last pixel has no fourth byte in the row.
    let Some((last, body)) = words.split_last_mut() else { return };
    for (w, px) in body.iter_mut().zip(src.windows(4).step_by(3)) {
        *w = u32::from_le_bytes([px[0], px[1], px[2], px[3]]);
    }
    let px = &src[3 * body.len()..];
    *last = u32::from_le_bytes([px[0], px[1], px[2], 0]);
}

/// Y of a row of pixel words.
fn luma_row(k: &RowCoefficients, words: &[u32], out: &mut [u8]) {
    // In fixed runs of 16, which the compiler makes full vectors of.
    const RUN: usize = 16;
    let (mut outs, mut ins) = (out.chunks_exact_mut(RUN), words.chunks_exact(RUN));
    for (o, w) in (&mut outs).zip(&mut ins) {
        for (o, &w) in o.iter_mut().zip(w) {
            *o = k.luma(w);
        }
    }
    for (o, &w) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        *o = k.luma(w);
    }
}

/// Where the chroma of one row of blocks goes.
enum ChromaRow<'r> {
    I420 { u: &'r mut [u8], v: &'r mut [u8] },
    Nv12 { uv: &'r mut [u8] },
}

/// The chroma of the 2x2 blocks of word rows `a` over `b`, the last column of an odd width
/// beside itself.
fn chroma_row(k: &RowCoefficients, a: &[u32], b: &[u32], out: ChromaRow<'_>) {
    let (pairs_a, pairs_b) = (a.chunks_exact(2), b.chunks_exact(2));
    let last = pairs_a.remainder().first().zip(pairs_b.remainder().first());
    let last = last.map(|(&p, &q)| k.chroma(p, p, q, q));
    let blocks = pairs_a.zip(pairs_b);
    // Plain zips over whole blocks, which the compiler vectorises; the cut block after.
    match out {
        ChromaRow::I420 { u, v } => {
            for ((u, v), (p, q)) in u.iter_mut().zip(v.iter_mut()).zip(blocks) {
                (*u, *v) = k.chroma(p[0], p[1], q[0], q[1]);
            }
            if let (Some((cu, cv)), Some(u), Some(v)) = (last, u.last_mut(), v.last_mut()) {
                (*u, *v) = (cu, cv);
            }
        }
        ChromaRow::Nv12 { uv } => {
            for (uv, (p, q)) in uv.chunks_exact_mut(2).zip(blocks) {
                (uv[0], uv[1]) = k.chroma(p[0], p[1], q[0], q[1]);
            }
            if let (Some((cu, cv)), [.., u, v]) = (last, uv) {
                (*u, *v) = (cu, cv);
            }
        }
    }
}

/// Where a band's chroma goes.
#[derive(Debug)]
enum ChromaRows<'a> {
    I420 { u: RowsMut<'a>, v: RowsMut<'a> },
    Nv12 { uv: RowsMut<'a> },
}

/// Row pairs `first..first + chroma rows` of the frame: their luma rows and chroma rows.
#[derive(Debug)]
struct Band<'a> {
    first: usize,
    y: RowsMut<'a>,
    chroma: ChromaRows<'a>,
}

/// Convert a band of a frame of `BPP`-byte pixels, `width` of them a row.
fn convert_band<const BPP: usize>(k: &RowCoefficients, src: &Plane<'_>, width: usize, band: Band<'_>) {
    let Band { first, mut y, mut chroma } = band;
    let height = src.rows();
    let (mut a, mut b) = (vec![0; width], vec![0; width]);
    let pairs = match &chroma {
        ChromaRows::I420 { u, .. } => u.rows(),
        ChromaRows::Nv12 { uv } => uv.rows(),
    };
    for i in 0..pairs {
        let top = 2 * (first + i);
        words_of_row::<BPP>(src.row(top), &mut a);
        luma_row(k, &a, y.row_mut(2 * i));
        if top + 1 < height {
            words_of_row::<BPP>(src.row(top + 1), &mut b);
            luma_row(k, &b, y.row_mut(2 * i + 1));
        } else {
            // The last row of an odd height is its own pair.
            b.copy_from_slice(&a);
        }
        let out = match &mut chroma {
            ChromaRows::I420 { u, v } => ChromaRow::I420 { u: u.row_mut(i), v: v.row_mut(i) },
            ChromaRows::Nv12 { uv } => ChromaRow::Nv12 { uv: uv.row_mut(i) },
        };
        chroma_row(k, &a, &b, out);
    }
}

/// Convert one RGB frame (`rgb8` or `rgba8`, host memory) into `output` (`i420` or `nv12` of
/// the same size, host memory), with `threads` as the stage's param says.
pub fn convert(k: &RowCoefficients, threads: u32, input: &InputFrame<'_>, output: &mut OutputFrame<'_>) -> Result<()> {
    let bpp = match input.info.pixel() {
        PixelFormat::Rgb8 => 3,
        PixelFormat::Rgba8 => 4,
        other => bail!("yuv420 takes rgb8 or rgba8 frames; input is {other}"),
    };
    let (width, height) = (input.info.width() as usize, input.info.height() as usize);
    if (output.info().width() as usize, output.info().height() as usize) != (width, height) {
        bail!("output frame is {}, input is {}", output.info().format, input.info.format);
    }
    let out_pixel = output.info().pixel();
    let host_only = || Error::new("yuv420 reads and writes host memory only (cpu domain)");
    let src = input.plane(0).ok_or_else(host_only)?;
    let planes = bands::planes_mut(output).ok_or_else(host_only)??;

    let pairs = height.div_ceil(2);
    let n = bands::thread_count(threads, width * height / MIN_BAND_PIXELS, pairs);
    let counts: Vec<usize> = bands::even_counts(pairs, bands::band_count(n, pairs)).collect();
    // Every band's luma rows: two a pair, but one for the last pair of an odd height.
    let luma_counts =
        bands::starts(&counts).zip(&counts).map(|(start, count)| (2 * (start + count)).min(height) - 2 * start);
    let mut planes = planes.into_iter();
    let mut plane = || planes.next().ok_or_else(|| Error::new("the output frame has too few planes"));
    let luma = plane()?.split(luma_counts);
    let chroma: Vec<ChromaRows<'_>> = match out_pixel {
        PixelFormat::I420 => {
            let (u, v) = (plane()?, plane()?);
            let (u, v) = (u.split(counts.iter().copied()), v.split(counts.iter().copied()));
            u.into_iter().zip(v).map(|(u, v)| ChromaRows::I420 { u, v }).collect()
        }
        PixelFormat::Nv12 => {
            let uv = plane()?.split(counts.iter().copied());
            uv.into_iter().map(|uv| ChromaRows::Nv12 { uv }).collect()
        }
        other => bail!("yuv420 writes i420 or nv12 frames; output is {other}"),
    };
    let work: Vec<Band<'_>> =
        bands::starts(&counts).zip(luma).zip(chroma).map(|((first, y), chroma)| Band { first, y, chroma }).collect();
    bands::run(work, n, |band| {
        match bpp {
            3 => convert_band::<3>(k, &src, width, band),
            _ => convert_band::<4>(k, &src, width, band),
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::padded;
    use gpuipc_plugin_api::{FrameFormat, FrameInfo};

    use super::*;
    use crate::yuv420::{self, ChromaLayout, ColorRange, Matrix};

    const SENTINEL: u8 = 0xa5;

    fn every_setting() -> Vec<(Matrix, ColorRange, ChromaLayout)> {
        let mut all = Vec::new();
        for matrix in [Matrix::Bt709, Matrix::Bt601] {
            for range in [ColorRange::Limited, ColorRange::Full] {
                for layout in [ChromaLayout::I420, ChromaLayout::Nv12] {
                    all.push((matrix, range, layout));
                }
            }
        }
        all
    }

    /// The whole output buffer (padding included, filled with [`SENTINEL`]) of converting
    /// `in_bytes` with `threads`, or with the reference [`yuv420::convert`] for `None`.
    fn output(
        (matrix, range, layout): (Matrix, ColorRange, ChromaLayout),
        in_info: FrameInfo,
        in_bytes: &[u8],
        threads: Option<u32>,
    ) -> Vec<u8> {
        let c = Coefficients::new(matrix, range);
        let (w, h) = (in_info.width(), in_info.height());
        let mut out_info = FrameInfo::new(FrameFormat::new(layout.pixel(), w, h), 0, 0).unwrap();
        out_info.layout = padded(out_info.layout, 3);
        let mut out_bytes = vec![SENTINEL; out_info.layout.total_bytes as usize];
        let input = InputFrame::host(in_info, in_bytes).unwrap();
        let mut out = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        match threads {
            None => yuv420::convert(&c, &input, &mut out).unwrap(),
            Some(n) => convert(&RowCoefficients::new(&c).unwrap(), n, &input, &mut out).unwrap(),
        }
        out_bytes
    }

    /// A frame of `pixel` format and size, padded by 5 bytes a row, of hashed bytes.
    fn input(pixel: PixelFormat, w: u32, h: u32, salt: u64) -> (FrameInfo, Vec<u8>) {
        let mut info = FrameInfo::new(FrameFormat::new(pixel, w, h), 0, 0).unwrap();
        info.layout = padded(info.layout, 5);
        let bytes = (0..info.layout.total_bytes)
            .map(|i| ((i ^ salt).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
            .collect();
        (info, bytes)
    }

    /// Sizes with odd widths and heights, one row or column, and row pairs that do not
    /// divide evenly among 2, 3, 4 or 7 threads.
    const SIZES: [(u32, u32); 12] =
        [(1, 1), (2, 1), (1, 2), (2, 2), (3, 3), (5, 3), (1, 33), (33, 1), (17, 9), (16, 14), (35, 29), (130, 67)];

    #[test]
    fn every_thread_count_writes_the_reference_bytes() {
        for (w, h) in SIZES {
            for pixel in [PixelFormat::Rgb8, PixelFormat::Rgba8] {
                let (info, bytes) = input(pixel, w, h, u64::from(w * 1000 + h));
                for setting in every_setting() {
                    let want = output(setting, info, &bytes, None);
                    for threads in [1, 2, 3, 4, 7, 64, 0] {
                        let got = output(setting, info, &bytes, Some(threads));
                        assert!(got == want, "{pixel} {w}x{h} {setting:?} threads {threads}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_large_frame_equals_the_reference_on_any_thread_count() {
        // 1031x517: odd both ways, 259 row pairs (not a multiple of 2, 3 or 4), and pixels
        // enough for the default to take two threads where there are two cores.
        const { assert!(1031 * 517 >= 2 * MIN_BAND_PIXELS) };
        for pixel in [PixelFormat::Rgb8, PixelFormat::Rgba8] {
            let (info, bytes) = input(pixel, 1031, 517, 7);
            for setting in [every_setting()[0], every_setting()[7]] {
                let want = output(setting, info, &bytes, None);
                for threads in [1, 2, 3, 4, 0] {
                    let got = output(setting, info, &bytes, Some(threads));
                    assert!(got == want, "{pixel} {setting:?} threads {threads}");
                }
            }
        }
    }

    /// Every one of the 2^24 colours, for every matrix and range: the 32-bit luma of the row
    /// loops is `Coefficients::luma`, whatever the byte above B.
    #[test]
    fn luma_of_every_colour_is_the_reference() {
        // A thread per setting: 2^24 calls take a while in a debug build.
        std::thread::scope(|s| {
            for (matrix, range, _) in every_setting().into_iter().step_by(2) {
                s.spawn(move || {
                    let c = Coefficients::new(matrix, range);
                    let k = RowCoefficients::new(&c).unwrap();
                    for rgb in 0..1u32 << 24 {
                        let [r, g, b, _] = rgb.to_le_bytes();
                        let word = rgb | (rgb << 24);
                        if k.luma(word) != c.luma(r, g, b) {
                            panic!("{matrix:?} {range:?} ({r}, {g}, {b})");
                        }
                    }
                });
            }
        });
    }

    /// The block formula against `Coefficients::chroma` on blocks of 4, 2 and 1 pixels
    /// (the cut ones repeated to fill 2x2), for a spread of colours and the extremes.
    #[test]
    fn chroma_of_blocks_is_the_reference() {
        let mut colours: Vec<[u8; 3]> = Vec::new();
        for v in [0u8, 1, 2, 127, 128, 254, 255] {
            colours.extend([[v, 0, 0], [0, v, 0], [0, 0, v], [v, v, v], [255 - v, v, 255]]);
        }
        colours.extend((0..400u32).map(|i| {
            let h = i.wrapping_mul(0x9e37_79b9) ^ (i << 7);
            [(h >> 24) as u8, (h >> 12) as u8, (h >> 3) as u8]
        }));
        let word = |[r, g, b]: [u8; 3], top: u8| u32::from_le_bytes([r, g, b, top]);
        for (matrix, range, _) in every_setting().into_iter().step_by(2) {
            let c = Coefficients::new(matrix, range);
            let k = RowCoefficients::new(&c).unwrap();
            for (i, &p0) in colours.iter().enumerate() {
                let [p1, q0, q1] = [1, 7, 31].map(|j| colours[(i * j + j) % colours.len()]);
                let sum = |ps: &[[u8; 3]], ch: usize| ps.iter().map(|p| u32::from(p[ch])).sum();
                let reference = |ps: &[[u8; 3]]| c.chroma(sum(ps, 0), sum(ps, 1), sum(ps, 2), ps.len() as u32);
                let (w0, w1, w2, w3) = (word(p0, 0xff), word(p1, 0x3c), word(q0, 0), word(q1, 7));
                assert_eq!(k.chroma(w0, w1, w2, w3), reference(&[p0, p1, q0, q1]));
                assert_eq!(k.chroma(w0, w1, w0, w1), reference(&[p0, p1]));
                assert_eq!(k.chroma(w0, w0, w2, w2), reference(&[p0, q0]));
                assert_eq!(k.chroma(w0, w0, w0, w0), reference(&[p0]));
            }
        }
    }

    #[test]
    fn coefficients_beyond_32_bits_are_refused() {
        let mut c = Coefficients::new(Matrix::Bt709, ColorRange::Full);
        assert!(RowCoefficients::new(&c).is_ok());
        c.y_g = 1 << 16;
        assert!(RowCoefficients::new(&c).is_err());
        let mut c = Coefficients::new(Matrix::Bt601, ColorRange::Limited);
        c.v_b = -(1 << 15) - 1;
        let e = RowCoefficients::new(&c).unwrap_err();
        assert!(e.message().contains("out of the range"), "{e}");
    }
}
