//! How a stage fails: [`StageError`], and what of it the host is told in types
//! ([`GpuFailure`]) rather than in words.

use crate::control::GpuFailure;
use crate::gpu::GpuError;
use crate::link::LinkError;
use crate::plugin::PluginCallError;

#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error("setup failed: {0}")]
    Setup(String),
    /// The plugin's `during` call (create, process, flush) returned an error or panicked;
    /// `frame`: the sequence number it was processing.
    #[error("got an error from the plugin's `{during}`{}: {error}", at_frame(*.frame))]
    Plugin { during: &'static str, frame: Option<u64>, error: PluginCallError },
    /// A source relayed a frame (`OutputFrame::relay`) under a number it had passed already.
    #[error(
        "relayed frame {relayed}, but the next frame must be {expected} or later: a source's frame numbers only go up"
    )]
    RelayedBackwards { relayed: u64, expected: u64 },
    #[error("link failed: {0}")]
    Link(LinkError),
    /// A CUDA call of the stage failed.
    #[error("CUDA: {0}")]
    Gpu(GpuError),
    /// The stage failed (`error`, as it said) while its GPU context had faulted (`fault`, the
    /// context's sticky error): a plugin's own CUDA call reports a fault as its text only.
    #[error("{error}")]
    Faulted { fault: GpuError, error: Box<StageError> },
    #[error("aborted")]
    Aborted,
}

fn at_frame(frame: Option<u64>) -> String {
    frame.map_or_else(String::new, |seq| format!(" at frame {seq}"))
}

impl From<GpuError> for StageError {
    fn from(e: GpuError) -> StageError {
        StageError::Gpu(e)
    }
}

impl StageError {
    /// The CUDA driver's error this failure comes from, if it does: the host restarts a stage
    /// that failed so with the stages it shares GPU memory and events with (`supervisor::restart`).
    pub fn gpu_error(&self) -> Option<&GpuError> {
        match self {
            StageError::Gpu(e) => e.driver_code().is_some().then_some(e),
            StageError::Faulted { fault, .. } => Some(fault),
            _ => None,
        }
    }

    /// What the host is told of a CUDA failure, typed (the message's text is for people).
    pub fn gpu_failure(&self) -> Option<GpuFailure> {
        let e = self.gpu_error()?;
        Some(GpuFailure { device: e.device(), code: e.driver_code()?, fatal: e.is_fatal_fault() })
    }
}

impl From<crate::link::HandshakeError> for StageError {
    fn from(e: crate::link::HandshakeError) -> StageError {
        use crate::link::HandshakeError;
        match e {
            HandshakeError::Gpu(e) => e.into(),
            HandshakeError::Protocol(what) => StageError::Setup(what),
        }
    }
}

impl From<LinkError> for StageError {
    fn from(e: LinkError) -> StageError {
        match e {
            LinkError::Aborted => StageError::Aborted,
            other => StageError::Link(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::FromStage;

    fn driver(code: u32, name: &str) -> GpuError {
        GpuError::Driver { op: "cuEventRecord", device: Some(1), code, name: name.into(), description: "...".into() }
    }

    #[test]
    fn a_cuda_failure_reaches_the_host_typed_whatever_its_words() {
        let fault = StageError::Gpu(driver(700, "CUDA_ERROR_ILLEGAL_ADDRESS"));
        assert_eq!(fault.gpu_failure(), Some(GpuFailure { device: Some(1), code: 700, fatal: true }));
        let oom = StageError::Gpu(driver(2, "CUDA_ERROR_OUT_OF_MEMORY"));
        assert_eq!(oom.gpu_failure(), Some(GpuFailure { device: Some(1), code: 2, fatal: false }));
        // A plugin's words naming a CUDA error are not a CUDA failure of the stage's own...
        let said = StageError::Setup("CUDA_ERROR_ILLEGAL_ADDRESS in my kernel".into());
        assert_eq!(said.gpu_failure(), None);
        // ...unless its context faulted: then the failure is that fault, in the plugin's words.
        let faulted = StageError::Faulted { fault: driver(700, "CUDA_ERROR_ILLEGAL_ADDRESS"), error: Box::new(said) };
        assert_eq!(faulted.to_string(), "setup failed: CUDA_ERROR_ILLEGAL_ADDRESS in my kernel");
        assert_eq!(faulted.gpu_failure().map(|g| g.fatal), Some(true));
        // A CUDA error that is not the driver's (a refused call) is not one either.
        let refused = StageError::Gpu(GpuError::Invalid { op: "upload", reason: "too long".into() });
        assert_eq!(refused.gpu_failure(), None);
    }

    #[test]
    fn the_failure_message_carries_the_type_and_reads_without_it() {
        let sent = FromStage::Failed {
            error: "CUDA: ...".into(),
            gpu: Some(GpuFailure { device: None, code: 719, fatal: true }),
        };
        let text = serde_json::to_string(&sent).unwrap();
        let got = serde_json::from_str::<FromStage>(&text).unwrap();
        assert!(
            matches!(got, FromStage::Failed { gpu: Some(GpuFailure { code: 719, fatal: true, device: None }), .. }),
            "{got:?}"
        );
        // A message without the field (a failure that was not CUDA's) reads as none.
        let plain: FromStage = serde_json::from_str(r#"{"Failed":{"error":"boom"}}"#).unwrap();
        assert!(matches!(plain, FromStage::Failed { ref error, gpu: None } if error == "boom"), "{plain:?}");
    }
}
