//! The on-disk cache of compiled kernels: where it is, what a file is called, atomic writes.
//!
//! A cached kernel is code this process will run, so the cache is private and checked: its
//! folder belongs to this user and nobody else may enter it (made 0700; a folder of ours that
//! is more open is closed, one of another user's is not used), files are 0600, and each file
//! ends in a trailer naming the key it was stored under (the hash of source, options,
//! architecture and NVRTC version) and a hash of its CUBIN: a file is loaded only if both
//! match what is asked for.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use xxhash_rust::xxh3::Xxh3;

use crate::log;

/// Bumped when the key's recipe or the file's content changes meaning.
const KEY_VERSION: &str = "gpuipc-kernel-cache-v2";
/// What every cached file ends with: this, the key (8 bytes), the CUBIN's xxh3-64 (8 bytes).
const TRAILER_MAGIC: &[u8; 8] = b"GPUIPCK2";
const TRAILER_LEN: usize = 24;

/// The kernel cache folder: `explicit` (a stage's `kernel_cache_dir`) unless empty, else
/// `$XDG_CACHE_HOME/gpuipc/kernels` (if absolute), else `$HOME/.cache/gpuipc/kernels`, else
/// none (no cache: every stage start compiles).
pub fn dir(explicit: Option<&Path>) -> Option<PathBuf> {
    resolve_dir(explicit, std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
}

fn resolve_dir(explicit: Option<&Path>, xdg: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = explicit.filter(|d| !d.as_os_str().is_empty()) {
        return Some(dir.to_path_buf());
    }
    // The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
    if let Some(xdg) = xdg.map(PathBuf::from).filter(|d| d.is_absolute()) {
        return Some(xdg.join("gpuipc").join("kernels"));
    }
    home.filter(|h| !h.is_empty()).map(|home| PathBuf::from(home).join(".cache").join("gpuipc").join("kernels"))
}

/// `{stem}-{key:016x}-{arch}.cubin`: `stem` from the kernel's file name, `key` from [`key`].
#[cfg(test)]
pub(crate) fn file_name(kernel_file: &str, source: &str, options: &[String], nvrtc: (i32, i32), arch: &str) -> String {
    name_for(kernel_file, key(source, options, nvrtc), arch)
}

pub(crate) fn name_for(kernel_file: &str, key: u64, arch: &str) -> String {
    format!("{}-{key:016x}-{}.cubin", stem(kernel_file), sanitize(arch))
}

/// The xxh3-64 of the source, every option (architecture included) and the NVRTC version.
pub(crate) fn key(source: &str, options: &[String], nvrtc: (i32, i32)) -> u64 {
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
    hasher.digest()
}

/// The file name without folders and extension, reduced to `[A-Za-z0-9_.-]`.
fn stem(kernel_file: &str) -> String {
    let base = Path::new(kernel_file).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let base = sanitize(&base);
    if base.is_empty() { "kernel".into() } else { base }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '_' }).collect()
}

/// Every CUBIN is an ELF file.
pub(crate) fn looks_like_cubin(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x7fELF")
}

fn trailer(key: u64, cubin: &[u8]) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(TRAILER_MAGIC);
    t[8..16].copy_from_slice(&key.to_le_bytes());
    t[16..].copy_from_slice(&xxhash_rust::xxh3::xxh3_64(cubin).to_le_bytes());
    t
}

/// The CUBIN in a cached file's bytes, if they are a CUBIN stored under `key`, whole.
fn verified(bytes: &[u8], key: u64) -> Option<&[u8]> {
    let cubin = bytes.get(..bytes.len().checked_sub(TRAILER_LEN)?)?;
    (looks_like_cubin(cubin) && bytes[cubin.len()..] == trailer(key, cubin)).then_some(cubin)
}

/// The folder is this user's and closed to others; a folder of ours left more open (an older
/// gpuipc made it 0755) is closed now. `Err`: not usable.
fn private_folder(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::symlink_metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is not a folder of this user (owner {}); not using it", dir.display(), meta.uid()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// The cached CUBIN at `path` stored under `key`, or `None` (missing, unreadable, in a folder
/// that is not private, or not such a CUBIN, which is then removed so it is written again).
pub(crate) fn read(path: &Path, key: u64) -> Option<Vec<u8>> {
    if let Err(e) = private_folder(path.parent().unwrap_or(Path::new("."))) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn(&format!("kernel cache: {e}"));
        }
        return None;
    }
    match std::fs::read(path) {
        Ok(bytes) => match verified(&bytes, key) {
            Some(cubin) => Some(cubin.to_vec()),
            None => {
                log::warn(&format!(
                    "kernel cache: {} is not the CUBIN stored under its key; compiling again",
                    path.display()
                ));
                remove(path);
                None
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            log::warn(&format!("kernel cache: cannot read {}: {e}", path.display()));
            None
        }
    }
}

/// Remove a cached file that turned out bad; a failure is only logged.
pub(crate) fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        log::warn(&format!("kernel cache: cannot remove {}: {e}", path.display()));
    }
}

/// Write `bytes` to `path` atomically: a temporary file in the same folder, then a rename, so
/// a reader sees the old file, no file, or the whole new one (several stages may write the
/// same kernel at once; they write the same bytes).
pub(crate) fn write(path: &Path, key: u64, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    private_folder(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        file.write_all(bytes)?;
        file.write_all(&trailer(key, bytes))?;
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
        assert_eq!(resolve_dir(Some(explicit), xdg.clone(), home.clone()), Some(explicit.into()));
        assert_eq!(resolve_dir(None, xdg.clone(), home.clone()), Some(PathBuf::from("/x/cache/gpuipc/kernels")));
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
        assert!(base.starts_with("gen-") && base.ends_with("-sm_90.cubin"), "{base}");
        assert_eq!(base.len(), "gen-".len() + 16 + "-sm_90.cubin".len());
        assert_eq!(base, file_name("kernels/gen.cu", "src", &opts("sm_90"), (13, 0), "sm_90"));
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
        assert_eq!(read(&path, 7), None);
        write(&path, 7, b"\x7fELF rest").unwrap();
        assert_eq!(read(&path, 7).as_deref(), Some(&b"\x7fELF rest"[..]));
        write(&path, 7, b"\x7fELF new").unwrap();
        assert_eq!(read(&path, 7).as_deref(), Some(&b"\x7fELF new"[..]));
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(path.parent().unwrap()).unwrap().count(), 1);
        std::fs::write(&path, b"garbage").unwrap();
        assert_eq!(read(&path, 7), None);
        assert!(!path.exists());
    }

    #[test]
    fn a_file_is_loaded_only_under_its_own_key_and_whole() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k/k-0-sm_90.cubin");
        write(&path, 7, b"\x7fELF code").unwrap();
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        // Another key: a file renamed or made for other source, options or architecture.
        assert_eq!(read(&path, 8), None);
        write(&path, 7, b"\x7fELF code").unwrap();
        // Any ELF file with the right name, as a cache could be planted with.
        std::fs::write(&path, b"\x7fELF planted").unwrap();
        assert_eq!(read(&path, 7), None);
        // A changed byte of a stored CUBIN.
        write(&path, 7, b"\x7fELF code").unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[5] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path, 7), None);
        // A folder of ours left open to others is closed before it is used.
        write(&path, 7, b"\x7fELF code").unwrap();
        std::fs::set_permissions(path.parent().unwrap(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(read(&path, 7).as_deref(), Some(&b"\x7fELF code"[..]));
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().mode() & 0o777, 0o700);
    }
}
