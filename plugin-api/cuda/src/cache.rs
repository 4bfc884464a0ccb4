//! The on-disk cache of compiled kernels: where it is, what a file is called, atomic writes.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::Xxh3;

use crate::log;

/// Bumped when the key's recipe or the file's content changes meaning.
const KEY_VERSION: &str = "gpuipc-kernel-cache-v1";

/// The kernel cache folder: `explicit` (a stage's `kernel_cache_dir`) unless empty, else
/// `$XDG_CACHE_HOME/gpuipc/kernels` (if absolute), else `$HOME/.cache/gpuipc/kernels`, else
/// none (no cache: every stage start compiles).
pub fn dir(explicit: Option<&Path>) -> Option<PathBuf> {
    resolve_dir(
        explicit,
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn resolve_dir(
    explicit: Option<&Path>,
    xdg: Option<OsString>,
    home: Option<OsString>,
) -> Option<PathBuf> {
    if let Some(dir) = explicit.filter(|d| !d.as_os_str().is_empty()) {
        return Some(dir.to_path_buf());
    }
    // The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    if let Some(xdg) = xdg.map(PathBuf::from).filter(|d| d.is_absolute()) {
        return Some(xdg.join("gpuipc").join("kernels"));
    }
    home.filter(|h| !h.is_empty()).map(|home| {
        PathBuf::from(home)
            .join(".cache")
            .join("gpuipc")
            .join("kernels")
    })
}

/// `{stem}-{key:016x}-{arch}.cubin`: `stem` from the kernel's file name, `key` the xxh3-64 of
/// the source, every option (architecture included) and the NVRTC version.
pub(crate) fn file_name(
    kernel_file: &str,
    source: &str,
    options: &[String],
    nvrtc: (i32, i32),
    arch: &str,
) -> String {
    let mut hasher = Xxh3::new();
    // Each part is length-prefixed, so no two different inputs hash the same bytes.
    let mut part = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    part(KEY_VERSION.as_bytes());
    part(source.as_bytes());
    for option in options {
        part(option.as_bytes());
    }
    part(format!("nvrtc {}.{}", nvrtc.0, nvrtc.1).as_bytes());
    let key = hasher.digest();
    format!("{}-{key:016x}-{}.cubin", stem(kernel_file), sanitize(arch))
}

/// The file name without folders and extension, reduced to `[A-Za-z0-9_.-]`.
fn stem(kernel_file: &str) -> String {
    let base = Path::new(kernel_file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let base = sanitize(&base);
    if base.is_empty() {
        "kernel".into()
    } else {
        base
    }
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Every CUBIN is an ELF file.
pub(crate) fn looks_like_cubin(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

/// The cached CUBIN at `path`, or `None` (missing, unreadable, or not an ELF file, which is
/// then removed so it is written again).
pub(crate) fn read(path: &Path) -> Option<Vec<u8>> {
    match std::fs::read(path) {
        Ok(bytes) if looks_like_cubin(&bytes) => Some(bytes),
        Ok(_) => {
            log::warn(&format!(
                "kernel cache: {} is not a CUBIN; compiling again",
                path.display()
            ));
            remove(path);
            None
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::warn(&format!(
                "kernel cache: cannot read {}: {e}",
                path.display()
            ));
            None
        }
    }
}

/// Remove a cached file that turned out bad; a failure is only logged.
pub(crate) fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        log::warn(&format!(
            "kernel cache: cannot remove {}: {e}",
            path.display()
        ));
    }
}

/// Write `bytes` to `path` atomically: a temporary file in the same folder, then a rename, so
/// a reader sees the old file, no file, or the whole new one (several stages may write the
/// same kernel at once; they write the same bytes).
pub(crate) fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_is_explicit_then_xdg_then_home() {
        let xdg = Some(OsString::from("/x/cache"));
        let home = Some(OsString::from("/home/u"));
        let explicit = Path::new("/var/k");
        assert_eq!(
            resolve_dir(Some(explicit), xdg.clone(), home.clone()),
            Some(explicit.into())
        );
        assert_eq!(
            resolve_dir(None, xdg.clone(), home.clone()),
            Some(PathBuf::from("/x/cache/gpuipc/kernels"))
        );
        assert_eq!(
            resolve_dir(Some(Path::new("")), Some("relative".into()), home.clone()),
            Some(PathBuf::from("/home/u/.cache/gpuipc/kernels"))
        );
        assert_eq!(resolve_dir(None, None, Some("".into())), None);
        assert_eq!(resolve_dir(None, None, None), None);
    }

    #[test]
    fn file_names_change_with_every_input() {
        let opts = |arch: &str| vec![format!("--gpu-architecture={arch}"), "--std=c++17".into()];
        let base = file_name("kernels/gen.cu", "src", &opts("sm_90"), (13, 0), "sm_90");
        assert!(
            base.starts_with("gen-") && base.ends_with("-sm_90.cubin"),
            "{base}"
        );
        assert_eq!(base.len(), "gen-".len() + 16 + "-sm_90.cubin".len());
        assert_eq!(
            base,
            file_name("kernels/gen.cu", "src", &opts("sm_90"), (13, 0), "sm_90")
        );
        for other in [
            file_name("kernels/gen.cu", "src2", &opts("sm_90"), (13, 0), "sm_90"),
            file_name("kernels/gen.cu", "src", &opts("sm_80"), (13, 0), "sm_90"),
            file_name("kernels/gen.cu", "src", &opts("sm_90"), (13, 1), "sm_90"),
        ] {
            assert_ne!(base, other);
        }
        assert!(file_name("../a b/x y.cu", "s", &[], (13, 0), "sm_90").starts_with("x_y-"));
        assert!(file_name("", "s", &[], (13, 0), "sm_90").starts_with("kernel-"));
    }

    #[test]
    fn writes_are_whole_files_and_bad_files_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/k-0-sm_90.cubin");
        assert_eq!(read(&path), None);
        write(&path, b"\x7fELF rest").unwrap();
        assert_eq!(read(&path).as_deref(), Some(&b"\x7fELF rest"[..]));
        write(&path, b"\x7fELF new").unwrap();
        assert_eq!(read(&path).as_deref(), Some(&b"\x7fELF new"[..]));
        // No temporary files are left behind.
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
        std::fs::write(&path, b"garbage").unwrap();
        assert_eq!(read(&path), None);
        assert!(!path.exists());
    }
}
