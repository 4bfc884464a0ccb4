//! Pixel formats, frame formats and the plane layout of a frame in memory.
//!
//! The layout rule is the one place that decides where each plane starts and how far apart its
//! rows are; the host computes it once per link and hands it to both ends in every frame.

use std::fmt;

/// The most planes any format has (I420 has three).
pub const MAX_PLANES: usize = 4;

/// Row pitches are rounded up to this many bytes, so every row starts 16-byte aligned (GPU
/// kernels load 16 bytes at a time) and rows do not share a cache line.
pub const PITCH_ALIGN: u64 = 64;

/// Planes start on this boundary inside a frame.
pub const PLANE_ALIGN: u64 = 256;

/// A pixel format. The discriminants cross the plugin ABI as plain integers.
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// 8-bit R, G, B interleaved.
    Rgb8 = 1,
    /// 8-bit R, G, B, A interleaved.
    Rgba8 = 2,
    /// One 8-bit luma plane.
    Gray8 = 3,
    /// Planar Y, U, V; chroma planes are ceil(w/2) x ceil(h/2).
    I420 = 4,
    /// Y plane, then one plane of interleaved U, V pairs at ceil(w/2) x ceil(h/2).
    Nv12 = 5,
    /// 10-bit `nv12`, as NVDEC and ffmpeg's `p010le` lay it out: a Y plane, then one plane of
    /// interleaved U, V pairs at ceil(w/2) x ceil(h/2), every sample a little-endian u16
    /// holding the 10-bit value in its high 10 bits (`value << 6`, the low 6 bits zero). Rows
    /// are `2 w` bytes (Y) and `4 ceil(w/2)` bytes (U, V).
    P010 = 6,
}

impl PixelFormat {
    pub const ALL: [PixelFormat; 6] = [
        PixelFormat::Rgb8,
        PixelFormat::Rgba8,
        PixelFormat::Gray8,
        PixelFormat::I420,
        PixelFormat::Nv12,
        PixelFormat::P010,
    ];

    pub fn from_code(code: u32) -> Option<PixelFormat> {
        PixelFormat::ALL.into_iter().find(|f| *f as u32 == code)
    }

    /// The lower-case name used in pipeline files, plans and messages.
    pub fn name(self) -> &'static str {
        match self {
            PixelFormat::Rgb8 => "rgb8",
            PixelFormat::Rgba8 => "rgba8",
            PixelFormat::Gray8 => "gray8",
            PixelFormat::I420 => "i420",
            PixelFormat::Nv12 => "nv12",
            PixelFormat::P010 => "p010",
        }
    }

    pub fn from_name(name: &str) -> Option<PixelFormat> {
        PixelFormat::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Bytes one pixel takes in a packed format: 3 for `rgb8`, 4 for `rgba8`, 1 for `gray8`.
    /// `None` for the planar formats (`i420`, `nv12`, `p010`), whose pixels share chroma samples:
    /// use [`PixelFormat::bits_per_pixel`] for their average, or the frame's
    /// [`FrameLayout`] for the bytes of each plane.
    pub fn bytes_per_pixel(self) -> Option<u32> {
        match self {
            PixelFormat::Rgb8 => Some(3),
            PixelFormat::Rgba8 => Some(4),
            PixelFormat::Gray8 => Some(1),
            PixelFormat::I420 | PixelFormat::Nv12 | PixelFormat::P010 => None,
        }
    }

    /// Bits per pixel on average over the frame as stored, padding not counted: 24, 32, 8, and
    /// 12 for the 8-bit 4:2:0 formats (for even sizes; odd ones round their chroma planes up).
    /// `p010` stores 24: its 12 bits of samples a pixel (one Y, a quarter of a U and of a V,
    /// as in `nv12`) take 16 bits each, of which 10 carry the value.
    pub fn bits_per_pixel(self) -> u32 {
        match self {
            PixelFormat::Rgb8 => 24,
            PixelFormat::Rgba8 => 32,
            PixelFormat::Gray8 => 8,
            PixelFormat::I420 | PixelFormat::Nv12 => 12,
            PixelFormat::P010 => 24,
        }
    }

    /// How many planes a frame of this format has: 1 for the packed formats, 3 for `i420`,
    /// 2 for `nv12` and `p010`.
    pub fn planes(self) -> usize {
        self.plane_extents(2, 2).1
    }

    /// (bytes per row, rows) of each plane of a `width` x `height` frame.
    fn plane_extents(self, width: u64, height: u64) -> ([(u64, u64); MAX_PLANES], usize) {
        let (cw, ch) = (width.div_ceil(2), height.div_ceil(2));
        let mut planes = [(0, 0); MAX_PLANES];
        let n = match self {
            PixelFormat::Rgb8 => {
                planes[0] = (width * 3, height);
                1
            }
            PixelFormat::Rgba8 => {
                planes[0] = (width * 4, height);
                1
            }
            PixelFormat::Gray8 => {
                planes[0] = (width, height);
                1
            }
            PixelFormat::I420 => {
                planes[0] = (width, height);
                planes[1] = (cw, ch);
                planes[2] = (cw, ch);
                3
            }
            PixelFormat::Nv12 => {
                planes[0] = (width, height);
                planes[1] = (cw * 2, ch);
                2
            }
            PixelFormat::P010 => {
                planes[0] = (width * 2, height);
                planes[1] = (cw * 4, ch);
                2
            }
        };
        (planes, n)
    }
}

impl fmt::Display for PixelFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a frame is: its pixel format and size. Crosses the ABI as is.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameFormat {
    /// A [`PixelFormat`] code.
    pub pixel: u32,
    pub width: u32,
    pub height: u32,
}

impl FrameFormat {
    pub fn new(pixel: PixelFormat, width: u32, height: u32) -> FrameFormat {
        FrameFormat { pixel: pixel as u32, width, height }
    }

    /// The pixel format, or `None` for a code this build does not know.
    pub fn pixel_format(&self) -> Option<PixelFormat> {
        PixelFormat::from_code(self.pixel)
    }
}

impl fmt::Display for FrameFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pixel_format() {
            Some(p) => write!(f, "{p} {}x{}", self.width, self.height),
            None => write!(f, "format#{} {}x{}", self.pixel, self.width, self.height),
        }
    }
}

/// Where one plane lives inside a frame's memory.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlaneLayout {
    /// Byte offset of the first row from the start of the frame.
    pub offset: u64,
    /// Bytes from the start of one row to the start of the next.
    pub pitch: u64,
    /// Bytes of pixels in a row (the rest of the pitch is padding).
    pub row_bytes: u64,
    pub rows: u64,
}

/// Where every plane of a frame lives, and how many bytes the frame takes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLayout {
    pub planes: [PlaneLayout; MAX_PLANES],
    pub n_planes: u32,
    pub total_bytes: u64,
}

impl FrameLayout {
    /// The layout every link uses: planes one after another, rows padded to [`PITCH_ALIGN`],
    /// planes aligned to [`PLANE_ALIGN`]. `None` for an unknown pixel code or an empty frame.
    pub fn for_format(format: FrameFormat) -> Option<FrameLayout> {
        let pixel = format.pixel_format()?;
        if format.width == 0 || format.height == 0 {
            return None;
        }
        let (extents, n) = pixel.plane_extents(format.width as u64, format.height as u64);
        let mut planes = [PlaneLayout::default(); MAX_PLANES];
        let mut offset = 0u64;
        for (plane, &(row_bytes, rows)) in planes.iter_mut().zip(&extents[..n]) {
            let pitch = row_bytes.next_multiple_of(PITCH_ALIGN);
            *plane = PlaneLayout { offset, pitch, row_bytes, rows };
            offset = (offset + pitch * rows).next_multiple_of(PLANE_ALIGN);
        }
        Some(FrameLayout { planes, n_planes: n as u32, total_bytes: offset })
    }

    pub fn planes(&self) -> &[PlaneLayout] {
        &self.planes[..self.n_planes as usize]
    }

    /// Bytes of pixels, padding not counted.
    pub fn pixel_bytes(&self) -> u64 {
        self.planes().iter().map(|p| p.row_bytes * p.rows).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_sized_i420_rounds_chroma_up() {
        let l = FrameLayout::for_format(FrameFormat::new(PixelFormat::I420, 5, 3)).unwrap();
        assert_eq!(l.n_planes, 3);
        assert_eq!((l.planes[0].row_bytes, l.planes[0].rows), (5, 3));
        assert_eq!((l.planes[1].row_bytes, l.planes[1].rows), (3, 2));
        assert_eq!((l.planes[2].row_bytes, l.planes[2].rows), (3, 2));
        assert_eq!(l.planes[1].offset, 256);
        assert_eq!(l.planes[2].offset, 512);
        assert_eq!(l.pixel_bytes(), 15 + 6 + 6);
    }

    #[test]
    fn nv12_chroma_is_interleaved_pairs() {
        let l = FrameLayout::for_format(FrameFormat::new(PixelFormat::Nv12, 7, 7)).unwrap();
        assert_eq!(l.n_planes, 2);
        assert_eq!((l.planes[1].row_bytes, l.planes[1].rows), (8, 4));
    }

    #[test]
    fn p010_is_nv12_with_two_bytes_a_sample() {
        // Odd sizes: chroma rounds up, each U, V pair takes 4 bytes.
        let l = FrameLayout::for_format(FrameFormat::new(PixelFormat::P010, 7, 7)).unwrap();
        assert_eq!(l.n_planes, 2);
        assert_eq!((l.planes[0].row_bytes, l.planes[0].rows), (14, 7));
        assert_eq!((l.planes[1].row_bytes, l.planes[1].rows), (16, 4));
        assert_eq!(l.planes[1].offset, 512);
        assert_eq!(l.pixel_bytes(), 14 * 7 + 16 * 4);
        let l = FrameLayout::for_format(FrameFormat::new(PixelFormat::P010, 5, 3)).unwrap();
        assert_eq!((l.planes[0].row_bytes, l.planes[0].rows), (10, 3));
        assert_eq!((l.planes[1].row_bytes, l.planes[1].rows), (12, 2));
        assert_eq!(l.pixel_bytes(), 30 + 24);
        // Twice nv12's bytes, plane by plane, at any size.
        for (w, h) in [(1, 1), (2, 2), (5, 3), (33, 17), (1920, 1080)] {
            let p010 = FrameLayout::for_format(FrameFormat::new(PixelFormat::P010, w, h)).unwrap();
            let nv12 = FrameLayout::for_format(FrameFormat::new(PixelFormat::Nv12, w, h)).unwrap();
            for (p, n) in p010.planes().iter().zip(nv12.planes()) {
                assert_eq!((p.row_bytes, p.rows), (2 * n.row_bytes, n.rows), "{w}x{h}");
                assert_eq!(p.pitch % PITCH_ALIGN, 0);
            }
        }
        assert_eq!(PixelFormat::P010.planes(), 2);
        assert_eq!(PixelFormat::P010.bits_per_pixel(), 24);
        assert_eq!(PixelFormat::P010.bytes_per_pixel(), None);
        assert_eq!((PixelFormat::P010 as u32, PixelFormat::P010.name()), (6, "p010"));
    }

    #[test]
    fn rgb_rows_are_padded_to_the_pitch_alignment() {
        let l = FrameLayout::for_format(FrameFormat::new(PixelFormat::Rgb8, 33, 2)).unwrap();
        assert_eq!(l.planes[0].row_bytes, 99);
        assert_eq!(l.planes[0].pitch, 128);
        assert_eq!(l.total_bytes, 256);
    }

    #[test]
    fn empty_or_unknown_formats_have_no_layout() {
        assert!(FrameLayout::for_format(FrameFormat::new(PixelFormat::Rgb8, 0, 2)).is_none());
        assert!(FrameLayout::for_format(FrameFormat { pixel: 99, width: 2, height: 2 }).is_none());
    }

    #[test]
    fn bytes_per_pixel_agree_with_the_layout() {
        for f in PixelFormat::ALL {
            let l = FrameLayout::for_format(FrameFormat::new(f, 6, 4)).unwrap();
            assert_eq!(l.n_planes as usize, f.planes(), "{f}");
            assert_eq!(l.pixel_bytes() * 8, 6 * 4 * f.bits_per_pixel() as u64, "{f}");
            match f.bytes_per_pixel() {
                Some(b) => assert_eq!(l.planes[0].row_bytes, 6 * b as u64, "{f}"),
                None => assert!(f.planes() > 1, "{f}"),
            }
        }
    }

    #[test]
    fn names_round_trip() {
        for f in PixelFormat::ALL {
            assert_eq!(PixelFormat::from_name(f.name()), Some(f));
            assert_eq!(PixelFormat::from_code(f as u32), Some(f));
        }
    }
}
