#!/usr/bin/env bash
# How the stages wait, compared in one call on a machine with an NVIDIA GPU (from a bundle of
# scripts/gpu-check.sh: BUNDLE_DIR/bench-wait.sh [FRAMES]). Each variant is a set of
# environment variables every stage process inherits (docs/benchmarks-history.md, "Where the
# time goes"); each row is one `gpuipc-host bench` call: frames/s in one process and
# separately, host CPU of the stages, latency at 1,000 frames/s and what each hop adds.
#
#   GPUIPC_GPU_LEAD=N       frames a stage's host may run ahead of its GPU (0: unbounded)
#   GPUIPC_WAKE_AHEAD_US=N  wake a stage's consumers ahead of a frame, spinning N µs for it
#   GPUIPC_WAKE_AHEAD_IDLE_US=N  the sleep (or a source's gap) that counts as idle
#   GPUIPC_WAKE_BATCH=N     wake-ups of sleeping neighbours a stage sends at once (1: each at once)
#   GPUIPC_READY_SPIN_US=N  a GPU consumer polls a frame's ready event on its host N µs first (0: the GPU waits)
#   GPUIPC_WAKE_BEFORE_DUE_US=N  at an idle pace, wake N µs before a frame is due (0: not before)
#   a variant named dN-VARIANT runs VARIANT with depth = N on every stage
#   a variant named spinN (or dN-spinN) runs the defaults with every stage spinning N µs
#   before it sleeps (`bench --spin-us N`)
#   BENCH_ARGS="..."        more arguments for every `bench` call (e.g. --latency-frames 1000)
#   ROUNDS=N                every case and variant N times, interleaved (label -rK)
#   PROFILE=1               also log each stage's host time per phase (GPUIPC_PROFILE) and print it
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=$here/bin/gpuipc-host
results=${OUT:-$here/results}/wait
work=$here/work/wait
mkdir -p "$results" "$work"
frames=${1:-6000}
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
# sized, chain (the pipelines) and find_nvrtc
. "$here/lib-bench.sh"
find_nvrtc
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores; commit $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"

variants=${VARIANTS:-"old wake default nolead batch1"}
# Each variant spells out what it changes from the defaults (a cuda stage: waking ahead 200 µs,
# wake-ups sent 4 at a time, lead 64 frames checked every 16 and polled).
variant_env() {
    case ${1#d[0-9]*-} in
        default|spin[0-9]*) echo "" ;;
        old) echo "GPUIPC_GPU_LEAD=0 GPUIPC_WAKE_AHEAD_US=0 GPUIPC_WAKE_BATCH=1 GPUIPC_WAKE_BEFORE_DUE_US=0" ;;
        wake) echo "GPUIPC_GPU_LEAD=0 GPUIPC_WAKE_BATCH=1" ;;
        nobeforedue) echo "GPUIPC_WAKE_BEFORE_DUE_US=0" ;;
        gpuready) echo "GPUIPC_READY_SPIN_US=0" ;;
        nolead) echo "GPUIPC_GPU_LEAD=0" ;;
        batch1) echo "GPUIPC_WAKE_BATCH=1" ;;
        idle100) echo "GPUIPC_WAKE_AHEAD_IDLE_US=100" ;;
        lead8) echo "GPUIPC_GPU_LEAD=8 GPUIPC_WAKE_AHEAD_US=0 GPUIPC_WAKE_BATCH=1" ;;
        *) echo "unknown variant $1" >&2; return 1 ;;
    esac
}
# The `bench` arguments a variant adds.
variant_args() {
    case ${1#d[0-9]*-} in
        spin[0-9]*) v=${1#d[0-9]*-}; echo "--spin-us ${v#spin}" ;;
    esac
}
cases=${CASES-"4k 1080p chain8"}  # CASES="" runs only the paced runs below
case_file() {
    case $1 in
        4k) sized 3840 2160 ;;
        1080p) sized 1920 1080 ;;
        720p) sized 1280 720 ;;
        256) sized 256 256 ;;
        chain8) chain 8 ;;
        chain8-720) f=$(chain 8); sed -e 's/width = 1920, height = 1080/width = 1280, height = 720/' "$f" > "${f%.toml}-720.toml"; echo "${f%.toml}-720.toml" ;;
    esac
}
rounds=${ROUNDS:-1}
for round in $(seq "$rounds"); do
for c in $cases; do
    file=$(case_file "$c")
    for v in $variants; do
        label="$c-$v"
        [ "$rounds" -gt 1 ] && label="$label-r$round"
        run_file=$file
        depth=$(expr "$v" : 'd\([0-9]*\)-' || true)
        if [ -n "$depth" ]; then
            run_file=${file%.toml}-d$depth.toml
            sed "/^\\[\\[stage\\]\\]/a depth = $depth" "$file" > "$run_file"
        fi
        (cd "$work" && env $(variant_env "$v") ${PROFILE:+GPUIPC_PROFILE=1} "$host" bench "$run_file" --device cuda --isolation mps --frames "$frames" \
            $(variant_args "$v") ${BENCH_ARGS:-} --json "$results/$label.json" > "$work/$label.out" 2> "$work/$label.err") || { echo "FAILED: $label"; tail -5 "$work/$label.err"; }
    done
done
done
if [ -n "${PROFILE:-}" ]; then
    for f in "$work"/*.err; do
        echo "== $(basename "$f" .err)"
        grep -a "host time per frame" "$f"
    done > "${OUT:-$here/results}/profile.txt"
    echo "profiles: ${OUT:-$here/results}/profile.txt"
fi
python3 - "$results" <<'PY'
import glob, json, os, sys
print(f"{'case-variant':22} {'one proc':>9} {'separate':>9} {'ratio':>7} {'cpu sum':>8} {'cpu per stage':>24} {'lat p50/p99 sep':>16} {'hop p50/p99':>14}")
for path in sorted(glob.glob(f"{sys.argv[1]}/*.json")):
    r = json.load(open(path))
    name = os.path.basename(path)[:-5]
    cpus = [s["cpu_separate"] * 100 for s in r["stages"]]
    lat = r["separate"].get("latency_us")
    hop = r.get("added_latency_per_hop_us")
    same = "" if not r["outputs_differ"] else "  OUTPUTS DIFFER"
    print(f"{name:22} {r['in_process']['frames_per_s']:>9,.0f} {r['separate']['frames_per_s']:>9,.0f} {r['ratio']*100:>6.1f}% {sum(cpus):>7.0f}% "
          f"{'/'.join(f'{c:.0f}' for c in cpus):>24} {(f'{lat[0]:.0f}/{lat[1]:.0f}' if lat else '-'):>16} {(f'{hop[0]:.1f}/{hop[1]:.1f}' if hop else '-'):>14}{same}")
import re, statistics
groups = {}
for path in glob.glob(f"{sys.argv[1]}/*-r[0-9]*.json"):
    r = json.load(open(path))
    key = re.sub(r"-r[0-9]+$", "", os.path.basename(path)[:-5])
    groups.setdefault(key, []).append((r["separate"]["frames_per_s"], r["ratio"] * 100, sum(s["cpu_separate"] for s in r["stages"]) * 100))
if groups:
    print(f"\nmedians over rounds: {'case-variant':22} {'separate':>9} {'ratio':>7} {'cpu sum':>8}  (ratios of each round)")
    for key in sorted(groups):
        rows = groups[key]
        med = lambda i: statistics.median(row[i] for row in rows)
        print(f"{'':20} {key:22} {med(0):>9,.0f} {med(1):>6.1f}% {med(2):>7.0f}%  ({', '.join(f'{row[1]:.0f}' for row in rows)})")
PY

# Host CPU of each stage with the source paced (generator `fps`), from `run --report`:
# 1080p generator -> rgb-process -> yuv420 at 60 frames/s (300 frames) and 1,000 (2,000).
for fps in 60 1000; do
    frames_paced=$(( fps == 60 ? 300 : 2000 ))
    sed -e 's/width = 3840, height = 2160/width = 1920, height = 1080, fps = '"$fps"'.0/' "$here/pipelines/4k-yuv.toml" > "$work/paced-$fps.toml"
    (cd "$work" && "$host" run "$work/paced-$fps.toml" --device cuda --frames "$frames_paced" --quiet --report "$work/paced-$fps.json" > /dev/null 2> "$work/paced-$fps.err") ||
        { echo "FAILED: paced $fps"; tail -5 "$work/paced-$fps.err"; continue; }
    python3 - "$work/paced-$fps.json" "$fps" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"paced at {sys.argv[2]} frames/s, host CPU per stage: " + ", ".join(f"{s['name']} {s.get('cpu', 0) * 100:.1f} %" for s in r["stages"]))
PY
done
