//! From the `plugin = "..."` of a stage to the path of a cdylib.

use std::path::{Path, PathBuf};

/// Plugins shipped with gpuipc, found next to the `gpuipc-host` binary.
pub const BUILTINS: [&str; 16] = [
    "generator",
    "rgb-process",
    "yuv420",
    "yuv-to-rgb",
    "null",
    "checksum",
    "y4m",
    "video",
    "rtsp",
    "png",
    "encode",
    "python",
    "tcp-send",
    "tcp-receive",
    "nccl-send",
    "nccl-receive",
];

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("plugin file {} does not exist", .0.display())]
    MissingFile(PathBuf),
    #[error("plugin file {} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error(
        "unknown plugin `{name}`: no {file} in {searched}; the built-in plugins are {builtins}; for another, put its library in a folder on GPUIPC_PLUGIN_PATH or give its path (`plugin = \"path/to/{file}\"`)",
        builtins = BUILTINS.join(", ")
    )]
    Unknown { name: String, file: String, searched: String },
}

/// A plugin found by name: the file used, and any file of the same name that it hides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub path: PathBuf,
    /// Files further down the lookup order with the same name, not used.
    pub shadowed: Vec<PathBuf>,
}

impl Resolved {
    /// The warning to show when this lookup hid other files, naming the rule that decided.
    pub fn shadow_warning(&self, name: &str) -> Option<String> {
        let hidden = self.shadowed.iter().map(|p| p.display().to_string()).collect::<Vec<_>>();
        let rule = if is_builtin(name) {
            format!("`{name}` is a built-in, and a built-in name always means the library beside gpuipc-host")
        } else {
            "the first folder of the search path that has it wins".to_owned()
        };
        (!hidden.is_empty()).then(|| {
            format!(
                "plugin `{name}` is {}; {} has the same name and is not used ({rule}; give a path in `plugin` to use another)",
                self.path.display(),
                hidden.join(", ")
            )
        })
    }
}

/// Whether `name` (as a pipeline file writes it) is one of [`BUILTINS`].
pub fn is_builtin(name: &str) -> bool {
    BUILTINS.iter().any(|b| b.replace('-', "_") == name.replace('-', "_"))
}

/// Whether `plugin` (a stage's `plugin` value) is a path rather than a name.
pub fn is_path(plugin: &str) -> bool {
    plugin.contains('/') || plugin.ends_with(".so")
}

/// The library file a plugin name is looked up as: `sepia-tone` and `sepia_tone` are both
/// `libgpuipc_sepia_tone.so`.
pub fn file_name(name: &str) -> String {
    format!("libgpuipc_{}.so", name.replace('-', "_"))
}

/// The plugin name a library file is found by (`libgpuipc_sepia_tone.so`: `sepia-tone`), or
/// `None` for a file lookup never loads.
pub fn name_of_file(file: &str) -> Option<String> {
    let stem = file.strip_prefix("libgpuipc_")?.strip_suffix(".so")?;
    (!stem.is_empty()).then(|| stem.replace('_', "-"))
}

/// A name with a `/` or ending in `.so` is a path (relative to `base_dir`, the pipeline file's
/// folder); anything else is a name, looked up as [`file_name`] in the search path
/// ([`lookup_order`]). The path is made absolute: the loader searches the system's library
/// folders for a bare file name, so `libz.so` beside a pipeline file would load some other
/// library.
pub fn resolve(plugin: &str, base_dir: &Path) -> Result<Resolved, ResolveError> {
    if is_path(plugin) {
        let path = base_dir.join(plugin);
        let path = std::path::absolute(&path).unwrap_or(path);
        return match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() => Ok(Resolved { path, shadowed: Vec::new() }),
            Ok(_) => Err(ResolveError::NotAFile(path)),
            Err(_) => Err(ResolveError::MissingFile(path)),
        };
    }
    let file = file_name(plugin);
    let search = SearchPath::from_env();
    let mut found = search.lookup_order(plugin).into_iter().map(|d| d.join(&file)).filter(|p| p.is_file());
    match found.next() {
        Some(path) => Ok(Resolved { path, shadowed: found.collect() }),
        None => Err(ResolveError::Unknown { name: plugin.to_owned(), file, searched: search.describe() }),
    }
}

/// Where plugins are looked up by name: the folders of `$GPUIPC_PLUGIN_PATH` (colon-separated),
/// and the folders of the installation: the one holding `gpuipc-host`, then `../lib/gpuipc`
/// beside it.
#[derive(Debug, Clone)]
pub struct SearchPath {
    /// `$GPUIPC_PLUGIN_PATH`'s folders, in order.
    pub env: Vec<PathBuf>,
    /// Whether `$GPUIPC_PLUGIN_PATH` is set at all.
    pub env_set: bool,
    /// The binary's folder and `../lib/gpuipc` beside it.
    pub install: Vec<PathBuf>,
}

impl SearchPath {
    pub fn from_env() -> SearchPath {
        let var = std::env::var_os("GPUIPC_PLUGIN_PATH");
        let env = var
            .as_ref()
            .map(|v| std::env::split_paths(v).filter(|p| !p.as_os_str().is_empty()).collect())
            .unwrap_or_default();
        let install = match std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_owned)) {
            // `../lib/gpuipc`, written without the `..` when it can be.
            Some(exe_dir) => {
                let lib = exe_dir.parent().map_or_else(|| exe_dir.join("../lib/gpuipc"), |p| p.join("lib/gpuipc"));
                vec![exe_dir, lib]
            }
            None => Vec::new(),
        };
        SearchPath { env, env_set: var.is_some(), install }
    }

    /// The folders `name` is looked for in, first match used. A built-in name means the library
    /// beside gpuipc-host: those folders come first, so a same-named library on
    /// `$GPUIPC_PLUGIN_PATH` cannot replace it unnoticed. Any other name is looked up on
    /// `$GPUIPC_PLUGIN_PATH` first, then beside gpuipc-host (where a workspace build puts the
    /// test plugins). A folder named twice (`$GPUIPC_PLUGIN_PATH` holding the binary's folder) counts once.
    pub fn lookup_order(&self, name: &str) -> Vec<&Path> {
        let (first, then) = if is_builtin(name) { (&self.install, &self.env) } else { (&self.env, &self.install) };
        once_each(first.iter().chain(then))
    }

    /// Every folder once, `$GPUIPC_PLUGIN_PATH`'s first.
    pub fn folders(&self) -> Vec<&Path> {
        once_each(self.env.iter().chain(&self.install))
    }

    /// The folders as an error message names them.
    pub fn describe(&self) -> String {
        let list = |dirs: &[PathBuf]| dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        let env = match (self.env_set, self.env.is_empty()) {
            (false, _) => "GPUIPC_PLUGIN_PATH (not set)".to_owned(),
            (true, true) => "GPUIPC_PLUGIN_PATH (empty)".to_owned(),
            (true, false) => format!("GPUIPC_PLUGIN_PATH ({})", list(&self.env)),
        };
        format!("{env} or beside gpuipc-host ({})", list(&self.install))
    }
}

/// `dirs` without the ones that are a folder seen before (by their canonical path).
fn once_each<'a>(dirs: impl Iterator<Item = &'a PathBuf>) -> Vec<&'a Path> {
    let mut seen = Vec::new();
    dirs.filter(|d| {
        let canonical = std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf());
        let new = !seen.contains(&canonical);
        seen.push(canonical);
        new
    })
    .map(PathBuf::as_path)
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search() -> SearchPath {
        SearchPath {
            env: vec!["/a".into(), "/b".into()],
            env_set: true,
            install: vec!["/bin".into(), "/lib/gpuipc".into()],
        }
    }

    #[test]
    fn built_in_names_look_beside_the_binary_first() {
        let s = search();
        assert_eq!(
            s.lookup_order("generator"),
            [Path::new("/bin"), Path::new("/lib/gpuipc"), Path::new("/a"), Path::new("/b")]
        );
        assert_eq!(s.lookup_order("rgb_process")[0], Path::new("/bin"));
        assert_eq!(
            s.lookup_order("sepia-tone"),
            [Path::new("/a"), Path::new("/b"), Path::new("/bin"), Path::new("/lib/gpuipc")]
        );
        let twice = SearchPath { env: vec!["/bin".into(), "/a".into()], ..search() };
        assert_eq!(twice.lookup_order("x"), [Path::new("/bin"), Path::new("/a"), Path::new("/lib/gpuipc")]);
    }

    #[test]
    fn names_and_files() {
        assert_eq!(file_name("sepia-tone"), "libgpuipc_sepia_tone.so");
        assert_eq!(file_name("sepia_tone"), "libgpuipc_sepia_tone.so");
        assert_eq!(name_of_file("libgpuipc_sepia_tone.so").as_deref(), Some("sepia-tone"));
        assert_eq!(name_of_file("libgpuipc_.so"), None);
        assert_eq!(name_of_file("libsepia.so"), None);
        assert!(is_builtin("rgb_process") && is_builtin("rgb-process") && !is_builtin("sepia"));
        assert!(is_path("./x") && is_path("x.so") && !is_path("x"));
    }

    #[test]
    fn the_unknown_plugin_error_names_the_file_the_folders_and_the_variable() {
        let e = ResolveError::Unknown {
            name: "sepia-tone".into(),
            file: file_name("sepia-tone"),
            searched: search().describe(),
        };
        let text = e.to_string();
        assert!(text.starts_with("unknown plugin `sepia-tone`: no libgpuipc_sepia_tone.so in GPUIPC_PLUGIN_PATH (/a, /b) or beside gpuipc-host (/bin, /lib/gpuipc); "), "{text}");
        assert!(text.contains("put its library in a folder on GPUIPC_PLUGIN_PATH"), "{text}");
        let unset = SearchPath { env: Vec::new(), env_set: false, ..search() };
        assert!(unset.describe().starts_with("GPUIPC_PLUGIN_PATH (not set) or beside"));
    }
}
