//! The generator's cpu path: a frame's rows drawn in bands by threads, each row from what the
//! whole frame shares (the one row all bars rows copy, the two rows of the box pattern, the
//! gradient's red of each column and green of each row, the noise hash state after each
//! column), with loops the compiler can vectorise. What does not depend on the frame's
//! sequence number (the bars row, the gradient's red and green) is made at the first frame
//! and kept ([`Drawer`]); the rest once a frame.
//!
//! The per-pixel functions of [`crate::generator`] stay the reference: the shared rows are
//! drawn by them, and the tests compare every row of every pattern and format with them.

use gpuipc_plugin_api::{Error, OutputFrame, PixelFormat, Result, bail};

use crate::bands;
use crate::generator::{
    BOX_FOREGROUND, Pattern, PatternFrame, box_rgb, gradient_rgb, luma, murmur3_block, murmur3_fmix32,
};

/// Pixels a band of `noise` must have for the default `threads` to give it a thread of its
/// own: starting a thread takes 20 to 50 us (measured on a 2-core VM), and 2^16 pixels of
/// noise take 200 us. (A pool of threads kept from frame to frame would start faster, but
/// lending it the frame's rows needs `unsafe` or a crate this workspace does not have.)
pub const MIN_NOISE_BAND_PIXELS: usize = 1 << 16;
/// The same for the other patterns, whose rows are copies or nearly: 2^20 pixels take 50 to
/// 250 us.
pub const MIN_BAND_PIXELS: usize = 1 << 20;

/// What every row of one frame is drawn from.
#[derive(Debug)]
enum Rows {
    /// Every row is this one (bars).
    Same(Vec<u8>),
    /// A row through the box is `inside`, any other `outside` (box).
    Box { inside: Vec<u8>, outside: Vec<u8> },
    /// The red of each column, the green of each row, and for rgb8 a row of (red, 0, x mod
    /// 256) pixels that each row's (0, green, blue at x = 0) is added to, byte by byte.
    Gradient { red: Vec<u8>, green: Vec<u8>, rgb_template: Vec<u8> },
    /// The noise hash state after the words of seed, seq and x, for each column x.
    Noise { after_x: Vec<u32> },
}

impl Rows {
    fn new(frame: &PatternFrame, pixel: PixelFormat, row_bytes: usize) -> Result<Rows> {
        let reference_row = |y: u32| {
            let mut row = vec![0; row_bytes];
            frame.fill_row(pixel, y, &mut row).map(|()| row)
        };
        let columns = 0..frame.width;
        Ok(match frame.pattern {
            Pattern::Bars => Rows::Same(reference_row(0)?),
            Pattern::Box => {
                // Row y0 is inside the box; y0 + bh is not, unless the box is as tall as the
                // frame (then every row is inside, and `outside` is never used).
                let place = frame.box_place;
                let outside = (place.y0 + place.box_height) % frame.height;
                Rows::Box { inside: reference_row(place.y0)?, outside: reference_row(outside)? }
            }
            Pattern::Gradient => {
                let rgb = |x, y| gradient_rgb(x, y, frame.width, frame.height, frame.seq);
                let red: Vec<u8> = columns.map(|x| rgb(x, 0)[0]).collect();
                let green: Vec<u8> = (0..frame.height).map(|y| rgb(0, y)[1]).collect();
                let rgb_template = match pixel {
                    PixelFormat::Rgb8 => (red.iter().zip(0..)).flat_map(|(&r, x)| [r, 0, x as u8]).collect(),
                    _ => Vec::new(),
                };
                Rows::Gradient { red, green, rgb_template }
            }
            Pattern::Noise => Rows::Noise { after_x: columns.map(|x| murmur3_block(frame.noise_state, x)).collect() },
        })
    }

    /// Row `y` of the frame in `pixel` format into `row` (pixels only).
    fn draw(&self, frame: &PatternFrame, pixel: PixelFormat, y: u32, row: &mut [u8]) {
        match self {
            Rows::Same(same) => row.copy_from_slice(same),
            Rows::Box { inside, outside } => {
                // The box's column x0 is inside it, so pixel (x0, y) says whether row y is.
                let place = &frame.box_place;
                let corner = box_rgb(place, place.x0, y, frame.width, frame.height);
                row.copy_from_slice(if corner == BOX_FOREGROUND { inside } else { outside });
            }
            Rows::Gradient { red, green, rgb_template } => {
                // Green is the row's; blue at x is (x + blue at 0) mod 256, blue at 0 as
                // `gradient_rgb` has it.
                let green = green[y as usize];
                let blue = y.wrapping_add((frame.seq as u32).wrapping_mul(4)) as u8;
                match pixel {
                    PixelFormat::Rgb8 => add_pixel(rgb_template, [0, green, blue], row),
                    PixelFormat::Rgba8 => {
                        let (green, blue) = (u32::from(green) << 8, u32::from(blue));
                        for ((px, &r), x) in row.chunks_exact_mut(4).zip(red).zip(0u32..) {
                            let b = (x + blue) & 0xff;
                            let word = u32::from(r) | green | (b << 16) | 0xff00_0000;
                            px.copy_from_slice(&word.to_le_bytes());
                        }
                    }
                    _ => gray_gradient_row(red, green, blue, row),
                }
            }
            Rows::Noise { after_x } => noise_row(after_x, pixel, y, row),
        }
    }
}

/// A gray8 row of the gradient: [`luma`] of (red of x, `green`, `blue` + x mod 256) for each
/// column x, in 16-bit lanes (the largest sum, 255 * (77 + 150 + 29) + 128, fits) eight
/// pixels at a time: a loop the compiler makes one vector a run of, where per pixel in 32 bits
/// a row of 8 took longer than the rest of the frame's making.
fn gray_gradient_row(red: &[u8], green: u8, blue: u8, row: &mut [u8]) {
    const RUN: usize = 8;
    let base = 150 * u16::from(green) + 128;
    let pixel = |r: u8, b: u8| ((77 * u16::from(r) + base + 29 * u16::from(b)) >> 8) as u8;
    let (mut rows, mut reds) = (row.chunks_exact_mut(RUN), red.chunks_exact(RUN));
    let mut x0 = blue;
    for (o, r) in (&mut rows).zip(&mut reds) {
        let (o, r): (&mut [u8; RUN], &[u8; RUN]) =
            (o.try_into().expect("runs of RUN"), r.try_into().expect("runs of RUN"));
        for i in 0..RUN {
            o[i] = pixel(r[i], x0.wrapping_add(i as u8));
        }
        x0 = x0.wrapping_add(RUN as u8);
    }
    for ((o, &r), i) in rows.into_remainder().iter_mut().zip(reds.remainder()).zip(0u8..) {
        *o = pixel(r, x0.wrapping_add(i));
    }
}

/// `row = template + pixel` byte by byte (wrapping), with `pixel` repeated along the row.
fn add_pixel(template: &[u8], pixel: [u8; 3], row: &mut [u8]) {
    // 48 bytes: whole pixels and whole 16-byte vectors, a run the compiler adds in three.
    const RUN: usize = 48;
    let run: [u8; RUN] = std::array::from_fn(|i| pixel[i % 3]);
    let (mut rows, mut templates) = (row.chunks_exact_mut(RUN), template.chunks_exact(RUN));
    for (o, t) in (&mut rows).zip(&mut templates) {
        let (o, t): (&mut [u8; RUN], &[u8; RUN]) =
            (o.try_into().expect("runs of RUN"), t.try_into().expect("runs of RUN"));
        for i in 0..RUN {
            o[i] = t[i].wrapping_add(run[i]);
        }
    }
    for ((o, &t), &p) in rows.into_remainder().iter_mut().zip(templates.remainder()).zip(&run) {
        *o = t.wrapping_add(p);
    }
}

/// Row `y` of the `noise` pattern: channel c of pixel x is the low byte of
/// `fmix(block(block(after_x[x], y), c) ^ 28)`, [`crate::generator::noise_byte`] continued
/// from the state after x.
fn noise_row(after_x: &[u32], pixel: PixelFormat, y: u32, row: &mut [u8]) {
    let channels = |after_x: u32| {
        let h = murmur3_block(after_x, y);
        [0, 1, 2].map(|c| murmur3_fmix32(murmur3_block(h, c) ^ 28) as u8)
    };
    match pixel {
        PixelFormat::Rgb8 => {
            for (px, &a) in row.chunks_exact_mut(3).zip(after_x) {
                px.copy_from_slice(&channels(a));
            }
        }
        PixelFormat::Rgba8 => {
            for (px, &a) in row.chunks_exact_mut(4).zip(after_x) {
                let [r, g, b] = channels(a);
                px.copy_from_slice(&[r, g, b, 255]);
            }
        }
        _ => {
            for (px, &a) in row.iter_mut().zip(after_x) {
                *px = luma(channels(a));
            }
        }
    }
}

/// What the cpu path keeps from one frame to the next: the rows that do not depend on the
/// frame's sequence number (bars, gradient), made at the first frame of a size, pattern and
/// format; and for a small frame of a pattern that repeats, each frame of the period as it was
/// first drawn, copied after ([`Frames`]). A frame of 64 pixels cost more in making its rows
/// (an allocation, a division a column) and in drawing them than the ring's whole handoff.
#[derive(Debug, Default)]
pub struct Drawer {
    kept: Option<(Key, Kept)>,
}

/// What kept rows were made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    pattern: Pattern,
    pixel: PixelFormat,
    width: u32,
    height: u32,
    rows: usize,
    row_bytes: usize,
}

#[derive(Debug)]
struct Kept {
    rows: Rows,
    frames: Option<Frames>,
}

/// The frames of a pattern whose frame `seq` is frame `seq mod period` (bars: every frame the
/// same; gradient: blue moves 4 a frame, mod 256), each drawn at its first use, its rows one
/// after another without padding: copies of 64 bytes where the frame is 8x8 gray.
#[derive(Debug)]
struct Frames {
    period: u64,
    pixels: Vec<u8>,
    drawn: Vec<bool>,
}

/// Most bytes of [`Frames`]: a gradient frame of up to 4 KiB of pixels is kept.
const MOST_KEPT_FRAME_BYTES: usize = 1 << 18;

impl Frames {
    fn for_pattern(pattern: Pattern, frame_bytes: usize) -> Option<Frames> {
        let period = match pattern {
            Pattern::Bars => 1,
            // `gradient_rgb`: B = (x + y + 4 seq) mod 256; R and G do not depend on seq.
            Pattern::Gradient => 64,
            Pattern::Noise | Pattern::Box => return None,
        };
        let bytes = frame_bytes.checked_mul(period as usize).filter(|&b| b <= MOST_KEPT_FRAME_BYTES)?;
        Some(Frames { period, pixels: vec![0; bytes], drawn: vec![false; period as usize] })
    }
}

impl Rows {
    /// Whether the rows are the same for every frame of their size, pattern and format.
    fn same_every_frame(&self) -> bool {
        matches!(self, Rows::Same(_) | Rows::Gradient { .. })
    }
}

/// Draw `frame` into `output` (host memory) with `threads` as the stage's param says (a
/// [`Drawer`] of its own: nothing kept).
pub fn render(frame: &PatternFrame, threads: u32, output: &mut OutputFrame<'_>) -> Result<()> {
    Drawer::default().render(frame, threads, output)
}

impl Drawer {
    /// Draw `frame` into `output` (host memory) with `threads` as the stage's param says.
    pub fn render(&mut self, frame: &PatternFrame, threads: u32, output: &mut OutputFrame<'_>) -> Result<()> {
        let pixel = output.info().pixel();
        if !matches!(pixel, PixelFormat::Rgb8 | PixelFormat::Rgba8 | PixelFormat::Gray8) {
            bail!("the generator does not make {pixel} frames");
        }
        let host_only = || Error::new("the generator writes host memory only (cpu domain)");
        // These formats have one plane.
        let mut plane = bands::first_plane_mut(output).ok_or_else(host_only)??;
        let key = Key {
            pattern: frame.pattern,
            pixel,
            width: frame.width,
            height: frame.height,
            rows: plane.rows(),
            row_bytes: plane.row_bytes(),
        };
        let made;
        let kept = match &mut self.kept {
            Some((kept_for, kept)) if *kept_for == key => kept,
            kept => {
                let rows = Rows::new(frame, pixel, key.row_bytes)?;
                if !rows.same_every_frame() {
                    made = rows;
                    return draw_rows(frame, pixel, &made, threads, plane);
                }
                let frames = Frames::for_pattern(frame.pattern, key.rows * key.row_bytes);
                &mut kept.insert((key, Kept { rows, frames })).1
            }
        };
        let Some(frames) = &mut kept.frames else { return draw_rows(frame, pixel, &kept.rows, threads, plane) };
        let at = (frame.seq % frames.period) as usize;
        let size = key.rows * key.row_bytes;
        let pixels = &mut frames.pixels[at * size..(at + 1) * size];
        if !frames.drawn[at] {
            for (y, row) in (0u32..).zip(pixels.chunks_exact_mut(key.row_bytes)) {
                kept.rows.draw(frame, pixel, y, row);
            }
            frames.drawn[at] = true;
        }
        for (row, drawn) in plane.iter_mut().zip(pixels.chunks_exact(key.row_bytes)) {
            row.copy_from_slice(drawn);
        }
        Ok(())
    }
}

fn draw_rows(
    frame: &PatternFrame,
    pixel: PixelFormat,
    rows: &Rows,
    threads: u32,
    plane: bands::RowsMut<'_>,
) -> Result<()> {
    let height = plane.rows();
    let pixels = frame.width as usize * frame.height as usize;
    let worth = match rows {
        Rows::Noise { .. } => pixels / MIN_NOISE_BAND_PIXELS,
        Rows::Same(_) | Rows::Box { .. } | Rows::Gradient { .. } => pixels / MIN_BAND_PIXELS,
    };
    let n = bands::thread_count(threads, worth, height);
    if n == 1 {
        // One band (every frame under 2^20 pixels by default): drawn here, without the lists
        // of bands, which cost a frame of 64 pixels more than its drawing does.
        let mut plane = plane;
        for (y, row) in (0u32..).zip(plane.iter_mut()) {
            rows.draw(frame, pixel, y, row);
        }
        return Ok(());
    }
    let counts: Vec<usize> = bands::even_counts(height, bands::band_count(n, height)).collect();
    let work: Vec<_> = bands::starts(&counts).zip(plane.split(counts.iter().copied())).collect();
    bands::run(work, n, |(first, mut band)| {
        for (y, row) in (first as u32..).zip(band.iter_mut()) {
            rows.draw(frame, pixel, y, row);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::padded;
    use gpuipc_plugin_api::{FrameFormat, FrameInfo};

    use super::*;
    use crate::generator;

    const SENTINEL: u8 = 0xa5;

    /// The whole frame buffer (row padding of 7 bytes included, filled with [`SENTINEL`])
    /// drawn with `threads`, or by the reference [`generator::render`] for `None`.
    fn draw(frame: &PatternFrame, pixel: PixelFormat, threads: Option<u32>) -> Vec<u8> {
        let format = FrameFormat::new(pixel, frame.width, frame.height);
        let mut info = FrameInfo::new(format, frame.seq, 0).unwrap();
        info.layout = padded(info.layout, 7);
        let mut bytes = vec![SENTINEL; info.layout.total_bytes as usize];
        let mut out = OutputFrame::host(info, &mut bytes).unwrap();
        match threads {
            None => generator::render(frame, &mut out).unwrap(),
            Some(n) => render(frame, n, &mut out).unwrap(),
        }
        bytes
    }

    const PATTERNS: [Pattern; 4] = [Pattern::Bars, Pattern::Gradient, Pattern::Noise, Pattern::Box];
    const PIXELS: [PixelFormat; 3] = [PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8];

    /// Odd sizes, single rows and columns, widths past 256 (the gradient's blue wraps), rows
    /// that do not divide evenly among 2, 3, 4 or 7 threads, sequence numbers beyond 32 bits
    /// (the box wraps around the edges): every thread count draws the reference's bytes.
    #[test]
    fn every_thread_count_draws_the_reference_bytes() {
        let sizes = [(1, 1), (2, 1), (1, 2), (3, 3), (5, 3), (1, 33), (33, 1), (17, 9), (257, 11)];
        for (width, height) in sizes {
            for pattern in PATTERNS {
                for seq in [0, 7, (1 << 33) + 5, u64::MAX] {
                    let frame = PatternFrame::new(pattern, width, height, seq, 99);
                    for pixel in PIXELS {
                        let want = draw(&frame, pixel, None);
                        for threads in [1, 2, 3, 4, 7, 64, 0] {
                            let got = draw(&frame, pixel, Some(threads));
                            assert!(got == want, "{pattern:?} {pixel} {width}x{height} seq {seq}, {threads} threads");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_large_frame_equals_the_reference_on_any_thread_count() {
        // 643x409: odd both ways, 409 rows (a prime), and pixels enough for the default to
        // take two threads for noise where there are two cores.
        const { assert!(643 * 409 >= 2 * MIN_NOISE_BAND_PIXELS) };
        for pattern in PATTERNS {
            let frame = PatternFrame::new(pattern, 643, 409, 1234, 5);
            for pixel in PIXELS {
                let want = draw(&frame, pixel, None);
                for threads in [1, 2, 3, 0] {
                    let got = draw(&frame, pixel, Some(threads));
                    assert!(got == want, "{pattern:?} {pixel}, {threads} threads");
                }
            }
        }
    }

    /// One drawer through frames of every pattern, format, size and sequence number in turn
    /// (what it keeps is for one of them at a time; whole frames kept for the small ones,
    /// 40x40 rgba8 past the bound): the reference's bytes every frame.
    #[test]
    fn a_drawer_kept_from_frame_to_frame_draws_the_reference_bytes() {
        let mut drawer = Drawer::default();
        let seqs: Vec<u64> = (0..140).chain([(1 << 33) + 5, u64::MAX, 3]).collect();
        for (width, height) in [(8, 8), (3, 5), (8, 8), (257, 11), (40, 40)] {
            for pattern in PATTERNS {
                for pixel in PIXELS {
                    for &seq in &seqs {
                        let frame = PatternFrame::new(pattern, width, height, seq, 99);
                        let format = FrameFormat::new(pixel, width, height);
                        let mut info = FrameInfo::new(format, seq, 0).unwrap();
                        info.layout = padded(info.layout, 7);
                        let mut bytes = vec![SENTINEL; info.layout.total_bytes as usize];
                        drawer.render(&frame, 1, &mut OutputFrame::host(info, &mut bytes).unwrap()).unwrap();
                        let want = draw(&frame, pixel, None);
                        assert!(bytes == want, "{pattern:?} {pixel} {width}x{height} seq {seq}");
                    }
                }
            }
        }
    }

    /// A box as tall as the frame (height 1 to 7: box height 1) and one whose corner is on
    /// the last row: rows inside and outside come out right when the box wraps.
    #[test]
    fn box_rows_inside_and_outside() {
        for height in 1..=9 {
            for seq in 0..5 {
                let frame = PatternFrame::new(Pattern::Box, 9, height, seq, 0);
                for pixel in PIXELS {
                    assert!(draw(&frame, pixel, Some(2)) == draw(&frame, pixel, None));
                }
            }
        }
    }
}
