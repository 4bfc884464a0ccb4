//! The YUV4MPEG2 stream header and `FRAME` lines, as the y4m source reads them.
//!
//! A stream is one header line, `YUV4MPEG2` and space-separated tags, then per frame a line
//! `FRAME` (with optional tags of its own, ignored here) followed by the frame's planes. A tag
//! is one letter and its value: `W` width, `H` height, `F` rate `num:den`, `I` interlacing
//! (`p`, `t`, `b`, `m` or `?`), `A` pixel aspect `num:den`, `C` chroma (`420jpeg` when absent),
//! `X` an application's own. Tags of other letters are skipped, as the format asks of readers.

use std::io::Read;

/// The longest header or `FRAME` line accepted, newline included: lines of real streams are
/// well under 100 bytes; a longer one means this is not a y4m stream.
pub const MAX_LINE: usize = 4096;

/// The largest width or height accepted (the generator's limit too).
pub const MAX_SIZE: u32 = 32768;

/// The `C` values that mean 8-bit 4:2:0, i420 planes. They differ only in where chroma sits
/// (centred, co-sited left, ...), which converting with a 2x2 block per sample ignores.
pub const CHROMA_420: [&str; 4] = ["420jpeg", "420mpeg2", "420paldv", "420"];

/// What a header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub width: u32,
    pub height: u32,
    /// `F`: frames per second as `num:den`; `(0, 0)` when absent or unknown.
    pub rate: (u32, u32),
    /// `I`: `p` progressive, `t` top field first, `b` bottom first, `m` mixed, `?` unknown
    /// (`?` when absent). Interlaced frames are read as whole frames, as they are stored.
    pub interlace: char,
    /// `A`: pixel aspect ratio as `num:den`; `(0, 0)` when absent or unknown.
    pub aspect: (u32, u32),
    /// `C`, as written; `None` when absent (which means `420jpeg`).
    pub chroma: Option<String>,
}

impl Header {
    /// Parse a header line (without its newline). `what` names the stream in errors.
    pub fn parse(line: &[u8], what: &str) -> Result<Header, String> {
        let text = std::str::from_utf8(line)
            .map_err(|_| format!("{what} is not a YUV4MPEG2 stream: its first line is not text"))?;
        let mut tags = text.split(' ');
        if tags.next() != Some("YUV4MPEG2") {
            let start: String = text.chars().take(20).collect();
            return Err(format!("{what} is not a YUV4MPEG2 stream: it starts with {start:?}, not \"YUV4MPEG2 \""));
        }
        let mut header = Header { width: 0, height: 0, rate: (0, 0), interlace: '?', aspect: (0, 0), chroma: None };
        let (mut width, mut height) = (None, None);
        for tag in tags.filter(|t| !t.is_empty()) {
            let mut chars = tag.chars();
            let letter = chars.next().expect("tags are not empty");
            let value = chars.as_str();
            let bad = |meaning: &str| format!("{what}: header tag `{tag}` is not {meaning}");
            match letter {
                'W' => width = Some(size(value).ok_or_else(|| bad("a width in 1..=32768"))?),
                'H' => height = Some(size(value).ok_or_else(|| bad("a height in 1..=32768"))?),
                'F' => header.rate = ratio(value).ok_or_else(|| bad("a frame rate `F<num>:<den>`"))?,
                'A' => header.aspect = ratio(value).ok_or_else(|| bad("a pixel aspect `A<num>:<den>`"))?,
                'I' => {
                    header.interlace = match value {
                        "p" | "t" | "b" | "m" | "?" => value.chars().next().expect("one letter"),
                        _ => return Err(bad("an interlacing `Ip`, `It`, `Ib`, `Im` or `I?`")),
                    }
                }
                'C' => header.chroma = Some(value.to_owned()),
                _ => {} // `X` and letters a later version may add
            }
        }
        match (width, height) {
            (Some(w), Some(h)) => (header.width, header.height) = (w, h),
            _ => {
                return Err(format!(
                    "{what}: the header has no {} tag",
                    if width.is_none() { "W (width)" } else { "H (height)" }
                ));
            }
        }
        if let Some(chroma) = &header.chroma
            && !CHROMA_420.contains(&chroma.as_str())
        {
            return Err(format!(
                "{what}: the stream is C{chroma}; the y4m source reads 8-bit 4:2:0 only (C420jpeg, \
                 C420mpeg2, C420paldv, C420 or no C tag): convert it first, e.g. with ffmpeg's \
                 `-pix_fmt yuv420p`"
            ));
        }
        Ok(header)
    }
}

fn size(value: &str) -> Option<u32> {
    let v: u32 = digits(value)?;
    (1..=MAX_SIZE).contains(&v).then_some(v)
}

fn ratio(value: &str) -> Option<(u32, u32)> {
    let (num, den) = value.split_once(':')?;
    Some((digits(num)?, digits(den)?))
}

/// A decimal number of plain digits (no sign, no spaces).
fn digits(value: &str) -> Option<u32> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// Whether `line` (without its newline) is a `FRAME` line: `FRAME`, then nothing or a space
/// and the frame's own tags.
pub fn is_frame_line(line: &[u8]) -> bool {
    line.strip_prefix(b"FRAME").is_some_and(|rest| rest.is_empty() || rest[0] == b' ')
}

/// How reading a line ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A whole line, without its newline.
    Line(Vec<u8>),
    /// End of stream before any byte.
    End,
    /// End of stream after these bytes, before a newline.
    Cut(Vec<u8>),
}

/// Read one line of at most [`MAX_LINE`] bytes. Byte by byte: on an unbuffered standard input
/// nothing after the newline is consumed (see `negotiate`).
pub fn read_line(reader: &mut impl Read, what: &str) -> Result<Line, String> {
    let mut line = Vec::new();
    let mut byte = [0u8];
    loop {
        match reader.read(&mut byte) {
            Ok(0) if line.is_empty() => return Ok(Line::End),
            Ok(0) => return Ok(Line::Cut(line)),
            Ok(_) if byte[0] == b'\n' => return Ok(Line::Line(line)),
            Ok(_) => line.push(byte[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read {what}: {e}")),
        }
        if line.len() >= MAX_LINE {
            return Err(format!("{what}: a line longer than {MAX_LINE} bytes; this is not a YUV4MPEG2 stream"));
        }
    }
}

/// Read and parse the header line at the start of a stream.
pub fn read_header(reader: &mut impl Read, what: &str) -> Result<Header, String> {
    match read_line(reader, what)? {
        Line::Line(line) => Header::parse(&line, what),
        Line::End => Err(format!("{what} is empty; expected a YUV4MPEG2 stream")),
        Line::Cut(_) => Err(format!("{what} ends inside its header line")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Header, String> {
        Header::parse(text.as_bytes(), "in.y4m")
    }

    #[test]
    fn every_tag_is_read() {
        let h = parse("YUV4MPEG2 W1920 H1080 F30000:1001 It A128:117 C420mpeg2 XYSCSS=420MPEG2").unwrap();
        assert_eq!(
            h,
            Header {
                width: 1920,
                height: 1080,
                rate: (30000, 1001),
                interlace: 't',
                aspect: (128, 117),
                chroma: Some("420mpeg2".into()),
            }
        );
        let h = parse("YUV4MPEG2 W5 H3").unwrap();
        assert_eq!((h.width, h.height, h.rate, h.interlace, h.aspect, h.chroma), (5, 3, (0, 0), '?', (0, 0), None));
        // What ffmpeg writes, and what our sink writes; an unknown letter is skipped.
        for line in [
            "YUV4MPEG2 W320 H240 F25:1 Ip A1:1 C420jpeg XYSCSS=420JPEG XCOLORRANGE=LIMITED",
            "YUV4MPEG2 W320 H240 F25:1 Ip A1:1 C420jpeg",
            "YUV4MPEG2 W320 H240 C420paldv Z9",
            "YUV4MPEG2 W320 H240 C420",
        ] {
            let h = parse(line).unwrap();
            assert_eq!((h.width, h.height), (320, 240), "{line}");
        }
    }

    #[test]
    fn other_chroma_is_refused_naming_the_stream_and_the_tag() {
        for tag in ["C444", "C422", "C420p10", "Cmono", "C411"] {
            let e = parse(&format!("YUV4MPEG2 W4 H4 {tag}")).unwrap_err();
            assert!(
                e.starts_with(&format!("in.y4m: the stream is {tag}; the y4m source reads 8-bit 4:2:0 only")),
                "{e}"
            );
        }
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        let cases = [
            ("YUV4MPEG W4 H4", "in.y4m is not a YUV4MPEG2 stream: it starts with \"YUV4MPEG W4 H4\""),
            ("YUV4MPEG2 H4", "in.y4m: the header has no W (width) tag"),
            ("YUV4MPEG2 W4", "in.y4m: the header has no H (height) tag"),
            ("YUV4MPEG2 W0 H4", "in.y4m: header tag `W0` is not a width in 1..=32768"),
            ("YUV4MPEG2 W4 H40000", "in.y4m: header tag `H40000` is not a height in 1..=32768"),
            ("YUV4MPEG2 W-4 H4", "in.y4m: header tag `W-4` is not a width"),
            ("YUV4MPEG2 W4 H4 F30", "in.y4m: header tag `F30` is not a frame rate"),
            ("YUV4MPEG2 W4 H4 A1:x", "in.y4m: header tag `A1:x` is not a pixel aspect"),
            ("YUV4MPEG2 W4 H4 Ix", "in.y4m: header tag `Ix` is not an interlacing"),
        ];
        for (line, want) in cases {
            let e = parse(line).unwrap_err();
            assert!(e.starts_with(want), "{line}: {e}");
        }
        let e = Header::parse(&[0xff, 0xfe], "in.y4m").unwrap_err();
        assert!(e.contains("not text"), "{e}");
    }

    #[test]
    fn frame_lines_may_carry_tags() {
        assert!(is_frame_line(b"FRAME"));
        assert!(is_frame_line(b"FRAME Ib XFOO=1"));
        assert!(!is_frame_line(b"FRAMES"));
        assert!(!is_frame_line(b"frame"));
        assert!(!is_frame_line(b""));
    }

    #[test]
    fn lines_are_read_up_to_the_newline_only() {
        let mut input: &[u8] = b"YUV4MPEG2 W2 H2\nFRAME\nxyz";
        assert_eq!(read_header(&mut input, "s").unwrap().width, 2);
        assert_eq!(input, b"FRAME\nxyz");
        assert_eq!(read_line(&mut input, "s").unwrap(), Line::Line(b"FRAME".to_vec()));
        assert_eq!(read_line(&mut input, "s").unwrap(), Line::Cut(b"xyz".to_vec()));
        assert_eq!(read_line(&mut input, "s").unwrap(), Line::End);
        let long = vec![b'a'; MAX_LINE + 10];
        assert!(read_line(&mut long.as_slice(), "s").unwrap_err().contains("longer than 4096"));
        assert_eq!(read_header(&mut &b""[..], "s").unwrap_err(), "s is empty; expected a YUV4MPEG2 stream");
        assert_eq!(read_header(&mut &b"YUV4MPEG2 W2"[..], "s").unwrap_err(), "s ends inside its header line");
    }
}
