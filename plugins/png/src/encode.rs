//! A small PNG encoder: 8-bit gray, RGB and RGBA images, one IDAT chunk holding a zlib stream
//! of either stored deflate blocks or one block of fixed Huffman codes over a greedy LZ77
//! match (a hash of 3 bytes, the last position per hash, a 32 KiB window), with a filter per
//! row chosen by the usual heuristic (the least sum of absolute values). CRC-32 and Adler-32
//! are computed here. No ancillary chunks.

/// The eight bytes every PNG file starts with.
pub const SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The PNG colour types written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorType {
    Gray = 0,
    Rgb = 2,
    Rgba = 6,
}

impl ColorType {
    pub fn channels(self) -> usize {
        match self {
            ColorType::Gray => 1,
            ColorType::Rgb => 3,
            ColorType::Rgba => 4,
        }
    }
}

/// How the pixel data is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Stored deflate blocks and filter 0 (None) on every row: the fastest, the largest.
    None,
    /// Fixed Huffman codes over LZ77 matches, rows filtered.
    #[default]
    Fast,
}

/// CRC-32 (ISO 3309, polynomial 0xEDB88320, reflected), as PNG chunks use.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32_update(0xffff_ffff, bytes) ^ 0xffff_ffff
}

const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
};

fn crc32_update(mut crc: u32, bytes: &[u8]) -> u32 {
    for &b in bytes {
        crc = CRC_TABLE[((crc ^ b as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

/// Adler-32 (RFC 1950), the zlib stream's checksum.
pub fn adler32(bytes: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that cannot overflow `b` before the modulo (zlib's NMAX).
    for chunk in bytes.chunks(5552) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

/// A PNG file of a `width` x `height` image whose row `y` is `row(y)` (`width * channels`
/// bytes each).
pub fn encode<'a>(
    width: u32,
    height: u32,
    color: ColorType,
    compression: Compression,
    row: impl Fn(usize) -> &'a [u8],
) -> Vec<u8> {
    let bpp = color.channels();
    let row_bytes = width as usize * bpp;
    // The filtered image: per row a filter type byte, then the row.
    let mut raw = Vec::with_capacity((row_bytes + 1) * height as usize);
    let mut candidate = vec![0u8; row_bytes];
    let mut best = vec![0u8; row_bytes];
    let empty = vec![0u8; row_bytes];
    for y in 0..height as usize {
        let cur = row(y);
        let prev = if y == 0 { &empty[..] } else { row(y - 1) };
        debug_assert_eq!(cur.len(), row_bytes);
        if compression == Compression::None {
            raw.push(0);
            raw.extend_from_slice(cur);
            continue;
        }
        let mut best_filter = 0u8;
        let mut best_cost = u64::MAX;
        for filter in 0..5u8 {
            apply_filter(filter, cur, prev, bpp, &mut candidate);
            // Bytes read as signed: values near 0 (either side) are what compresses.
            let cost = candidate.iter().map(|&b| (b as i8).unsigned_abs() as u64).sum();
            if cost < best_cost {
                (best_cost, best_filter) = (cost, filter);
                std::mem::swap(&mut best, &mut candidate);
            }
        }
        raw.push(best_filter);
        raw.extend_from_slice(&best);
    }
    let idat = zlib(&raw, compression);

    let mut out = Vec::with_capacity(idat.len() + 64);
    out.extend_from_slice(&SIGNATURE);
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    // Bit depth 8, the colour type, compression 0 (deflate), filter method 0, no interlace.
    ihdr.extend_from_slice(&[8, color as u8, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Append a chunk: length, type, data, CRC of type and data.
fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    let len = u32::try_from(data.len()).expect("a chunk is under 4 GiB: frames are");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32_update(crc32_update(0xffff_ffff, kind), data) ^ 0xffff_ffff;
    out.extend_from_slice(&crc.to_be_bytes());
}

/// Filter `cur` (with the row above `prev`, zeros for the first row) into `out` with PNG filter
/// type `filter`: 0 None, 1 Sub, 2 Up, 3 Average, 4 Paeth.
fn apply_filter(filter: u8, cur: &[u8], prev: &[u8], bpp: usize, out: &mut [u8]) {
    for i in 0..cur.len() {
        let a = if i >= bpp { cur[i - bpp] } else { 0 };
        let b = prev[i];
        let c = if i >= bpp { prev[i - bpp] } else { 0 };
        let predicted = match filter {
            0 => 0,
            1 => a,
            2 => b,
            3 => ((a as u16 + b as u16) / 2) as u8,
            _ => paeth(a, b, c),
        };
        out[i] = cur[i].wrapping_sub(predicted);
    }
}

/// The Paeth predictor of PNG: of a (left), b (up), c (up-left), the one nearest a + b - c.
pub fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = a as i16 + b as i16 - c as i16;
    let (pa, pb, pc) = ((p - a as i16).abs(), (p - b as i16).abs(), (p - c as i16).abs());
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

/// A zlib stream (RFC 1950) of `data`: header, deflate, Adler-32.
pub fn zlib(data: &[u8], compression: Compression) -> Vec<u8> {
    // CMF 0x78: deflate, 32 KiB window; FLG 0x01: no dictionary, and 0x7801 % 31 == 0.
    let mut out = vec![0x78, 0x01];
    match compression {
        Compression::None => stored(data, &mut out),
        Compression::Fast => {
            // Data that does not compress (noise) grows under fixed codes (bytes 144..=255 take
            // 9 bits): then it is stored instead.
            let mut coded = Vec::new();
            fixed_huffman(data, &mut coded);
            if coded.len() <= stored_len(data.len()) {
                out.extend_from_slice(&coded);
            } else {
                stored(data, &mut out);
            }
        }
    }
    out.extend_from_slice(&adler32(data).to_be_bytes());
    out
}

/// Bytes of [`stored`] deflate for `len` bytes: 5 bytes of header per block of 65535.
fn stored_len(len: usize) -> usize {
    len + 5 * len.div_ceil(0xffff).max(1)
}

/// Deflate as stored blocks of at most 65535 bytes (an empty input is one empty block).
fn stored(data: &[u8], out: &mut Vec<u8>) {
    let mut blocks = data.chunks(0xffff).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xff, 0xff]);
        return;
    }
    while let Some(block) = blocks.next() {
        // BFINAL in bit 0, BTYPE 00, then the rest of the byte is padding.
        out.push(blocks.peek().is_none() as u8);
        let len = block.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(block);
    }
}

/// Bits written least significant first, as deflate packs them.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits<'_> {
    fn put(&mut self, value: u32, count: u32) {
        self.acc |= (value as u64) << self.n;
        self.n += count;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// A Huffman code: written from its most significant bit.
    fn code(&mut self, code: u32, len: u32) {
        self.put(code.reverse_bits() >> (32 - len), len);
    }

    fn finish(mut self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.n = 0;
    }
}

/// The fixed literal/length code of symbol `sym` (0..=287): (code, bits).
fn fixed_code(sym: u32) -> (u32, u32) {
    match sym {
        0..=143 => (0x30 + sym, 8),
        144..=255 => (0x190 + sym - 144, 9),
        256..=279 => (sym - 256, 7),
        _ => (0xc0 + sym - 280, 8),
    }
}

/// Lengths 3..=258: (first length, extra bits) of length codes 257..=285.
const LENGTH_BASE: [(u16, u8); 29] = [
    (3, 0),
    (4, 0),
    (5, 0),
    (6, 0),
    (7, 0),
    (8, 0),
    (9, 0),
    (10, 0),
    (11, 1),
    (13, 1),
    (15, 1),
    (17, 1),
    (19, 2),
    (23, 2),
    (27, 2),
    (31, 2),
    (35, 3),
    (43, 3),
    (51, 3),
    (59, 3),
    (67, 4),
    (83, 4),
    (99, 4),
    (115, 4),
    (131, 5),
    (163, 5),
    (195, 5),
    (227, 5),
    (258, 0),
];

/// Distances 1..=32768: (first distance, extra bits) of distance codes 0..=29.
const DIST_BASE: [(u16, u8); 30] = [
    (1, 0),
    (2, 0),
    (3, 0),
    (4, 0),
    (5, 1),
    (7, 1),
    (9, 2),
    (13, 2),
    (17, 3),
    (25, 3),
    (33, 4),
    (49, 4),
    (65, 5),
    (97, 5),
    (129, 6),
    (193, 6),
    (257, 7),
    (385, 7),
    (513, 8),
    (769, 8),
    (1025, 9),
    (1537, 9),
    (2049, 10),
    (3073, 10),
    (4097, 11),
    (6145, 11),
    (8193, 12),
    (12289, 12),
    (16385, 13),
    (24577, 13),
];

/// The index of the last entry of `table` whose first value is at most `value`.
fn code_of(table: &[(u16, u8)], value: u16) -> usize {
    table.partition_point(|&(base, _)| base <= value) - 1
}

const WINDOW: usize = 32768;
const MIN_MATCH: usize = 3;
const MAX_MATCH: usize = 258;
const HASH_BITS: u32 = 15;

fn hash3(b: &[u8]) -> usize {
    let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
    (v.wrapping_mul(0x9e37_79b1) >> (32 - HASH_BITS)) as usize
}

/// Deflate as one final block of fixed Huffman codes (BTYPE 01) over greedy LZ77 matches.
fn fixed_huffman(data: &[u8], out: &mut Vec<u8>) {
    let mut bits = Bits { out, acc: 0, n: 0 };
    bits.put(1, 1); // BFINAL
    bits.put(1, 2); // BTYPE 01: fixed codes
    // The last position + 1 seen with each hash (0: none).
    let mut head = vec![0usize; 1 << HASH_BITS];
    let mut i = 0;
    while i < data.len() {
        let mut length = 0;
        let mut distance = 0;
        if i + MIN_MATCH <= data.len() {
            let h = hash3(&data[i..]);
            if let Some(candidate) = head[h].checked_sub(1)
                && i - candidate <= WINDOW
            {
                let max = (data.len() - i).min(MAX_MATCH);
                let n = data[candidate..].iter().zip(&data[i..i + max]).take_while(|(a, b)| a == b).count();
                if n >= MIN_MATCH {
                    (length, distance) = (n, i - candidate);
                }
            }
            head[h] = i + 1;
        }
        if length == 0 {
            let (code, len) = fixed_code(data[i] as u32);
            bits.code(code, len);
            i += 1;
            continue;
        }
        let l = code_of(&LENGTH_BASE, length as u16);
        let (code, len) = fixed_code(257 + l as u32);
        bits.code(code, len);
        bits.put((length - LENGTH_BASE[l].0 as usize) as u32, LENGTH_BASE[l].1 as u32);
        let d = code_of(&DIST_BASE, distance as u16);
        bits.code(d as u32, 5);
        bits.put((distance - DIST_BASE[d].0 as usize) as u32, DIST_BASE[d].1 as u32);
        // Remember the positions inside the match too (a run then matches itself onwards).
        for j in i + 1..(i + length).min(data.len().saturating_sub(MIN_MATCH - 1)) {
            head[hash3(&data[j..])] = j + 1;
        }
        i += length;
    }
    let (code, len) = fixed_code(256); // end of block
    bits.code(code, len);
    bits.finish();
}

/// A PNG decoder for what [`encode`] writes and little else (8-bit, no interlace; stored and
/// fixed-Huffman deflate blocks), for tests: it checks every CRC, the zlib header and the
/// Adler-32, and undoes every filter type.
#[cfg(test)]
pub mod decode {
    use super::*;

    /// A decoded image: width, height, colour type, packed rows.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Image {
        pub width: u32,
        pub height: u32,
        pub color: u8,
        pub pixels: Vec<u8>,
    }

    fn be32(b: &[u8]) -> u32 {
        u32::from_be_bytes(b[..4].try_into().unwrap())
    }

    pub fn png(file: &[u8]) -> Result<Image, String> {
        let rest = file.strip_prefix(&SIGNATURE[..]).ok_or("no PNG signature")?;
        let mut pos = 0;
        let (mut ihdr, mut idat, mut ended) = (None, Vec::new(), false);
        while pos < rest.len() {
            let len = be32(&rest[pos..]) as usize;
            let kind = &rest[pos + 4..pos + 8];
            let data = &rest[pos + 8..pos + 8 + len];
            let crc = be32(&rest[pos + 8 + len..]);
            if crc32(&rest[pos + 4..pos + 8 + len]) != crc {
                return Err(format!("bad CRC of chunk {}", String::from_utf8_lossy(kind)));
            }
            match kind {
                b"IHDR" => ihdr = Some(data.to_vec()),
                b"IDAT" => idat.extend_from_slice(data),
                b"IEND" => ended = true,
                _ => return Err(format!("unexpected chunk {}", String::from_utf8_lossy(kind))),
            }
            pos += 12 + len;
            if ended && pos != rest.len() {
                return Err("bytes after IEND".into());
            }
        }
        let ihdr = ihdr.ok_or("no IHDR")?;
        if !ended {
            return Err("no IEND".into());
        }
        let (width, height, depth, color) = (be32(&ihdr), be32(&ihdr[4..]), ihdr[8], ihdr[9]);
        if depth != 8 || ihdr[10..13] != [0, 0, 0] {
            return Err(format!("unsupported IHDR {ihdr:?}"));
        }
        let bpp = match color {
            0 => 1,
            2 => 3,
            6 => 4,
            _ => return Err(format!("colour type {color}")),
        };
        let raw = zlib(&idat)?;
        let row_bytes = width as usize * bpp;
        if raw.len() != (row_bytes + 1) * height as usize {
            return Err(format!("{} bytes of image data, expected {}", raw.len(), (row_bytes + 1) * height as usize));
        }
        let mut pixels: Vec<u8> = Vec::with_capacity(row_bytes * height as usize);
        for (y, line) in raw.chunks(row_bytes + 1).enumerate() {
            let filter = line[0];
            for i in 0..row_bytes {
                let a = if i >= bpp { pixels[y * row_bytes + i - bpp] } else { 0 };
                let b = if y > 0 { pixels[(y - 1) * row_bytes + i] } else { 0 };
                let c = if y > 0 && i >= bpp { pixels[(y - 1) * row_bytes + i - bpp] } else { 0 };
                let predicted = match filter {
                    0 => 0,
                    1 => a,
                    2 => b,
                    3 => ((a as u16 + b as u16) / 2) as u8,
                    4 => paeth(a, b, c),
                    _ => return Err(format!("filter type {filter}")),
                };
                pixels.push(line[1 + i].wrapping_add(predicted));
            }
        }
        Ok(Image { width, height, color, pixels })
    }

    pub fn zlib(stream: &[u8]) -> Result<Vec<u8>, String> {
        if stream.len() < 6 || stream[0] & 0x0f != 8 || !(stream[0] as u32 * 256 + stream[1] as u32).is_multiple_of(31)
        {
            return Err("bad zlib header".into());
        }
        let (body, check) = stream[2..].split_at(stream.len() - 6);
        let data = inflate(body)?;
        if adler32(&data) != be32(check) {
            return Err("bad Adler-32".into());
        }
        Ok(data)
    }

    struct In<'a> {
        bytes: &'a [u8],
        bit: usize,
    }

    impl In<'_> {
        fn get(&mut self, n: u32) -> Result<u32, String> {
            let mut v = 0;
            for k in 0..n {
                let byte = *self.bytes.get(self.bit / 8).ok_or("deflate stream ends early")?;
                v |= (((byte >> (self.bit % 8)) & 1) as u32) << k;
                self.bit += 1;
            }
            Ok(v)
        }

        /// A fixed-code literal/length symbol, read a bit at a time from the top.
        fn symbol(&mut self) -> Result<u32, String> {
            let mut code = 0;
            for len in 1..=9 {
                code = (code << 1) | self.get(1)?;
                let sym = match len {
                    7 if code <= 23 => Some(code + 256),
                    8 if (0x30..=0xbf).contains(&code) => Some(code - 0x30),
                    8 if (0xc0..=0xc7).contains(&code) => Some(code - 0xc0 + 280),
                    9 if (0x190..=0x1ff).contains(&code) => Some(code - 0x190 + 144),
                    _ => None,
                };
                if let Some(sym) = sym {
                    return Ok(sym);
                }
            }
            Err("bad fixed code".into())
        }
    }

    pub fn inflate(body: &[u8]) -> Result<Vec<u8>, String> {
        let mut input = In { bytes: body, bit: 0 };
        let mut out: Vec<u8> = Vec::new();
        loop {
            let last = input.get(1)?;
            match input.get(2)? {
                0 => {
                    input.bit = input.bit.div_ceil(8) * 8;
                    let len = input.get(16)? as usize;
                    let nlen = input.get(16)? as usize;
                    if len != !nlen & 0xffff {
                        return Err("stored block LEN != !NLEN".into());
                    }
                    let start = input.bit / 8;
                    out.extend_from_slice(body.get(start..start + len).ok_or("stored block ends early")?);
                    input.bit += 8 * len;
                }
                1 => loop {
                    let sym = input.symbol()?;
                    match sym {
                        0..=255 => out.push(sym as u8),
                        256 => break,
                        257..=285 => {
                            let (base, extra) = LENGTH_BASE[sym as usize - 257];
                            let length = base as usize + input.get(extra as u32)? as usize;
                            let mut d = 0;
                            for _ in 0..5 {
                                d = (d << 1) | input.get(1)?;
                            }
                            let (base, extra) = *DIST_BASE.get(d as usize).ok_or("bad distance code")?;
                            let distance = base as usize + input.get(extra as u32)? as usize;
                            if distance > out.len() {
                                return Err("distance beyond the start".into());
                            }
                            for _ in 0..length {
                                out.push(out[out.len() - distance]);
                            }
                        }
                        _ => return Err(format!("symbol {sym}")),
                    }
                },
                t => return Err(format!("block type {t} (only stored and fixed are written)")),
            }
            if last == 1 {
                return Ok(out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_have_their_known_values() {
        // The check values of the CRC-32 and Adler-32 catalogues.
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"IEND"), 0xae42_6082); // every PNG's last four bytes
        assert_eq!(adler32(b"Wikipedia"), 0x11e6_0398);
        assert_eq!(adler32(b""), 1);
        // Past the point where the sums must be reduced.
        let big = vec![0xffu8; 100_000];
        let (mut a, mut b) = (1u64, 0u64);
        for &x in &big {
            a = (a + x as u64) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(adler32(&big), ((b << 16) | a) as u32);
    }

    #[test]
    fn a_one_pixel_gray_image_is_byte_exact() {
        // Stored: IHDR, IDAT of zlib(00 80) in one stored block, IEND.
        let png = encode(1, 1, ColorType::Gray, Compression::None, |_| &[0x80]);
        let mut want = SIGNATURE.to_vec();
        want.extend_from_slice(&[0, 0, 0, 13, b'I', b'H', b'D', b'R', 0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0]);
        want.extend_from_slice(&crc32(&want[12..29]).to_be_bytes());
        let idat = [0x78, 0x01, 0x01, 0x02, 0x00, 0xfd, 0xff, 0x00, 0x80, 0x00, 0x82, 0x00, 0x81];
        want.extend_from_slice(&(idat.len() as u32).to_be_bytes());
        want.extend_from_slice(b"IDAT");
        want.extend_from_slice(&idat);
        want.extend_from_slice(&crc32(&[b"IDAT".as_slice(), &idat].concat()).to_be_bytes());
        want.extend_from_slice(&[0, 0, 0, 0, b'I', b'E', b'N', b'D', 0xae, 0x42, 0x60, 0x82]);
        assert_eq!(png, want);
        // The IHDR CRC of a 1x1 8-bit gray image, as other encoders write it.
        assert_eq!(&png[29..33], &[0x3a, 0x7e, 0x9b, 0x55]);
    }

    /// An image with flat runs, gradients and noise, `channels` bytes a pixel.
    fn image(width: usize, height: usize, channels: usize) -> Vec<u8> {
        let mut state = 0x1234_5678u32;
        let mut out = Vec::with_capacity(width * height * channels);
        for y in 0..height {
            for x in 0..width {
                for c in 0..channels {
                    state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    out.push(match (y / 7) % 3 {
                        0 => (x * 3 + c * 50) as u8,
                        1 => {
                            if x < width / 2 {
                                200
                            } else {
                                (c * 40) as u8
                            }
                        }
                        _ => (state >> 24) as u8,
                    });
                }
            }
        }
        out
    }

    #[test]
    fn encoded_images_decode_to_their_pixels() {
        for (color, channels) in [(ColorType::Gray, 1), (ColorType::Rgb, 3), (ColorType::Rgba, 4)] {
            for (w, h) in [(1, 1), (5, 3), (64, 40), (300, 23), (1, 70)] {
                let pixels = image(w, h, channels);
                let row = |y: usize| &pixels[y * w * channels..(y + 1) * w * channels];
                for compression in [Compression::None, Compression::Fast] {
                    let png = encode(w as u32, h as u32, color, compression, row);
                    let decoded =
                        decode::png(&png).unwrap_or_else(|e| panic!("{color:?} {w}x{h} {compression:?}: {e}"));
                    assert_eq!(
                        decoded,
                        decode::Image { width: w as u32, height: h as u32, color: color as u8, pixels: pixels.clone() },
                        "{color:?} {w}x{h} {compression:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn zlib_streams_round_trip_and_fast_compresses() {
        let mut long_run = vec![7u8; 100_000];
        long_run.extend((0..70_000u32).map(|i| (i % 251) as u8));
        let cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            vec![1],
            b"abcabcabcabcabcabcabc".to_vec(),
            (0..=255).collect(),
            long_run.clone(),
            // Matches at the largest distance and length.
            [vec![9u8; 40_000], (0..40_000u32).map(|i| (i * 7 % 256) as u8).collect(), vec![9u8; 300]].concat(),
        ];
        for data in &cases {
            for compression in [Compression::None, Compression::Fast] {
                let stream = zlib(data, compression);
                assert_eq!(&decode::zlib(&stream).unwrap(), data, "{compression:?} of {} bytes", data.len());
            }
        }
        // Stored blocks: 65535 bytes each, and 5 bytes of header per block.
        assert_eq!(zlib(&long_run, Compression::None).len(), 2 + long_run.len() + 3 * 5 + 4);
        // The run and the repeated ramp shrink to almost nothing.
        assert!(zlib(&long_run, Compression::Fast).len() < 3000, "{}", zlib(&long_run, Compression::Fast).len());
        // Noise would grow under fixed codes: it is stored, no larger than with `None`.
        let mut state = 1u32;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (state >> 24) as u8
            })
            .collect();
        let fast = zlib(&noise, Compression::Fast);
        assert_eq!(fast.len(), zlib(&noise, Compression::None).len());
        assert_eq!(decode::zlib(&fast).unwrap(), noise);
        for data in &cases {
            assert_eq!(stored_len(data.len()) + 6, zlib(data, Compression::None).len());
        }
    }

    #[test]
    fn rows_get_the_filter_that_suits_them() {
        // A horizontal ramp: Sub makes it constant; a copy of the row above: Up makes it 0.
        let ramp: Vec<u8> = (0..30).map(|i| i * 5).collect();
        let rows = [ramp.clone(), ramp.clone()];
        let png = encode(30, 2, ColorType::Gray, Compression::Fast, |y| &rows[y]);
        let idat_start = 8 + 25 + 8;
        let raw = decode::zlib(&png[idat_start..idat_start + be_len(&png[33..])]).unwrap();
        assert_eq!(raw[0], 1, "first row: Sub");
        assert_eq!(raw[31], 2, "second row: Up");
        assert!(raw[32..].iter().all(|&b| b == 0));
    }

    fn be_len(b: &[u8]) -> usize {
        u32::from_be_bytes(b[..4].try_into().unwrap()) as usize
    }
}
