//! The MPS control daemon a run's cuda stages use (`isolation = "mps"`, or `auto` where stages
//! share a GPU): with MPS, stages on one GPU share it without time-slicing, as fast as one
//! process (25,051 against 6,020 frames/s for three 4K stages on an H100, DESIGN.md).
//!
//! Two daemons on one GPU time-slice like two processes do, so by default (`mps = "shared"`)
//! every run of one user on the machine uses one daemon: the first run starts it, the last one
//! to finish stops it. Who is still using it is kept by the kernel, not by a count in a file: each
//! run holds a shared `flock` on `users` for as long as it runs, and a run killed with SIGKILL
//! lets go of it by dying. Starting and stopping happen under an exclusive `flock` on `lock`,
//! so a run that starts while the last one stops waits for it and then starts a fresh daemon.
//! Each daemon gets a new folder inside the shared one (named in `current`), so a daemon that
//! is still shutting down never meets its successor.
//!
//! `mps = "private"` gives the run a daemon of its own in a fresh private folder, as every run
//! had before; its stages then time-slice with other runs' but no other run's GPU fault can end
//! them (docs/gpu.md).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::fs::FlockOperation;

use crate::config::MpsScope;
use crate::gpu::MPS_CONTROL;

/// A running MPS control daemon, stopped on drop when this run is its last user.
pub struct MpsDaemon {
    /// The daemon's own folder: `pipe/` and `log/` are in it.
    dir: PathBuf,
    control: PathBuf,
    /// `Some` for a shared daemon: the folder of the shared state and this run's hold on `users`.
    shared: Option<(PathBuf, File)>,
}

impl MpsDaemon {
    pub fn start(scope: MpsScope) -> Result<MpsDaemon, String> {
        match scope {
            MpsScope::Private => MpsDaemon::start_private(&std::env::temp_dir(), Path::new(MPS_CONTROL)),
            MpsScope::Shared => {
                let uid = rustix::process::geteuid().as_raw();
                MpsDaemon::start_shared(&std::env::temp_dir().join(format!("gpuipc-mps-{uid}")), Path::new(MPS_CONTROL))
            }
        }
    }

    fn start_private(parent: &Path, control: &Path) -> Result<MpsDaemon, String> {
        let dir = new_daemon_folder(parent, "gpuipc-mps")?;
        launch(control, &dir)?;
        let daemon = MpsDaemon { dir, control: control.to_owned(), shared: None };
        tracing::info!("isolation mps: a private MPS daemon, pipe {}", daemon.pipe().display());
        Ok(daemon)
    }

    /// Join the daemon of `base`, starting it when no other run uses it.
    fn start_shared(base: &Path, control: &Path) -> Result<MpsDaemon, String> {
        make_private_folder(base)?;
        let _transition = lock_file(&base.join("lock"), FlockOperation::LockExclusive)?;
        let users = open_lock_file(&base.join("users"))?;
        let alone = rustix::fs::flock(&users, FlockOperation::NonBlockingLockExclusive).is_ok();
        let current = base.join("current");
        let dir = if alone {
            // No run holds `users`: a daemon named in `current` belongs to a run that was killed
            // before it could stop it.
            if let Some(stale) = read_current(base) {
                stop(control, &stale);
            }
            let dir = new_daemon_folder(base, "daemon")?;
            launch(control, &dir)?;
            // Stopped by whichever run is its last user (Drop), found through `current`.
            if let Err(e) = std::fs::write(&current, dir.file_name().unwrap_or_default().as_encoded_bytes()) {
                stop(control, &dir);
                return Err(format!("cannot write {}: {e}", current.display()));
            }
            dir
        } else {
            read_current(base)
                .ok_or_else(|| format!("{} names no MPS daemon although a run uses it", current.display()))?
        };
        rustix::fs::flock(&users, FlockOperation::LockShared)
            .map_err(|e| format!("cannot lock {}: {e}", base.join("users").display()))?;
        tracing::info!(
            "isolation mps: {} the MPS daemon shared by this user's runs, pipe {}",
            if alone { "started" } else { "joined" },
            dir.join("pipe").display()
        );
        Ok(MpsDaemon { dir, control: control.to_owned(), shared: Some((base.to_owned(), users)) })
    }

    fn pipe(&self) -> PathBuf {
        self.dir.join("pipe")
    }

    /// What every stage process needs in its environment to use this daemon.
    pub fn env(&self) -> Vec<(String, String)> {
        env_of(&self.dir)
    }
}

impl Drop for MpsDaemon {
    fn drop(&mut self) {
        let Some((base, users)) = self.shared.take() else {
            stop(&self.control, &self.dir);
            return;
        };
        let transition = match lock_file(&base.join("lock"), FlockOperation::LockExclusive) {
            Ok(lock) => lock,
            Err(e) => {
                tracing::warn!("leaving the shared MPS daemon running: {e}");
                return;
            }
        };
        // From shared to exclusive: granted only when no other run holds `users`.
        if rustix::fs::flock(&users, FlockOperation::NonBlockingLockExclusive).is_ok() {
            stop(&self.control, &self.dir);
            let _ = std::fs::remove_file(base.join("current"));
            tracing::info!("isolation mps: stopped the shared MPS daemon (this run was its last user)");
        }
        drop(users);
        drop(transition);
    }
}

/// Start a control daemon on `dir` (it forks into the background and returns).
fn launch(control: &Path, dir: &Path) -> Result<(), String> {
    let status = Command::new(control)
        .arg("-d")
        .envs(env_of(dir))
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot start {}: {e}", control.display()))?;
    if !status.success() {
        return Err(format!("{} -d failed ({status}); see {}", control.display(), dir.join("log").display()));
    }
    Ok(())
}

fn env_of(dir: &Path) -> Vec<(String, String)> {
    vec![
        ("CUDA_MPS_PIPE_DIRECTORY".into(), dir.join("pipe").display().to_string()),
        ("CUDA_MPS_LOG_DIRECTORY".into(), dir.join("log").display().to_string()),
    ]
}

/// A fresh private folder with `pipe/` and `log/` in it. Never a predictable name: a folder or
/// symlink someone else made first could hold the pipe, the daemon's control.
fn new_daemon_folder(parent: &Path, prefix: &str) -> Result<PathBuf, String> {
    let dir =
        super::private_dir::create_in(parent, prefix).map_err(|e| format!("cannot create the MPS folder: {e}"))?;
    for sub in ["pipe", "log"] {
        std::fs::create_dir(dir.join(sub)).map_err(|e| format!("cannot create {}: {e}", dir.join(sub).display()))?;
    }
    Ok(dir)
}

/// The shared folder has a predictable name, so it is accepted only as a real folder of this
/// user that nobody else may enter.
fn make_private_folder(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
    }
    super::private_dir::check_private(path).map_err(|e| e.to_string())
}

/// The daemon folder `current` names, if it is one of ours.
fn read_current(base: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(base.join("current")).ok()?;
    let name = name.trim();
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return None;
    }
    let dir = base.join(name);
    super::private_dir::check_private(&dir).ok().map(|()| dir)
}

fn open_lock_file(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// `path` opened and locked; the lock goes with the file.
fn lock_file(path: &Path, how: FlockOperation) -> Result<File, String> {
    let file = open_lock_file(path)?;
    rustix::fs::flock(&file, how).map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(file)
}

/// Tell the daemon of `dir` to quit and remove its folder. Quiet when no daemon runs there.
fn stop(control: &Path, dir: &Path) {
    let quit = Command::new(control)
        .envs(env_of(dir))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
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
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for the control program that logs what it was asked: `start <folder>` for
    /// `-d`, `quit <folder>` for a quit on stdin.
    fn fake_control(root: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let log = root.join("calls");
        let script = root.join("fake-mps-control");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nd=$(dirname \"$CUDA_MPS_PIPE_DIRECTORY\")\nif [ \"$1\" = -d ]; then echo \"start $d\" >> {log}; else read cmd; echo \"$cmd $d\" >> {log}; fi\n",
                log = log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        (script, log)
    }

    fn calls(log: &Path) -> Vec<String> {
        std::fs::read_to_string(log).unwrap_or_default().lines().map(str::to_owned).collect()
    }

    fn scratch(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("gpuipc-mps-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        root
    }

    #[test]
    fn the_first_run_starts_the_shared_daemon_and_the_last_stops_it() {
        let root = scratch("shared");
        let (control, log) = fake_control(&root);
        let base = root.join("shared");
        let a = MpsDaemon::start_shared(&base, &control).unwrap();
        let b = MpsDaemon::start_shared(&base, &control).unwrap();
        assert_eq!(a.env(), b.env(), "both runs use one daemon");
        assert_eq!(calls(&log), [format!("start {}", a.dir.display())]);
        let first = a.dir.clone();
        drop(a);
        assert_eq!(calls(&log).len(), 1, "a run that is not the last leaves the daemon running");
        assert!(first.is_dir());
        drop(b);
        assert_eq!(calls(&log), [format!("start {}", first.display()), format!("quit {}", first.display())]);
        assert!(!first.exists() && !base.join("current").exists());
        // The next run starts a new daemon in a new folder.
        let c = MpsDaemon::start_shared(&base, &control).unwrap();
        assert_ne!(c.dir, first);
        drop(c);
        assert_eq!(calls(&log).len(), 4);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn runs_starting_and_ending_at_once_never_leave_a_daemon_or_stop_one_in_use() {
        let root = scratch("race");
        let (control, log) = fake_control(&root);
        let base = root.join("shared");
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    for _ in 0..10 {
                        let run = MpsDaemon::start_shared(&base, &control).unwrap();
                        // While this run holds it, its daemon's folder is there.
                        assert!(run.dir.join("pipe").is_dir());
                        drop(run);
                    }
                });
            }
        });
        // Every daemon started was stopped once, in the order start, quit, start, quit...
        let calls = calls(&log);
        assert!(!calls.is_empty() && calls.len().is_multiple_of(2), "{calls:?}");
        for pair in calls.chunks(2) {
            assert_eq!(pair[0].replace("start ", ""), pair[1].replace("quit ", ""), "{calls:?}");
        }
        assert!(!base.join("current").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_daemon_left_by_a_killed_run_is_stopped_by_the_next() {
        let root = scratch("stale");
        let (control, log) = fake_control(&root);
        let base = root.join("shared");
        let mut killed = MpsDaemon::start_shared(&base, &control).unwrap();
        let stale = killed.dir.clone();
        // What SIGKILL does: the lock goes with the process, nothing else runs.
        drop(killed.shared.take());
        std::mem::forget(killed);
        let next = MpsDaemon::start_shared(&base, &control).unwrap();
        assert_ne!(next.dir, stale);
        assert_eq!(
            calls(&log),
            [
                format!("start {}", stale.display()),
                format!("quit {}", stale.display()),
                format!("start {}", next.dir.display())
            ]
        );
        assert!(!stale.exists());
        drop(next);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_private_daemon_is_stopped_with_its_run() {
        let root = scratch("private");
        let (control, log) = fake_control(&root);
        let a = MpsDaemon::start_private(&root, &control).unwrap();
        let b = MpsDaemon::start_private(&root, &control).unwrap();
        assert_ne!(a.env(), b.env());
        let dir = a.dir.clone();
        drop(a);
        assert_eq!(calls(&log)[2], format!("quit {}", dir.display()));
        assert!(!dir.exists());
        drop(b);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_shared_folder_others_may_enter_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let root = scratch("open");
        let (control, _) = fake_control(&root);
        let base = root.join("shared");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = MpsDaemon::start_shared(&base, &control).err().unwrap();
        assert!(err.contains("not a private folder"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
