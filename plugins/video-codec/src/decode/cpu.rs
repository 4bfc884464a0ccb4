//! The cpu decoder: ffmpeg (Debian's, or `$GPUIPC_FFMPEG`) as a child process, fed the same
//! packets NVDEC gets (an H.264/HEVC elementary stream, or VP9/AV1 in IVF) on its standard
//! input, giving raw planar frames in display order on its standard output, which are
//! interleaved here into `nv12` or `p010`. ffmpeg's decoders are bit-exact (as NVDEC is), and
//! neither side converts anything (no `-pix_fmt`: ffmpeg writes what its decoder made), so the
//! two give the same bytes.
//!
//! A thread of its own writes ffmpeg's input (both pipes would otherwise fill and wait on each
//! other); the stage's thread reads the frames. One ffmpeg process decodes one pass over the
//! file; a looping source starts another for the next pass.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;

use gpuipc_plugin_api::child::ChildProcess;
use gpuipc_plugin_api::{Error, OutputFrame, ParamInfo, Result, bail};

use crate::container::{Codec, Entry, Index, Packets, StreamInfo};

/// The `ffmpeg` param of the sources that decode with this (`video`, `rtsp`), as `inspect`
/// shows it.
pub const FFMPEG_PARAM: ParamInfo = ParamInfo {
    name: "ffmpeg",
    kind: "string",
    default: ParamInfo::NONE,
    range: "",
    description: "cpu domain: the ffmpeg program that decodes; $GPUIPC_FFMPEG when not given, else `ffmpeg` on PATH",
};

/// What is wrong with an `ffmpeg` param, if anything: an empty one.
pub fn ffmpeg_param_problem(ffmpeg: Option<&str>) -> Option<String> {
    (ffmpeg == Some("")).then(|| "param `ffmpeg` is empty; leave it out for `ffmpeg` on PATH".to_owned())
}

/// A pass of ffmpeg over the file.
#[derive(Debug)]
struct Pass {
    child: ChildProcess,
    feeder: Option<JoinHandle<Result<()>>>,
    /// The display number of the next frame.
    read: usize,
    /// ffmpeg's standard error lines when the last frame was read.
    errors_seen: u64,
}

/// Decodes a file with ffmpeg, one display frame at a time.
#[derive(Debug)]
pub struct CpuDecoder {
    index: Arc<Index>,
    path: PathBuf,
    program: PathBuf,
    pass: Option<Pass>,
    /// One frame as ffmpeg writes it: Y, U and V planes, packed.
    planar: Vec<u8>,
}

/// What a frame read told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read1 {
    /// The frame, and whether ffmpeg reported errors while making it (concealed damage).
    Frame { damaged: bool },
    /// The pass is over: ffmpeg made every frame it could.
    End,
}

impl CpuDecoder {
    pub fn new(index: Arc<Index>, path: &Path, program: PathBuf) -> CpuDecoder {
        let bytes = planar_bytes(&index.info);
        CpuDecoder { index, path: path.to_owned(), program, pass: None, planar: vec![0; bytes] }
    }

    /// The display number of the next frame of the current pass, if one is under way.
    pub fn position(&self) -> Option<usize> {
        self.pass.as_ref().map(|p| p.read)
    }

    /// Start decoding the file at `entry`, ending any pass under way.
    pub fn start_pass(&mut self, entry: Entry) -> Result<()> {
        self.pass = None;
        let what = format!("ffmpeg (decoding {})", self.path.display());
        let mut command = Command::new(&self.program);
        ffmpeg_args(&mut command, input_format(self.index.info.codec), false);
        let mut child = ChildProcess::spawn(what, command)?;
        let stdin = child.take_stdin().expect("the command pipes standard input");
        let (index, path) = (Arc::clone(&self.index), self.path.clone());
        let feeder = std::thread::Builder::new()
            .name("video-feed".into())
            .spawn(move || feed(&index, &path, entry.sample, stdin))
            .map_err(|e| Error::new(format!("cannot start the thread feeding ffmpeg: {e}")))?;
        self.pass = Some(Pass { child, feeder: Some(feeder), read: entry.display, errors_seen: 0 });
        Ok(())
    }

    /// Read the next display frame into `out` (or past it, for `None`).
    pub fn next_frame(&mut self, out: Option<&mut OutputFrame<'_>>) -> Result<Read1> {
        let Some(pass) = self.pass.as_mut() else { bail!("no pass of the decoder is under way") };
        let stdout = pass.child.stdout().expect("the command pipes standard output");
        let got = gpuipc_plugin_api::read_full(stdout, &mut self.planar)
            .map_err(|e| pass.child.error(format!("cannot read frames from ffmpeg: {e}")))?;
        if got == 0 {
            return self.end_pass().map(|()| Read1::End);
        }
        if got < self.planar.len() {
            let (read, size) = (pass.read, self.planar.len());
            return Err(pass
                .child
                .error(format!("ffmpeg's frame {read} is cut short: {got} of its {size} bytes came")));
        }
        pass.read += 1;
        let errors = pass.child.stderr_lines();
        let damaged = errors > pass.errors_seen;
        pass.errors_seen = errors;
        if let Some(out) = out {
            interleave(&self.index.info, &self.planar, out)?;
        }
        Ok(Read1::Frame { damaged })
    }

    /// ffmpeg closed its output: it must have exited well, and so must the feeder.
    fn end_pass(&mut self) -> Result<()> {
        let mut pass = self.pass.take().expect("a pass is under way");
        let fed = pass.feeder.take().map(|f| f.join());
        let read = pass.read;
        pass.child.finish()?;
        match fed {
            Some(Ok(Err(e))) => return Err(e),
            Some(Err(_)) => bail!("the thread feeding ffmpeg panicked"),
            _ => {}
        }
        let frames = self.index.info.frames as usize;
        if read < frames {
            gpuipc_plugin_api::warn!(
                "{}: ffmpeg's frames ended at display frame {read} of the file's {frames}; the rest could not be decoded",
                self.path.display()
            );
        }
        Ok(())
    }
}

impl Drop for CpuDecoder {
    fn drop(&mut self) {
        if let Some(mut pass) = self.pass.take() {
            let feeder = pass.feeder.take();
            // Killing ffmpeg first closes the pipe the feeder may be blocked on.
            drop(pass);
            if let Some(feeder) = feeder {
                let _ = feeder.join();
            }
        }
    }
}

/// ffmpeg reading `format` on its standard input and writing raw planar frames, as its decoder
/// made them, on its standard output. `live`: it starts decoding after the first packets
/// instead of probing megabytes of the stream first (a camera's stream comes at its own pace).
pub fn ffmpeg_args(command: &mut Command, format: &str, live: bool) {
    command.args(["-hide_banner", "-loglevel", "error"]);
    if live {
        command.args(["-probesize", "32", "-analyzeduration", "0"]);
    }
    command
        .args(["-f", format, "-i", "pipe:0"])
        .args(["-map", "0:v:0", "-fps_mode", "passthrough", "-f", "rawvideo", "pipe:1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
}

/// ffmpeg's `-f` for what [`feed`] writes.
pub fn input_format(codec: Codec) -> &'static str {
    match codec {
        Codec::H264 => "h264",
        Codec::Hevc => "hevc",
        Codec::Vp9 | Codec::Av1 => "ivf",
    }
}

/// Write every packet of the file to ffmpeg: as they are for H.264 and HEVC (Annex B), in an
/// IVF container for VP9 and AV1. ffmpeg closing its input early (it failed) ends this quietly:
/// its own message says why.
fn feed(index: &Index, path: &Path, start: usize, stdin: std::process::ChildStdin) -> Result<()> {
    let mut out = BufWriter::with_capacity(1 << 20, stdin);
    let mut packets = Packets::open(path)?;
    packets.start_at(start);
    let ivf = matches!(index.info.codec, Codec::Vp9 | Codec::Av1);
    let result = (|| -> std::io::Result<Result<()>> {
        if ivf {
            out.write_all(&ivf_header(index))?;
        }
        let mut buf = Vec::new();
        loop {
            let n = match packets.next(index, &mut buf) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => return Ok(Err(e)),
            };
            if ivf {
                out.write_all(&(buf.len() as u32).to_le_bytes())?;
                out.write_all(&(n as u64).to_le_bytes())?;
            }
            out.write_all(&buf)?;
        }
        out.flush()?;
        Ok(Ok(()))
    })();
    match result {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::new(format!("cannot write to ffmpeg: {e}"))),
    }
}

/// A 32-byte IVF file header for the stream.
fn ivf_header(index: &Index) -> [u8; 32] {
    let mut h = [0u8; 32];
    h[0..4].copy_from_slice(b"DKIF");
    h[6..8].copy_from_slice(&32u16.to_le_bytes());
    h[8..12].copy_from_slice(if index.info.codec == Codec::Av1 { b"AV01" } else { b"VP90" });
    h[12..14].copy_from_slice(&(index.info.width as u16).to_le_bytes());
    h[14..16].copy_from_slice(&(index.info.height as u16).to_le_bytes());
    let (num, den) = index.info.frame_rate.unwrap_or((25, 1));
    h[16..20].copy_from_slice(&num.to_le_bytes());
    h[20..24].copy_from_slice(&den.to_le_bytes());
    h[24..28].copy_from_slice(&(index.info.frames as u32).to_le_bytes());
    h
}

/// Bytes of one planar 4:2:0 frame as ffmpeg writes it.
pub fn planar_bytes(info: &StreamInfo) -> usize {
    let (w, h) = (info.width as usize, info.height as usize);
    let sample = if info.bit_depth > 8 { 2 } else { 1 };
    (w * h + 2 * w.div_ceil(2) * h.div_ceil(2)) * sample
}

/// Planar Y, U, V (8-bit, or 10-bit in little-endian u16s) into `nv12` or `p010` (10-bit
/// values in the high bits of little-endian u16s).
pub fn interleave(info: &StreamInfo, planar: &[u8], out: &mut OutputFrame<'_>) -> Result<()> {
    let (w, h) = (info.width as usize, info.height as usize);
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    let wide = info.bit_depth > 8;
    let sample = if wide { 2 } else { 1 };
    let (y, chroma) = planar.split_at(w * h * sample);
    let (u, v) = chroma.split_at(cw * ch * sample);
    let Some(mut planes) = out.planes_mut() else { bail!("the cpu decoder writes host frames only") };
    let [luma, uv] = planes.as_mut_slice() else { bail!("expected a 2-plane output frame, got {}", planes.len()) };
    for row in 0..h {
        let src = &y[row * w * sample..][..w * sample];
        let dst = &mut luma.row_mut(row)[..w * sample];
        if wide {
            for (d, s) in dst.chunks_exact_mut(2).zip(src.chunks_exact(2)) {
                d.copy_from_slice(&(u16::from_le_bytes([s[0], s[1]]) << 6).to_le_bytes());
            }
        } else {
            dst.copy_from_slice(src);
        }
    }
    for row in 0..ch {
        let (us, vs) = (&u[row * cw * sample..][..cw * sample], &v[row * cw * sample..][..cw * sample]);
        let dst = &mut uv.row_mut(row)[..2 * cw * sample];
        if wide {
            for (i, pair) in dst.chunks_exact_mut(4).enumerate() {
                let (a, b) =
                    (u16::from_le_bytes([us[2 * i], us[2 * i + 1]]), u16::from_le_bytes([vs[2 * i], vs[2 * i + 1]]));
                pair[..2].copy_from_slice(&(a << 6).to_le_bytes());
                pair[2..].copy_from_slice(&(b << 6).to_le_bytes());
            }
        } else {
            for (i, pair) in dst.chunks_exact_mut(2).enumerate() {
                pair[0] = us[i];
                pair[1] = vs[i];
            }
        }
    }
    Ok(())
}
