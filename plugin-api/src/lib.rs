//! What a gpuipc plugin author depends on.
//!
//! Implement [`Plugin`] for a type holding the stage's state, then call
//! [`export_plugin!`] once in the crate's `lib.rs`. The macro writes the `extern "C"` entry
//! point and shims; panics are caught there and reported as errors of the stage (when they
//! unwind: a plugin built with `panic = "abort"` ends the process instead, see
//! [`log`]). The guide, with a template to copy, is `docs/writing-plugins.md` in the
//! repository.
//!
//! ```
//! use gpuipc_plugin_api::serde::Deserialize;
//! use gpuipc_plugin_api::*;
//!
//! #[derive(Deserialize)]
//! #[serde(crate = "gpuipc_plugin_api::serde", deny_unknown_fields)]
//! struct Params { level: u8 }
//!
//! struct Fill { level: u8 }
//!
//! impl Plugin for Fill {
//!     type Params = Params;
//!     const INFO: PluginInfo = PluginInfo {
//!         name: "fill", version: "0.1.0", description: "fills gray frames",
//!         domains: &[Domain::Cpu], min_inputs: 1, max_inputs: 1,
//!         accepts: &[PixelFormat::Gray8], produces: &[PixelFormat::Gray8],
//!     };
//!     fn negotiate(_: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
//!         Ok(Some(inputs[0]))
//!     }
//!     fn create(p: Params, _: &[FrameFormat], _: Option<FrameFormat>, ctx: &CreateContext)
//!         -> Result<Self> {
//!         info!("stage {} fills with {}", ctx.stage, p.level);
//!         Ok(Fill { level: p.level })
//!     }
//!     fn process(&mut self, _: &[InputFrame], out: Option<&mut OutputFrame>, _: &ProcessContext)
//!         -> Result<()> {
//!         let mut plane = out.and_then(|o| o.plane_mut(0)).ok_or("expected a host frame")?;
//!         for y in 0..plane.rows() { plane.row_mut(y).fill(self.level) }
//!         Ok(())
//!     }
//! }
//! export_plugin!(Fill);
//! ```
//!
//! - Params: the stage's `params` table, deserialised into `Plugin::Params` with the serde
//!   this crate re-exports ([`serde`]), so a plugin's `Cargo.toml` needs no serde of its own.
//!   serde's derive refers to the crate by the name `serde`; with only this crate as a
//!   dependency, say where it is: `#[serde(crate = "gpuipc_plugin_api::serde")]`.
//!   Check the values their types cannot in [`Plugin::check`]: it runs at plan time, so
//!   `gpuipc-host validate` reports them as `run` would, and again before `create`. Describe
//!   them in [`Plugin::PARAMS`] for `gpuipc-host inspect`; [`param_check`] tests that the
//!   list matches the `Params` type and the docs' table.
//! - Inputs: a stage with several `inputs` gets one frame from each with the same sequence
//!   number, in the order of the stage's `inputs` list in the pipeline file
//!   (`inputs = ["left", "right"]`: `inputs[0]` is `left`'s frame) in `process`, and their
//!   formats in the same order in `negotiate` and `create`.
//! - Frames: [`InputFrame`] and [`OutputFrame`] carry their [`FrameInfo`] (format, layout
//!   with padded rows, `seq`, timestamp); host frames are cut into planes and rows, device
//!   frames are addresses for kernels ([`cuda`]).
//! - Errors: [`Error`], made from text (`bail!`, `"...".into()`) or by `?` from io, parse,
//!   boxed and `anyhow` errors; logging: [`info!`], [`warn!`], [`error!`], [`debug!`].
//! - Tests: [`testing`] drives a plugin in-process on packed frames;
//!   [`cuda::testing`] on a GPU.
#![deny(unsafe_code)]

pub mod abi;
pub mod bands;
pub mod child;
pub mod color;
pub mod cuda;
mod error;
#[doc(hidden)]
pub mod export;
pub mod ffmpeg;
pub mod format;
pub mod frame;
pub mod log;
pub mod param_check;
mod plugin;
pub mod testing;

pub use error::{Error, Result};

/// serde, for a plugin's `Params`: `#[derive(gpuipc_plugin_api::serde::Deserialize)]` with
/// `#[serde(crate = "gpuipc_plugin_api::serde")]` needs no serde dependency of its own.
pub use serde;

/// `Plugin::Params` of a plugin that takes none: no `params` table or an empty one, any key an
/// error naming it. (`()` would refuse even the empty table: serde reads a table as a map.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// Read from `reader` until `buf` is full or the stream ends (a pipe or file giving a frame in
/// pieces); the bytes read, fewer than `buf` holds only at the end of the stream.
pub fn read_full(reader: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// Set by the host in a stage process it started again after the stage failed (a restart
/// policy): the how-manieth start it is, from 1. See [`restarted`].
pub const RESTART_ENV: &str = "GPUIPC_STAGE_RESTART";

/// Whether this stage process was started again after its stage failed: a sink then goes on
/// with what its earlier processes wrote instead of starting the file anew
/// ([`open_output_file`]).
pub fn restarted() -> bool {
    std::env::var(RESTART_ENV).ok().and_then(|v| v.parse::<u32>().ok()).is_some_and(|n| n > 0)
}

/// The file a sink writes: created (or truncated) by the stage's first process, or, in a
/// process started again after the stage failed ([`restarted`]), the file as its earlier
/// processes left it, open for reading and writing at its start, with `true`: the sink cuts
/// off a record the dead process left half written and writes on from there, so the file
/// keeps every frame delivered to the stage once. The error names the param.
pub fn open_output_file(param: &str, path: &std::path::Path) -> Result<(std::fs::File, bool)> {
    if restarted() && path.is_file() {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::new(format!("param `{param}`: cannot open {} again: {e}", path.display())))?;
        return Ok((file, true));
    }
    Ok((create_output_file(param, path)?, false))
}

/// Create (or truncate) the file a sink writes, making its folder first. The error names the
/// param, as every params error should.
pub fn create_output_file(param: &str, path: &std::path::Path) -> Result<std::fs::File> {
    check_output_path(param, path)?;
    let created = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    };
    created
        .and_then(|()| std::fs::File::create(path))
        .map_err(|e| Error::new(format!("param `{param}`: cannot create {}: {e}", path.display())))
}
/// Check, when the pipeline is validated (from [`Plugin::check`]), a path param a stage will
/// write, only looking at the file system: not empty, not a folder (one that exists, or a name
/// ending in `/`), under no file (`hashes.txt/x` can never be created), and under a folder
/// where files can be made: not on a read-only file system or a kernel's pseudo file system
/// (`/proc`, `/sys`, ...), and writable by this user. A folder that does not exist yet is
/// fine: [`create_output_file`] makes it, in the nearest folder that exists, which is the one
/// checked. What only creating the file tells (a full disk, a quota) is known when the stage
/// starts. The check is made on the machine that plans the run.
pub fn check_output_path(param: &str, path: &std::path::Path) -> Result<()> {
    if path.as_os_str().is_empty() {
        return Err(Error::new(format!("param `{param}` is empty; give the file to write")));
    }
    if path.is_dir() {
        return Err(Error::new(format!("param `{param}`: {} is a folder; give a file in it", path.display())));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(Error::new(format!(
            "param `{param}`: {} ends in `/`, so it names a folder; give a file in it",
            path.display()
        )));
    }
    // The nearest ancestor that exists must be a folder, or the file can never be made.
    let nearest = path.ancestors().skip(1).filter(|a| !a.as_os_str().is_empty()).find(|a| a.exists());
    if let Some(file) = nearest.filter(|a| !a.is_dir()) {
        return Err(Error::new(format!(
            "param `{param}`: {} is not a folder, so {} cannot be created",
            file.display(),
            path.display()
        )));
    }
    // A bare name, or one whose every folder is still to be made, lands in the current folder.
    let folder = nearest.unwrap_or(std::path::Path::new("."));
    if let Some(why) = unwritable(folder) {
        return Err(Error::new(format!("param `{param}`: {} cannot be created: {why}", path.display())));
    }
    Ok(())
}

/// Why files cannot be made in the existing folder `folder`, if they cannot: its file system is
/// one of the kernel's views (procfs, sysfs, ...), where nothing can be created whatever the
/// permissions say, or is mounted read-only, or this user may not write the folder. `None`
/// when nothing says so (or the file system cannot be asked).
fn unwritable(folder: &std::path::Path) -> Option<String> {
    /// `f_type` of the pseudo file systems no file can be created in, and their names.
    const PSEUDO: [(i64, &str); 9] = [
        (0x9fa0, "proc"),
        (0x6265_6572, "sysfs"),
        (0x0027_e0eb, "cgroup"),
        (0x6367_7270, "cgroup2"),
        (0x6462_6720, "debugfs"),
        (0x7472_6163, "tracefs"),
        (0x7363_6673, "securityfs"),
        (0x1cd1, "devpts"),
        (0xcafe_4a11, "bpf"),
    ];
    let shown = folder.display();
    if let Ok(fs) = rustix::fs::statfs(folder) {
        let kind = fs.f_type;
        if let Some((_, name)) = PSEUDO.iter().find(|(magic, _)| *magic == kind) {
            return Some(format!("{shown} is on the kernel's {name} file system, where no file can be created"));
        }
    }
    if rustix::fs::statvfs(folder).is_ok_and(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY)) {
        return Some(format!("{shown} is on a read-only file system"));
    }
    match rustix::fs::access(folder, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK) {
        Err(e) if e == rustix::io::Errno::ACCESS || e == rustix::io::Errno::PERM => {
            Some(format!("this user may not write in {shown}"))
        }
        Err(e) if e == rustix::io::Errno::ROFS => Some(format!("{shown} is on a read-only file system")),
        _ => None,
    }
}

pub use export::parse_params;
pub use format::{FrameFormat, FrameLayout, PixelFormat, PlaneLayout};
pub use frame::{
    DeviceBuffer, FrameData, FrameDataMut, FrameInfo, InputFrame, OutputFrame, Plane, PlaneMut, pixel_hash,
};
pub use plugin::{CreateContext, Domain, ParamInfo, Plugin, PluginInfo, ProcessContext};

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::check_output_path;

    #[test]
    fn output_paths_are_checked_where_the_file_would_be_made() {
        let e = check_output_path("path", Path::new("/proc/nope/x.txt")).unwrap_err();
        assert_eq!(
            e.message(),
            "param `path`: /proc/nope/x.txt cannot be created: /proc is on the kernel's proc file system, where no file can be created"
        );
        let e = check_output_path("path", Path::new("/sys/x.sum")).unwrap_err();
        assert!(
            e.message().ends_with("/sys is on the kernel's sysfs file system, where no file can be created"),
            "{e}"
        );
        // Folders still to be made, under a writable one; a bare name in the current folder.
        let dir = std::env::temp_dir().join(format!("gpuipc-output-{}", std::process::id()));
        check_output_path("path", &dir.join("a/b/c.y4m")).unwrap();
        check_output_path("path", Path::new("hashes.sum")).unwrap();
        let e = check_output_path("path", Path::new("/etc/hostname/x")).unwrap_err();
        assert_eq!(e.message(), "param `path`: /etc/hostname is not a folder, so /etc/hostname/x cannot be created");
    }
}
