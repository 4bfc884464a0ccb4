//! `run --checksums DIR`: every stage writes `seq hash` of each output frame (a sink: `seq -`)
//! to `DIR/<stage>.sum`, so two runs (multi-process and in-process, cpu and cuda) can be
//! compared stage by stage.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct Tap {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Tap {
    pub fn create(dir: &Path, stage: &str) -> Result<Tap, String> {
        let path = dir.join(format!("{stage}.sum"));
        let file = File::create(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Tap { path, out: BufWriter::new(file) })
    }

    pub fn record(&mut self, seq: u64, hash: Option<u64>) -> Result<(), String> {
        let written = match hash {
            Some(h) => writeln!(self.out, "{seq} {h:016x}"),
            None => writeln!(self.out, "{seq} -"),
        };
        written.map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }

    pub fn finish(&mut self) -> Result<(), String> {
        self.out.flush().map_err(|e| format!("cannot write {}: {e}", self.path.display()))
    }
}
