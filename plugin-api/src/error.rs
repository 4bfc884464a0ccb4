//! The error type plugins return; it crosses the ABI as text.

use std::fmt;

/// A plugin's error: a message for the person running the pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(message: impl fmt::Display) -> Error {
        Error(message.to_string())
    }

    pub fn message(&self) -> &str {
        &self.0
    }

    /// Prefix the message with what was being done.
    pub fn context(self, what: impl fmt::Display) -> Error {
        Error(format!("{what}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(s: String) -> Error {
        Error(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Error {
        Error(s.to_owned())
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error(e.to_string())
    }
}

/// The CUDA crate's error as text, which keeps the driver's code and name (`cuLaunchKernel:
/// CUDA_ERROR_ILLEGAL_ADDRESS (700): ...`) or NVRTC's status and compile log.
impl From<gpuipc_cuda::CudaError> for Error {
    fn from(e: gpuipc_cuda::CudaError) -> Error {
        Error(e.to_string())
    }
}

/// Return early with an [`Error`] built from a format string.
#[macro_export]
macro_rules! bail {
    ($($arg:tt)*) => {
        return ::core::result::Result::Err($crate::Error::new(::std::format!($($arg)*)))
    };
}
