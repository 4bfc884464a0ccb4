//! Kernels: compiled (or taken from the cache), loaded into the stage's context, and launched
//! with their argument lists checked against the kernels' real parameters.
#![allow(unsafe_code)]

use std::ffi::{CString, c_void};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::{self, CUresult};

use super::{cache, driver, nvrtc};
use crate::error::{Error, Result};
use crate::plugin::{CreateContext, Domain};

/// The most parameters a kernel launched through [`Kernel::launch`] may have.
pub const MAX_KERNEL_PARAMS: usize = 64;

/// One argument of a kernel launch. Its size must equal the kernel parameter's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// `unsigned int` / `u32`: 4 bytes.
    U32(u32),
    /// `int` / `i32`: 4 bytes.
    I32(i32),
    /// `unsigned long long` / `u64`: 8 bytes.
    U64(u64),
    /// `float`: 4 bytes.
    F32(f32),
    /// Any pointer parameter (`const u8*`, `u8*`, ...): a device address, 8 bytes.
    DevicePtr(u64),
}

impl KernelArg {
    /// Bytes the argument takes in the kernel's parameter buffer.
    pub fn size(&self) -> usize {
        match self {
            KernelArg::U32(_) | KernelArg::I32(_) | KernelArg::F32(_) => 4,
            KernelArg::U64(_) | KernelArg::DevicePtr(_) => 8,
        }
    }

    /// The value's bytes in native order, padded to 8.
    fn bytes(&self) -> ArgSlot {
        let mut slot = ArgSlot([0; 8]);
        match *self {
            KernelArg::U32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::I32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::F32(v) => slot.0[..4].copy_from_slice(&v.to_ne_bytes()),
            KernelArg::U64(v) | KernelArg::DevicePtr(v) => slot.0 = v.to_ne_bytes(),
        }
        slot
    }
}

/// Storage of one argument value, aligned for any scalar parameter.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct ArgSlot([u8; 8]);

/// Where one kernel parameter sits in the device-side parameter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParamInfo {
    pub offset: usize,
    pub size: usize,
}

/// `Ok` when `args` has as many entries as the kernel has parameters and each has the
/// parameter's size.
fn check_args(kernel: &str, params: &[ParamInfo], args: &[KernelArg]) -> Result<()> {
    if params.len() != args.len() {
        return Err(Error::new(format!(
            "kernel `{kernel}` takes {} parameters, the launch passes {}",
            params.len(),
            args.len()
        )));
    }
    for (i, (param, arg)) in params.iter().zip(args).enumerate() {
        if param.size != arg.size() {
            return Err(Error::new(format!(
                "kernel `{kernel}` parameter {i} is {} bytes, the launch passes {arg:?} ({} bytes)",
                param.size,
                arg.size()
            )));
        }
    }
    Ok(())
}

/// A loaded module; unloaded when the last [`Kernels`] or [`Kernel`] of it goes.
struct Module {
    handle: sys::CUmodule,
}

// SAFETY: a CUmodule is a driver handle valid on any thread whose current context is the one
// it was loaded into; the driver API is thread-safe. The handle is only read after loading.
unsafe impl Send for Module {}
// SAFETY: as above; nothing here is mutated through a shared reference.
unsafe impl Sync for Module {}

impl Module {
    /// Load a CUBIN into the current context.
    fn load(cubin: &[u8]) -> Result<Module> {
        if !cache::looks_like_cubin(cubin) {
            return Err(Error::new(
                "cuModuleLoadData: the image is not a CUBIN (ELF) file",
            ));
        }
        // The driver reads an ELF image through aligned loads: hand it 8-byte aligned memory.
        let mut image = vec![0u64; cubin.len().div_ceil(8)];
        // SAFETY: `image` holds at least `cubin.len()` bytes; u64 has no invalid bit patterns.
        let image_bytes = unsafe {
            std::slice::from_raw_parts_mut(image.as_mut_ptr().cast::<u8>(), image.len() * 8)
        };
        image_bytes[..cubin.len()].copy_from_slice(cubin);
        let mut handle: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` is an ELF file (checked magic) that the driver parses and validates
        // and copies before returning; it writes the module handle into `handle`.
        let result = unsafe { sys::cuModuleLoadData(&mut handle, image.as_ptr().cast::<c_void>()) };
        driver::check("cuModuleLoadData", result)?;
        Ok(Module { handle })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuModuleLoadData and is unloaded once, here. Unloading
        // needs the module's context current, as everything in a plugin does (the runner
        // destroys the plugin on the thread that created it, before its context).
        let result = unsafe { sys::cuModuleUnload(self.handle) };
        if result != CUresult::CUDA_SUCCESS {
            crate::log::warn(&format!(
                "cuModuleUnload failed: {}",
                driver::describe(result)
            ));
        }
    }
}

/// One entry point of a loaded module, ready to launch on the stage's stream.
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
pub struct Kernel {
    name: Arc<str>,
    function: sys::CUfunction,
    params: Arc<[ParamInfo]>,
    stream: usize,
    _module: Arc<Module>,
}

// SAFETY: a CUfunction is a driver handle usable from any thread with its context current; it
// stays valid while `_module` (kept alive by this value) is loaded. Launching is thread-safe.
unsafe impl Send for Kernel {}
// SAFETY: as above; `launch` takes `&self` and mutates nothing of the kernel.
unsafe impl Sync for Kernel {}

impl fmt::Debug for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.name)
            .field(
                "param_sizes",
                &self.params.iter().map(|p| p.size).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Kernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Byte sizes of the kernel's parameters, in order, as the driver reports them.
    pub fn param_sizes(&self) -> Vec<usize> {
        self.params.iter().map(|p| p.size).collect()
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
        let name = &self.name;
        if stream != self.stream {
            return Err(Error::new(format!(
                "kernel `{name}`: launched on stream {stream:#x}, but only the stage's stream \
                 {:#x} (the one given at create) is accepted",
                self.stream
            )));
        }
        check_args(name, &self.params, args)?;
        if [grid.0, grid.1, grid.2, block.0, block.1, block.2].contains(&0) {
            return Err(Error::new(format!(
                "kernel `{name}`: grid {grid:?} and block {block:?} must have no zero dimension"
            )));
        }
        let mut slots = [ArgSlot([0; 8]); MAX_KERNEL_PARAMS];
        let mut pointers = [std::ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
        for ((slot, pointer), arg) in slots.iter_mut().zip(&mut pointers).zip(args) {
            *slot = arg.bytes();
            *pointer = slot.0.as_mut_ptr().cast();
        }
        // SAFETY: `function` is live (its module is held by `self`); `pointers` has one
        // pointer per kernel parameter (count checked above, at most MAX_KERNEL_PARAMS by
        // construction at load), each to at least as many readable bytes as the driver copies
        // for that parameter (sizes checked above), all alive until the call returns (the
        // driver copies the values when enqueuing). `stream` is the runner's stream handle of
        // this context, or null for the legacy default stream. `extra` is null.
        let result = unsafe {
            sys::cuLaunchKernel(
                self.function,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                shared_bytes,
                stream as sys::CUstream,
                pointers.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        driver::check("cuLaunchKernel", result).map_err(|e| e.context(format!("kernel `{name}`")))
    }
}

/// The entry points of one kernel source file, loaded into the stage's CUDA context.
pub struct Kernels {
    file_name: String,
    arch: String,
    kernels: Vec<Kernel>,
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels")
            .field("file_name", &self.file_name)
            .field("arch", &self.arch)
            .field("kernels", &self.kernels)
            .finish()
    }
}

/// Where a CUBIN came from.
enum Origin {
    Cache(PathBuf),
    Compiled,
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
    pub fn load(
        ctx: &CreateContext<'_>,
        file_name: &str,
        source: &str,
        entry_points: &[&str],
    ) -> Result<Kernels> {
        Kernels::load_inner(ctx, file_name, source, entry_points).map_err(|e| {
            // A compile error already starts with the file's name.
            if e.message().starts_with(&format!("{file_name}: ")) {
                e
            } else {
                e.context(format!("loading kernels {file_name}"))
            }
        })
    }

    fn load_inner(
        ctx: &CreateContext<'_>,
        file_name: &str,
        source: &str,
        entry_points: &[&str],
    ) -> Result<Kernels> {
        if ctx.domain != Domain::Cuda || ctx.cuda_context == 0 {
            return Err(Error::new(format!(
                "stage `{}` runs in the {} domain without a CUDA context",
                ctx.stage,
                ctx.domain.name()
            )));
        }
        driver::ensure_loaded()?;
        let current = driver::current_context()?;
        if current != ctx.cuda_context {
            return Err(Error::new(format!(
                "the stage's CUDA context {:#x} is not current on this thread (current: {current:#x})",
                ctx.cuda_context
            )));
        }
        let (major, minor) = driver::compute_capability()?;
        let arch = format!("sm_{major}{minor}");
        let cache_dir = cache::dir(ctx.kernel_cache_dir);
        let (cubin, origin) = cubin_for(cache_dir.as_deref(), file_name, source, &arch, false)?;
        let module = match (Module::load(&cubin), origin) {
            (Ok(module), _) => module,
            (Err(e), Origin::Cache(path)) => {
                crate::log::warn(&format!(
                    "kernel cache: {} was refused ({e}); compiling again",
                    path.display()
                ));
                cache::remove(&path);
                let (cubin, _) = cubin_for(cache_dir.as_deref(), file_name, source, &arch, true)?;
                Module::load(&cubin)?
            }
            (Err(e), Origin::Compiled) => return Err(e),
        };
        let module = Arc::new(module);
        let kernels = entry_points
            .iter()
            .map(|name| function(&module, name, ctx.cuda_stream))
            .collect::<Result<Vec<_>>>()?;
        Ok(Kernels {
            file_name: file_name.to_owned(),
            arch,
            kernels,
        })
    }

    /// The entry point `name`, one of those given to [`Kernels::load`].
    pub fn get(&self, name: &str) -> Result<&Kernel> {
        self.kernels
            .iter()
            .find(|k| &*k.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.kernels.iter().map(|k| k.name()).collect();
                Error::new(format!(
                    "{}: no kernel `{name}` was loaded (loaded: {})",
                    self.file_name,
                    names.join(", ")
                ))
            })
    }

    /// The architecture the kernels were compiled for, `sm_XY`.
    pub fn arch(&self) -> &str {
        &self.arch
    }
}

/// The CUBIN of `source` for `arch`: from the cache in `dir` if there (unless `fresh`), else
/// compiled with NVRTC and stored there.
fn cubin_for(
    dir: Option<&Path>,
    file_name: &str,
    source: &str,
    arch: &str,
    fresh: bool,
) -> Result<(Vec<u8>, Origin)> {
    let options = nvrtc::options_for(arch);
    let path = match dir {
        Some(dir) => {
            let version = nvrtc::nvrtc_version()?;
            Some(dir.join(cache::file_name(file_name, source, &options, version, arch)))
        }
        None => None,
    };
    if let Some(path) = path.as_deref().filter(|_| !fresh)
        && let Some(cubin) = cache::read(path)
    {
        crate::log::debug(&format!(
            "{file_name}: {arch} CUBIN from the cache {}",
            path.display()
        ));
        return Ok((cubin, Origin::Cache(path.to_path_buf())));
    }
    let started = Instant::now();
    let compiled = nvrtc::compile(file_name, source, arch, &options)?;
    let took = started.elapsed().as_millis();
    if !compiled.log.is_empty() {
        crate::log::warn(&format!(
            "{file_name} ({arch}): NVRTC says:\n{}",
            compiled.log
        ));
    }
    match &path {
        Some(path) => match cache::write(path, &compiled.cubin) {
            Ok(()) => crate::log::info(&format!(
                "{file_name}: compiled for {arch} in {took} ms, cached as {}",
                path.display()
            )),
            Err(e) => crate::log::warn(&format!(
                "{file_name}: compiled for {arch} in {took} ms; cannot cache it as {}: {e}",
                path.display()
            )),
        },
        None => crate::log::info(&format!(
            "{file_name}: compiled for {arch} in {took} ms (no kernel cache folder: set \
             GPUIPC_KERNEL_CACHE, XDG_CACHE_HOME or HOME)"
        )),
    }
    Ok((compiled.cubin, Origin::Compiled))
}

/// Look up entry point `name` of `module` and its parameters.
fn function(module: &Arc<Module>, name: &str, stream: usize) -> Result<Kernel> {
    let c_name = CString::new(name)
        .map_err(|_| Error::new(format!("kernel name {name:?} contains a NUL byte")))?;
    let mut function: sys::CUfunction = std::ptr::null_mut();
    // SAFETY: the module is loaded; `c_name` is NUL-terminated; writes the handle.
    let result = unsafe { sys::cuModuleGetFunction(&mut function, module.handle, c_name.as_ptr()) };
    driver::check("cuModuleGetFunction", result)
        .map_err(|e| e.context(format!("entry point `{name}`")))?;
    let mut params = Vec::new();
    loop {
        if params.len() > MAX_KERNEL_PARAMS {
            return Err(Error::new(format!(
                "kernel `{name}` has more than {MAX_KERNEL_PARAMS} parameters"
            )));
        }
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `function` is live; writes two sizes.
        let result =
            unsafe { sys::cuFuncGetParamInfo(function, params.len(), &mut offset, &mut size) };
        match result {
            CUresult::CUDA_SUCCESS => params.push(ParamInfo { offset, size }),
            // The index is past the last parameter: that is the count.
            CUresult::CUDA_ERROR_INVALID_VALUE => break,
            other => {
                driver::check("cuFuncGetParamInfo", other)
                    .map_err(|e| e.context(format!("kernel `{name}`")))?;
            }
        }
    }
    Ok(Kernel {
        name: name.into(),
        function,
        params: params.into(),
        stream,
        _module: Arc::clone(module),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(sizes: &[usize]) -> Vec<ParamInfo> {
        let mut offset = 0usize;
        sizes
            .iter()
            .map(|&size| {
                offset = offset.next_multiple_of(size);
                let p = ParamInfo { offset, size };
                offset += size;
                p
            })
            .collect()
    }

    #[test]
    fn arguments_are_checked_by_count_and_size() {
        let p = params(&[8, 8, 4, 4]);
        let good = [
            KernelArg::DevicePtr(0x1000),
            KernelArg::U64(64),
            KernelArg::U32(3),
            KernelArg::I32(-1),
        ];
        check_args("k", &p, &good).unwrap();
        let e = check_args("k", &p, &good[..3]).unwrap_err();
        assert_eq!(
            e.message(),
            "kernel `k` takes 4 parameters, the launch passes 3"
        );
        let mut bad = good;
        bad[1] = KernelArg::U32(64);
        let e = check_args("k", &p, &bad).unwrap_err();
        assert_eq!(
            e.message(),
            "kernel `k` parameter 1 is 8 bytes, the launch passes U32(64) (4 bytes)"
        );
        check_args("none", &[], &[]).unwrap();
    }

    #[test]
    fn the_cache_compiles_once_and_replaces_bad_files() {
        if !nvrtc::nvrtc_for_test() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let source = "extern \"C\" __global__ void k(unsigned* p, unsigned v) { *p = v; }\n";
        let (first, origin) =
            cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
        let files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with("k-") && name.ends_with("-sm_80.cubin"),
            "{name}"
        );

        let (again, origin) =
            cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Cache(ref p) if *p == files[0]));
        assert_eq!(first, again);

        // Another architecture or source is another file.
        cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_90", false).unwrap();
        cubin_for(
            Some(dir.path()),
            "kernels/k.cu",
            &format!("{source}\n"),
            "sm_80",
            false,
        )
        .unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);

        // A damaged file is compiled again and replaced.
        std::fs::write(&files[0], b"not a cubin").unwrap();
        let (fixed, origin) =
            cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
        assert_eq!(std::fs::read(&files[0]).unwrap(), fixed);

        // No folder: compiled every time.
        let (_, origin) = cubin_for(None, "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
    }

    /// On a GPU: the driver reports the parameters as declared, mismatched launches are refused
    /// before reaching the driver, and a checked launch and a device table work. Skipped
    /// without a GPU unless GPUIPC_REQUIRE_GPU=1; needs NVRTC.
    #[test]
    fn gpu_launches_are_checked_and_run() {
        use crate::cuda::DeviceTable;
        use crate::cuda::testing::GpuHarness;
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
        assert_eq!(
            kernels.get("nothing").unwrap().param_sizes(),
            Vec::<usize>::new()
        );
        assert!(kernels.get("missing").is_err());
        let e = Kernels::load(&ctx, "kernels/test.cu", source, &["absent"]).unwrap_err();
        assert!(e.message().contains("CUDA_ERROR_NOT_FOUND"), "{e}");

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
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(words, [7, 5, (-3i32) as u32, 1.5f32.to_bits(), 0xff00]);

        let mut wrong = args;
        wrong[1] = KernelArg::U64(7);
        assert!(
            put.launch(stream, one, one, 0, &wrong)
                .unwrap_err()
                .message()
                .contains("parameter 1")
        );
        assert!(put.launch(stream, one, one, 0, &args[..5]).is_err());
        assert!(
            put.launch(stream + 8, one, one, 0, &args)
                .unwrap_err()
                .message()
                .contains("stream")
        );
        assert!(put.launch(stream, (0, 1, 1), one, 0, &args).is_err());
        // The driver's own limits come back as errors too.
        let e = put.launch(stream, one, (4096, 1, 1), 0, &args).unwrap_err();
        assert!(e.message().contains("cuLaunchKernel failed"), "{e}");
    }

    #[test]
    fn argument_bytes_are_native_order_values() {
        assert_eq!(
            KernelArg::U32(0x0102_0304).bytes().0[..4],
            0x0102_0304u32.to_ne_bytes()
        );
        assert_eq!(KernelArg::I32(-2).bytes().0[..4], (-2i32).to_ne_bytes());
        assert_eq!(KernelArg::F32(1.5).bytes().0[..4], 1.5f32.to_ne_bytes());
        assert_eq!(
            KernelArg::DevicePtr(u64::MAX - 1).bytes().0,
            (u64::MAX - 1).to_ne_bytes()
        );
        assert_eq!(std::mem::align_of::<ArgSlot>(), 8);
    }
}
