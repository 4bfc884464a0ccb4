#!/usr/bin/env bash
# Small frames against iceoryx2 (docs/benchmarks.md, "Small frames against iceoryx2"): a
# two-stage cpu pipeline of 64-byte frames (pipelines/small-frames.toml: an 8x8 gray8
# generator -> null, one ring of 4 slots) against iceoryx2's publish-subscribe of a 64-byte
# payload between two processes (host/peer-bench/iceoryx2, subscriber buffer of 4, the publisher
# blocked when it is full), side by side, rounds interleaved. Each mode waits the same way on
# both sides:
#
#   spin     every wait polls, never sleeps (gpuipc --spin-us 10000000; iceoryx2 polls
#            `receive`, notifies nothing)
#   sleep    poll 20 µs, then sleep until woken (gpuipc's cpu default: --spin-us 20, then the
#            ring's futex; iceoryx2: `receive` 20 µs, then a listener the publisher notifies
#            after every send)
#   parked   sleep at once (--spin-us 0 on both sides)
#
# Per mode and round: frames/s over FRAMES frames at full speed (gpuipc: the sink's rate from
# `run --report`; iceoryx2: the subscriber's, first sample to last), and the latency of a
# frame with the source paced at FPS (gpuipc: `bench`'s separate processes, stamp at the
# source to the end of the sink's work; iceoryx2: stamp before the payload is written to its
# receipt; same clock). No frame may be lost on either side (checked).
#
#   scripts/bench-small-frames.sh [FRAMES] [ROUNDS]   here: builds both in release first
#   BUNDLE_DIR/bench-small-frames.sh [FRAMES] [ROUNDS] in a bundle of scripts/gpu-check.sh
#
#   MODES="spin sleep parked"   which modes (default all three)
#   FPS=1000 LATENCY_FRAMES=3000   the paced latency runs (LATENCY_FRAMES=0: none)
#   TASKSET="taskset -c 2,3"    a prefix for every run (e.g. pinning to two cores; on a shared
#                               machine, "nice -n -15" keeps other work from preempting a spin)
#   IDLE=PCT                    before each mode of each round, wait (up to a minute) until the
#                               cores are under PCT % busy: a machine shared with builds
#   BEFORE=DIR                  also run the gpuipc-host in DIR (its plugins beside it: the
#                               binaries of target/release copied from another commit's build),
#                               in the same rounds, as rows "before": a change and what it
#                               changed, against the same iceoryx2 runs
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
frames=${1:-300000}
rounds=${2:-3}
fps=${FPS:-1000}
latency_frames=${LATENCY_FRAMES:-3000}
modes=${MODES:-spin sleep parked}
if [ -x "$here/bin/gpuipc-host" ]; then
    # A bundle of scripts/gpu-check.sh.
    host=$here/bin/gpuipc-host
    peer=$here/bin/iox2-small
    pipeline=$here/pipelines/small-frames.toml
    [ -x "$peer" ] || peer=""
else
    cd ..
    cargo build --release --locked --quiet -p gpuipc-host -p gpuipc-generator -p gpuipc-null
    host=$PWD/target/release/gpuipc-host
    pipeline=$PWD/pipelines/small-frames.toml
    peer=$PWD/host/peer-bench/iceoryx2/target/release/iox2-small
    # Its own target folder, whatever CARGO_TARGET_DIR says (another lock file).
    if ! (cd host/peer-bench/iceoryx2 && env -u CARGO_TARGET_DIR cargo build --release --locked --quiet); then
        echo "iceoryx2 peer: the build failed (no network?); trying offline, from the local registry cache"
        (cd host/peer-bench/iceoryx2 && env -u CARGO_TARGET_DIR cargo build --release --locked --offline --quiet) || peer=""
    fi
fi
[ -n "$peer" ] || echo "iceoryx2 peer: not built: only gpuipc's rows, no ratio"
before=${BEFORE:-}
if [ -n "$before" ]; then
    before=$(cd "$before" && pwd)/gpuipc-host
    [ -x "$before" ] || { echo "BEFORE: no gpuipc-host in ${BEFORE}"; exit 1; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=$work/rows.tsv

echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); commit $(cat "$here/COMMIT" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "frames: $frames a run, $rounds rounds; latency: $latency_frames frames paced at $fps frames/s"

spin_of() {
    case $1 in
        spin) echo 10000000 ;;
        sleep) echo 20 ;;
        parked) echo 0 ;;
        *) echo "unknown mode $1" >&2; return 1 ;;
    esac
}

ours() {  # MODE ROUND [SIDE HOST]: SIDE "gpuipc" (this build) or "before" (BEFORE's)
    local spin side=${3:-gpuipc} host=${4:-$host}
    spin=$(spin_of "$1")
    ${TASKSET:-} "$host" run "$pipeline" --device cpu --quiet --frames "$frames" --spin-us "$spin" --report "$work/run.json" > /dev/null 2> "$work/run.err" ||
        { echo "FAILED: gpuipc run, $1"; tail -5 "$work/run.err"; return 0; }
    python3 - "$work/run.json" "$1" "$2" "$frames" "$side" >> "$rows" <<'PY'
import json, sys
sink = next(s for s in json.load(open(sys.argv[1]))["stages"] if s["name"] == "sink")
lost = int(sys.argv[4]) - sink["frames"] + sink["dropped"]
print(f"{sys.argv[5]}\t{sys.argv[2]}\t{sys.argv[3]}\tfps\t{sink['fps']:.1f}\t{lost}")
PY
    if [ "$latency_frames" -gt 0 ]; then
        (cd "$work" && ${TASKSET:-} "$host" bench "$pipeline" --device cpu --frames 2000 --warmup 100 --rounds 1 --check-frames 10 \
            --latency-frames "$latency_frames" --fps "$fps" --spin-us "$spin" --json "$work/bench.json" > "$work/bench.out" 2>&1) ||
            { echo "FAILED: gpuipc bench, $1"; tail -5 "$work/bench.out"; return 0; }
        python3 - "$work/bench.json" "$1" "$2" "$side" >> "$rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p50, p99, _ = r["separate"]["latency_us"]
print(f"{sys.argv[4]}\t{sys.argv[2]}\t{sys.argv[3]}\tlatency\t{p50:.2f}\t{p99:.2f}")
PY
    fi
}

theirs() {  # MODE ROUND
    [ -n "$peer" ] || return 0
    local spin
    spin=$(spin_of "$1")
    ${TASKSET:-} "$peer" pair --frames "$frames" --spin-us "$spin" --depth 4 > "$work/peer.json"
    python3 - "$work/peer.json" "$1" "$2" >> "$rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"iceoryx2\t{sys.argv[2]}\t{sys.argv[3]}\tfps\t{r['frames_per_s']:.1f}\t{r['lost']}")
PY
    if [ "$latency_frames" -gt 0 ]; then
        ${TASKSET:-} "$peer" pair --frames "$latency_frames" --spin-us "$spin" --depth 4 --fps "$fps" > "$work/peer.json"
        python3 - "$work/peer.json" "$1" "$2" >> "$rows" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p50, p99, _ = r["latency_us"]
print(f"iceoryx2\t{sys.argv[2]}\t{sys.argv[3]}\tlatency\t{p50:.2f}\t{p99:.2f}")
PY
    fi
}

# Percent of the cores busy over one second.
busy() {
    local a b
    read -r -a a < /proc/stat; sleep 1; read -r -a b < /proc/stat
    local total=0 k
    for k in 1 2 3 4 5 6 7 8; do total=$(( total + b[k] - a[k] )); done
    echo $(( 100 * (total - (b[4] - a[4]) - (b[5] - a[5])) / (total > 0 ? total : 1) ))
}

for round in $(seq "$rounds"); do
    for mode in $modes; do
        if [ -n "${IDLE:-}" ]; then
            for _ in $(seq 60); do [ "$(busy)" -lt "$IDLE" ] && break; done
        fi
        # Who goes first alternates, so a drift of the machine reaches both (with BEFORE: all
        # three, in rotation).
        if [ -n "$before" ]; then
            case $((round % 3)) in
                1) ours "$mode" "$round"; ours "$mode" "$round" before "$before"; theirs "$mode" "$round" ;;
                2) ours "$mode" "$round" before "$before"; theirs "$mode" "$round"; ours "$mode" "$round" ;;
                0) theirs "$mode" "$round"; ours "$mode" "$round"; ours "$mode" "$round" before "$before" ;;
            esac
        elif [ $((round % 2)) -eq 1 ]; then ours "$mode" "$round"; theirs "$mode" "$round"
        else theirs "$mode" "$round"; ours "$mode" "$round"; fi
    done
done

python3 - "$rows" "$modes" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
modes = sys.argv[2].split()
def get(side, mode, kind):
    return {int(r[2]): (float(r[4]), float(r[5])) for r in rows if r[0] == side and r[1] == mode and r[3] == kind}
lost = [r for r in rows if r[3] == "fps" and float(r[5]) != 0]
sides = ["gpuipc"] + (["before"] if any(r[0] == "before" for r in rows) else [])
def fmt(d):
    if not d:
        return "-"
    return f"{statistics.median(v[0] for v in d.values()):>11,.0f} ({', '.join(f'{d[k][0]:,.0f}' for k in sorted(d))})"
def ratio(ours, theirs):
    ratios = [ours[k][0] / theirs[k][0] for k in sorted(ours) if k in theirs and theirs[k][0] > 0]
    return f"{statistics.median(ratios) * 100:.0f} % ({', '.join(f'{x * 100:.0f}' for x in ratios)})" if ratios else "-"
for side in sides:
    label = "gpuipc" if side == "gpuipc" else "gpuipc before (BEFORE)"
    print(f"\n{'mode':7} {label + ' frames/s (rounds)':>40} {'iceoryx2 frames/s (rounds)':>40} {'ratio (rounds)':>24}")
    for mode in modes:
        ours, theirs = get(side, mode, "fps"), get("iceoryx2", mode, "fps")
        print(f"{mode:7} {fmt(ours):>40} {fmt(theirs):>40} {ratio(ours, theirs):>24}")
if len(sides) > 1:
    print(f"\n{'mode':7} {'gpuipc / before, frames/s (rounds)':>40}")
    for mode in modes:
        print(f"{mode:7} {ratio(get('gpuipc', mode, 'fps'), get('before', mode, 'fps')):>40}")
lat = {(side, m): get(side, m, "latency") for side in sides + ["iceoryx2"] for m in modes}
if any(lat[("gpuipc", m)] for m in modes):
    print(f"\nlatency, µs, median of the rounds' p50 / p99 (source paced)")
    print(f"{'mode':7} " + " ".join(f"{s:>16}" for s in sides + ["iceoryx2"]))
    for mode in modes:
        def cell(d):
            return f"{statistics.median(v[0] for v in d.values()):.1f} / {statistics.median(v[1] for v in d.values()):.1f}" if d else "-"
        print(f"{mode:7} " + " ".join(f"{cell(lat[(s, mode)]):>16}" for s in sides + ["iceoryx2"]))
if lost:
    print("\nLOST FRAMES:", lost)
    sys.exit(1)
PY
