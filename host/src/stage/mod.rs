//! The stage process: the host binary re-executed as `gpuipc-host __stage`. It receives its
//! setup over the inherited control socket, loads exactly one plugin, maps its links and runs
//! the frame loop.

mod error;
mod follow;
mod frame_loop;
pub mod gpu_lead;
mod inputs;
pub mod measure;
pub mod output;
mod replica;
pub mod tap;

use std::os::fd::OwnedFd;

use gpuipc_plugin_api::abi::{self, RawCreateContext, RawStr};

use std::sync::Arc;

use crate::control::{ControlSocket, FromStage, LinkMemoryWire, RingWire, StageSetup, ToStage};
use crate::gpu::Gpu;
use crate::link::backing::device::handshake;
use crate::link::wakes::{HeldWakes, Waiter};
use crate::link::{Consumer, FrameAccess, Producer, RingFds, RingMap, RingParams, StatsMap};
use crate::plugin::LoadedPlugin;

use crate::link::backing::{ReadEnd, WriteEnd, host::Host, staged::Staged};
pub use error::StageError;
pub use frame_loop::{FrameLoop, LoopEnd, only_sources_end, only_sources_wait};
pub use measure::now_ns;

/// The descriptor number the control socket has in a stage process.
pub const CONTROL_FD: i32 = 3;
/// Environment variable naming the host's pid, so a stage can tell it was orphaned.
pub const HOST_PID_ENV: &str = "GPUIPC_HOST_PID";

/// Entry of `gpuipc-host __stage`. Returns the process exit code.
pub fn main() -> i32 {
    if let Err(message) = die_with_host() {
        eprintln!("gpuipc stage: {message}");
        return 2;
    }
    close_on_exec_beyond_stdio();
    let socket = match control_socket() {
        Ok(socket) => socket,
        Err(message) => {
            eprintln!("gpuipc stage: {message}");
            return 2;
        }
    };
    let (setup, fds) = match socket.recv::<ToStage>() {
        Ok((ToStage::Setup(setup), fds)) => (*setup, fds),
        Ok((other, _)) => {
            eprintln!("gpuipc stage: expected setup, got {other:?}");
            return 2;
        }
        Err(e) => {
            eprintln!("gpuipc stage: {e}");
            return 2;
        }
    };
    let _span = tracing::info_span!("stage", name = %setup.stage).entered();
    let outcome = run(&setup, fds, &socket);
    let (message, code) = match outcome {
        Ok(()) => (FromStage::Finished, 0),
        Err(StageError::Aborted) => (FromStage::Aborted, 3),
        Err(e) => (FromStage::Failed { error: e.to_string(), gpu: e.gpu_failure() }, 1),
    };
    // The host may be gone already; the exit code still tells the story.
    match socket.send(&message, &[]) {
        Ok(()) => {}
        // The host closed it: an abort, where a stage not yet started learns of it this way.
        Err(crate::control::SocketError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => tracing::warn!("could not tell the host how this stage ended ({message:?}): {e}"),
    }
    code
}

/// Ask the kernel to kill this process when the host dies, then make sure the host did not
/// die before we asked.
fn die_with_host() -> Result<(), String> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("cannot set the parent-death signal: {e}"))?;
    let expected = std::env::var(HOST_PID_ENV).ok().and_then(|v| v.parse::<i32>().ok());
    let parent = rustix::process::getppid().map(|p| p.as_raw_nonzero().get());
    match expected {
        Some(pid) if parent != Some(pid) => Err("the host process is gone".into()),
        _ => Ok(()),
    }
}

/// Make every descriptor this process holds beyond 0, 1 and 2 close-on-exec, so that a
/// process a plugin starts (the `encode` sink's ffmpeg, the `video` source's decoder) gets
/// nothing of the stage's: not a descriptor the host inherited without the flag and passed on
/// (a pipe of whatever started the host, which a long-lived ffmpeg would hold open). The
/// control socket is made so in [`control_socket`], and what the stage opens or receives later
/// is close-on-exec already (std, `MFD_CLOEXEC`, `MSG_CMSG_CLOEXEC`). Run first, while the
/// process has one thread; where /proc cannot be read, only the control socket is.
fn close_on_exec_beyond_stdio() {
    let fds: Vec<i32> = match std::fs::read_dir("/proc/self/fd") {
        Ok(dir) => dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).filter(|&fd| fd > 2).collect(),
        Err(e) => {
            tracing::warn!("cannot list this process's descriptors to make them close-on-exec: {e}");
            return;
        }
    };
    for fd in fds {
        match rustix::io::fcntl_setfd(unsafe_borrow(fd), rustix::io::FdFlags::CLOEXEC) {
            // The listing's own descriptor, closed by now.
            Ok(()) | Err(rustix::io::Errno::BADF) => {}
            Err(e) => tracing::warn!("cannot make descriptor {fd} close-on-exec: {e}"),
        }
    }
}

/// The control socket on [`CONTROL_FD`], made close-on-exec: the host maps it there with
/// `dup2`, which clears the flag, and a process a plugin starts must not hold the stage's end
/// of it (it would outlive the stage and keep the host from seeing it gone).
fn control_socket() -> Result<ControlSocket, String> {
    use std::os::fd::FromRawFd;
    if rustix::io::fcntl_getfd(unsafe_borrow(CONTROL_FD)).is_err() {
        return Err(format!("no control socket on fd {CONTROL_FD}; this command is started by `gpuipc-host run`"));
    }
    #[allow(unsafe_code)]
    // SAFETY: fd 3 was mapped into this process by the host for exactly this purpose and
    // nothing else in the process owns it (checked open just above).
    let fd = unsafe { OwnedFd::from_raw_fd(CONTROL_FD) };
    rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| format!("cannot make the control socket on fd {CONTROL_FD} close-on-exec: {e}"))?;
    Ok(ControlSocket::from_fd(fd))
}

fn unsafe_borrow(fd: i32) -> std::os::fd::BorrowedFd<'static> {
    #[allow(unsafe_code)]
    // SAFETY: only used at once for fcntl on the descriptor's flags (whether it is open, or
    // close-on-exec): nothing is read, written or closed through it, and an invalid
    // descriptor makes fcntl fail with EBADF, which callers expect.
    unsafe {
        std::os::fd::BorrowedFd::borrow_raw(fd)
    }
}

/// Log lines from plugins arrive here and go to this process's log.
pub extern "C" fn plugin_log(level: u32, message: RawStr) {
    #[allow(unsafe_code)]
    // SAFETY: the plugin passes a string valid for the duration of the call.
    let text = unsafe { message.to_string_lossy() };
    match level {
        abi::LOG_ERROR => tracing::error!(target: "plugin", "{text}"),
        abi::LOG_WARN => tracing::warn!(target: "plugin", "{text}"),
        abi::LOG_INFO => tracing::info!(target: "plugin", "{text}"),
        _ => tracing::debug!(target: "plugin", "{text}"),
    }
}

/// A failure of a cuda stage whose context has faulted is that fault, whatever reported it
/// first: a plugin's own CUDA call reports it in words only.
fn with_gpu_fault(e: StageError, gpu: Option<&Gpu>) -> StageError {
    match (&e, e.gpu_error(), gpu.and_then(Gpu::fault)) {
        (StageError::Aborted, _, _) | (_, Some(_), _) | (_, _, None) => e,
        (_, None, Some(fault)) => StageError::Faulted { fault, error: Box::new(e) },
    }
}

/// How often a cuda stage looks for a fault of its context while it may make no CUDA call.
const FAULT_LOOK: std::time::Duration = std::time::Duration::from_millis(20);

/// A fault of the stage's context is seen by its next CUDA call, but a stage waiting in a ring
/// (for a slot the consumer its fault stalled will never free) makes none: it waited until a
/// watchdog fired (30 s by default) while its neighbours, stalled on events it will never
/// record, waited with it. A thread looks every 20 ms; on a fault it tells the host how this
/// stage failed, as the stage would, and kills the process (what it holds is the host's to
/// reclaim, as after any kill; the host judges it by the message). It stops once the stage's
/// GPU is dropped.
fn watch_for_gpu_fault(gpu: std::sync::Weak<Gpu>, socket: &ControlSocket) -> Result<(), StageError> {
    let socket = socket.try_clone().map_err(setup_error)?;
    std::thread::Builder::new()
        .name("gpu-fault-watch".into())
        .spawn(move || {
            loop {
                std::thread::sleep(FAULT_LOOK);
                let Some(gpu) = gpu.upgrade() else { return };
                if let Some(fault) = gpu.fault() {
                    let failed = StageError::from(fault);
                    tracing::debug!("the GPU faulted while this stage made no CUDA call: {failed}");
                    let _ =
                        socket.send(&FromStage::Failed { error: failed.to_string(), gpu: failed.gpu_failure() }, &[]);
                    // No destructor, no exit handler: either could wait on the faulted GPU.
                    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
                }
            }
        })
        .map(drop)
        .map_err(setup_error)
}

fn setup_error(what: impl std::fmt::Display) -> StageError {
    StageError::Setup(what.to_string())
}

fn run(setup: &StageSetup, fds: Vec<OwnedFd>, socket: &ControlSocket) -> Result<(), StageError> {
    let gpu = match setup.domain.as_str() {
        "cuda" => Some(Arc::new(Gpu::open(setup.device.unwrap_or(0))?)),
        _ => None,
    };
    let links = map_links(setup, fds)?;
    let (input_ends, output_end) = link_ends(setup, socket, gpu.as_ref(), &links.consumers, links.producer.as_ref())?;
    let plugin = LoadedPlugin::load(&setup.plugin_path).map_err(setup_error)?;
    let instance = create_instance(setup, &plugin, &links.consumers, gpu.as_ref())?;
    // The end before the producer: see `Output::Ring`.
    let producer = output_end.zip(links.producer);
    let output = output::Output::new(producer, setup.output.as_ref().map(|o| o.format.into()), gpu.as_ref())?;
    if let Some(gpu) = &gpu {
        watch_for_gpu_fault(Arc::downgrade(gpu), socket)?;
    }
    socket.send(&FromStage::Ready, &[]).map_err(setup_error)?;
    match socket.recv::<ToStage>() {
        Ok((ToStage::Start, _)) => {}
        Ok((other, _)) => return Err(setup_error(format!("expected start, got {other:?}"))),
        Err(e) => return Err(setup_error(e)),
    }
    run_frames(setup, Some(socket), &links.stats, instance, links.consumers, input_ends, gpu, output, links.replica)
}

/// `run --in-process`: one stage as a thread of the host, over the same rings and the same
/// frame loop as a stage process, so the reference run exercises the same policies and
/// fan-in alignment. The cpu domain only: every end is in host memory. Each thread loads the
/// plugin for itself (the loader shares the library), as a stage process does.
pub fn run_in_thread(setup: &StageSetup, fds: Vec<OwnedFd>) -> Result<(), StageError> {
    let _span = tracing::info_span!("stage", name = %setup.stage).entered();
    if setup.domain != "cpu" {
        return Err(setup_error("--in-process runs the cpu domain only"));
    }
    let links = map_links(setup, fds)?;
    let plugin = LoadedPlugin::load(&setup.plugin_path).map_err(setup_error)?;
    let instance = create_instance(setup, &plugin, &links.consumers, None)?;
    let input_ends = links.consumers.iter().map(|_| Box::new(Host) as Box<dyn ReadEnd>).collect();
    let producer = links.producer.map(|p| (Box::new(Host) as Box<dyn WriteEnd>, p));
    let output = output::Output::new(producer, setup.output.as_ref().map(|o| o.format.into()), None)?;
    run_frames(setup, None, &links.stats, instance, links.consumers, input_ends, None, output, links.replica)
}

/// A stage's statistics block and its ends of its rings, mapped and checked against the plan.
struct MappedLinks {
    stats: Arc<StatsMap>,
    consumers: Vec<Consumer>,
    producer: Option<Producer>,
    /// For one of a stage's replicas: its place in their work queue.
    replica: Option<replica::Replica>,
}

/// Map what `fds` hold, in the order the setup message says: the stats block, one ring per
/// input, the output ring, and for a replica its queue block. A ring whose frames live in host
/// memory is two descriptors, its control block and its data memfd (an input's open for
/// reading only, mapped read-only and closed: see [`RingMap::open_checked`]); a GPU ring is one.
fn map_links(setup: &StageSetup, fds: Vec<OwnedFd>) -> Result<MappedLinks, StageError> {
    let ring_fds = |memory: LinkMemoryWire| 1 + (memory == LinkMemoryWire::Host) as usize;
    let expected = 1
        + setup.inputs.iter().map(|input| ring_fds(input.memory)).sum::<usize>()
        + setup.output.as_ref().filter(|o| o.link.is_some()).map_or(0, |o| ring_fds(o.memory))
        + setup.replica.is_some() as usize;
    if fds.len() != expected {
        return Err(setup_error(format!("received {} descriptors, expected {expected}", fds.len())));
    }
    let mut fds = fds.into_iter();
    let stats =
        Arc::new(StatsMap::open(fds.next().expect("counted")).map_err(|e| setup_error(format!("stats block: {e}")))?);
    let waiter = Waiter::with_pulse(setup.tuning.spin_us, stats.clone());
    let waiter = match setup.tuning.wake_batch as usize {
        batch if batch > 1 => waiter.holding_wakes(HeldWakes::new(batch)),
        _ => waiter,
    };
    let mut rings = Vec::new();
    for input in &setup.inputs {
        rings.push(open_ring(&mut fds, &input.ring, input.memory, FrameAccess::Read)?);
    }
    let output_ring = match &setup.output {
        Some(o) if o.link.is_some() => {
            let wire = o.ring.as_ref().ok_or_else(|| setup_error("an output link without its ring"))?;
            Some(open_ring(&mut fds, wire, o.memory, FrameAccess::Write)?)
        }
        _ => None,
    };
    let queue = match &setup.replica {
        Some(r) => Some(Arc::new(
            crate::link::queue::QueueMap::open(fds.next().expect("counted"), r.count)
                .map_err(|e| setup_error(format!("queue block: {e}")))?,
        )),
        None => None,
    };
    let producer = match (output_ring, &setup.replica) {
        (Some(ring), Some(r)) => {
            let part = (r.index * r.slots_each) as usize..((r.index + 1) * r.slots_each) as usize;
            Some(Producer::with_slots(ring, waiter.clone(), part).map_err(setup_error)?)
        }
        (Some(ring), None) => Some(Producer::new(ring, waiter.clone())),
        (None, _) => None,
    };
    // Waiting for inputs, a stage woken ahead of a frame wakes its own consumers ahead too.
    let input_waiter = match wake_ahead(&setup.tuning) {
        Some(w) => waiter
            .clone()
            .waking_ahead(w.spin, w.idle, producer.as_ref().map(Producer::wake_ahead_fn))
            .waking_before_due(w.before_due),
        None => waiter.clone(),
    };
    let mut consumers = Vec::new();
    for (input, ring) in setup.inputs.iter().zip(rings) {
        consumers.push(
            match &queue {
                Some(q) => Consumer::new_shared(ring, input.consumer, input_waiter.clone(), Some(q.clone())),
                None => Consumer::new(ring, input.consumer, input_waiter.clone()),
            }
            .map_err(setup_error)?,
        );
    }
    let replica = match (queue, &setup.replica) {
        (Some(queue), Some(r)) => Some(replica::Replica {
            queue,
            index: r.index,
            pid: std::process::id(),
            waiter,
            has_turn: setup.output.as_ref().is_some_and(|o| o.link.is_some()),
        }),
        _ => None,
    };
    Ok(MappedLinks { stats, consumers, producer, replica })
}

/// Waking ahead (see [`crate::link::wait::Waiter::waking_ahead`]) as the stage's tuning has
/// it: how long a stage woken ahead of a frame spins for it, how long a sleep (or a source's
/// gap between frames) counts as idle, and how long before a steadily paced frame is due it
/// wakes; `None` where the stage does not wake ahead.
#[derive(Debug, Clone, Copy)]
pub struct WakeAhead {
    pub spin: std::time::Duration,
    pub idle: std::time::Duration,
    pub before_due: std::time::Duration,
}

pub fn wake_ahead(tuning: &crate::plan::tuning::Tuning) -> Option<WakeAhead> {
    let us = std::time::Duration::from_micros;
    (tuning.wake_ahead_us > 0).then(|| WakeAhead {
        spin: us(tuning.wake_ahead_us),
        idle: us(tuning.wake_idle_us),
        before_due: us(tuning.wake_before_due_us),
    })
}

fn create_instance<'p>(
    setup: &StageSetup,
    plugin: &'p LoadedPlugin,
    consumers: &[Consumer],
    gpu: Option<&Arc<Gpu>>,
) -> Result<crate::plugin::Instance<'p>, StageError> {
    let input_formats: Vec<_> = consumers.iter().map(|c| c.ring().format()).collect();
    let output_format = setup.output.as_ref().map(|o| o.format.into());
    create_plugin_instance(&setup.stage, &setup.params, plugin, &input_formats, output_format, gpu)
}

/// The plugin's instance for stage `stage`, in the cuda domain on `gpu`'s context and stream.
pub fn create_plugin_instance<'p>(
    stage: &str,
    params: &str,
    plugin: &'p LoadedPlugin,
    input_formats: &[gpuipc_plugin_api::FrameFormat],
    output_format: Option<gpuipc_plugin_api::FrameFormat>,
    gpu: Option<&Arc<Gpu>>,
) -> Result<crate::plugin::Instance<'p>, StageError> {
    let cache_dir = std::env::var("GPUIPC_KERNEL_CACHE").unwrap_or_default();
    let ctx = RawCreateContext {
        stage: RawStr::from_str(stage),
        domain: if gpu.is_some() { abi::DOMAIN_CUDA } else { abi::DOMAIN_CPU },
        device_ordinal: gpu.map_or(-1, |g| g.ordinal() as i32),
        cuda_context: gpu.map_or(std::ptr::null_mut(), |g| g.context_ptr()),
        cuda_stream: gpu.map_or(std::ptr::null_mut(), |g| g.stream_ptr()),
        kernel_cache_dir: RawStr::from_str(&cache_dir),
        log: Some(plugin_log),
    };
    plugin.create(params, input_formats, output_format, &ctx).map_err(|e| StageError::Plugin {
        during: "create",
        frame: None,
        error: e,
    })
}

/// The frame loop, from where the stage stands (a restarted stage carries on), to its end.
#[allow(clippy::too_many_arguments)]
fn run_frames(
    setup: &StageSetup,
    socket: Option<&ControlSocket>,
    stats: &StatsMap,
    instance: crate::plugin::Instance<'_>,
    consumers: Vec<Consumer>,
    input_ends: Vec<Box<dyn ReadEnd>>,
    gpu: Option<Arc<Gpu>>,
    output: output::Output,
    replica: Option<replica::Replica>,
) -> Result<(), StageError> {
    let tap = match &setup.checksums {
        Some(dir) => Some(tap::Tap::create(dir, &setup.stage, setup.incarnation > 0).map_err(StageError::Setup)?),
        None => None,
    };
    let first_seq = resume_seq(stats, &output);
    // Frames lost in earlier processes used up their index too: a plugin that failed at
    // frame N sees N + 1 next.
    let first_index = {
        let s = stats.get();
        s.frames.load(std::sync::atomic::Ordering::Relaxed) + s.lost.load(std::sync::atomic::Ordering::Relaxed)
    };
    let follow = socket.and_then(|s| follow::Follower::new(s, setup, stats, &input_ends, &output));
    let reads_output = setup.output.as_ref().is_some_and(|o| o.link.is_some());
    let latency = match &setup.latency {
        Some(dir) if !reads_output => Some(measure::LatencyLog::new(dir, &setup.stage, gpu.as_ref())?),
        _ => None,
    };
    let cpu = if socket.is_some() { measure::CpuClock::process() } else { measure::CpuClock::thread() };
    let pace = setup.pace_fps.filter(|_| setup.inputs.is_empty()).map(measure::Pace::new);
    let held_wakes = consumers.iter().find_map(|c| c.held_wakes()).or_else(|| output.held_wakes()).cloned();
    let mut frame_loop = FrameLoop {
        held_wakes,
        follow,
        instance,
        inputs: consumers,
        input_ends,
        gpu: gpu.clone(),
        output,
        stats,
        frames: setup.frames,
        first_seq,
        first_index,
        tap,
        cpu,
        gpu_memory: gpu.clone().map(measure::GpuMemory::new),
        latency,
        pace,
        phases: measure::PhaseClock::from_env(&setup.stage),
        nvtx: measure::FrameRanges::from_env(&setup.stage, gpu.is_some()),
        replica,
        wake_ahead_after_idle: wake_ahead(&setup.tuning).map(|w| w.idle.as_nanos() as u64),
        last_end_ns: 0,
        lead: match &gpu {
            Some(g) => gpu_lead::GpuLead::new(g, setup.tuning.gpu_lead as usize)?,
            None => None,
        },
    };
    let end = frame_loop.run().map_err(|e| with_gpu_fault(e, gpu.as_deref()));
    // Let the GPU finish what was enqueued before the context goes (consumers hold their own
    // mappings of our memory, which outlive us).
    if let Some(gpu) = &gpu
        && let Err(e) = gpu.synchronize()
        && end.is_ok()
    {
        return Err(e.into());
    }
    drop(frame_loop);
    match end? {
        LoopEnd::EndOfStream | LoopEnd::FrameCount | LoopEnd::Stopped | LoopEnd::SourceEnded => Ok(()),
    }
}

/// Map a ring, taking its descriptors from `fds` (counted), and check its header and memory
/// against what the plan says it is.
fn open_ring(
    fds: &mut impl Iterator<Item = OwnedFd>,
    wire: &RingWire,
    memory: LinkMemoryWire,
    access: FrameAccess,
) -> Result<RingMap, StageError> {
    let host_data = memory == LinkMemoryWire::Host;
    let fds = RingFds { control: fds.next().expect("counted"), data: host_data.then(|| fds.next().expect("counted")) };
    let format: gpuipc_plugin_api::FrameFormat = wire.format.into();
    let layout = gpuipc_plugin_api::FrameLayout::for_format(format)
        .ok_or_else(|| setup_error(format!("link {}: format {format} has no layout", wire.name)))?;
    let expected = RingParams { format, layout, depth: wire.depth, policies: wire.policies.clone(), host_data };
    RingMap::open_checked(fds, &expected, &wire.name, access).map_err(setup_error)
}

/// Where a source carries on: after the last frame it published (the ring knows) or, with
/// no ring, the last it finished.
fn resume_seq(stats: &StatsMap, output: &output::Output) -> u64 {
    let done = stats.get().last_seq_plus_one.load(std::sync::atomic::Ordering::Acquire);
    output.next_seq().map_or(done, |next| next.max(done))
}

/// A stage's way to each input's frames, and to its output ring's slots.
type LinkEnds = (Vec<Box<dyn ReadEnd>>, Option<Box<dyn WriteEnd>>);

/// How each input is read and the output written: in place for a cpu stage; for a cuda
/// stage, staged copies on a host ring, or the GPU objects exchanged through the host.
fn link_ends(
    setup: &StageSetup,
    socket: &ControlSocket,
    gpu: Option<&Arc<Gpu>>,
    consumers: &[Consumer],
    producer: Option<&Producer>,
) -> Result<LinkEnds, StageError> {
    let mut inputs: Vec<Option<Box<dyn ReadEnd>>> = Vec::new();
    let mut halves = Vec::new();
    for (input, consumer) in setup.inputs.iter().zip(consumers) {
        inputs.push(match (gpu, input.memory) {
            (None, LinkMemoryWire::Host) => Some(Box::new(Host)),
            (Some(g), LinkMemoryWire::Host) => Some(Box::new(Staged::reader(g, consumer.ring())?)),
            (Some(g), LinkMemoryWire::Device { .. }) => {
                halves.push(handshake::export_input(g, socket, input.link, input.consumer, consumer.ring().depth())?);
                None
            }
            (None, LinkMemoryWire::Device { .. }) => return Err(setup_error("a cpu stage cannot read a GPU link")),
        });
    }
    let mut output: Option<Box<dyn WriteEnd>> = match (setup.output.as_ref(), producer, gpu) {
        (Some(o), Some(p), Some(g)) => match o.memory {
            LinkMemoryWire::Host => Some(Box::new(Staged::writer(g, p.ring())?)),
            LinkMemoryWire::Device { transport, device, pushed } => {
                let link = o.link.expect("a producer has a link");
                // A pushed ring lives on its consumers' GPU; others on this stage's (each
                // replica's part on its own).
                let home = if pushed { device } else { g.ordinal() };
                let at = handshake::SlotsAt { transport, home };
                halves.push(handshake::export_output(g, socket, link, p.ring(), p.slots(), at, p.generation())?);
                None
            }
        },
        (Some(_), Some(_), None) => Some(Box::new(Host)),
        _ => None,
    };
    if let Some(g) = gpu
        && !halves.is_empty()
    {
        let (imported, device_output) = handshake::complete(g, socket, halves)?;
        for (link, mut end) in imported {
            let k = setup.inputs.iter().position(|i| i.link == link).expect("imports match exported inputs");
            end.ready_spin = std::time::Duration::from_micros(setup.tuning.ready_spin_us);
            // Frames on another GPU are copied in first where the tuning says a copy wins.
            let ring = consumers[k].ring();
            if let LinkMemoryWire::Device { device, .. } = setup.inputs[k].memory
                && device != g.ordinal()
                && ring.layout().total_bytes >= setup.tuning.peer_copy_min_bytes
            {
                end.copy_in(ring, setup.tuning.peer_copy_lanes as usize)?;
            }
            inputs[k] = Some(Box::new(end));
        }
        if let Some(mut end) = device_output {
            // A ring on the consumers' GPU: frames are made here and pushed into it.
            if let (Some(o), Some(p)) = (setup.output.as_ref(), producer)
                && let LinkMemoryWire::Device { pushed: true, .. } = o.memory
            {
                end.copy_out(p.ring(), setup.tuning.peer_copy_lanes as usize)?;
            }
            output = Some(Box::new(end));
        }
    }
    Ok((inputs.into_iter().map(|e| e.expect("every input end is set up")).collect(), output))
}
