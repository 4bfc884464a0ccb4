//! The ffmpeg program a stage runs (the built-in `encode` sink, the `video` source's cpu
//! decoder): named by the stage's `ffmpeg` param, else by the environment variable
//! `GPUIPC_FFMPEG`, else `ffmpeg` on `PATH`, and found as a shell would find it, with errors
//! that say where the name came from.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The environment variable naming the ffmpeg program when the `ffmpeg` param is not given.
pub const PROGRAM_ENV: &str = "GPUIPC_FFMPEG";

/// The program run when neither the `ffmpeg` param nor [`PROGRAM_ENV`] names one.
pub const DEFAULT_PROGRAM: &str = "ffmpeg";

/// Where the name of the program came from, for messages that point at the right place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The stage's `ffmpeg` param.
    Param,
    /// [`PROGRAM_ENV`], the param not given.
    Env,
    /// Neither: [`DEFAULT_PROGRAM`].
    Default,
}

/// The ffmpeg program a stage runs, as named (a name to look up on `PATH`, or a path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: OsString,
    pub origin: Origin,
}

impl Program {
    /// The program for the `ffmpeg` param `param` and the value of [`PROGRAM_ENV`] `env`
    /// (an empty one counts as unset).
    pub fn choose(param: Option<&str>, env: Option<OsString>) -> Program {
        match (param, env) {
            (Some(name), _) => Program { name: name.into(), origin: Origin::Param },
            (None, Some(name)) if !name.is_empty() => Program { name, origin: Origin::Env },
            _ => Program { name: DEFAULT_PROGRAM.into(), origin: Origin::Default },
        }
    }

    /// The program for a stage whose `ffmpeg` param is `param`, in this process's environment.
    pub fn for_param(param: Option<&str>) -> Program {
        Program::choose(param, std::env::var_os(PROGRAM_ENV))
    }

    /// [`Program::locate`] on this process's `PATH`.
    pub fn find(&self) -> Result<PathBuf> {
        self.locate(std::env::var_os("PATH").as_deref())
    }

    /// The file to run: `name` itself when it holds a `/`, else the first executable file of
    /// that name in a folder of `path_var` (a `PATH` value), as a shell finds it. The error
    /// names the param or the environment variable the name came from.
    pub fn locate(&self, path_var: Option<&OsStr>) -> Result<PathBuf> {
        let shown = Path::new(&self.name).display();
        let whence = match self.origin {
            Origin::Param => "param `ffmpeg`".to_owned(),
            Origin::Env => format!("{PROGRAM_ENV}={shown} (param `ffmpeg` is not given, so the environment decides)"),
            Origin::Default => {
                "param `ffmpeg` is not given and neither is GPUIPC_FFMPEG, so the program is `ffmpeg` on PATH"
                    .to_owned()
            }
        };
        if self.name.is_empty() {
            return Err(Error::new("param `ffmpeg` is empty; give the ffmpeg program, a name on PATH or a path"));
        }
        if self.name.as_encoded_bytes().contains(&b'/') {
            let path = PathBuf::from(&self.name);
            return match path.metadata() {
                Ok(m) if is_executable(&m) => Ok(path),
                Ok(m) if m.is_dir() => Err(Error::new(format!("{whence}: {shown} is a folder, not a program"))),
                Ok(_) => Err(Error::new(format!("{whence}: {shown} is not an executable file"))),
                Err(e) => Err(Error::new(format!("{whence}: cannot run {shown}: {e}"))),
            };
        }
        let found = path_var
            .into_iter()
            .flat_map(std::env::split_paths)
            // An empty entry means the current folder, as in a shell.
            .map(|dir| if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir })
            .map(|dir| dir.join(&self.name))
            .find(|candidate| candidate.metadata().is_ok_and(|m| is_executable(&m)));
        found.ok_or_else(|| {
            let hint = "install ffmpeg (Debian, Ubuntu: `apt install ffmpeg`), or give the program's path in param `ffmpeg` or in GPUIPC_FFMPEG";
            Error::new(match self.origin {
                Origin::Default => format!("{whence}, which is not installed (not found on PATH); {hint}"),
                _ => format!("{whence}: `{shown}` is not found on PATH; {hint}"),
            })
        })
    }
}

fn is_executable(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt;
    metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_the_param_else_the_environment_else_ffmpeg() {
        let chosen = Program::choose(Some("/opt/ff/bin/ffmpeg"), Some("other".into()));
        assert_eq!(chosen, Program { name: "/opt/ff/bin/ffmpeg".into(), origin: Origin::Param });
        assert_eq!(
            Program::choose(None, Some("ffmpeg7".into())),
            Program { name: "ffmpeg7".into(), origin: Origin::Env }
        );
        assert_eq!(Program::choose(None, Some("".into())), Program { name: "ffmpeg".into(), origin: Origin::Default });
        assert_eq!(Program::choose(None, None), Program { name: "ffmpeg".into(), origin: Origin::Default });
    }

    #[test]
    fn a_program_is_found_on_path_or_as_a_path() {
        let sh = Program::choose(Some("sh"), None);
        let found = sh.locate(Some(OsStr::new("/nonexistent:/bin:/usr/bin"))).unwrap();
        assert!(found.ends_with("sh") && found.is_absolute(), "{}", found.display());
        assert_eq!(Program::choose(Some("/bin/sh"), None).locate(None).unwrap(), PathBuf::from("/bin/sh"));
    }

    #[test]
    fn a_missing_program_is_an_error_naming_where_its_name_came_from() {
        let nowhere = Some(OsStr::new("/nonexistent"));
        let e = Program::choose(None, None).locate(nowhere).unwrap_err();
        assert_eq!(
            e.message(),
            "param `ffmpeg` is not given and neither is GPUIPC_FFMPEG, so the program is `ffmpeg` on PATH, which is not \
             installed (not found on PATH); install ffmpeg (Debian, Ubuntu: `apt install ffmpeg`), or give the program's \
             path in param `ffmpeg` or in GPUIPC_FFMPEG"
        );
        let e = Program::choose(Some("ffmpeg-9"), None).locate(nowhere).unwrap_err();
        assert!(e.message().starts_with("param `ffmpeg`: `ffmpeg-9` is not found on PATH; install ffmpeg"), "{e}");
        let e = Program::choose(None, Some("/opt/none/ffmpeg".into())).locate(nowhere).unwrap_err();
        assert!(
            e.message().starts_with(
                "GPUIPC_FFMPEG=/opt/none/ffmpeg (param `ffmpeg` is not given, so the environment decides): cannot run /opt/none/ffmpeg:"
            ),
            "{e}"
        );
        let plain = crate::testing::temp_path("ffmpeg", "not-a-program");
        std::fs::write(&plain, "text").unwrap();
        let e = Program::choose(Some(plain.to_str().unwrap()), None).locate(nowhere).unwrap_err();
        assert_eq!(e.message(), format!("param `ffmpeg`: {} is not an executable file", plain.display()));
        std::fs::remove_file(&plain).unwrap();
        let e = Program::choose(Some("/usr/"), None).locate(nowhere).unwrap_err();
        assert_eq!(e.message(), "param `ffmpeg`: /usr/ is a folder, not a program");
        let e = Program::choose(Some(""), None).locate(nowhere).unwrap_err();
        assert!(e.message().starts_with("param `ffmpeg` is empty"), "{e}");
    }
}
