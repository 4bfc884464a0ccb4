#!/usr/bin/env bash
# Decode speed, run from a bundle made by scripts/gpu-check.sh (its video/bench clips) on a
# machine with an NVIDIA GPU, or from a checkout with clips made by
# `scripts/video-clips.sh DIR bench` (then BENCH_CLIPS=DIR/bench, HOST=target/release/gpuipc-host):
#
#   bench-decode.sh                 NVDEC (device cuda): 1080p and 2160p H.264 and HEVC
#   DEVICE=cpu bench-decode.sh      the cpu decoder (ffmpeg) on the same clips
#   COUNTS="1 2" WORK=/tmp/w ...    other numbers of sources; where runs write (default ./work)
#
# For each clip and N = 1, 2, 4, 8 sources at once (one pipeline: N looping `video` sources,
# each into a `null` sink): frames/s summed over the sources, frames/s of one, the decoder
# engines' utilisation as nvidia-smi samples it over the run (near 100 %: the engines are the
# bound), and each source stage's host CPU (100 %: one core). The table goes to stdout and to
# $OUT/bench-decode.md (or ./results/).
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=${HOST:-$here/bin/gpuipc-host}
clips=${BENCH_CLIPS:-$here/video/bench}
device=${DEVICE:-cuda}
counts=${COUNTS:-1 2 4 8}
results=${OUT:-$here/results}
work_root=${WORK:-$here/work}
mkdir -p "$results" "$work_root/decode"
table=$results/bench-decode${device:+-$device}.md
pipeline=$here/video-pipeline.sh
export GPUIPC_KERNEL_CACHE=$here/kernel-cache

{
    echo "| clip | sources | frames/s (sum) | frames/s per source | decoder utilisation | host CPU per source |"
    echo "|---|---|---|---|---|---|"
} > "$table"
for clip in "$clips"/*.mp4; do
    name=$(basename "$clip" .mp4)
    # About 4 s of NVDEC work per run whatever the size; the cpu decoder gets fewer frames.
    case $name in *2160p*) total=2400 ;; *) total=9600 ;; esac
    [ "$device" = cpu ] && total=$((total / 16))
    for n in $counts; do
        work=$work_root/decode/$name-$n
        rm -rf "$work" && mkdir -p "$work"
        args=()
        for _ in $(seq 1 "$n"); do args+=("$clip"); done
        EXTRA=', loop = true' bash "$pipeline" "${args[@]}" > "$work/p.toml"
        frames=$((total / n))
        util_log=$work/util.csv
        if command -v nvidia-smi >/dev/null && [ "$device" != cpu ]; then
            nvidia-smi --query-gpu=utilization.decoder --format=csv,noheader,nounits -lms 100 > "$util_log" 2>/dev/null &
            smi=$!
        else
            smi=""
        fi
        (cd "$work" && "$host" run p.toml --device "$device" --frames "$frames" --quiet --report report.json > run.txt 2> err.txt) ||
            { echo "FAILED: $name x $n"; cat "$work/err.txt"; }
        [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
        python3 - "$work/report.json" "$util_log" "$name" "$n" >> "$table" <<'PY'
import json, sys, os
report, util_log, name, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
stages = [s for s in json.load(open(report))["stages"] if s["name"].startswith("decode")]
fps = sum(s["fps"] for s in stages)
cpu = sum(s["cpu"] for s in stages) / len(stages)
util = "n/a"
if os.path.exists(util_log):
    samples = [float(l.split(",")[0]) for l in open(util_log) if l.strip() and l.split(",")[0].strip().replace(".", "").isdigit()]
    # The busy part of the run: samples above 0 (the start and the end idle).
    busy = [x for x in samples if x > 0]
    if busy:
        util = f"{sum(busy) / len(busy):.0f} % (max {max(busy):.0f} %)"
print(f"| {name} | {n} | {fps:,.0f} | {fps / n:,.0f} | {util} | {cpu * 100:.0f} % |")
PY
    done
done
cat "$table"
