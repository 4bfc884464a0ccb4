#!/usr/bin/env bash
# The benchmark table of docs/benchmarks.md, run from a bundle made by scripts/gpu-check.sh on a
# machine with an NVIDIA GPU (copy the bundle there, run BUNDLE_DIR/bench.sh). Each row is one
# `gpuipc-host bench` call (one process on one context against separate processes, back to
# back on the same frames) or N runs started at once; JSON of each lands under $OUT (or
# BUNDLE_DIR/results), and a summary table is printed at the end.
#
#   bench.sh [FRAMES]        (default 3000 frames per measured run)
set -uo pipefail
cd "$(dirname "$0")"
here=$PWD
host=$here/bin/gpuipc-host
results=${OUT:-$here/results}/bench
mkdir -p "$results" "$here/work/bench"
frames=${1:-3000}
export GPUIPC_KERNEL_CACHE=$here/kernel-cache
# sized, chain (the pipelines) and find_nvrtc
. "$here/lib-bench.sh"
find_nvrtc
work=$here/work/bench
echo "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores"
echo "commit: $(cat "$here/COMMIT" 2>/dev/null || echo unknown)"

# fanout N: one 1080p generator read by N rgb-process stages.
fanout() {
    {
        printf '[pipeline]\nname = "fanout-%s"\n\n[[stage]]\nname = "gen"\nplugin = "generator"\nparams = { width = 1920, height = 1080, pattern = "bars" }\n' "$1"
        for i in $(seq 1 "$1"); do
            printf '\n[[stage]]\nname = "c%s"\nplugin = "rgb-process"\ninputs = ["gen"]\n' "$i"
        done
    } > "$work/fanout-$1.toml"
    echo "$work/fanout-$1.toml"
}

bench() {  # LABEL FRAMES FILE ARGS...
    local label=$1 n=$2 file=$3
    shift 3
    echo; echo "== $label"
    (cd "$work" && "$host" bench "$file" --device cuda --frames "$n" --latency-frames 3000 --json "$results/$label.json" "$@" 2> "$work/$label.err") ||
        { echo "FAILED: $label"; tail -20 "$work/$label.err"; }
}

bench 4k-mps $(( frames * 3 )) "$(sized 3840 2160)" --isolation mps
bench 4k-mps-spin20 $(( frames * 3 )) "$(sized 3840 2160)" --isolation mps --spin-us 20
bench 4k-process "$frames" "$(sized 3840 2160)" --isolation process
bench 4k-process-spin20 "$frames" "$(sized 3840 2160)" --isolation process --spin-us 20
bench 1080p-mps $(( frames * 3 )) "$(sized 1920 1080)" --isolation mps
bench 1080p-mps-spin20 $(( frames * 3 )) "$(sized 1920 1080)" --isolation mps --spin-us 20
bench 1080p-process "$frames" "$(sized 1920 1080)" --isolation process
# Every stage spinning through the 1 ms gaps of the latency runs instead of sleeping: the
# latency a core per stage buys.
bench 1080p-mps-spin1500 $(( frames * 3 )) "$(sized 1920 1080)" --isolation mps --spin-us 1500
bench 720p-mps $(( frames * 3 )) "$(sized 1280 720)" --isolation mps
bench 256-mps $(( frames * 3 )) "$(sized 256 256)" --isolation mps
bench 8k-mps "$frames" "$(sized 7680 4320)" --isolation mps
bench chain8-mps $(( frames * 3 )) "$(chain 8)" --isolation mps
bench fanout4-mps $(( frames * 3 )) "$(fanout 4)" --isolation mps

# N runs started at once, each with the file's defaults (isolation auto, one MPS daemon shared
# by the runs): summed frames/s. `-private` rows give each run a daemon of its own.
concurrent() {  # N W H SCOPE
    local n=$1 file label
    file=$(sized "$2" "$3")
    label="concurrent-$n-$2x$3"
    if [ "$4" = private ]; then
        label="$label-private"
        sed 's/^\[pipeline\]$/[pipeline]\nmps = "private"/' "$file" > "$work/$label.toml"
        file=$work/$label.toml
    fi
    pids=()
    for i in $(seq 1 "$n"); do
        (cd "$work" && "$host" run "$file" --device cuda --frames "$frames" --quiet --report "$results/$label-$i.json" > /dev/null 2> "$work/$label-$i.err") &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || echo "FAILED: $label (see $work/$label-*.err)"; done
    echo; echo "== $label"
    python3 - "$results" "$label" "$n" <<'PY'
import json, sys
results, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rates = []
for i in range(1, n + 1):
    report = json.load(open(f"{results}/{label}-{i}.json"))
    rates.append(min(s["fps"] for s in report["stages"]))
print(f"{n} runs at once: " + " + ".join(f"{r:,.0f}" for r in rates) + f" = {sum(rates):,.0f} frames/s")
json.dump({"runs": n, "frames_per_s": rates, "sum": sum(rates)}, open(f"{results}/{label}.json", "w"))
PY
}
for size in "3840 2160" "1920 1080"; do
    for n in 2 4 8; do concurrent "$n" $size shared; done
    concurrent 2 $size private
done

echo; echo "== summary"
python3 - "$results" <<'PY'
import glob, json, os, sys
results = sys.argv[1]
one = {}
print(f"{'case':24} {'one process':>12} {'separate':>12} {'ratio':>7} {'rounds':>12} {'lat p50/p99 µs (1-proc | sep)':>34} {'hop p50/p99 µs':>15} {'cpu sum':>8}")
for path in sorted(glob.glob(f"{results}/*.json")):
    name = os.path.basename(path)[:-5]
    r = json.load(open(path))
    if "in_process" not in r:
        continue
    one[name] = r["in_process"]["frames_per_s"]
    a, b = r["in_process"].get("latency_us"), r["separate"].get("latency_us")
    lat = f"{a[0]:.0f}/{a[1]:.0f} | {b[0]:.0f}/{b[1]:.0f}" if a and b else "-"
    hop = r.get("added_latency_per_hop_us")
    hop = f"{hop[0]:.1f}/{hop[1]:.1f}" if hop else "-"
    rounds = "/".join(f"{x['separate_frames_per_s'] / x['in_process_frames_per_s'] * 100:.0f}" for x in r.get("rounds", []))
    cpu = sum(s["cpu_separate"] for s in r["stages"])
    same = "" if not r["outputs_differ"] else "  OUTPUTS DIFFER"
    print(f"{name:24} {r['in_process']['frames_per_s']:>12,.0f} {r['separate']['frames_per_s']:>12,.0f} {r['ratio']*100:>6.1f}% {rounds:>12} {lat:>34} {hop:>15} {cpu*100:>7.0f}%{same}")
for path in sorted(glob.glob(f"{results}/concurrent-*.json")):
    name = os.path.basename(path)[:-5]
    parts = name.split("-")
    if len(parts) < 3 or not parts[1].isdigit() or (len(parts) == 4 and parts[3] != "private") or len(parts) > 4:
        continue
    r = json.load(open(path))
    size = name.split("-")[2]
    ref = one.get("4k-mps" if size == "3840x2160" else "1080p-mps")
    share = f"{r['sum'] / ref * 100:.0f}% of one process" if ref else ""
    print(f"{name:24} {r['sum']:>12,.0f} summed over {r['runs']} runs  {share}")
PY
