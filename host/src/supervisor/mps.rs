//! A private MPS control daemon for one run (`isolation = "mps"`): with MPS, stages on one GPU
//! share it without time-slicing, as fast as one process (25,051 against 6,020 frames/s for
//! three 4K stages on an H100, DESIGN.md). Its pipe and log folders are private to the run, so
//! it neither meets nor disturbs any other MPS daemon, and it is stopped at the end however the
//! run ends.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const CONTROL: &str = "nvidia-cuda-mps-control";

/// Whether the MPS control program is on the PATH.
pub fn available() -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(CONTROL).is_file()))
}

pub struct MpsDaemon {
    dir: PathBuf,
}

impl MpsDaemon {
    pub fn start() -> Result<MpsDaemon, String> {
        // A fresh private folder: a predictable name could be a folder or symlink someone else
        // made first, and the pipe in it is the daemon's control.
        let dir = super::private_dir::create("gpuipc-mps").map_err(|e| format!("cannot create the MPS folder: {e}"))?;
        for sub in ["pipe", "log"] {
            std::fs::create_dir(dir.join(sub)).map_err(|e| format!("cannot create {}: {e}", dir.join(sub).display()))?;
        }
        let daemon = MpsDaemon { dir };
        let status = Command::new(CONTROL)
            .arg("-d")
            .envs(daemon.env())
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("cannot start {CONTROL}: {e}"))?;
        if !status.success() {
            return Err(format!("{CONTROL} -d failed ({status}); see {}", daemon.dir.join("log").display()));
        }
        tracing::info!("isolation mps: private MPS daemon, pipe {}", daemon.dir.join("pipe").display());
        Ok(daemon)
    }

    /// What every stage process needs in its environment to use this daemon.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("CUDA_MPS_PIPE_DIRECTORY".into(), self.dir.join("pipe").display().to_string()),
            ("CUDA_MPS_LOG_DIRECTORY".into(), self.dir.join("log").display().to_string()),
        ]
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        let quit = Command::new(CONTROL).envs(self.env()).stdin(Stdio::piped()).stdout(Stdio::null()).spawn();
        match quit {
            Ok(mut child) => {
                if let Some(stdin) = child.stdin.as_mut() {
                    let _ = stdin.write_all(b"quit\n");
                }
                drop(child.stdin.take());
                if let Err(e) = child.wait() {
                    tracing::warn!("stopping the MPS daemon: {e}");
                }
            }
            Err(e) => tracing::warn!("cannot stop the MPS daemon: {e}"),
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
