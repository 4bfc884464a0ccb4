//! The plugin face of the CUDA crate as plugins use it: planes and grids, kernels compiled
//! and launched, scratch buffers and tables made in a stage's context, frames copied.

use super::testing::{GpuHarness, nvrtc_for_test};
use super::*;
use crate::format::{FrameFormat, PixelFormat};
use crate::frame::FrameInfo;

#[test]
fn planes_are_checked_against_the_buffer() {
    let layout = FrameLayout::for_format(FrameFormat::new(PixelFormat::I420, 5, 3)).unwrap();
    let buffer = DeviceBuffer { addr: 0x7000_0000, len: layout.total_bytes };
    let u = device_plane(buffer, &layout, 1).unwrap();
    assert_eq!(u, DevicePlane { addr: 0x7000_0100, pitch: 64, row_bytes: 3, rows: 2 });
    assert!(device_plane(buffer, &layout, 3).is_err());
    // The last plane's last row must fit up to its pitch.
    let short = DeviceBuffer { len: layout.planes[2].offset + 64 * 2 - 1, ..buffer };
    let e = device_plane(short, &layout, 2).unwrap_err();
    assert!(e.message().contains("does not fit"), "{e}");
    let top = DeviceBuffer { addr: u64::MAX - 10, ..buffer };
    assert!(device_plane(top, &layout, 1).is_err());
}

#[test]
fn row_grids_are_clamped() {
    assert_eq!(row_grid_within(243, 2160, 128, 0), (2, 2160, 1));
    assert_eq!(row_grid_within(1, 100_000, 128, 0), (1, 65535, 1));
    assert_eq!(row_grid_within(0, 0, 128, 0), (1, 1, 1));
    // Paced: at most that many block rows, the kernel's grid-stride loop covering the rest.
    assert_eq!(row_grid_within(243, 2160, 128, 64), (2, 64, 1));
    assert_eq!(row_grid_within(243, 20, 128, 64), (2, 20, 1));
    assert_eq!(row_grid_within(1, 100_000, 128, 70_000), (1, 65535, 1));
}

/// The entry names a kernel file's opening `//` comment documents, as
/// `extern "C" __global__ void NAME(`.
fn documented_entries(source: &str) -> Vec<String> {
    let header: String = source.lines().map_while(|l| l.strip_prefix("//")).collect::<Vec<_>>().join(" ");
    header
        .split("__global__ void")
        .skip(1)
        .filter_map(|rest| rest.trim_start().split(|c: char| c == '(' || c.is_whitespace()).next())
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn documented_entries_are_read_from_the_header() {
    let src = "// a\n//   extern \"C\" __global__ void gen_a(u8* out)\n//   extern \"C\" __global__ void gen_b(... same ...)\ncode\n// extern \"C\" __global__ void not_header(\n";
    assert_eq!(documented_entries(src), ["gen_a", "gen_b"]);
}

/// Every kernel in kernels/ and the plugin template's compiles, as the stages compile it,
/// and holds the entry points its header documents. Needs NVRTC (CI has it;
/// GPUIPC_REQUIRE_NVRTC=1 there).
#[test]
fn every_kernel_compiles_for_sm_80_and_sm_90() {
    if !nvrtc_for_test() {
        return;
    }
    let (major, minor) = nvrtc_version().unwrap();
    eprintln!("NVRTC {major}.{minor}");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for dir in ["kernels", "plugin-api/template/src"] {
        let mut found: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cu"))
            .map(|p| (format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()), p))
            .collect();
        assert!(!found.is_empty(), "no .cu files in {dir}");
        found.sort();
        files.extend(found);
    }
    for (name, path) in files {
        let source = std::fs::read_to_string(&path).unwrap();
        let entries = documented_entries(&source);
        assert!(!entries.is_empty(), "{name}: the header documents no entry point");
        for arch in ["sm_80", "sm_90"] {
            let cubin = compile_cubin(&name, &source, arch).unwrap_or_else(|e| panic!("{e}"));
            assert!(cubin.starts_with(b"\x7fELF"), "{name} {arch}: not ELF");
            for entry in &entries {
                let found = cubin.windows(entry.len()).any(|w| w == entry.as_bytes());
                assert!(found, "{name} {arch}: documented entry `{entry}` is not in the CUBIN");
            }
            eprintln!("ok {name} {arch}: {} bytes, entries {entries:?}", cubin.len());
        }
    }
}

/// A compile error reaches a plugin with the file, NVRTC's status and the whole log.
#[test]
fn a_compile_error_keeps_nvrtc_status_and_log() {
    if !nvrtc_for_test() {
        return;
    }
    let source = "extern \"C\" __global__ void k(int* p) {\n  *p = undefined_one;\n}\n";
    let e = compile_cubin("kernels/broken.cu", source, "sm_90").unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("kernels/broken.cu: NVRTC compile for sm_90 failed: NVRTC_ERROR_COMPILATION (6)"),
        "{text}"
    );
    assert!(text.contains("---- NVRTC log ----") && text.contains("undefined_one"), "{text}");
}

#[test]
fn loading_outside_the_cuda_domain_is_an_error() {
    let ctx = crate::testing::cpu_context();
    let e = Kernels::load(&ctx, "kernels/k.cu", "", &["k"]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "loading kernels kernels/k.cu: stage `test` runs in the cpu domain without a CUDA context"
    );
}

#[test]
fn kernel_sources_are_built_in_and_load_only_in_the_cuda_domain() {
    const SOURCE: KernelSource = crate::kernel_source!("template/src", "sepia.cu");
    assert_eq!(SOURCE.file_name, "sepia.cu");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("template/src/sepia.cu");
    assert_eq!(SOURCE.source, std::fs::read_to_string(path).unwrap());
    let e = SOURCE.load(&crate::testing::cpu_context(), ["sepia"]).unwrap_err();
    assert_eq!(e.to_string(), "loading kernels sepia.cu: stage `test` runs in the cpu domain without a CUDA context");
}

/// On a GPU: the driver reports the parameters as declared, mismatched launches are refused
/// before reaching the driver, and a checked launch and a device table work. Skipped
/// without a GPU unless GPUIPC_REQUIRE_GPU=1; needs NVRTC.
#[test]
fn gpu_launches_are_checked_and_run() {
    let Some(gpu) = GpuHarness::for_test() else {
        return;
    };
    let source = r#"
        extern "C" __global__ void put(unsigned* out, unsigned v, unsigned long long w,
                                       int i, float f, const unsigned char* table) {
            out[0] = v; out[1] = (unsigned)(w >> 32); out[2] = (unsigned)i;
            out[3] = __float_as_uint(f); out[4] = table[0] | (table[255] << 8);
        }
        extern "C" __global__ void nothing() {}
    "#;
    let ctx = gpu.create_context("test").unwrap();
    let kernels = Kernels::load(&ctx, "kernels/test.cu", source, &["put", "nothing"]).unwrap();
    let put = kernels.get("put").unwrap();
    assert_eq!(put.param_sizes(), [8, 4, 8, 4, 4, 8]);
    assert_eq!(kernels.get("nothing").unwrap().param_sizes(), Vec::<usize>::new());
    let e = kernels.get("missing").unwrap_err();
    assert_eq!(e.to_string(), "kernels/test.cu: no kernel `missing` was loaded (loaded: put, nothing)");
    let e = Kernels::load(&ctx, "kernels/test.cu", source, &["absent"]).unwrap_err();
    assert!(e.to_string().contains("CUDA_ERROR_NOT_FOUND (500)"), "{e}");
    // The same through a KernelSource: the kernels in the order asked for.
    let built_in = KernelSource { file_name: "kernels/test.cu", source };
    let [nothing, put_again] = built_in.load(&ctx, ["nothing", "put"]).unwrap();
    assert_eq!((nothing.name(), put_again.name()), ("nothing", "put"));
    assert_eq!(put_again.param_sizes(), [8, 4, 8, 4, 4, 8]);

    let table: Vec<u8> = (0..=255).collect();
    let table = DeviceTable::upload(&ctx, &table).unwrap();
    let out = gpu.upload(&[0u8; 20]).unwrap();
    let args = [
        KernelArg::DevicePtr(out.buffer().addr),
        KernelArg::U32(7),
        KernelArg::U64(5 << 32),
        KernelArg::I32(-3),
        KernelArg::F32(1.5),
        table.arg(),
    ];
    let one = (1, 1, 1);
    let stream = gpu.stream();
    put.launch(stream, one, one, 0, &args).unwrap();
    let bytes = gpu.download(&out).unwrap();
    let words: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_ne_bytes(c.try_into().unwrap())).collect();
    assert_eq!(words, [7, 5, (-3i32) as u32, 1.5f32.to_bits(), 0xff00]);

    let mut wrong = args;
    wrong[1] = KernelArg::U64(7);
    let e = put.launch(stream, one, one, 0, &wrong).unwrap_err();
    assert_eq!(e.to_string(), "kernel `put`: parameter 1 is 4 bytes, the launch passes U64(7) (8 bytes)");
    assert!(put.launch(stream, one, one, 0, &args[..5]).is_err());
    assert!(put.launch(stream + 8, one, one, 0, &args).unwrap_err().to_string().contains("stream"));
    assert!(put.launch(stream, (0, 1, 1), one, 0, &args).is_err());
    // The driver's own limits come back as errors too, with the driver's name for them.
    let e = put.launch(stream, one, (4096, 1, 1), 0, &args).unwrap_err();
    assert!(e.to_string().starts_with("kernel `put`: cuLaunchKernel: CUDA_ERROR_"), "{e}");
}

#[test]
fn a_cpu_stage_has_no_scratch_buffers() {
    let ctx = crate::testing::cpu_context();
    let e = ScratchBuffer::zeroed(&ctx, 8).unwrap_err();
    assert_eq!(
        e.to_string(),
        "allocating a 8-byte scratch buffer: stage `test` runs in the cpu domain without a CUDA context"
    );
}

#[test]
fn frames_are_copied_as_their_layout_places_them() {
    let info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 5, 3), 0, 0).unwrap();
    let layout = info.layout;
    let input = |len| InputFrame::device(info, DeviceBuffer { addr: 0x1000, len });
    let whole = input(layout.total_bytes + 4096).device_bytes().unwrap();
    assert_eq!(whole, DeviceBuffer { addr: 0x1000, len: layout.total_bytes });
    // A buffer cut after the last plane's last row still holds the frame.
    let last = layout.planes[2];
    let tight = last.offset + last.pitch + last.row_bytes;
    assert_eq!(input(tight).device_bytes().unwrap().len, tight);
    let e = input(tight - 1).device_bytes().unwrap_err();
    assert!(e.to_string().contains("needs 579 bytes"), "{e}");
    let mut output = OutputFrame::device(info, DeviceBuffer { addr: 0x2000, len: tight });
    assert_eq!(output.device_bytes().unwrap(), DeviceBuffer { addr: 0x2000, len: tight });
    let gray = FrameInfo::new(FrameFormat::new(PixelFormat::Gray8, 2, 2), 0, 0).unwrap();
    let mut bytes = vec![0u8; gray.layout.total_bytes as usize];
    let e = InputFrame::host(gray, &bytes).unwrap().device_bytes().unwrap_err();
    assert!(e.to_string().contains("the input frame is in host memory"), "{e}");
    output = OutputFrame::host(gray, &mut bytes).unwrap();
    let e = output.device_bytes().unwrap_err();
    assert!(e.to_string().contains("the output frame is in host memory"), "{e}");
}

/// On a GPU: a reduction (the sum of a gray frame's pixels, by a kernel adding into a
/// zeroed scratch buffer) read back for each of several frames, and a frame copied into
/// scratch memory and out to another frame, every byte checked; host uploads, fills and
/// the stream check. Skipped without a GPU unless GPUIPC_REQUIRE_GPU=1; needs NVRTC.
#[test]
fn gpu_scratch_buffers_reduce_copy_and_read_back() {
    let Some(gpu) = GpuHarness::for_test() else { return };
    let source = r#"
        extern "C" __global__ void sum(const unsigned char* plane, unsigned long long pitch,
                                       unsigned long long row_bytes, unsigned long long rows,
                                       unsigned long long* total) {
            for (unsigned long long y = blockIdx.y; y < rows; y += gridDim.y) {
                unsigned long long s = 0;
                for (unsigned long long x = blockIdx.x * blockDim.x + threadIdx.x; x < row_bytes;
                     x += (unsigned long long)gridDim.x * blockDim.x) {
                    s += plane[y * pitch + x];
                }
                if (s) atomicAdd(total, s);
            }
        }
    "#;
    let ctx = gpu.create_context("test").unwrap();
    let kernels = Kernels::load(&ctx, "kernels/sum.cu", source, &["sum"]).unwrap();
    let sum = kernels.get("sum").unwrap();
    let total = ScratchBuffer::zeroed(&ctx, 8).unwrap();
    assert_eq!(total.to_vec(ctx.cuda_stream).unwrap(), [0; 8]);
    let stream = gpu.process_context(0).cuda_stream;
    let format = FrameFormat::new(PixelFormat::Gray8, 641, 479);
    for seq in 0..3u64 {
        let info = FrameInfo::new(format, seq, 0).unwrap();
        let bytes: Vec<u8> = (0..info.layout.total_bytes).map(|i| (i * 7 + seq) as u8).collect();
        let plane = info.layout.planes[0];
        let want: u64 = (0..plane.rows as usize)
            .flat_map(|y| &bytes[y * plane.pitch as usize..][..plane.row_bytes as usize])
            .map(|&b| b as u64)
            .sum();
        let frame = gpu.upload(&bytes).unwrap();
        let p = device_plane(frame.buffer(), &info.layout, 0).unwrap();
        total.memset(stream, 0).unwrap();
        let args = [
            KernelArg::DevicePtr(p.addr),
            KernelArg::U64(p.pitch),
            KernelArg::U64(p.row_bytes),
            KernelArg::U64(p.rows),
            total.arg(),
        ];
        sum.launch(stream, row_grid(p.row_bytes, p.rows, 128), (128, 1, 1), 0, &args).unwrap();
        let mut got = [0u8; 8];
        total.copy_to_host(stream, 0, &mut got).unwrap();
        assert_eq!(u64::from_ne_bytes(got), want, "frame {seq}");
    }

    let info = FrameInfo::new(FrameFormat::new(PixelFormat::I420, 33, 17), 0, 0).unwrap();
    let bytes: Vec<u8> = (0..info.layout.total_bytes).map(|i| (i * 13) as u8).collect();
    let src = gpu.upload(&bytes).unwrap();
    let dst = gpu.upload(&vec![0xa5; bytes.len()]).unwrap();
    let mut copy = ScratchBuffer::filled(&ctx, bytes.len() + 64, 0x11).unwrap();
    let n = copy.copy_from(stream, &InputFrame::device(info, src.buffer())).unwrap();
    assert_eq!(n, bytes.len());
    copy.copy_from_host(stream, 0, &[1, 2, 3]).unwrap();
    copy.memset_range(stream, 3, 1, 4).unwrap();
    copy.copy_to(stream, &mut OutputFrame::device(info, dst.buffer())).unwrap();
    let mut want = bytes.clone();
    want[..4].copy_from_slice(&[1, 2, 3, 4]);
    assert_eq!(gpu.download(&dst).unwrap(), want);
    let all = copy.to_vec(stream).unwrap();
    assert_eq!(all[..bytes.len()], want);
    assert!(all[bytes.len()..].iter().all(|&b| b == 0x11));

    let e = copy.memset(stream + 8, 0).unwrap_err();
    assert!(e.to_string().contains("is not the stage's stream"), "{e}");
    assert!(copy.copy_from_host(stream, copy.len(), &[1]).is_err());
    let small = ScratchBuffer::zeroed(&ctx, 16).unwrap();
    let e = small.copy_from(stream, &InputFrame::device(info, src.buffer())).unwrap_err();
    assert!(e.to_string().contains("do not fit in the 16-byte scratch buffer"), "{e}");
}

#[test]
fn a_cpu_stage_has_no_tables() {
    let ctx = crate::testing::cpu_context();
    let e = DeviceTable::upload(&ctx, &[1, 2]).unwrap_err();
    assert_eq!(e.to_string(), "uploading a 2-byte table: stage `test` runs in the cpu domain without a CUDA context");
}
