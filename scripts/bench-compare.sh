#!/usr/bin/env bash
# Two builds side by side on a machine with an NVIDIA GPU: the same `gpuipc-host bench` rows
# with each, interleaved (A, B, A, B...), so a change is judged against the noise of the same
# machine in the same call. Run from a bundle of scripts/gpu-check.sh (the "after" build),
# given the folder of another build's gpuipc-host and plugin libraries (the "before"):
#
#   BUNDLE_DIR/bench-compare.sh BEFORE_BIN_DIR [FRAMES] [ROUNDS]
#
# Rows: 1080p and 4K generator -> rgb-process -> yuv420, and an 8-stage 1080p chain. Prints
# each round's frames/s (separate processes, and the ratio to one process) and the medians.
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
before=${1:?usage: bench-compare.sh BEFORE_BIN_DIR [FRAMES] [ROUNDS]}
frames=${2:-3000}
rounds=${3:-3}
results=${OUT:-$here/results}/compare
work=$here/work/compare
mkdir -p "$results" "$work"
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
. "$here/lib-bench.sh"
find_nvrtc
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores"
echo "after: $(cat "$here/COMMIT" 2>/dev/null || echo unknown) ($here/bin); before: $before"

rows="1080p:$(sized 1920 1080) 4k:$(sized 3840 2160) chain8:$(chain 8)"
for round in $(seq 1 "$rounds"); do
    for row in $rows; do
        label=${row%%:*} file=${row#*:}
        for build in before after; do
            bin=$here/bin
            [ "$build" = before ] && bin=$before
            out="$results/$label-$build-$round.json"
            (cd "$work" && "$bin/gpuipc-host" bench "$file" --device cuda --frames "$frames" --latency-frames 300 --json "$out" \
                > "$work/$label-$build-$round.txt" 2>&1) || { echo "FAILED: $label $build round $round"; tail -5 "$work/$label-$build-$round.txt"; }
        done
    done
done

python3 - "$results" "$rows" "$rounds" <<'PY'
import json, os, statistics, sys
results, rows, rounds = sys.argv[1], [r.split(":")[0] for r in sys.argv[2].split()], int(sys.argv[3])
print(f"{'row':8} {'build':7} {'separate frames/s per round':42} {'median':>9} {'ratio to one process (median)':>30}")
for row in rows:
    for build in ("before", "after"):
        fps, ratio = [], []
        for r in range(1, rounds + 1):
            path = os.path.join(results, f"{row}-{build}-{r}.json")
            if os.path.exists(path):
                j = json.load(open(path))
                fps.append(j["separate"]["frames_per_s"])
                ratio.append(j["ratio"])
        cells = " ".join(f"{f:9.0f}" for f in fps)
        med = f"{statistics.median(fps):9.0f}" if fps else "-"
        rat = f"{statistics.median(ratio) * 100:29.1f}%" if ratio else "-"
        print(f"{row:8} {build:7} {cells:42} {med:>9} {rat:>30}")
PY
