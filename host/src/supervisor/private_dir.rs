//! A folder only this user can enter, under the temporary folder, made fresh: its name ends
//! in random characters and it is created with `mkdir` (never reused: a folder or symlink
//! someone else made first under a predictable name is not accepted), mode 0700, and its
//! owner and mode are checked after.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A new private folder `<tmp>/<prefix>-XXXXXXXXXXXX`.
pub fn create(prefix: &str) -> io::Result<PathBuf> {
    create_in(&std::env::temp_dir(), prefix)
}

pub fn create_in(parent: &Path, prefix: &str) -> io::Result<PathBuf> {
    for _ in 0..16 {
        let path = parent.join(format!("{prefix}-{}", random_suffix()?));
        match std::fs::DirBuilder::new().mode(0o700).create(&path) {
            Ok(()) => {
                check_private(&path)?;
                return Ok(path);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("no free name for a private folder in {}", parent.display()),
    ))
}

/// `path` is a real folder (not a symlink), owned by this user, that nobody else may enter.
pub fn check_private(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} is not a private folder of this user (owner {}, mode {:o}); refusing to use it",
                path.display(),
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

fn random_suffix() -> io::Result<String> {
    let mut bytes = [0u8; 6];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_folder_is_new_and_private() {
        let parent = std::env::temp_dir().join(format!("gpuipc-private-test-{}", std::process::id()));
        std::fs::create_dir_all(&parent).unwrap();
        let a = create_in(&parent, "x").unwrap();
        let b = create_in(&parent, "x").unwrap();
        assert_ne!(a, b);
        for dir in [&a, &b] {
            assert_eq!(std::fs::metadata(dir).unwrap().mode() & 0o777, 0o700);
        }
        // A folder others may enter, or a symlink, is refused.
        let open = parent.join("open");
        std::fs::DirBuilder::new().mode(0o755).create(&open).unwrap();
        std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(check_private(&open).is_err());
        let link = parent.join("link");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(check_private(&link).is_err());
        std::fs::remove_dir_all(&parent).unwrap();
    }
}
