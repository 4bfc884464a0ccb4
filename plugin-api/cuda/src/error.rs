//! [`CudaError`], the one error type of this crate: every driver and NVRTC failure keeps the
//! library's code and name, and says what was being done.

use crate::library::Library;

/// Everything that can go wrong talking to the CUDA driver or NVRTC.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// The driver library cannot be loaded (see [`crate::driver_available`]), or
    /// `GPUIPC_NO_CUDA` is set: nothing CUDA can run here.
    #[error("{}", if *.disabled { "CUDA disabled by GPUIPC_NO_CUDA" } else { NO_DRIVER })]
    NoDriver { disabled: bool },
    /// NVRTC cannot be loaded (see [`crate::nvrtc_available`]).
    #[error("{NO_NVRTC}")]
    NoNvrtc,
    /// NCCL cannot be loaded (see [`crate::nccl_available`]).
    #[error("{NO_NCCL}")]
    NoNccl,
    /// NVTX cannot be loaded (`GPUIPC_NVTX=1`; see [`crate::Nvtx`]).
    #[error("{NO_NVTX}")]
    NoNvtx,
    /// An NCCL call failed, or a communicator reported an error: `code` is the
    /// `ncclResult_t`, `name` its name (`ncclRemoteError`), `description` NCCL's text for it
    /// and `last` NCCL's last error message (empty when it has none).
    #[error("{op}: {name} ({code}): {description}{}", if last.is_empty() { String::new() } else { format!(" ({last})") })]
    Nccl { op: &'static str, code: i32, name: &'static str, description: String, last: String },
    /// A wait on NCCL or on the GPU given up: past its deadline, or its caller's abort check
    /// said so (the peer is gone). The communicator is no longer usable.
    #[error("{op}: {reason}")]
    Interrupted { op: &'static str, reason: String },
    /// The library found lacks a function gpuipc calls: it is too old.
    #[error("{library} ({file}) lacks {symbol}; gpuipc needs {needs}")]
    MissingSymbol { library: Library, file: String, symbol: &'static str, needs: &'static str },
    /// A driver call failed; `code` is the `CUresult`, `name` its symbolic name
    /// (`CUDA_ERROR_ILLEGAL_ADDRESS`), `description` the driver's text.
    #[error("{op}{}: {name} ({code}): {description}", on_device(*.device))]
    Driver { op: &'static str, device: Option<u32>, code: u32, name: String, description: String },
    /// An NVRTC call other than the compile itself failed; `code` is the `nvrtcResult`.
    #[error("{op}: {name} ({code})")]
    Nvrtc { op: &'static str, code: i32, name: String },
    /// Compiling a kernel source failed. `code` is NVRTC's status where NVRTC returned one;
    /// `log` is NVRTC's whole compile log (empty if it wrote none).
    #[error("{file}: NVRTC compile for {arch} failed: {reason}{}", log_section(log))]
    Compile { file: String, arch: String, code: Option<i32>, reason: String, log: String },
    #[error("cuda:{ordinal} does not exist (the driver sees {count} device(s))")]
    NoSuchDevice { ordinal: u32, count: u32 },
    /// The context handed to a plugin is not the one current on the calling thread.
    #[error("the stage's CUDA context {expected:#x} is not current on this thread (current: {current:#x})")]
    NotCurrent { expected: usize, current: usize },
    /// A plugin's call in a stage that has no CUDA context: one in the cpu domain.
    #[error("stage `{stage}` runs in the {domain} domain without a CUDA context")]
    NoContext { stage: String, domain: &'static str },
    /// What was being done when `source` happened (allocating a scratch buffer, uploading a
    /// table).
    #[error("{what}: {source}")]
    Context { what: String, source: Box<CudaError> },
    /// Loading a kernel file failed (a compile error names the file itself and is not wrapped).
    #[error("loading kernels {file}: {source}")]
    Load { file: String, source: Box<CudaError> },
    /// An entry point that was not among those loaded.
    #[error("{file}: no kernel `{name}` was loaded (loaded: {loaded})")]
    NoSuchKernel { file: String, name: String, loaded: String },
    /// A launch refused before it reached the driver (arguments, stream, dimensions).
    #[error("kernel `{kernel}`: {reason}")]
    BadLaunch { kernel: String, reason: String },
    /// A driver call about one kernel failed (lookup, parameters, launch).
    #[error("kernel `{kernel}`: {source}")]
    Kernel { kernel: String, source: Box<CudaError> },
    /// A call refused before it reaches the driver (sizes, ranges, streams).
    #[error("{op}: {reason}")]
    Invalid { op: &'static str, reason: String },
    /// An operating-system call around a driver call (e.g. on an exported descriptor).
    #[error("{op}: {reason}")]
    Os { op: &'static str, reason: String },
}

impl CudaError {
    /// Whether this is a fatal GPU fault: a kernel's illegal access, instruction or assertion,
    /// an uncorrectable ECC error, or an MPS client ended by another's fault. The context is
    /// unusable afterwards (every later call of the process fails the same way) and, under MPS,
    /// so is every client's on that GPU.
    pub fn is_fatal_fault(&self) -> bool {
        const FATAL: [u32; 11] = [
            214, // CUDA_ERROR_ECC_UNCORRECTABLE
            700, // CUDA_ERROR_ILLEGAL_ADDRESS
            702, // CUDA_ERROR_LAUNCH_TIMEOUT
            710, // CUDA_ERROR_ASSERT
            714, // CUDA_ERROR_HARDWARE_STACK_ERROR
            715, // CUDA_ERROR_ILLEGAL_INSTRUCTION
            716, // CUDA_ERROR_MISALIGNED_ADDRESS
            717, // CUDA_ERROR_INVALID_ADDRESS_SPACE
            718, // CUDA_ERROR_INVALID_PC
            719, // CUDA_ERROR_LAUNCH_FAILED
            809, // CUDA_ERROR_MPS_CLIENT_TERMINATED
        ];
        self.driver_code().is_some_and(|code| FATAL.contains(&code))
    }
}

const NO_DRIVER: &str =
    "no CUDA driver found (libcuda.so.1 could not be loaded, nor libcuda.so or cudarc's other names for it)";

const NO_NVRTC: &str = "NVRTC cannot be loaded (the dynamic loader finds neither libnvrtc.so.13 nor libnvrtc.so \
     nor cudarc's other names for it; put the directory holding libnvrtc.so.13 and \
     libnvrtc-builtins.so.13.0, e.g. site-packages/nvidia/cu13/lib of the PyPI package \
     nvidia-cuda-nvrtc, on LD_LIBRARY_PATH)";

const NO_NCCL: &str = "NCCL cannot be loaded (the dynamic loader finds neither libnccl.so.2 nor libnccl.so \
     nor cudarc's other names for it; put the directory holding libnccl.so.2, e.g. \
     site-packages/nvidia/nccl/lib of the PyPI package nvidia-nccl-cu13, on LD_LIBRARY_PATH)";

const NO_NVTX: &str = "NVTX cannot be loaded (the dynamic loader finds none of libnvToolsExt.so.1, \
     libnvToolsExt.so, libnvtx3interop.so.1, libnvtx3interop.so with nvtxRangePushA, nvtxRangePop and \
     nvtxNameOsThreadA; CUDA toolkits up to 12 ship the first, CUDA 13 the third, the PyPI package \
     nvidia-nvtx-cu12 the third (12.9) in site-packages/nvidia/nvtx/lib: put its directory on LD_LIBRARY_PATH)";

fn on_device(device: Option<u32>) -> String {
    device.map(|d| format!(" on cuda:{d}")).unwrap_or_default()
}

fn log_section(log: &str) -> String {
    if log.is_empty() { String::new() } else { format!("\n---- NVRTC log ----\n{log}\n----") }
}

impl CudaError {
    /// This error, said to have happened while `what` was being done.
    pub(crate) fn during(self, what: impl Into<String>) -> CudaError {
        CudaError::Context { what: what.into(), source: Box::new(self) }
    }

    /// The `CUresult` of the driver call that failed, looking through the context variants;
    /// `None` for errors that are not a driver call's.
    pub fn driver_code(&self) -> Option<u32> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            CudaError::Load { source, .. } | CudaError::Kernel { source, .. } | CudaError::Context { source, .. } => {
                source.driver_code()
            }
            _ => None,
        }
    }

    /// The device a failed driver call was about, where it names one.
    pub fn device(&self) -> Option<u32> {
        match self {
            CudaError::Driver { device, .. } => *device,
            CudaError::Load { source, .. } | CudaError::Kernel { source, .. } => source.device(),
            _ => None,
        }
    }

    /// Whether this says there is no usable device here at all: no driver, no device the
    /// driver sees (`CUDA_ERROR_NO_DEVICE`, 100), or no such ordinal.
    pub fn no_device(&self) -> bool {
        const CUDA_ERROR_INVALID_DEVICE: u32 = 101;
        const CUDA_ERROR_NO_DEVICE: u32 = 100;
        matches!(self, CudaError::NoDriver { .. } | CudaError::NoSuchDevice { .. })
            || matches!(self.driver_code(), Some(CUDA_ERROR_NO_DEVICE | CUDA_ERROR_INVALID_DEVICE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_operation_device_and_code() {
        let e = CudaError::Driver {
            op: "cuMemCreate",
            device: Some(1),
            code: 2,
            name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
            description: "out of memory".into(),
        };
        assert_eq!(e.to_string(), "cuMemCreate on cuda:1: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
        let e = CudaError::Driver {
            op: "cuInit",
            device: None,
            code: 100,
            name: "CUDA_ERROR_NO_DEVICE".into(),
            description: "no CUDA-capable device is detected".into(),
        };
        assert_eq!(e.to_string(), "cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected");
        assert!(e.no_device());
    }

    #[test]
    fn context_keeps_the_code_and_name() {
        let launch = CudaError::Driver {
            op: "cuLaunchKernel",
            device: None,
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            description: "an illegal memory access was encountered".into(),
        };
        let e = CudaError::Kernel { kernel: "put".into(), source: Box::new(launch) };
        let e = CudaError::Load { file: "kernels/k.cu".into(), source: Box::new(e) };
        assert_eq!(e.driver_code(), Some(700));
        assert!(e.is_fatal_fault(), "a kernel's illegal address, however wrapped");
        assert!(
            !CudaError::Driver {
                op: "cuMemCreate",
                device: None,
                code: 2,
                name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                description: String::new()
            }
            .is_fatal_fault()
        );
        assert_eq!(
            e.to_string(),
            "loading kernels kernels/k.cu: kernel `put`: cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (700): an illegal \
             memory access was encountered"
        );
        assert!(!e.no_device());
    }

    #[test]
    fn compile_errors_carry_the_log() {
        let e = CudaError::Compile {
            file: "kernels/broken.cu".into(),
            arch: "sm_90".into(),
            code: Some(6),
            reason: "NVRTC_ERROR_COMPILATION (6)".into(),
            log: "kernels/broken.cu(2): error: identifier \"x\" is undefined".into(),
        };
        assert_eq!(
            e.to_string(),
            "kernels/broken.cu: NVRTC compile for sm_90 failed: NVRTC_ERROR_COMPILATION (6)\n---- NVRTC log \
             ----\nkernels/broken.cu(2): error: identifier \"x\" is undefined\n----"
        );
        let e = CudaError::Compile {
            file: "k.cu".into(),
            arch: "sm_90".into(),
            code: Some(6),
            reason: "NVRTC_ERROR_COMPILATION (6)".into(),
            log: String::new(),
        };
        assert_eq!(e.to_string(), "k.cu: NVRTC compile for sm_90 failed: NVRTC_ERROR_COMPILATION (6)");
    }

    #[test]
    fn a_missing_library_says_what_to_do() {
        assert!(CudaError::NoDriver { disabled: false }.to_string().contains("libcuda.so.1"));
        assert_eq!(CudaError::NoDriver { disabled: true }.to_string(), "CUDA disabled by GPUIPC_NO_CUDA");
        assert!(CudaError::NoNvrtc.to_string().contains("LD_LIBRARY_PATH"));
        assert!(CudaError::NoDriver { disabled: false }.no_device());
    }
}
