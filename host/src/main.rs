//! `gpuipc-host`: the command line. Parsing arguments and setting up logging only; the work
//! is in the modules, in the order a pipeline goes through them:
//! config → plan → supervisor → stage → link → plugin.
//!
//! The modules stand on floors, lowest first; a module imports only from its own floor or
//! below, with no circle (`scripts/import-floors.py` checks it):
//! 1. `config`, `plugin`, `gpu`: the pipeline file's types, plugin loading, the CUDA driver
//!    (and whether MPS is installed);
//! 2. `plan`, `control`: the resolved plan (a ring's sizes included), and the control
//!    socket's messages, transport only;
//! 3. `link`: rings, waiting and waking, where frame bytes live (the GPU handshake too);
//! 4. `stage`: a stage process;
//! 5. `metrics`: what a run shows to monitoring over HTTP (Prometheus, health checks);
//! 6. `supervisor`: running a plan's stage processes;
//! 7. the commands: `main`, `agent`, `bench`, `doctor`.
#![deny(unsafe_code)]

mod agent;
mod bench;
mod config;
mod control;
mod doctor;
#[cfg(test)]
mod fuzz;
mod gpu;
mod link;
mod metrics;
mod plan;
mod plugin;
mod stage;
mod supervisor;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::{Parser, Subcommand};

/// Multi-stage image pipelines, one process per stage, frames shared without copies.
#[derive(Parser)]
#[command(name = "gpuipc-host", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a pipeline file.
    ///
    /// Example: gpuipc-host run pipelines/4k-yuv.toml --frames 500 --report run.json
    Run {
        file: PathBuf,
        /// Frames each source emits (overrides the file's `frames`; at least 1).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        frames: Option<u64>,
        /// Run every stage as a thread of this process, over the same rings and frame loop as
        /// separate processes (cpu only): the reference the multi-process run is checked against.
        #[arg(long)]
        in_process: bool,
        /// Also write the run report as JSON to this file.
        #[arg(long)]
        report: Option<PathBuf>,
        /// No live statistics.
        #[arg(long, short)]
        quiet: bool,
        /// Microseconds a waiting stage spins before it sleeps (overrides the file's `spin_us`).
        #[arg(long)]
        spin_us: Option<u32>,
        /// Write `<stage>.sum` files with a hash of every stage's every output frame here.
        #[arg(long, value_name = "DIR")]
        checksums: Option<PathBuf>,
        /// Default device of stages, replacing the file's (`cpu`, `cuda`, `cuda:N`, `auto`).
        #[arg(long, value_parser = parse_device)]
        device: Option<config::DeviceSpec>,
        /// Run even if the rings and buffers need more memory than the machine has.
        #[arg(long)]
        no_budget_check: bool,
        /// Serve Prometheus metrics, /healthz and /readyz over HTTP here: PORT (on
        /// 127.0.0.1), HOST:PORT or [IPv6]:PORT; port 0 takes a free one (the log says which).
        /// Overrides the file's `metrics` (docs/metrics.md).
        #[arg(long, value_name = "ADDR:PORT", value_parser = config::MetricsAddress::parse)]
        metrics: Option<config::MetricsAddress>,
        /// With metrics: keep serving the run's final figures this long after it ends (a last
        /// scrape of a run of a fixed length), or until a stop signal. E.g. `30s`.
        #[arg(long, value_name = "DURATION", value_parser = parse_linger, requires = "metrics")]
        metrics_linger: Option<std::time::Duration>,
        /// A part of a run over several hosts: write the run's figures as JSON lines on stdout
        /// for the agent or coordinator that started it (agent/part.rs).
        #[arg(long, hide = true)]
        part_samples: bool,
        /// A part of a run over several hosts, started by its agent (agent/part.rs): a stop
        /// drains it as the other hosts' parts, its link receivers ending with their senders.
        #[arg(long, hide = true)]
        part: bool,
    },
    /// Check a pipeline file and print its plan and the memory it needs, or every error in it.
    ///
    /// Example: gpuipc-host validate pipelines/4k-yuv.toml --device cpu
    Validate {
        file: PathBuf,
        /// Default device of stages, replacing the file's (`cpu`, `cuda`, `cuda:N`, `auto`).
        #[arg(long, value_parser = parse_device)]
        device: Option<config::DeviceSpec>,
        /// Accept a plan that needs more memory than the machine has.
        #[arg(long)]
        no_budget_check: bool,
        /// Ask the agent of every `[[host]]` what it is (waits up to 2 s for each one that
        /// does not answer).
        #[arg(long)]
        ask_hosts: bool,
    },
    /// The agent of a host that runs stages of pipelines started elsewhere (docs/multi-host.md):
    /// announces itself on Zenoh, answers what it is and runs the parts of runs coordinators
    /// ask it to, until Ctrl-C or SIGTERM (which drain its parts first).
    Agent {
        /// Its name, as pipeline files' `[[host]]` tables call it.
        #[arg(long)]
        name: String,
        /// The endpoint it listens on, `tcp/ADDRESS:PORT` (a `[[host]]`'s `control`).
        #[arg(long)]
        listen: String,
        /// Serve Prometheus metrics, /healthz and /readyz of the parts it runs over HTTP here:
        /// PORT (on 127.0.0.1), HOST:PORT or [IPv6]:PORT (docs/metrics.md).
        #[arg(long, value_name = "ADDR:PORT", value_parser = config::MetricsAddress::parse)]
        metrics: Option<config::MetricsAddress>,
    },
    /// Measure a pipeline: in one process on one CUDA context (its ideal) and as separate
    /// processes, back to back on the same frames; frames/s, GPU time and bandwidth per stage,
    /// host CPU, GPU memory, latency with paced sources.
    ///
    /// Example: gpuipc-host bench pipelines/4k-yuv.toml --isolation process --json 4k.json
    Bench {
        file: PathBuf,
        /// Frames of each measured run.
        #[arg(long, default_value_t = 3000, value_parser = clap::value_parser!(u64).range(1..))]
        frames: u64,
        /// Frames of the warm-up run before each measured one.
        #[arg(long, default_value_t = 300)]
        warmup: u64,
        /// Measured runs each way, one way then the other, of frames/s and of latency; the
        /// figures are their medians.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=99))]
        rounds: u32,
        /// Frames of the run that compares both ways' outputs.
        #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
        check_frames: u64,
        /// Frames per second of the sources in the latency runs (more than 0).
        #[arg(long, default_value_t = 1000.0, value_parser = positive_rate)]
        fps: f64,
        /// Frames of each latency run.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        latency_frames: u64,
        /// Also write everything measured as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Microseconds a waiting stage spins before it sleeps (overrides the file's `spin_us`).
        #[arg(long)]
        spin_us: Option<u32>,
        /// Default device of stages, replacing the file's (`cpu`, `cuda`, `cuda:N`, `auto`).
        #[arg(long, value_parser = parse_device)]
        device: Option<config::DeviceSpec>,
        /// How stages share a GPU, replacing the file's (`auto`, `mps`, `process`).
        #[arg(long, value_parser = parse_isolation)]
        isolation: Option<config::Isolation>,
    },
    /// Print a pipeline's graph in Graphviz dot.
    ///
    /// Example: gpuipc-host graph pipelines/fan-in.toml | dot -Tsvg > fan-in.svg
    Graph { file: PathBuf },
    /// List the plugins a pipeline can name: the built-in ones and those on the search path
    /// (`GPUIPC_PLUGIN_PATH`), each with the file it loads, and a warning for a file that
    /// another of the same name hides.
    ///
    /// Example: GPUIPC_PLUGIN_PATH=~/my-plugins gpuipc-host plugins
    Plugins,
    /// Describe one plugin: version, plugin ABI, domains, inputs, pixel formats in and out, and
    /// every param with its type, range, default and meaning.
    ///
    /// Example: gpuipc-host inspect generator   (or a path: gpuipc-host inspect ./libgpuipc_fill.so)
    Inspect {
        /// A plugin name, as a stage's `plugin` gives it, or a path to a plugin cdylib.
        plugin: String,
    },
    /// A stage process; started by `run`, not by hand.
    #[command(name = "__stage", hide = true)]
    Stage { name: String },
    /// Report the CUDA driver, devices and what gpuipc can use on them.
    ///
    /// Example: gpuipc-host doctor
    Doctor,
    /// One side of the doctor's IPC self-test; started by `doctor`, not by hand.
    #[command(name = "__doctor-peer", hide = true)]
    DoctorPeer {
        #[arg(value_enum)]
        role: doctor::PeerRole,
        device: u32,
    },
    /// NCCL's own send/receive between two processes, the yardstick of the NCCL bridge in
    /// scripts/bench-tcp.sh; not a user command.
    #[command(name = "__nccl-stream", hide = true)]
    NcclStream {
        #[arg(value_enum)]
        end: doctor::nccl_stream::StreamEnd,
        address: String,
        bytes: usize,
        frames: usize,
        #[arg(default_value_t = 0)]
        device: u32,
    },
}

fn parse_device(text: &str) -> Result<config::DeviceSpec, String> {
    config::DeviceSpec::parse(text).ok_or_else(|| format!("`{text}` is not \"cpu\", \"cuda\", \"cuda:N\" or \"auto\""))
}

fn parse_linger(text: &str) -> Result<std::time::Duration, String> {
    match config::DurationSpec::parse(text) {
        Some(config::DurationSpec(Some(d))) => Ok(d),
        _ => Err(format!("`{text}` is not a duration such as \"30s\" or \"2m\"")),
    }
}

fn parse_isolation(text: &str) -> Result<config::Isolation, String> {
    match text {
        "auto" => Ok(config::Isolation::Auto),
        "mps" => Ok(config::Isolation::Mps),
        "process" => Ok(config::Isolation::Process),
        _ => Err(format!("`{text}` is not \"auto\", \"mps\" or \"process\"")),
    }
}

fn init_logging() {
    // Zenoh's own messages (its session id, that gossip is off as we want it) only where
    // they are errors, unless GPUIPC_LOG asks for more.
    let filter = tracing_subscriber::EnvFilter::try_from_env("GPUIPC_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,zenoh=error,zenoh_transport=error,zenoh_link_tcp=error")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .init();
}

/// Refuse a plan that needs more memory than the machine has, unless told not to.
fn budget_check(file: &Path, needs: &plan::budget::Needs, has: &plan::budget::Has, skip: bool) -> Result<(), ExitCode> {
    if skip {
        return Ok(());
    }
    plan::budget::check(needs, has).map_err(|why| {
        eprintln!("{}: error: {why}", file.display());
        ExitCode::from(2)
    })
}

/// Parse and plan a file, printing every error on failure. `device` replaces the file's
/// `[pipeline] device` (stages that name their own keep it).
fn load_plan(file: &Path, device: Option<config::DeviceSpec>) -> Result<plan::Plan, ExitCode> {
    load_plan_with(file, device, None)
}

/// As [`load_plan`], `isolation` replacing the file's too.
fn load_plan_with(
    file: &Path,
    device: Option<config::DeviceSpec>,
    isolation: Option<config::Isolation>,
) -> Result<plan::Plan, ExitCode> {
    let result = config::load(file).and_then(|(source, mut parsed)| {
        if let Some(device) = device {
            parsed.pipeline.device = Some(toml::Spanned::new(0..0, device));
        }
        if let Some(isolation) = isolation {
            parsed.pipeline.isolation = Some(toml::Spanned::new(0..0, isolation));
        }
        plan::build(&source, parsed)
    });
    result.map_err(|diags| {
        eprintln!("{diags}");
        ExitCode::from(2)
    })
}

/// A rate of frames per second: a finite number above 0 (`bench --fps 0` once panicked).
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(fps) if fps.is_finite() && fps > 0.0 => Ok(fps),
        Ok(_) => Err(format!("{text} is not a rate: give a number of frames per second above 0")),
        Err(e) => Err(format!("{text}: {e}")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The commands that handle stop signals take them over before any thread starts (see
    // `Shutdown::take_over`): a Ctrl-C however early is then never lost.
    if matches!(cli.command, Command::Run { .. } | Command::Bench { .. } | Command::Agent { .. })
        && let Err(e) = supervisor::Shutdown::take_over()
    {
        eprintln!("error: cannot install signal handlers: {e}");
        return ExitCode::from(1);
    }
    init_logging();
    match cli.command {
        Command::Stage { .. } => ExitCode::from(stage::main() as u8),
        Command::Doctor => doctor::main(),
        Command::DoctorPeer { role, device } => doctor::peer_main(role, device),
        Command::NcclStream { end, address, bytes, frames, device } => {
            doctor::nccl_stream::main(end, &address, bytes, frames, device)
        }
        Command::Agent { name, listen, metrics } => agent::main(&name, &listen, metrics.as_ref()),
        Command::Validate { file, device, no_budget_check, ask_hosts } => match load_plan(&file, device) {
            Ok(plan) => {
                let (needs, has) = (plan::budget::needs(&plan), plan::budget::has());
                let _ = write!(std::io::stdout(), "{}{}", plan::render_text(&plan), plan::budget::render(&needs, &has));
                if ask_hosts {
                    let _ = write!(std::io::stdout(), "{}", agents_text(&plan));
                }
                if let Err(code) = splits(&file, &plan) {
                    return code;
                }
                match budget_check(&file, &needs, &has, no_budget_check) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(code) => code,
                }
            }
            Err(code) => code,
        },
        Command::Plugins => {
            let _ = write!(std::io::stdout(), "{}", plugin::catalog::list());
            ExitCode::SUCCESS
        }
        Command::Inspect { plugin } => match plugin::catalog::inspect(&plugin) {
            Ok(text) => {
                let _ = write!(std::io::stdout(), "{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        },
        Command::Graph { file } => match load_plan(&file, None) {
            Ok(plan) => {
                let _ = write!(std::io::stdout(), "{}", plan::render_dot(&plan));
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Bench {
            file,
            frames,
            warmup,
            rounds,
            check_frames,
            fps,
            latency_frames,
            json,
            spin_us,
            device,
            isolation,
        } => {
            let plan = match load_plan_with(&file, device, isolation) {
                Ok(p) => p,
                Err(code) => return code,
            };
            if let Err(code) = budget_check(&file, &plan::budget::needs(&plan), &plan::budget::has(), false) {
                return code;
            }
            if let Err(code) = this_machine_only(&file, &plan) {
                return code;
            }
            let args = bench::BenchArgs { frames, warmup, rounds, check_frames, fps, latency_frames, spin_us, json };
            bench::main(&plan, &args)
        }
        Command::Run {
            file,
            frames,
            in_process,
            report,
            quiet,
            spin_us,
            checksums,
            device,
            no_budget_check,
            metrics,
            metrics_linger,
            part_samples,
            part,
        } => {
            let plan = match load_plan(&file, device) {
                Ok(p) => p,
                Err(code) => return code,
            };
            if let Err(code) = budget_check(&file, &plan::budget::needs(&plan), &plan::budget::has(), no_budget_check) {
                return code;
            }
            // validate's plan says why stages run on the cpu without asking to (`auto` without a
            // CUDA driver); a run says it too.
            for line in plan.cpu_fallbacks() {
                tracing::info!("{line}");
            }
            agent::part::adopt_parent_death();
            let metrics = metrics.or_else(|| plan.metrics.clone());
            if plan.needs_agents().is_some() {
                if in_process {
                    eprintln!(
                        "{}: error: --in-process runs one machine's stages; this plan has stages on other hosts",
                        file.display()
                    );
                    return ExitCode::from(2);
                }
                let args = agent::coordinator::RunArgs {
                    frames,
                    report,
                    checksums,
                    live: !quiet,
                    metrics,
                    linger: metrics_linger.unwrap_or_default(),
                };
                return agent::coordinator::run(&plan, &args);
            }
            if in_process && metrics.is_some() {
                eprintln!(
                    "{}: error: metrics are served for runs of separate processes; --in-process is the reference run",
                    file.display()
                );
                return ExitCode::from(2);
            }
            let options = RunArgs {
                frames,
                in_process,
                report,
                live: !quiet,
                spin_us,
                checksums,
                metrics,
                linger: metrics_linger.unwrap_or_default(),
                part_samples,
                part,
            };
            run(&plan, &options)
        }
    }
}

/// What each host's agent says of itself (`validate --ask-hosts`).
fn agents_text(plan: &plan::Plan) -> String {
    use std::fmt::Write as _;
    let mut out = String::from("agents:\n");
    let answers = agent::control::ask(&plan.hosts, std::time::Duration::from_secs(2));
    for (host, answer) in plan.hosts.iter().zip(answers) {
        let _ = match answer {
            Ok(a) => writeln!(
                out,
                "  {}  up: gpuipc {} on {}, {} CUDA device(s)",
                host.name, a.version, a.hostname, a.cuda_devices
            ),
            Err(why) => writeln!(
                out,
                "  {}  not reachable at {}: {why} (start it there: gpuipc-host agent --name {} --listen {})",
                host.name, host.control, host.name, host.control
            ),
        };
    }
    out
}

/// A plan with stages on other hosts splits into hosts' parts (a link from another host into
/// this machine does not): say why not, as a plan error (exit 2).
fn splits(file: &Path, plan: &plan::Plan) -> Result<(), ExitCode> {
    if plan.needs_agents().is_none() {
        return Ok(());
    }
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string());
    match text.and_then(|t| plan::split::split(plan, &t).map(drop).map_err(|e| e.to_string())) {
        Ok(()) => Ok(()),
        Err(why) => {
            eprintln!("{}: error: {why}", file.display());
            Err(ExitCode::from(2))
        }
    }
}

/// `bench` measures one machine: a plan with stages on other hosts is refused (exit 2).
fn this_machine_only(file: &Path, plan: &plan::Plan) -> Result<(), ExitCode> {
    match plan.needs_agents() {
        None => Ok(()),
        Some(why) => {
            eprintln!("{}: error: {why}", file.display());
            Err(ExitCode::from(2))
        }
    }
}

struct RunArgs {
    frames: Option<u64>,
    in_process: bool,
    report: Option<PathBuf>,
    live: bool,
    spin_us: Option<u32>,
    checksums: Option<PathBuf>,
    metrics: Option<config::MetricsAddress>,
    linger: std::time::Duration,
    part_samples: bool,
    part: bool,
}

fn run(plan: &plan::Plan, args: &RunArgs) -> ExitCode {
    if let Some(dir) = &args.checksums
        && let Err(e) = std::fs::create_dir_all(dir)
    {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    // Bound before any stage starts: a port in use is the command's error, not the run's.
    let board = (args.metrics.is_some() || args.part_samples).then(|| Arc::new(metrics::Board::default()));
    if let Some(board) = &board {
        board.post(metrics::Sample { pipeline: plan.name.clone(), ..metrics::Sample::default() });
    }
    let endpoint = match (&args.metrics, &board) {
        (Some(address), Some(board)) => match metrics::server::Endpoint::start(address, board.clone()) {
            Ok(endpoint) => {
                tracing::info!("{}", endpoint.where_to_scrape());
                Some(endpoint)
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        },
        _ => None,
    };
    let samples = match &board {
        Some(board) if args.part_samples => {
            let (stop, stopped) = std::sync::mpsc::channel();
            Some((stop, agent::part::write_samples(board.clone(), stopped)))
        }
        _ => None,
    };
    let mut shutdown = None;
    let result = if args.in_process {
        let stop = Arc::new(AtomicBool::new(false));
        let claimed = supervisor::Shutdown::claim(|| {
            supervisor::STOP_SIGNALS
                .iter()
                .try_for_each(|&signal| signal_hook::flag::register(signal, stop.clone()).map(drop))
        });
        let _claimed = match claimed {
            Ok(((), claimed)) => claimed,
            Err(e) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        };
        supervisor::in_process::run(plan, args.frames.or(plan.frames), args.checksums.as_deref(), &stop)
    } else {
        let shutdown = shutdown.insert(match supervisor::Shutdown::install() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: cannot install signal handlers: {e}");
                return ExitCode::from(1);
            }
        });
        let stage_exe = match std::env::current_exe() {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: cannot find the gpuipc-host executable: {e}");
                return ExitCode::from(1);
            }
        };
        let options = supervisor::RunOptions {
            frames: args.frames,
            stage_exe,
            live: args.live,
            spin_us: args.spin_us,
            checksums: args.checksums.clone(),
            latency: None,
            pace_fps: None,
            metrics: board.clone(),
            part: args.part,
        };
        supervisor::run(plan, &options, shutdown).map_err(|e| e.to_string())
    };
    let report = result.inspect_err(|_| {
        if let Some(board) = &board {
            board.set_state(metrics::RunState::Failed);
        }
    });
    // The last sample, the run's final figures, goes before the run ends.
    if let Some((stop, writer)) = samples {
        let _ = stop.send(());
        let _ = writer.join();
    }
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}{}", supervisor::report::limit_hint(&e));
            return ExitCode::from(1);
        }
    };
    // A closed stdout (`run ... | head -1`) is not a failure of the run: the report file is
    // still written and the exit code still says how the run went.
    if !args.part_samples {
        let _ = writeln!(std::io::stdout(), "{}", report.render());
    }
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report).expect("the report serialises");
        if let Err(e) = std::fs::write(path, json) {
            eprintln!("error: cannot write the report to {}: {e}", path.display());
            return ExitCode::from(1);
        }
    }
    if let (Some(endpoint), Some(shutdown)) = (endpoint, &shutdown) {
        if !args.linger.is_zero() {
            tracing::info!(
                "serving the run's final metrics for {} more (a stop signal ends it)",
                config::format_duration(args.linger)
            );
            shutdown.wait(args.linger);
        }
        endpoint.stop();
    }
    if report.succeeded() { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
