//! The crate's tests through its public API: without a driver (here, CI) every entry point
//! fails cleanly; on a GPU (`gpu_` tests, skipped without one unless `GPUIPC_REQUIRE_GPU=1`)
//! the decodes are compared with ffmpeg's own, byte for byte, in display order. The clips and
//! ffmpeg's decodes are in `testdata/` (`testdata/make.sh` made them).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, MutexGuard};

use gpuipc_cuda::{DeviceMemory, Gpu, memory_in_use, testing};

use super::*;

/// testdata/h264-66x38.h264's sequence as NVDEC's parser reported it on an H100 (80x48 coded,
/// 66x38 shown, 4:2:0 8-bit), with the decode surfaces `prepare` plans for H.264.
pub(crate) const H264_66X38: Sequence = Sequence {
    codec: Codec::H264,
    coded_width: 80,
    coded_height: 48,
    display_area: (0, 0, 66, 38),
    chroma_format: 1,
    bit_depth_luma: 8,
    bit_depth_chroma: 8,
    min_decode_surfaces: 17,
};

/// The format the parser reports for testdata/h264-66x38.h264 ([`H264_66X38`]'s).
pub(crate) const H264_66X38_FORMAT: VideoFormat = VideoFormat {
    codec: Codec::H264,
    coded_width: 80,
    coded_height: 48,
    width: 66,
    height: 38,
    bit_depth: 8,
    chroma_format: 1,
};

const H264: &[u8] = include_bytes!("../testdata/h264-66x38.h264");
/// ffmpeg's decode of [`H264`] to nv12, 8 frames in display order.
const H264_NV12: &[u8] = include_bytes!("../testdata/h264-66x38.nv12");
/// Where each access unit of [`H264`] starts, and which of them (by decode index) is shown
/// when: ffprobe's packet positions and its frames' packet positions (testdata/make.sh).
const H264_ACCESS_UNITS: [usize; 8] = [0, 1480, 1530, 1543, 1556, 1602, 1617, 1629];
const H264_DISPLAY_ORDER: [usize; 8] = [0, 2, 3, 1, 5, 6, 4, 7];
/// Another size: a format change after [`H264`].
const H264_SMALL: &[u8] = include_bytes!("../testdata/h264-34x18.h264");

const HEVC10: &[u8] = include_bytes!("../testdata/hevc10-146x146.hevc");
/// FNV-1a 64 of each plane of ffmpeg's p010le decode of [`HEVC10`] (too big to keep whole).
const HEVC10_P010_FNV: &str = include_str!("../testdata/hevc10-146x146.p010.fnv");
const HEVC10_ACCESS_UNITS: [usize; 6] = [0, 4268, 5008, 5264, 5499, 5993];
const HEVC10_DISPLAY_ORDER: [usize; 6] = [0, 3, 2, 1, 5, 4];

/// The access units of an Annex-B H.264 or HEVC stream of one slice per picture: a new one
/// starts at a parameter set, SEI or delimiter after a picture's slice, or at a picture's
/// first slice after another's.
fn access_units(stream: &[u8], hevc: bool) -> Vec<&[u8]> {
    let mut units = Vec::new();
    let (mut start, mut has_picture) = (0, false);
    let mut i = 0;
    while i + 3 <= stream.len() {
        if stream[i..i + 3] != [0, 0, 1] {
            i += 1;
            continue;
        }
        let code = if i > 0 && stream[i - 1] == 0 { i - 1 } else { i };
        let nal = &stream[i + 3..];
        let (picture, first_slice, prefix) = if hevc {
            let kind = (nal[0] >> 1) & 0x3f;
            // VCL 0..=31 (first_slice_segment_in_pic_flag leads the slice header); VPS, SPS,
            // PPS, AUD, prefix SEI.
            (kind < 32, nal[2] & 0x80 != 0, matches!(kind, 32..=35 | 39))
        } else {
            let kind = nal[0] & 0x1f;
            // Slices 1..=5 (first_mb_in_slice == 0 is the bit '1'); SEI, SPS, PPS, AUD.
            ((1..=5).contains(&kind), nal[1] & 0x80 != 0, matches!(kind, 6..=9))
        };
        if has_picture && (prefix || (picture && first_slice)) {
            units.push(&stream[start..code]);
            (start, has_picture) = (code, false);
        }
        has_picture |= picture;
        i += 3;
    }
    units.push(&stream[start..]);
    units
}

#[test]
fn the_test_clips_split_where_ffmpeg_splits_them() {
    // Where the 3-byte start code of each unit is: ffmpeg counts a 4-byte start code's leading
    // zero with the unit for H.264 and with the unit before for HEVC.
    let three = |stream: &[u8], at: usize| {
        if stream[at..].starts_with(&[0, 0, 0, 1]) { at + 1 } else { at }
    };
    let starts = |units: &[&[u8]], stream: &[u8]| -> Vec<usize> {
        units.iter().map(|u| three(stream, u.as_ptr() as usize - stream.as_ptr() as usize)).collect()
    };
    let ffmpeg =
        |offsets: &[usize], stream: &[u8]| -> Vec<usize> { offsets.iter().map(|&at| three(stream, at)).collect() };
    assert_eq!(starts(&access_units(H264, false), H264), ffmpeg(&H264_ACCESS_UNITS, H264));
    assert_eq!(starts(&access_units(HEVC10, true), HEVC10), ffmpeg(&HEVC10_ACCESS_UNITS, HEVC10));
}

/// On a machine without the NVIDIA driver (CI, this one), every entry point answers with the
/// clear error, and nothing panics.
#[test]
fn without_the_driver_every_entry_point_fails_cleanly() {
    let Err(e) = available() else {
        eprintln!("NVDEC is available here; the no-driver paths are not exercised");
        return;
    };
    assert!(e.unavailable(), "{e}");
    let text = e.to_string();
    eprintln!("{text}");
    assert!(text.starts_with("NVDEC is not available: "), "{text}");
    if let NvdecError::NoLibrary { file, .. } = &e {
        assert_eq!(*file, "libnvcuvid.so.1");
        assert!(
            text.starts_with(
                "NVDEC is not available: cannot load libnvcuvid.so.1 (the NVIDIA driver's video decoder library): "
            ),
            "{text}"
        );
    }
    // The same answer every time, and from every entry point.
    assert_eq!(available().unwrap_err().to_string(), text);
    assert_eq!(caps(Codec::H264, 8).unwrap_err().to_string(), text);
    assert_eq!(library_file().unwrap_err().to_string(), text);
    let Err(e) = Decoder::new(DecoderOptions { codec: Codec::Hevc, stream: 0, display_delay: 0 }) else {
        panic!("a decoder without NVDEC")
    };
    assert_eq!(e.to_string(), text);
}

#[test]
fn caps_refuses_impossible_bit_depths_first() {
    let e = caps(Codec::Av1, 7).unwrap_err();
    assert_eq!(e.to_string(), "cuvidGetDecoderCaps: a bit depth of 7");
}

/// Device 0 with NVDEC, or `None` (skipped, printed) without a GPU or without NVDEC; with
/// `GPUIPC_REQUIRE_GPU=1` a missing NVDEC fails the test as a missing GPU does. The GPU tests
/// run one at a time (the guard), so one can measure the device's memory.
fn nvdec_for_test() -> Option<(Arc<Gpu>, MutexGuard<'static, ()>)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let gpu = testing::gpu_for_test()?;
    match available() {
        Ok(()) => Some((gpu, guard)),
        Err(e) if std::env::var(testing::REQUIRE_GPU_ENV).as_deref() == Ok("1") => {
            panic!("{}=1 but {e}", testing::REQUIRE_GPU_ENV)
        }
        Err(e) => {
            eprintln!("NVDEC test skipped: {e}");
            None
        }
    }
}

/// One decoded frame, downloaded: pts, status, and the planes packed (no padding).
#[derive(Debug)]
struct Frame {
    pts: i64,
    status: DecodeStatus,
    bytes: Vec<u8>,
}

/// How the packets are cut.
#[derive(Clone, Copy, Debug)]
enum Feed {
    /// One access unit a packet, pts = 1000 + its position in display order (its presentation
    /// time, as an MP4 sample's), then an empty end-of-stream packet; `one_picture` sets
    /// [`Decoder::set_one_picture_per_packet`].
    AccessUnits { one_picture: bool },
    /// As `AccessUnits`, the last one with `end_of_stream`.
    AccessUnitsEndOnLast,
    /// The whole stream in one packet with `end_of_stream`: every picture of it is decoded and
    /// displayed inside one `cuvidParseVideoData`.
    Whole,
    /// `n`-byte chunks cutting through NAL units, then an empty end-of-stream packet.
    Chunks(usize),
    /// As `AccessUnits { one_picture: true }`, through [`Decoder::push`] and
    /// [`Decoder::pop_frame`] (every waiting picture taken before the next packet), the parser
    /// decoding `display_delay` pictures ahead.
    Pulled { display_delay: u32 },
}

/// Decode `stream` as `feed` says, copying every frame with padded pitches into device memory,
/// and download them.
fn decode_on_gpu(
    gpu: &Arc<Gpu>,
    codec: Codec,
    stream: &[u8],
    display_order: &[usize],
    feed: Feed,
) -> (Vec<Frame>, VideoFormat) {
    const MAX_FRAMES: usize = 16;
    const SLOT: usize = 1 << 20;
    let memory = DeviceMemory::private(gpu, MAX_FRAMES * SLOT).unwrap();
    let mut decoder = Decoder::new(DecoderOptions {
        codec,
        stream: gpu.stream_ptr() as usize,
        display_delay: match feed {
            Feed::Pulled { display_delay } => display_delay,
            _ => 0,
        },
    })
    .unwrap();
    assert_eq!(decoder.format(), None);
    let hevc = codec == Codec::Hevc;
    let units = access_units(stream, hevc);
    assert_eq!(units.len(), display_order.len());
    let presentation = |decode_index: usize| {
        1000 + display_order.iter().position(|&d| d == decode_index).expect("every unit is shown") as i64
    };
    let mut packets: Vec<Packet<'_>> = match feed {
        Feed::AccessUnits { .. } | Feed::AccessUnitsEndOnLast | Feed::Pulled { .. } => units
            .iter()
            .enumerate()
            .map(|(i, data)| Packet { data, pts: presentation(i), end_of_stream: false })
            .collect(),
        Feed::Whole => vec![Packet { data: stream, pts: 1000, end_of_stream: true }],
        Feed::Chunks(n) => {
            stream.chunks(n).enumerate().map(|(i, data)| Packet { data, pts: i as i64, end_of_stream: false }).collect()
        }
    };
    match feed {
        Feed::AccessUnits { .. } | Feed::Pulled { .. } => {
            decoder.set_one_picture_per_packet(!matches!(feed, Feed::AccessUnits { one_picture: false }));
            packets.push(Packet { data: &[], pts: 0, end_of_stream: true });
        }
        Feed::AccessUnitsEndOnLast => packets.last_mut().unwrap().end_of_stream = true,
        Feed::Chunks(_) => packets.push(Packet { data: &[], pts: 0, end_of_stream: true }),
        Feed::Whole => {}
    }
    // (pts, status, width, height, bytes per sample, luma pitch) of each frame copied.
    let mut copied = Vec::new();
    let mut copy = |frame: DecodedFrame<'_>| -> Result<(), NvdecError> {
        let k = copied.len();
        assert!(k < MAX_FRAMES, "more frames than the clip has");
        let bps = frame.bytes_per_sample();
        assert_eq!(bps, if frame.bit_depth() > 8 { 2 } else { 1 });
        // Pitches wider than the rows, so rows cannot run into each other unseen.
        let pitch = u64::from(frame.width() * bps).next_multiple_of(256) + 64;
        let luma = memory.addr() + (k * SLOT) as u64;
        let chroma = luma + pitch * u64::from(frame.height());
        frame.copy_to(luma, pitch, chroma, pitch)?;
        copied.push((frame.pts(), frame.status(), frame.width(), frame.height(), bps, pitch));
        Ok(())
    };
    for packet in packets {
        if let Feed::Pulled { .. } = feed {
            decoder.push(packet).unwrap();
            while let Some(frame) = decoder.pop_frame().unwrap() {
                copy(frame).unwrap();
            }
        } else {
            decoder.decode(packet, &mut copy).unwrap();
        }
    }
    let format = decoder.format().expect("a sequence header was parsed");
    assert!(decoder.decode_surfaces() >= 1);
    drop(decoder);
    let mut all = vec![0u8; copied.len() * SLOT];
    gpu.download(memory.addr(), &mut all).unwrap();
    let frames = copied
        .iter()
        .enumerate()
        .map(|(k, &(pts, status, width, height, bps, pitch))| {
            assert_eq!((width, height), (format.width, format.height));
            let ((luma_row, luma_rows), (chroma_row, chroma_rows)) = copy_extents(width, height, bps);
            let slot = &all[k * SLOT..];
            let mut bytes = Vec::new();
            for row in 0..luma_rows {
                let at = (row * pitch) as usize;
                bytes.extend_from_slice(&slot[at..at + luma_row as usize]);
            }
            let chroma = (pitch * luma_rows) as usize;
            for row in 0..chroma_rows {
                let at = chroma + (row * pitch) as usize;
                bytes.extend_from_slice(&slot[at..at + chroma_row as usize]);
            }
            Frame { pts, status, bytes }
        })
        .collect();
    (frames, format)
}

/// The first byte where `got` and `want` differ, as "plane row column".
fn first_difference(got: &[u8], want: &[u8], width: usize, height: usize) -> String {
    let Some(at) = got.iter().zip(want).position(|(a, b)| a != b) else {
        return format!("lengths {} and {}", got.len(), want.len());
    };
    let (plane, offset) = if at < width * height { ("luma", at) } else { ("chroma", at - width * height) };
    format!("{plane} row {} byte {}: {} against ffmpeg's {}", offset / width, offset % width, got[at], want[at])
}

/// On a GPU: the H.264 clip (High, 66x38 cropped from 80x48, 2 B-frames) fed four ways, every
/// frame equal to ffmpeg's decode byte for byte, in display order, with every packet's pts on
/// the picture that started in it.
#[test]
fn gpu_decodes_h264_like_ffmpeg() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let expected_format = H264_66X38_FORMAT;
    let caps = caps(Codec::H264, 8).unwrap();
    assert!(caps.supported, "{caps:?}");
    assert!(caps.min_width <= 80 && caps.min_height <= 48 && caps.max_width >= 4096, "{caps:?}");
    let frame_bytes = 66 * 38 + 66 * 19;
    assert_eq!(H264_NV12.len(), 8 * frame_bytes);
    let feeds = [
        Feed::AccessUnits { one_picture: false },
        Feed::AccessUnits { one_picture: true },
        Feed::AccessUnitsEndOnLast,
        Feed::Whole,
        Feed::Chunks(97),
        Feed::Pulled { display_delay: 0 },
        Feed::Pulled { display_delay: 4 },
    ];
    for feed in feeds {
        let (frames, format) = decode_on_gpu(&gpu, Codec::H264, H264, &H264_DISPLAY_ORDER, feed);
        assert_eq!(format, expected_format, "{feed:?}");
        assert_eq!(frames.len(), 8, "{feed:?}: every frame, flushed at the end");
        for (i, frame) in frames.iter().enumerate() {
            let want = &H264_NV12[i * frame_bytes..(i + 1) * frame_bytes];
            assert!(
                frame.bytes == want,
                "{feed:?}: frame {i} differs from ffmpeg's at {}",
                first_difference(&frame.bytes, want, 66, 38)
            );
            assert_eq!(frame.status, DecodeStatus::Ok, "{feed:?}: frame {i}");
        }
        if let Feed::AccessUnits { .. } | Feed::AccessUnitsEndOnLast | Feed::Pulled { .. } = feed {
            let pts: Vec<i64> = frames.iter().map(|f| f.pts).collect();
            assert_eq!(pts, (1000..1008).collect::<Vec<_>>(), "{feed:?}: each picture gets its own pts");
        }
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |x, &b| (x ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

/// On a GPU: the 10-bit HEVC clip (Main 10, 146x146 cropped from 152x152, B-frames) decodes to
/// P016 equal to ffmpeg's p010le, plane by plane (compared by hash), in display order.
#[test]
fn gpu_decodes_hevc10_like_ffmpeg() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let want: Vec<(u64, u64)> = HEVC10_P010_FNV
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (u64::from_str_radix(f[1], 16).unwrap(), u64::from_str_radix(f[2], 16).unwrap())
        })
        .collect();
    assert_eq!(want.len(), 6);
    let caps = caps(Codec::Hevc, 10).unwrap();
    assert!(caps.supported && caps.min_width <= 146 && caps.min_height <= 146, "{caps:?}");
    let luma = 146 * 2 * 146;
    for feed in
        [Feed::AccessUnits { one_picture: true }, Feed::Whole, Feed::Chunks(1000), Feed::Pulled { display_delay: 4 }]
    {
        let (frames, format) = decode_on_gpu(&gpu, Codec::Hevc, HEVC10, &HEVC10_DISPLAY_ORDER, feed);
        // NVDEC reports the coded size aligned its own way (160x160 on an H100 where ffmpeg
        // says 152x152); the display area is what matters.
        assert_eq!(
            (format.codec, format.width, format.height, format.bit_depth, format.chroma_format),
            (Codec::Hevc, 146, 146, 10, 1),
            "{feed:?}: {format}"
        );
        assert!(format.coded_width >= 146 && format.coded_height >= 146, "{feed:?}: {format}");
        assert_eq!(frames.len(), 6, "{feed:?}");
        for (i, frame) in frames.iter().enumerate() {
            assert_eq!(frame.bytes.len(), luma + 146 * 2 * 73);
            let got = (fnv1a64(&frame.bytes[..luma]), fnv1a64(&frame.bytes[luma..]));
            assert_eq!(got, want[i], "{feed:?}: frame {i} (luma, chroma) differs from ffmpeg's p010le");
            // P016 of 10-bit content: the low 6 bits of every sample are zero.
            assert!(frame.bytes.chunks_exact(2).all(|s| s[0] & 0x3f == 0), "{feed:?}: frame {i}");
            assert_eq!(frame.status, DecodeStatus::Ok, "{feed:?}: frame {i}");
        }
        if let Feed::AccessUnits { .. } | Feed::Pulled { .. } = feed {
            let pts: Vec<i64> = frames.iter().map(|f| f.pts).collect();
            assert_eq!(pts, (1000..1006).collect::<Vec<_>>(), "{feed:?}");
        }
    }
}

/// On a GPU: the errors. A frame handler's error comes back and stops the decoder; a panic in
/// one is resumed after the parser returns; a new size is `FormatChanged`; the wrong codec is
/// named; a decoder dropped in any state cleans up.
#[test]
fn gpu_errors_come_back_and_stop_the_decoder() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let options = DecoderOptions { codec: Codec::H264, stream: gpu.stream_ptr() as usize, display_delay: 0 };
    let all = Packet { data: H264, pts: 0, end_of_stream: true };

    // The consumer's error, from the first frame.
    let mut decoder = Decoder::new(options).unwrap();
    let mut calls = 0;
    let e = decoder
        .decode(all, &mut |_| {
            calls += 1;
            Err(NvdecError::Frame("the ring is closed".into()))
        })
        .unwrap_err();
    assert_eq!(e.to_string(), "the ring is closed");
    assert_eq!(calls, 1, "no frame after the first error");
    let e = decoder.decode(all, &mut |_| Ok(())).unwrap_err();
    assert_eq!(e.to_string(), "the decoder stopped at an earlier error: the ring is closed");
    drop(decoder);

    // A panic in the handler unwinds out of `decode`, not through the parser.
    let mut decoder = Decoder::new(options).unwrap();
    let panicked = catch_unwind(AssertUnwindSafe(|| decoder.decode(all, &mut |_| panic!("handler panic"))));
    assert!(panicked.is_err());
    assert!(matches!(decoder.decode(all, &mut |_| Ok(())), Err(NvdecError::Stopped(_))));
    drop(decoder);

    // A second stream of another size after the first: refused, naming both formats.
    let mut decoder = Decoder::new(options).unwrap();
    let mut frames = 0;
    decoder
        .decode(all, &mut |_| {
            frames += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(frames, 8);
    let e = decoder.decode(Packet { data: H264_SMALL, pts: 0, end_of_stream: true }, &mut |_| Ok(())).unwrap_err();
    assert!(matches!(e, NvdecError::FormatChanged { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        "the stream's format changed from H.264 4:2:0 8-bit 66x38 (coded 80x48) to H.264 4:2:0 8-bit 34x18 \
         (coded 48x32); a decoder keeps its first sequence header's format"
    );
    drop(decoder);

    // The same stream twice is fine: the same format again.
    let mut decoder = Decoder::new(options).unwrap();
    let mut frames = 0;
    for _ in 0..2 {
        decoder
            .decode(all, &mut |_| {
                frames += 1;
                Ok(())
            })
            .unwrap();
    }
    assert_eq!(frames, 16);
    drop(decoder);

    // HEVC bitstream to an H.264 parser finds no H.264 sequence header: nothing is decoded,
    // and nothing fails. Dropped before any decoder was made: the parser alone goes.
    let mut decoder = Decoder::new(options).unwrap();
    decoder.decode(Packet { data: HEVC10, pts: 0, end_of_stream: true }, &mut |_| panic!("no frame")).unwrap();
    assert_eq!(decoder.format(), None);
    drop(decoder);
    drop(Decoder::new(options).unwrap());

    // The stream is still usable after all of this.
    gpu.synchronize().unwrap();
}

/// On a GPU: a decoder moved to another thread, where no context is current, refuses to decode
/// there and is dropped there cleanly (its context pushed for the destruction); moved to a
/// thread where the context is made current, it decodes.
#[test]
fn gpu_decoders_move_between_threads() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let options = DecoderOptions { codec: Codec::H264, stream: gpu.stream_ptr() as usize, display_delay: 0 };
    let mut decoder = Decoder::new(options).unwrap();
    let all = Packet { data: H264, pts: 0, end_of_stream: true };
    let mut frames = 0;
    decoder
        .decode(Packet { end_of_stream: false, ..all }, &mut |_| {
            frames += 1;
            Ok(())
        })
        .unwrap();
    std::thread::spawn(move || {
        let e = decoder.decode(all, &mut |_| Ok(())).unwrap_err();
        assert!(matches!(e, NvdecError::Invalid { .. }), "no context is current here: {e}");
        drop(decoder);
    })
    .join()
    .unwrap();
    // On a thread where the stage's context is made current, it decodes as usual.
    let mut decoder = Decoder::new(options).unwrap();
    let gpu2 = gpu.clone();
    let frames_there = std::thread::spawn(move || {
        gpu2.bind().unwrap();
        let mut frames = 0;
        decoder
            .decode(all, &mut |_| {
                frames += 1;
                Ok(())
            })
            .unwrap();
        frames
    })
    .join()
    .unwrap();
    assert_eq!(frames_there, 8);
}

/// On a GPU: decoders made, used (to the end, to an error, not at all) and dropped leave no
/// device memory behind.
#[test]
fn gpu_decoders_leave_nothing_behind() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let options = DecoderOptions { codec: Codec::H264, stream: gpu.stream_ptr() as usize, display_delay: 0 };
    let all = Packet { data: H264, pts: 0, end_of_stream: true };
    let cycle = |i: usize| {
        let mut decoder = Decoder::new(options).unwrap();
        match i % 3 {
            0 => decoder.decode(all, &mut |_| Ok(())).unwrap(),
            1 => drop(decoder.decode(all, &mut |_| Err(NvdecError::Frame("stop".into())))),
            _ => {}
        }
    };
    (0..3).for_each(cycle);
    gpu.synchronize().unwrap();
    let before = memory_in_use(&gpu).unwrap();
    (0..30).for_each(cycle);
    gpu.synchronize().unwrap();
    let after = memory_in_use(&gpu).unwrap();
    eprintln!("device memory in use: {before} bytes before 30 decoders, {after} after");
    assert!(after <= before + (4 << 20), "{} bytes more after 30 decoders", after.saturating_sub(before));
}

/// A decoder made ahead (`prepare`) for the stream's own format is kept at its first sequence
/// header; one made for another is made anew there. Either way every picture comes out.
#[test]
fn gpu_a_decoder_made_ahead_is_kept_for_its_format_and_made_anew_for_another() {
    let Some((gpu, _one_at_a_time)) = nvdec_for_test() else {
        return;
    };
    let right = H264_66X38;
    let wrong = Sequence { coded_width: 96, ..right };
    for (sequence, kept) in [(right, true), (wrong, false)] {
        let mut decoder = Decoder::new(DecoderOptions::new(Codec::H264, gpu.stream_ptr() as usize)).unwrap();
        assert_eq!(decoder.prepared(), Prepared::No);
        decoder.prepare(&sequence).unwrap();
        assert_eq!(decoder.prepared(), Prepared::Waiting);
        assert!(decoder.prepare(&sequence).is_err(), "made twice");
        let mut frames = 0;
        let mut count = |frame: DecodedFrame<'_>| -> Result<(), NvdecError> {
            assert_eq!((frame.width(), frame.height()), (66, 38));
            frames += 1;
            Ok(())
        };
        decoder.decode(Packet { data: H264, pts: 1000, end_of_stream: true }, &mut count).unwrap();
        assert_eq!(frames, 8, "{sequence:?}");
        let prepared = decoder.prepared();
        eprintln!("{sequence:?}: {prepared:?}, {} decode surfaces", decoder.decode_surfaces());
        if kept {
            assert!(
                matches!(prepared, Prepared::Kept { needed } if needed <= decoder.decode_surfaces()),
                "{prepared:?}"
            );
        } else {
            assert!(matches!(&prepared, Prepared::MadeAnew(why) if why.contains("coded 96x48")), "{prepared:?}");
        }
        assert_eq!(decoder.format().map(|f| (f.coded_width, f.coded_height)), Some((80, 48)));
    }
}
