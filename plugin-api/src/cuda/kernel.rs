//! [`Kernels`] and [`Kernel`] for plugins: the CUDA crate's kernels, loaded for the stage a
//! [`CreateContext`] describes and returning this crate's [`Error`].

use std::fmt;

use gpuipc_cuda::{CudaError, KernelArg, RawStream};

use crate::error::{Error, Result};
use crate::plugin::{CreateContext, Domain};

/// One entry point of a loaded kernel file, ready to launch on the stage's stream.
///
/// # What [`Kernel::launch`] checks, and what it cannot
///
/// Checked, so that a launch cannot make the driver read host memory it should not:
/// - the number of arguments and the byte size of each, against the kernel's parameters as
///   the driver reports them (`cuFuncGetParamInfo`, read once at load);
/// - the stream: only the stage's stream given at load time (`CreateContext::cuda_stream`,
///   the same as `ProcessContext::cuda_stream`) is accepted, since the driver would
///   dereference any other value as a stream handle;
/// - grid and block dimensions are non-zero; the driver checks their limits and the shared
///   memory size and returns an error.
///
/// Not checked:
/// - the meaning of the arguments: a `u32` passed where the kernel takes an `int` or a
///   `float` (same size) goes through;
/// - device addresses. A kernel given a wrong address writes wherever that address leads in
///   the GPU's view: a fault (`CUDA_ERROR_ILLEGAL_ADDRESS`, which ends this stage's context,
///   and under MPS every stage on the GPU), other device memory of this process (another
///   frame slot), or host memory the device can reach (pinned or registered memory, and any
///   host memory on systems with HMM/ATS). Passing addresses of the frames handed to
///   `process` (see [`super::device_plane`], which checks a plane lies inside its frame) and
///   of tables this stage allocated is the caller's part.
#[derive(Clone)]
pub struct Kernel(gpuipc_cuda::Kernel);

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Kernel {
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// Byte sizes of the kernel's parameters, in order, as the driver reports them.
    pub fn param_sizes(&self) -> Vec<usize> {
        self.0.param_sizes()
    }

    /// Enqueue the kernel on `stream` (the stage's stream) with `args`; returns once it is
    /// enqueued, without waiting for the GPU. See the type's docs for what is checked.
    pub fn launch(
        &self,
        stream: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) -> Result<()> {
        Ok(self.0.launch(stream, grid, block, shared_bytes, args)?)
    }
}

/// The entry points of one kernel source file, loaded into the stage's CUDA context.
#[derive(Debug)]
pub struct Kernels {
    file_name: String,
    arch: String,
    kernels: Vec<Kernel>,
}

impl Kernels {
    /// Compile `source` (the kernel file `file_name`, a name for messages and the cache) for
    /// the architecture of the stage's device, or take it from the kernel cache, load it into
    /// the stage's context (which must be current on this thread, as the runner leaves it for
    /// `create`) and look up every one of `entry_points` (`extern "C"` names) with its
    /// parameters.
    ///
    /// A compile error is an error holding the file name, the architecture and NVRTC's full
    /// log. See the [module docs](super) for the cache.
    pub fn load(ctx: &CreateContext<'_>, file_name: &str, source: &str, entry_points: &[&str]) -> Result<Kernels> {
        super::bridge_logs();
        if ctx.domain != Domain::Cuda || ctx.cuda_context == 0 {
            return Err(Error::new(format!(
                "stage `{}` runs in the {} domain without a CUDA context",
                ctx.stage,
                ctx.domain.name()
            ))
            .context(format!("loading kernels {file_name}")));
        }
        let on = RawStream { context: ctx.cuda_context, stream: ctx.cuda_stream };
        let loaded = gpuipc_cuda::Kernels::load(on, ctx.kernel_cache_dir, file_name, source, entry_points)?;
        Ok(Kernels {
            file_name: loaded.file_name().to_owned(),
            arch: loaded.arch().to_owned(),
            kernels: loaded.kernels().iter().cloned().map(Kernel).collect(),
        })
    }

    /// The entry point `name`, one of those given to [`Kernels::load`].
    pub fn get(&self, name: &str) -> Result<&Kernel> {
        self.kernels.iter().find(|k| k.name() == name).ok_or_else(|| {
            Error::from(CudaError::NoSuchKernel {
                file: self.file_name.clone(),
                name: name.to_owned(),
                loaded: self.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
            })
        })
    }

    /// The architecture the kernels were compiled for, `sm_XY`.
    pub fn arch(&self) -> &str {
        &self.arch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::testing::{GpuHarness, nvrtc_for_test};
    use crate::cuda::{DeviceTable, compile_cubin, nvrtc_version};

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
        let text = e.message();
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
            e.message(),
            "loading kernels kernels/k.cu: stage `test` runs in the cpu domain without a CUDA context"
        );
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
        assert_eq!(e.message(), "kernels/test.cu: no kernel `missing` was loaded (loaded: put, nothing)");
        let e = Kernels::load(&ctx, "kernels/test.cu", source, &["absent"]).unwrap_err();
        assert!(e.message().contains("CUDA_ERROR_NOT_FOUND (500)"), "{e}");

        let table: Vec<u8> = (0..=255).collect();
        let table = DeviceTable::upload(&ctx, gpu.stream(), &table).unwrap();
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
        assert_eq!(e.message(), "kernel `put`: parameter 1 is 4 bytes, the launch passes U64(7) (8 bytes)");
        assert!(put.launch(stream, one, one, 0, &args[..5]).is_err());
        assert!(put.launch(stream + 8, one, one, 0, &args).unwrap_err().message().contains("stream"));
        assert!(put.launch(stream, (0, 1, 1), one, 0, &args).is_err());
        assert!(DeviceTable::upload(&ctx, stream + 8, &[1]).is_err());
        // The driver's own limits come back as errors too, with the driver's name for them.
        let e = put.launch(stream, one, (4096, 1, 1), 0, &args).unwrap_err();
        assert!(e.message().starts_with("kernel `put`: cuLaunchKernel: CUDA_ERROR_"), "{e}");
    }
}
