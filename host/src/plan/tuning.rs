//! Every performance knob of a stage, decided in one place: what the pipeline file says, then
//! the command line, then the documented `GPUIPC_*` environment variables (read here and
//! nowhere else), over defaults chosen by the stage's domain and frame sizes. The result,
//! [`Tuning`], travels to the stage in its setup, is printed by `validate` where something set
//! it, and is written in `run --report` and `bench --json` (docs/pipeline-file.md,
//! "Environment variables", has the table).

use serde::{Deserialize, Serialize};

use super::{CUDA_SPIN_US, DEFAULT_SPIN_US, LARGE_FRAME_BYTES, LinkMemory, LinkPlan, Plan};
use gpuipc_plugin_api::Domain;

/// A stage's knobs, as decided for it. Times in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tuning {
    /// How long a wait spins before it sleeps (`spin_us`).
    pub spin_us: u32,
    /// How many wake-ups of sleeping neighbours the stage sends at once: 4 for cuda stages,
    /// whose `process` only enqueues work, 1 (each at once) for cpu stages, which would hold a
    /// neighbour for a whole frame's work (`link::wait::HeldWakes`).
    pub wake_batch: u32,
    /// Waking ahead (`link::wait::Waiter::waking_ahead`): a stage woken from idle spins this
    /// long for its frame (0: it does not wake ahead). Cuda stages, whose hosts otherwise add
    /// a futex wake-up to every hop of a frame through an idle pipeline (measured on an H100
    /// at 1,000 frames/s, docs/benchmarks-history.md); cpu stages spend milliseconds on a large frame,
    /// which a wake-up does not change.
    pub wake_ahead_us: u64,
    /// How long a sleep (or a source's gap between frames) counts as idle for waking ahead: 500
    /// (with 100, stalls of a busy pipeline counted as idle and 1080p lost frames/s).
    pub wake_idle_us: u64,
    /// How long before a frame of a steady, idle pace is due a stage waiting for it wakes.
    pub wake_before_due_us: u64,
    /// The most frames a cuda stage's host runs ahead of its GPU (0: no bound): 64 for a stage
    /// with large frames, none for others (`stage::gpu_lead` has the measurements).
    pub gpu_lead: u32,
    /// How long a consumer of a GPU ring polls a frame's `ready` event on its host before it
    /// leaves the wait to its GPU: 200 where its GPU inputs' frames are under
    /// [`LARGE_FRAME_BYTES`], 0 (the GPU waits) where one is larger, whose kernels hide the
    /// GPU wait's stalls (`link::backing::device`).
    pub ready_spin_us: u64,
    /// A cuda stage's input whose ring is on another GPU is copied into this stage's GPU by
    /// the copy engines before its kernels read it, for frames of at least this many bytes
    /// (`link::backing::device::CopyIn`); smaller ones are read over peer access in place.
    pub peer_copy_min_bytes: u64,
    /// How many streams such copies run on, the slots' in turn (copies of consecutive frames
    /// side by side).
    pub peer_copy_lanes: u32,
    /// The most rows a row kernel of this stage works on at once (0: no bound): the grid
    /// `cuda::row_grid` gives its plugin's kernels, which the host passes the stage's process
    /// in [`gpuipc_plugin_api::cuda::KERNEL_ROWS_ENV`]. [`PACED_KERNEL_ROWS`] for a cuda stage
    /// on a GPU whose large frames cross to another GPU, none for others.
    pub kernel_rows: u32,
}

/// Knobs set from outside the pipeline file: the command line's, then the environment's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `run` / `bench --spin-us` (over the file's `spin_us`; no variable sets it).
    pub spin_us: Option<u32>,
    pub wake_batch: Option<u32>,
    pub wake_ahead_us: Option<u64>,
    pub wake_idle_us: Option<u64>,
    pub wake_before_due_us: Option<u64>,
    pub gpu_lead: Option<u32>,
    pub ready_spin_us: Option<u64>,
    pub peer_copy_min_bytes: Option<u64>,
    pub peer_copy_lanes: Option<u32>,
    /// `GPUIPC_PEER_PUSH_MIN_BYTES` ([`Overrides::peer_push_min_bytes`]).
    pub peer_push_min_bytes: Option<u64>,
    pub kernel_rows: Option<u32>,
}

/// The environment variables that set knobs, with the field each sets (the docs' table lists
/// the same names; `validate` names the one that set a value).
pub const VARIABLES: [&str; 10] = [
    "GPUIPC_WAKE_BATCH",
    "GPUIPC_WAKE_AHEAD_US",
    "GPUIPC_WAKE_AHEAD_IDLE_US",
    "GPUIPC_WAKE_BEFORE_DUE_US",
    "GPUIPC_GPU_LEAD",
    "GPUIPC_READY_SPIN_US",
    "GPUIPC_PEER_COPY_MIN_BYTES",
    "GPUIPC_PEER_COPY_LANES",
    "GPUIPC_PEER_PUSH_MIN_BYTES",
    gpuipc_plugin_api::cuda::KERNEL_ROWS_ENV,
];

impl Overrides {
    /// The command line's `spin_us`, and the environment's knobs. A variable that does not
    /// parse as a number is ignored, as it always was.
    pub fn from_env(spin_us: Option<u32>) -> Overrides {
        Overrides::from_vars(spin_us, |name| std::env::var(name).ok())
    }

    fn from_vars(spin_us: Option<u32>, var: impl Fn(&str) -> Option<String>) -> Overrides {
        let number = |name: &str| var(name).and_then(|v| v.parse::<u64>().ok());
        let small = |name: &str| number(name).and_then(|v| u32::try_from(v).ok());
        Overrides {
            spin_us,
            wake_batch: small(VARIABLES[0]),
            wake_ahead_us: number(VARIABLES[1]),
            wake_idle_us: number(VARIABLES[2]),
            wake_before_due_us: number(VARIABLES[3]),
            gpu_lead: small(VARIABLES[4]),
            ready_spin_us: number(VARIABLES[5]),
            peer_copy_min_bytes: number(VARIABLES[6]),
            peer_copy_lanes: small(VARIABLES[7]),
            peer_push_min_bytes: number(VARIABLES[8]),
            kernel_rows: small(VARIABLES[9]),
        }
    }

    /// From which frame size a GPU ring whose consumers are all on one other GPU than its
    /// producer lives on theirs, the producer's copy engines pushing each frame into it
    /// (`plan::domain`); smaller frames' rings stay on the producer's GPU (its consumers copy
    /// the frames in, or read them in place). A link's decision, made for the whole plan, not
    /// a stage's knob: [`PEER_PUSH_MIN_BYTES`] unless `GPUIPC_PEER_PUSH_MIN_BYTES` says.
    pub fn peer_push_min_bytes(&self) -> u64 {
        self.peer_push_min_bytes.unwrap_or(PEER_PUSH_MIN_BYTES)
    }

    /// What was set from outside the file, as `validate` says it.
    pub fn describe(&self) -> Vec<String> {
        let mut set = Vec::new();
        if let Some(us) = self.spin_us {
            set.push(format!("spin_us = {us} (command line)"));
        }
        let vars = [
            self.wake_batch.map(u64::from),
            self.wake_ahead_us,
            self.wake_idle_us,
            self.wake_before_due_us,
            self.gpu_lead.map(u64::from),
            self.ready_spin_us,
            self.peer_copy_min_bytes,
            self.peer_copy_lanes.map(u64::from),
            self.peer_push_min_bytes,
            self.kernel_rows.map(u64::from),
        ];
        for (name, value) in VARIABLES.iter().zip(vars) {
            if let Some(v) = value {
                set.push(format!("{name}={v}"));
            }
        }
        set
    }
}

const CUDA_WAKE_BATCH: u32 = 4;
const CUDA_WAKE_AHEAD_US: u64 = 200;
const WAKE_IDLE_US: u64 = 500;
const WAKE_BEFORE_DUE_US: u64 = 150;
/// The lead for a stage whose frames (any input or its output) are large (4K RGB and up): 64
/// frames is more than a millisecond of GPU work queued there, far more than a sleeping host
/// needs to wake and enqueue the next frames. On an H100 it took a 4K chain's host CPU from
/// 156–171 % to 108 % of a core, for 3–4 % of its frames/s. Smaller frames get no bound: there
/// it cost 5–9 % of the frames/s (1080p, 720p, 256x256) and saved little CPU, except on long
/// chains (an 8-stage 1080p chain: 636 % -> 269 % for 3 % of its frames/s), where
/// `GPUIPC_GPU_LEAD=64` is a choice for a machine short of cores (docs/benchmarks-history.md).
const LARGE_FRAMES_LEAD: u32 = 64;
/// A consumer of frames under [`LARGE_FRAME_BYTES`] polls a `ready` event on its host this long
/// before it leaves the wait to its GPU. On an H100 under MPS, waiting on the host took an
/// 8-stage 1080p chain from 17,023 to 19,978 frames/s (87.9 to 104.0 % of one process), the
/// same chain at 720p from 19,896 to 24,684 and 1080p generator → rgb-process → yuv420 from
/// 54,066 to 60,478, for most of a core more in the last stage (docs/benchmarks-history.md). Larger
/// frames keep the GPU's wait: their kernels hide its stalls (a 4K chain ran at 101 % of one
/// process with it) and the 4K host CPU stays low.
const SMALL_FRAMES_READY_SPIN_US: u64 = 200;
/// Frames from another GPU of at least this many bytes are copied in by the copy engines
/// before the stage's kernels read them: every size, as measured on two H100s (a split 4K
/// chain 11,604-11,872 frames/s copied in, 10,098-10,152 read in place; 1080p even; a lone
/// link into a last stage 13,619 copied in on two streams, 13,381 read in place:
/// docs/benchmarks.md, "Two GPUs").
const PEER_COPY_MIN_BYTES: u64 = 0;
/// Streams the copies from another GPU run on, the slots' in turn: on two H100s joined by
/// NVLink a 4K chain split cuda:0 -> cuda:1 -> cuda:0 made 11,604-11,872 frames/s with 2
/// against 10,760-10,775 with 1 and 10,098-10,152 reading in place (docs/benchmarks.md, "Two
/// GPUs").
const PEER_COPY_LANES: u32 = 2;
/// Rings of frames this large (4K RGB and up) are pushed into by their producer's copy
/// engines where every consumer is on one other GPU: on two H100s joined by NVLink a 4K chain
/// split cuda:0 -> cuda:1 -> cuda:0 made 12,537-12,587 frames/s pushed against 11,627-11,635
/// copied in by the consumers (82 % against 76 % of doctor's ceiling), a lone link into a last
/// stage 13,681-13,771 against 13,359-13,406, and two such links both ways 12,115-12,263
/// against 11,300-11,350; the producers' kernels writing over the link made 12,132-12,154. A
/// copy engine writing across NVLink moved 376-377 GB/s one way and 372 both ways at once,
/// reading 353-358 and 343-351. At 1080p, where the link is not the bound, the same chain made
/// 31,024-33,943 pushed against 34,565-34,638 copied in (docs/benchmarks.md, "Two GPUs").
const PEER_PUSH_MIN_BYTES: u64 = LARGE_FRAME_BYTES;
/// The rows a row kernel works on at once on a GPU whose frames of [`LARGE_FRAME_BYTES`] or
/// more cross to another GPU (pushed, copied in, or read in place). A kernel launched one
/// block row a row takes all of its GPU's memory bandwidth while it runs, and the copy
/// engines moving frames over the link starve meanwhile; at 64 rows a time the kernels take
/// longer but leave the copies their share. On two H100s joined by NVLink a 4K chain split
/// cuda:0 -> cuda:1 -> cuda:0 made 13,355-13,433 frames/s pushed (87.5-88.0 % of doctor's
/// ceiling) against 12,411-12,532 unpaced (81-82 %), copied in 12,755-12,801 against
/// 11,619-11,679, and two links both ways 13,185-13,338 against 12,219-12,259; 48 to 96 rows
/// did about as well, 33 and 132 worse. On one GPU the same bound cost the chain 27 %
/// (17,175-17,183 frames/s against 23,590-23,832), so only stages beside such a link are
/// paced, and only for frames this large: at 1080p the link is not the bound and pacing gained
/// nothing (docs/benchmarks.md, "Kernels paced beside the link").
pub const PACED_KERNEL_ROWS: u32 = 64;

/// What a stage's defaults depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Facts {
    cuda: bool,
    /// Any of its frames (inputs, output) is at least [`LARGE_FRAME_BYTES`].
    large_frames: bool,
    /// Any of its inputs on a GPU ring is.
    large_gpu_inputs: bool,
    /// On a GPU that frames of at least [`LARGE_FRAME_BYTES`] cross to or from another GPU
    /// ([`gpus_crossed_by_large_frames`]; counts for a cuda stage only).
    beside_large_crossing: bool,
}

impl Tuning {
    /// Stage `stage`'s knobs in `plan`, with `overrides` over the file's and the defaults.
    pub fn resolve(plan: &Plan, stage: usize, overrides: &Overrides) -> Tuning {
        let s = &plan.stages[stage];
        let input_bytes = |gpu_only: bool| {
            s.inputs
                .iter()
                .filter(move |i| !gpu_only || matches!(plan.links[i.link].memory, LinkMemory::Device { .. }))
                .map(|i| plan.links[i.link].layout.total_bytes)
        };
        // A stage's output counts whether anyone reads it or not (its frames are made anyway).
        let output_bytes =
            s.output.as_ref().and_then(|o| gpuipc_plugin_api::FrameLayout::for_format(o.format)).map(|l| l.total_bytes);
        let crossed = gpus_crossed_by_large_frames(plan);
        // A cuda stage without a device number runs on cuda:0, as its links are planned.
        let devices = match s.devices() {
            none if none.is_empty() => vec![s.device.unwrap_or(0)],
            devices => devices,
        };
        let facts = Facts {
            cuda: s.domain == Domain::Cuda,
            large_frames: input_bytes(false).chain(output_bytes).any(|b| b >= LARGE_FRAME_BYTES),
            large_gpu_inputs: input_bytes(true).any(|b| b >= LARGE_FRAME_BYTES),
            beside_large_crossing: devices.into_iter().any(|d| crossed.contains(&(s.host, d))),
        };
        Tuning::decide(facts, plan.spin_us, overrides)
    }

    fn decide(f: Facts, file_spin_us: Option<u32>, o: &Overrides) -> Tuning {
        Tuning {
            spin_us: o.spin_us.or(file_spin_us).unwrap_or(if f.cuda { CUDA_SPIN_US } else { DEFAULT_SPIN_US }),
            wake_batch: o.wake_batch.unwrap_or(if f.cuda { CUDA_WAKE_BATCH } else { 1 }),
            wake_ahead_us: o.wake_ahead_us.unwrap_or(if f.cuda { CUDA_WAKE_AHEAD_US } else { 0 }),
            wake_idle_us: o.wake_idle_us.unwrap_or(WAKE_IDLE_US),
            wake_before_due_us: o.wake_before_due_us.unwrap_or(WAKE_BEFORE_DUE_US),
            gpu_lead: o.gpu_lead.unwrap_or(if f.large_frames { LARGE_FRAMES_LEAD } else { 0 }),
            ready_spin_us: o.ready_spin_us.unwrap_or(if f.large_gpu_inputs { 0 } else { SMALL_FRAMES_READY_SPIN_US }),
            peer_copy_min_bytes: o.peer_copy_min_bytes.unwrap_or(PEER_COPY_MIN_BYTES),
            peer_copy_lanes: o.peer_copy_lanes.unwrap_or(PEER_COPY_LANES).max(1),
            kernel_rows: if f.cuda {
                o.kernel_rows.unwrap_or(if f.beside_large_crossing { PACED_KERNEL_ROWS } else { 0 })
            } else {
                0
            },
        }
    }
}

/// Whether stage `consumer`, reading `link` on another GPU than the ring's, copies each frame
/// into its own GPU before its kernels read it (its `peer_copy_min_bytes`; the stage runner
/// decides the same from the tuning in its setup), rather than reading it in place.
pub fn copies_in(plan: &Plan, link: &LinkPlan, consumer: usize, overrides: &Overrides) -> bool {
    link.layout.total_bytes >= Tuning::resolve(plan, consumer, overrides).peer_copy_min_bytes
}

/// The GPUs, with their hosts, that frames of at least [`LARGE_FRAME_BYTES`] cross between:
/// every GPU holding or mapping a GPU ring that has ends on more than one GPU (its producer's
/// and its consumers'; the copy engines of one or the other move each frame over the link).
fn gpus_crossed_by_large_frames(plan: &Plan) -> std::collections::BTreeSet<(Option<usize>, u32)> {
    let mut crossed = std::collections::BTreeSet::new();
    for link in plan.links.iter().filter(|l| l.layout.total_bytes >= LARGE_FRAME_BYTES) {
        if let LinkMemory::Device { device, peers, .. } = &link.memory
            && !peers.is_empty()
        {
            let host = plan.stages[link.producer].host;
            crossed.extend(std::iter::once(*device).chain(peers.iter().copied()).map(|d| (host, d)));
        }
    }
    crossed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::split::tests::plan_of;

    fn chain(spin: &str) -> Plan {
        plan_of(&format!(
            "[pipeline]\ndevice = \"cpu\"\n{spin}\n[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\nparams = {{ width = 3840, height = 2160 }}\n[[stage]]\nname = \"grade\"\nplugin = \"rgb_process.so\"\ninputs = [\"gen\"]\n"
        ))
        .0
    }

    #[test]
    fn defaults_follow_the_domain_and_the_frame_size() {
        let none = Overrides::default();
        let cuda = |large_frames, large_gpu_inputs| {
            Tuning::decide(
                Facts { cuda: true, large_frames, large_gpu_inputs, beside_large_crossing: false },
                None,
                &none,
            )
        };
        assert_eq!(
            cuda(true, true),
            Tuning {
                spin_us: CUDA_SPIN_US,
                wake_batch: 4,
                wake_ahead_us: 200,
                wake_idle_us: 500,
                wake_before_due_us: 150,
                gpu_lead: 64,
                ready_spin_us: 0,
                peer_copy_min_bytes: 0,
                peer_copy_lanes: 2,
                kernel_rows: 0
            }
        );
        let hd = cuda(false, false);
        assert_eq!((hd.gpu_lead, hd.ready_spin_us), (0, 200));
        // A 4K cpu chain, planned: no wake-ups held or ahead, the cpu spin, a lead nobody uses.
        let cpu = Tuning::resolve(&chain(""), 1, &none);
        assert_eq!((cpu.spin_us, cpu.wake_batch, cpu.wake_ahead_us, cpu.gpu_lead), (DEFAULT_SPIN_US, 1, 0, 64));
    }

    #[test]
    fn cuda_stages_on_gpus_that_large_frames_cross_between_are_paced() {
        use crate::config::Transport;
        // gen on cuda:0 -> grade on cuda:1 -> sink on cuda:2, 4K rgb8 frames.
        let (mut plan, _) = plan_of(
            "[pipeline]\ndevice = \"cpu\"\n[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\nparams = { width = 3840, height = 2160 }\n[[stage]]\nname = \"grade\"\nplugin = \"rgb_process.so\"\ninputs = [\"gen\"]\n[[stage]]\nname = \"sink\"\nplugin = \"rgb_process.so\"\ninputs = [\"grade\"]\n",
        );
        for (d, s) in plan.stages.iter_mut().enumerate() {
            (s.domain, s.device) = (Domain::Cuda, Some(d as u32));
        }
        let device =
            |device, peers: Vec<u32>| LinkMemory::Device { transport: Transport::Vmm, device, peers, pushed: false };
        let pushed =
            |device, from| LinkMemory::Device { transport: Transport::Vmm, device, peers: vec![from], pushed: true };
        let rows = |plan: &Plan, o: &Overrides| -> Vec<u32> {
            (0..plan.stages.len()).map(|s| Tuning::resolve(plan, s, o).kernel_rows).collect()
        };
        let none = Overrides::default();
        // gen -> grade crosses cuda:0 -> cuda:1 (pushed into a ring on cuda:1); grade -> sink
        // is read on cuda:2 out of a ring on cuda:1.
        plan.links[0].memory = pushed(1, 0);
        plan.links[1].memory = device(1, vec![2]);
        assert_eq!(gpus_crossed_by_large_frames(&plan), [(None, 0), (None, 1), (None, 2)].into());
        assert_eq!(rows(&plan, &none), [PACED_KERNEL_ROWS; 3]);
        // The sink beside grade on cuda:1: its GPU is one the first link crosses to.
        plan.stages[2].device = Some(1);
        plan.links[1].memory = device(1, vec![]);
        assert_eq!(rows(&plan, &none), [PACED_KERNEL_ROWS, PACED_KERNEL_ROWS, PACED_KERNEL_ROWS]);
        // On cuda:3, reached through host memory: no copy between GPUs beside it.
        plan.stages[2].device = Some(3);
        plan.links[1].memory = LinkMemory::HostStaged { no_peer: Some((3, 1)) };
        assert_eq!(rows(&plan, &none), [PACED_KERNEL_ROWS, PACED_KERNEL_ROWS, 0]);
        // On another host's cuda:1: the GPUs the first link crosses are this host's.
        (plan.stages[2].device, plan.stages[2].host) = (Some(1), Some(0));
        plan.links[1].memory = LinkMemory::Host;
        assert_eq!(rows(&plan, &none), [PACED_KERNEL_ROWS, PACED_KERNEL_ROWS, 0]);
        // A cuda stage without a device number is on cuda:0, which the first link crosses.
        (plan.stages[2].device, plan.stages[2].host) = (None, None);
        assert_eq!(rows(&plan, &none), [PACED_KERNEL_ROWS; 3]);
        // The variable wins, 0 (no bound) included; a cpu stage is never paced.
        let set = |n| Overrides { kernel_rows: Some(n), ..Overrides::default() };
        assert_eq!(rows(&plan, &set(0)), [0, 0, 0]);
        assert_eq!(rows(&plan, &set(8)), [8, 8, 8]);
        plan.stages[2].domain = Domain::Cpu;
        assert_eq!(rows(&plan, &set(8)), [8, 8, 0]);
        // 1080p frames do not count: the link is not their bound.
        let (mut hd, _) = plan_of(
            "[pipeline]\ndevice = \"cpu\"\n[[stage]]\nname = \"gen\"\nplugin = \"generator.so\"\nparams = { width = 1920, height = 1080 }\n[[stage]]\nname = \"grade\"\nplugin = \"rgb_process.so\"\ninputs = [\"gen\"]\n",
        );
        for (d, s) in hd.stages.iter_mut().enumerate() {
            (s.domain, s.device) = (Domain::Cuda, Some(d as u32));
        }
        hd.links[0].memory = device(0, vec![1]);
        assert!(gpus_crossed_by_large_frames(&hd).is_empty());
        assert_eq!(rows(&hd, &none), [0, 0]);
    }

    #[test]
    fn the_command_line_wins_over_the_file_and_variables_over_the_defaults() {
        let plan = chain("spin_us = 7");
        assert_eq!(Tuning::resolve(&plan, 0, &Overrides::default()).spin_us, 7);
        assert_eq!(Tuning::resolve(&plan, 0, &Overrides { spin_us: Some(3), ..Overrides::default() }).spin_us, 3);
        let set = Overrides { wake_batch: Some(2), gpu_lead: Some(16), ..Overrides::default() };
        let t = Tuning::resolve(&plan, 1, &set);
        assert_eq!((t.wake_batch, t.gpu_lead), (2, 16));
    }

    #[test]
    fn variables_are_read_by_name_and_a_number_or_ignored() {
        let vars = |name: &str| match name {
            "GPUIPC_WAKE_BATCH" => Some("8".to_owned()),
            "GPUIPC_GPU_LEAD" => Some("lots".to_owned()),
            "GPUIPC_READY_SPIN_US" => Some("0".to_owned()),
            "GPUIPC_PEER_COPY_MIN_BYTES" => Some("1048576".to_owned()),
            "GPUIPC_KERNEL_ROWS" => Some("0".to_owned()),
            _ => None,
        };
        let o = Overrides::from_vars(Some(5), vars);
        assert_eq!(
            o,
            Overrides {
                spin_us: Some(5),
                wake_batch: Some(8),
                ready_spin_us: Some(0),
                peer_copy_min_bytes: Some(1 << 20),
                kernel_rows: Some(0),
                ..Overrides::default()
            }
        );
        assert_eq!(
            o.describe(),
            [
                "spin_us = 5 (command line)",
                "GPUIPC_WAKE_BATCH=8",
                "GPUIPC_READY_SPIN_US=0",
                "GPUIPC_PEER_COPY_MIN_BYTES=1048576",
                "GPUIPC_KERNEL_ROWS=0"
            ]
        );
        assert!(Overrides::default().describe().is_empty());
    }
}
