#!/usr/bin/env bash
# Decode speed, run from a bundle made by scripts/gpu-check.sh (its video/bench clips) on a
# machine with an NVIDIA GPU, or from a checkout with clips made by
# `scripts/video-clips.sh DIR bench` (then BENCH_CLIPS=DIR/bench, HOST=$PWD/target/release/gpuipc-host):
#
#   bench-decode.sh                 NVDEC (device cuda): 1080p and 2160p H.264 and HEVC
#   DEVICE=cpu bench-decode.sh      the cpu decoder (ffmpeg) on the same clips
#   COUNTS="1 2" WORK=/tmp/w ...    other numbers of sources; where runs write (default ./work)
#   MODES="alone null" ...          which pipelines (below); ISOLATIONS="mps process" ...
#
# For each clip, mode, isolation and N = 1, 2, 4, 8 sources at once (one pipeline of N looping
# `video` sources): frames/s summed over the sources, frames/s of one, the decoder engines'
# utilisation as nvidia-smi samples it over the run (its busiest sample too: near 100 %, every
# engine is busy), and each source stage's host CPU (100 %: one core; in the cpu domain the
# ffmpeg child's own CPU is not in it). Modes: `alone`, each source decoding into memory of its
# own (no consumer: the decoder's speed); `null`, each into a `null` sink (cpu domain, so each
# frame is also copied to host memory). The table goes to stdout and to
# $OUT/bench-decode-DEVICE.md (or ./results/).
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=${HOST:-$here/bin/gpuipc-host}
clips=${BENCH_CLIPS:-$here/video/bench}
device=${DEVICE:-cuda}
counts=${COUNTS:-1 2 4 8}
modes=${MODES:-alone null}
isolations=${ISOLATIONS:-auto}
results=${OUT:-$here/results}
work_root=${WORK:-$here/work}
mkdir -p "$results" "$work_root/decode"
table=$results/bench-decode-$device.md
pipeline=$here/video-pipeline.sh
export GPUIPC_KERNEL_CACHE=$here/kernel-cache

{
    echo "| clip | mode | isolation | sources | frames/s (sum) | frames/s per source | decoder utilisation (mean, busiest) | host CPU per source |"
    echo "|---|---|---|---|---|---|---|---|"
} > "$table"
for clip in "$clips"/*.mp4; do
    name=$(basename "$clip" .mp4)
    # A few seconds of one NVDEC engine's work per run, shared by the sources; the cpu
    # decoder gets fewer frames.
    case $name in *2160p*) total=600 ;; *) total=1600 ;; esac
    [ "$device" = cpu ] && total=$((total / 8))
    for mode in $modes; do
        for isolation in $isolations; do
            for n in $counts; do
                work=$work_root/decode/$name-$mode-$isolation-$n
                rm -rf "$work" && mkdir -p "$work"
                args=()
                for _ in $(seq 1 "$n"); do args+=("$clip"); done
                no_sink=0
                [ "$mode" = alone ] && no_sink=1
                iso=$isolation
                [ "$iso" = auto ] && iso=""
                EXTRA=', loop = true' NO_SINK=$no_sink ISOLATION=$iso bash "$pipeline" "${args[@]}" > "$work/p.toml"
                frames=$(( (total + n - 1) / n ))
                util_log=$work/util.csv
                smi=""
                if command -v nvidia-smi >/dev/null && [ "$device" != cpu ]; then
                    nvidia-smi --query-gpu=utilization.decoder --format=csv,noheader,nounits -lms 100 > "$util_log" 2>/dev/null &
                    smi=$!
                fi
                (cd "$work" && "$host" run p.toml --device "$device" --frames "$frames" --quiet --report report.json > run.txt 2> err.txt) ||
                    { echo "FAILED: $name $mode $isolation x $n"; tail -5 "$work/err.txt" "$work/run.txt"; }
                [ -n "$smi" ] && kill "$smi" 2>/dev/null && wait "$smi" 2>/dev/null
                python3 - "$work/report.json" "$util_log" "$name" "$mode" "$isolation" "$n" >> "$table" <<'PY'
import json, sys, os
report, util_log, name, mode, isolation, n = sys.argv[1:7]
n = int(n)
stages = [s for s in json.load(open(report))["stages"] if s["name"].startswith("decode")]
fps = sum(s["fps"] for s in stages)
cpu = sum(s["cpu"] for s in stages) / len(stages)
util = "n/a"
if os.path.exists(util_log):
    samples = [float(l) for l in (l.split(",")[0].strip() for l in open(util_log)) if l.replace(".", "").isdigit()]
    # The busy part of the run: the samples above 0 (it starts and ends idle).
    busy = [x for x in samples if x > 0]
    if busy:
        util = f"{sum(busy) / len(busy):.0f} %, {max(busy):.0f} %"
print(f"| {name} | {mode} | {isolation} | {n} | {fps:,.0f} | {fps / n:,.0f} | {util} | {cpu * 100:.0f} % |")
PY
            done
        done
    done
done
cat "$table"
