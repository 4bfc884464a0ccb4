#!/usr/bin/env bash
# The built-in kernels on their own (docs/benchmarks.md, "The kernels on their own"):
# generator (bars, noise), rgb-process (the pipelines' grade), yuv420 and yuv-to-rgb at 1080p
# and 4K, each against a device-to-device copy of the same bytes and a 64 MiB one, against
# NVIDIA's NPP where it has the same conversion, and candidate variants against production;
# every output checked against the CPU reference.
#
#   gpu-bundle/bench-kernels.sh [kernel-bench options]     (in the bundle, on the GPU machine)
#   scripts/bench-kernels.sh [options]                      (in a checkout: builds it first)
#
# Options go to kernel-bench (--launches N, --sizes 1920x1080,3840x2160, --check-sizes
# 1917x1079 (odd sizes, checked without NPP), --only gen,grade, --npp-dir DIR, --no-npp,
# --no-variants). NPP is looked for in --npp-dir, on LD_LIBRARY_PATH,
# then in /usr/local/cuda/lib64. The table goes to stdout and to $OUT/kernel-bench.md (or
# ./kernel-bench.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$here/bin/kernel-bench" ]; then
    bin=$here/bin/kernel-bench
else
    (cd "$here/.." && cargo build --release --locked -p gpuipc-kernel-bench)
    bin=${CARGO_TARGET_DIR:-$here/../target}/release/kernel-bench
fi
# NVRTC for the kernels, as the other bench scripts find it (lib-bench.sh: bundle or scripts/).
if [ -e "$here/lib-bench.sh" ]; then
    . "$here/lib-bench.sh"
    find_nvrtc
fi
out=${OUT:-.}/kernel-bench.md
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || true
"$bin" "$@" | tee "$out"
