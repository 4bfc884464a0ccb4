#!/usr/bin/env bash
# Where the latency of a paced pipeline goes, on a machine with an NVIDIA GPU (from a bundle
# of scripts/gpu-check.sh: BUNDLE_DIR/bench-latency.sh [FRAMES]). Each row is one
# `gpuipc-host bench` call at 1,000 frames/s with every stage writing a frame trace
# (GPUIPC_TRACE); scripts/trace-hops.py splits each frame's latency into the steps of its
# stages and shows which of them the slowest 1 % of frames waited in.
#
#   CASES="1080p 256 chain8"   pipelines (as in bench-wait.sh)
#   VARIANTS="default spin"    default: as configured; spin: every stage spins 1,500 µs
#                              before it sleeps (--spin-us 1500); nobeforedue, gpuready,
#                              old: environment variables as in bench-wait.sh
#   ROUNDS=N                   every case and variant N times
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=$here/bin/gpuipc-host
work=$here/work/latency
out=${OUT:-$here/results}
mkdir -p "$out" "$work"
frames=${1:-5000}
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
# sized, chain (the pipelines) and find_nvrtc
. "$here/lib-bench.sh"
find_nvrtc
{
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores; commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"
# What decides how fast a sleeping core answers: its frequency governor and idle states.
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), governor $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo none), idle driver $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none), $(grep -qw hypervisor /proc/cpuinfo && echo "a virtual machine" || echo "no hypervisor flag")"
for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do
    [ -e "$s/name" ] && echo "  idle state $(cat "$s/name"): exit latency $(cat "$s/latency") µs, disabled $(cat "$s/disable")"
done
} | tee "$out/latency.txt"

case_file() {
    case $1 in
        4k) sized 3840 2160 ;;
        1080p) sized 1920 1080 ;;
        720p) sized 1280 720 ;;
        256) sized 256 256 ;;
        chain8) chain 8 ;;
    esac
}
variant_args() {
    case $1 in
        default) echo "" ;;
        spin) echo "--spin-us 1500" ;;
        nobeforedue) echo "env:GPUIPC_WAKE_BEFORE_DUE_US=0" ;;
        gpuready) echo "env:GPUIPC_READY_SPIN_US=0" ;;
        old) echo "env:GPUIPC_GPU_LEAD=0 env:GPUIPC_WAKE_AHEAD_US=0 env:GPUIPC_WAKE_BATCH=1 env:GPUIPC_WAKE_BEFORE_DUE_US=0" ;;
        *) echo "unknown variant $1" >&2; return 1 ;;
    esac
}

for round in $(seq "${ROUNDS:-1}"); do
for c in ${CASES:-1080p 256 chain8}; do
    file=$(case_file "$c")
    for v in ${VARIANTS:-default spin}; do
        label="$c-$v-r$round"
        args=$(variant_args "$v") || continue
        envs=$(printf '%s\n' $args | sed -n 's/^env://p')
        flags=$(printf '%s\n' $args | grep -v '^env:' || true)
        trace=$work/$label.trace
        rm -rf "$trace" && mkdir -p "$trace"
        steal_before=$(awk '/^cpu /{print $9}' /proc/stat)
        (cd "$work" && env $envs GPUIPC_TRACE="$trace" "$host" bench "$file" --device cuda --isolation mps --frames 2000 --rounds 1 \
            --latency-frames "$frames" --fps 1000 $flags --json "$work/$label.json" > "$work/$label.out" 2> "$work/$label.err") ||
            { echo "FAILED: $label"; tail -5 "$work/$label.err"; continue; }
        # Time the hypervisor ran something else on this machine's CPUs (in clock ticks).
        steal=$(( ($(awk '/^cpu /{print $9}' /proc/stat) - steal_before) * 1000 / $(getconf CLK_TCK) ))
        echo "== $label: $(grep -a 'added latency per hop' "$work/$label.out"); one process $(python3 -c '
import json, sys; r = json.load(open(sys.argv[1])); a = r["in_process"]["latency_us"]; b = r["separate"]["latency_us"]
print(f"p50/p99/max {a[0]:.0f}/{a[1]:.0f}/{a[2]:.0f} µs, separate {b[0]:.0f}/{b[1]:.0f}/{b[2]:.0f}")' "$work/$label.json"); CPU time stolen by a hypervisor during the call: $steal ms"
        python3 "$here/trace-hops.py" "$trace"
    done
done
done 2>&1 | tee -a "$out/latency.txt"
