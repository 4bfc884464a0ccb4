//! From the `plugin = "..."` of a stage to the path of a cdylib.

use std::path::{Path, PathBuf};

/// Plugins shipped with gpuipc, found next to the `gpuipc-host` binary.
pub const BUILTINS: [&str; 6] = ["generator", "rgb-process", "yuv420", "null", "checksum", "y4m"];

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("plugin file {} does not exist", .0.display())]
    MissingFile(PathBuf),
    #[error("plugin file {} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error(
        "unknown plugin `{name}`: no {file} in {searched}; built-in plugins are {builtins}, or give a path to a plugin cdylib",
        builtins = BUILTINS.join(", ")
    )]
    Unknown { name: String, file: String, searched: String },
}

/// A name with a `/` or ending in `.so` is a path (relative to `base_dir`, the pipeline file's
/// folder); anything else is looked up as `libgpuipc_<name>.so` in the plugin search path.
/// The path is made absolute: the loader searches the system's library folders for a bare
/// file name, so `libz.so` beside a pipeline file would load some other library.
pub fn resolve(plugin: &str, base_dir: &Path) -> Result<PathBuf, ResolveError> {
    if plugin.contains('/') || plugin.ends_with(".so") {
        let path = base_dir.join(plugin);
        let path = std::path::absolute(&path).unwrap_or(path);
        return match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(path),
            Ok(_) => Err(ResolveError::NotAFile(path)),
            Err(_) => Err(ResolveError::MissingFile(path)),
        };
    }
    let file = format!("libgpuipc_{}.so", plugin.replace('-', "_"));
    let dirs = search_path();
    dirs.iter().map(|d| d.join(&file)).find(|p| p.is_file()).ok_or_else(|| ResolveError::Unknown {
        name: plugin.to_owned(),
        file,
        searched: dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", "),
    })
}

/// `$GPUIPC_PLUGIN_PATH` (colon-separated), then the folder of the running binary, then
/// `../lib/gpuipc` beside it (an installed layout).
fn search_path() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("GPUIPC_PLUGIN_PATH")
        .map(|v| std::env::split_paths(&v).filter(|p| !p.as_os_str().is_empty()).collect())
        .unwrap_or_default();
    if let Some(exe_dir) = std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_owned)) {
        dirs.push(exe_dir.join("../lib/gpuipc"));
        dirs.insert(dirs.len() - 1, exe_dir);
    }
    dirs
}
