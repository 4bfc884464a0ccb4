//! Comparing two frames of one layout: how many pixel bytes differ and by how much at most.
//! Row padding is never compared (no kernel writes it).

use gpuipc_plugin_api::FrameLayout;

/// The pixel bytes of two frames compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Diff {
    /// Pixel bytes compared (padding not counted).
    pub bytes: u64,
    /// Of those, how many differ.
    pub differing: u64,
    /// The largest absolute difference of one byte.
    pub max: u8,
    /// Where the first difference is: (plane, row, byte in the row).
    pub first: Option<(usize, u64, u64)>,
}

impl Diff {
    pub fn identical(&self) -> bool {
        self.differing == 0
    }

    /// Every byte within `tolerance` of the other.
    pub fn within(&self, tolerance: u8) -> bool {
        self.max <= tolerance
    }

    /// "identical", or "N of M bytes differ (P %), max D, first at plane p row r byte b".
    pub fn describe(&self) -> String {
        match self.first {
            None => "identical".into(),
            Some((plane, row, byte)) => format!(
                "{} of {} bytes differ ({:.2} %), max {}, first at plane {plane} row {row} byte {byte}",
                self.differing,
                self.bytes,
                100.0 * self.differing as f64 / self.bytes.max(1) as f64,
                self.max
            ),
        }
    }
}

/// Compare the pixel bytes of every plane of `a` and `b`, both frames of `layout`. Bytes a
/// frame is too short to hold count as differing by 255.
pub fn diff_frames(layout: &FrameLayout, a: &[u8], b: &[u8]) -> Diff {
    let mut d = Diff::default();
    for (index, plane) in layout.planes().iter().enumerate() {
        for row in 0..plane.rows {
            let start = (plane.offset + row * plane.pitch) as usize;
            let end = start + plane.row_bytes as usize;
            d.bytes += plane.row_bytes;
            let (Some(ra), Some(rb)) = (a.get(start..end), b.get(start..end)) else {
                d.differing += plane.row_bytes;
                d.max = 255;
                d.first.get_or_insert((index, row, 0));
                continue;
            };
            for (i, (&x, &y)) in ra.iter().zip(rb).enumerate() {
                if x != y {
                    d.differing += 1;
                    d.max = d.max.max(x.abs_diff(y));
                    d.first.get_or_insert((index, row, i as u64));
                }
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuipc_plugin_api::{FrameFormat, PixelFormat};

    fn layout(pixel: PixelFormat, w: u32, h: u32) -> FrameLayout {
        FrameLayout::for_format(FrameFormat::new(pixel, w, h)).unwrap()
    }

    #[test]
    fn padding_is_not_compared() {
        let l = layout(PixelFormat::Rgb8, 5, 2); // 15 bytes a row, pitch 64
        let a = vec![7u8; l.total_bytes as usize];
        let mut b = a.clone();
        b[20] = 0; // padding of row 0
        b[64 + 63] = 1; // padding of row 1
        let d = diff_frames(&l, &a, &b);
        assert!(d.identical());
        assert_eq!(d.bytes, 30);
        assert_eq!(d.describe(), "identical");
    }

    #[test]
    fn counts_differences_in_every_plane() {
        let l = layout(PixelFormat::I420, 4, 2);
        let a = vec![100u8; l.total_bytes as usize];
        let mut b = a.clone();
        b[1] = 101; // Y row 0
        b[l.planes[2].offset as usize + 1] = 97; // V, second sample
        let d = diff_frames(&l, &a, &b);
        assert_eq!((d.bytes, d.differing, d.max), (8 + 2 + 2, 2, 3));
        assert_eq!(d.first, Some((0, 0, 1)));
        assert!(d.within(3) && !d.within(2));
        assert!(d.describe().starts_with("2 of 12 bytes differ (16.67 %), max 3, first at plane 0 row 0 byte 1"));
    }

    #[test]
    fn a_short_frame_differs_everywhere_it_is_missing() {
        let l = layout(PixelFormat::Gray8, 4, 2);
        let a = vec![0u8; l.total_bytes as usize];
        let d = diff_frames(&l, &a, &a[..64]);
        assert_eq!((d.differing, d.max, d.first), (4, 255, Some((0, 1, 0))));
    }
}
