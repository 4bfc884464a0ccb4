//! The test-gpu-fault stage: its params, the copy, and when to fault.

use gpuipc_plugin_api::{
    CreateContext, Domain, Error, FrameFormat, InputFrame, OutputFrame, PixelFormat, Plugin, PluginInfo,
    ProcessContext, Result, bail, log,
};
use serde::Deserialize;

use crate::cuda::{GpuFault, Poison};

/// What the stage does at frame `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Copy, like every other frame.
    #[default]
    Ok,
    /// Launch a kernel writing to device address 0: CUDA_ERROR_ILLEGAL_ADDRESS.
    IllegalAddress,
    /// Launch a kernel executing `__trap()`: a launch failure.
    Trap,
}

impl Mode {
    /// The name the params use.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ok => "ok",
            Mode::IllegalAddress => "illegal_address",
            Mode::Trap => "trap",
        }
    }

    /// The faulting kernel this mode launches; `None` for `ok`.
    pub fn poison(self) -> Option<Poison> {
        match self {
            Mode::Ok => None,
            Mode::IllegalAddress => Some(Poison::IllegalAddress),
            Mode::Trap => Some(Poison::Trap),
        }
    }
}

/// The `params` table of a test-gpu-fault stage.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// What happens at frame `at`. Default `ok`.
    pub mode: Mode,
    /// The sequence number (`FrameInfo::seq` of the input) of the frame that faults. Default 0.
    pub at: u64,
    /// Microseconds of pretend work per frame. Default 0.
    pub delay_us: u64,
    /// Microseconds of real work per frame: a one-warp kernel spinning on the GPU (cuda), a
    /// busy loop on the host (cpu). Default 0.
    pub gpu_busy_us: u64,
    /// Blocks of one warp each of the busy kernel: 1 keeps one SM busy, some thousands fill
    /// the GPU. Default 1.
    pub gpu_busy_blocks: u32,
}

/// The line logged at info level when the faulting kernel `poison` is launched for frame
/// `seq`.
pub fn fault_message(poison: Poison, seq: u64) -> String {
    let what = match poison {
        Poison::IllegalAddress => "writes to an illegal address",
        Poison::Trap => "executes __trap()",
    };
    format!("launching a kernel that {what} at frame {seq}, as asked")
}

/// The line logged at warn level when a fault is asked for in the cpu domain.
pub fn cpu_message(mode: Mode, seq: u64) -> String {
    format!(
        "frame {seq}: mode `{}` faults the GPU, but this stage runs in the cpu domain; copying \
         the frame instead",
        mode.name()
    )
}

/// A test-gpu-fault stage instance.
#[derive(Debug)]
pub struct GpuFaultStage {
    mode: Mode,
    at: u64,
    delay: std::time::Duration,
    busy: std::time::Duration,
    busy_blocks: u32,
    format: FrameFormat,
    /// The loaded kernels, in the cuda domain.
    gpu: Option<GpuFault>,
}

impl Plugin for GpuFaultStage {
    type Params = Params;

    // Replicas allowed: tests of replicas use it.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "test-gpu-fault",
        version: env!("CARGO_PKG_VERSION"),
        description: "pass-through whose cuda path faults the GPU on request (tests only)",
        domains: &[Domain::Cpu, Domain::Cuda],
        min_inputs: 1,
        max_inputs: 1,
        accepts: &PixelFormat::ALL,
        produces: &PixelFormat::ALL,
    };

    /// The one input (checked against `INFO` before this is called) is also the output's
    /// format.
    fn negotiate(_: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        Ok(Some(inputs[0]))
    }

    fn create(
        params: Params,
        inputs: &[FrameFormat],
        output: Option<FrameFormat>,
        ctx: &CreateContext<'_>,
    ) -> Result<GpuFaultStage> {
        let format = inputs[0];
        if output != Some(format) {
            bail!(
                "test-gpu-fault writes its input format {format}, but the output was set to \
                 {output:?}"
            );
        }
        let gpu = match ctx.domain {
            Domain::Cuda => Some(GpuFault::new(ctx)?),
            Domain::Cpu => None,
        };
        Ok(GpuFaultStage {
            mode: params.mode,
            at: params.at,
            delay: std::time::Duration::from_micros(params.delay_us),
            busy: std::time::Duration::from_micros(params.gpu_busy_us),
            busy_blocks: params.gpu_busy_blocks.max(1),
            format,
            gpu,
        })
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        let input = &inputs[0];
        let output = output.ok_or_else(|| Error::new("test-gpu-fault needs an output frame"))?;
        for frame in [&input.info, output.info()] {
            if frame.format != self.format {
                bail!("frame is {}, expected {}", frame.format, self.format);
            }
        }
        let seq = input.info.seq;
        let fault = if seq == self.at { self.mode.poison() } else { None };
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }

        if let Some(dst) = output.device_buffer() {
            let Some(gpu) = &self.gpu else {
                bail!("the output frame is in device memory, but this stage runs in the cpu domain")
            };
            let Some(src) = input.device_buffer() else {
                bail!("the output frame is in device memory but the input is in host memory")
            };
            // Enqueued on the stage's stream; nothing here waits for the GPU, so a fault
            // surfaces in a later CUDA call of the runner.
            if !self.busy.is_zero() {
                gpu.busy(self.busy.as_micros() as u64, self.busy_blocks, ctx.cuda_stream)?;
            }
            gpu.copy((&input.info, src), (output.info(), dst), ctx.cuda_stream)?;
            if let Some(poison) = fault {
                log::info(&fault_message(poison, seq));
                gpu.poison(poison, ctx.cuda_stream)?;
            }
            return Ok(());
        }

        if fault.is_some() {
            log::warn(&cpu_message(self.mode, seq));
        }
        let started = std::time::Instant::now();
        while started.elapsed() < self.busy {
            std::hint::spin_loop();
        }
        let host_only = || Error::new("the input is in device memory but the output in host memory");
        let mut planes = output.planes_mut().ok_or_else(host_only)?;
        for (i, plane) in planes.iter_mut().enumerate() {
            let src = input.plane(i).ok_or_else(host_only)?;
            for y in 0..plane.rows() {
                plane.row_mut(y).copy_from_slice(src.row(y));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuipc_plugin_api::testing::{CpuStage, check_doc_examples, cpu_context, frame_bytes, packed_planes, padded};
    use gpuipc_plugin_api::{DeviceBuffer, FrameInfo, parse_params};

    use super::*;

    const SENTINEL: u8 = 0xa5;
    /// Sizes with odd widths and heights, so i420 and nv12 have odd chroma sizes.
    const SIZES: [(u32, u32); 5] = [(1, 1), (2, 2), (5, 3), (17, 9), (641, 479)];

    fn params(text: &str) -> Params {
        parse_params::<GpuFaultStage>(text).unwrap()
    }

    /// Packed pixels for every plane of `format`, none of them zero.
    fn pixels(format: FrameFormat, salt: u64) -> Vec<u8> {
        let layout = FrameInfo::new(format, 0, 0).unwrap().layout;
        (0..layout.pixel_bytes()).map(|i| ((i * 31 + salt * 7) % 255 + 1) as u8).collect()
    }

    /// Run a cpu stage with `text` on frame `seq` of `format` with `pixels`; the input and the
    /// output have different padding. Returns the output's packed planes after checking that
    /// its padding was not written.
    fn run_cpu(text: &str, format: FrameFormat, seq: u64, pixels: &[u8]) -> Vec<u8> {
        let p = params(text);
        assert_eq!(GpuFaultStage::negotiate(&p, &[format]).unwrap(), Some(format));
        let mut stage = GpuFaultStage::create(p, &[format], Some(format), &cpu_context()).unwrap();
        let mut in_info = FrameInfo::new(format, seq, 0).unwrap();
        in_info.layout = padded(in_info.layout, 5);
        // Input padding is garbage that must not leak into the output.
        let in_bytes = frame_bytes(&in_info, pixels, 0x5a);
        let input = InputFrame::host(in_info, &in_bytes).unwrap();
        let out_info = FrameInfo::new(format, seq, 0).unwrap();
        let mut out_bytes = vec![SENTINEL; out_info.layout.total_bytes as usize];
        let mut output = OutputFrame::host(out_info, &mut out_bytes).unwrap();
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        stage.process(&[input], Some(&mut output), &pc).unwrap();
        packed_planes(&out_info.layout, &out_bytes, SENTINEL).concat()
    }

    #[test]
    fn params_default_to_ok_at_0() {
        assert_eq!(params(""), Params { mode: Mode::Ok, at: 0, delay_us: 0, gpu_busy_us: 0, gpu_busy_blocks: 0 });
        assert_eq!(
            params("mode = \"illegal_address\"\nat = 500"),
            Params { mode: Mode::IllegalAddress, at: 500, delay_us: 0, gpu_busy_us: 0, gpu_busy_blocks: 0 }
        );
        assert_eq!(
            params("mode = \"trap\"\nat = 3\ndelay_us = 250\ngpu_busy_us = 2000"),
            Params { mode: Mode::Trap, at: 3, delay_us: 250, gpu_busy_us: 2000, gpu_busy_blocks: 0 }
        );
        for mode in [Mode::Ok, Mode::IllegalAddress, Mode::Trap] {
            assert_eq!(params(&format!("mode = \"{}\"", mode.name())).mode, mode);
        }
    }

    #[test]
    fn bad_params_name_the_param() {
        let e = parse_params::<GpuFaultStage>("frame = 3").unwrap_err();
        assert!(e.message().contains("frame"), "{e}");
        let e = parse_params::<GpuFaultStage>("mode = \"segfault\"").unwrap_err();
        assert!(e.message().contains("segfault"), "{e}");
        let e = parse_params::<GpuFaultStage>("at = -1").unwrap_err();
        assert!(e.message().contains("at"), "{e}");
        let e = parse_params::<GpuFaultStage>("delay_us = \"1ms\"").unwrap_err();
        assert!(e.message().contains("delay_us"), "{e}");
        let e = parse_params::<GpuFaultStage>("gpu_busy_blocks = -2").unwrap_err();
        assert!(e.message().contains("gpu_busy_blocks"), "{e}");
        let e = parse_params::<GpuFaultStage>("gpu_busy_us = 1.5").unwrap_err();
        assert!(e.message().contains("gpu_busy_us"), "{e}");
    }

    #[test]
    fn doc_examples_are_valid_params() {
        check_doc_examples(include_str!("lib.rs"), GpuFaultStage::INFO.name, |text| {
            parse_params::<GpuFaultStage>(text).unwrap();
        });
    }

    #[test]
    fn the_log_lines_name_the_frame() {
        assert_eq!(
            fault_message(Poison::IllegalAddress, 500),
            "launching a kernel that writes to an illegal address at frame 500, as asked"
        );
        assert_eq!(fault_message(Poison::Trap, 7), "launching a kernel that executes __trap() at frame 7, as asked");
        assert_eq!(Mode::IllegalAddress.poison(), Some(Poison::IllegalAddress));
        assert_eq!(Mode::Trap.poison(), Some(Poison::Trap));
        assert_eq!(Mode::Ok.poison(), None);
        assert_eq!(
            cpu_message(Mode::Trap, 7),
            "frame 7: mode `trap` faults the GPU, but this stage runs in the cpu domain; copying \
             the frame instead"
        );
    }

    #[test]
    fn cpu_frames_of_every_format_pass_through() {
        for (width, height) in SIZES {
            for pixel in PixelFormat::ALL {
                let format = FrameFormat::new(pixel, width, height);
                let pixels = pixels(format, width as u64);
                assert!(pixels.iter().all(|&b| b != 0));
                assert_eq!(run_cpu("", format, 3, &pixels), pixels, "{format}");
            }
        }
    }

    /// There is no GPU to fault in the cpu domain: frame `at` is copied like the others.
    #[test]
    fn a_fault_in_the_cpu_domain_copies_the_frame() {
        let format = FrameFormat::new(PixelFormat::Nv12, 17, 9);
        let pixels = pixels(format, 1);
        for text in ["mode = \"illegal_address\"\nat = 3", "mode = \"trap\"\nat = 3"] {
            for seq in [2, 3, 4] {
                assert_eq!(run_cpu(text, format, seq, &pixels), pixels, "{text:?} seq {seq}");
            }
        }
    }

    #[test]
    fn mismatched_frames_and_domains_are_refused() {
        let format = FrameFormat::new(PixelFormat::Rgb8, 4, 4);
        let other = FrameFormat::new(PixelFormat::Gray8, 4, 4);
        let e = CpuStage::<GpuFaultStage>::new("", &[format, format]).err().unwrap();
        assert_eq!(e.message(), "test-gpu-fault takes 1 input, got 2");
        let e = GpuFaultStage::create(params(""), &[format], Some(other), &cpu_context()).unwrap_err();
        assert!(e.message().contains("writes its input format rgb8 4x4"), "{e}");

        let mut stage = GpuFaultStage::create(params(""), &[format], Some(format), &cpu_context()).unwrap();
        let info = FrameInfo::new(format, 0, 0).unwrap();
        let buffer = DeviceBuffer { addr: 0x1000, len: info.layout.total_bytes };
        let input = InputFrame::device(info, buffer);
        let mut out = OutputFrame::device(info, buffer);
        let pc = ProcessContext { frame_index: 0, cuda_stream: 0 };
        let e = stage.process(&[input], Some(&mut out), &pc).unwrap_err();
        assert!(e.message().contains("runs in the cpu domain"), "{e}");

        let cuda = CreateContext { domain: Domain::Cuda, ..cpu_context() };
        let e = GpuFaultStage::create(params(""), &[format], Some(format), &cuda).unwrap_err();
        assert!(e.message().contains("kernels/gpu_fault.cu"), "{e}");
    }

    /// Mode `ok` on the GPU copies every plane of every format byte for byte, padding
    /// untouched, with aligned and unaligned pitches, at frame `at` too. Needs a GPU (skipped
    /// without one unless GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_mode_ok_copies_byte_for_byte() {
        use gpuipc_plugin_api::cuda::testing::{GpuHarness, first_difference};
        let Some(gpu) = GpuHarness::for_test() else {
            return;
        };
        for (width, height) in SIZES.into_iter().chain([(1920, 1080)]) {
            for pixel in PixelFormat::ALL {
                let format = FrameFormat::new(pixel, width, height);
                let ctx = gpu.create_context("copy").unwrap();
                let mut stage = GpuFaultStage::create(params("at = 1"), &[format], Some(format), &ctx).unwrap();
                for (seq, (in_extra, out_extra)) in [(0, 0), (5, 3), (16, 0)].into_iter().enumerate() {
                    let mut in_info = FrameInfo::new(format, seq as u64, 0).unwrap();
                    in_info.layout = padded(in_info.layout, in_extra);
                    let mut out_info = FrameInfo::new(format, seq as u64, 0).unwrap();
                    out_info.layout = padded(out_info.layout, out_extra);
                    let pixels = pixels(format, seq as u64);
                    let in_bytes = frame_bytes(&in_info, &pixels, 0x5a);
                    let want = frame_bytes(&out_info, &pixels, SENTINEL);

                    let device_in = gpu.upload(&in_bytes).unwrap();
                    let device_out = gpu.upload(&vec![SENTINEL; want.len()]).unwrap();
                    let input = InputFrame::device(in_info, device_in.buffer());
                    let mut out = OutputFrame::device(out_info, device_out.buffer());
                    let pc = gpu.process_context(seq as u64);
                    stage.process(&[input], Some(&mut out), &pc).unwrap();
                    let got = gpu.download(&device_out).unwrap();
                    if let Some(d) = first_difference(&got, &want, &out_info.layout) {
                        panic!("{format} pitch +{in_extra}/+{out_extra}: {d}");
                    }
                }
            }
        }
    }

    /// Set to a mode's name, this makes [`fault_child`] fault the GPU in its process.
    const CHILD_ENV: &str = "GPUIPC_TEST_GPU_FAULT_CHILD";

    /// Each fault mode, on the GPU, in a process of its own (a fault ends the context that
    /// every other test here shares): `process` returns `Ok` at frame `at` and after it, having
    /// logged its line, and the fault surfaces in a later CUDA call; an illegal address as
    /// CUDA_ERROR_ILLEGAL_ADDRESS. Needs a GPU (skipped without one unless
    /// GPUIPC_REQUIRE_GPU=1) and NVRTC.
    #[test]
    fn gpu_faults_surface_in_a_later_cuda_call() {
        use gpuipc_plugin_api::cuda::testing::GpuHarness;
        let Some(gpu) = GpuHarness::for_test() else {
            return;
        };
        drop(gpu);
        let child = format!("{}::fault_child", module_path!().split_once("::").unwrap().1);
        for (mode, line, error) in [
            (
                Mode::IllegalAddress,
                "launching a kernel that writes to an illegal address at frame 2, as asked",
                "CUDA_ERROR_ILLEGAL_ADDRESS",
            ),
            (Mode::Trap, "launching a kernel that executes __trap() at frame 2, as asked", "CUDA_ERROR"),
        ] {
            let run = std::process::Command::new(std::env::current_exe().unwrap())
                .args([&child, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
                .env(CHILD_ENV, mode.name())
                .output()
                .unwrap();
            let output = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
            assert!(run.status.success(), "mode {}: the child failed:\n{output}", mode.name());
            assert!(output.contains(line), "mode {}: no line {line:?} in:\n{output}", mode.name());
            let surfaced = output
                .lines()
                .find(|l| l.contains("fault surfaced"))
                .unwrap_or_else(|| panic!("mode {}: no fault surfaced:\n{output}", mode.name()));
            assert!(surfaced.contains(error), "mode {}: {surfaced}", mode.name());
            eprintln!("mode {}: {surfaced}", mode.name());
        }
    }

    /// Run by [`gpu_faults_surface_in_a_later_cuda_call`] in a process of its own, with the
    /// mode in GPUIPC_TEST_GPU_FAULT_CHILD; without it, does nothing.
    #[test]
    #[ignore = "faults the GPU; run in a child process by gpu_faults_surface_in_a_later_cuda_call"]
    fn fault_child() {
        use gpuipc_plugin_api::cuda::testing::GpuHarness;
        let Ok(mode) = std::env::var(CHILD_ENV) else {
            eprintln!("{CHILD_ENV} is not set: nothing to do");
            return;
        };
        let gpu = GpuHarness::for_test().expect("the parent test found a GPU");
        let format = FrameFormat::new(PixelFormat::Rgb8, 64, 16);
        let ctx = gpu.create_context("fault").unwrap();
        let text = format!("mode = \"{mode}\"\nat = 2");
        let mut stage = GpuFaultStage::create(params(&text), &[format], Some(format), &ctx).unwrap();
        let info = FrameInfo::new(format, 0, 0).unwrap();
        let device_in = gpu.upload(&vec![7; info.layout.total_bytes as usize]).unwrap();
        let device_out = gpu.upload(&vec![0; info.layout.total_bytes as usize]).unwrap();
        let mut surfaced = None;
        for seq in 0..6 {
            let info = FrameInfo { seq, ..info };
            let input = InputFrame::device(info, device_in.buffer());
            let mut out = OutputFrame::device(info, device_out.buffer());
            let result = stage.process(&[input], Some(&mut out), &gpu.process_context(seq));
            match result {
                // Up to frame `at` the calls only enqueue, and nothing has faulted yet.
                Err(e) if seq <= 2 => panic!("frame {seq}: {e}"),
                Err(e) => {
                    surfaced = Some(format!("by process at frame {seq}: {e}"));
                    break;
                }
                Ok(()) => {}
            }
        }
        if surfaced.is_none() {
            let e = gpu.download(&device_out).expect_err("the fault did not surface");
            surfaced = Some(format!("by cuStreamSynchronize after frame 5: {e}"));
        }
        println!("fault surfaced {}", surfaced.unwrap());
    }
}
