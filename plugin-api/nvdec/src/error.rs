//! [`NvdecError`], the one error type of this crate: a library that cannot be loaded, a call
//! that failed (keeping the `CUresult`'s code and name, as [`CudaError`] does), a stream this
//! GPU cannot decode, a format change, or the consumer's own error.

use gpuipc_cuda::CudaError;

use crate::format::{Codec, VideoFormat};

/// Everything that can go wrong decoding with NVDEC.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NvdecError {
    /// `libnvcuvid` cannot be opened (no NVIDIA driver, or a container without the driver's
    /// video capability). `reason` is the dynamic loader's message for the first name tried.
    #[error("NVDEC is not available: cannot load {file} (the NVIDIA driver's video decoder library): {reason}")]
    NoLibrary { file: &'static str, reason: String },
    /// The library opened lacks a function this crate calls.
    #[error("NVDEC is not available: {library} lacks {symbol}; gpuipc-nvdec needs {needs}")]
    MissingSymbol { library: String, symbol: &'static str, needs: &'static str },
    /// The CUDA driver, which NVDEC works through, is missing or disabled.
    #[error("NVDEC is not available: {0}")]
    NoDriver(CudaError),
    /// A call into NVDEC or the CUDA driver failed: a [`CudaError::Driver`] (operation, code,
    /// name, text) or [`CudaError::NotCurrent`].
    #[error(transparent)]
    Cuda(#[from] CudaError),
    /// This GPU's NVDEC cannot decode the stream (its caps say so), or this crate cannot output
    /// it (only 4:2:0, 8 to 16 bits). `format` says what the stream is.
    #[error("NVDEC on this GPU cannot decode {format}: {reason}")]
    Unsupported { format: VideoFormat, reason: String },
    /// A later sequence header changed the size, bit depth or chroma format: the consumer's
    /// ring has the first one's format, so a decoder keeps it.
    #[error("the stream's format changed from {from} to {to}; a decoder keeps its first sequence header's format")]
    FormatChanged { from: VideoFormat, to: VideoFormat },
    /// The stream is not the codec the decoder was made for.
    #[error("the decoder was made for {expected} but the stream's sequence header says codec {found} (cudaVideoCodec)")]
    WrongCodec { expected: Codec, found: i32 },
    /// A call refused before it reached the library (sizes, pitches, addresses, order).
    #[error("{op}: {reason}")]
    Invalid { op: &'static str, reason: String },
    /// An error of the consumer's, returned from its `on_frame` (its own wording).
    #[error("{0}")]
    Frame(String),
    /// An earlier call failed inside the parser's callbacks; the parser may have dropped data
    /// since, so this decoder decodes nothing more. Make a new one to go on.
    #[error("the decoder stopped at an earlier error: {0}")]
    Stopped(Box<NvdecError>),
}

impl NvdecError {
    /// The `CUresult` of the call that failed, where one did.
    pub fn driver_code(&self) -> Option<u32> {
        match self {
            NvdecError::Cuda(e) | NvdecError::NoDriver(e) => e.driver_code(),
            NvdecError::Stopped(e) => e.driver_code(),
            _ => None,
        }
    }

    /// Whether this says NVDEC cannot be used here at all (no library, no function, no
    /// driver), as opposed to a stream or call that failed.
    pub fn unavailable(&self) -> bool {
        matches!(self, NvdecError::NoLibrary { .. } | NvdecError::MissingSymbol { .. } | NvdecError::NoDriver(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(width: u32, height: u32, bit_depth: u32) -> VideoFormat {
        VideoFormat {
            codec: Codec::H264,
            coded_width: width.next_multiple_of(16),
            coded_height: height.next_multiple_of(16),
            width,
            height,
            bit_depth,
            chroma_format: 1,
        }
    }

    #[test]
    fn errors_say_what_and_keep_the_driver_code() {
        let e = NvdecError::NoLibrary {
            file: "libnvcuvid.so.1",
            reason: "libnvcuvid.so.1: cannot open shared object file".into(),
        };
        assert_eq!(
            e.to_string(),
            "NVDEC is not available: cannot load libnvcuvid.so.1 (the NVIDIA driver's video decoder library): \
             libnvcuvid.so.1: cannot open shared object file"
        );
        assert!(e.unavailable());
        let e = NvdecError::Cuda(CudaError::Driver {
            op: "cuvidCreateDecoder",
            device: None,
            code: 1,
            name: "CUDA_ERROR_INVALID_VALUE".into(),
            description: "invalid argument".into(),
        });
        assert_eq!(e.to_string(), "cuvidCreateDecoder: CUDA_ERROR_INVALID_VALUE (1): invalid argument");
        assert_eq!(e.driver_code(), Some(1));
        assert!(!e.unavailable());
        let stopped = NvdecError::Stopped(Box::new(e));
        assert_eq!(stopped.driver_code(), Some(1));
        assert!(stopped.to_string().starts_with("the decoder stopped at an earlier error: cuvidCreateDecoder: "));
    }

    #[test]
    fn a_format_change_names_both_formats() {
        let e = NvdecError::FormatChanged { from: format(1920, 1080, 8), to: format(1280, 720, 10) };
        assert_eq!(
            e.to_string(),
            "the stream's format changed from H.264 4:2:0 8-bit 1920x1080 (coded 1920x1088) to H.264 4:2:0 \
             10-bit 1280x720 (coded 1280x720); a decoder keeps its first sequence header's format"
        );
    }
}
