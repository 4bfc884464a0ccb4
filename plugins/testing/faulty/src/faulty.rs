//! The misbehaving pass-through stage.

use gpuipc_plugin_api::{
    CreateContext, Domain, FrameFormat, InputFrame, OutputFrame, PixelFormat, Plugin, PluginInfo, ProcessContext,
    Result, bail,
};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Behave: copy input to output.
    #[default]
    Ok,
    ErrorInNegotiate,
    PanicInNegotiate,
    /// Negotiate a 0x0 frame.
    EmptyOutput,
    /// Negotiate a format not declared in `produces`.
    UndeclaredOutput,
    ErrorOnCreate,
    PanicOnCreate,
    /// Never return from `create`: a setup that never ends.
    HangOnCreate,
    /// Per-frame faults, at frame `at`:
    ErrorAt,
    PanicAt,
    /// `std::process::abort()`.
    AbortAt,
    /// `std::process::exit(7)` without finishing.
    ExitAt,
    /// SIGKILL itself.
    SigkillAt,
    /// Never return from `process`.
    HangAt,
    /// Write into the input frame, which is mapped read-only: the stage must die of it
    /// without changing the frame for anyone else.
    WriteInputAt,
    /// Hostile code: try to change the input frame through every way to its memory this
    /// process has (mapping it again writable, making its mapping writable: see
    /// [`crate::tamper`]), log what each attempt got (`tamper: ...` lines), and go on.
    TamperInputAt,
    /// End the stream from a stage that has an input, which only a source may do.
    EndStreamAt,
    /// Start a child process, as plugins that run ffmpeg do, and fail naming what it got that
    /// it should not: a descriptor beyond 0, 1 and 2 (one of the stage's without
    /// close-on-exec), or a stop signal blocked (a mask is inherited across exec); the stage
    /// itself must not block one either.
    SpawnChildAt,
    ErrorInFlush,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub at: u64,
    #[serde(default)]
    pub sink: bool,
    /// Free text, unused: makes a stage's setup as large as a test needs.
    #[allow(dead_code, reason = "never read: only its size matters")]
    #[serde(default)]
    pub note: String,
    /// Microseconds of pretend work per frame: a slow consumer for the policy tests.
    #[serde(default)]
    pub delay_us: u64,
    /// A named pipe (FIFO): `create` opens it and reads it to its end, so it returns only once a
    /// test opened it for writing and closed it. Holds the pipeline's start without a sleep.
    pub gate: Option<std::path::PathBuf>,
}

pub struct Faulty {
    mode: Mode,
    at: u64,
    delay: std::time::Duration,
}

impl Plugin for Faulty {
    type Params = Params;

    // Replicas allowed: tests of replicas use it.
    const REPLICABLE: bool = true;

    const INFO: PluginInfo = PluginInfo {
        name: "test-faulty",
        version: env!("CARGO_PKG_VERSION"),
        description: "pass-through that fails on request (tests only)",
        domains: &[Domain::Cpu],
        min_inputs: 1,
        // Several inputs (aligned by sequence number) for the fan-in tests; it copies the first.
        max_inputs: 4,
        accepts: &PixelFormat::ALL,
        produces: &[PixelFormat::Rgb8, PixelFormat::Rgba8, PixelFormat::Gray8, PixelFormat::I420],
    };

    fn negotiate(params: &Params, inputs: &[FrameFormat]) -> Result<Option<FrameFormat>> {
        match params.mode {
            Mode::ErrorInNegotiate => bail!("refusing to negotiate, as asked"),
            Mode::PanicInNegotiate => panic!("panicking in negotiate, as asked"),
            Mode::EmptyOutput => return Ok(Some(FrameFormat::new(PixelFormat::Gray8, 0, 0))),
            Mode::UndeclaredOutput => return Ok(Some(FrameFormat::new(PixelFormat::Nv12, 16, 16))),
            _ => {}
        }
        Ok((!params.sink).then_some(inputs[0]))
    }

    fn create(params: Params, _: &[FrameFormat], _: Option<FrameFormat>, _: &CreateContext<'_>) -> Result<Self> {
        if let Some(gate) = &params.gate {
            // Opening a FIFO for reading waits for a writer; reading ends when it closes.
            let read = std::fs::File::open(gate).and_then(|mut f| std::io::copy(&mut f, &mut std::io::sink()));
            if let Err(e) = read {
                bail!("param `gate`: cannot read {}: {e}", gate.display());
            }
        }
        match params.mode {
            Mode::ErrorOnCreate => bail!("refusing to start, as asked"),
            Mode::PanicOnCreate => panic!("panicking in create, as asked"),
            Mode::HangOnCreate => loop {
                std::thread::park();
            },
            _ => Ok(Faulty {
                mode: params.mode,
                at: params.at,
                delay: std::time::Duration::from_micros(params.delay_us),
            }),
        }
    }

    fn process(
        &mut self,
        inputs: &[InputFrame<'_>],
        output: Option<&mut OutputFrame<'_>>,
        ctx: &ProcessContext,
    ) -> Result<()> {
        if ctx.frame_index == self.at {
            match self.mode {
                Mode::ErrorAt => bail!("failing at frame {}, as asked", ctx.frame_index),
                Mode::PanicAt => panic!("panicking at frame {}, as asked", ctx.frame_index),
                Mode::AbortAt => std::process::abort(),
                Mode::ExitAt => std::process::exit(7),
                Mode::SigkillAt => {
                    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
                }
                Mode::WriteInputAt => write_into(&inputs[0]),
                Mode::TamperInputAt => {
                    for line in crate::tamper::tamper(&inputs[0]) {
                        gpuipc_plugin_api::log::warn(&format!("tamper: {line}"));
                    }
                }
                Mode::SpawnChildAt => spawn_child()?,
                Mode::EndStreamAt => {
                    if let Some(out) = output {
                        out.end_stream();
                    }
                    return Ok(());
                }
                Mode::HangAt => {
                    gpuipc_plugin_api::log::warn(&format!("hanging at frame {}, as asked", ctx.frame_index));
                    loop {
                        std::thread::park();
                    }
                }
                _ => {}
            }
        }
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        if let Some(out) = output {
            let input = &inputs[0];
            let mut planes = out.planes_mut().expect("cpu frames");
            for (i, plane) in planes.iter_mut().enumerate() {
                let src = input.plane(i).expect("same format in and out");
                for y in 0..plane.rows() {
                    plane.row_mut(y).copy_from_slice(src.row(y));
                }
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.mode == Mode::ErrorInFlush {
            bail!("failing in flush, as asked");
        }
        Ok(())
    }
}

/// What a buggy plugin might do with a pointer it should only read from.
#[allow(unsafe_code)]
fn write_into(input: &InputFrame<'_>) {
    let row = input.plane(0).expect("a cpu frame").row(0);
    gpuipc_plugin_api::log::warn("writing into the input frame, as asked");
    // SAFETY: none; this is the bug under test. The host maps input frames read-only, so the
    // write faults (SIGSEGV) before any byte changes.
    unsafe { std::ptr::write_volatile(row.as_ptr() as *mut u8, !row[0]) };
}

/// [`Mode::SpawnChildAt`]: start a shell, and once it waits on its standard input (loaded,
/// nothing of its own open), read what it holds from /proc.
fn spawn_child() -> Result<()> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut problems = blocked_stop_signals("/proc/self/status", "the stage");
    let mut child = Command::new("sh")
        .args(["-c", "echo ready && read line"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| gpuipc_plugin_api::Error::new(format!("cannot start sh: {e}")))?;
    let mut ready = String::new();
    let said = BufReader::new(child.stdout.take().expect("piped")).read_line(&mut ready);
    let held = if said.is_ok() && ready == "ready\n" {
        std::fs::read_dir(format!("/proc/{}/fd", child.id())).map(|dir| {
            let mut fds: Vec<(u32, String)> = dir
                .flatten()
                .filter_map(|e| {
                    let fd = e.file_name().to_str()?.parse().ok()?;
                    let target =
                        std::fs::read_link(e.path()).map_or_else(|e| format!("({e})"), |t| t.display().to_string());
                    Some((fd, target))
                })
                .collect();
            fds.sort();
            fds
        })
    } else {
        Err(std::io::Error::other(format!("sh said {ready:?} ({said:?})")))
    };
    problems.extend(blocked_stop_signals(&format!("/proc/{}/status", child.id()), "a child of the stage"));
    // End of its input: it exits; killed if it does not.
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    match held {
        Ok(fds) => {
            let extra: Vec<String> =
                fds.iter().filter(|(fd, _)| *fd > 2).map(|(fd, target)| format!("{fd} -> {target}")).collect();
            if !extra.is_empty() {
                problems
                    .push(format!("a child of the stage holds descriptors beyond 0, 1 and 2: {}", extra.join(", ")));
            }
        }
        Err(e) => problems.push(format!("cannot list the descriptors of a child of the stage: {e}")),
    }
    if problems.is_empty() {
        gpuipc_plugin_api::log::info(
            "a child of the stage holds descriptors 0, 1 and 2 only, and no stop signal is blocked",
        );
        Ok(())
    } else {
        bail!("{}", problems.join("; "))
    }
}

/// SIGHUP, SIGINT or SIGTERM in the `SigBlk` mask of the `/proc/.../status` file `status`,
/// as a problem of `whose`.
fn blocked_stop_signals(status: &str, whose: &str) -> Vec<String> {
    let text = std::fs::read_to_string(status).unwrap_or_default();
    let Some(mask) =
        text.lines().find_map(|l| l.strip_prefix("SigBlk:")).and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
    else {
        return vec![format!("no signal mask in {status}")];
    };
    let blocked: Vec<&str> = [(1, "SIGHUP"), (2, "SIGINT"), (15, "SIGTERM")]
        .into_iter()
        .filter(|(n, _)| mask & (1 << (n - 1)) != 0)
        .map(|(_, name)| name)
        .collect();
    if blocked.is_empty() { Vec::new() } else { vec![format!("{whose} blocks {}", blocked.join(", "))] }
}
