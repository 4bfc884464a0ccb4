#!/usr/bin/env bash
# Replicas of a stage that bounds its pipeline, for N = 1, 2, 4, 8 replicas, each three
# times; prints frames/s of the sink and the speed-up against one replica.
#
#   scripts/bench-replicas.sh [GPUIPC_HOST] [FRAMES] [cpu | gpu] [GPU_BUSY_US] [DEVICES] [BLOCKS]
#
# cpu (default): a 4K generator (bars, 4 threads) -> yuv420 with threads = 1 and
#   `replicas = N` -> null, for the N that fit the cores (default 300 frames).
# gpu: a 256x256 generator on the GPU -> test-gpu-fault whose cuda path runs a kernel of one
#   block for GPU_BUSY_US microseconds a frame (default 2000) with `replicas = N` -> null,
#   under MPS (so the replicas' kernels can run at once). DEVICES, e.g. "cuda:0,cuda:1",
#   spreads the replicas over GPUs (default: cuda:0 only). BLOCKS (default 1) widens the
#   kernel: some thousands fill a GPU, so replicas scale only with GPUs.
# (default host: target/release/gpuipc-host; run `cargo build --release` first)
set -euo pipefail
host=${1:-$(dirname "$0")/../target/release/gpuipc-host}
frames=${2:-300}
mode=${3:-cpu}
busy_us=${4:-2000}
devices=${5:-cuda:0}
blocks=${6:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cores=$(nproc)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# pipeline N: the pipeline file for N replicas.
pipeline() {
    local n=$1
    if [ "$mode" = cpu ]; then
        cat <<TOML
[pipeline]
name = "replicas-$n"
device = "cpu"

[[stage]]
name = "gen"
plugin = "generator"
params = { width = 3840, height = 2160, pattern = "bars", threads = 4 }

[[stage]]
name = "yuv"
plugin = "yuv420"
inputs = ["gen"]
replicas = $n
params = { threads = 1 }

[[stage]]
name = "sink"
plugin = "null"
inputs = ["yuv"]
TOML
    else
        local device
        # One replica runs on the first GPU; more are spread over the list.
        if [ "$n" = 1 ]; then device="\"${devices%%,*}\""; else device="[\"${devices//,/\", \"}\"]"; fi
        cat <<TOML
[pipeline]
name = "replicas-gpu-$n"
isolation = "mps"

[[stage]]
name = "gen"
plugin = "generator"
device = "${devices%%,*}"
params = { width = 256, height = 256, pattern = "gradient" }

[[stage]]
name = "busy"
plugin = "test-gpu-fault"
inputs = ["gen"]
replicas = $n
device = $device
params = { gpu_busy_us = $busy_us, gpu_busy_blocks = $blocks }

[[stage]]
name = "sink"
plugin = "null"
inputs = ["busy"]
TOML
    fi
}

[ "$mode" = gpu ] && echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//'); a kernel of $busy_us us and $blocks block(s) a frame on $devices"
base=""
for n in 1 2 4 8; do
    [ "$mode" = gpu ] || [ "$n" -le "$cores" ] || break
    pipeline "$n" > "$work/r$n.toml"
    rates=()
    for _ in 1 2 3; do
        rates+=("$("$host" run "$work/r$n.toml" --frames "$frames" --quiet 2>/dev/null | awk '$1 == "sink" {print $5}')")
    done
    best=$(printf '%s\n' "${rates[@]}" | sort -g | tail -1)
    [ -n "$base" ] || base=$best
    printf 'replicas %d: %s frames/s (best of %s)  %.2fx one replica\n' "$n" "$best" "${rates[*]}" "$(awk -v a="$best" -v b="$base" 'BEGIN {print a / b}')"
done
