#!/usr/bin/env bash
# Many cameras: N rtsp sources in one pipeline, each into a null sink, for N in $COUNTS. Prints
# per N whether every stream kept its rate, the decoder use (nvidia-smi, cuda domain), the host's
# CPU, the server's CPU (100 %: one core) and the latency (p50/p99, ms) from a frame's arrival to
# its sink's end. Runs from a bundle made by scripts/gpu-check.sh (bin/gpuipc-host, its
# rtsp-file-server.py and video/rtsp/h264-1080p.h264) or from a checkout:
#
#   bench-rtsp.sh                         N = 1 4 16 32, 30 frames/s, cuda, the bundle's 1080p stream
#   COUNTS="1 2" DEVICE=cpu SECONDS_EACH=3 STREAM=clip.h264 scripts/bench-rtsp.sh     smoke test
#   RTSP_URL=rtsp://server:8554 bench-rtsp.sh     an external server serving /cam0, /cam1, ...
#
# The streams come from rtsp-file-server.py (Python's standard library only: no GStreamer, no
# encoder, so the host CPU is the pipeline's and the server's sending), serving STREAM (an H.264
# or HEVC elementary stream without B-frames) looped at RATE on /cam0 .. /camN-1. STREAM
# defaults to the bundle's video/rtsp/h264-1080p.h264; in a checkout without it, one is made
# with ffmpeg (SIZE, 1920x1080 by default, 8 Mb/s). SERVER=gst serves GStreamer's encoded test
# patterns instead (scripts/rtsp-test-server.py, checkout only). The host: $GPUIPC_HOST, else the
# bundle's bin/gpuipc-host, else target/release/gpuipc-host, else target/debug/gpuipc-host.
set -euo pipefail
cd "$(dirname "$0")"
here=$PWD
if [ -x "$here/bin/gpuipc-host" ]; then
    root=$here
    server_script=$here/rtsp-file-server.py
else
    root=$(cd .. && pwd)
    server_script=$root/scripts/rtsp-file-server.py
fi
COUNTS=${COUNTS:-"1 4 16 32"}
SIZE=${SIZE:-1920x1080}
RATE=${RATE:-30}
DEVICE=${DEVICE:-cuda}
SECONDS_EACH=${SECONDS_EACH:-20}
SERVER=${SERVER:-file}
HOST=${GPUIPC_HOST:-}
if [ -z "$HOST" ]; then
    for h in "$root/bin/gpuipc-host" "$root/target/release/gpuipc-host" "$root/target/debug/gpuipc-host"; do
        [ -x "$h" ] && HOST=$h && break
    done
fi
[ -x "${HOST:-}" ] || { echo "bench-rtsp: no gpuipc-host (build it, or set GPUIPC_HOST)" >&2; exit 2; }
work=$(mktemp -d)
server=""
smi=""
cleanup() {
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi
    if [ -n "$smi" ]; then kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

STREAM=${STREAM:-}
if [ -z "${RTSP_URL:-}" ] && [ "$SERVER" = file ] && [ -z "$STREAM" ]; then
    STREAM=$root/video/rtsp/h264-1080p.h264
    if [ ! -e "$STREAM" ]; then
        command -v ffmpeg >/dev/null || { echo "bench-rtsp: no $STREAM and no ffmpeg to make one: give STREAM" >&2; exit 2; }
        STREAM=$work/stream.h264
        ffmpeg -hide_banner -loglevel error -nostdin -y -f lavfi -i "testsrc2=size=$SIZE:rate=$RATE" \
            -frames:v $((RATE * 10)) -c:v libx264 -preset veryfast -bf 0 -g "$RATE" -b:v 8M -pix_fmt yuv420p \
            -f h264 "$STREAM"
    fi
fi
# The stream's size, for the table.
if [ -n "$STREAM" ] && command -v ffprobe >/dev/null; then
    SIZE=$(ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=s=x:p=0 "$STREAM")
fi

cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
# A process's CPU time in clock ticks (user + system).
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
hz=$(getconf CLK_TCK)

printf '%4s %-10s %8s %9s %9s %9s %8s %9s %8s %8s\n' N size "min fps" "all kept" dropped "dec %" "cpu %" "server %" "p50 ms" "p99 ms"
for n in $COUNTS; do
    base=${RTSP_URL:-}
    if [ -z "$base" ]; then
        if [ "$SERVER" = gst ]; then
            "${GPUIPC_RTSP_PYTHON:-/usr/bin/python3}" "$root/scripts/rtsp-test-server.py" --port 0 --mounts "$n" \
                --size "$SIZE" --rate "$RATE" >"$work/server.out" 2>"$work/server.err" &
        else
            python3 "$server_script" "$STREAM" --port 0 --mounts "$n" --rate "$RATE" >"$work/server.out" 2>"$work/server.err" &
        fi
        server=$!
        for _ in $(seq 100); do grep -q '^port ' "$work/server.out" 2>/dev/null && break; sleep 0.1; done
        port=$(awk '/^port /{print $2}' "$work/server.out")
        [ -n "$port" ] || { echo "bench-rtsp: the RTSP server did not start: $(cat "$work/server.err")" >&2; exit 1; }
        base="rtsp://127.0.0.1:$port"
    fi
    frames=$((SECONDS_EACH * RATE))
    {
        printf '[pipeline]\nname = "rtsp-%s"\nframes = %s\ndevice = "%s"\n' "$n" "$frames" "$DEVICE"
        for ((k = 0; k < n; k++)); do
            printf '\n[[stage]]\nname = "cam%s"\nplugin = "rtsp"\nparams = { url = "%s/cam%s" }\n' "$k" "$base" "$k"
            printf '\n[[stage]]\nname = "sink%s"\nplugin = "null"\ninputs = ["cam%s"]\n' "$k" "$k"
        done
    } >"$work/p.toml"
    if [ "$DEVICE" != cpu ] && command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=utilization.decoder --format=csv,noheader,nounits -lms 200 >"$work/dec.txt" 2>/dev/null &
        smi=$!
    fi
    read -r busy0 all0 < <(cpu_ticks)
    s0=0
    [ -n "$server" ] && s0=$(proc_ticks "$server")
    t0=$(date +%s.%N)
    "$HOST" run "$work/p.toml" --quiet --report "$work/report.json" >"$work/run.out" 2>&1 || {
        echo "bench-rtsp: N=$n failed:" >&2
        tail -20 "$work/run.out" >&2
        exit 1
    }
    t1=$(date +%s.%N)
    read -r busy1 all1 < <(cpu_ticks)
    srv="-"
    [ -n "$server" ] && srv=$(awk -v a="$s0" -v b="$(proc_ticks "$server")" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.0f", 100 * (b - a) / hz / (t1 - t0)}')
    if [ -n "$smi" ]; then kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null || true; smi=""; fi
    dec="-"
    [ -s "$work/dec.txt" ] && dec=$(awk '{s+=$1; n++} END {if (n) printf "%.0f", s/n}' "$work/dec.txt")
    cpu=$(awk -v b="$((busy1 - busy0))" -v a="$((all1 - all0))" 'BEGIN {if (a) printf "%.0f", 100*b/a}')
    python3 - "$work/report.json" "$n" "$SIZE" "$RATE" "$dec" "$cpu" "$srv" <<'PY'
import json, sys
report, n, size, rate, dec, cpu, srv = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
stages = json.load(open(report))["stages"]
cams = [s for s in stages if s["plugin"] == "rtsp"]
sinks = [s for s in stages if s["name"].startswith("sink")]
min_fps = min(s["fps"] for s in cams)
dropped = sum(s["dropped"] for s in cams)
kept = "yes" if dropped == 0 and min_fps >= 0.95 * rate else "no"
lat = [s["latency"] for s in sinks if s.get("latency")]
p50 = max(l["p50_ms"] for l in lat) if lat else float("nan")
p99 = max(l["p99_ms"] for l in lat) if lat else float("nan")
print(f"{n:4d} {size:<10s} {min_fps:8.1f} {kept:>9s} {dropped:9d} {dec:>9s} {cpu:>8s} {srv:>9s} {p50:8.1f} {p99:8.1f}")
PY
    if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; server=""; fi
done
