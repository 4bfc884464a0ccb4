//! The measurements: frames on cuda:0, each kernel launched back to back between two events
//! (steady state, as a pipeline runs them), a copy of the same bytes timed beside it, NPP's
//! equivalents on the same frames, and every output compared with the CPU reference.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use gpuipc_cuda::{DeviceMemory, Gpu, TimingEvent};
use gpuipc_generator::cuda::GpuGenerator;
use gpuipc_generator::generator::{self, Pattern, PatternFrame};
use gpuipc_plugin_api::color::{ColorRange, Matrix};
use gpuipc_plugin_api::{
    CreateContext, DeviceBuffer, Domain, FrameFormat, FrameInfo, FrameLayout, InputFrame, OutputFrame, PixelFormat,
};
use gpuipc_rgb_process::cuda::GpuLut;
use gpuipc_rgb_process::rgb_process;
use gpuipc_yuv_to_rgb::cuda::GpuConverter as ToRgb;
use gpuipc_yuv_to_rgb::yuv_to_rgb;
use gpuipc_yuv420::cuda::GpuConverter as ToYuv;
use gpuipc_yuv420::yuv420;

use crate::Args;
use crate::compare::{Diff, diff_frames};
use crate::npp::{self, Npp, NppPlane, NppStreamContext, NppiSize};
use crate::variants::{self, Variant};

/// The pipeline's grade (pipelines/4k-yuv.toml).
fn grade_params() -> rgb_process::Params {
    rgb_process::Params { brightness: 0.1, contrast: 1.2, ..Default::default() }
}

/// One line of the report.
struct Row {
    size: String,
    kernel: String,
    variant: String,
    us: Option<f64>,
    gb_per_s: Option<f64>,
    of_copy: Option<f64>,
    of_big_copy: Option<f64>,
    vs_npp: String,
    check: String,
}

/// A frame in device memory, zeroed.
struct Frame {
    info: FrameInfo,
    memory: DeviceMemory,
}

impl Frame {
    fn new(gpu: &Arc<Gpu>, pixel: PixelFormat, width: u32, height: u32) -> Result<Frame> {
        let info = FrameInfo::new(FrameFormat::new(pixel, width, height), 7, 0)
            .ok_or_else(|| anyhow!("no layout for {pixel} {width}x{height}"))?;
        let memory = DeviceMemory::private(gpu, info.layout.total_bytes as usize)?;
        gpu.memset_d8_async(memory.addr(), 0, memory.len())?;
        Ok(Frame { info, memory })
    }

    fn layout(&self) -> &FrameLayout {
        &self.info.layout
    }

    fn buffer(&self) -> DeviceBuffer {
        self.memory.buffer()
    }

    fn plane(&self, i: usize) -> u64 {
        self.memory.addr() + self.info.layout.planes[i].offset
    }

    fn pitch(&self, i: usize) -> u64 {
        self.info.layout.planes[i].pitch
    }
}

struct Bench<'a> {
    gpu: Arc<Gpu>,
    ctx: CreateContext<'a>,
    args: &'a Args,
    /// GB/s (read + written) of a copy of 64 MiB.
    big_copy: f64,
    /// µs of a copy of N bytes, measured once per N.
    copies: HashMap<u64, f64>,
    npp: Option<(Npp, NppStreamContext)>,
    /// Streaming multiprocessors of cuda:0 (for variants sized in blocks a SM).
    sms: u32,
    rows: Vec<Row>,
    all_equal: bool,
}

pub fn run(args: &Args) -> Result<bool> {
    let gpu = Arc::new(Gpu::open(0).context("opening cuda:0")?);
    gpu.bind()?;
    let cache = std::env::temp_dir().join("gpuipc-kernel-bench-cache");
    let ctx = CreateContext {
        stage: "kernel-bench",
        domain: Domain::Cuda,
        device_ordinal: Some(0),
        cuda_context: gpu.context_ptr() as usize,
        cuda_stream: gpu.stream_ptr() as usize,
        kernel_cache_dir: Some(&cache),
    };
    let info = gpuipc_cuda::devices()?.into_iter().next().map(|d| d.name).unwrap_or_default();
    println!("kernel-bench on cuda:0 ({info}), {} launches a measurement", args.launches);
    let npp = if args.no_npp {
        println!("NPP: not loaded (--no-npp)");
        None
    } else {
        match Npp::load(args.npp_dir.as_deref()) {
            Ok(n) => {
                let v = n.version.map_or("version unknown".into(), |(a, b, c)| format!("{a}.{b}.{c}"));
                println!("NPP: {} ({v})", n.path);
                if !n.missing.is_empty() {
                    println!("NPP functions not in this library: {}", n.missing.join(", "));
                }
                let c = npp::stream_context(0, gpu.stream_ptr() as usize).map_err(|e| anyhow!(e))?;
                Some((n, c))
            }
            Err(e) => {
                println!("NPP: not found, built-in kernels only ({e})");
                None
            }
        }
    };
    let sms = gpu.multiprocessor_count()?;
    let mut b =
        Bench { gpu, ctx, args, big_copy: 0.0, copies: HashMap::new(), npp, sms, rows: Vec::new(), all_equal: true };
    b.big_copy = 2.0 * (64u64 << 20) as f64 / b.copy_us(64 << 20)? / 1e3;
    println!("device-to-device copy of 64 MiB: {:.0} GB/s (bytes read + written)", b.big_copy);
    println!("{sms} SMs");
    let sizes = args.sizes.iter().map(|s| (s, true));
    let check_sizes = args.check_sizes.iter().filter(|s| !s.is_empty()).map(|s| (s, false));
    for (size, with_npp) in sizes.chain(check_sizes) {
        let (w, h) = size
            .split_once('x')
            .and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)))
            .ok_or_else(|| anyhow!("size `{size}`: expected WIDTHxHEIGHT"))?;
        // A check size: every kernel and variant, without NPP (which may refuse odd sizes).
        let npp = if with_npp { None } else { b.npp.take() };
        let result = b.run_size(w, h, size);
        if npp.is_some() {
            b.npp = npp;
        }
        result?;
    }
    print!("{}", b.table());
    Ok(b.all_equal)
}

impl Bench<'_> {
    /// Every wanted kernel at one size.
    fn run_size(&mut self, w: u32, h: u32, size: &str) -> Result<()> {
        let b = self;
        if b.wants("gen") {
            b.generator(w, h).with_context(|| format!("gen {size}"))?;
        }
        if b.wants("grade") {
            b.grade(w, h).with_context(|| format!("grade {size}"))?;
        }
        if b.wants("yuv420") {
            b.yuv420(w, h).with_context(|| format!("yuv420 {size}"))?;
        }
        if b.wants("yuv-to-rgb") {
            b.yuv_to_rgb(w, h).with_context(|| format!("yuv-to-rgb {size}"))?;
        }
        Ok(())
    }
}

/// `rgb8` frame bytes of `pattern` drawn by the generator's CPU reference.
fn pattern_bytes(pattern: Pattern, w: u32, h: u32) -> Result<(FrameInfo, Vec<u8>)> {
    let info = FrameInfo::new(FrameFormat::new(PixelFormat::Rgb8, w, h), 7, 0).ok_or_else(|| anyhow!("no layout"))?;
    let mut bytes = vec![0; info.layout.total_bytes as usize];
    let frame = PatternFrame::new(pattern, w, h, 7, 1);
    let mut out = OutputFrame::host(info, &mut bytes).ok_or_else(|| anyhow!("frame buffer too small"))?;
    generator::render(&frame, &mut out)?;
    Ok((info, bytes))
}

/// yuv420's CPU reference: `rgb` (rgb8) to `pixel` (i420 or nv12).
fn to_yuv_reference(rgb: &(FrameInfo, Vec<u8>), pixel: PixelFormat, m: Matrix, r: ColorRange) -> Result<Vec<u8>> {
    let (w, h) = (rgb.0.width(), rgb.0.height());
    let info = FrameInfo::new(FrameFormat::new(pixel, w, h), 7, 0).ok_or_else(|| anyhow!("no layout"))?;
    let mut bytes = vec![0; info.layout.total_bytes as usize];
    let input = InputFrame::host(rgb.0, &rgb.1).ok_or_else(|| anyhow!("input too small"))?;
    let mut out = OutputFrame::host(info, &mut bytes).ok_or_else(|| anyhow!("output too small"))?;
    yuv420::convert(&yuv420::Coefficients::new(m, r), &input, &mut out)?;
    Ok(bytes)
}

/// yuv-to-rgb's CPU reference: `yuv` (`yuv_info`) to rgb8.
fn to_rgb_reference(yuv_info: FrameInfo, yuv: &[u8], m: Matrix, r: ColorRange) -> Result<Vec<u8>> {
    let (w, h) = (yuv_info.width(), yuv_info.height());
    let info = FrameInfo::new(FrameFormat::new(PixelFormat::Rgb8, w, h), 7, 0).ok_or_else(|| anyhow!("no layout"))?;
    let mut bytes = vec![0; info.layout.total_bytes as usize];
    let input = InputFrame::host(yuv_info, yuv).ok_or_else(|| anyhow!("input too small"))?;
    let mut out = OutputFrame::host(info, &mut bytes).ok_or_else(|| anyhow!("output too small"))?;
    yuv_to_rgb::convert(&yuv_to_rgb::Coefficients::for_bits(m, r, 8), 0, &input, &mut out)?;
    Ok(bytes)
}

fn names(m: Matrix, r: ColorRange) -> String {
    let m = match m {
        Matrix::Bt709 => "bt709",
        Matrix::Bt601 => "bt601",
    };
    let r = match r {
        ColorRange::Limited => "limited",
        ColorRange::Full => "full",
    };
    format!("{m} {r}")
}

/// The variant's check: "= cpu" or what differs.
fn check_text(d: &Diff) -> String {
    if d.identical() { "= cpu".into() } else { format!("DIFFERS from cpu: {}", d.describe()) }
}

impl Bench<'_> {
    fn wants(&self, kernel: &str) -> bool {
        self.args.only.is_empty() || self.args.only.iter().any(|k| k == kernel)
    }

    fn variants(&self, all: &'static [Variant]) -> &'static [Variant] {
        if self.args.no_variants { &all[..1] } else { all }
    }

    fn stream(&self) -> usize {
        self.ctx.cuda_stream
    }

    fn download(&self, f: &Frame) -> Result<Vec<u8>> {
        let mut bytes = vec![0; f.memory.len()];
        self.gpu.download(f.memory.addr(), &mut bytes)?;
        Ok(bytes)
    }

    /// µs a launch: `launches` of them back to back between two events, after a warm-up.
    fn time(&self, mut launch: impl FnMut() -> Result<()>) -> Result<f64> {
        let n = self.args.launches.max(1);
        for _ in 0..(n / 10).max(3) {
            launch()?;
        }
        let (start, end) = (TimingEvent::create(&self.gpu)?, TimingEvent::create(&self.gpu)?);
        start.record(self.gpu.stream())?;
        for _ in 0..n {
            launch()?;
        }
        end.record(self.gpu.stream())?;
        end.synchronize()?;
        Ok(f64::from(start.elapsed_ms(&end)?) * 1000.0 / f64::from(n))
    }

    /// µs of a device-to-device copy of `bytes` (measured once per size).
    fn copy_us(&mut self, bytes: u64) -> Result<f64> {
        if let Some(&us) = self.copies.get(&bytes) {
            return Ok(us);
        }
        let a = DeviceMemory::private(&self.gpu, bytes as usize)?;
        let c = DeviceMemory::private(&self.gpu, bytes as usize)?;
        self.gpu.memset_d8_async(a.addr(), 0x5a, bytes as usize)?;
        let gpu = self.gpu.clone();
        let us = self.time(|| Ok(gpu.copy_dtod_async(c.addr(), a.addr(), bytes as usize)?))?;
        self.copies.insert(bytes, us);
        Ok(us)
    }

    /// Add a row for a kernel that moved `moved` bytes (read + written) in `us` µs. The copy
    /// it is set against moves as many: `moved / 2` bytes read and as many written.
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        w: u32,
        h: u32,
        kernel: &str,
        variant: &str,
        moved: u64,
        us: Option<f64>,
        check: String,
    ) -> Result<()> {
        let copy_us = self.copy_us((moved / 2).max(1))?;
        let gb = us.map(|us| moved as f64 / us / 1e3);
        self.rows.push(Row {
            size: format!("{w}x{h}"),
            kernel: kernel.into(),
            variant: variant.into(),
            us,
            gb_per_s: gb,
            of_copy: us.map(|us| copy_us / us),
            of_big_copy: gb.map(|g| g / self.big_copy),
            vs_npp: String::new(),
            check,
        });
        Ok(())
    }

    fn generator(&mut self, w: u32, h: u32) -> Result<()> {
        for pattern in [Pattern::Bars, Pattern::Noise] {
            let (_, want) = pattern_bytes(pattern, w, h)?;
            let frame = PatternFrame::new(pattern, w, h, 7, 1);
            let kernel = format!("gen {}", if pattern == Pattern::Bars { "bars" } else { "noise" });
            for v in self.variants(variants::GENERATOR) {
                let out = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
                let moved = out.layout().pixel_bytes();
                let g = match v.source {
                    None => GpuGenerator::new(&self.ctx, PixelFormat::Rgb8),
                    Some(s) => GpuGenerator::with_source(&self.ctx, PixelFormat::Rgb8, s, v.block_x, v.per_thread),
                };
                let g = match g {
                    Ok(g) => g.with_max_grid_y(v.blocks_per_sm.saturating_mul(self.sms)),
                    Err(e) => {
                        self.row(w, h, &kernel, v.name, moved, None, format!("not loaded: {e}"))?;
                        continue;
                    }
                };
                let (buffer, layout, stream) = (out.buffer(), *out.layout(), self.stream());
                let launch = || Ok(g.draw(&frame, buffer, &layout, stream)?);
                self.check_and_time(w, h, &kernel, v, &out, &want, moved, launch)?;
            }
        }
        self.memset(w, h)
    }

    /// The generator's write-only ceiling: cuMemsetD8Async and cuMemsetD32Async of as many
    /// bytes as an rgb8 frame's pixels (one contiguous range of the frame's buffer).
    fn memset(&mut self, w: u32, h: u32) -> Result<()> {
        let out = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
        let moved = out.layout().pixel_bytes();
        let (gpu, addr) = (self.gpu.clone(), out.plane(0));
        let kernel = "gen (write-only ceiling)";
        let check = "not a kernel: the same number of bytes set by the driver".to_string();
        let us = self.time(|| Ok(gpu.memset_d8_async(addr, 0x5a, moved as usize)?))?;
        self.row(w, h, kernel, "cuMemsetD8Async", moved, Some(us), check.clone())?;
        // D32: whole words only (the last 1 to 3 bytes of an odd count left out).
        let us = self.time(|| Ok(gpu.memset_d32_async(addr, 0x5a5a_5a5a, moved as usize / 4)?))?;
        self.row(w, h, kernel, "cuMemsetD32Async", moved, Some(us), check)
    }

    /// Launch once, compare with `want`, and time it only if equal.
    #[allow(clippy::too_many_arguments)]
    fn check_and_time(
        &mut self,
        w: u32,
        h: u32,
        kernel: &str,
        v: &Variant,
        out: &Frame,
        want: &[u8],
        moved: u64,
        mut launch: impl FnMut() -> Result<()>,
    ) -> Result<Option<f64>> {
        launch()?;
        let d = diff_frames(out.layout(), &self.download(out)?, want);
        if !d.identical() {
            self.all_equal = false;
            self.row(w, h, kernel, v.name, moved, None, check_text(&d))?;
            return Ok(None);
        }
        let us = self.time(launch)?;
        self.row(w, h, kernel, v.name, moved, Some(us), check_text(&d))?;
        Ok(Some(us))
    }

    fn grade(&mut self, w: u32, h: u32) -> Result<()> {
        let (info, input) = pattern_bytes(Pattern::Noise, w, h)?;
        let table = rgb_process::lut(&grade_params());
        let mut want = vec![0; input.len()];
        let plane = info.layout.planes[0];
        for y in 0..plane.rows {
            let s = (plane.offset + y * plane.pitch) as usize;
            let e = s + plane.row_bytes as usize;
            rgb_process::apply_row(&table, PixelFormat::Rgb8, &input[s..e], &mut want[s..e]);
        }
        let src = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
        self.gpu.upload(src.memory.addr(), &input)?;
        for v in self.variants(variants::RGB_PROCESS) {
            let out = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
            let moved = 2 * out.layout().pixel_bytes();
            let lut = match v.source {
                None => GpuLut::new(&self.ctx, &table),
                Some(s) => GpuLut::with_source(&self.ctx, &table, s, v.block_x, v.per_thread),
            };
            let lut = match lut {
                Ok(l) => l,
                Err(e) => {
                    self.row(w, h, "grade", v.name, moved, None, format!("not loaded: {e}"))?;
                    continue;
                }
            };
            let (i, o, stream) = ((&src.info, src.buffer()), (&out.info, out.buffer()), self.stream());
            self.check_and_time(w, h, "grade", v, &out, &want, moved, || Ok(lut.apply(i, o, stream)?))?;
        }
        Ok(())
    }

    fn yuv420(&mut self, w: u32, h: u32) -> Result<()> {
        let noise = pattern_bytes(Pattern::Noise, w, h)?;
        let gradient = pattern_bytes(Pattern::Gradient, w, h)?;
        let src = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
        self.gpu.upload(src.memory.addr(), &noise.1)?;
        // The pipeline's conversion, production and variants.
        let (m, r) = (Matrix::Bt709, ColorRange::Limited);
        // i420 (the pipeline's), then nv12: its interleaved UV stores are another path.
        for pixel in [PixelFormat::I420, PixelFormat::Nv12] {
            let want = to_yuv_reference(&noise, pixel, m, r)?;
            let kernel = format!("yuv420 {} {pixel}", names(m, r));
            for v in self.variants(variants::YUV420) {
                self.yuv420_variant(w, h, &kernel, v, &src, pixel, &want, m, r)?;
            }
        }
        // Against each NPP conversion: ours with the same matrix and range, then NPP's.
        let Some((npp, ctx)) = self.npp.take() else { return Ok(()) };
        let result = self.yuv420_npp(w, h, &npp, ctx, &src, &noise, &gradient);
        self.npp = Some((npp, ctx));
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn yuv420_variant(
        &mut self,
        w: u32,
        h: u32,
        kernel: &str,
        v: &Variant,
        src: &Frame,
        pixel: PixelFormat,
        want: &[u8],
        m: Matrix,
        r: ColorRange,
    ) -> Result<Option<f64>> {
        let out = Frame::new(&self.gpu, pixel, w, h)?;
        let moved = src.layout().pixel_bytes() + out.layout().pixel_bytes();
        let conv = match v.source {
            None => ToYuv::new(&self.ctx),
            Some(s) => ToYuv::with_source(&self.ctx, s, v.block_x, v.per_thread),
        };
        let conv = match conv {
            Ok(c) => c,
            Err(e) => {
                self.row(w, h, kernel, v.name, moved, None, format!("not loaded: {e}"))?;
                return Ok(None);
            }
        };
        let coeffs = yuv420::Coefficients::new(m, r);
        let (i, o, stream) = ((&src.info, src.buffer()), (&out.info, out.buffer()), self.stream());
        self.check_and_time(w, h, kernel, v, &out, want, moved, || Ok(conv.convert(&coeffs, i, o, stream)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn yuv420_npp(
        &mut self,
        w: u32,
        h: u32,
        npp: &Npp,
        ctx: NppStreamContext,
        src: &Frame,
        noise: &(FrameInfo, Vec<u8>),
        gradient: &(FrameInfo, Vec<u8>),
    ) -> Result<()> {
        let swap = |bytes: &[u8], info: &FrameInfo| {
            let mut out = bytes.to_vec();
            let p = info.layout.planes[0];
            for y in 0..p.rows {
                let s = (p.offset + y * p.pitch) as usize;
                for px in out[s..s + p.row_bytes as usize].chunks_exact_mut(3) {
                    px.swap(0, 2);
                }
            }
            out
        };
        let size = NppiSize { width: w as i32, height: h as i32 };
        for &(name, meaning, f) in &npp.to_yuv {
            let (m, r) = (meaning.matrix, meaning.range);
            let kernel = format!("yuv420 {} i420", names(m, r));
            let want = to_yuv_reference(noise, PixelFormat::I420, m, r)?;
            let ours = self.yuv420_variant(w, h, &kernel, &variants::YUV420[0], src, PixelFormat::I420, &want, m, r)?;
            // NPP's input: the same frame, or with R and B swapped for a BGR function.
            let input = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
            let out = Frame::new(&self.gpu, PixelFormat::I420, w, h)?;
            let moved = input.layout().pixel_bytes() + out.layout().pixel_bytes();
            let steps = [out.pitch(0), out.pitch(1), out.pitch(2), input.pitch(0)].map(npp::step);
            let [s0, s1, s2, si] =
                [&steps[0], &steps[1], &steps[2], &steps[3]].map(|s| s.clone().map_err(|e| anyhow!(e)));
            let (s0, s1, s2, si) = (s0?, s1?, s2?, si?);
            let dst = [
                NppPlane { addr: out.plane(0), step: s0 },
                NppPlane { addr: out.plane(1), step: s1 },
                NppPlane { addr: out.plane(2), step: s2 },
            ];
            let srcp = NppPlane { addr: input.plane(0), step: si };
            let call = || npp::call_to_yuv(name, f, srcp, dst, size, ctx).map_err(|e| anyhow!(e));
            let mut diffs = Vec::new();
            for (what, frame) in [("noise", noise), ("gradient", gradient)] {
                let bytes = if meaning.bgr_input { swap(&frame.1, &frame.0) } else { frame.1.clone() };
                self.gpu.upload(input.memory.addr(), &bytes)?;
                call()?;
                let got = self.download(&out)?;
                let want = to_yuv_reference(frame, PixelFormat::I420, m, r)?;
                diffs.push((what, diff_frames(out.layout(), &got, &want)));
            }
            // Time on the noise frame, as ours was.
            let bytes = if meaning.bgr_input { swap(&noise.1, &noise.0) } else { noise.1.clone() };
            self.gpu.upload(input.memory.addr(), &bytes)?;
            let us = self.time(call)?;
            self.npp_row(w, h, &kernel, name, meaning, moved, us, ours, &diffs)?;
        }
        Ok(())
    }

    /// The NPP function's row, and the ratio on the row of ours just before it.
    #[allow(clippy::too_many_arguments)]
    fn npp_row(
        &mut self,
        w: u32,
        h: u32,
        kernel: &str,
        name: &str,
        meaning: npp::Meaning,
        moved: u64,
        us: f64,
        ours: Option<f64>,
        diffs: &[(&str, Diff)],
    ) -> Result<()> {
        let mut check = format!("vs cpu ref [{}]:", meaning.note);
        let mut within = true;
        for (what, d) in diffs {
            within &= d.within(1);
            let _ = write!(check, " {what} {};", d.describe());
        }
        let _ = write!(
            check,
            " {}",
            if within { "within 1: yes" } else { "within 1: NO (matrix, rounding or chroma siting differ)" }
        );
        if let (Some(ours), Some(last)) = (ours, self.rows.last_mut()) {
            last.vs_npp = format!("{:.2}x NPP's frames/s", us / ours);
        }
        self.row(w, h, kernel, &format!("NPP {name}"), moved, Some(us), check)
    }

    fn yuv_to_rgb(&mut self, w: u32, h: u32) -> Result<()> {
        let noise = pattern_bytes(Pattern::Noise, w, h)?;
        let gradient = pattern_bytes(Pattern::Gradient, w, h)?;
        let (m, r) = (Matrix::Bt709, ColorRange::Limited);
        let kernel = format!("yuv-to-rgb nv12 {}", names(m, r));
        let nv12 =
            FrameInfo::new(FrameFormat::new(PixelFormat::Nv12, w, h), 7, 0).ok_or_else(|| anyhow!("no layout"))?;
        let src = Frame::new(&self.gpu, PixelFormat::Nv12, w, h)?;
        let yuv = to_yuv_reference(&noise, PixelFormat::Nv12, m, r)?;
        self.gpu.upload(src.memory.addr(), &yuv)?;
        let want = to_rgb_reference(nv12, &yuv, m, r)?;
        for v in self.variants(variants::YUV_TO_RGB) {
            self.yuv_to_rgb_variant(w, h, &kernel, v, &src, &want, m, r)?;
        }
        // i420 input too: separate U and V planes are another path.
        let i420 =
            FrameInfo::new(FrameFormat::new(PixelFormat::I420, w, h), 7, 0).ok_or_else(|| anyhow!("no layout"))?;
        let src = Frame::new(&self.gpu, PixelFormat::I420, w, h)?;
        let yuv = to_yuv_reference(&noise, PixelFormat::I420, m, r)?;
        self.gpu.upload(src.memory.addr(), &yuv)?;
        let want = to_rgb_reference(i420, &yuv, m, r)?;
        let kernel = format!("yuv-to-rgb i420 {}", names(m, r));
        for v in self.variants(variants::YUV_TO_RGB) {
            self.yuv_to_rgb_variant(w, h, &kernel, v, &src, &want, m, r)?;
        }
        let Some((npp, ctx)) = self.npp.take() else { return Ok(()) };
        let result = self.yuv_to_rgb_npp(w, h, &npp, ctx, nv12, &noise, &gradient);
        self.npp = Some((npp, ctx));
        result
    }

    #[allow(clippy::too_many_arguments)]
    fn yuv_to_rgb_variant(
        &mut self,
        w: u32,
        h: u32,
        kernel: &str,
        v: &Variant,
        src: &Frame,
        want: &[u8],
        m: Matrix,
        r: ColorRange,
    ) -> Result<Option<f64>> {
        let out = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
        let moved = src.layout().pixel_bytes() + out.layout().pixel_bytes();
        let conv = match v.source {
            None => ToRgb::new(&self.ctx),
            Some(s) => ToRgb::with_source(&self.ctx, s, v.block_x, v.per_thread),
        };
        let conv = match conv {
            Ok(c) => c,
            Err(e) => {
                self.row(w, h, kernel, v.name, moved, None, format!("not loaded: {e}"))?;
                return Ok(None);
            }
        };
        let coeffs = yuv_to_rgb::Coefficients::for_bits(m, r, 8);
        let (i, o, stream) = ((&src.info, src.buffer()), (&out.info, out.buffer()), self.stream());
        self.check_and_time(w, h, kernel, v, &out, want, moved, || Ok(conv.convert(&coeffs, i, o, stream)?))
    }

    #[allow(clippy::too_many_arguments)]
    fn yuv_to_rgb_npp(
        &mut self,
        w: u32,
        h: u32,
        npp: &Npp,
        ctx: NppStreamContext,
        nv12: FrameInfo,
        noise: &(FrameInfo, Vec<u8>),
        gradient: &(FrameInfo, Vec<u8>),
    ) -> Result<()> {
        let size = NppiSize { width: w as i32, height: h as i32 };
        for &(name, meaning, f) in &npp.to_rgb {
            let (m, r) = (meaning.matrix, meaning.range);
            let kernel = format!("yuv-to-rgb nv12 {}", names(m, r));
            let src = Frame::new(&self.gpu, PixelFormat::Nv12, w, h)?;
            let out = Frame::new(&self.gpu, PixelFormat::Rgb8, w, h)?;
            let moved = src.layout().pixel_bytes() + out.layout().pixel_bytes();
            if src.pitch(0) != src.pitch(1) {
                self.row(w, h, &kernel, name, moved, None, "skipped: NPP takes one step for Y and UV".into())?;
                continue;
            }
            // Ours on the noise frame's nv12 for this matrix and range.
            let yuv = to_yuv_reference(noise, PixelFormat::Nv12, m, r)?;
            self.gpu.upload(src.memory.addr(), &yuv)?;
            let want = to_rgb_reference(nv12, &yuv, m, r)?;
            let ours = self.yuv_to_rgb_variant(w, h, &kernel, &variants::YUV_TO_RGB[0], &src, &want, m, r)?;
            let step = npp::step(src.pitch(0)).map_err(|e| anyhow!(e))?;
            let dst = NppPlane { addr: out.plane(0), step: npp::step(out.pitch(0)).map_err(|e| anyhow!(e))? };
            let planes = [src.plane(0), src.plane(1)];
            let call = || npp::call_to_rgb(name, f, planes, step, dst, size, ctx).map_err(|e| anyhow!(e));
            let mut diffs = Vec::new();
            for (what, frame) in [("noise", noise), ("gradient", gradient)] {
                let yuv = to_yuv_reference(frame, PixelFormat::Nv12, m, r)?;
                self.gpu.upload(src.memory.addr(), &yuv)?;
                call()?;
                let got = self.download(&out)?;
                let want = to_rgb_reference(nv12, &yuv, m, r)?;
                diffs.push((what, diff_frames(out.layout(), &got, &want)));
            }
            self.gpu.upload(src.memory.addr(), &yuv)?;
            let us = self.time(call)?;
            self.npp_row(w, h, &kernel, name, meaning, moved, us, ours, &diffs)?;
        }
        Ok(())
    }

    /// The report: a Markdown table, then what each variant changes.
    fn table(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\n| size | kernel | implementation | µs/frame | frames/s | GB/s | of copy (same bytes) | of 64 MiB copy | vs NPP | check |"
        );
        let _ = writeln!(t, "|---|---|---|---:|---:|---:|---:|---:|---|---|");
        let num = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".into(), f);
        for r in &self.rows {
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                r.size,
                r.kernel,
                r.variant,
                num(r.us, &|u| format!("{u:.2}")),
                num(r.us, &|u| format!("{:.0}", 1e6 / u)),
                num(r.gb_per_s, &|g| format!("{g:.0}")),
                num(r.of_copy, &|s| format!("{:.0} %", 100.0 * s)),
                num(r.of_big_copy, &|s| format!("{:.0} %", 100.0 * s)),
                if r.vs_npp.is_empty() { "-" } else { &r.vs_npp },
                r.check
            );
        }
        let _ = writeln!(
            t,
            "\nGB/s: pixel bytes read + written a frame (padding not counted) per second. \"of copy (same \
             bytes)\": against a device-to-device copy moving as many bytes (half read, half written), \
             timed the same way in this run; \"of 64 MiB copy\": against {:.0} GB/s, a 64 MiB copy (as \
             `gpuipc-host bench` reports). Each figure: {} launches back to back between two events.",
            self.big_copy, self.args.launches
        );
        if !self.args.no_variants {
            let _ = writeln!(t, "\nVariants:");
            for (kernel, list) in [
                ("gen", variants::GENERATOR),
                ("grade", variants::RGB_PROCESS),
                ("yuv420", variants::YUV420),
                ("yuv-to-rgb", variants::YUV_TO_RGB),
            ] {
                for v in &list[1..] {
                    let _ = writeln!(
                        t,
                        "- {kernel} {}: {} (block {}, {} a thread)",
                        v.name, v.about, v.block_x, v.per_thread
                    );
                }
            }
        }
        t
    }
}
