//! The error type plugins return; it crosses the ABI as text.
//!
//! `?` converts into it from text (`String`, `&str`), from `std::io::Error` and the standard
//! parse and conversion errors, from any boxed error (`Box<dyn std::error::Error + Send +
//! Sync>`, what most libraries' errors convert into), from `anyhow::Error` (with the `anyhow`
//! feature, on by default) and from the CUDA errors of [`crate::cuda`]. An error's causes
//! (`source()`) are kept in the text, `outer: inner: innermost`, as anyhow's `{:#}` writes them.

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

/// `e` and its causes, `outer: inner: innermost`.
fn with_sources(e: &(dyn std::error::Error + 'static)) -> Error {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        // Some errors repeat their cause in their own text; do not say it twice.
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    Error(text)
}

macro_rules! from_std_errors {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                with_sources(&e)
            }
        }
    )*};
}

from_std_errors!(
    std::io::Error,
    std::fmt::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::num::TryFromIntError,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
);

impl From<Box<dyn std::error::Error + Send + Sync>> for Error {
    fn from(e: Box<dyn std::error::Error + Send + Sync>) -> Error {
        with_sources(e.as_ref())
    }
}

impl From<Box<dyn std::error::Error>> for Error {
    fn from(e: Box<dyn std::error::Error>) -> Error {
        with_sources(e.as_ref())
    }
}

/// anyhow's error with its context chain, as `{:#}` writes it: `reading x: file not found`.
#[cfg(feature = "anyhow")]
impl From<anyhow::Error> for Error {
    fn from(e: anyhow::Error) -> Error {
        Error(format!("{e:#}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("opening the table")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn not_found() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    #[test]
    fn question_marks_convert_and_keep_the_causes() {
        fn parse(text: &str) -> Result<u8> {
            Ok(text.parse::<u8>()?)
        }
        assert_eq!(parse("300").unwrap_err().message(), "number too large to fit in target type");
        fn boxed() -> Result<()> {
            let e: Box<dyn std::error::Error + Send + Sync> = Box::new(Outer(not_found()));
            Err(e)?
        }
        assert_eq!(boxed().unwrap_err().message(), "opening the table: no such file");
        fn io() -> Result<()> {
            Err(not_found())?
        }
        assert_eq!(io().unwrap_err().message(), "no such file");
        let from_utf8 = String::from_utf8(vec![0xff]).map_err(Error::from).unwrap_err();
        assert!(from_utf8.message().contains("invalid utf-8"), "{from_utf8}");
    }

    #[cfg(feature = "anyhow")]
    #[test]
    fn anyhow_errors_keep_their_context() {
        use anyhow::Context;
        fn read() -> Result<()> {
            Err(not_found()).context("reading lut.bin")?;
            Ok(())
        }
        assert_eq!(read().unwrap_err().message(), "reading lut.bin: no such file");
    }
}
