//! The y4m source: i420 frames read from a YUV4MPEG2 file or from standard input.
//!
//! `negotiate` runs in the host, at plan time, and reads the header to learn the frame size.
//! A file is opened again by the stage, which reads the header once more. Standard input can
//! be read only once: `negotiate` reads exactly the header line from it, a byte at a time, so
//! nothing after the newline is taken, and the stage process (given the host's standard
//! input) starts at the first `FRAME`. The header read is kept for the life of the process, so
//! a second negotiation in the same process does not read a `FRAME` line as a header.

use std::fs::File;
use std::io::{BufReader, IsTerminal, Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Mutex;

use gpuipc_plugin_api::{Error, FrameFormat, OutputFrame, PixelFormat, Result, bail};

use crate::header::{self, Header, Line};

/// `path = "-"`: standard input.
pub const STDIN: &str = "-";

/// How errors name standard input.
const STDIN_NAME: &str = "standard input";

/// The header read from standard input by this process, once.
static STDIN_HEADER: Mutex<Option<Header>> = Mutex::new(None);

/// Whether `path` means standard input.
pub fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == STDIN
}

/// How errors name the stream at `path`.
pub fn stream_name(path: &Path) -> String {
    if is_stdin(path) { STDIN_NAME.to_owned() } else { path.display().to_string() }
}

/// This process's standard input as a file of its own descriptor (a duplicate: the same open
/// file, so what it reads is gone from standard input too), unbuffered.
fn stdin_file() -> Result<File> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!(
            "param `path` is \"-\" (standard input), but standard input is a terminal; pipe a \
             YUV4MPEG2 stream in, e.g. `ffmpeg -i in.mp4 -f yuv4mpegpipe - | gpuipc-host run ...`"
        );
    }
    let fd = stdin.as_fd().try_clone_to_owned().map_err(|e| Error::new(format!("cannot read standard input: {e}")))?;
    Ok(File::from(fd))
}

fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::new(format!("param `path`: cannot open {}: {e}", path.display())))
}

/// The header of the stream at `path` (plan time).
pub fn probe(path: &Path) -> Result<Header> {
    if is_stdin(path) {
        let mut cached = STDIN_HEADER.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(header) = cached.as_ref() {
            return Ok(header.clone());
        }
        let header = header::read_header(&mut stdin_file()?, STDIN_NAME)?;
        *cached = Some(header.clone());
        return Ok(header);
    }
    Ok(header::read_header(&mut BufReader::new(open(path)?), &stream_name(path))?)
}

/// The frame format of a stream with this header.
pub fn format_of(header: &Header) -> FrameFormat {
    FrameFormat::new(PixelFormat::I420, header.width, header.height)
}

/// A y4m source stage's stream.
#[derive(Debug)]
pub struct Source {
    reader: BufReader<File>,
    /// The stream's name in errors: the path, or "standard input".
    what: String,
    format: FrameFormat,
    /// Where the first `FRAME` line starts (a file only), to loop back to.
    data_start: u64,
    looping: bool,
    stdin: bool,
    /// Standard input's first line is normally a `FRAME` line (the host read the header), but
    /// may be the header when the stage's input is not the same open file as the host's.
    header_may_come: bool,
    /// The number of the next frame in the file, from 0, restarting at each loop.
    in_file: u64,
    /// The `seq` the next frame read gets (a file only; see [`Source::fill`]).
    next_seq: u64,
}

impl Source {
    /// Open the stream for a stage whose output was negotiated as `format`.
    pub fn open(path: &Path, looping: bool, format: FrameFormat) -> Result<Source> {
        let what = stream_name(path);
        let stdin = is_stdin(path);
        let (reader, data_start) = if stdin {
            (BufReader::new(stdin_file()?), 0)
        } else {
            let mut reader = BufReader::new(open(path)?);
            let header = header::read_header(&mut reader, &what)?;
            check_format(&what, &header, format)?;
            let start = reader.stream_position().map_err(|e| Error::new(format!("cannot read {what}: {e}")))?;
            (reader, start)
        };
        Ok(Source { reader, what, format, data_start, looping, stdin, header_may_come: stdin, in_file: 0, next_seq: 0 })
    }

    /// Bytes of one frame's planes: Y, then U and V of `ceil(w/2)` x `ceil(h/2)`.
    fn frame_bytes(&self) -> u64 {
        let (w, h) = (u64::from(self.format.width), u64::from(self.format.height));
        w * h + 2 * w.div_ceil(2) * h.div_ceil(2)
    }

    /// Fill `out` with the next frame, or end the stream (`out.end_stream()`) at the end of
    /// the file. From a file, the frame read is frame `out.info().seq` of the stream (looped
    /// when `loop` is set): a restarted stage skips what its earlier process handed on.
    /// Standard input cannot be skipped back or forth: it gives the next frame it has.
    pub fn fill(&mut self, out: &mut OutputFrame<'_>) -> Result<()> {
        let seq = out.info().seq;
        if !self.stdin {
            while self.next_seq < seq {
                if !self.next_frame(None)? {
                    out.end_stream();
                    return Ok(());
                }
                self.next_seq += 1;
            }
        }
        if self.next_frame(Some(out))? {
            self.next_seq = seq + 1;
        } else {
            out.end_stream();
        }
        Ok(())
    }

    fn read_error(&self, e: impl std::fmt::Display) -> Error {
        Error::new(format!("cannot read {}: {e}", self.what))
    }

    /// Read the next frame into `out`, or past it when `None`. `false` at the end of the
    /// stream (after looping back, when that finds frames).
    fn next_frame(&mut self, out: Option<&mut OutputFrame<'_>>) -> Result<bool> {
        loop {
            match header::read_line(&mut self.reader, &self.what)? {
                Line::End if self.looping && self.in_file > 0 => {
                    self.reader.seek(SeekFrom::Start(self.data_start)).map_err(|e| self.read_error(e))?;
                    self.in_file = 0;
                }
                Line::End => return Ok(false),
                Line::Cut(_) => {
                    bail!("{}: frame {} is truncated: the stream ends inside its FRAME line", self.what, self.in_file)
                }
                Line::Line(line) if self.header_may_come && line.starts_with(b"YUV4MPEG2") => {
                    self.header_may_come = false;
                    let header = Header::parse(&line, &self.what)?;
                    check_format(&self.what, &header, self.format)?;
                }
                Line::Line(line) if header::is_frame_line(&line) => break,
                Line::Line(line) => {
                    let start: String = String::from_utf8_lossy(&line).chars().take(20).collect();
                    bail!("{}: frame {}: expected a FRAME line, found {start:?}", self.what, self.in_file)
                }
            }
        }
        self.header_may_come = false;
        let total = self.frame_bytes();
        let got = match out {
            Some(out) => self.read_planes(out)?,
            None => std::io::copy(&mut (&mut self.reader).take(total), &mut std::io::sink())
                .map_err(|e| self.read_error(e))?,
        };
        if got < total {
            bail!(
                "{}: frame {} is truncated: the stream ends after {got} of its {total} bytes",
                self.what,
                self.in_file
            );
        }
        self.in_file += 1;
        Ok(true)
    }

    /// Read the Y, U and V planes into `out`'s rows; returns the bytes read (fewer than a
    /// frame's only at the end of the stream).
    fn read_planes(&mut self, out: &mut OutputFrame<'_>) -> Result<u64> {
        if out.info().format != self.format {
            bail!("output frame is {}, but the stream's header says {}", out.info().format, self.format);
        }
        let mut planes =
            out.planes_mut().ok_or_else(|| Error::new("the y4m source writes host memory only (cpu domain)"))?;
        let mut got = 0u64;
        for plane in &mut planes {
            for y in 0..plane.rows() {
                let row = plane.row_mut(y);
                let n = gpuipc_plugin_api::read_full(&mut self.reader, row)
                    .map_err(|e| Error::new(format!("cannot read {}: {e}", self.what)))?;
                got += n as u64;
                if n < row.len() {
                    return Ok(got);
                }
            }
        }
        Ok(got)
    }
}

/// A header read by the stage must say what the plan was made from.
fn check_format(what: &str, header: &Header, format: FrameFormat) -> Result<()> {
    let found = format_of(header);
    if found != format {
        bail!("{what} now holds {found} frames, but the pipeline was planned for {format}");
    }
    Ok(())
}
