#!/usr/bin/env bash
# Speed of the cpu domain at 1920x1080, in one run on this machine: the yuv420 stage
# converting rgb8 to i420, rgb-process and the generator, each with threads = 1 and with the
# default (0: a share of the cores), and ffmpeg's swscale doing the same rgb24 to yuv420p
# conversion on one thread.
#
#   scripts/bench-cpu.sh [FRAMES]      (default 300)
#
# Each pipeline runs as separate processes (`gpuipc-host run --device cpu`), one stage a
# process; a stage's "ms/frame" is its own work, the time in its plugin's process call
# (busy / fps from the run's report), and "fps" is the run's rate, which the slowest stage
# sets. The filters are fed colour bars, the cheapest pattern, so that their source takes
# little of the machine (their speed does not depend on the picture).
#
# ffmpeg is used if it is on PATH (Debian: apt-get install -y ffmpeg); this script installs
# nothing. It reads a raw rgb24 file of 30 frames (looped to FRAMES) with -threads 1 and
# -filter_threads 1, and is timed twice with -benchmark: converting to yuv420p, and passing
# rgb24 through (reading and the rest of ffmpeg); the difference is swscale's conversion.
# (swscale's default is BT.601 limited range with its own rounding: the same work, not the
# same bytes.)
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-300}
width=1920
height=1080
cargo build --workspace --release --locked --quiet
host=target/release/gpuipc-host
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "machine: $(nproc) cores, $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "frames: $frames of ${width}x${height} a run"
echo

# stage NAME PLUGIN PARAMS [INPUT]: one [[stage]] table (its newlines first: $(...) drops
# the last ones).
stage() {
    printf '\n[[stage]]\nname = "%s"\nplugin = "%s"\n' "$1" "$2"
    if [ -n "${4:-}" ]; then printf 'inputs = ["%s"]\n' "$4"; fi
    printf 'params = { %s }' "$3"
}

# measure LABEL STAGE THREADS PIPELINE-TEXT: run it, print the row of stage STAGE.
measure() {
    local label=$1 name=$2 threads=$3
    printf '[pipeline]\nname = "bench-cpu"\n%s\n' "$4" > "$work/p.toml"
    GPUIPC_LOG=warn "$host" run "$work/p.toml" --device cpu --quiet --frames "$frames" \
        --report "$work/r.json" > /dev/null
    python3 - "$work/r.json" "$name" "$label" "$threads" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
s = next(s for s in report["stages"] if s["name"] == sys.argv[2])
threads = "default" if sys.argv[4] == "0" else sys.argv[4]
ms = 1e3 * s["busy"] / s["fps"] if s["fps"] > 0 else float("nan")
print(f"{sys.argv[3]:38} {threads:>8} {s['frames']:>7} {s['fps']:>9.1f} {ms:>9.2f} {100 * s['busy']:>6.1f}%")
PY
}

size="width = $width, height = $height"
printf '%-38s %8s %7s %9s %9s %7s\n' "stage" "threads" "frames" "fps" "ms/frame" "busy"
for threads in 1 0; do
    measure "yuv420 rgb8 -> i420 (bt709 limited)" yuv "$threads" \
        "$(stage gen generator "$size")$(stage yuv yuv420 "layout = \"i420\", threads = $threads" gen)"
done
for threads in 1 0; do
    measure "yuv420 rgb8 -> nv12 (bt601 full)" yuv "$threads" \
        "$(stage gen generator "$size")$(stage yuv yuv420 "matrix = \"bt601\", range = \"full\", layout = \"nv12\", threads = $threads" gen)"
done
for threads in 1 0; do
    measure "rgb-process rgb8 (contrast, gamma)" grade "$threads" \
        "$(stage gen generator "$size")$(stage grade rgb-process "contrast = 1.2, gamma = 2.2, threads = $threads" gen)"
done
for pattern in bars gradient noise box; do
    for threads in 1 0; do
        measure "generator $pattern rgb8" gen "$threads" \
            "$(stage gen generator "$size, pattern = \"$pattern\", threads = $threads")$(stage sink null "" gen)"
    done
done

echo
if ! command -v ffmpeg > /dev/null; then
    echo "ffmpeg: not found, so no swscale numbers (Debian: apt-get install -y ffmpeg)"
    exit 0
fi
echo "ffmpeg: $(ffmpeg -hide_banner -version | head -1)"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=${width}x${height}:rate=30" \
    -frames:v 30 -pix_fmt rgb24 -f rawvideo "$work/in.rgb"
# swscale OUT-PIX-FMT: seconds of wall time (rtime) for FRAMES frames, one thread.
swscale() {
    ffmpeg -hide_banner -nostdin -benchmark -threads 1 -filter_threads 1 \
        -stream_loop -1 -f rawvideo -pix_fmt rgb24 -s "${width}x${height}" -i "$work/in.rgb" \
        -frames:v "$frames" -pix_fmt "$1" -f null - 2>&1 |
        sed -n 's/^bench: utime=.* rtime=\([0-9.]*\)s$/\1/p'
}
convert=$(swscale yuv420p)
read_only=$(swscale rgb24)
python3 - "$frames" "$convert" "$read_only" <<'PY'
import sys
frames, convert, read_only = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
ms = lambda seconds: 1e3 * seconds / frames
print(f"{'ffmpeg rgb24 -> yuv420p, 1 thread':38} {'1':>8} {frames:>7} {frames / convert:>9.1f} {ms(convert):>9.2f}   (reading included)")
print(f"{'ffmpeg rgb24 -> rgb24 (no conversion)':38} {'1':>8} {frames:>7} {frames / read_only:>9.1f} {ms(read_only):>9.2f}")
print(f"{'swscale conversion alone (difference)':38} {'1':>8} {frames:>7} {'':>9} {ms(convert - read_only):>9.2f}")
PY
