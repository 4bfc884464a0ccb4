//! Decoding a live stream: access units come as a camera sends them (no file, no index), each
//! decoded once, in order; frames come out in display order, each with the key its access unit
//! was given (its presentation time on the source's time line) and when it arrived. The same
//! two decoders as for files: ffmpeg in the cpu domain (fed on a thread of its own, straight
//! from the source's queue, so a decoder that holds pictures back for its threads never waits
//! for the stage), NVDEC in the cuda domain (fed on the stage's thread, where its context is).
//! A wait for the next frame is bounded: a source whose camera is away returns from `process`
//! now and then (`OutputFrame::no_frame_yet`), so its stall watchdog sees it alive.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gpuipc_nvdec as nvdec;
use gpuipc_plugin_api::child::ChildProcess;
use gpuipc_plugin_api::{CreateContext, Error, OutputFrame, Result, bail};

use crate::container::{StreamInfo, params};
use crate::decode::{cpu, cuda};

/// One access unit of a live stream (Annex B, parameter sets before each key frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessUnit {
    pub data: Vec<u8>,
    /// Its presentation time on a time line that only rises (across reconnections too): frames
    /// come out in the order of their keys.
    pub key: u64,
    /// When its last packet arrived (ns since the Unix epoch).
    pub arrival_ns: u64,
}

/// A frame a live decoder made: its access unit's key and arrival, and whether it was made from
/// damaged data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub key: u64,
    pub arrival_ns: u64,
    pub damaged: bool,
}

/// What a bounded wait for the next access unit, or frame, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next<T> {
    Got(T),
    /// None came in the wait.
    NotYet,
    /// The stream is over (the stage ends).
    Over,
}

/// Where a decoder gets its next access unit: waits for one at most the given time.
pub type Units = Box<dyn FnMut(Duration) -> Next<AccessUnit> + Send>;

/// How long the feeder of ffmpeg waits for an access unit at a time (it has nothing else to do).
const FEED_WAIT: Duration = Duration::from_secs(1);

/// Making NVDEC's decoder longer than this is worth a warning (a camera at 30 frames/s has
/// queued a third of the rtsp source's default queue meanwhile).
const SLOW_DECODER_MS: f64 = 300.0;

/// Access units given to a decoder whose frames have not come out yet, by key.
type Pending = Arc<Mutex<BTreeMap<u64, u64>>>;

/// A live stream's decoder.
pub enum LiveDecoder {
    Cpu(LiveCpu),
    Cuda(LiveCuda),
}

impl LiveDecoder {
    /// ffmpeg (`program`) decoding `info`'s stream, fed by a thread from `units`.
    pub fn cpu(info: StreamInfo, program: PathBuf, what: &str, units: Units) -> Result<LiveDecoder> {
        LiveCpu::start(info, program, what, units).map(LiveDecoder::Cpu)
    }

    /// NVDEC on the stage's context and stream, fed from `units` on the stage's thread. With
    /// the description's sequence parameter set (`sps`, H.264 for now), the decoder is made
    /// here, before the camera sends, instead of at the stream's first key frame (NVDEC keeps
    /// it if the stream's own sequence header says the same, else makes it anew there).
    pub fn cuda(
        info: StreamInfo,
        sps: Option<&[u8]>,
        what: &str,
        ctx: &CreateContext<'_>,
        units: Units,
    ) -> Result<LiveDecoder> {
        cuda::check_caps(&info, what)?;
        let options = nvdec::DecoderOptions { codec: info.codec, stream: ctx.cuda_stream, display_delay: 0 };
        let mut decoder = nvdec::Decoder::new(options).map_err(|e| Error::new(format!("{what}: {e}")))?;
        decoder.set_one_picture_per_packet(true);
        if let (nvdec::Codec::H264, Some(sps)) = (info.codec, sps) {
            prepare(&mut decoder, sps, what);
        }
        Ok(LiveDecoder::Cuda(LiveCuda {
            info,
            decoder,
            units,
            what: what.to_owned(),
            made: 0,
            arrivals: BTreeMap::new(),
        }))
    }

    /// The next frame into `out`, waiting for it at most about `wait` (a picture that began to
    /// come is read whole).
    pub fn next_frame(&mut self, out: &mut OutputFrame<'_>, wait: Duration) -> Result<Next<Decoded>> {
        match self {
            LiveDecoder::Cpu(d) => d.next_frame(out, wait),
            LiveDecoder::Cuda(d) => d.next_frame(out, wait),
        }
    }
}

impl std::fmt::Debug for LiveDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LiveDecoder::Cpu(_) => "LiveDecoder::Cpu",
            LiveDecoder::Cuda(_) => "LiveDecoder::Cuda",
        })
    }
}

/// A picture read from ffmpeg: how many bytes came (0: its output ended) into which buffer.
type Read = std::io::Result<(usize, Vec<u8>)>;

/// ffmpeg as a child process; a thread writes each access unit to it as it comes, another
/// reads its pictures (so the stage's wait for one can be bounded), two buffers going round.
pub struct LiveCpu {
    info: StreamInfo,
    child: ChildProcess,
    feeder: Option<JoinHandle<Result<()>>>,
    pending: Pending,
    pictures: Receiver<Read>,
    /// Buffers back to the reader.
    spare: SyncSender<Vec<u8>>,
    errors_seen: u64,
    what: String,
}

impl LiveCpu {
    fn start(info: StreamInfo, program: PathBuf, what: &str, mut units: Units) -> Result<LiveCpu> {
        let mut command = Command::new(&program);
        cpu::ffmpeg_args(&mut command, cpu::input_format(info.codec), true);
        let mut child = ChildProcess::spawn(format!("ffmpeg (decoding {what})"), command)?;
        let stdin = child.take_stdin().expect("the command pipes standard input");
        let pending = Pending::default();
        let fed = Arc::clone(&pending);
        let feeder = std::thread::Builder::new()
            .name("live-feed".into())
            .spawn(move || {
                let mut stdin = stdin;
                loop {
                    let unit = match units(FEED_WAIT) {
                        Next::Got(unit) => unit,
                        Next::NotYet => continue,
                        Next::Over => break,
                    };
                    fed.lock().expect("no holder panics").insert(unit.key, unit.arrival_ns);
                    match stdin.write_all(&unit.data) {
                        Ok(()) => {}
                        // ffmpeg ended: its own message says why.
                        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                        Err(e) => return Err(Error::new(format!("cannot write to ffmpeg: {e}"))),
                    }
                }
                Ok(())
            })
            .map_err(|e| Error::new(format!("cannot start the thread feeding ffmpeg: {e}")))?;
        let mut stdout = child.take_stdout().expect("the command pipes standard output");
        let (picture_tx, pictures) = std::sync::mpsc::sync_channel::<Read>(0);
        let (spare, spare_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        for _ in 0..2 {
            spare.send(vec![0; cpu::planar_bytes(&info)]).expect("room for both buffers");
        }
        // Ends when ffmpeg's output does (the child dies with the decoder) or the decoder is
        // dropped (its channels close).
        std::thread::Builder::new()
            .name("live-read".into())
            .spawn(move || {
                while let Ok(mut buffer) = spare_rx.recv() {
                    let read = gpuipc_plugin_api::read_full(&mut stdout, &mut buffer).map(|got| (got, buffer));
                    let over = !matches!(read, Ok((got, _)) if got > 0);
                    if picture_tx.send(read).is_err() || over {
                        return;
                    }
                }
            })
            .map_err(|e| Error::new(format!("cannot start the thread reading ffmpeg: {e}")))?;
        Ok(LiveCpu {
            info,
            child,
            feeder: Some(feeder),
            pending,
            pictures,
            spare,
            errors_seen: 0,
            what: what.to_owned(),
        })
    }

    fn next_frame(&mut self, out: &mut OutputFrame<'_>, wait: Duration) -> Result<Next<Decoded>> {
        let read = match self.pictures.recv_timeout(wait) {
            Ok(read) => read,
            Err(RecvTimeoutError::Timeout) => return Ok(Next::NotYet),
            // The reader ended after the end of ffmpeg's output, or an error, both handed on.
            Err(RecvTimeoutError::Disconnected) => Ok((0, Vec::new())),
        };
        let (got, planar) = read.map_err(|e| self.child.error(format!("cannot read frames from ffmpeg: {e}")))?;
        if got == 0 {
            if let Some(Ok(Err(e))) = self.feeder.take().map(JoinHandle::join) {
                return Err(e);
            }
            return Ok(Next::Over);
        }
        if got < planar.len() {
            let size = planar.len();
            return Err(self
                .child
                .error(format!("{}: a frame from ffmpeg is cut short: {got} of its {size} bytes came", self.what)));
        }
        // Frames come in display order, which is the order of their keys.
        let Some((key, arrival_ns)) = self.pending.lock().expect("no holder panics").pop_first() else {
            bail!("{}: ffmpeg made a frame no access unit was given for", self.what)
        };
        let errors = self.child.stderr_lines();
        let damaged = errors > self.errors_seen;
        self.errors_seen = errors;
        cpu::interleave(&self.info, &planar, out)?;
        // The reader may have ended (ffmpeg's output did): then the buffer is not needed.
        let _ = self.spare.send(planar);
        Ok(Next::Got(Decoded { key, arrival_ns, damaged }))
    }
}

impl Drop for LiveCpu {
    fn drop(&mut self) {
        // The feeder waits on the source's queue, which its owner closes; ffmpeg dies with the
        // child handle. The thread is not joined here: it ends when its queue is closed.
        drop(self.feeder.take());
    }
}

/// Make NVDEC's decoder from an H.264 SPS before the stream's first packet. Failing is no
/// error: the parser makes it at the first key frame then, as without this.
fn prepare(decoder: &mut nvdec::Decoder, sps: &[u8], what: &str) {
    let began = Instant::now();
    let prepared = params::h264_nvdec_sequence(sps).and_then(|s| decoder.prepare(&s).map_err(|e| e.to_string()));
    let ms = began.elapsed().as_secs_f64() * 1000.0;
    match prepared {
        Ok(()) => gpuipc_plugin_api::info!("{what}: NVDEC made the decoder before PLAY in {ms:.0} ms"),
        Err(e) => gpuipc_plugin_api::info!(
            "{what}: NVDEC's decoder is not made before PLAY ({e}); it is made at the first key frame"
        ),
    }
}

/// NVDEC, fed on the stage's thread.
pub struct LiveCuda {
    info: StreamInfo,
    decoder: nvdec::Decoder,
    units: Units,
    what: String,
    made: usize,
    /// Arrivals of the access units NVDEC holds, by key.
    arrivals: BTreeMap<u64, u64>,
}

impl LiveCuda {
    fn next_frame(&mut self, out: &mut OutputFrame<'_>, wait: Duration) -> Result<Next<Decoded>> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(decoded) = self.take(out)? {
                return Ok(Next::Got(decoded));
            }
            let unit = match (self.units)(deadline.saturating_duration_since(Instant::now())) {
                Next::Got(unit) => unit,
                Next::NotYet => return Ok(Next::NotYet),
                Next::Over => return Ok(Next::Over),
            };
            let pts = i64::try_from(unit.key).unwrap_or(i64::MAX);
            let packet = nvdec::Packet { data: &unit.data, pts, end_of_stream: false };
            // NVDEC makes the decoder at the stream's first sequence header, on this thread,
            // while the camera sends: N stages starting at once make N at once, and a stage
            // whose decoder comes late finds its queue full. Said, so a start-up drop has a why.
            // A decoder made before PLAY is normally kept at the first sequence header; one
            // made for another format is made anew there, and said so, with why.
            let waiting = self.decoder.prepared() == nvdec::Prepared::Waiting;
            let making = (waiting || self.decoder.format().is_none()).then(Instant::now);
            self.decoder.push(packet).map_err(|e| Error::new(format!("{}: {e}", self.what)))?;
            let prepared = self.decoder.prepared();
            if let Some(began) =
                making.filter(|_| self.decoder.format().is_some() && prepared != nvdec::Prepared::Waiting)
            {
                let ms = began.elapsed().as_secs_f64() * 1000.0;
                if let nvdec::Prepared::Kept { needed } = prepared {
                    gpuipc_plugin_api::info!(
                        "{}: NVDEC kept the decoder made before PLAY (its {} decode surfaces; the stream's own header would have made {needed})",
                        self.what,
                        self.decoder.decode_surfaces()
                    );
                } else if let nvdec::Prepared::MadeAnew(why) = &prepared {
                    gpuipc_plugin_api::warn!(
                        "{}: NVDEC made the decoder anew at the first key frame in {ms:.0} ms ({why}); the camera's frames queued meanwhile",
                        self.what
                    );
                } else if ms >= SLOW_DECODER_MS {
                    gpuipc_plugin_api::warn!(
                        "{}: NVDEC took {ms:.0} ms to make the decoder at the first key frame; the camera's frames queued meanwhile",
                        self.what
                    );
                } else {
                    gpuipc_plugin_api::info!("{}: NVDEC made the decoder in {ms:.0} ms", self.what);
                }
            }
            self.arrivals.insert(unit.key, unit.arrival_ns);
            // Pictures NVDEC never shows (undecodable) must not pile up.
            while self.arrivals.len() > 64 {
                self.arrivals.pop_first();
            }
        }
    }

    /// The picture NVDEC has ready, into `out`; `None` when it has none.
    fn take(&mut self, out: &mut OutputFrame<'_>) -> Result<Option<Decoded>> {
        let (what, made) = (&self.what, self.made);
        let popped = self.decoder.pop_frame().map_err(|e| Error::new(format!("{what}: frame {made}: {e}")))?;
        let Some(frame) = popped else { return Ok(None) };
        cuda::check_picture(&frame, &self.info, what, made)?;
        cuda::copy_picture(&frame, out).map_err(|e| Error::new(format!("{what}: frame {made}: {e}")))?;
        let damaged = matches!(frame.status(), nvdec::DecodeStatus::Concealed | nvdec::DecodeStatus::Error);
        let key = u64::try_from(frame.pts()).unwrap_or(0);
        // Unmapped here: the copy is on the stage's stream, before any later map's work.
        drop(frame);
        self.made += 1;
        let arrival_ns = self.arrivals.remove(&key).unwrap_or(0);
        // Anything keyed before a shown picture will not be shown any more.
        while self.arrivals.first_key_value().is_some_and(|(k, _)| *k < key) {
            self.arrivals.pop_first();
        }
        Ok(Some(Decoded { key, arrival_ns, damaged }))
    }
}
