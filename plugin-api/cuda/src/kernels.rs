//! [`Kernels`]: one kernel source file compiled for the current device (or taken from the
//! kernel cache), loaded into the current context, its entry points looked up.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::error::CudaError;
use crate::module::{Kernel, Module};
use crate::target::Target;
use crate::{cache, driver, library, log, nvrtc};

/// The entry points of one kernel source file, loaded into a context (a stage's).
pub struct Kernels {
    file_name: String,
    arch: String,
    kernels: Vec<Kernel>,
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels")
            .field("file_name", &self.file_name)
            .field("arch", &self.arch)
            .field("kernels", &self.kernels)
            .finish()
    }
}

/// Where a CUBIN came from.
enum Origin {
    Cache(PathBuf),
    Compiled,
}

impl Kernels {
    /// Compile `source` (the kernel file `file_name`, a name for messages and the cache) for
    /// the architecture of the device of `on`'s context, or take it from the kernel cache (in
    /// [`kernel_cache_dir`](crate::kernel_cache_dir), or `on`'s own folder), load it into that
    /// context, which must be current on this thread (as the runner leaves it for `create`),
    /// and look up every one of `entry_points` (`extern "C"` names) with its parameters. The
    /// kernels launch on `on`'s stream only.
    ///
    /// A compile error is [`CudaError::Compile`], with the file name, the architecture and
    /// NVRTC's full log; every other error is wrapped in [`CudaError::Load`] naming the file.
    /// A cached CUBIN the driver refuses is deleted and compiled again.
    pub fn load(on: &impl Target, file_name: &str, source: &str, entry_points: &[&str]) -> Result<Kernels, CudaError> {
        Kernels::load_inner(on, file_name, source, entry_points).map_err(|e| match e {
            CudaError::Compile { .. } => e,
            e => CudaError::Load { file: file_name.to_owned(), source: Box::new(e) },
        })
    }

    fn load_inner(
        target: &impl Target,
        file_name: &str,
        source: &str,
        entry_points: &[&str],
    ) -> Result<Kernels, CudaError> {
        let on = target.raw_stream()?;
        library::modules()?;
        let device = on.require_current()?;
        let (major, minor) = driver::compute_capability(device, None)?;
        let arch = format!("sm_{major}{minor}");
        let cache_dir = cache::dir(target.kernel_cache_dir());
        let (cubin, origin) = cubin_for(cache_dir.as_deref(), file_name, source, &arch, false)?;
        let module = match (Module::load(&cubin), origin) {
            (Ok(module), _) => module,
            (Err(e), Origin::Cache(path)) => {
                log::warn(&format!("kernel cache: {} was refused ({e}); compiling again", path.display()));
                cache::remove(&path);
                let (cubin, _) = cubin_for(cache_dir.as_deref(), file_name, source, &arch, true)?;
                Module::load(&cubin)?
            }
            (Err(e), Origin::Compiled) => return Err(e),
        };
        let module = Arc::new(module);
        let kernels =
            entry_points.iter().map(|name| module.function(name, on.stream)).collect::<Result<Vec<_>, _>>()?;
        Ok(Kernels { file_name: file_name.to_owned(), arch, kernels })
    }

    /// The entry point `name`, one of those given to [`Kernels::load`].
    pub fn get(&self, name: &str) -> Result<&Kernel, CudaError> {
        self.kernels.iter().find(|k| k.name() == name).ok_or_else(|| CudaError::NoSuchKernel {
            file: self.file_name.clone(),
            name: name.to_owned(),
            loaded: self.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "),
        })
    }

    /// Every entry point loaded, in the order given to [`Kernels::load`].
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }

    /// The kernel file's name, as given to [`Kernels::load`].
    pub fn file_name(&self) -> &str {
        &self.file_name
    }

    /// The architecture the kernels were compiled for, `sm_XY`.
    pub fn arch(&self) -> &str {
        &self.arch
    }
}

/// The CUBIN of `source` for `arch`: from the cache in `dir` if there (unless `fresh`), else
/// compiled with NVRTC and stored there.
fn cubin_for(
    dir: Option<&Path>,
    file_name: &str,
    source: &str,
    arch: &str,
    fresh: bool,
) -> Result<(Vec<u8>, Origin), CudaError> {
    let options = nvrtc::options_for(arch);
    let (key, path) = match dir {
        Some(dir) => {
            let key = cache::key(source, &options, nvrtc::nvrtc_version()?);
            (key, Some(dir.join(cache::name_for(file_name, key, arch))))
        }
        None => (0, None),
    };
    if let Some(path) = path.as_deref().filter(|_| !fresh)
        && let Some(cubin) = cache::read(path, key)
    {
        log::debug(&format!("{file_name}: {arch} CUBIN from the cache {}", path.display()));
        return Ok((cubin, Origin::Cache(path.to_path_buf())));
    }
    let started = Instant::now();
    let compiled = nvrtc::compile(file_name, source, arch, &options)?;
    let took = started.elapsed().as_millis();
    if !compiled.log.is_empty() {
        log::warn(&format!("{file_name} ({arch}): NVRTC says:\n{}", compiled.log));
    }
    match &path {
        Some(path) => match cache::write(path, key, &compiled.cubin) {
            Ok(()) => {
                log::info(&format!("{file_name}: compiled for {arch} in {took} ms, cached as {}", path.display()))
            }
            Err(e) => log::warn(&format!(
                "{file_name}: compiled for {arch} in {took} ms; cannot cache it as {}: {e}",
                path.display()
            )),
        },
        None => log::info(&format!(
            "{file_name}: compiled for {arch} in {took} ms (no kernel cache folder: set GPUIPC_KERNEL_CACHE, \
             XDG_CACHE_HOME or HOME)"
        )),
    }
    Ok((compiled.cubin, Origin::Compiled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::nvrtc_for_test;

    #[test]
    fn the_cache_compiles_once_and_replaces_bad_files() {
        if !nvrtc_for_test() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let source = "extern \"C\" __global__ void k(unsigned* p, unsigned v) { *p = v; }\n";
        let (first, origin) = cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(files.len(), 1, "{files:?}");
        let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("k-") && name.ends_with("-sm_80.cubin"), "{name}");

        let (again, origin) = cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Cache(ref p) if *p == files[0]));
        assert_eq!(first, again);

        // Another architecture or source is another file.
        cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_90", false).unwrap();
        cubin_for(Some(dir.path()), "kernels/k.cu", &format!("{source}\n"), "sm_80", false).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);

        // A damaged file is compiled again and replaced.
        std::fs::write(&files[0], b"not a cubin").unwrap();
        let (fixed, origin) = cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
        let (again, origin) = cubin_for(Some(dir.path()), "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Cache(_)));
        assert_eq!(again, fixed, "the file was replaced by the new CUBIN");

        // No folder: compiled every time.
        let (_, origin) = cubin_for(None, "kernels/k.cu", source, "sm_80", false).unwrap();
        assert!(matches!(origin, Origin::Compiled));
    }

    /// Without a driver, loading fails cleanly and names the file.
    #[test]
    fn loading_without_a_driver_is_an_error() {
        if library::driver_available() {
            return;
        }
        let on = crate::RawStream { context: 0x1000, stream: 0x2000 };
        let e = Kernels::load(&on, "kernels/k.cu", "", &["k"]).unwrap_err();
        assert!(matches!(&e, CudaError::Load { source, .. } if matches!(**source, CudaError::NoDriver { .. })), "{e}");
        assert!(e.to_string().starts_with("loading kernels kernels/k.cu: "), "{e}");
    }
}
