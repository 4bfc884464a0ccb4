//! `test-gpu-fault`: copies its input to its output, and in the cuda domain faults the GPU
//! when asked, so that the host's handling of a fatal GPU error (which stages it restarts,
//! with and without MPS) can be tested with real processes. Tests only.
//!
//! Takes one frame of any format (`rgb8`, `rgba8`, `gray8`, `i420`, `nv12`) and writes the
//! same format and size: every plane's pixels copied row by row, row padding untouched. In the
//! cuda domain the copy is `gpu_fault_copy` of `kernels/gpu_fault.cu` (compiled with NVRTC
//! and cached, see [`gpuipc_plugin_api::cuda`]), one launch per plane on the stage's stream.
//!
//! At the frame whose sequence number is `at` (the source's `seq`, passed on unchanged by
//! every stage, not the count of frames this process handled: a stage restarted after the
//! fault continues at later sequence numbers and does not fault again), a fault mode launches
//! `gpu_fault_poison` on the stream after that frame's copy, logging one line at info level
//! first:
//!
//! - `illegal_address`: `launching a kernel that writes to an illegal address at frame {seq},
//!   as asked`. The kernel writes one byte at device address 0, which the driver reports as
//!   `CUDA_ERROR_ILLEGAL_ADDRESS`.
//! - `trap`: `launching a kernel that executes __trap() at frame {seq}, as asked`. The driver
//!   reports a launch failure (`CUDA_ERROR_LAUNCH_FAILED` is what to expect; the exact code is
//!   the driver's choice).
//!
//! Either error is sticky: the stage's CUDA context is unusable afterwards, and under MPS
//! every stage on the GPU loses its context. `process` only enqueues and returns `Ok`, as
//! every GPU plugin should; the error surfaces asynchronously in a later CUDA call of the
//! stage runner (an event record, a wait, the next launch), as a real bug's would.
//!
//! In the cpu domain there is no GPU to fault: frame `at` is copied like any other, after one
//! line at warn level, ``frame {seq}: mode `{mode}` faults the GPU, but this stage runs in the
//! cpu domain; copying the frame instead``. So a pipeline that faults on cuda still runs on
//! cpu, as the reference its surviving frames are compared with.
//!
//! # Params
//!
//! | key        | type                                        | default | meaning |
//! |------------|---------------------------------------------|---------|---------|
//! | `mode`     | `"ok"` \| `"illegal_address"` \| `"trap"`   | `"ok"`  | what happens at frame `at`; `"ok"` only copies |
//! | `at`       | integer, 0..=2^63-1                         | `0`     | the sequence number of the input frame that faults |
//! | `delay_us` | integer, 0..=2^63-1                         | `0`     | microseconds of pretend work per frame (a host sleep before the copy), to slow a pipeline so the fault lands mid-run |
//! | `gpu_busy_us` | integer, 0..=2^63-1                      | `0`     | microseconds of real work per frame: on cuda a kernel of one warp spinning on the GPU's timer before the copy (one SM: several processes' run at once under MPS), on cpu a busy loop; a GPU-bound stage of a chosen length, to measure replicas |
//! | `gpu_busy_blocks` | integer, 0..=2^32-1                  | `1`     | blocks of one warp in that kernel: 1 keeps one SM busy, some thousands fill the GPU (0 counts as 1) |
//!
//! Only the frame whose `seq` is exactly `at` faults: with `policy = "latest"` or
//! `"drop_oldest"` on this stage, a frame that is skipped never faults.
//!
//! ```toml
//! [[stage]]
//! name = "crash"
//! plugin = "test-gpu-fault"
//! inputs = ["gen"]
//! params = { mode = "illegal_address", at = 500 }
//!
//! [[stage]]
//! name = "trap"
//! plugin = "test-gpu-fault"
//! inputs = ["gen"]
//! params = { mode = "trap", at = 20, delay_us = 1000 }
//! ```
#![deny(unsafe_code)]

pub mod cuda;
pub mod fault;

gpuipc_plugin_api::export_plugin!(fault::GpuFaultStage);
