//! `gpuipc-host doctor`: what the CUDA driver and devices of this machine offer gpuipc, and a
//! two-process IPC self-test per device that exercises what a GPU link does (DESIGN.md,
//! "Links"). This process only asks the driver about devices (`cuInit` creates no context);
//! all GPU work happens in `__doctor-peer` child processes ([`peer`]).

pub mod nccl_stream;
mod peer;
mod selftest;

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use peer::{Outcome, TEST_BYTES};
pub use peer::{PeerRole, main as peer_main};

use crate::gpu::{self, ComputeMode, DeviceInfo};

/// How long one device's self-test may take (two context creations, 8 MiB of copies).
const SELF_TEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Width of the label column.
const LABEL: usize = 24;

/// Entry of `gpuipc-host doctor`. Exit status 0 when what was found works (including "no
/// driver": the cpu domain is a supported configuration), 1 when something is broken.
pub fn main() -> ExitCode {
    let exe = std::env::current_exe().ok();
    let mut stdout = std::io::stdout().lock();
    match report(&mut stdout, exe.as_deref()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: cannot write the report: {e}");
            ExitCode::FAILURE
        }
    }
}

fn line(out: &mut dyn Write, label: &str, value: impl std::fmt::Display) -> std::io::Result<()> {
    writeln!(out, "  {label:<LABEL$}{value}")
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Write the report; `Ok(false)` if a self-test failed or the driver is present but unusable.
/// `exe` is the binary the self-test peers run (none: the self-test is skipped).
fn report(out: &mut dyn Write, exe: Option<&Path>) -> std::io::Result<bool> {
    let (major, minor) = gpu::built_for_cuda();
    writeln!(out, "gpuipc doctor")?;
    line(
        out,
        "gpuipc",
        format!("{}, built for CUDA {major}.{minor} (driver loaded at run time)", env!("CARGO_PKG_VERSION")),
    )?;
    if !gpu::driver_available() {
        let why = if std::env::var_os("GPUIPC_NO_CUDA").is_some() {
            "CUDA disabled by GPUIPC_NO_CUDA"
        } else {
            "no CUDA driver found (libcuda.so.1 could not be loaded)"
        };
        writeln!(out, "\n{why}; gpuipc runs stages in the cpu domain")?;
        return Ok(true);
    }
    let driver = match gpu::driver_version() {
        Ok((a, b)) => format!("CUDA {a}.{b}"),
        Err(e) => format!("unknown ({e})"),
    };
    let module = kernel_module_version().map(|v| format!(", NVIDIA kernel module {v}")).unwrap_or_default();
    line(out, "CUDA driver", format!("{driver}{module}"))?;
    line(out, "MPS", mps_status())?;

    let devices = match gpu::devices() {
        Ok(d) if !d.is_empty() => d,
        Ok(_) => {
            writeln!(out, "\nthe CUDA driver sees no device; gpuipc runs stages in the cpu domain")?;
            return Ok(true);
        }
        Err(e) => {
            writeln!(out, "\nthe CUDA driver was found but cannot be used: {e}")?;
            writeln!(
                out,
                "gpuipc runs stages in the cpu domain only with device = \"cpu\"; `auto` and `cuda` stages will fail"
            )?;
            return Ok(false);
        }
    };

    writeln!(out, "\ndevices")?;
    for d in &devices {
        write_device(out, d)?;
    }

    if devices.len() > 1 {
        writeln!(out, "\npeer access (direct loads and stores between devices)")?;
        for a in &devices {
            for b in devices.iter().filter(|b| b.ordinal != a.ordinal) {
                let can = match gpu::can_access_peer(a.ordinal, b.ordinal) {
                    Ok(c) => yes_no(c).to_string(),
                    Err(e) => format!("unknown ({e})"),
                };
                line(out, &format!("cuda:{} -> cuda:{}", a.ordinal, b.ordinal), can)?;
            }
        }
    }

    writeln!(out, "\nIPC self-test (two processes per device, {} MiB per buffer)", TEST_BYTES >> 20)?;
    let mut all_passed = true;
    let mut results = Vec::new();
    for d in &devices {
        writeln!(out, "  cuda:{}", d.ordinal)?;
        let test = match exe {
            None => None,
            Some(_) if !can_self_test(d) => None,
            Some(exe) => Some(selftest::run(exe, d.ordinal, d.ordinal, SELF_TEST_TIMEOUT)),
        };
        match &test {
            None if exe.is_none() => line(out, "  (not run)", "cannot find this executable to start the peers")?,
            None if d.compute_mode == ComputeMode::Prohibited => {
                line(out, "  (not run)", "the device's compute mode is prohibited: no process may use it")?
            }
            None => line(out, "  (not run)", "the device has no interprocess events, so GPU links cannot use it")?,
            Some(t) => {
                outcome(out, "VMM fd + event", &t.vmm)?;
                outcome(out, "legacy IPC + event", &t.legacy)?;
                outcome(out, "released event back", &t.released)?;
                all_passed &= t.passed();
            }
        }
        out.flush()?;
        results.push((d, test));
    }

    if let Some(exe) = exe {
        all_passed &= cross_device_tests(out, exe, &devices)?;
    }

    writeln!(out, "\nsummary")?;
    for (d, test) in &results {
        line(out, &format!("cuda:{}", d.ordinal), verdict(d, test.as_ref()))?;
    }
    Ok(all_passed)
}

/// Whether processes may share memory and events on the device at all: the self-test's
/// precondition, on one device or between two.
fn can_self_test(d: &DeviceInfo) -> bool {
    d.ipc_events && d.compute_mode != ComputeMode::Prohibited
}

/// The most devices whose every ordered pair is tested; beyond it, only pairs with cuda:0
/// (each pair starts two processes with a context each).
const ALL_PAIRS_UP_TO: usize = 4;

/// The self-test between devices, for each ordered pair where the importer's device has peer
/// access to the exporter's: what a GPU link across devices does (memory mapped for the other
/// device, events waited on across devices). Returns whether every test run passed.
fn cross_device_tests(out: &mut dyn Write, exe: &Path, devices: &[DeviceInfo]) -> std::io::Result<bool> {
    let pairs: Vec<(u32, u32)> = devices
        .iter()
        .filter(|a| can_self_test(a))
        .flat_map(|a| {
            devices.iter().filter(|b| can_self_test(b) && b.ordinal != a.ordinal).map(|b| (a.ordinal, b.ordinal))
        })
        .filter(|&(a, b)| devices.len() <= ALL_PAIRS_UP_TO || a == 0 || b == 0)
        .collect();
    if pairs.is_empty() {
        return Ok(true);
    }
    writeln!(out, "\nIPC self-test across devices (exporter -> importer, read by peer access)")?;
    let mut all_passed = true;
    for (from, to) in pairs {
        writeln!(out, "  cuda:{from} -> cuda:{to}")?;
        if !matches!(gpu::can_access_peer(to, from), Ok(true)) {
            line(
                out,
                "  (not run)",
                format!("cuda:{to} has no peer access to cuda:{from}; links copy through the host"),
            )?;
            continue;
        }
        let t = selftest::run(exe, from, to, SELF_TEST_TIMEOUT);
        outcome(out, "VMM fd + event", &t.vmm)?;
        outcome(out, "legacy IPC + event", &t.legacy)?;
        outcome(out, "released event back", &t.released)?;
        all_passed &= t.passed();
        out.flush()?;
    }
    Ok(all_passed)
}

fn write_device(out: &mut dyn Write, d: &DeviceInfo) -> std::io::Result<()> {
    let (cc_major, cc_minor) = d.compute_capability;
    let gib = d.total_memory as f64 / (1u64 << 30) as f64;
    let mut head = format!("cuda:{}  {}  sm_{cc_major}{cc_minor}  {gib:.1} GiB", d.ordinal, d.name);
    if !d.pci_bus_id.is_empty() {
        let _ = write!(head, "  {}", d.pci_bus_id);
    }
    writeln!(out, "  {head}")?;
    line(out, "  interprocess events", yes_no(d.ipc_events))?;
    line(out, "  VMM POSIX fd handles", yes_no(d.vmm_posix_fd))?;
    line(out, "  legacy IPC handles", yes_no(d.legacy_ipc))?;
    let mode = match d.compute_mode {
        ComputeMode::ExclusiveProcess => {
            format!("{}: one process at a time; stages sharing it need MPS", d.compute_mode)
        }
        mode => mode.to_string(),
    };
    line(out, "  compute mode", mode)
}

fn outcome(out: &mut dyn Write, label: &str, o: &Outcome) -> std::io::Result<()> {
    let text = match o {
        Outcome::Pass(what) if what.is_empty() => "pass".to_string(),
        Outcome::Pass(what) => format!("pass  {what}"),
        Outcome::Fail(why) => format!("FAIL  {why}"),
        Outcome::Skipped(why) => format!("skip  {why}"),
    };
    line(out, &format!("  {label}"), text)
}

/// One line on what gpuipc will do with a device.
fn verdict(d: &DeviceInfo, test: Option<&selftest::SelfTest>) -> String {
    if d.compute_mode == ComputeMode::Prohibited {
        return "cuda stages: no (compute mode prohibited)".into();
    }
    let passed = |o: &Outcome| matches!(o, Outcome::Pass(_));
    let (vmm, legacy) = match test {
        Some(t) => (passed(&t.vmm) && passed(&t.released), passed(&t.legacy) && passed(&t.released)),
        None => (d.vmm_posix_fd && d.ipc_events, d.legacy_ipc && d.ipc_events),
    };
    let tested = if test.is_some() { "" } else { " (not tested)" };
    match (vmm, legacy) {
        (true, _) => format!("cuda stages: yes; GPU links share frames through VMM POSIX fds{tested}"),
        (false, true) => format!("cuda stages: yes; GPU links fall back to legacy IPC handles{tested}"),
        (false, false) if test.is_some() => {
            "cuda stages: yes, but GPU links between processes will not work; see the failures above".into()
        }
        (false, false) => "cuda stages: yes, but GPU links between processes cannot be used on it".into(),
    }
}

/// The NVIDIA kernel module's version, from /proc/driver/nvidia/version.
fn kernel_module_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    parse_module_version(&text)
}

/// The first dotted number on the `NVRM version:` line ("... Kernel Module  580.82.07  ...").
fn parse_module_version(text: &str) -> Option<String> {
    let nvrm = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    nvrm.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.chars().all(|c| c.is_ascii_digit() || c == '.')
                && w.starts_with(|c: char| c.is_ascii_digit())
        })
        .map(str::to_string)
}

/// Whether MPS can be used, and whether a daemon of this user already runs (stages would then
/// talk to it unless gpuipc starts its own with a private pipe directory).
fn mps_status() -> String {
    let on_path = crate::gpu::mps_installed();
    let daemons = mps_processes();
    let running = if daemons.is_empty() {
        "no MPS daemon of this user is running".to_string()
    } else {
        format!("MPS processes of this user are running: {}", daemons.join(", "))
    };
    format!("{} {}; {running}", crate::gpu::MPS_CONTROL, if on_path { "on PATH" } else { "not on PATH" })
}

/// "nvidia-cuda-mps-control (pid 123)" for each MPS process of this user (from /proc; the
/// command line, since /proc/PID/comm cuts both names to "nvidia-cuda-mps").
fn mps_processes() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if entry.metadata().ok().map(|m| m.uid()) != Some(uid) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let argv0 = cmdline.split(|&b| b == 0).next().unwrap_or_default();
        let name = String::from_utf8_lossy(argv0);
        let base = name.rsplit('/').next().unwrap_or_default();
        if base.starts_with("nvidia-cuda-mps") {
            found.push(format!("{base} (pid {pid})"));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_the_report_says_cpu_and_succeeds() {
        if gpu::driver_available() {
            return;
        }
        let mut out = Vec::new();
        assert!(report(&mut out, None).unwrap());
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains(
                "no CUDA driver found (libcuda.so.1 could not be loaded); gpuipc runs stages in the cpu domain"
            ) || text.contains("CUDA disabled by GPUIPC_NO_CUDA"),
            "{text}"
        );
        assert!(text.contains("built for CUDA 13.0"), "{text}");
    }

    #[test]
    fn module_versions_parse() {
        let proprietary = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.82.07  Wed Aug 27 10:12:50 UTC 2025\nGCC version: gcc 12\n";
        assert_eq!(parse_module_version(proprietary).as_deref(), Some("580.82.07"));
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16-I3-D08-1-2)  Thu Jan 23 2025\n";
        assert_eq!(parse_module_version(open).as_deref(), Some("570.86.15"));
        assert_eq!(parse_module_version("garbage"), None);
    }

    #[test]
    fn verdicts_follow_the_test_not_the_attributes() {
        let d = DeviceInfo {
            ordinal: 0,
            name: "GPU".into(),
            pci_bus_id: String::new(),
            compute_capability: (9, 0),
            total_memory: 80 << 30,
            vmm_posix_fd: true,
            ipc_events: true,
            legacy_ipc: true,
            compute_mode: ComputeMode::Default,
        };
        let t = selftest::SelfTest {
            vmm: Outcome::Fail("x".into()),
            legacy: Outcome::Pass(String::new()),
            released: Outcome::Pass(String::new()),
        };
        assert!(verdict(&d, Some(&t)).contains("legacy IPC"));
        assert!(verdict(&d, None).contains("VMM POSIX fds (not tested)"));
    }
}
