//! `run --checksums DIR`: every stage writes `seq hash` of each output frame (a sink: `seq -`)
//! to `DIR/<stage>.sum`, so two runs (multi-process and in-process, cpu and cuda) can be
//! compared stage by stage.
//!
//! Each line is one `write` to a file opened for appending, before the frame counts as done:
//! a stage killed at any instruction leaves whole lines, and a restarted stage appends after
//! them. The host reads the last line to tell a frame a dead sink finished from one it lost
//! ([`last_recorded`]).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct Tap {
    path: PathBuf,
    out: File,
}

pub fn tap_path(dir: &Path, stage: &str) -> PathBuf {
    dir.join(format!("{stage}.sum"))
}

impl Tap {
    /// The tap of `stage`: a new file, or (a restarted stage) the file its earlier processes
    /// wrote, continued.
    pub fn create(dir: &Path, stage: &str, continued: bool) -> Result<Tap, String> {
        let path = tap_path(dir, stage);
        let opened = if continued {
            OpenOptions::new().append(true).create(true).open(&path)
        } else {
            OpenOptions::new().write(true).create(true).truncate(true).open(&path)
        };
        let out = opened.map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Tap { path, out })
    }

    pub fn record(&mut self, seq: u64, hash: Option<u64>) -> Result<(), String> {
        let line = match hash {
            Some(h) => format!("{seq} {h:016x}\n"),
            None => format!("{seq} -\n"),
        };
        (&self.out).write_all(line.as_bytes()).map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    pub fn finish(&mut self) -> Result<(), String> {
        self.out.flush().map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}

/// The sequence number on the last whole line of `stage`'s tap, if any.
pub fn last_recorded(dir: &Path, stage: &str) -> Option<u64> {
    let text = std::fs::read_to_string(tap_path(dir, stage)).ok()?;
    let last = text.strip_suffix('\n')?.rsplit('\n').next()?;
    last.split(' ').next()?.parse().ok()
}
