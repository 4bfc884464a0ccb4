//! A CUBIN loaded into the current context, its entry points with their parameters as the
//! driver reports them, and [`Kernel::launch`], which checks an argument list against them.
#![allow(unsafe_code)]

use std::ffi::{CString, c_void};
use std::fmt;
use std::sync::Arc;

use cudarc::driver::sys::{self, CUresult};

use crate::args::{ArgSlot, KernelArg, MAX_KERNEL_PARAMS, ParamInfo, check_args};
use crate::cache;
use crate::driver::check;
use crate::error::CudaError;
use crate::log;

/// A loaded module; unloaded when the last [`Kernel`] of it goes.
pub(crate) struct Module {
    handle: sys::CUmodule,
}

// SAFETY: a CUmodule is a driver handle valid on any thread whose current context is the one
// it was loaded into; the driver API is thread-safe. The handle is only read after loading.
unsafe impl Send for Module {}
// SAFETY: as above; nothing here is mutated through a shared reference.
unsafe impl Sync for Module {}

impl Module {
    /// Load a CUBIN into the current context. The caller has checked the driver's module
    /// functions (`library::modules`) and which context is current.
    pub(crate) fn load(cubin: &[u8]) -> Result<Module, CudaError> {
        if !cache::looks_like_cubin(cubin) {
            return Err(CudaError::Invalid {
                op: "cuModuleLoadData",
                reason: "the image is not a CUBIN (ELF) file".into(),
            });
        }
        // The driver reads an ELF image through aligned loads: hand it 8-byte aligned memory.
        let image: Vec<u64> = cubin
            .chunks(8)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                u64::from_ne_bytes(word)
            })
            .collect();
        let mut handle: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: `image` holds an ELF file (checked magic), native byte order kept, which the
        // driver parses, validates and copies before returning; writes the module handle.
        let result = unsafe { sys::cuModuleLoadData(&mut handle, image.as_ptr().cast::<c_void>()) };
        check("cuModuleLoadData", None, result)?;
        Ok(Module { handle })
    }

    /// Entry point `name` of the module and its parameters, to be launched on `stream` only.
    pub(crate) fn function(self: &Arc<Module>, name: &str, stream: usize) -> Result<Kernel, CudaError> {
        let in_kernel = |e: CudaError| CudaError::Kernel { kernel: name.to_owned(), source: Box::new(e) };
        let c_name = CString::new(name).map_err(|_| {
            in_kernel(CudaError::Invalid { op: "cuModuleGetFunction", reason: "the name contains a NUL byte".into() })
        })?;
        let mut function: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded; `c_name` is NUL-terminated; writes the handle.
        let result = unsafe { sys::cuModuleGetFunction(&mut function, self.handle, c_name.as_ptr()) };
        check("cuModuleGetFunction", None, result).map_err(in_kernel)?;
        let mut params = Vec::new();
        loop {
            if params.len() > MAX_KERNEL_PARAMS {
                return Err(CudaError::BadLaunch {
                    kernel: name.to_owned(),
                    reason: format!("has more than {MAX_KERNEL_PARAMS} parameters"),
                });
            }
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: `function` is live; writes two sizes.
            let result = unsafe { sys::cuFuncGetParamInfo(function, params.len(), &mut offset, &mut size) };
            match result {
                CUresult::CUDA_SUCCESS => params.push(ParamInfo { offset, size }),
                // The index is past the last parameter: that is the count.
                CUresult::CUDA_ERROR_INVALID_VALUE => break,
                other => check("cuFuncGetParamInfo", None, other).map_err(in_kernel)?,
            }
        }
        Ok(Kernel { name: name.into(), function, params: params.into(), stream, _module: Arc::clone(self) })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: the handle came from cuModuleLoadData and is unloaded once, here. Unloading
        // needs the module's context current, as everything in a plugin does (the runner
        // destroys the plugin on the thread that created it, before its context).
        let result = unsafe { sys::cuModuleUnload(self.handle) };
        if let Err(e) = check("cuModuleUnload", None, result) {
            log::release_failed(None, &e);
        }
    }
}

/// One entry point of a loaded kernel file, ready to launch on the stream it was loaded for
/// (a stage's).
///
/// # What [`Kernel::launch`] checks, and what it cannot
///
/// Checked, so that a launch cannot make the driver read host memory it should not:
/// - the number of arguments and the byte size of each, against the kernel's parameters as
///   the driver reports them (`cuFuncGetParamInfo`, read once at load);
/// - the stream: only the one given at load ([`RawStream::stream`](crate::RawStream); for a
///   plugin the stage's, `CreateContext::cuda_stream`, the same as
///   `ProcessContext::cuda_stream`) is accepted, since the driver would dereference any other
///   value as a stream handle;
/// - grid and block dimensions are non-zero; the driver checks their limits and the shared
///   memory size and returns an error.
///
/// Not checked:
/// - the meaning of the arguments: a `u32` passed where the kernel takes an `int` or a
///   `float` (same size) goes through;
/// - device addresses. A kernel given a wrong address writes wherever that address leads in
///   the GPU's view: a fault (`CUDA_ERROR_ILLEGAL_ADDRESS`, which ends this process's
///   context, and under MPS every process's on the GPU), other device memory of this process
///   (another frame slot), or host memory the device can reach (pinned or registered memory,
///   and any host memory on systems with HMM/ATS). Passing addresses of the frames being
///   processed (plugin-api's `cuda::device_plane` checks that a plane lies inside its frame)
///   and of memory this process allocated is the caller's part.
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
        f.debug_struct("Kernel").field("name", &self.name).field("param_sizes", &self.param_sizes()).finish()
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

    /// Enqueue the kernel on `stream` (the one given at load) with `args`; returns once it is
    /// enqueued, without waiting for the GPU. See the type's docs for what is checked.
    pub fn launch(
        &self,
        stream: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        args: &[KernelArg],
    ) -> Result<(), CudaError> {
        let refuse = |reason: String| CudaError::BadLaunch { kernel: self.name.to_string(), reason };
        if stream != self.stream {
            return Err(refuse(format!(
                "launched on stream {stream:#x}, but only the stage's stream {:#x} (the one given at load) is accepted",
                self.stream
            )));
        }
        check_args(&self.params, args).map_err(refuse)?;
        if [grid.0, grid.1, grid.2, block.0, block.1, block.2].contains(&0) {
            return Err(refuse(format!("grid {grid:?} and block {block:?} must have no zero dimension")));
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
        // driver copies the values when enqueuing). `stream` is the stream handle given at
        // load, of the context the module was loaded into. `extra` is null.
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
        check("cuLaunchKernel", None, result)
            .map_err(|e| CudaError::Kernel { kernel: self.name.to_string(), source: Box::new(e) })
    }
}
